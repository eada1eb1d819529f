"""AttentionSettings: how attention is taken (heads, K/V heads, scale, layout, causal, dropped heads)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnx.core.heads import divisors
from attnx.core.positions import Rotary
from attnx.errors import ConfigError

SCALE_MODES = ("sqrt_dk", "sqrt_d_model", "none")
LAYOUTS = ("contiguous", "interleaved")


@dataclass(frozen=True)
class AttentionSettings:
    """How attention is taken: ``heads`` query heads reading ``kv_heads`` K/V heads (GQA when fewer),
    the score ``scale`` (a mode of ``SCALE_MODES`` or a number), the head ``layout`` of the columns,
    a causal mask, the heads zeroed before concatenation (0-based), and the rotary positions that turn
    each head's Q and K before the scores (None: none), and a sliding ``window``: query i sees keys
    i − window < j ≤ i, itself and the window − 1 before it (None: no window), and ``softcap``, which
    bends scaled scores s into softcap · tanh(s / softcap) before the mask (None: none). Checked when made."""

    heads: int
    kv_heads: int
    scale: str | float = "sqrt_dk"
    layout: str = "contiguous"
    causal: bool = False
    dropped_heads: tuple[int, ...] = ()
    rotary: Rotary | None = None
    window: int | None = None
    softcap: float | None = None

    def __post_init__(self) -> None:
        for name in ("heads", "kv_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive whole number, got {value!r}")
        if self.heads % self.kv_heads:
            raise ConfigError(
                f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}; "
                f"kv_heads that work: {', '.join(map(str, divisors(self.heads)))}"
            )
        if isinstance(self.scale, str):
            if self.scale not in SCALE_MODES:
                raise ConfigError(f"scale must be a number or one of {', '.join(SCALE_MODES)}")
        elif isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not math.isfinite(self.scale):
            raise ConfigError(f"scale must be a finite number or one of {', '.join(SCALE_MODES)}")
        if self.layout not in LAYOUTS:
            raise ConfigError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        window = self.window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ConfigError(f"window must be a positive whole number of keys, got {window!r}")
        cap = self.softcap
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < math.inf):
            raise ConfigError(f"softcap must be a positive finite number, got {cap!r}")
        bad = [h for h in self.dropped_heads if not 0 <= h < self.heads]
        if bad:
            raise ConfigError(f"cannot drop head {bad[0]}: heads are numbered 0..{self.heads - 1}")
        if tuple(sorted(set(self.dropped_heads))) != self.dropped_heads:
            raise ConfigError(f"dropped_heads must be sorted and distinct, got {self.dropped_heads!r}")

    @classmethod
    def of(
        cls,
        heads: int,
        kv_heads: int | None = None,
        *,
        dropped_heads: Sequence[int] = (),
        where: str = "<input>",
        **rest: Any,
    ) -> AttentionSettings:
        """Settings with ``kv_heads`` defaulting to ``heads`` and dropped heads sorted; errors name ``where``."""
        try:
            return cls(
                heads, heads if kv_heads is None else kv_heads, dropped_heads=tuple(sorted(set(dropped_heads))), **rest
            )
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @property
    def group_size(self) -> int:
        """Query heads per K/V head (1 without GQA)."""
        return self.heads // self.kv_heads
