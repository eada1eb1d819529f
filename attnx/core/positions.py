"""Rotary positions (RoPE): each head's Q and K turned, pair of columns by pair, by angles that grow with position.

Pair ``i`` of a head's first ``r`` columns (``r`` = ``fraction`` × d_k, even) turns by position × θ^(−2i/r):
its two numbers (a, b) become (a·cos − b·sin, a·sin + b·cos). The dot product of a rotated query at
position m with a rotated key at position n then depends on m − n alone, pair by pair. Columns past ``r``
pass unturned (partial rotary). Two ways to pair columns exist:

- ``half``: column i with column i + r/2, as Hugging Face checkpoints store Q and K;
- ``interleaved``: column 2i with column 2i + 1, as the original Llama release did.

Checkpoints trained for long texts stretch the frequencies (``RopeScaling``), one kind for each ``rope_type`` of
transformers' ``ROPE_INIT_FUNCTIONS``: ``linear`` divides them all by a factor; ``dynamic`` (NTK-aware) raises θ
once the text is longer than the trained context; ``yarn`` divides the slow pairs by the factor, keeps the fast
ones, ramps between the two and multiplies cos and sin by an attention factor; ``longrope`` divides each pair by
its own factor, a short list up to the trained context and a long one past it, with an attention factor too;
``llama3`` (Llama 3.1 and later) divides only the slow ones, those whose wavelength is longer than the original
context over ``low_freq_factor``, keeps the fast ones (wavelength under the context over ``high_freq_factor``)
and blends the two in between; ``proportional`` turns the first pairs of the whole head and leaves the rest
still. ``Rotary.from_config`` reads them from a checkpoint's ``rope_parameters`` (or ``rope_scaling``).

The turn is written as ``x·cos + (x @ R)·sin`` with a fixed signed permutation R, so that every engine applies
it with the arithmetic it already has; the attention factor multiplies cos and sin, as transformers does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeGuard, overload

import numpy as np

from attnx.core.choices import PAIRINGS
from attnx.errors import ConfigError

# Every rope_type of transformers' ROPE_INIT_FUNCTIONS, and "default" (θ as it is).
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")
SCALINGS = ROPE_TYPES[1:]
# The keys of a config's rope mapping that every rope type reads, then those each type reads besides
# (transformers' names). A key in neither is refused; a key of another type is ignored, as transformers does.
COMMON_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
TYPE_KEYS: Mapping[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": (
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "truncate",
    ),
    "longrope": ("short_factor", "long_factor", "factor", "original_max_position_embeddings", "attention_factor"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "proportional": ("factor",),
}
KNOWN_KEYS = frozenset(COMMON_KEYS).union(*TYPE_KEYS.values())
# The fields of RopeScaling that only some kinds read (None: not given, the kind's default).
KIND_FIELDS: Mapping[str, tuple[str, ...]] = {
    "beta_fast": ("yarn",),
    "beta_slow": ("yarn",),
    "truncate": ("yarn",),
    "attention_factor": ("yarn", "longrope"),
    "short_factor": ("longrope",),
    "long_factor": ("longrope",),
    "proportion": ("proportional",),
}


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _real(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def plain_frequencies(theta: float, r: int) -> np.ndarray:
    """The angle per position of each of ``r`` / 2 pairs as θ gives it, 1 / θ^(2i/r) (float64)."""
    return 1.0 / theta ** (np.arange(0, r, 2, dtype=np.float64) / r)


def sequence_length(positions: np.ndarray, n_keys: int) -> int:
    """The sequence length that ``dynamic`` and ``longrope`` read: the largest query position + 1 or the number of
    keys, whichever is more (transformers' ``max(position_ids) + 1``)."""
    return max(int(np.asarray(positions).max(initial=-1)) + 1, n_keys)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention factor for ``factor``: 0.1 · mscale · ln(factor) + 1, or 1 for a factor up to 1."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class RopeScaling:
    """How the rotary frequencies are stretched, ``kind`` one of ``SCALINGS``, by ``factor``.

    ``original_max_positions`` is the trained context: where ``llama3`` measures wavelengths from, ``yarn`` its
    correction range, and past which ``dynamic`` raises θ and ``longrope`` takes its long factors. ``llama3`` also
    reads ``low_freq_factor`` and ``high_freq_factor``; ``yarn`` ``beta_fast`` (None: 32), ``beta_slow`` (None: 1)
    and ``truncate`` (None: True); ``longrope`` ``short_factor`` and ``long_factor`` (one per pair);
    ``proportional`` the ``proportion`` of a head's pairs it turns. ``attention_factor`` (``yarn``, ``longrope``)
    multiplies cos and sin; None: the kind's own (``attention``).
    """

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192
    beta_fast: float | None = None
    beta_slow: float | None = None
    truncate: bool | None = None
    attention_factor: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    proportion: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in SCALINGS:
            raise ConfigError(f"rope scaling: kind must be one of {', '.join(SCALINGS)}, got {self.kind!r}")
        for name in ("factor", "low_freq_factor", "high_freq_factor", "original_max_positions"):
            if not _positive(getattr(self, name)):
                raise ConfigError(f"rope scaling: {name} must be a positive number, got {getattr(self, name)!r}")
        for name, kinds in KIND_FIELDS.items():
            if getattr(self, name) is not None and self.kind not in kinds:
                raise ConfigError(f"rope scaling: {name} is for {' and '.join(kinds)} scaling, not {self.kind}")
        for name in ("beta_fast", "beta_slow", "attention_factor", "proportion"):
            if getattr(self, name) is not None and not _positive(getattr(self, name)):
                raise ConfigError(f"rope scaling: {name} must be a positive number, got {getattr(self, name)!r}")
        if self.truncate is not None and not isinstance(self.truncate, bool):
            raise ConfigError(f"rope scaling: truncate must be true or false, got {self.truncate!r}")
        if self.kind == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ConfigError(
                f"rope scaling: high_freq_factor ({self.high_freq_factor}) must be above "
                f"low_freq_factor ({self.low_freq_factor})"
            )
        if self.kind == "proportional" and (self.proportion is None or self.proportion > 1):
            raise ConfigError(f"rope scaling: proportional needs a proportion in (0, 1], got {self.proportion!r}")
        if self.kind == "longrope":
            self._check_factors()

    def _check_factors(self) -> None:
        """``longrope``'s two lists: given, of positive numbers, as long as each other (stored as tuples)."""
        short, long = self._factors("short_factor"), self._factors("long_factor")
        if len(short) != len(long):
            raise ConfigError(f"rope scaling: short_factor has {len(short)} numbers, long_factor {len(long)}")

    def _factors(self, name: str) -> tuple[float, ...]:
        """``longrope``'s list ``name``, checked to be positive numbers and stored as a tuple (a list from a file:
        frozen settings hash)."""
        factors = getattr(self, name)
        if not isinstance(factors, (list, tuple)) or not factors or not all(_positive(f) for f in factors):
            raise ConfigError(f"rope scaling: longrope needs {name}, a list of positive numbers, got {factors!r:.60}")
        object.__setattr__(self, name, tuple(factors))
        return tuple(factors)

    @property
    def attention(self) -> float:
        """What cos and sin are multiplied by: ``attention_factor`` when given; else for ``yarn`` 0.1·ln(factor) + 1,
        for ``longrope`` √(1 + ln(factor) / ln(original_max_positions)) (each 1 for a factor up to 1); else 1."""
        if self.attention_factor is not None:
            return float(self.attention_factor)
        if self.kind == "yarn":
            return yarn_mscale(self.factor)
        if self.kind == "longrope" and self.factor > 1:
            return math.sqrt(1 + math.log(self.factor) / math.log(self.original_max_positions))
        return 1.0

    def frequencies(self, theta: float, r: int, length: int | None = None) -> np.ndarray:
        """The angle per position of each of ``r`` / 2 pairs under this scaling, for a text of ``length`` positions
        (None: no longer than the trained context), in float64."""
        return _FREQUENCIES[self.kind](self, theta, r, length)

    def describe(self) -> str:
        """``llama3 ×8``, ``yarn ×4 (attention ×1.139)``, ``dynamic NTK ×2 past 4096 positions``: in words."""
        words = f"{self.kind} ×{self.factor:g}"
        if self.kind == "dynamic":
            words = f"dynamic NTK ×{self.factor:g} past {self.original_max_positions} positions"
        elif self.kind == "longrope":
            words += f", long factors past {self.original_max_positions} positions"
        elif self.kind == "proportional":
            words += f" on {self.proportion:g} of the pairs"
        return words if self.attention == 1 else f"{words} (attention ×{self.attention:.4g})"


def _linear(scaling: RopeScaling, theta: float, r: int, length: int | None) -> np.ndarray:
    """Every pair divided by the factor."""
    return plain_frequencies(theta, r) / scaling.factor


def _dynamic(scaling: RopeScaling, theta: float, r: int, length: int | None) -> np.ndarray:
    """NTK-aware: θ raised by (factor · L / context − (factor − 1))^(r / (r − 2)) for a text of L positions past the
    trained context (L = context up to it, which leaves θ as it is)."""
    if r < 4:
        raise ConfigError(f"rope scaling: dynamic needs at least 4 turned columns, got {r}")
    context = scaling.original_max_positions
    length = context if length is None else max(length, context)
    base = theta * (scaling.factor * length / context - (scaling.factor - 1)) ** (r / (r - 2))
    return plain_frequencies(base, r)


def _yarn(scaling: RopeScaling, theta: float, r: int, length: int | None) -> np.ndarray:
    """Pairs that turn fewer than ``beta_slow`` times over the trained context are divided by the factor, those
    that turn more than ``beta_fast`` times are kept, and a linear ramp over the pair index blends between."""
    context = scaling.original_max_positions

    def pair_of(turns: float) -> float:  # the (fractional) pair that turns ``turns`` times over the context
        return r * math.log(context / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low = pair_of(32.0 if scaling.beta_fast is None else scaling.beta_fast)
    high = pair_of(1.0 if scaling.beta_slow is None else scaling.beta_slow)
    if scaling.truncate is not False:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    if low == high:
        high += 0.001  # as transformers does: no division by zero
    ramp = np.clip((np.arange(r // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    kept = 1 - ramp  # the share of each pair as θ gives it; the rest is divided by the factor
    plain = plain_frequencies(theta, r)
    return plain / scaling.factor * (1 - kept) + plain * kept


def _longrope(scaling: RopeScaling, theta: float, r: int, length: int | None) -> np.ndarray:
    """Each pair divided by its own factor: the short list up to the trained context, the long one past it."""
    long = length is not None and length > scaling.original_max_positions
    factors = (scaling.long_factor if long else scaling.short_factor) or ()  # longrope's __post_init__ requires both
    if len(factors) != r // 2:
        name = "long_factor" if long else "short_factor"
        raise ConfigError(f"rope scaling: {name} has {len(factors)} numbers for {r // 2} pairs of turned columns")
    return plain_frequencies(theta, r) / np.asarray(factors, dtype=np.float64)


def _llama3(scaling: RopeScaling, theta: float, r: int, length: int | None) -> np.ndarray:
    """Slow pairs divided by the factor, fast ones kept, blended in between (see the module's docstring)."""
    frequencies = plain_frequencies(theta, r)
    context = scaling.original_max_positions
    wavelength = 2 * math.pi / frequencies
    slow = context / scaling.low_freq_factor  # longer wavelengths: divided by factor
    fast = context / scaling.high_freq_factor  # shorter ones: kept
    blend = (context / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )  # 0 at the slow end of the middle band, 1 at its fast end
    middle = (1 - blend) * frequencies / scaling.factor + blend * frequencies
    return np.where(wavelength > slow, frequencies / scaling.factor, np.where(wavelength < fast, frequencies, middle))


def _proportional(scaling: RopeScaling, theta: float, r: int, length: int | None) -> np.ndarray:
    """The first ``proportion`` of the pairs of the whole head at 1 / θ^(2i/r), the rest still (0), all divided by
    the factor."""
    proportion = 1.0 if scaling.proportion is None else scaling.proportion  # proportional's __post_init__ requires it
    turned = int(proportion * r // 2)
    frequencies = np.zeros(r // 2)
    frequencies[:turned] = 1.0 / theta ** (np.arange(0, 2 * turned, 2, dtype=np.float64) / r)
    return frequencies / scaling.factor


_FREQUENCIES: Mapping[str, Callable[[RopeScaling, float, int, int | None], np.ndarray]] = {
    "linear": _linear,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "longrope": _longrope,
    "llama3": _llama3,
    "proportional": _proportional,
}


@overload
def _number(mapping: Mapping[str, object], key: str, default: float) -> float: ...


@overload
def _number(mapping: Mapping[str, object], key: str, default: None = None) -> float | None: ...


def _number(mapping: Mapping[str, object], key: str, default: float | None = None) -> float | None:
    """``mapping[key]``, a finite number, or ``default`` when it is absent or null."""
    value = mapping.get(key)
    if value is None:
        return default
    if not _real(value):
        raise ConfigError(f"rope parameters: {key} must be a number, got {value!r:.60}")
    return value


def _required(mapping: Mapping[str, object], key: str, kind: str) -> float:
    """``mapping[key]``, a number that rope type ``kind`` cannot do without."""
    value = _number(mapping, key)
    if value is None:
        raise ConfigError(f"rope parameters: rope_type {kind} needs {key}")
    return value


def _factors(mapping: Mapping[str, object], key: str, pairs: int) -> tuple[float, ...]:
    """``mapping[key]``: a list of one number per pair of turned columns (``longrope``)."""
    value = mapping.get(key)
    if not isinstance(value, (list, tuple)) or not all(_real(f) for f in value):
        raise ConfigError(f"rope parameters: rope_type longrope needs {key}, a list of numbers, got {value!r:.60}")
    if len(value) != pairs:
        raise ConfigError(f"rope parameters: {key} has {len(value)} numbers for {pairs} pairs of turned columns")
    return tuple(float(f) for f in value)


def _rope_type(mapping: Mapping[str, object]) -> str:
    """``rope_type`` (or the older ``type``; none: ``default``), checked, with every key known."""
    kind = mapping.get("rope_type", mapping.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise ConfigError(f"rope parameters: rope_type {kind!r} is not one of {', '.join(ROPE_TYPES)}")
    for key in mapping:
        if key not in KNOWN_KEYS:
            read = ", ".join(COMMON_KEYS + TYPE_KEYS[kind])
            raise ConfigError(f"rope parameters: unknown key {key!r}; rope_type {kind} reads {read}")
    return kind


def _yarn_from(mapping: Mapping[str, object], factor: float, context: int) -> RopeScaling:
    """``yarn``'s fields, its attention factor from ``mscale`` / ``mscale_all_dim`` when both are set (and no
    ``attention_factor``); ``beta_fast`` and ``beta_slow`` of 0 mean the defaults, as in transformers."""
    attention = _number(mapping, "attention_factor")
    mscale, all_dims = _number(mapping, "mscale"), _number(mapping, "mscale_all_dim")
    if attention is None and mscale and all_dims:
        attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dims)
    truncate = mapping.get("truncate")
    if truncate is not None and not isinstance(truncate, bool):
        raise ConfigError(f"rope parameters: truncate must be true or false, got {truncate!r:.60}")
    return RopeScaling(
        "yarn",
        factor,
        original_max_positions=context,
        attention_factor=attention,
        beta_fast=_number(mapping, "beta_fast") or None,
        beta_slow=_number(mapping, "beta_slow") or None,
        truncate=truncate,
    )


def _scaling_from(
    mapping: Mapping[str, object], kind: str, *, pairs: int, fraction: float, max_positions: int, context: int
) -> RopeScaling | None:
    """The scaling of rope type ``kind`` from its keys (see ``Rotary.from_config``); None for ``default``."""
    if kind == "default":
        return None
    given = _number(mapping, "factor")
    if kind == "proportional":
        return RopeScaling(kind, 1.0 if given is None else given, proportion=fraction)
    if kind in ("linear", "dynamic", "llama3"):
        factor = _required(mapping, "factor", kind)
    elif kind == "yarn" and "factor" not in mapping:  # transformers requires the key (null: as below)
        raise ConfigError("rope parameters: rope_type yarn needs factor")
    else:  # yarn and longrope: by default, how much longer the context is than the trained one
        factor = max_positions / context if given is None else given
    if kind == "linear":
        return RopeScaling(kind, factor)
    if kind == "dynamic":  # transformers measures its length against max_position_embeddings
        return RopeScaling(kind, factor, original_max_positions=max_positions)
    if kind == "llama3":
        low, high = (_required(mapping, key, kind) for key in ("low_freq_factor", "high_freq_factor"))
        return RopeScaling(kind, factor, low, high, context)
    if kind == "longrope":
        short, long = (_factors(mapping, key, pairs) for key in ("short_factor", "long_factor"))
        attention = _number(mapping, "attention_factor")
        return RopeScaling(
            kind,
            factor,
            original_max_positions=context,
            attention_factor=attention,
            short_factor=short,
            long_factor=long,
        )
    return _yarn_from(mapping, factor, context)


@dataclass(frozen=True)
class Rotary:
    """How Q and K are turned by position: base ``theta``, the column ``pairs``, the ``fraction`` of d_k turned
    and the frequencies' ``scaling`` (None: as θ gives them)."""

    theta: float = 10000.0
    pairs: str = "half"
    fraction: float = 1.0
    scaling: RopeScaling | None = None

    def __post_init__(self) -> None:
        if isinstance(self.theta, bool) or not isinstance(self.theta, (int, float)) or not math.isfinite(self.theta):
            raise ConfigError(f"rope theta must be a finite number above 1, got {self.theta!r}")
        if self.theta <= 1:
            raise ConfigError(f"rope theta must be a finite number above 1, got {self.theta!r}")
        if self.pairs not in PAIRINGS:
            raise ConfigError(f"rope pairs must be one of {', '.join(PAIRINGS)}, got {self.pairs!r}")
        fraction = self.fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ConfigError(f"rope fraction must be a number in (0, 1], got {fraction!r}")

    @classmethod
    def from_config(
        cls,
        mapping: Mapping[str, object],
        *,
        head_dim: int,
        max_position_embeddings: int,
        rope_theta: float = 10000.0,
        partial_rotary_factor: float = 1.0,
        original_max_position_embeddings: int | None = None,
        pairs: str = "half",
    ) -> Rotary:
        """The rotary positions a checkpoint's config asks for, read as transformers reads them.

        ``mapping`` is one layer's ``rope_parameters`` (transformers 5) or the older ``rope_scaling``, as
        config.json writes it: ``rope_type`` (or ``type``; none: ``default``), ``rope_theta`` and
        ``partial_rotary_factor`` (else the top-level ``rope_theta`` and ``partial_rotary_factor`` passed here),
        and the keys of ``TYPE_KEYS[rope_type]``: ``factor`` (``linear``, ``dynamic``, ``llama3``; for ``yarn`` and
        ``longrope`` max_position_embeddings / original_max_position_embeddings by default; ``proportional`` 1),
        ``original_max_position_embeddings`` (``llama3``, ``yarn``, ``longrope``: the top-level one passed here
        first, as transformers prefers it, then the mapping's, then ``max_position_embeddings``; ``dynamic``
        measures against ``max_position_embeddings``), ``low_freq_factor`` and ``high_freq_factor`` (``llama3``),
        ``beta_fast``, ``beta_slow``, ``truncate``, ``mscale`` and ``mscale_all_dim`` (``yarn``),
        ``short_factor`` and ``long_factor`` (``longrope``: ``head_dim`` × fraction / 2 numbers each) and
        ``attention_factor`` (``yarn``, ``longrope``). ``proportional`` turns its ``partial_rotary_factor`` of the
        pairs of the whole head. A key no rope type reads, an unknown type or a bad value is a ConfigError naming
        it; a key of another type is ignored, as transformers ignores it.
        """
        kind = _rope_type(mapping)
        theta = _number(mapping, "rope_theta", rope_theta)
        fraction = _number(mapping, "partial_rotary_factor", partial_rotary_factor)
        if not _positive(head_dim):
            raise ConfigError(f"rope parameters: head_dim must be a positive number, got {head_dim!r}")
        if not 0 < fraction <= 1:
            raise ConfigError(f"rope parameters: partial_rotary_factor must be in (0, 1], got {fraction!r}")
        turned = head_dim if kind == "proportional" else int(head_dim * fraction)
        if turned % 2:
            raise ConfigError(
                f"rope parameters: {fraction:g} of head_dim {head_dim} is {turned} columns, an odd number"
            )
        context = original_max_position_embeddings or _number(mapping, "original_max_position_embeddings")
        if context is not None and (not _positive(context) or context != int(context)):
            raise ConfigError(
                f"rope parameters: original_max_position_embeddings must be a positive whole number, got {context!r}"
            )
        trained = max_position_embeddings if context is None else int(context)
        scaling = _scaling_from(
            mapping, kind, pairs=turned // 2, fraction=fraction, max_positions=max_position_embeddings, context=trained
        )
        return cls(theta=theta, pairs=pairs, fraction=1.0 if kind == "proportional" else fraction, scaling=scaling)

    @property
    def attention(self) -> float:
        """What cos and sin are multiplied by (the scaling's attention factor; 1 without one)."""
        return 1.0 if self.scaling is None else self.scaling.attention

    def describe(self) -> str:
        """``RoPE θ 10000 (half pairs, 0.50 of d_k, yarn ×4 (attention ×1.139))``: these settings in words."""
        parts = [f"{self.pairs} pairs"]
        if self.fraction != 1:
            parts.append(f"{self.fraction:.2f} of d_k")
        if self.scaling is not None:
            parts.append(self.scaling.describe())
        return f"RoPE θ {self.theta:g} ({', '.join(parts)})"

    def width(self, d_k: int) -> int:
        """How many of a head's ``d_k`` columns are turned: ``fraction × d_k``, rounded down to even."""
        return int(d_k * self.fraction) // 2 * 2

    def frequencies(self, d_k: int, length: int | None = None) -> np.ndarray:
        """The angle per position of each pair, 1 / θ^(2i/r) for i = 0 … r/2 − 1, then scaled for a text of
        ``length`` positions (None: no longer than the trained context), in float64."""
        r = self.width(d_k)
        return (
            plain_frequencies(self.theta, r)
            if self.scaling is None
            else self.scaling.frequencies(self.theta, r, length)
        )

    def pairs_of(self, d_k: int) -> tuple[np.ndarray, np.ndarray]:
        """The two columns of each turned pair, in pair order (pair 0 turns fastest)."""
        r = self.width(d_k)
        first = np.arange(r // 2) if self.pairs == "half" else np.arange(0, r, 2)
        return first, first + r // 2 if self.pairs == "half" else first + 1

    def bands(self, products: np.ndarray) -> np.ndarray:
        """A dot product's terms (``q * k``, turned slices) summed per pair, then, under partial rotary, the
        unturned columns' sum: ``[r/2]`` or ``[r/2 + 1]``, adding up to the dot product."""
        first, second = self.pairs_of(len(products))
        sums = products[first] + products[second]
        if self.width(len(products)) == len(products):
            return sums
        unturned = np.ones(len(products), dtype=bool)
        unturned[first], unturned[second] = False, False
        return np.append(sums, products[unturned].sum())

    def tables(
        self, positions: np.ndarray, d_k: int, length: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``cos`` and ``sin`` ``[position, d_k]`` (1 and 0 on unturned columns) and R ``[d_k, d_k]``, in float64,
        for a text of ``length`` positions (``sequence_length``; None: the largest position + 1).

        Turned, a row x of a head is ``x * cos + (x @ R) * sin``. The attention factor multiplies cos and sin of
        the turned columns, as transformers' ``cos * attention_scaling`` does.
        """
        r = self.width(d_k)
        if r < 2:
            raise ConfigError(f"rope turns pairs of columns: {self.fraction} of d_k = {d_k} leaves none")
        positions = np.asarray(positions, dtype=np.float64)
        length = sequence_length(positions, 0) if length is None else length
        angles = positions[:, None] * self.frequencies(d_k, length)[None, :]  # (n, r/2)
        cos, sin = np.ones((len(angles), d_k)), np.zeros((len(angles), d_k))
        first, second = self.pairs_of(d_k)  # the columns of each pair
        attention = self.attention
        for column in (first, second):
            cos[:, column], sin[:, column] = np.cos(angles) * attention, np.sin(angles) * attention
        turn = np.zeros((d_k, d_k))
        turn[second, first] = -1.0  # (x @ R)[first] = -x[second]
        turn[first, second] = 1.0  # (x @ R)[second] = x[first]
        return cos, sin, turn

    def unturn(self, rows: np.ndarray, positions: np.ndarray, length: int | None = None) -> np.ndarray:
        """``rows`` ``[n, d_k]`` turned back from ``positions`` (in a text of ``length``, as ``tables``): the vectors
        before rotary positions turned them.

        Each pair turns by −angle and is divided by the attention factor, ``(x·cos − (x @ R)·sin) / (cos² + sin²)``:
        the inverse of ``tables``' turn, exact up to rounding.
        """
        rows = np.asarray(rows, dtype=np.float64)
        cos, sin, turn = self.tables(np.asarray(positions), rows.shape[-1], length)
        return (rows * cos - (rows @ turn) * sin) / (cos * cos + sin * sin)
