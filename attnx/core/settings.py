"""AttentionSettings: how attention is taken (heads, K/V heads, scale, layout, causal, dropped heads)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from attnx.core.choices import LAYOUTS, SCALE_MODES
from attnx.core.counting import counted, span
from attnx.core.heads import divisors
from attnx.core.positions import Rotary
from attnx.errors import ConfigError


@dataclass(frozen=True)
class Optional:
    """A setting that is off (None) unless an input turns it on, as machine output and the summary line show it:
    the JSON ``key`` (beside ``heads``, ``layout``, ...), its value there, and its words when on."""

    field: str
    key: str
    words: Callable[[Any], str]
    plain: Callable[[Any], Any] | None = None  # the JSON value of a value that is no JSON value itself


# Every optional setting, in the order the summary line and the JSON give them. A new one is a field of
# AttentionSettings, checked in its __post_init__, and an entry here.
OPTIONAL = (
    Optional("rotary", "rope", Rotary.describe, dataclasses.asdict),
    Optional("window", "window", lambda window: f"sliding window {window}"),
    Optional("softcap", "softcap", lambda cap: f"scores soft-capped at {cap:g}"),
    Optional("sink_logits", "sink_logits", lambda logits: "a learned sink per head", list),
)


@dataclass(frozen=True)
class AttentionSettings:
    """How attention is taken: ``heads`` query heads reading ``kv_heads`` K/V heads (GQA when fewer),
    the score ``scale`` (a mode of ``SCALE_MODES`` or a number), the head ``layout`` of the columns,
    a causal mask, the heads zeroed before concatenation (0-based), and the rotary positions that turn
    each head's Q and K before the scores (None: none), and a sliding ``window``: query i sees keys
    i − window < j ≤ i, itself and the window − 1 before it (None: no window), and ``softcap``, which
    bends scaled scores s (scale · q·k plus the spec's ``score_bias``, if any) into softcap · tanh(s / softcap) before
    the mask (None: none), and ``sink_logits``, one
    learned logit per query head that joins each row's softmax as a key with no value (gpt-oss): it takes a share
    of the weight, so a row's weights over the keys sum to less than 1 (None: no sinks). Checked when made."""

    heads: int
    kv_heads: int
    scale: str | float = "sqrt_dk"
    layout: str = "contiguous"
    causal: bool = False
    dropped_heads: tuple[int, ...] = ()
    rotary: Rotary | None = None
    window: int | None = None
    softcap: float | None = None
    sink_logits: tuple[float, ...] | None = None

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
        sinks = self.sink_logits
        if sinks is not None and (
            not isinstance(sinks, tuple)
            or len(sinks) != self.heads
            or not all(isinstance(x, float) and math.isfinite(x) for x in sinks)
        ):
            raise ConfigError(f"sink_logits must be {self.heads} finite numbers, one per head, got {sinks!r:.80}")
        bad = [h for h in self.dropped_heads if not 0 <= h < self.heads]
        if bad:
            raise ConfigError(f"cannot drop head {bad[0]}: heads are numbered {span(self.heads)}")
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
        """Settings with ``kv_heads`` defaulting to ``heads`` and dropped heads counted from 0 (-1 the last) and
        sorted; errors name ``where``."""
        dropped = {counted(head, heads) for head in dropped_heads}
        try:
            return cls(heads, heads if kv_heads is None else kv_heads, dropped_heads=tuple(sorted(dropped)), **rest)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @property
    def dense_only(self) -> bool:
        """True when the softmax is more than one over the scaled scores: a soft cap bends the scores first, or
        learned sinks join it. Fused kernels and the tiles' exp without a max pass take neither."""
        return self.softcap is not None or self.sink_logits is not None

    def described(self) -> list[str]:
        """The optional settings that are on, in words (``sliding window 3``, ``RoPE θ 10000 (half pairs)``)."""
        return [item.words(value) for item in OPTIONAL if (value := getattr(self, item.field)) is not None]

    def optional_json(self) -> dict[str, Any]:
        """Each optional setting under its JSON key, None when off (``{"window": 3, "softcap": None, ...}``)."""
        json: dict[str, Any] = {}
        for item in OPTIONAL:
            value = getattr(self, item.field)
            json[item.key] = value if value is None or item.plain is None else item.plain(value)
        return json

    @property
    def group_size(self) -> int:
        """Query heads per K/V head (1 without GQA)."""
        return self.heads // self.kv_heads
