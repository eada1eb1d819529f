"""What dropping heads does to the whole model: its last hidden state and, with an LM head, its next-token guesses.

A head is dropped by zeroing its output before W_o, in its own layer, and the forward pass goes on to
the model's last hidden state (after the final norm, as transformers' ``last_hidden_state``). That is
what transformers' ``head_mask`` did (a 0 on the head's weights after the softmax) while it existed.
Per token, the effect is the relative shift ``‖h' − h‖ / ‖h‖`` of the last hidden state and, where the
checkpoint has a language-model head, ``KL(p ‖ p')`` of its next-token distribution (nats) and
whether the most likely next token changes. This module holds those values and the measures over arrays;
``attnx.workflows.effects`` runs the model to get them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

Head = tuple[int, int]  # (layer, head), both from 0


@dataclass(frozen=True, eq=False)
class Effect:
    """The effect of one ablation, per token (``[token]`` arrays; KL and top tokens None without an LM head)."""

    dropped: tuple[Head, ...]
    shift: np.ndarray  # ‖h' − h‖ / ‖h‖ of the last hidden state
    kl: np.ndarray | None  # KL(p ‖ p'), nats
    top: np.ndarray | None  # the most likely next token, intact
    top_after: np.ndarray | None  # and with the heads dropped

    @property
    def mean_shift(self) -> float:
        """Mean relative shift over the tokens."""
        return float(self.shift.mean())

    @property
    def mean_kl(self) -> float | None:
        """Mean KL over the tokens (None without an LM head)."""
        return None if self.kl is None else float(self.kl.mean())

    @property
    def top_changed(self) -> int | None:
        """How many tokens' most likely next token changes (None without an LM head)."""
        return None if self.top is None or self.top_after is None else int((self.top != self.top_after).sum())


@dataclass(frozen=True, eq=False)
class Ablations:
    """The intact model's outputs on a text and the effect of each ablation asked for.

    ``effects`` holds one ``Effect`` per ablation in the order asked; for the sweep of every head alone
    (``sweep``), ``grid()`` lays them out ``[layer, head]``.
    """

    model: str
    architecture: str
    tokens: tuple[str, ...]
    layers: int
    heads: int
    lm_head: bool
    top_labels: Mapping[int, str]  # id -> label of every top token shown
    effects: tuple[Effect, ...]
    sweep: bool = False

    @property
    def swept_layers(self) -> tuple[int, ...]:
        """The layers whose heads a sweep dropped, in order."""
        return tuple(sorted({effect.dropped[0][0] for effect in self.effects if len(effect.dropped) == 1}))

    def grid(self, value: Callable[[Effect], float | None]) -> np.ndarray:
        """``[layer, head]`` of ``value`` over a sweep of single heads (NaN where a value is None)."""
        out = np.full((self.layers, self.heads), np.nan)
        for effect in self.effects:
            if len(effect.dropped) == 1:
                found = value(effect)
                out[effect.dropped[0]] = np.nan if found is None else found
        return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-probabilities in float64."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def kl_divergence(intact: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Per row, KL(p ‖ q) in nats from log-probabilities ``intact`` (p) and ``after`` (q)."""
    return (np.exp(intact) * (intact - after)).sum(axis=-1)


# An encoder-decoder's head: (part, layer, head), the part an index into ``TargetAblations.parts``.
SiteHead = tuple[int, int, int]


@dataclass(frozen=True)
class Part:
    """One attention of a model's layers, swept as one layer × head grid: its stack, its kind (``self``, ``causal
    self``, ``cross``), which of the stack's layers' attentions it is, and its layers and heads. ``short`` names it in
    a head's label (``cross`` in ``cross:L1H2``): the kind where one stack holds it alone, else the stack's start."""

    stack: str
    kind: str
    which: int
    layers: int
    heads: int
    short: str

    @property
    def title(self) -> str:
        """``decoder cross-attention``."""
        return f"{self.stack} {self.kind}-attention"


@dataclass(frozen=True, eq=False)
class TargetEffect:
    """The effect of one ablation on an encoder-decoder's decoder, per target position (``[position]`` arrays): the
    shift of its last hidden state, the KL of its next-token distribution, the log-probability of the token that
    follows in the target (NaN where none follows) and its change, and the most likely next token, intact and after."""

    dropped: tuple[SiteHead, ...]
    shift: np.ndarray  # ‖h' − h‖ / ‖h‖ of the decoder's last hidden state
    kl: np.ndarray  # KL(p ‖ p'), nats
    logp: np.ndarray  # log p'(next target token)
    delta: np.ndarray  # log p' − log p of the next target token
    top: np.ndarray  # the most likely next token, intact
    top_after: np.ndarray  # and with the heads dropped

    @property
    def mean_shift(self) -> float:
        """Mean relative shift over the positions."""
        return float(self.shift.mean())

    @property
    def mean_kl(self) -> float:
        """Mean KL over the positions."""
        return float(self.kl.mean())

    @property
    def mean_delta(self) -> float | None:
        """Mean change of the next target token's log-probability over the positions that have one (None: none)."""
        known = self.delta[np.isfinite(self.delta)]
        return float(known.mean()) if known.size else None

    @property
    def top_changed(self) -> int:
        """How many positions' most likely next token changes."""
        return int((self.top != self.top_after).sum())


@dataclass(frozen=True, eq=False)
class TargetAblations:
    """An encoder-decoder reading ``source`` (encoder) and ``target`` (the decoder's tokens, teacher-forced), intact:
    per target position the token that follows (``next_ids``, -1 where none is known), its log-probability ``logp``
    and the most likely next token ``top``; and the effect of each ablation asked for, measured on the decoder.

    ``parts`` are the model's attentions (encoder self, decoder causal self, cross); a head dropped is
    (part, layer, head). For a sweep of single heads, ``grid(part, value)`` lays them out ``[layer, head]``.
    ``written``: the target positions the model wrote itself (``--generate``), else empty."""

    model: str
    architecture: str
    source: tuple[str, ...]
    target: tuple[str, ...]
    next_ids: np.ndarray
    logp: np.ndarray
    top: np.ndarray
    parts: tuple[Part, ...]
    top_labels: Mapping[int, str]  # id -> label of every token shown
    effects: tuple[TargetEffect, ...]
    sweep: bool = False
    written: tuple[int, ...] = ()

    def label(self, head: SiteHead) -> str:
        """``cross:L1H2`` (layers and heads from 0)."""
        part, layer, index = head
        return f"{self.parts[part].short}:L{layer}H{index}"

    def swept(self, part: int) -> tuple[int, ...]:
        """The layers of ``part`` whose heads a sweep dropped, in order."""
        return tuple(sorted({e.dropped[0][1] for e in self.effects if len(e.dropped) == 1 and e.dropped[0][0] == part}))

    def grid(self, part: int, value: Callable[[TargetEffect], float | None]) -> np.ndarray:
        """``[layer, head]`` of ``value`` over the single heads of ``part`` dropped (NaN where none was)."""
        out = np.full((self.parts[part].layers, self.parts[part].heads), np.nan)
        for effect in self.effects:
            if len(effect.dropped) == 1 and effect.dropped[0][0] == part:
                found = value(effect)
                out[effect.dropped[0][1:]] = np.nan if found is None else found
        return out
