"""Ablations in an encoder-decoder: a head of any of its attentions dropped, the effect measured on the decoder.

The encoder reads the source and the decoder the target (teacher-forced: its start token, then the target's tokens
but the last), as ``attnx.workflows.layers.site_spec`` runs them. A dropped encoder head changes the memory every
cross-attention reads; a dropped decoder head (its causal self-attention or its cross-attention, one attention of
the layer: ``ForwardPass``'s ``drop`` is keyed by attention) changes the decoder from that attention on. Per target
position the effect is the shift of the decoder's last hidden state, the KL of its next-token distribution and the
change of the log-probability of the token that follows in the target. The passes of a batch run in lockstep
(``attnx.models.lockstep``), each ablation branched from the intact pass at its first dropped attention.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from attnx.analysis.effects import Part, SiteHead, TargetAblations, TargetEffect, kl_divergence, log_softmax
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ChoiceError, LimitError, UsageError
from attnx.models import ForwardPass, Model, Progress
from attnx.models.audio import AudioInput
from attnx.models.stacks import AttentionKind, Memory, Stack
from attnx.models.tokenize import Encoded
from attnx.models.vision import ImageInput

Drop = dict[tuple[int, int], tuple[int, ...]]  # (layer, which) -> heads


@dataclass(frozen=True)
class HeadName:
    """A head as a person names it: ``where`` (a stack, ``enc``, or an attention kind, ``cross``; None: unsaid), a
    layer and a head (from 0; -1 the last)."""

    where: str | None
    layer: int
    head: int

    def __str__(self) -> str:
        return f"{self.where + ':' if self.where else ''}L{self.layer}H{self.head}"


KINDS = {member.value.replace(" ", "-"): member for member in AttentionKind}


def parts_of(model: Model) -> tuple[Part, ...]:
    """The model's attentions, stack by stack, each layer's in order: an encoder-decoder's encoder self-attention,
    its decoder's causal self-attention and its cross-attention."""
    kinds = [attention.kind for stack in model.stacks for attention in stack.attentions]
    found = []
    for stack in model.stacks:
        for which, attention in enumerate(stack.attentions):
            alone = kinds.count(attention.kind) == 1 and attention.kind is AttentionKind.CROSS
            short = "cross" if alone else stack.name[:3]
            heads = stack.heads or model.architecture.heads
            found.append(Part(stack.name, attention.kind.value, which, stack.layers, heads, short))
    return tuple(found)


def find_part(model: Model, where: str | None, kind: AttentionKind | None) -> int:
    """The part (``parts_of``) that ``where`` (a stack by its name or its start, or an attention kind) and ``kind``
    (``--attention``; None: the layer's first attention, or the kind ``where`` names) point at; a ChoiceError naming
    what there is."""
    parts = parts_of(model)
    stacks = [s.name for s in model.stacks]
    name = None if where is None else where.strip().lower()
    if name in KINDS:
        named = KINDS[name]
        if kind is not None and kind is not named:
            raise ChoiceError(f"{where!r} is a {named.label}, not the {kind.label} --attention names")
        kind, name = named, None
    if name is None:
        holding = [s for s in stacks if kind is None or any(p.stack == s and p.kind == kind.value for p in parts)]
        if not holding:
            held = ", ".join(dict.fromkeys(p.kind for p in parts))
            raise ChoiceError(f"the model has no {kind.label if kind else 'attention'}; it has {held}")
        stack = holding[0]
    else:
        found = [s for s in stacks if s == name] or [s for s in stacks if s.startswith(name)]
        if len(found) != 1:
            raise ChoiceError(f"the model has no stack {where!r}; its stacks: {', '.join(stacks)} (or an attention: "
                              f"{', '.join(KINDS)})")  # fmt: skip
        (stack,) = found
    for index, part in enumerate(parts):
        if part.stack == stack and (part.kind == kind.value if kind else part.which == 0):
            return index
    held = ", ".join(p.kind + "-attention" for p in parts if p.stack == stack)
    raise ChoiceError(f"the {stack}'s layers hold no {kind.label if kind else 'attention'}; they hold {held}")


