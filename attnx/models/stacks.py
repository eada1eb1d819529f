"""The shape of a model: named stacks of layers, the attentions in each layer, and the kind of input each reads.

A model is one or more stacks of layers, each named and reading one kind of input: a decoder-only model is
one ``decoder`` over a text, BERT one ``encoder`` over a text. Each layer of a stack holds attentions, each of a
kind (``AttentionKind``) that says whether a query may see keys after it, and where its queries and its keys
come from: a stack's own stream for self-attention, another stack's output for cross-attention. Today every
family has one stack with one self-attention per layer; an encoder-decoder will be an ``encoder`` and a
``decoder`` whose layers hold a causal self-attention and a cross-attention over the encoder's output, and a
vision encoder a stack over an image. ``Encoded`` (attnx/models/tokenize.py) is an input that knows its kind
and its positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from attnx.errors import ChoiceError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


class InputKind(str, Enum):
    """What a stack reads: the kind of an input."""

    TEXT = "text"  # tokens of a text, positions 0..N-1
    AUDIO = "audio"  # log-mel features of audio (attnx/models/audio.py), positions labelled by time
    IMAGE = "image"  # an image's patches (attnx/models/vision.py), positions labelled CLS, reg0, dist, p(row,col)


class AttentionKind(str, Enum):
    """What an attention is: whether its keys are its own stream's, and whether a query sees the keys after it."""

    SELF = "self"  # every query sees every key of its own stream (an encoder)
    CAUSAL_SELF = "causal self"  # a query sees the keys up to its own position (a decoder)
    CROSS = "cross"  # a decoder's queries over every position of another stack's output (the encoder's)

    @property
    def causal(self) -> bool:
        """True when a query never sees a key after its own position."""
        return self is AttentionKind.CAUSAL_SELF

    @property
    def label(self) -> str:
        """How a person reads it: ``causal self-attention``."""
        return f"{self.value}-attention"


@dataclass(frozen=True)
class Attention:
    """One attention of a layer: its ``kind`` and the stacks its queries and its keys come from (by name)."""

    kind: AttentionKind
    queries: str
    keys: str

    @classmethod
    def over(cls, stack: str, *, causal: bool) -> Attention:
        """Self-attention within ``stack``: causal, or seeing every key."""
        return cls(AttentionKind.CAUSAL_SELF if causal else AttentionKind.SELF, stack, stack)

    @property
    def is_self(self) -> bool:
        """True when queries and keys come from the same stack."""
        return self.queries == self.keys


@dataclass(frozen=True)
class Stack:
    """A named stack of ``layers`` layers reading an input of kind ``reads``, each layer holding ``attentions`` (in the
    order the layer runs them), each of ``heads`` heads (None: the model's own count)."""

    name: str
    layers: int
    reads: InputKind
    attentions: tuple[Attention, ...]
    heads: int | None = None

    @classmethod
    def single(cls, layers: int, *, causal: bool) -> Stack:
        """The one stack of a model with self-attention over a text: a ``decoder`` when causal, else an ``encoder``."""
        name = "decoder" if causal else "encoder"
        return cls(name, layers, InputKind.TEXT, (Attention.over(name, causal=causal),))

    @classmethod
    def encoder_decoder(
        cls,
        encoder_layers: int,
        decoder_layers: int,
        *,
        reads: InputKind = InputKind.TEXT,
        decoder_heads: int | None = None,
    ) -> tuple[Stack, ...]:
        """An ``encoder`` over an input of kind ``reads`` and a ``decoder`` over a text, its layers a causal
        self-attention then a cross-attention over the encoder's output; the encoder alone where the decoder has no
        layers (a checkpoint of the encoder only)."""
        encoder = cls("encoder", encoder_layers, reads, (Attention(AttentionKind.SELF, "encoder", "encoder"),))
        decoder = cls("decoder", decoder_layers, InputKind.TEXT, (
            Attention(AttentionKind.CAUSAL_SELF, "decoder", "decoder"),
            Attention(AttentionKind.CROSS, "decoder", "encoder"),
        ), decoder_heads)  # fmt: skip
        return (encoder, decoder) if decoder_layers else (encoder,)

    @property
    def causal(self) -> bool:
        """True when the stack's self-attention is causal."""
        return any(attention.kind.causal for attention in self.attentions if attention.is_self)

    def attention_of(self, kind: AttentionKind) -> int:
        """Where in each layer the attention of ``kind`` is (from 0); ValueError where the stack has none."""
        for index, attention in enumerate(self.attentions):
            if attention.kind is kind:
                return index
        raise ValueError(f"the {self.name} has no {kind.label}")


@dataclass(frozen=True, eq=False)
class Memory:
    """What a cross-attention's keys and values are made from: another stack's output ``[key, d_model]`` (NumPy's)
    and the labels of its positions (the source's tokens)."""

    stream: np.ndarray
    tokens: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Site:
    """Where an attention is: its ``stack``, the ``layer`` (from 0) and ``which`` of the layer's attentions (from 0),
    with the ``memory`` a cross-attention reads (None for self-attention)."""

    stack: Stack
    layer: int
    which: int = 0
    memory: Memory | None = None

    @property
    def attention(self) -> Attention:
        """The attention there."""
        return self.stack.attentions[self.which]

    @property
    def last(self) -> bool:
        """True for the layer's last attention: after it, the rest of the layer runs."""
        return self.which == len(self.stack.attentions) - 1


@dataclass(frozen=True)
class Address:
    """Where a person points in a model: a ``layer`` (from 0; -1 the last) of a ``stack`` (by its name or the start
    of it, ``enc`` for ``encoder``; None: the model's first stack) and an attention ``kind`` (None: the layer's
    first attention). Written ``3``, ``enc:3`` or ``decoder:-1``; the kind apart (``cross``)."""

    layer: int
    stack: str | None = None
    kind: AttentionKind | None = None

    @classmethod
    def parse(cls, text: str, kind: str | None = None) -> Address:
        """``"dec:2"`` and ``"cross"`` as an Address; a ChoiceError saying what is expected."""
        stack, _, layer = text.strip().rpartition(":")
        try:
            number = int(layer)
        except ValueError:
            raise ChoiceError(
                f"a layer is a number counted from 0 (-1: the last), or STACK:N (enc:3), not {text!r}"
            ) from None
        kinds = {member.value.replace(" ", "-"): member for member in AttentionKind}
        if kind is not None and kind.strip().lower() not in kinds:
            raise ChoiceError(f"an attention kind is one of {', '.join(kinds)}, not {kind!r}")
        return cls(number, stack.strip().lower() or None, None if kind is None else kinds[kind.strip().lower()])

    def resolve(self, stacks: tuple[Stack, ...]) -> tuple[Stack, int]:
        """The stack named and which of its layers' attentions is meant; a ChoiceError naming what there is. (The layer
        is checked by the model, against the stack's layers.)"""
        if self.stack is None:
            stack = stacks[0]
        else:
            found = [s for s in stacks if s.name == self.stack] or [s for s in stacks if s.name.startswith(self.stack)]
            if len(found) != 1:
                names = ", ".join(s.name for s in stacks)
                raise ChoiceError(f"the model has no stack {self.stack!r}; its stacks: {names}")
            (stack,) = found
        if self.kind is None:
            return stack, 0
        try:
            return stack, stack.attention_of(self.kind)
        except ValueError:
            kinds = ", ".join(attention.kind.label for attention in stack.attentions)
            raise ChoiceError(f"the {stack.name}'s layers hold no {self.kind.label}; they hold {kinds}") from None
