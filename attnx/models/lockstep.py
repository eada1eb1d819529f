"""Forward passes of one model advanced layer by layer together: each layer's weights read once for all of them.

An ablation sweep runs many copies of one text through the same layers (each with a head dropped), and head
detection many texts; one pass at a time, each would read (and, from a GGUF file, dequantize) every layer's
weights again. ``Lockstep`` holds the passes at one layer: its weights are read once and kept while every pass
computes its attention there (``Checkpoint.kept``), and the rest of the layer (residuals, norms, MLP), which
works token by token, runs once on all their tokens stacked into one array, in slices within the element cap.
The attention goes to the engine for all the passes at once (``compute_many``; an ablation's copies of one text,
``advance``: ``compute_copies``): on the NumPy engine, copies of a text are stacked, each projection one matmul
over all their tokens, where one at a time each paid about 1 ms of Python and small matmuls at 11 tokens.
Each pass's rows come out as they would alone, to rounding (tests hold them to 1e-12 in float64).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from attnx.core.inputs import ProjectedInputs
from attnx.core.tensors import PROJECTED, TensorName
from attnx.engines.arrays import Array, arrays_of, host
from attnx.engines.core import Engine
from attnx.engines.placement import Placement

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.result import AttentionResult
    from attnx.models import ForwardPass, Model
    from attnx.models.stacks import Site

T = TypeVar("T")


class Lockstep:
    """Passes of ``model``, each about to enter the same layer, stepped together (a context manager: within it, the
    current layer's weights are kept). Passes may ``join`` between steps, branched where the others stand."""

    def __init__(self, model: Model, passes: Iterable[ForwardPass] = ()) -> None:
        self.model = model
        self.passes: list[ForwardPass] = list(passes)

    def __enter__(self) -> Lockstep:
        self._kept = self.model.checkpoint.kept()
        self._kept.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._kept.__exit__(kind, error, trace)

    def join(self, passes: Iterable[ForwardPass]) -> None:
        """Add ``passes``, about to enter the layer the others are about to enter."""
        self.passes.extend(passes)

    def step(self, needs: Collection[TensorName] = ()) -> list[AttentionResult]:
        """Every pass's attention at the current layer (``ForwardPass.step(needs)``), in order, the last layer's
        rest run first on every pass's tokens stacked; the layer before's weights are let go. The passes'
        attention problems go to the engine together (``compute_many``: copies of a text, alike, in one go)."""
        self.model.checkpoint.forget()
        self.settle()
        wanted = {PROJECTED, *needs}
        placements: dict[Placement, list[int]] = {}
        for index, forward in enumerate(self.passes):
            placements.setdefault(forward.on, []).append(index)
        results: dict[int, AttentionResult] = {}
        for on, indices in placements.items():
            specs = [self.passes[index].spec() for index in indices]
            found = on.compute_many(specs, needs=wanted)
            results.update(zip(indices, found, strict=True))
        for index, forward in enumerate(self.passes):
            forward.take(results[index].projected)
        return [results[index] for index in range(len(self.passes))]

    def advance(self) -> None:
        """Every pass's attention at the current layer, as ``step`` computes it, but only what the next layer needs
        kept: its projected output (an ablation's passes ask no more). Copies of one text on the NumPy engine go
        to it together (``compute_copies``), their inputs made from their streams stacked: the attention's input
        is made token by token (a norm), as the rest of a layer is."""
        self.model.checkpoint.forget()
        self.settle()
        for copies in self.copies():
            xs = self.inputs(copies) if len(copies) > 1 and copies[0].on.loaded().stacks else None
            if xs is None:
                for forward in copies:
                    forward.step()
                continue
            first = copies[0]
            dropped = [forward.dropped() for forward in copies]
            found = first.on.compute_copies(first.spec(), xs, dropped)
            for forward, projected in zip(copies, found, strict=True):
                forward.take(projected)

    def inputs(self, copies: Sequence[ForwardPass]) -> np.ndarray | None:
        """The attention's input X of each of ``copies`` at their layer, ``[copy, token, d_in]``, made at once from
        their streams stacked; None where the layer's attention is not projected from X alone."""
        first, n, model = copies[0], len(copies[0].tokens), self.model
        at = first.site()
        spec = model.architecture.site_spec(at, stacked(copies), first.tokens * len(copies),
                                            model.source(at.layer, at))  # fmt: skip
        inputs = spec.inputs
        if not isinstance(inputs, ProjectedInputs) or inputs.x_kv is not None:
            return None
        return inputs.x.reshape(len(copies), n, -1)

    def copies(self) -> Iterator[list[ForwardPass]]:
        """The passes in groups of copies of one text at one attention of one stack on one engine (branches of one
        pass: the same memory, for a cross-attention), each group's streams within the element cap (``slices``)."""
        found: dict[tuple[object, ...], list[ForwardPass]] = {}
        for forward in self.passes:
            where = (forward.stack.name, forward.layer, forward.which, id(forward.memory))
            key = (*where, forward.tokens, forward.special_keys, forward.on)
            found.setdefault(key, []).append(forward)
        for group in found.values():
            yield from self.slices(group)

    def finish(self) -> list[np.ndarray]:
        """Each pass's last hidden state (``ForwardPass.finish``): the layers left run together, then the final
        norm of each pass's stack on their tokens stacked."""
        while any(forward.layer < forward.stack.layers for forward in self.passes):
            self.advance()
        self.model.checkpoint.forget()
        self.settle()
        final = self.model.architecture.stack_final
        found: dict[int, np.ndarray] = {}
        stacks: dict[str, list[ForwardPass]] = {}
        for forward in self.passes:
            stacks.setdefault(forward.stack.name, []).append(forward)
        for passes in stacks.values():
            for group in self.slices(passes):
                for forward, rows in zip(group, split(final(group[0].stack, stacked(group)), group), strict=True):
                    found[id(forward)] = host(rows)
        return [found[id(forward)] for forward in self.passes]

    def settle(self) -> None:
        """Run the rest of the last layer of every pass that owes it, on their tokens stacked (where their engine
        keeps them: ``ForwardPass.arrays``), a slice at a time."""
        owing: dict[tuple[str, int, int, Engine], list[ForwardPass]] = {}
        sites: dict[tuple[str, int, int, Engine], Site] = {}
        for forward in self.passes:
            owed = forward.owing()
            if owed is not None:
                at = owed[0]
                key = (at.stack.name, at.layer, at.which, forward.arrays)
                owing.setdefault(key, []).append(forward)
                sites.setdefault(key, at)  # the rest of an attention reads no memory: any pass's site serves
        after = self.model.architecture.site_after
        for key, passes in owing.items():
            for group in self.slices(passes):
                rows = [forward.owing() for forward in group]
                stream = key[3].concatenate([owed[1] for owed in rows if owed is not None])
                projected = np.concatenate([owed[2] for owed in rows if owed is not None])
                for forward, out in zip(group, split(after(sites[key], stream, projected), group), strict=True):
                    forward.settle(out)

    def slices(self, passes: Sequence[ForwardPass]) -> Iterator[list[ForwardPass]]:
        """``passes`` in consecutive groups whose tokens together keep the widest array of a layer's rest (the
        MLP's hidden layer) within the element cap; a pass is never split."""
        arch = self.model.architecture
        rows = self.model.limits.rows_per_chunk(max(arch.d_model, arch.d_ff))
        return batches(passes, lambda forward: len(forward.tokens), rows)


def stacked(passes: Sequence[ForwardPass]) -> Array:
    """The passes' streams, one under another, where their engine keeps them: ``[Σ tokens, d_model]``."""
    return passes[0].arrays.concatenate([forward.current() for forward in passes])


def split(rows: Array, passes: Sequence[ForwardPass]) -> list[Array]:
    """``rows`` of the passes' tokens stacked, cut back into each pass's own."""
    return arrays_of(rows).split(rows, [len(forward.tokens) for forward in passes])


def batches(items: Iterable[T], size: Callable[[T], int], budget: int) -> Iterator[list[T]]:
    """``items`` in order, in consecutive batches whose ``size`` adds up to at most ``budget`` (an item larger than
    the budget alone)."""
    batch: list[T] = []
    held = 0
    for item in items:
        if batch and held + size(item) > budget:
            yield batch
            batch, held = [], 0
        batch.append(item)
        held += size(item)
    if batch:
        yield batch
