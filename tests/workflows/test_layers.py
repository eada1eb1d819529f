"""Every layer's attention of one kind: the encoder's, or an encoder-decoder's decoder reading a target."""

from __future__ import annotations

import pytest

from attnx import workflows
from attnx.core.tensors import WEIGHTS
from attnx.errors import ModelError
from attnx.models import open_model
from attnx.models.stacks import AttentionKind
from tests.models.checkpoints import TEXT, Reference
from tests.models.encoder_decoders import TARGET, Seq2SeqReference
from tests.models.test_decoders import assert_close

KINDS = {None: "encoder", AttentionKind.SELF: "encoder", AttentionKind.CAUSAL_SELF: "decoder",
         AttentionKind.CROSS: "cross"}  # fmt: skip


class TestLayerResults:
    @pytest.mark.parametrize("kind", list(KINDS), ids=lambda kind: "default" if kind is None else kind.value)
    def test_each_kind_as_transformers(self, t5: Seq2SeqReference, kind: AttentionKind | None) -> None:
        """Each kind's weights, layer by layer, are transformers' (the decoder's teacher-forced on the target)."""
        with open_model(t5.path) as model:
            target = model.encode_target(TARGET)
            found = list(workflows.layer_results(model, TEXT, needs=(WEIGHTS,), kind=kind, target=target))
        theirs = t5.attentions["float64"][KINDS[kind]]
        assert len(found) == len(theirs) == (3 if KINDS[kind] != "encoder" else 2)  # T5_SIZES' layers
        for result, reference in zip(found, theirs, strict=True):
            assert result.weights is not None
            assert_close(result.weights, reference, "float64")

    def test_progress_counts_both_stacks(self, t5: Seq2SeqReference) -> None:
        """The encoder's layers are counted before the decoder's, up to the total of both."""
        seen: list[tuple[int, int]] = []
        with open_model(t5.path) as model:
            list(workflows.layer_results(model, TEXT, kind=AttentionKind.CROSS, target=TARGET,
                                         progress=lambda done, total: seen.append((done, total))))  # fmt: skip
        total = 2 + 3  # T5_SIZES' encoder and decoder layers
        assert seen == [(done, total) for done in range(1, total + 1)]

    def test_a_decoder_without_target(self, t5: Seq2SeqReference) -> None:
        """The decoder's attentions need the text it reads."""
        with open_model(t5.path) as model, pytest.raises(ModelError, match="reads a target text"):
            next(workflows.layer_results(model, TEXT, kind=AttentionKind.CROSS))

    def test_a_kind_the_model_lacks(self, gpt2: Reference) -> None:
        """A decoder-only model has no cross-attention: said with the kinds it has."""
        with open_model(gpt2.path) as model, pytest.raises(ModelError, match="no cross-attention; it has causal"):
            next(workflows.layer_results(model, TEXT, kind=AttentionKind.CROSS, target="a"))
