"""Rotary positions (RoPE): each head's Q and K turned, pair of columns by pair, by angles that grow with position.

Pair ``i`` of a head's first ``r`` columns (``r`` = ``fraction`` × d_k, even) turns by position × θ^(−2i/r):
its two numbers (a, b) become (a·cos − b·sin, a·sin + b·cos). The dot product of a rotated query at
position m with a rotated key at position n then depends on m − n alone, pair by pair. Columns past ``r``
pass unturned (partial rotary). Two ways to pair columns exist:

- ``half``: column i with column i + r/2, as Hugging Face checkpoints store Q and K;
- ``interleaved``: column 2i with column 2i + 1, as the original Llama release did.

Checkpoints trained for long texts stretch the frequencies (``RopeScaling``): ``linear`` divides them all by a
factor; ``llama3`` (Llama 3.1 and later) divides only the slow ones, those whose wavelength is longer than the
original context over ``low_freq_factor``, keeps the fast ones (wavelength under the context over
``high_freq_factor``) and blends the two in between.

The turn is written as ``x·cos + (x @ R)·sin`` with a fixed signed permutation R, so that every engine applies
it with the arithmetic it already has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnx.errors import ConfigError

PAIRINGS = ("half", "interleaved")
SCALINGS = ("linear", "llama3")


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class RopeScaling:
    """How the rotary frequencies are stretched: ``kind`` ``linear`` or ``llama3`` by ``factor``; ``llama3`` also
    reads ``low_freq_factor``, ``high_freq_factor`` and ``original_max_positions`` (the trained context)."""

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192

    def __post_init__(self) -> None:
        if self.kind not in SCALINGS:
            raise ConfigError(f"rope scaling: kind must be one of {', '.join(SCALINGS)}, got {self.kind!r}")
        for name in ("factor", "low_freq_factor", "high_freq_factor", "original_max_positions"):
            if not _positive(getattr(self, name)):
                raise ConfigError(f"rope scaling: {name} must be a positive number, got {getattr(self, name)!r}")
        if self.kind == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ConfigError(
                f"rope scaling: high_freq_factor ({self.high_freq_factor}) must be above "
                f"low_freq_factor ({self.low_freq_factor})"
            )

    def apply(self, frequencies: np.ndarray) -> np.ndarray:
        """``frequencies`` (angle per position, per pair) as the scaling stretches them."""
        if self.kind == "linear":
            return frequencies / self.factor
        wavelength = 2 * math.pi / frequencies
        slow = self.original_max_positions / self.low_freq_factor  # longer wavelengths: divided by factor
        fast = self.original_max_positions / self.high_freq_factor  # shorter ones: kept
        blend = (self.original_max_positions / wavelength - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )  # 0 at the slow end of the middle band, 1 at its fast end
        middle = (1 - blend) * frequencies / self.factor + blend * frequencies
        return np.where(wavelength > slow, frequencies / self.factor, np.where(wavelength < fast, frequencies, middle))

    def describe(self) -> str:
        """``llama3 ×8`` or ``linear ×2``."""
        return f"{self.kind} ×{self.factor:g}"


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

    def describe(self) -> str:
        """``RoPE θ 10000 (half pairs, 0.5 of d_k, llama3 ×8)``: these settings in words."""
        parts = [f"{self.pairs} pairs"]
        if self.fraction != 1:
            parts.append(f"{self.fraction:.2f} of d_k")
        if self.scaling is not None:
            parts.append(self.scaling.describe())
        return f"RoPE θ {self.theta:g} ({', '.join(parts)})"

    def width(self, d_k: int) -> int:
        """How many of a head's ``d_k`` columns are turned: ``fraction × d_k``, rounded down to even."""
        return int(d_k * self.fraction) // 2 * 2

    def frequencies(self, d_k: int) -> np.ndarray:
        """The angle per position of each pair, θ^(−2i/r) for i = 0 … r/2 − 1, then scaled (float64)."""
        r = self.width(d_k)
        frequencies = self.theta ** (-np.arange(0, r, 2, dtype=np.float64) / r)
        return frequencies if self.scaling is None else self.scaling.apply(frequencies)

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

    def tables(self, positions: np.ndarray, d_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``cos`` and ``sin`` ``[position, d_k]`` (1 and 0 on unturned columns) and R ``[d_k, d_k]``, in float64.

        Turned, a row x of a head is ``x * cos + (x @ R) * sin``.
        """
        r = self.width(d_k)
        if r < 2:
            raise ConfigError(f"rope turns pairs of columns: {self.fraction} of d_k = {d_k} leaves none")
        angles = np.asarray(positions, dtype=np.float64)[:, None] * self.frequencies(d_k)[None, :]  # (n, r/2)
        cos, sin = np.ones((len(angles), d_k)), np.zeros((len(angles), d_k))
        first, second = self.pairs_of(d_k)  # the columns of each pair
        for column in (first, second):
            cos[:, column], sin[:, column] = np.cos(angles), np.sin(angles)
        turn = np.zeros((d_k, d_k))
        turn[second, first] = -1.0  # (x @ R)[first] = -x[second]
        turn[first, second] = 1.0  # (x @ R)[second] = x[first]
        return cos, sin, turn

    def unturn(self, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``rows`` ``[n, d_k]`` turned back from ``positions``: the vectors before rotary positions turned them.

        Each pair turns by −angle, ``x·cos − (x @ R)·sin``: the inverse of ``tables``' turn, exact up to rounding.
        """
        rows = np.asarray(rows, dtype=np.float64)
        cos, sin, turn = self.tables(np.asarray(positions), rows.shape[-1])
        return rows * cos - (rows @ turn) * sin
