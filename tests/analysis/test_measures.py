"""Rollout, value-weighted contributions and sink mass, each against an independent computation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnx.analysis.heads import head_stats
from attnx.analysis.measures import head_measures, rollout, value_contributions, value_shares
from attnx.core.spec import AttentionSpec, Linear
from attnx.engines import compute
from attnx.engines.placement import Placement
from attnx.models import open_model
from attnx.workflows import rollout as model_rollout
from tests.models.checkpoints import TEXT, Reference
from tests.runner import run_attnx


def by_hand(attentions: list[np.ndarray]) -> np.ndarray:
    """Abnar & Zuidema's rollout written out: per layer (heads' mean + I) / 2, rows renormalised, multiplied."""
    total = None
    out = []
    for layer in attentions:
        a = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(layer.shape[-1])
        a = a / a.sum(axis=-1, keepdims=True)
        total = a if total is None else a @ total
        out.append(total)
    return np.stack(out)


class TestRollout:
    """Rollout of a model's layers."""

    def test_matches_transformers_attentions(self, gpt2: Reference) -> None:
        """On the tiny GPT-2: attnx's rollout equals one made by hand from transformers' output_attentions."""
        with open_model(gpt2.path, "float64") as model:
            found = model_rollout(model, TEXT)
        expected = by_hand([a.astype(np.float64) for a in gpt2.attentions])
        assert found.layers.shape == expected.shape == (3, len(gpt2.ids), len(gpt2.ids))
        np.testing.assert_allclose(found.layers, expected, atol=1e-6)

    def test_causal_stays_causal_and_rows_sum_to_one(self, gpt2: Reference) -> None:
        with open_model(gpt2.path) as model:
            found = model_rollout(model, TEXT)
        assert np.all(np.triu(found.final, 1) == 0)
        np.testing.assert_allclose(found.final.sum(axis=1), 1.0, atol=1e-12)

    def test_one_layer_of_uniform_weights(self) -> None:
        """Uniform weights over 4 keys: each row is 1/8 everywhere plus 1/2 on the diagonal."""
        found = rollout([np.full((4, 4), 0.25)], ("a", "b", "c", "d"))
        np.testing.assert_allclose(found.final, np.full((4, 4), 0.125) + 0.5 * np.eye(4))


class TestValueWeighted:
    """‖α_ij · v_j W_O^h‖ against the same product written out from the spec's own matrices."""

    def test_by_hand(self) -> None:
        rng = np.random.default_rng(4)
        x = rng.standard_normal((5, 6))
        w_q, w_k, w_v = (Linear.of(rng.standard_normal((6, 6)), rng.standard_normal(6)) for _ in range(3))
        w_o = Linear.of(rng.standard_normal((6, 3)))
        tokens = tuple("abcde")
        spec = AttentionSpec.build(x=x, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, heads=2, tokens=tokens, key_tokens=tokens)
        result = compute(spec)
        found = value_contributions(result, w_o.weight)
        v = x @ w_v.weight + w_v.bias  # (5, 6): head 0 reads columns 0-2, head 1 columns 3-5
        for h, cols in ((0, slice(0, 3)), (1, slice(3, 6))):
            for i in range(5):
                for j in range(5):
                    contribution = result.weights[h, i, j] * v[j, cols] @ w_o.weight[cols]
                    assert found[h, i, j] == pytest.approx(np.linalg.norm(contribution), rel=1e-12)
        without = value_contributions(result)
        assert without[1, 2, 3] == pytest.approx(result.weights[1, 2, 3] * np.linalg.norm(v[3, 3:]), rel=1e-12)


