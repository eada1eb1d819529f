"""Forward passes of one model advanced layer by layer together: each layer's weights read once for all of them.

An ablation sweep runs many copies of one text through the same layers (each with a head dropped), and head
detection many texts; one pass at a time, each would read (and, from a GGUF file, dequantize) every layer's
weights again. ``Lockstep`` holds the passes at one layer: its weights are read once and kept while every pass
computes its attention there (``Checkpoint.kept``), and the rest of the layer (residuals, norms, MLP), which
works token by token, runs once on all their tokens stacked into one array, in slices within the element cap.
Each pass's rows come out as they would alone, to rounding (tests hold them to 1e-12 in float64).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from attnx.core.tensors import TensorName

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.result import AttentionResult
    from attnx.models import ForwardPass, Model

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
        rest run first on every pass's tokens stacked; the layer before's weights are let go."""
        self.model.checkpoint.forget()
        self.settle()
        return [forward.step(needs) for forward in self.passes]

    def finish(self) -> list[np.ndarray]:
        """Each pass's last hidden state (``ForwardPass.finish``): the layers left run together, then the final
        norm on their tokens stacked."""
        while any(forward.layer < self.model.layers for forward in self.passes):
            self.step()
        self.model.checkpoint.forget()
        self.settle()
        final = self.model.architecture.final
        return [rows for group in self.slices(self.passes) for rows in split(final(stacked(group)), group)]

    def settle(self) -> None:
        """Run the rest of the last layer of every pass that owes it, on their tokens stacked, a slice at a time."""
        owing: dict[int, list[ForwardPass]] = {}
        for forward in self.passes:
            owed = forward.owing()
            if owed is not None:
                owing.setdefault(owed[0], []).append(forward)
        after = self.model.architecture.after_attention
        for layer, passes in owing.items():
            for group in self.slices(passes):
                rows = [forward.owing() for forward in group]
                stream = np.concatenate([owed[1] for owed in rows if owed is not None])  # (Σ tokens, d_model)
                projected = np.concatenate([owed[2] for owed in rows if owed is not None])
                for forward, out in zip(group, split(after(layer, stream, projected), group), strict=True):
                    forward.settle(out)

    def slices(self, passes: Sequence[ForwardPass]) -> Iterator[list[ForwardPass]]:
        """``passes`` in consecutive groups whose tokens together keep the widest array of a layer's rest (the
        MLP's hidden layer) within the element cap; a pass is never split."""
        arch = self.model.architecture
        rows = self.model.limits.rows_per_chunk(max(arch.d_model, arch.d_ff))
        return batches(passes, lambda forward: len(forward.tokens), rows)


def stacked(passes: Sequence[ForwardPass]) -> np.ndarray:
    """The passes' streams, one under another: ``[Σ tokens, d_model]``."""
    return np.concatenate([forward.stream() for forward in passes])


def split(rows: np.ndarray, passes: Sequence[ForwardPass]) -> list[np.ndarray]:
    """``rows`` of the passes' tokens stacked, cut back into each pass's own."""
    return np.split(rows, np.cumsum([len(forward.tokens) for forward in passes])[:-1])


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
