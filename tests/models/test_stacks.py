"""The shape of a model: its stacks, each layer's attention kind, and the input kind and positions a stack reads."""

from __future__ import annotations

import dataclasses
import enum

import numpy as np
import pytest

from attnx.errors import ChoiceError, ModelError
from attnx.models import open_model
from attnx.models.stacks import Address, Attention, AttentionKind, InputKind, Stack
from tests.models.checkpoints import TEXT, Reference
from tests.models.decoders import DecoderReference


class TestStack:
    def test_a_causal_single_stack_is_a_decoder(self) -> None:
        """A causal model's one stack is a ``decoder`` over a text whose layers hold a causal self-attention."""
        stack = Stack.single(4, causal=True)
        assert (stack.name, stack.layers, stack.reads, stack.causal) == ("decoder", 4, InputKind.TEXT, True)
        assert stack.attentions == (Attention(AttentionKind.CAUSAL_SELF, "decoder", "decoder"),)

    def test_a_bidirectional_single_stack_is_an_encoder(self) -> None:
        """A model that is not causal has one ``encoder`` whose self-attention sees every key."""
        stack = Stack.single(6, causal=False)
        assert (stack.name, stack.causal) == ("encoder", False)
        (attention,) = stack.attentions
        assert attention.is_self and not attention.kind.causal
        assert attention.kind.label == "self-attention"

    def test_cross_attention_is_not_self(self) -> None:
        """An attention whose keys come from another stack is not self-attention, and makes no stack causal."""
        cross = Attention(AttentionKind.SELF, "decoder", "encoder")
        assert not cross.is_self
        assert not Stack("decoder", 2, InputKind.TEXT, (cross,)).causal


class TestFamilies:
    def test_bert_and_gpt2(self, checkpoint: Reference) -> None:
        """BERT is one encoder with self-attention, GPT-2 one decoder with causal self-attention; each layer's spec
        is masked exactly as its attention kind says."""
        with open_model(checkpoint.path, "float32") as model:
            (stack,) = model.stacks
            assert stack is not None and model.stack == stack and model.layers == stack.layers == 3
            causal = model.architecture.causal
            assert stack.name == ("decoder" if causal else "encoder")
            spec = model.run(TEXT).spec()
            assert spec.masking.causal is model.architecture.attention(0).kind.causal is causal

    def test_every_decoder_family(self, decoder: DecoderReference) -> None:
        """Every decoder family reads one causal decoder stack over a text, its layers all there."""
        with open_model(decoder.path, "float32") as model:
            assert [(s.name, s.reads, s.causal, s.layers) for s in model.stacks] == [
                ("decoder", InputKind.TEXT, True, model.architecture.layers)
            ]
            assert {model.architecture.attention(layer).kind for layer in range(model.layers)} == {
                AttentionKind.CAUSAL_SELF
            }


class TestInputs:
    def test_a_text_knows_its_kind_and_positions(self, checkpoint: Reference) -> None:
        """An encoded text is of kind text, its positions 0..N-1: the rows of a learned position table."""
        with open_model(checkpoint.path, "float32") as model:
            encoded = model.encode(TEXT)
        assert encoded.kind is InputKind.TEXT
        assert encoded.positions == range(len(encoded.ids)) and len(encoded.ids) > 5

    def test_learned_positions_are_read_at_the_inputs_positions(self, gpt2: Reference) -> None:
        """GPT-2's embeddings add the position table's rows at the input's positions (checked against the table)."""
        with open_model(gpt2.path, "float64") as model:
            encoded = model.encode(TEXT)
            words = model.checkpoint.rows("wte.weight", encoded.ids).astype(np.float64)
            table = model.checkpoint.tensor("wpe.weight").astype(np.float64)
            embedded = model.architecture.embed(encoded)
        np.testing.assert_allclose(embedded, words + table[: len(encoded.ids)], rtol=0, atol=1e-12)

    def test_a_stack_refuses_an_input_of_another_kind(self, gpt2: Reference) -> None:
        """An input of a kind the stack does not read is a ModelError naming both kinds, before anything runs."""
        other = enum.Enum("Other", {"IMAGE": "image"})
        with open_model(gpt2.path, "float32") as model:
            image = dataclasses.replace(model.encode(TEXT), kind=other.IMAGE)  # type: ignore[arg-type]
            with pytest.raises(ModelError, match=r"its decoder reads text, not image"):
                model.run(image)


class TestAddress:
    SEQ2SEQ = (
        Stack("encoder", 6, InputKind.TEXT, (Attention(AttentionKind.SELF, "encoder", "encoder"),)),
        Stack("decoder", 4, InputKind.TEXT, (Attention(AttentionKind.CAUSAL_SELF, "decoder", "decoder"),
                                             Attention(AttentionKind.CROSS, "decoder", "encoder"))),
    )  # fmt: skip

    @pytest.mark.parametrize(
        ("text", "kind", "expected"),
        [
            ("3", None, Address(3)),
            ("-1", None, Address(-1)),
            ("enc:3", None, Address(3, "enc")),
            (" Decoder:-1 ", "cross", Address(-1, "decoder", AttentionKind.CROSS)),
            ("dec:0", "causal-self", Address(0, "dec", AttentionKind.CAUSAL_SELF)),
        ],
    )
    def test_parse(self, text: str, kind: str | None, expected: Address) -> None:
        """A layer, STACK:LAYER, and a kind apart (spaces as hyphens), read as written."""
        assert Address.parse(text, kind) == expected

    @pytest.mark.parametrize(
        ("text", "kind", "message"),
        [
            ("enc:x", None, r"a layer is a number counted from 0 .* not 'enc:x'"),
            ("dec:", None, r"not 'dec:'"),
            ("3", "crosss", r"an attention kind is one of self, causal-self, cross, not 'crosss'"),
        ],
    )
    def test_parse_refuses(self, text: str, kind: str | None, message: str) -> None:
        """A layer that is no number or a kind attnx does not know is a ChoiceError saying what is expected."""
        with pytest.raises(ChoiceError, match=message):
            Address.parse(text, kind)

    @pytest.mark.parametrize(
        ("address", "stack", "which"),
        [(Address(2), "encoder", 0), (Address(1, "dec"), "decoder", 0),
         (Address(1, "decoder", AttentionKind.CROSS), "decoder", 1), (Address(0, "e", AttentionKind.SELF), "encoder", 0)],
    )  # fmt: skip
    def test_resolve(self, address: Address, stack: str, which: int) -> None:
        """A stack by its name or the start of it (the first stack by default), the kind's place in its layers."""
        found, at = address.resolve(self.SEQ2SEQ)
        assert (found.name, at) == (stack, which)

    @pytest.mark.parametrize(
        ("address", "message"),
        [(Address(0, "vision"), r"no stack 'vision'; its stacks: encoder, decoder"),
         (Address(0, "encoder", AttentionKind.CROSS), r"the encoder's layers hold no cross-attention; they hold "
                                                      r"self-attention")],
    )  # fmt: skip
    def test_resolve_refuses(self, address: Address, message: str) -> None:
        """A stack the model lacks, or a kind its layers do not hold, is a ChoiceError naming what there is."""
        with pytest.raises(ChoiceError, match=message):
            address.resolve(self.SEQ2SEQ)