class TestValueShares:
    """Each key's share of ‖α·v·W_O‖ in its row, as `heads --value-weighted` draws it."""

    def test_rows_of_shares(self) -> None:
        """Shares are the contributions divided by their row's sum: rows sum to 1, a masked key stays 0."""
        rng = np.random.default_rng(3)
        x = rng.standard_normal((4, 6))
        w_q, w_k, w_v = (Linear.of(rng.standard_normal((6, 6))) for _ in range(3))
        w_o = rng.standard_normal((6, 6))
        spec = AttentionSpec.build(x=x, w_q=w_q, w_k=w_k, w_v=w_v, heads=2, tokens=tuple("abcd"),
                                   key_tokens=tuple("abcd"), causal=True)  # fmt: skip
        result = compute(spec)
        shares = value_shares(result, w_o)
        pairs = value_contributions(result, w_o)
        np.testing.assert_allclose(shares, pairs / pairs.sum(axis=2, keepdims=True), rtol=1e-12)
        np.testing.assert_allclose(shares.sum(axis=2), 1.0, rtol=1e-12)
        assert shares[1, 0, 1] == 0.0  # query 0 cannot see key 1

    def test_command(self) -> None:
        """--value-weighted adds the shares to the JSON and their heatmaps to the view; the table view refuses it."""
        data = json.loads(
            run_attnx("heads", "configs/attention-patterns.yaml", "--value-weighted", "-f", "json").stdout
        )
        np.testing.assert_allclose(np.sum(data["value_weighted"], axis=2), 1.0, rtol=1e-12)
        shown = run_attnx("heads", "configs/attention-patterns.yaml", "--value-weighted", "--view", "heatmap").stdout
        assert "Head 4 · columns 24-29 · d_k = 6 · by value" in shown
        refused = run_attnx("heads", "--value-weighted")
        assert refused.code == 2 and "add --view heatmap" in refused.stderr


class TestHeadMeasures:
    """Sink mass, its value-weighted share, write and share, against the same sums written out."""

    def test_by_hand(self) -> None:
        rng = np.random.default_rng(7)
        x = rng.standard_normal((6, 8))
        w_q, w_k, w_v = (Linear.of(rng.standard_normal((8, 8))) for _ in range(3))
        w_o = Linear.of(rng.standard_normal((8, 8)))
        tokens = tuple("abcdef")
        spec = AttentionSpec.build(x=x, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, heads=2, tokens=tokens,
                                   key_tokens=tokens, causal=True)  # fmt: skip
        result = compute(spec)
        found = head_measures(result, w_o.weight, sinks=(0, 5))
        v = x @ w_v.weight
        writes = []
        for h, cols in ((0, slice(0, 4)), (1, slice(4, 8))):
            a = result.weights[h]
            # causal: query 0 sees key 0 alone, no choice; the sink masses are means over queries 1..5
            assert found.sink[h] == pytest.approx(np.mean(a[1:, 0] + a[1:, 5]), rel=1e-12)
            moved = v[:, cols] @ w_o.weight[cols]  # (M, d_out): what each key's value becomes
            norms = np.array([[np.linalg.norm(a[i, j] * moved[j]) for j in range(6)] for i in range(6)])
            by_value = np.mean([(norms[i, 0] + norms[i, 5]) / norms[i].sum() for i in range(1, 6)])
            assert found.sink_value[h] == pytest.approx(by_value, rel=1e-12)
            writes.append(np.mean([np.linalg.norm(a[i] @ moved) for i in range(6)]))
            assert found.write[h] == pytest.approx(writes[-1], rel=1e-12)
        np.testing.assert_allclose(found.share, np.array(writes) / max(writes), rtol=1e-12)
        assert found.sinks == (0, 5)

    def test_tiny_gpt2_layer_by_hand(self, gpt2: Reference) -> None:
        """Layer 1 of the tiny GPT-2: write and value-weighted sink mass from transformers' weights and attention
        input, and the checkpoint's own c_attn and c_proj read with safetensors, in NumPy."""
        from safetensors.numpy import load_file

        from attnx.workflows import load_model_spec

        spec = load_model_spec(gpt2.path, TEXT, 1, on=Placement(dtype="float64"))
        found = head_measures(compute(spec, dtype="float64"), spec.w_o.weight, spec.sinks)
        tensors = load_file(gpt2.path / "model.safetensors")
        w, b = tensors["transformer.h.1.attn.c_attn.weight"], tensors["transformer.h.1.attn.c_attn.bias"]
        v = gpt2.x[1].astype(np.float64) @ w[:, 64:] + b[64:]  # (N, 32): the value third
        w_o = tensors["transformer.h.1.attn.c_proj.weight"].astype(np.float64)  # (32, 32), input-major
        for h in range(4):
            a = gpt2.attentions[1][h].astype(np.float64)
            moved = v[:, 8 * h : 8 * h + 8] @ w_o[8 * h : 8 * h + 8]
            write = np.linalg.norm(a @ moved, axis=1).mean()
            norms = a * np.linalg.norm(moved, axis=1)[None, :]
            assert found.write[h] == pytest.approx(write, rel=1e-5)
            assert found.sink_value[h] == pytest.approx((norms[1:, 0] / norms[1:].sum(axis=1)).mean(), rel=1e-5)

    def test_a_sink_head_on_small_values(self) -> None:
        """Head 0 parks 0.87 of its weight on key 0, whose value is tiny, and the other values cancel: a sink
        by weight, not by value, writing almost nothing (faint when labelled); head 1 reads key 1."""
        q = np.tile([1.0, 0.0], (4, 1))
        k0 = np.array([[3.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])  # head 0: key 0 scores 3/√2
        k1 = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 0.0], [0.0, 0.0]])  # head 1: key 1
        v = np.array([[1e-3, 0.0], [1.0, 1.0], [1.0, -1.0], [-2.0, 0.0]])  # keys 1-3 sum to zero
        spec = AttentionSpec.build(q=np.hstack([q, q]), k=np.hstack([k0, k1]), v=np.hstack([v, v]), heads=2,
                                   tokens=tuple("abcd"), key_tokens=tuple("abcd"))  # fmt: skip
        result = compute(spec)
        found = head_measures(result)
        a = np.exp(3 / np.sqrt(2))
        assert found.sink[0] == pytest.approx(a / (a + 3), rel=1e-12) and found.is_sink(0)
        assert found.sink_value[0] == pytest.approx(a * 1e-3 / (a * 1e-3 + 2 * np.sqrt(2) + 2), rel=1e-9)
        assert found.write[0] == pytest.approx(a * 1e-3 / (a + 3), rel=1e-9)
        assert found.share[1] == 1.0 and found.share[0] < 0.01
        assert found.is_faint(0, "sink") and not found.is_faint(0, None) and not found.is_faint(1, "self")
        assert not found.is_sink(1)