def check_site_heads(
    model: Model, heads: Iterable[HeadName], kind: AttentionKind | None = None
) -> tuple[SiteHead, ...]:
    """``heads`` as (part, layer, head) from 0 (-1 the last layer or head), each once, in the order given; one the
    model lacks is a ChoiceError."""
    from attnx.core.counting import from_end, span

    parts = parts_of(model)
    found: list[SiteHead] = []
    for name in heads:
        try:
            part = find_part(model, name.where, kind)
        except ChoiceError as exc:
            raise ChoiceError(f"{name}: {exc}") from None
        layers, per_layer = parts[part].layers, parts[part].heads
        at_layer, at_head = from_end(name.layer, layers), from_end(name.head, per_layer)
        if at_layer is None or at_head is None:
            raise ChoiceError(f"{name} does not exist: the {parts[part].title} has layers {span(layers)} and heads "
                              f"{span(per_layer)}")  # fmt: skip
        if (part, at_layer, at_head) not in found:
            found.append((part, at_layer, at_head))
    return tuple(found)


def next_tokens(model: Model, target: str, decoder: Encoded) -> np.ndarray:
    """The token that follows each position of the decoder's input in ``target`` (teacher forcing's labels: the
    target's own tokens, as transformers' ``labels``); -1 where none is known (after a prompt the model says)."""
    if model.architecture.prompt() is None:
        labels = np.asarray(model.encode(target).ids, dtype=np.intp)
        if len(labels) == len(decoder.ids):
            return labels
    return following(decoder.ids)


