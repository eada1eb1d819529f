"""The model view: every head of every layer of a model on one text, with its pattern label and entropy."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from attnx.analysis.heads import HeadStats, head_stats
from attnx.core.measures import HEADS, Rule
from attnx.core.result import AttentionResult


@dataclass(frozen=True, eq=False)
class ModelView:
    """``layers[l][h]``: the statistics of head ``h`` of layer ``l`` (both 0-based), as `attnx heads` has them.

    The other fields say what ran: the model's folder and family, the tokens (the queries'; ``key_tokens``, the
    keys', differ for a cross-attention: the source's), and the first layer's heads, d_k, scale, engine, device and
    dtype; ``stack`` and ``kind`` which stack and which of its attentions (``AttentionKind.label``: ``self``,
    ``causal self``, ``cross``), ``rule`` the measures the heads were scored and labelled by (HEADS; CROSS for a
    cross-attention), ``written`` the query positions the decoder wrote itself (``--generate``).
    """

    model: str
    architecture: str
    tokens: tuple[str, ...]
    layers: tuple[tuple[HeadStats, ...], ...]
    heads: int
    d_k: int
    scale: float
    scale_mode: str
    engine: str
    device: str
    dtype: str
    key_tokens: tuple[str, ...] = ()
    stack: str = ""
    kind: str = "self"
    rule: Rule = HEADS
    written: tuple[int, ...] = ()
    stacks: int = 1  # the model's stacks: with several, the header names which one this is

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per score (keyed as ``HeadStats.scores``), the fewest and the most queries a layer's score is the mean
        of: the same on every layer unless the layers see different keys (a sliding window on some)."""
        found: dict[str, list[int]] = {}
        for stats in self.layers:
            for key, count in (stats[0].counts if stats else {}).items():
                found.setdefault(key, []).append(count)
        return {key: (min(counts), max(counts)) for key, counts in found.items()}


def model_view(
    results: Iterable[AttentionResult],
    *,
    model: str,
    architecture: str,
    sinks: Sequence[int] = (0,),
    rule: Rule = HEADS,
    stack: str = "",
    kind: str = "self",
    written: Sequence[int] = (),
    stacks: int = 1,
) -> ModelView:
    """Head statistics of each layer's result, taken in order, scored by ``rule``; no result is kept once read
    (``sinks``: the keys whose weight counts as a sink's: key 0, and the model's special tokens where the caller
    gives them; for a cross-attention, the source's special tokens). ``stack``, ``kind`` and ``written`` say what
    the results are of, ``stacks`` how many the model has (see ``ModelView``)."""
    layers: list[tuple[HeadStats, ...]] = []
    about: dict[str, Any] = {}  # ModelView fields, read from the first layer's result
    for result in results:
        if not about:
            about = {name: getattr(result, name) for name in ("tokens", "key_tokens", "heads", "d_k", "scale",
                                                              "scale_mode", "engine", "device", "dtype")}  # fmt: skip
        layers.append(head_stats(result, sinks, rule))
    if not layers:
        raise ValueError("a model view needs at least one layer")
    return ModelView(model=model, architecture=architecture, layers=tuple(layers), stack=stack, kind=kind,
                     rule=rule, written=tuple(written), stacks=stacks, **about)  # fmt: skip
