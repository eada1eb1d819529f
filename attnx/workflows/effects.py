"""Ablations over a model: the forward pass run intact and with heads dropped, in lockstep, each effect measured.

``ablate`` checks the heads asked for against the model and calls ``ablations``, which runs the passes; the values
they return (``Ablations``, ``Effect``) and the measures over arrays live in ``attnx.analysis.effects``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from attnx.analysis.effects import Ablations, Effect, Head, log_softmax
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ChoiceError, LimitError, UsageError
from attnx.models import ForwardPass, Model, Progress
from attnx.models.audio import AudioInput
from attnx.models.tokenize import Encoded
from attnx.models.vision import ImageInput


def check_heads(model: Model, heads: Iterable[Head]) -> tuple[Head, ...]:
    """``heads`` as (layer, head) pairs from 0 (-1 the last layer or head), each once, in the order given; one the
    model lacks is a ChoiceError."""
    from attnx.core.counting import from_end, span

    layers, per_layer = model.layers, model.architecture.heads
    found: list[Head] = []
    for layer, head in heads:
        at_layer, at_head = from_end(layer, layers), from_end(head, per_layer)
        if at_layer is None or at_head is None:
            raise ChoiceError(f"L{layer}H{head} does not exist: the model has layers {span(layers)} and heads "
                              f"{span(per_layer)}")  # fmt: skip
        if (at_layer, at_head) not in found:
            found.append((at_layer, at_head))
    return tuple(found)


def ablate(
    model: Model,
    text: str | Encoded | AudioInput | ImageInput,
    heads: Iterable[Head] | None = None,
    *,
    layer: int | None = None,
    on: Placement = NUMPY,
    progress: Progress | None = None,
) -> Ablations:
    """The effect on the model's outputs for ``text`` (or its tokens, or the audio a speech model hears) of dropping
    ``heads`` together, or, without them, of each head alone (of ``layer`` only, when given)."""
    if heads is not None and layer is not None:
        raise UsageError("name the heads to drop together, or a layer whose heads drop one by one, not both")
    sets = [check_heads(model, heads)] if heads is not None else None
    if layer is not None:
        layer = model.check_layer(layer)
    encoded = model.encode(text) if isinstance(text, str) else text
    return ablations(model, encoded, sets, layers=None if layer is None else [layer], on=on,
                     progress=progress)  # fmt: skip


def outputs(forward: ForwardPass, lm_head: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """What an effect compares, from a pass run to the end: the last hidden state and, with an LM head, the
    next-token log-probabilities (both float64)."""
    hidden = forward.finish()
    logp = log_softmax(forward.model.architecture.logits(hidden)) if lm_head else None
    return np.asarray(hidden, dtype=np.float64), logp


@dataclass(frozen=True, eq=False)
class NextToken:
    """The intact model's next-token distribution p per token, which each ablation's is compared with."""

    p: np.ndarray  # [token, vocab]
    plogp: np.ndarray  # Σ p log p per token
    top: np.ndarray  # the most likely next token

    @classmethod
    def of(cls, logp: np.ndarray) -> NextToken:
        """p from the intact model's log-probabilities ``[token, vocab]``."""
        p = np.exp(logp)
        return cls(p, (p * logp).sum(axis=-1), logp.argmax(axis=-1))

    def compare(self, model: Model, hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """KL(p ‖ q) (nats) and q's most likely token for each row of ``hidden`` ``[copy · token, d_model]``, the
        last hidden states of copies of the text one under another, q their next-token distributions. The LM
        head is read once and its logits never held whole: Σ p log q = Σ p z − logsumexp(z) (Σ p = 1), both
        gathered block of vocabulary by block, the logsumexp online."""
        tokens = len(self.p)
        copies = len(hidden) // tokens
        peak, total = np.full(len(hidden), -np.inf), np.zeros(len(hidden))
        pz, best, top = np.zeros(len(hidden)), np.full(len(hidden), -np.inf), np.zeros(len(hidden), dtype=np.intp)
        for columns, block in model.architecture.logit_blocks(hidden):
            z = block if block.dtype == np.float64 and block.flags.writeable else block.astype(np.float64)
            width = z.shape[1]
            pz += np.einsum("tv,ctv->ct", self.p[:, columns], z.reshape(copies, tokens, width)).ravel()
            found = z.argmax(axis=1)
            high = z[np.arange(len(z)), found]
            better = high > best  # the first of equal maxima wins, as argmax over the whole row
            best, top = np.where(better, high, best), np.where(better, found + columns.start, top)
            raised = np.maximum(peak, high)
            z -= raised[:, None]  # the block is this loop's own: exponentiated in place
            total = total * np.exp(peak - raised) + np.exp(z, out=z).sum(axis=1)
            peak = raised
        kl = np.tile(self.plogp, copies) - (pz - (peak + np.log(total)))
        return kl, top


def batch_size(model: Model, tokens: int) -> int:
    """How many ablated copies of a ``tokens``-long text run together: as many as keep their streams, stacked,
    within the element cap (the rest of a layer and the LM head work in slices of that within the cap too)."""
    return max(1, model.limits.max_elements // max(1, tokens * model.architecture.d_model))


def ablations(
    model: Model,
    encoded: Encoded | AudioInput | ImageInput,
    sets: Iterable[tuple[Head, ...]] | None = None,
    *,
    layers: Iterable[int] | None = None,
    on: Placement = NUMPY,
    progress: Callable[[int, int], None] | None = None,
) -> Ablations:
    """The effect on ``model``'s outputs for ``encoded`` of dropping each set of heads in ``sets`` (default:
    every head of ``layers`` alone, layer by layer; all layers by default).

    The intact pass runs once; each ablation joins at its first dropped head's layer, branched from it there, and
    runs on with the others in lockstep (``attnx.models.lockstep``): every layer's weights are read once for all
    of them and its attention computed for all of them at once, in batches of ``batch_size`` ablations.
    ``progress`` counts the layers run, batch after batch, as each is done (a batch's last once its effects are
    measured)."""
    from attnx.models.lockstep import batches

    arch, n = model.architecture, len(encoded.tokens)
    lm_head = model.predicts
    swept = range(model.layers) if layers is None else sorted(set(layers))
    todo = [tuple(sorted(s)) for s in sets] if sets is not None else [
        ((layer, head),) for layer in swept for head in range(arch.heads)
    ]  # fmt: skip
    if lm_head:  # the logits are the text's size; the output table is read in chunks within the same cap
        problem = model.limits.shape_problem((n, arch.vocab_size))
        if problem:
            raise LimitError(f"{model.checkpoint.name}: the next-token logits: {problem}")
    intact: ForwardPass | None = model.run(encoded, on=on, layer=model.layers - 1)
    starts: list[ForwardPass] = []  # the intact pass about to enter each layer, kept as the first batch runs
    effects: list[Effect] = []
    plan = list(batches(todo, lambda _heads: 1, batch_size(model, n)))  # in order: a sweep's, layer by layer
    firsts = [0, *(min(min(dropping(heads)) for heads in batch) for batch in plan[1:])]  # where each batch starts
    total, done = sum(model.layers - first for first in firsts), 0

    def stepped(layer: int) -> None:  # a batch's layer run: its last one is counted once the batch is measured
        if progress is not None and layer < model.layers - 1:
            progress(done + layer + 1 - first, total)

    for batch, first in zip(plan, firsts, strict=True):
        last, after = run_batch(model, starts, [dropping(heads) for heads in batch], intact, stepped)
        if intact is not None and last is not None:  # the first batch ran the intact pass along
            intact, hidden = None, last
            norms = np.where((norm := np.linalg.norm(hidden, axis=1)) > 0, norm, 1.0)
            intact_next = NextToken.of(log_softmax(arch.logits(hidden))) if lm_head else None
        stacked = np.concatenate(after)
        shift = np.linalg.norm((stacked - np.tile(hidden, (len(batch), 1))).reshape(len(batch), n, -1), axis=2)
        shift /= norms
        if intact_next is None:
            effects.extend(Effect(heads, row, None, None, None) for heads, row in zip(batch, shift, strict=True))
        else:
            kl, top_after = (x.reshape(len(batch), n) for x in intact_next.compare(model, stacked))
            effects.extend(Effect(heads, moved, nats, intact_next.top, top) for heads, moved, nats, top in
                           zip(batch, shift, kl, top_after, strict=True))  # fmt: skip
        done += model.layers - first
        if progress is not None:
            progress(done, total)
    shown = sorted({int(i) for e in effects for ids in (e.top, e.top_after) if ids is not None for i in ids})
    labels = dict(zip(shown, model.tokenizer.labels(np.asarray(shown, dtype=np.intp)), strict=True))
    return Ablations(model.checkpoint.name, arch.name, encoded.tokens, model.layers, arch.heads, lm_head,
                     labels, tuple(effects), sweep=sets is None)  # fmt: skip


def dropping(heads: tuple[Head, ...]) -> dict[int, tuple[int, ...]]:
    """``heads`` as ``ForwardPass``'s ``drop``: each layer's heads."""
    drop: dict[int, tuple[int, ...]] = {}
    for layer, head in heads:
        drop[layer] = (*drop.get(layer, ()), head)
    return drop


def run_batch(
    model: Model,
    starts: list[ForwardPass],
    drops: Sequence[dict[int, tuple[int, ...]]],
    intact: ForwardPass | None,
    stepped: Callable[[int], None] | None = None,
) -> tuple[np.ndarray | None, list[np.ndarray]]:
    """The last hidden state of each ablation in ``drops``, each branched at its first dropped layer from the intact
    pass about to enter it, all advanced in lockstep. ``intact`` (the first batch): the intact pass, about to enter
    layer 0, runs along, ``starts`` filled with it layer by layer, and its own last hidden state comes first;
    later batches branch from ``starts`` (None first). ``stepped(layer)`` is called as each layer is run."""
    from attnx.models.lockstep import Lockstep

    joining: dict[int, list[int]] = {}
    for index, drop in enumerate(drops):
        joining.setdefault(min(drop), []).append(index)
    passes: dict[int, ForwardPass] = {}
    with Lockstep(model, [] if intact is None else [intact]) as together:
        for layer in range(0 if intact is not None else min(joining), model.layers):
            together.settle()
            if intact is not None:
                starts.append(intact.branch())
            joined = {index: starts[layer].branch(drops[index]) for index in joining.get(layer, ())}
            together.join(joined.values())
            passes.update(joined)
            together.advance()
            if stepped is not None:
                stepped(layer)
        order = {id(forward): at for at, forward in enumerate(together.passes)}
        hidden = [np.asarray(rows, dtype=np.float64) for rows in together.finish()]
    return (None if intact is None else hidden[0]), [hidden[order[id(passes[index])]] for index in range(len(drops))]
