"""What `attnx explore` shows and has computed: the cursor (query, head, layer, view), the input's settings, caches.

Nothing here imports Textual: the explorer's state moves and computes the same under a test as under the
app. Results come from ``attnx.engines.compute`` on the same specs the CLI builds, ``BLOCK`` queries at a
time: a long input costs the blocks the cursor has visited, each computed once per (layer, setting) and
kept, as `run` computes only the rows it shows. A trace is computed once per (layer, setting, query, head).

An encoder-decoder has three kinds of attention (``Kind``): the encoder's self-attention, the decoder's causal
self-attention and its cross-attention over the encoder's output; the explorer moves between them (``cycle_kind``),
each kind's layers, blocks and traces kept apart, and every other move stays within the kind's stack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from attnx.core.settings import LAYOUTS, SCALE_MODES
from attnx.core.tensors import MASK, SCALED, WEIGHTS, TensorName, V
from attnx.errors import AttnxError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.measures import Rollout
    from attnx.analysis.trace import Trace
    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec

# What the heatmap shows, in the order `v` cycles through them: the weights, the scaled scores, each key's
# share of the head's output by value (Kobayashi et al.), and the rollout through the layers so far. They are
# words for the user, not tensor names: the ``scores`` view draws the scaled scores.
VIEWS = ("weights", "scores", "value", "rollout")
BLOCK = 64  # queries computed together
# What a block keeps: every view is read from these.
NEEDS: frozenset[TensorName] = frozenset({WEIGHTS, SCALED, V, MASK})

Setting = tuple[tuple[str, Any], ...]  # an input's settings changed from the file's, in the order of CHANGES
Progress = Callable[[int, int], object]  # told (done, total) as blocks are computed
CHANGES = ("heads", "scale", "layout", "causal")  # the settings an input's keys change


@dataclass(frozen=True, eq=False)
class Kind:
    """One kind of attention of a model of several stacks the explorer moves to: the ``stack`` that holds it (by
    name), the ``attention`` as a person reads it (``cross-attention``) and as ``--attention`` names it (``flag``:
    ``cross``), how many ``layers`` the stack has and each layer's spec (``spec_of``). ``why`` says why the explorer
    cannot go there (the decoder, without a target to read); ``rolls``: whether the rollout view is offered (a stack's
    self-attention that reads no other stack: the encoder's); ``target``: whether its queries are the target's (a
    decoder's)."""

    stack: str
    attention: str
    flag: str
    layers: int
    spec_of: Callable[[int], AttentionSpec]
    why: str | None = None
    rolls: bool = False
    target: bool = False

    @property
    def label(self) -> str:
        """``decoder cross-attention``."""
        return f"{self.stack} {self.attention}"

    def pointer(self, layer: int) -> str:
        """The flags that point `run`, `trace` or `diff` at layer ``layer`` of this kind: ``--layer decoder:1
        --attention cross --target "…"``."""
        flags = f"--layer {self.stack}:{layer} --attention {self.flag}"
        return flags + (' --target "…"' if self.target else "")


@dataclass(frozen=True, eq=False)
class Change:
    """The query's row in one head under the previous setting and the current one.

    ``before`` is None when the head did not exist then (fewer heads); ``shift`` and ``largest`` are the L2
    norm and the largest entry of the change of the query's output row (projected when W_o is given).
    """

    label: str  # "heads 2 → 4"
    head: int
    before: np.ndarray | None  # (M,)
    after: np.ndarray  # (M,)
    shift: float
    largest: float


@dataclass
class Explorer:
    """The cursor and the caches of one exploring session.

    ``spec_of(layer)`` gives a layer's spec (a plain input has one layer, 0); ``layers`` how many there are. On a
    model of several kinds of attention (``kinds``, an encoder-decoder's), they are those of the kind under the
    cursor (``kind``, from 0), which ``cycle_kind`` changes; build one with ``Explorer.over``.
    ``options`` go to ``compute`` (engine, device, dtype); ``close`` lets go of what ``spec_of`` reads. Every
    move keeps the cursor in range. An input's settings (heads, scale, layout, causal) can change; the last
    change is remembered, to be compared with the current setting. ``pinned`` is a head kept beside the one
    under the cursor.
    """

    spec_of: Callable[[int], AttentionSpec]
    layers: int = 1
    source: str = "<input>"
    options: dict[str, Any] = field(default_factory=dict)
    query: int = 0
    head: int = 0
    layer: int = 0
    view: str = "weights"
    setting: Setting = ()
    previous: Setting | None = None  # the setting before the last change (None: nothing changed yet)
    last_change: str = ""  # "heads 2 → 4"
    pinned: int | None = None
    close: Callable[[], None] = field(default=lambda: None, repr=False)  # lets go of a checkpoint
    kinds: tuple[Kind, ...] = ()  # an encoder-decoder's kinds of attention (none: one kind, ``spec_of``'s)
    kind: int = 0  # the kind under the cursor, of ``kinds``
    # Every cache is keyed by the kind first: an encoder's layer 1 and a decoder's are two layers.
    _blocks: dict[tuple[int, int, Setting, int], AttentionResult] = field(default_factory=dict, repr=False)
    _shares: dict[tuple[int, int, Setting, int], np.ndarray] = field(default_factory=dict, repr=False)
    _averages: dict[tuple[int, int, Setting], np.ndarray] = field(default_factory=dict, repr=False)
    _rollouts: dict[tuple[int, int, Setting], Rollout] = field(default_factory=dict, repr=False)
    _traces: dict[tuple[int, int, Setting, int, int], Trace] = field(default_factory=dict, repr=False)
    _places: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)  # stack -> its last (layer, query)

    @classmethod
    def over(
        cls,
        kinds: tuple[Kind, ...],
        source: str,
        options: dict[str, Any],
        *,
        kind: int = 0,
        layer: int = 0,
        close: Callable[[], None] = lambda: None,
    ) -> Explorer:
        """An explorer of a model's ``kinds`` of attention, the cursor at layer ``layer`` of kind ``kind``."""
        start = kinds[kind]
        if start.why is not None:
            raise ConfigError(start.why)
        return cls(start.spec_of, start.layers, source, options, layer=layer, close=close, kinds=kinds, kind=kind)

    # -- the kind of attention under the cursor -------------------------------------------------------------

    @property
    def current(self) -> Kind | None:
        """The kind of attention under the cursor (None: a model or an input of one kind)."""
        return self.kinds[self.kind] if self.kinds else None

    @property
    def of_model(self) -> bool:
        """Whether the layers are a model's, which keep their own settings."""
        return self.layers > 1 or bool(self.kinds)

    @property
    def rolls(self) -> bool:
        """Whether the rollout view is offered: one kind of attention, or an encoder's."""
        return self.current is None or self.current.rolls

    def cycle_kind(self, step: int = 1) -> str | None:
        """Move to the next (``step`` 1) or previous (-1) kind of attention the explorer can go to, wrapping
        around; the layer and query stay where they were in the same stack, and come back to where they were in
        another (else the nearest). Returns None once moved, or why the cursor cannot move (one kind only; the
        decoder without a target). A spec the model refuses raises its AttnxError, the cursor left where it was."""
        if len(self.kinds) < 2:
            return "one kind of attention here: k moves between an encoder-decoder's three"
        count = len(self.kinds)
        for offset in range(1, count):
            index = (self.kind + step * offset) % count
            if self.kinds[index].why is None:
                self._enter(index)
                return None
        return next(kind.why for kind in self.kinds if kind.why is not None)

    def _enter(self, index: int) -> None:
        """Put the cursor on kind ``index``: its spec is made first (it may raise), then the cursor moves."""
        leaving, entering = self.kinds[self.kind], self.kinds[index]
        layer, query = self.layer, self.query
        if entering.stack != leaving.stack:
            layer, query = self._places.get(entering.stack, (layer, query))
        layer = min(max(layer, 0), entering.layers - 1)
        entering.spec_of(layer)  # a failure leaves the cursor where it was
        self._places[leaving.stack] = (self.layer, self.query)
        self.kind, self.spec_of, self.layers = index, entering.spec_of, entering.layers
        self.layer, self.query = layer, query
        if self.view == "rollout" and not entering.rolls:
            self.view = "weights"
        self._fit()

    # -- what is under the cursor --------------------------------------------------------------------------

    def _spec_of(self, kind: int) -> Callable[[int], AttentionSpec]:
        """Kind ``kind``'s specs by layer."""
        return self.kinds[kind].spec_of if self.kinds else self.spec_of

    def spec_at(self, setting: Setting, layer: int | None = None, kind: int | None = None) -> AttentionSpec:
        """Layer ``layer``'s spec (default: the cursor's) of kind ``kind`` (default: the cursor's) with ``setting``
        applied."""
        from attnx.analysis.diff import variant_spec

        spec = self._spec_of(self.kind if kind is None else kind)(self.layer if layer is None else layer)
        for name, value in setting:
            spec = variant_spec(spec, name, value)
        return spec

    @property
    def spec(self) -> AttentionSpec:
        """The spec under the cursor."""
        return self.spec_at(self.setting)

    @property
    def tokens(self) -> tuple[str, ...]:
        """The query tokens."""
        return self.spec_of(self.layer).tokens

    @property
    def key_tokens(self) -> tuple[str, ...]:
        """The key tokens."""
        return self.spec_of(self.layer).key_tokens

    @property
    def heads(self) -> int:
        """Heads under the current setting."""
        return self.spec.settings.heads

    def block(
        self, index: int, setting: Setting | None = None, layer: int | None = None, kind: int | None = None
    ) -> AttentionResult:
        """Queries ``index·BLOCK …`` (at most ``BLOCK`` of them) of layer ``layer`` (default: the cursor's) of
        kind ``kind`` (default: the cursor's), computed once per setting."""
        setting = self.setting if setting is None else setting
        layer = self.layer if layer is None else layer
        kind = self.kind if kind is None else kind  # read once: the key and the spec are of one kind
        key = (kind, layer, setting, index)
        if key not in self._blocks:
            from attnx.engines import compute

            spec = self.spec_at(setting, layer, kind)
            rows = range(index * BLOCK, min(len(spec.tokens), (index + 1) * BLOCK))
            self._blocks[key] = compute(spec.select_queries(rows), needs=NEEDS, **self.options)
        return self._blocks[key]

    @property
    def computed(self) -> list[tuple[int, int]]:
        """The blocks of the kind under the cursor computed so far under the current setting, as ``(layer,
        block)``."""
        blocks = list(self._blocks)  # a copy: a rollout computed beside the app adds blocks meanwhile
        return sorted((layer, b) for kind, layer, setting, b in blocks if (kind, setting) == (self.kind, self.setting))

    def _block_rows(self, lo: int, hi: int) -> list[tuple[int, slice]]:
        """The blocks that hold queries ``lo … hi − 1``, each with the slice of its rows they take."""
        return [(b, slice(max(lo, b * BLOCK) - b * BLOCK, min(hi, (b + 1) * BLOCK) - b * BLOCK))
                for b in range(lo // BLOCK, (hi - 1) // BLOCK + 1)]  # fmt: skip

    def _value_shares(self, index: int, layer: int) -> np.ndarray:
        """Each key's share by value of what the block's queries receive through each head, once."""
        key = (self.kind, layer, self.setting, index)
        if key not in self._shares:
            from attnx.analysis.measures import value_shares

            w_o = self.spec_at(self.setting, layer).w_o
            self._shares[key] = value_shares(self.block(index, layer=layer), None if w_o is None else w_o.weight)
        return self._shares[key]

    def matrix(self, lo: int, hi: int, view: str | None = None, layer: int | None = None) -> np.ndarray:
        """``[head, query, key]`` of queries ``lo … hi − 1`` of layer ``layer`` (default: the cursor's) as ``view``
        (default: the cursor's) shows them; the rollout has one "head"."""
        view = self.view if view is None else view
        layer = self.layer if layer is None else layer
        if view == "rollout":
            return self.rollout().final[lo:hi][None]
        parts = []
        for b, rows in self._block_rows(lo, hi):
            if view == "value":
                parts.append(self._value_shares(b, layer)[:, rows])
            else:
                shown = WEIGHTS if view == "weights" else SCALED  # a block keeps both
                array = self.block(b, layer=layer).tensor(shown)
                parts.append(np.asarray(array)[:, rows])
        return np.concatenate(parts, axis=1)

    def sinks(self, lo: int, hi: int) -> np.ndarray | None:
        """``[head, query]``: the learned sinks' shares of queries ``lo … hi − 1`` in the weights view, where the
        layer has sinks (else None)."""
        if self.view != "weights":
            return None
        parts = self._block_rows(lo, hi)
        shares = [self.block(b).sink_weights for b, _ in parts]
        if any(share is None for share in shares):
            return None
        return np.concatenate([np.asarray(share)[:, rows] for share, (_, rows) in zip(shares, parts, strict=True)],
                              axis=1)  # fmt: skip

    def blocked(self, lo: int, hi: int) -> np.ndarray | None:
        """``[query, key]``: True where the mask blocks a pair, for queries ``lo … hi − 1`` (None: no mask)."""
        parts = self._block_rows(lo, hi)
        masks = [self.block(b).mask for b, _ in parts]
        if any(mask is None for mask in masks):
            return None
        return ~np.concatenate([np.asarray(m, dtype=bool)[rows] for m, (_, rows) in zip(masks, parts, strict=True)])

    def result(self, query: int | None = None) -> AttentionResult:
        """The computed block that holds ``query`` (default: the cursor's)."""
        return self.block((self.query if query is None else query) // BLOCK)

    def window(self, rows: int) -> tuple[int, int]:
        """At most ``rows`` consecutive queries around the cursor's, as ``(lo, hi)``."""
        n = len(self.tokens)
        lo = min(max(self.query - rows // 2, 0), max(n - rows, 0))
        return lo, min(n, lo + rows)

    def rollout(self, progress: Progress | None = None, at: tuple[int, Setting] | None = None) -> Rollout:
        """Rollout through layers 0 … the cursor's (Abnar & Zuidema), once: every block of each of them is
        computed. ``at`` names the layer and setting instead of the cursor's (a rollout computed beside the
        cursor, which may move meanwhile); ``progress(done, total)`` is called after each block of the layers not
        averaged yet (it may raise to stop: what was computed is kept). Of the kind under the cursor, which rolls
        (``rolls``: an encoder's self-attention, or the only kind)."""
        from attnx.analysis.measures import rollout

        kind = self.kind
        layer, setting = (self.layer, self.setting) if at is None else at
        if (kind, layer, setting) not in self._rollouts:
            missing = [lay for lay in range(layer + 1) if (kind, lay, setting) not in self._averages]
            total, done = sum(self._block_count(lay, kind) for lay in missing), 0
            for lay in missing:
                parts = []
                for b in range(self._block_count(lay, kind)):  # heads averaged a block at a time: [query, key]
                    parts.append(np.asarray(self.block(b, setting, lay, kind).tensor(WEIGHTS)).mean(axis=0))
                    done += 1
                    if progress is not None:
                        progress(done, total)
                self._averages[kind, lay, setting] = np.concatenate(parts, axis=0)
            averages = (self._averages[kind, lay, setting] for lay in range(layer + 1))
            self._rollouts[kind, layer, setting] = rollout(averages, self._spec_of(kind)(layer).tokens)
        return self._rollouts[kind, layer, setting]

    def rollout_needs(self) -> int:
        """How many blocks the rollout under the cursor still needs computed (0: kept, or every block at hand)."""
        kind = self.kind
        if (kind, self.layer, self.setting) in self._rollouts:
            return 0
        return sum(
            (kind, lay, self.setting, b) not in self._blocks
            for lay in range(self.layer + 1)
            if (kind, lay, self.setting) not in self._averages
            for b in range(self._block_count(lay, kind))
        )

    def _block_count(self, layer: int, kind: int) -> int:
        """How many blocks hold layer ``layer``'s queries, of kind ``kind``."""
        return -(-len(self._spec_of(kind)(layer).tokens) // BLOCK)

    @property
    def trace(self) -> Trace:
        """The trace of the query and head under the cursor (its row alone is computed), once."""
        key = (self.kind, self.layer, self.setting, self.query, self.head)
        if key not in self._traces:
            from attnx.analysis.trace import build_trace
            from attnx.engines import compute

            row = compute(self.spec.select_queries([self.query]), **self.options)
            self._traces[key] = build_trace(row, heads=(self.head,), terms=None, keys=8)
        return self._traces[key]

    def change(self) -> Change | None:
        """The query's weights in the head under the cursor before and after the last change (None: none)."""
        if self.previous is None:
            return None
        from attnx.analysis.diff import shift

        local = self.query % BLOCK
        before, after = self.block(self.query // BLOCK, self.previous), self.result()
        weights_before, weights_after = before.tensor(WEIGHTS), after.tensor(WEIGHTS)  # a block keeps its weights

        def out(result: AttentionResult) -> np.ndarray:
            return np.asarray(result.projected if result.projected is not None else result.output)[[local]]

        moved = shift(out(before), out(after), (0, 1))
        row = np.asarray(weights_before)[self.head, local] if self.head < before.heads else None
        return Change(self.last_change, self.head, row, np.asarray(weights_after)[self.head, local],
                      moved.l2_overall, moved.max_abs_overall)  # fmt: skip

    # -- moves ----------------------------------------------------------------------------------------------

    def move_query(self, step: int) -> None:
        """The next (``step`` 1) or previous (-1) query, stopping at the ends."""
        self.go_to(self.query + step)

    def go_to(self, query: int) -> None:
        """Query ``query`` (from 0), kept in range."""
        self.query = min(max(query, 0), len(self.tokens) - 1)

    def move_head(self, step: int) -> None:
        """The next or previous head, wrapping around."""
        self.head = (self.head + step) % self.heads

    def move_layer(self, step: int) -> None:
        """The next or previous layer, stopping at the ends; the head and query stay where they fit."""
        self.layer = min(max(self.layer + step, 0), self.layers - 1)
        self._fit()

    def _fit(self) -> None:
        heads = self.heads
        self.head = min(self.head, heads - 1)
        self.query = min(self.query, len(self.tokens) - 1)
        if self.pinned is not None and self.pinned >= heads:
            self.pinned = None

    def cycle_view(self) -> None:
        """Show the next of ``VIEWS`` in the heatmap (the rollout where the kind under the cursor rolls)."""
        views = VIEWS if self.rolls else tuple(view for view in VIEWS if view != "rollout")
        self.view = views[(views.index(self.view) + 1) % len(views)]

    def pin(self) -> None:
        """Keep the head under the cursor beside whichever head the cursor moves to; again: let it go."""
        self.pinned = None if self.pinned == self.head else self.head

    def change_setting(self, name: str) -> str | None:
        """Move setting ``name`` (one of ``CHANGES``) of an input to its next value the input can take, and
        remember the setting before. Returns what changed (``"heads 2 → 4"``), or None when nothing can: a
        model's layers keep their settings, and an input may take one head count only. A setting the engine
        refuses (an overflow) raises its AttnxError, the setting left as it was."""
        if self.of_model:
            return None
        now, *others = self.values(name)
        for value in others:
            changed = dict(self.setting) | {name: value}
            setting = tuple((key, changed[key]) for key in CHANGES if key in changed)
            try:
                self.spec_at(setting)
            except ConfigError:
                continue
            before = (self.previous, self.setting, self.last_change, self.head, self.pinned)
            self.previous, self.setting = self.setting, setting
            self.last_change = f"{name} {_shown(now)} → {_shown(value)}"
            self._fit()
            try:
                self.result()  # an input may overflow under another scale: the setting stays as it was
            except AttnxError:
                self.previous, self.setting, self.last_change, self.head, self.pinned = before
                raise
            return self.last_change
        return None

    def values(self, name: str) -> list[Any]:
        """Setting ``name``'s value under the cursor, then the values after it that the setting cycles through."""
        settings = self.spec.settings
        now = {"heads": settings.heads, "scale": settings.scale, "layout": settings.layout, "causal": settings.causal}
        return [now[name], *self._next_values(name, now[name])]

    def _next_values(self, name: str, now: Any) -> list[Any]:
        """The values after ``now`` that setting ``name`` cycles through, wrapping around, ``now`` left out."""
        if name == "causal":
            return [not now]
        if name == "heads":
            width = self.spec.d_model
            options: tuple[Any, ...] = tuple(h for h in range(1, width + 1) if width % h == 0)
        else:
            options = SCALE_MODES if name == "scale" else LAYOUTS
        start = options.index(now) + 1 if now in options else 0
        return [v for v in options[start:] + options[:start] if v != now]

    def find(self, text: str, start: int | None = None) -> int | None:
        """The first query from ``start`` (default: after the cursor, wrapping) whose token contains ``text``
        (case-insensitive), or None."""
        tokens = self.tokens
        first = self.query + 1 if start is None else start
        wanted = text.strip().lower()
        for offset in range(len(tokens)):
            i = (first + offset) % len(tokens)
            if wanted and wanted in tokens[i].strip().lower():
                return i
        return None


def _shown(value: Any) -> str:
    """A setting's value as the status line says it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