def following(ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Each token's successor in ``ids``, -1 after the last."""
    found = np.asarray(ids, dtype=np.intp)
    return np.concatenate([found[1:], np.asarray([-1], dtype=np.intp)])


def ablate_target(
    model: Model,
    source: str | Encoded | AudioInput | ImageInput,
    target: str | Encoded,
    heads: Iterable[HeadName] | None = None,
    *,
    layer: int | None = None,
    stack: str | None = None,
    kind: AttentionKind | None = None,
    next_ids: np.ndarray | None = None,
    written: tuple[int, ...] = (),
    on: Placement = NUMPY,
    progress: Progress | None = None,
) -> TargetAblations:
    """The effect on the decoder of an encoder-decoder, the encoder reading ``source`` and the decoder ``target``
    (teacher-forced; or its tokens, ``model.encode_target``, with ``next_ids`` the token after each), of dropping
    ``heads`` together, or, without them, of each head alone: of every attention, or of the one that ``stack`` (a
    stack or a kind, as in ``HeadName``) and ``kind`` point at, of ``layer`` only when given."""
    model.encoder_decoder("dropping heads and measuring the next target token needs an encoder-decoder")
    if heads is not None and (layer is not None or stack is not None):
        raise UsageError("name the heads to drop together, or a layer whose heads drop one by one, not both")
    parts = parts_of(model)
    sets: list[tuple[SiteHead, ...]] | None = None
    if heads is not None:
        sets = [check_site_heads(model, heads, kind)]
        todo = sets
    else:
        pointed = stack is not None or kind is not None or layer is not None
        chosen = [find_part(model, stack, kind)] if pointed else range(len(parts))
        todo = []
        for part in chosen:
            layers: Sequence[int] = range(parts[part].layers)
            if layer is not None:
                layers = [model.check_layer(layer, next(s for s in model.stacks if s.name == parts[part].stack))]
            todo += [((part, at, h),) for at in layers for h in range(parts[part].heads)]
    words = model.encode_target(target) if isinstance(target, str) else target
    if next_ids is None:
        next_ids = next_tokens(model, target, words) if isinstance(target, str) else following(words.ids)
    return target_ablations(model, source, words, next_ids, todo, sweep=sets is None, written=written, on=on,
                            progress=progress)  # fmt: skip


def target_ablations(
    model: Model,
    source: str | Encoded | AudioInput | ImageInput,
    words: Encoded,
    next_ids: np.ndarray,
    todo: Sequence[tuple[SiteHead, ...]],
    *,
    sweep: bool,
    written: tuple[int, ...] = (),
    on: Placement = NUMPY,
    progress: Progress | None = None,
) -> TargetAblations:
    """``ablate_target``'s runs: per batch of ablations, the encoder's intact pass and those that drop encoder heads
    in lockstep, then the decoder's intact pass and every ablation's decoder pass in lockstep."""
    from attnx.workflows.effects import batch_size

    encoder, decoder = model.encoder_decoder("ablation on the decoder needs an encoder-decoder")
    parts, arch = parts_of(model), model.architecture
    encoded = model.encode(source) if isinstance(source, str) else source
    n = len(words.ids)
    problem = model.limits.shape_problem((n, arch.vocab_size))
    if problem:
        raise LimitError(f"{model.checkpoint.name}: the next-token logits: {problem}")
    size = batch_size(model, max(n, len(encoded.tokens)))
    plan = [list(todo[at : at + size]) for at in range(0, len(todo), size)] or [[]]
    total = len(plan) * (encoder.layers + decoder.layers)
    effects: list[TargetEffect] = []
    rows = np.arange(n)
    known = next_ids >= 0
    for index, batch in enumerate(plan):
        drops = [split_drops(parts, heads, encoder, decoder) for heads in batch]
        memory, memories = run_stack(model, model.run(encoded, on=on, stack=encoder, layer=encoder.layers - 1),
                                     [enc for enc, _ in drops if enc])  # fmt: skip
        intact_memory = Memory(memory, tuple(encoded.tokens))
        read = iter(memories)
        jobs: list[Drop | ForwardPass] = []
        for enc, dec in drops:
            if enc:
                fresh = model.run(words, on=on, stack=decoder, memory=Memory(next(read), intact_memory.tokens),
                                  layer=decoder.layers - 1)  # fmt: skip
                jobs.append(fresh.branch(dec))
            else:
                jobs.append(dec)
        if progress is not None:
            progress(index * (encoder.layers + decoder.layers) + encoder.layers, total)
        start = model.run(words, on=on, stack=decoder, memory=intact_memory, layer=decoder.layers - 1)
        hidden, after = run_stack(model, start, jobs)
        if index == 0:
            logp_all = log_softmax(arch.logits(hidden))
            top = logp_all.argmax(axis=-1)
            logp = np.where(known, logp_all[rows, np.where(known, next_ids, 0)], np.nan)
            norms = np.where((norm := np.linalg.norm(hidden, axis=1)) > 0, norm, 1.0)
        for heads, moved in zip(batch, after, strict=True):
            q = log_softmax(arch.logits(moved))
            now = np.where(known, q[rows, np.where(known, next_ids, 0)], np.nan)
            shift = np.linalg.norm(moved - hidden, axis=1) / norms
            kl = kl_divergence(logp_all, q)
            effects.append(TargetEffect(heads, shift, kl, now, now - logp, top, q.argmax(axis=-1)))
        if progress is not None:
            progress((index + 1) * (encoder.layers + decoder.layers), total)
    shown = sorted({int(i) for ids in (top, next_ids[known], *(e.top_after for e in effects)) for i in ids})
    labels = dict(zip(shown, model.tokenizer.labels(np.asarray(shown, dtype=np.intp)), strict=True))
    return TargetAblations(model.checkpoint.name, arch.name, tuple(encoded.tokens), tuple(words.tokens), next_ids,
                           logp, top, parts, labels, tuple(effects), sweep=sweep, written=written)  # fmt: skip


def split_drops(parts: Sequence[Part], heads: Iterable[SiteHead], encoder: Stack, decoder: Stack) -> tuple[Drop, Drop]:
    """``heads`` as the encoder's and the decoder's ``drop``: (layer, which attention) -> heads."""
    found: dict[str, Drop] = {encoder.name: {}, decoder.name: {}}
    for part, layer, head in heads:
        drop = found[parts[part].stack]
        at = (layer, parts[part].which)
        drop[at] = (*drop.get(at, ()), head)
    return found[encoder.name], found[decoder.name]


def run_stack(
    model: Model, intact: ForwardPass, jobs: Sequence[Drop | ForwardPass]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The output of the stack ``intact`` runs through (about to enter its first attention), intact, and with each
    of ``jobs``: a ``drop``, branched from the intact pass at its first dropped attention, or a pass of its own (its
    memory another), joining at the first; all advanced in lockstep, attention by attention (float64)."""
    from attnx.models.lockstep import Lockstep

    stack = intact.stack
    per_layer = len(stack.attentions)
    joining: dict[int, list[int]] = {}
    for index, job in enumerate(jobs):
        first = 0 if isinstance(job, ForwardPass) else min(layer * per_layer + which for layer, which in job)
        joining.setdefault(first, []).append(index)
    passes: dict[int, ForwardPass] = {}
    with Lockstep(model, [intact]) as together:
        for _ in range(stack.layers * per_layer):
            together.settle()
            at = intact.layer * per_layer + intact.which
            joined = {i: job if isinstance(job := jobs[i], ForwardPass) else intact.branch(job)
                      for i in joining.get(at, ())}  # fmt: skip
            together.join(joined.values())
            passes.update(joined)
            together.advance()
        order = {id(forward): i for i, forward in enumerate(together.passes)}
        hidden = [np.asarray(rows, dtype=np.float64) for rows in together.finish()]
    return hidden[0], [hidden[order[id(passes[i])]] for i in range(len(jobs))]
