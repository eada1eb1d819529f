"""T5, T5 v1.1 and mT5 against transformers: every layer of both stacks, each of the three attention kinds."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.engines.placement import Placement
from attnx.errors import ModelError
from attnx.models import Model, open_model
from attnx.models.families.t5 import relative_buckets
from attnx.models.stacks import Memory
from tests.models.checkpoints import TEXT
from tests.models.encoder_decoders import TARGET, Seq2SeqReference, assert_agrees, assert_two_stacks, both_stacks
from tests.models.test_decoders import assert_close


def encoder_decoder(model: Model, on: Placement) -> dict[str, list[np.ndarray]]:
    """``both_stacks`` on TEXT and TARGET."""
    return both_stacks(model, TEXT, model.encode_target(TARGET), on)


class TestBuckets:
    @pytest.mark.parametrize("bidirectional", [True, False])
    @pytest.mark.parametrize(("buckets", "max_distance"), [(32, 128), (8, 12), (16, 20)])
    def test_as_transformers(self, bidirectional: bool, buckets: int, max_distance: int) -> None:
        """Every relative position from −400 to 400 falls in transformers' bucket (float32 logs, truncated)."""
        torch = pytest.importorskip("torch")
        from transformers.models.t5.modeling_t5 import T5Attention

        relative = np.arange(-400, 401)[None, :]
        theirs = T5Attention._relative_position_bucket(
            torch.tensor(relative), bidirectional=bidirectional, num_buckets=buckets, max_distance=max_distance
        ).numpy()
        ours = relative_buckets(relative, bidirectional=bidirectional, buckets=buckets, max_distance=max_distance)
        np.testing.assert_array_equal(ours, theirs)
        assert ours.min() == 0 and ours.max() == buckets - 1  # the far buckets are reached: the logarithmic ones too


class TestAgreement:
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_every_layer_every_kind(self, seq2seq: Seq2SeqReference, dtype: str) -> None:
        """The encoder's self-attention, the decoder's causal self-attention and its cross-attention, each block's
        output, the encoder's output and the logits equal transformers' (1e-5 in float32, 1e-10 in float64)."""
        with open_model(seq2seq.path, dtype) as model:
            ours = encoder_decoder(model, Placement())
        assert [len(ours[kind]) for kind in ("encoder", "decoder", "cross")] == [2, 3, 3]
        assert_agrees(ours, seq2seq, dtype)

    def test_torch_engine(self, t5: Seq2SeqReference) -> None:
        """On the torch engine the three kinds agree with transformers too."""
        pytest.importorskip("torch")
        with open_model(t5.path, "float32") as model:
            ours = encoder_decoder(model, Placement("torch"))
        for kind in ("encoder", "decoder", "cross"):
            for mine, their in zip(ours[kind], t5.attentions["float32"][kind], strict=True):
                assert_close(mine, their, "float32")

    def test_the_texts_reach_the_logarithmic_buckets(self, t5: Seq2SeqReference) -> None:
        """The source is long enough that some distances fall past the exact buckets (else the test shows little)."""
        assert len(t5.source_ids) > 8 and len(t5.decoder_ids) > 8


class TestShape:
    def test_two_stacks_three_kinds(self, t5: Seq2SeqReference) -> None:
        """T5 is an encoder (self-attention) and a decoder (causal self-attention, then cross-attention over the
        encoder); the attention commands address the encoder."""
        with open_model(t5.path) as model:
            assert_two_stacks(model)
            encoder = model.stacks[0]
            assert model.stack is encoder and model.layers == 2

    def test_decoder_reads_the_target_shifted_right(self, t5: Seq2SeqReference) -> None:
        """The decoder reads the start token (pad, 0), then the target's tokens but its last (``</s>``)."""
        with open_model(t5.path) as model:
            shifted = model.encode_target(TARGET)
        assert shifted.ids.tolist() == t5.decoder_ids
        assert shifted.tokens[0] == "<pad>" and shifted.special[0] and not any(shifted.special[1:])

    def test_cross_attention_names_its_stacks(self, t5: Seq2SeqReference) -> None:
        """A cross-attention's spec reads the encoder's output as its keys, labelled by the source's tokens, and says
        where it is; its queries are the target's tokens."""
        with open_model(t5.path) as model:
            encoder, decoder = model.stacks
            source = model.run(TEXT, stack=encoder)
            memory = Memory(source.finish(), source.tokens)
            target = model.run(model.encode_target(TARGET), stack=decoder, memory=memory)
            target.step()
            spec = target.spec()
        assert spec.key_tokens == source.tokens and len(spec.tokens) == len(t5.decoder_ids)
        assert spec.source.endswith("decoder layer 0 of 3, cross-attention")
        assert not spec.masking.masked and spec.score_bias is None

    def test_a_decoder_needs_the_encoders_output(self, t5: Seq2SeqReference) -> None:
        """Running the decoder without the encoder's output is a ModelError, before anything runs."""
        with open_model(t5.path) as model, pytest.raises(ModelError, match="attends to another stack's output"):
            model.run(model.encode_target(TARGET), stack=model.stacks[1])

    def test_a_layer_past_a_stack_names_the_stack(self, t5: Seq2SeqReference) -> None:
        """A layer beyond a stack's says which stack and its layers."""
        with open_model(t5.path) as model, pytest.raises(ModelError, match=r"its decoder has layers 0\.\.2"):
            model.check_layer(3, model.stacks[1])
