"""Masking: which keys each query may attend, one value that engines, analyses and renderers ask."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.settings import AttentionSettings


@dataclass(frozen=True, eq=False)
class Masking:
    """What a problem's mask is and what it hides, from its settings and the arrays an input gives.

    ``causal``: the query at position i sees keys j ≤ i + ``shift``; with ``shift`` 0 the mask is aligned to
    the top-left corner, as PyTorch's ``is_causal`` aligns it when there are more or fewer queries than keys
    (a diagnosis shifts it to name a mask one key late, one early, or aligned bottom-right). ``window``: keys
    i + shift − window < j ≤ i + shift, a causal edge included. ``explicit`` (``[query, key]``, True = may
    attend): a mask an input gives, its rows the spec's query rows. ``padding`` (``[key]``, True = padding):
    keys no query sees. A new kind of mask is a field here and its answers below: every engine, diagnosis and
    renderer asks these, and none reads the settings that make it (a test checks it).
    """

    causal: bool = False
    window: int | None = None
    explicit: np.ndarray | None = None
    padding: np.ndarray | None = None
    shift: int = 0

    @classmethod
    def of(
        cls, settings: AttentionSettings, explicit: np.ndarray | None = None, padding: np.ndarray | None = None
    ) -> Masking:
        """The masking of a problem with ``settings`` and the mask and padding its input gives (None: none)."""
        return cls(settings.causal, settings.window, explicit, padding)

    @property
    def masked(self) -> bool:
        """True when some query-key pair may be blocked (causal, a window, a mask or padding)."""
        return self.future_hidden or self.explicit is not None or self.padding is not None

    @property
    def future_hidden(self) -> bool:
        """True when no query sees a key past its own position (causal, or a sliding window): a tiled engine
        skips those tiles, and a causal setting would add nothing."""
        return self.causal or self.window is not None

    @property
    def beyond_causal(self) -> bool:
        """True when some key a causal mask would show may still be blocked (a mask, padding or a window)."""
        return self.explicit is not None or self.padding is not None or self.window is not None

    @property
    def causal_only(self) -> bool:
        """True when the mask is causal alone, top-left aligned: a fused causal kernel's (``is_causal``)."""
        return self.future_hidden and not self.beyond_causal and self.shift == 0

    @property
    def plain_causal(self) -> bool:
        """True when the rule is a plain causal mask, top-left aligned, padding or not: no window, no given mask."""
        return self.causal and self.window is None and self.explicit is None and self.shift == 0

    def shifted(self, shift: int) -> Masking:
        """The same masking with its causal edge ``shift`` keys later (earlier when negative)."""
        return replace(self, shift=shift)

    def allowed(self, positions: np.ndarray, n_keys: int, rows: slice = slice(None)) -> np.ndarray | None:
        """``[query, key]`` booleans for the query ``rows`` at ``positions`` (all the rows' positions), True where
        a query may attend a key; None when all may. A caller working in blocks of rows asks for one at a time."""
        if not self.masked:
            return None
        at = positions[rows][:, None] + self.shift
        allowed = np.ones((len(at), n_keys), dtype=bool)
        keys = np.arange(n_keys)[None, :]
        if self.future_hidden:
            allowed &= keys <= at
        if self.window is not None:  # and no further back than the window
            allowed &= keys > at - self.window
        if self.explicit is not None:
            allowed &= self.explicit[rows]
        if self.padding is not None:
            allowed &= ~self.padding[None, :]
        return allowed

    def key_limit(self, positions: np.ndarray, n_keys: int, rows: slice = slice(None)) -> int:
        """Keys past this index are blocked for every query of ``rows`` at ``positions`` (causal masks end early)."""
        if not self.future_hidden:
            return n_keys
        return min(n_keys, max(0, int(positions[rows].max()) + 1 + self.shift))

    @property
    def status_word(self) -> str:
        """The mask as a status line names it: ``causal``, ``window`` or ``no mask`` (a given mask or padding is
        not named there)."""
        return "causal" if self.causal else "window" if self.window is not None else "no mask"

    @property
    def title_note(self) -> str | None:
        """What a title adds for the mask (``window 4``), None when it adds nothing (causal is shown by the keys)."""
        return None if self.window is None else f"window {self.window}"
