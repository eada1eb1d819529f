"""Ablation in an encoder-decoder: a head of any of its three attentions dropped, against transformers with that head's
slice of the output projection's input zeroed (T5's ``o``, BART's ``out_proj``; GUIDE §10), in float64."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.analysis.effects import log_softmax
from attnx.errors import ChoiceError
from attnx.models import Model, open_model
from attnx.models.stacks import AttentionKind, Memory
from attnx.workflows.target_effects import HeadName, ablate_target, check_site_heads
from tests.models.checkpoints import TEXT
from tests.models.decoders import float64_everywhere
from tests.models.encoder_decoders import TARGET, Seq2SeqReference

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# An attention of the model by its kind: the stack that holds it and which of its layers' attentions it is.
KINDS = {"self": ("encoder", 0), "causal self": ("decoder", 0), "cross": ("decoder", 1)}
Drops = dict[tuple[str, int], tuple[int, ...]]  # (kind, layer) -> heads


_MODELS: dict[Path, Any] = {}


def reference_model(path: Path) -> Any:
    """transformers' model in float64, eager attention, loaded once per checkpoint."""
    if path not in _MODELS:
        _MODELS[path] = transformers.AutoModelForSeq2SeqLM.from_pretrained(
            path, attn_implementation="eager", dtype=torch.float64
        ).eval()
    return _MODELS[path]


def projection(model: Any, kind: str, layer: int) -> tuple[Any, int]:
    """The output projection of the attention ``kind`` of ``layer`` and the width of a head."""
    if hasattr(model, "encoder") and hasattr(model.encoder, "block"):  # T5
        stack = model.encoder if kind == "self" else model.decoder
        block = stack.block[layer]
        module = block.layer[1].EncDecAttention.o if kind == "cross" else block.layer[0].SelfAttention.o
        return module, model.config.d_kv
    stack = model.get_encoder() if kind == "self" else model.get_decoder()
    attention = stack.layers[layer].encoder_attn if kind == "cross" else stack.layers[layer].self_attn
    return attention.out_proj, attention.head_dim