class TestOneSinkMeasure:
    """The sink mass of what the heads write is the `sink` score that labels a head: one measure, one number."""

    def test_equals_the_label_score(self) -> None:
        """On a causal input with key 3 a sink too, head_measures and head_stats give every head the same sink."""
        rng = np.random.default_rng(3)
        q, k, v = rng.standard_normal((3, 5, 4))
        tokens = tuple("abcde")
        result = compute(AttentionSpec.build(q=q, k=k, v=v, heads=2, tokens=tokens, key_tokens=tokens, causal=True))
        sinks = head_measures(result, sinks=(0, 3)).sink
        stats = head_stats(result, (0, 3))
        assert sinks.tolist() == [s.scores["sink"] for s in stats]
        assert [s.counts["sink"] for s in stats] == [4, 4]

    def test_no_query_with_a_choice_has_no_sink_mass(self) -> None:
        """One query seeing one key has no choice: its sink masses are NaN (null in JSON), not 1."""
        found = head_measures(compute(AttentionSpec.build(q=np.ones((1, 2)), k=np.ones((1, 2)), v=np.ones((1, 2)),
                                                          heads=1, tokens=("a",), key_tokens=("a",))))  # fmt: skip
        assert np.isnan(found.sink[0]) and np.isnan(found.sink_value[0]) and not found.is_sink(0)


class TestCommand:
    """`attnx rollout`."""

    def test_json_and_table(self, gpt2: Reference) -> None:
        args = ["rollout", "--model", str(gpt2.path), "--text", TEXT]
        data = json.loads(run_attnx(*args, "--query", "3", "-f", "json").stdout)
        assert data["query"] == 3 and len(data["by_layer"]) == 3
        np.testing.assert_allclose(data["by_layer"][-1], data["rollout"][3])
        np.testing.assert_allclose(np.sum(data["rollout"], axis=1), 1.0)
        table = run_attnx(*args, "--token", "mat").stdout
        assert "Attention rollout of query" in table and "L2" in table and "keys that reach it most" in table

    def test_query_must_be_named(self, gpt2: Reference) -> None:
        out = run_attnx("rollout", "--model", str(gpt2.path), "--text", TEXT)
        assert out.code == 2 and "pick the query" in out.stderr
