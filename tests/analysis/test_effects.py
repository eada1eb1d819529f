"""Ablation on the whole model, against transformers with the heads' outputs zeroed before the output projection.

transformers 5 no longer takes ``head_mask``; it multiplied a head's weights by 0 after the softmax, which
zeroes that head's slice of the context vector going into the output projection. A forward pre-hook on the
projection (GPT-2's ``c_proj``, BERT's ``attention.output.dense``, Llama's ``o_proj``) does exactly that.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from attnx.analysis.effects import kl_divergence, log_softmax
from attnx.cli.ablate import parse_heads
from attnx.errors import ChoiceError, UsageError
from attnx.models import open_model
from attnx.workflows import check_heads
from attnx.workflows.effects import ablations
from tests.models.checkpoints import TEXT, Reference
from tests.models.decoders import DecoderReference, float64_everywhere
from tests.runner import run_attnx

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@contextlib.contextmanager
def zeroed(projections: Callable[[int], Any], drop: dict[int, tuple[int, ...]], d_head: int) -> Iterator[None]:
    """While active, the input columns of each head in ``drop`` (layer -> heads) are zero at its projection."""

    def hook(heads: tuple[int, ...]) -> Callable[..., tuple[Any, ...]]:
        def pre(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            x = args[0].clone()
            for h in heads:
                x[..., h * d_head : (h + 1) * d_head] = 0
            return (x, *args[1:])

        return pre

    handles = [projections(layer).register_forward_pre_hook(hook(heads)) for layer, heads in drop.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def expected(run: Callable[[], tuple[np.ndarray, np.ndarray | None]], zero: Callable[[dict[int, tuple[int, ...]]], Any],
             drop: dict[int, tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """The relative shift of the last hidden state and the KL per token, by transformers."""
    hidden, logp = run()
    with zero(drop):
        after, after_logp = run()
    shift = np.linalg.norm(after - hidden, axis=1) / np.linalg.norm(hidden, axis=1)
    kl = None if logp is None else (np.exp(logp) * (logp - after_logp)).sum(axis=1)
    return shift, kl


SETS = [{1: (2,)}, {0: (1,), 2: (0, 3)}]


def found_effects(path: Any, ids: list[int], sets: list[dict[int, tuple[int, ...]]]) -> Any:
    """attnx's effects of ``sets`` in float64."""
    with open_model(path, "float64") as model:
        encoded = model.encode(TEXT)
        assert encoded.ids.tolist() == ids
        heads = [tuple((layer, h) for layer, hs in drop.items() for h in hs) for drop in sets]
        return ablations(model, encoded, heads)