@contextlib.contextmanager
def zeroed(model: Any, drops: Drops) -> Iterator[None]:
    """While active, the heads in ``drops`` have their slice of their output projection's input zeroed."""

    def hook(heads: tuple[int, ...], width: int) -> Any:
        def pre(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            x = args[0].clone()
            for h in heads:
                x[..., h * width : (h + 1) * width] = 0
            return (x, *args[1:])

        return pre

    handles = []
    for (kind, layer), heads in drops.items():
        module, width = projection(model, kind, layer)
        handles.append(module.register_forward_pre_hook(hook(heads, width)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def reference(ref: Seq2SeqReference, drops: Drops) -> tuple[np.ndarray, np.ndarray]:
    """transformers' logits and the decoder's last hidden state with ``drops`` zeroed, on the fixture's texts."""
    model = reference_model(ref.path)
    with zeroed(model, drops), float64_everywhere(), torch.no_grad():
        out = model(input_ids=torch.tensor([ref.source_ids]), decoder_input_ids=torch.tensor([ref.decoder_ids]),
                    output_hidden_states=True)  # fmt: skip
    return out.logits[0].numpy(), out.decoder_hidden_states[-1][0].numpy()


def attnx_logits(model: Model, ref: Seq2SeqReference, drops: Drops) -> np.ndarray:
    """attnx's logits with ``drops``, through ``ForwardPass``'s drop keyed by (layer, which attention)."""
    encoder, decoder = model.stacks
    per_stack: dict[str, dict[tuple[int, int], tuple[int, ...]]] = {"encoder": {}, "decoder": {}}
    for (kind, layer), heads in drops.items():
        stack, which = KINDS[kind]
        per_stack[stack][(layer, which)] = heads
    read = model.run(encoded_source(model, ref), stack=encoder).branch(per_stack["encoder"])
    memory = Memory(read.finish(), read.tokens)
    written = model.run(model.encode_target(TARGET), stack=decoder, memory=memory).branch(per_stack["decoder"])
    return model.architecture.logits(written.finish())


def encoded_source(model: Model, ref: Seq2SeqReference) -> Any:
    """The fixture's source text as the model's tokens (the ids transformers read)."""
    encoded = model.encode(TEXT)
    assert encoded.ids.tolist() == ref.source_ids
    return encoded


DROPS: list[Drops] = [
    {("cross", 1): (2,)},
    {("causal self", 1): (2,)},
    {("self", 0): (1,)},
    {("self", 1): (0,), ("causal self", 0): (1,), ("cross", 2): (0, 2)},
]


class TestDropKeyedByAttention:
    """``ForwardPass``'s ``drop`` names one attention of a layer: a decoder's self-attention or its cross-attention."""

    @pytest.mark.parametrize("drops", DROPS, ids=["cross", "causal-self", "encoder", "all-three"])
    @pytest.mark.parametrize("name", ["t5", "bart"])
    def test_logits_equal_transformers(self, name: str, drops: Drops, request: pytest.FixtureRequest) -> None:
        """The logits with heads of any attention dropped equal transformers' with the same heads zeroed (1e-10),
        and they move (the reference is not the intact model's)."""
        ref: Seq2SeqReference = request.getfixturevalue(name)
        expected, _ = reference(ref, drops)
        intact, _ = reference(ref, {})
        assert np.abs(expected - intact).max() > 1e-3  # the reference moves
        with open_model(ref.path, "float64") as model:
            found = attnx_logits(model, ref, drops)
        assert np.abs(found - expected).max() <= 1e-10

    @pytest.mark.parametrize("name", ["t5", "bart"])
    def test_self_head_leaves_the_cross_head(self, name: str, request: pytest.FixtureRequest) -> None:
        """Dropping head 0 of a decoder layer's self-attention is not dropping head 0 of its cross-attention too:
        the logits are the self-head's alone, not both."""
        ref: Seq2SeqReference = request.getfixturevalue(name)
        alone, _ = reference(ref, {("causal self", 1): (0,)})
        both, _ = reference(ref, {("causal self", 1): (0,), ("cross", 1): (0,)})
        with open_model(ref.path, "float64") as model:
            found = attnx_logits(model, ref, {("causal self", 1): (0,)})
            by_layer = model.run(model.encode_target(TARGET), stack=model.stacks[1],
                                 memory=intact_memory(model, ref)).branch({1: (0,)})  # fmt: skip
            first = model.architecture.logits(by_layer.finish())
        assert np.abs(found - alone).max() <= 1e-10 and np.abs(found - both).max() > 1e-3
        assert np.abs(first - alone).max() <= 1e-10  # a layer alone names its first attention, the self-attention


def intact_memory(model: Model, ref: Seq2SeqReference) -> Memory:
    """The encoder's output on the fixture's source, nothing dropped."""
    read = model.run(encoded_source(model, ref), stack=model.stacks[0])
    return Memory(read.finish(), read.tokens)


def next_log_probs(logits: np.ndarray, labels: list[int]) -> np.ndarray:
    """Per position, the log-probability of the label there."""
    return log_softmax(logits)[np.arange(len(labels)), labels]


# The same drops as the workflow's heads: (where, layer, head), ``where`` as --head spells it.
WHERE = {"self": "enc", "causal self": "dec", "cross": "cross"}


def named_heads(drops: Drops) -> list[HeadName]:
    """``drops`` as the workflow's head names."""
    return [HeadName(WHERE[kind], layer, head) for (kind, layer), heads in drops.items() for head in heads]


class TestAgainstTransformers:
    """``ablate_target``'s per-position values equal transformers' with the same heads zeroed."""

    @pytest.mark.parametrize("drops", DROPS, ids=["cross", "causal-self", "encoder", "all-three"])
    @pytest.mark.parametrize("name", ["t5", "bart"])
    def test_log_probs_kl_and_shift(self, name: str, drops: Drops, request: pytest.FixtureRequest) -> None:
        """The next target token's log-probability (intact and dropped) and its change, the KL and the decoder's
        hidden-state shift: 1e-10 (float64)."""
        ref: Seq2SeqReference = request.getfixturevalue(name)
        logits, hidden = reference(ref, {})
        after_logits, after_hidden = reference(ref, drops)
        with open_model(ref.path, "float64") as model:
            found = ablate_target(model, TEXT, TARGET, named_heads(drops))
            labels = model.encode(TARGET).ids.tolist()
        assert labels[:-1] == ref.decoder_ids[1:]  # teacher forcing: each position's next token is the target's
        (effect,) = found.effects
        p, q = log_softmax(logits), log_softmax(after_logits)
        rows = np.arange(len(labels))
        assert np.abs(found.logp - p[rows, labels]).max() <= 1e-10
        assert np.abs(effect.logp - q[rows, labels]).max() <= 1e-10
        assert np.abs(effect.delta - (q - p)[rows, labels]).max() <= 1e-10
        assert np.abs(effect.kl - (np.exp(p) * (p - q)).sum(axis=1)).max() <= 1e-10
        shift = np.linalg.norm(after_hidden - hidden, axis=1) / np.linalg.norm(hidden, axis=1)
        assert np.abs(effect.shift - shift).max() <= 1e-10
        np.testing.assert_array_equal(found.top, logits.argmax(axis=1))
        np.testing.assert_array_equal(effect.top_after, after_logits.argmax(axis=1))
        assert effect.mean_kl > 1e-4 and np.abs(effect.delta).max() > 1e-4  # the drop moves the decoder


class TestSweep:
    """Every head of an attention dropped alone, as a layer × head grid per attention."""

    def test_cross_layer_equals_each_head_alone(self, t5: Seq2SeqReference) -> None:
        """``--layer dec:1 --attention cross``: the cross heads of decoder layer 1, each equal to itself dropped
        alone; the grid holds them at row 1."""
        with open_model(t5.path, "float64") as model:
            sweep = ablate_target(model, TEXT, TARGET, layer=1, stack="dec", kind=AttentionKind.CROSS)
            alone = ablate_target(model, TEXT, TARGET, [HeadName("cross", 1, 2)])
        assert sweep.sweep and [sweep.label(e.dropped[0]) for e in sweep.effects] == [
            "cross:L1H0", "cross:L1H1", "cross:L1H2"
        ]  # fmt: skip
        assert sweep.swept(2) == (1,) and sweep.swept(0) == ()
        grid = sweep.grid(2, lambda e: e.mean_kl)
        assert grid.shape == (3, 3) and np.isnan(grid[0]).all()
        assert grid[1, 2] == pytest.approx(alone.effects[0].mean_kl, rel=1e-12)
        np.testing.assert_allclose(sweep.effects[2].delta, alone.effects[0].delta, rtol=1e-12, atol=1e-15)

    def test_every_attention(self, bart: Seq2SeqReference) -> None:
        """Without a layer: every head of the three attentions (BART: 2 × 3 encoder heads, 3 × 5 self and 3 × 5
        cross), in lockstep batches equal to each alone."""
        with open_model(bart.path, "float64") as model:
            sweep = ablate_target(model, TEXT, TARGET)
            assert [part.title for part in sweep.parts] == [
                "encoder self-attention", "decoder causal self-attention", "decoder cross-attention"
            ]  # fmt: skip
            assert len(sweep.effects) == 6 + 15 + 15
            for effect in sweep.effects[::7]:
                (head,) = effect.dropped
                alone = ablate_target(model, TEXT, TARGET, [HeadName(WHERE[sweep.parts[head[0]].kind], *head[1:])])
                np.testing.assert_allclose(effect.kl, alone.effects[0].kl, rtol=1e-9, atol=1e-15)
            assert np.isfinite(sweep.grid(1, lambda e: e.mean_kl)).all()


class TestAddressing:
    """Heads named by stack or by kind."""

    def test_names(self, t5: Seq2SeqReference) -> None:
        """``enc``/``self``, ``dec``/``causal-self`` and ``cross``; ``dec`` with --attention cross is the cross-attention;
        -1 counts from the end; a head the model lacks is named."""
        with open_model(t5.path) as model:
            names = [HeadName("enc", 0, 1), HeadName("self", 0, 1), HeadName("dec", -1, 0),
                     HeadName("causal-self", 2, 0), HeadName("cross", 1, -1), HeadName(None, 1, 2)]  # fmt: skip
            assert check_site_heads(model, names) == ((0, 0, 1), (1, 2, 0), (2, 1, 2), (0, 1, 2))
            assert check_site_heads(model, [HeadName("dec", 1, 0)], AttentionKind.CROSS) == ((2, 1, 0),)
            assert check_site_heads(model, [HeadName(None, 1, 0)], AttentionKind.CROSS) == ((2, 1, 0),)
            with pytest.raises(
                ChoiceError, match=r"^cross:L3H0 does not exist: the decoder cross-attention has layers"
            ):
                check_site_heads(model, [HeadName("cross", 3, 0)])
            with pytest.raises(ChoiceError, match="no stack 'x'"):
                check_site_heads(model, [HeadName("x", 0, 0)])
            with pytest.raises(ChoiceError, match="encoder's layers hold no cross-attention"):
                check_site_heads(model, [HeadName("enc", 0, 0)], AttentionKind.CROSS)
