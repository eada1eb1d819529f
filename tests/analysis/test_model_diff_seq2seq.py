"""Two encoder-decoder checkpoints head by head: each attention kind, the decoder's against transformers'."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.analysis.effects import kl_divergence, log_softmax
from attnx.analysis.model_diff import js_divergence
from attnx.errors import ModelError
from attnx.models import open_model
from attnx.models.stacks import AttentionKind
from attnx.workflows import compare_models
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.encoder_decoders import TARGET, Seq2SeqReference, run_seq2seq

CROSS_Q = "decoder.block.1.layer.1.EncDecAttention.q.weight"  # decoder layer 1's cross-attention W_q


@pytest.fixture(scope="module")
def tuned(t5: Seq2SeqReference, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny T5 whose decoder layer 1 cross-attention W_q moved (every head's rows)."""
    from safetensors.numpy import load_file, save_file

    moved = Path(shutil.copytree(t5.path, tmp_path_factory.mktemp("tuned") / "t5"))
    tensors = load_file(moved / "model.safetensors")
    tensors[CROSS_Q] = tensors[CROSS_Q] + np.random.default_rng(0).normal(size=tensors[CROSS_Q].shape).astype(
        np.float32
    )
    save_file(tensors, moved / "model.safetensors", metadata={"format": "pt"})
    return moved


class TestCompareKinds:
    def test_cross_as_transformers(self, t5: Seq2SeqReference, tuned: Path) -> None:
        """Each cross head's mean JS divergence and the next-token KL are those of transformers' weights and logits
        on both checkpoints; the heads before the moved layer do not move."""
        theirs = run_seq2seq(tuned, t5.source_ids, t5.decoder_ids, "float64")
        with open_model(t5.path) as a, open_model(tuned) as b:
            comparison = compare_models(a, b, TEXT, target=TARGET, kind=AttentionKind.CROSS)
            target_tokens, source_tokens = a.encode_target(TARGET).tokens, a.encode(TEXT).tokens
        expected = np.array([js_divergence(p, q).mean(axis=-1) for p, q in zip(
            t5.attentions["float64"]["cross"], theirs[0]["cross"], strict=True)])  # fmt: skip
        np.testing.assert_allclose(comparison.grid(), expected, rtol=1e-9, atol=1e-12)
        assert not comparison.grid()[0].any() and comparison.grid()[1].min() > 0.01
        assert comparison.kl is not None
        kl = kl_divergence(log_softmax(t5.logits["float64"]), log_softmax(theirs[3]))
        np.testing.assert_allclose(comparison.kl, kl, rtol=1e-9, atol=1e-12)
        assert (comparison.stack, comparison.kind) == ("decoder", "cross")
        assert comparison.tokens == target_tokens and comparison.keys == source_tokens

    def test_encoder_and_decoder_self(self, t5: Seq2SeqReference, tuned: Path) -> None:
        """The encoder does not move (its weights are the same), nor the decoder's self-attention up to layer 1;
        layer 2's, reading what the moved cross-attention wrote, does, as transformers' does."""
        theirs = run_seq2seq(tuned, t5.source_ids, t5.decoder_ids, "float64")
        with open_model(t5.path) as a, open_model(tuned) as b:
            encoder = compare_models(a, b, TEXT)
            decoder = compare_models(a, b, TEXT, target=TARGET, kind=AttentionKind.CAUSAL_SELF)
        assert not encoder.grid().any() and encoder.kl is None and encoder.stack == "encoder"
        expected = np.array([js_divergence(p, q).mean(axis=-1) for p, q in zip(
            t5.attentions["float64"]["decoder"], theirs[0]["decoder"], strict=True)])  # fmt: skip
        np.testing.assert_allclose(decoder.grid(), expected, rtol=1e-9, atol=1e-12)
        assert not decoder.grid()[:2].any() and decoder.grid()[2].max() > 0
        assert decoder.keys is None  # its keys are the target's own tokens

    def test_refused(self, t5: Seq2SeqReference, tuned: Path) -> None:
        """The decoder's attentions without a target are a ModelError."""
        with open_model(t5.path) as a, open_model(tuned) as b, pytest.raises(ModelError, match="reads a target"):
            compare_models(a, b, TEXT, kind=AttentionKind.CROSS)


class TestCommand:
    def test_table_and_json(self, t5: Seq2SeqReference, tuned: Path) -> None:
        """--target compares the cross-attention: the header names it, the worst head is in layer 1, and the JSON
        names the stack, the kind and the source tokens."""
        args = ["diff", "--model", str(t5.path), "--model", str(tuned), "--text", TEXT, "--target", TARGET]
        shown = invoke(*args).stdout
        assert "· t5 · decoder, cross-attention" in shown and "target tokens × 11 source tokens" in shown
        assert shown.split("Heads that moved most (of 9)")[1].split("\n")[3].split()[0] == "L1"
        data = json.loads(invoke(*args, "-f", "json").stdout)
        assert (data["stack"], data["attention"], len(data["key_tokens"])) == ("decoder", "cross", 11)
        assert data["worst"][0]["layer"] == 1 and len(data["kl"]) == len(data["tokens"])
        self_attention = json.loads(invoke(*args, "--attention", "causal-self", "-f", "json").stdout)
        assert self_attention["attention"] == "causal self" and "key_tokens" not in self_attention

    def test_usage(self, t5: Seq2SeqReference, tuned: Path) -> None:
        """Cross-attention without --target, and an unknown kind, are exit 2 with one line."""
        base = ["diff", "--model", str(t5.path), "--model", str(tuned), "--text", TEXT]
        assert invoke(*base, "--attention", "cross", code=2).stderr == (
            "attnx: error: --attention cross: the decoder's cross-attention reads a target text: give --target T\n"
        )
        assert (
            "an attention kind is one of self, causal-self, cross" in invoke(*base, "--attention", "x", code=2).stderr
        )