class TestAgainstTransformers:
    """The shift and the KL equal transformers' with the same heads zeroed, to float64 rounding."""

    def test_gpt2(self, gpt2: Reference) -> None:
        """GPT-2: ln_f's output and the tied LM head's log-probabilities; the top tokens too."""
        model = transformers.GPT2LMHeadModel.from_pretrained(gpt2.path, attn_implementation="eager",
                                                             dtype=torch.float64).eval()  # fmt: skip

        def run() -> tuple[np.ndarray, np.ndarray]:
            with torch.no_grad():
                out = model(torch.tensor([gpt2.ids]), output_hidden_states=True)
            return out.hidden_states[-1][0].numpy(), torch.log_softmax(out.logits[0], -1).numpy()

        def zero(drop: dict[int, tuple[int, ...]]) -> Any:
            return zeroed(lambda layer: model.transformer.h[layer].attn.c_proj, drop, 8)

        found = found_effects(gpt2.path, gpt2.ids, SETS)
        assert found.lm_head and not found.sweep
        for effect, drop in zip(found.effects, SETS, strict=True):
            shift, kl = expected(run, zero, drop)
            np.testing.assert_allclose(effect.shift, shift, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(effect.kl, kl, rtol=1e-8, atol=1e-12)
            with torch.no_grad():
                top = model(torch.tensor([gpt2.ids])).logits[0].argmax(-1).numpy()
            np.testing.assert_array_equal(effect.top, top)
        assert found.effects[1].mean_kl > 0.01 and found.effects[1].top_changed >= 1

    def test_bert(self, bert: Reference) -> None:
        """BERT (no LM head read): the last hidden state's shift only, KL and top tokens None."""
        model = transformers.BertModel.from_pretrained(bert.path, attn_implementation="eager",
                                                       dtype=torch.float64).eval()  # fmt: skip

        def run() -> tuple[np.ndarray, None]:
            with torch.no_grad():
                return model(torch.tensor([bert.ids])).last_hidden_state[0].numpy(), None

        def zero(drop: dict[int, tuple[int, ...]]) -> Any:
            return zeroed(lambda layer: model.encoder.layer[layer].attention.output.dense, drop, 8)

        found = found_effects(bert.path, bert.ids, SETS)
        assert not found.lm_head
        for effect, drop in zip(found.effects, SETS, strict=True):
            shift, _ = expected(run, zero, drop)
            np.testing.assert_allclose(effect.shift, shift, rtol=1e-10, atol=1e-12)
            assert effect.kl is None and effect.top is None and effect.top_changed is None

    def test_llama(self, llama: DecoderReference) -> None:
        """Llama: grouped K/V heads, the final RMSNorm and an untied lm_head outside the ``model.`` prefix."""
        model = transformers.AutoModelForCausalLM.from_pretrained(llama.path, attn_implementation="eager",
                                                                  dtype=torch.float64).eval()  # fmt: skip

        def run() -> tuple[np.ndarray, np.ndarray]:
            with float64_everywhere(), torch.no_grad():
                out = model(torch.tensor([llama.ids]), output_hidden_states=True)
            return out.hidden_states[-1][0].numpy(), torch.log_softmax(out.logits[0], -1).numpy()

        with float64_everywhere():
            model.model.rotary_emb = type(model.model.rotary_emb)(model.config)

        def zero(drop: dict[int, tuple[int, ...]]) -> Any:
            return zeroed(lambda layer: model.model.layers[layer].self_attn.o_proj, drop, 16)

        found = found_effects(llama.path, llama.ids, SETS)
        for effect, drop in zip(found.effects, SETS, strict=True):
            shift, kl = expected(run, zero, drop)
            np.testing.assert_allclose(effect.shift, shift, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(effect.kl, kl, rtol=1e-7, atol=1e-12)


class TestSweep:
    """Every head dropped alone."""

    def test_grid_holds_each_single_ablation(self, gpt2: Reference) -> None:
        """The sweep's grid cell (l, h) equals the ablation of that head asked for alone."""
        with open_model(gpt2.path, "float64") as model:
            encoded = model.encode(TEXT)
            sweep = ablations(model, encoded)
            alone = ablations(model, encoded, [((2, 1),)])
        assert sweep.sweep and len(sweep.effects) == 12
        grid = sweep.grid(lambda e: e.mean_kl)
        assert grid.shape == (3, 4) and np.isfinite(grid).all()
        assert grid[2, 1] == pytest.approx(alone.effects[0].mean_kl, rel=1e-12)


class TestPieces:
    """The KL, the log-softmax and --head parsing."""

    def test_kl_of_two_coins(self) -> None:
        """KL((½, ½) ‖ (¼, ¾)) = ½ ln 2 + ½ ln(2/3)."""
        p, q = log_softmax(np.log([[0.5, 0.5]])), log_softmax(np.log([[0.25, 0.75]]))
        assert kl_divergence(p, q)[0] == pytest.approx(0.5 * np.log(2) + 0.5 * np.log(2 / 3), rel=1e-12)
        assert kl_divergence(p, p)[0] == 0.0

    def test_parse_heads(self) -> None:
        """--head values in each spelling become (layer, head) pairs; a value that is no head is refused."""
        assert parse_heads(["L2H3", "0.1,1:0", "l2h3"]) == [(2, 3), (0, 1), (1, 0), (2, 3)]
        assert parse_heads(["L-1H0", "-2.-1"]) == [(-1, 0), (-2, -1)]  # from the end, resolved by the model
        with pytest.raises(UsageError, match="as L2H3"):
            parse_heads(["head 3"])

    def test_heads_the_model_lacks(self, gpt2: Reference) -> None:
        """workflows.check_heads keeps each head once and names one the model lacks, without naming a flag."""
        with open_model(gpt2.path) as model:
            assert check_heads(model, [(1, 2), (0, 1), (1, 2)]) == ((1, 2), (0, 1))
            assert check_heads(model, [(-1, 0), (2, 0), (0, -1), (-3, -4)]) == ((2, 0), (0, 3), (0, 0))  # -1: the last
            with pytest.raises(ChoiceError, match=r"^L9H0 does not exist: the model has layers 0\.\.2 \(or -3\.\.-1\)"):
                check_heads(model, [(9, 0)])
            with pytest.raises(ChoiceError, match=r"^L0H-5 does not exist: .* heads 0\.\.3 \(or -4\.\.-1\)$"):
                check_heads(model, [(0, -5)])


class TestCommand:
    """`attnx ablate`."""

    def test_json_of_a_set(self, gpt2: Reference) -> None:
        out = run_attnx("ablate", "--model", str(gpt2.path), "--text", TEXT, "--head", "L0H1", "--head", "2.3",
                        "-f", "json")  # fmt: skip
        data = json.loads(out.stdout)
        (effect,) = data["ablations"]
        assert data["lm_head"] is True and data["sweep"] is False
        assert effect["heads"] == [[0, 1], [2, 3]] and effect["labels"] == ["L0H1", "L2H3"]
        assert len(effect["kl"]) == len(data["tokens"]) == len(gpt2.ids)
        assert effect["mean_kl"] == pytest.approx(np.mean(effect["kl"]))
        assert effect["top_changed"] == sum(a != b for a, b in zip(effect["top"], effect["top_after"], strict=True))

    def test_sweep_table(self, bert: Reference) -> None:
        out = run_attnx("ablate", "--model", str(bert.path), "--text", TEXT, "--no-color")
        words = " ".join(out.stdout.split())  # the folder's path is as long as the test runner makes it: lines wrap
        assert out.code == 0
        assert "Effect of dropping each head alone" in words and "no LM head" in words
        assert "L2" in out.stdout and "H3" in out.stdout and "largest effects" in out.stdout

    def test_one_layer_swept(self, gpt2: Reference) -> None:
        """--layer 1 drops layer 1's heads one by one: four ablations, the grid's one row labelled L1."""
        args = ["ablate", "--model", str(gpt2.path), "--text", TEXT, "--layer", "1"]
        data = json.loads(run_attnx(*args, "-f", "json").stdout)
        assert data["sweep"] is True and [a["labels"] for a in data["ablations"]] == [["L1H0"], ["L1H1"], ["L1H2"],
                                                                                        ["L1H3"]]  # fmt: skip
        rows = [line.split() for line in run_attnx(*args, "--no-color").stdout.splitlines() if line.startswith("L1 ")]
        assert rows == [["L1", *(f"{a['mean_kl']:.3f}" for a in data["ablations"])]]
        out = run_attnx(*args, "--head", "L0H1")
        assert out.code == 2 and "give one or the other" in out.stderr

    def test_a_legend_says_what_each_column_is(self, gpt2: Reference, bert: Reference) -> None:
        """Under each table a line explains its columns: shift, and with an LM head KL and top changed."""
        legend = "shift: mean ‖h' − h‖ / ‖h‖ of the last hidden state (h intact, h' with the heads dropped)"
        with_lm = f"{legend} · KL: mean KL(intact ‖ dropped) of the next-token distribution, nats · top changed: "
        swept = " ".join(run_attnx("ablate", "--model", str(gpt2.path), "--text", TEXT, "--layer", "1").stdout.split())
        assert f"{with_lm}tokens whose most likely next token changed" in swept
        encoder = " ".join(
            run_attnx("ablate", "--model", str(bert.path), "--text", TEXT, "--layer", "0").stdout.split()
        )
        assert encoder.endswith(f"{legend}")
        one = " ".join(run_attnx("ablate", "--model", str(gpt2.path), "--text", TEXT, "--head", "L0H1").stdout.split())
        assert (
            "shift: ‖h' − h‖ / ‖h‖ of the last hidden state at the token (h intact, h' with the heads dropped) · "
            "KL: KL(intact ‖ dropped) of the next-token distribution, nats mean shift" in one
        )

    def test_unknown_head_is_a_usage_error(self, gpt2: Reference) -> None:
        out = run_attnx("ablate", "--model", str(gpt2.path), "--text", TEXT, "--head", "L9H0")
        assert out.code == 2 and "L9H0 does not exist" in out.stderr
