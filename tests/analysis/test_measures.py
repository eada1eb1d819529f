"""Rollout, value-weighted contributions and sink mass, each against an independent computation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnx.analysis.measures import rollout, sink_mass, value_contributions
from attnx.cli.model_input import model_rollout
from attnx.core.spec import AttentionSpec, Linear
from attnx.engines import compute
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
        found = model_rollout(model=str(gpt2.path), text=TEXT, dtype="float64", quiet=True)
        expected = by_hand([a.astype(np.float64) for a in gpt2.attentions])
        assert found.layers.shape == expected.shape == (3, len(gpt2.ids), len(gpt2.ids))
        np.testing.assert_allclose(found.layers, expected, atol=1e-6)

    def test_causal_stays_causal_and_rows_sum_to_one(self, gpt2: Reference) -> None:
        found = model_rollout(model=str(gpt2.path), text=TEXT, quiet=True)
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

    def test_sink_mass(self) -> None:
        spec = AttentionSpec.build(q=np.eye(3), k=np.eye(3), v=np.eye(3), heads=1, tokens=tuple("abc"),
                                   key_tokens=tuple("abc"), causal=True)  # fmt: skip
        weights = compute(spec).weights[0]
        assert sink_mass(compute(spec))[0] == pytest.approx(weights[:, 0].mean())
        assert weights[0, 0] == 1.0


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
