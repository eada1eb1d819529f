"""What dropping heads does to the whole model: its last hidden state and, with an LM head, its next-token guesses.

A head is dropped by zeroing its output before W_o, in its own layer, and the forward pass goes on to
the model's last hidden state (after the final norm, as transformers' ``last_hidden_state``). That is
what transformers' ``head_mask`` did (a 0 on the head's weights after the softmax) while it existed.
Per token, the effect is the relative shift ``‖h' − h‖ / ‖h‖`` of the last hidden state and, where the
checkpoint has a language-model head, ``KL(p ‖ p')`` of its next-token distribution (nats) and
whether the most likely next token changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from attnx.errors import LimitError
from attnx.models import ForwardPass, Model
from attnx.models.tokenize import Encoded

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


def outputs(forward: ForwardPass, lm_head: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """What an effect compares, from a pass run to the end: the last hidden state and, with an LM head, the
    next-token log-probabilities (both float64)."""
    hidden = forward.finish()
    logp = log_softmax(forward.model.architecture.logits(hidden)) if lm_head else None
    return np.asarray(hidden, dtype=np.float64), logp


def ablations(
    model: Model,
    encoded: Encoded,
    sets: Iterable[tuple[Head, ...]] | None = None,
    *,
    layers: Iterable[int] | None = None,
    engine: str = "numpy",
    device: str = "auto",
    progress: Callable[[int, int], None] | None = None,
) -> Ablations:
    """The effect on ``model``'s outputs for ``encoded`` of dropping each set of heads in ``sets`` (default:
    every head of ``layers`` alone, layer by layer; all layers by default). The layers before an ablation's
    first dropped head run once, shared."""
    arch, n = model.architecture, len(encoded.ids)
    lm_head = arch.has_lm_head
    swept = range(model.layers) if layers is None else sorted(set(layers))
    todo = [tuple(sorted(s)) for s in sets] if sets is not None else [
        ((layer, head),) for layer in swept for head in range(arch.heads)
    ]  # fmt: skip
    if lm_head:  # the logits are the text's size; the output table is read in chunks within the same cap
        problem = model.limits.shape_problem((n, arch.vocab_size))
        if problem:
            raise LimitError(f"{model.checkpoint.name}: the next-token logits: {problem}")
    intact = model.run(encoded, engine=engine, device=device, layer=model.layers - 1)
    starts: list[ForwardPass] = []  # the pass about to enter each layer, intact so far
    for _ in range(model.layers):
        starts.append(intact.branch())
        intact.step()
    hidden, logp = outputs(intact, lm_head)
    norms = np.linalg.norm(hidden, axis=1)
    top = None if logp is None else logp.argmax(axis=1)
    effects = []
    for done, dropped in enumerate(todo):
        drop: dict[int, tuple[int, ...]] = {}
        for layer, head in dropped:
            drop[layer] = (*drop.get(layer, ()), head)
        after_hidden, after_logp = outputs(starts[min(drop)].branch(drop), lm_head)
        shift = np.linalg.norm(after_hidden - hidden, axis=1) / np.where(norms > 0, norms, 1.0)
        kl = top_after = None
        if logp is not None and after_logp is not None:
            kl, top_after = kl_divergence(logp, after_logp), after_logp.argmax(axis=1)
        effects.append(Effect(dropped, shift, kl, top, top_after))
        if progress is not None:
            progress(done + 1, len(todo))
    shown = sorted({int(i) for e in effects for ids in (e.top, e.top_after) if ids is not None for i in ids})
    labels = dict(zip(shown, model.tokenizer.labels(np.asarray(shown, dtype=np.intp)), strict=True))
    return Ablations(model.checkpoint.name, arch.name, encoded.tokens, model.layers, arch.heads, lm_head,
                     labels, tuple(effects), sweep=sets is None)  # fmt: skip
