"""Caps on what one input may hold, checked at the border before anything large is allocated."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Protocol

from attnx.errors import LimitError, UsageError


class _Heads(Protocol):
    @property
    def heads(self) -> int:
        """Query heads."""


class Problem(Protocol):
    """What the caps read of an attention problem (an ``AttentionSpec``): its sizes and where it came from."""

    @property
    def source(self) -> str:
        """Where the problem came from, for messages."""

    @property
    def n_queries(self) -> int:
        """N."""

    @property
    def n_keys(self) -> int:
        """M."""

    @property
    def d_model(self) -> int:
        """Width of Q."""

    @property
    def kv_width(self) -> int:
        """Width of K and V."""

    @property
    def settings(self) -> _Heads:
        """The settings (their head count)."""


MiB = 1024**2
DEPTH_CEILING = 200  # deeper would bring the YAML composer's recursion near Python's limit of 1000

# What each cap is called in messages, and the unit its value is shown in.
CAPS = {
    "max_bytes": ("input size cap", "bytes"),
    "max_yaml_bytes": ("YAML size cap", "bytes"),
    "max_depth": ("depth cap", "levels"),
    "max_dimension": ("dimension cap", "per axis"),
    "max_elements": ("element cap", "elements per array"),
    "max_weight_bytes": ("weight cap", "bytes"),
}
WEIGHT_ITEMSIZE = 8  # a weight is counted as float64, the widest dtype attnx holds one in (and its default)
_SIZE = re.compile(r"\s*(\d+)\s*(?:([kmgt])(?:i?b)?|b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


@dataclass(frozen=True)
class Limits:
    """The caps of one run. The defaults fit a 24 GiB, 2-core machine (README, "Safety and limits").

    - ``max_bytes``: bytes of one input (file, stdin, or the data of an .npz): parsed JSON takes about
      12 times its text in memory, so 256 MiB peaks near 3.2 GB (measured).
    - ``max_yaml_bytes``: bytes of YAML text. PyYAML's pure-Python parser (kept: it never recurses in C)
      takes up to 12 ms per KiB (0.8 s for 64 KiB of ``1,`` cells), so bad YAML is answered within
      about a second; JSON, parsed in C, and .npz carry larger inputs.
    - ``max_depth``: nesting levels of a YAML or JSON document; a valid input needs 3.
    - ``max_dimension``: length of any one axis (tokens, rows, columns).
    - ``max_elements``: elements of any one array, inputs and the ``[head, query, key]`` scores alike.
      16 Mi float64 elements are 128 MiB; a run keeps three such arrays, and its JSON output takes
      about 375 bytes per score (1.6 GB measured for 4 Mi), so about 6 GB at the cap.
    - ``max_weight_bytes``: bytes of one checkpoint weight read whole, counted as float64. A weight's size is
      the model's, not the text's, so it is counted by what it costs, not against ``max_elements``; a layer's
      weights are read, used and released layer by layer. Llama 3 8B's largest (an MLP matrix, 14,336 ×
      4,096) is 448 MiB; tables (embeddings, the LM head) are read by rows, each read within ``max_elements``.
    """

    max_bytes: int = 256 * MiB
    max_yaml_bytes: int = 64 * 1024
    max_depth: int = 32
    max_dimension: int = 1024**2
    max_elements: int = 16 * 1024**2
    max_weight_bytes: int = 1024**3

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **flags: str | int | None) -> Limits:
        """The defaults, replaced by ``ATTNX_MAX_*`` variables, replaced in turn by flags that are not None."""
        environ = os.environ if environ is None else environ
        values = {}
        for name in (f.name for f in fields(cls)):
            flag, env = flags.get(name), environ.get(env_name(name), "").strip()
            if flag is not None:
                values[name] = parse_cap(flag, name, flag_name(name))
            elif env:
                values[name] = parse_cap(env, name, env_name(name))
        unknown = set(flags) - set(CAPS)
        if unknown:
            raise TypeError(f"unknown caps: {', '.join(sorted(unknown))}")
        return cls(**values)

    def exceeded(self, cap: str, found: str) -> str:
        """``"{found} exceeds the input size cap of 256 MiB; raise it with --max-bytes or ATTNX_MAX_BYTES"``."""
        label, unit = CAPS[cap]
        value = getattr(self, cap)
        shown = size_text(value) if unit == "bytes" else f"{value:,} {unit}"
        return f"{found} exceeds the {label} of {shown}; raise it with {flag_name(cap)} or {env_name(cap)}"

    def check_bytes(self, size: int, name: str, cap: str = "max_bytes") -> None:
        """Raise LimitError when ``size`` bytes of ``name`` are over ``cap`` (``max_bytes`` or ``max_yaml_bytes``)."""
        if size > getattr(self, cap):
            found = size_text(size) + (" of YAML" if cap == "max_yaml_bytes" else "")
            hint = " (write large inputs as JSON or .npz)" if cap == "max_yaml_bytes" else ""
            raise LimitError(f"{name}: {self.exceeded(cap, found)}{hint}")

    def check_problem(self, spec: Problem, *, matrices: bool, rows: int | None = None) -> None:
        """Refuse, before anything is allocated, a problem whose arrays would pass these caps.

        Q, K and V (after any projection) always; the ``[head, query, key]`` matrices when
        ``matrices`` (for at most ``rows`` query rows: a trace computes one, a long table only the
        rows it shows; None: all). Without the matrices the engines work in blocks and never hold them.
        ``attnx.engines.compute`` calls it (``check_caps``) before every computation; the readers call it for
        Q, K and V where the input is read.
        """
        n, m = spec.n_queries, spec.n_keys
        arrays: list[tuple[str, tuple[int, ...]]] = [("Q", (n, spec.d_model)), ("K and V", (m, spec.kv_width))]
        if matrices:
            arrays.append(("the scores", (spec.settings.heads, n if rows is None else min(n, rows), m)))
        for what, shape in arrays:
            problem = self.shape_problem(shape)
            if problem:
                raise LimitError(f"{spec.source}: {what}: {problem}")

    def shape_problem(self, shape: tuple[int, ...]) -> str | None:
        """Why an array of ``shape`` must not be built (an axis or the element count over its cap), or None."""
        problem, total = self._axis_problem(shape), math.prod(shape)
        if problem is None and total > self.max_elements:
            dims = " × ".join(count_text(size, grouped=False) for size in shape)
            problem = self.exceeded("max_elements", f"an array of {dims} ({count_text(total)} elements)")
        return problem

    def weight_problem(self, shape: tuple[int, ...]) -> str | None:
        """Why a checkpoint weight of ``shape`` must not be read whole (an axis over the dimension cap, or its bytes
        as float64 over the weight cap), or None. A hostile header's shape is refused here, before any data."""
        problem, total = self._axis_problem(shape), math.prod(shape)
        if problem is None and total * WEIGHT_ITEMSIZE > self.max_weight_bytes:
            dims = " × ".join(count_text(size, grouped=False) for size in shape)
            found = (
                f"a weight of {dims} ({count_text(total)} elements, {size_text(total * WEIGHT_ITEMSIZE)} as float64)"
            )
            problem = self.exceeded("max_weight_bytes", found)
        return problem

    def rows_per_chunk(self, width: int) -> int:
        """How many rows of a table ``width`` wide one read may take: as many as fit the element cap (at least 1)."""
        return max(1, self.max_elements // max(1, width))

    def _axis_problem(self, shape: tuple[int, ...]) -> str | None:
        """An axis of ``shape`` over the dimension cap, or None."""
        size = next((size for size in shape if size > self.max_dimension), None)
        return None if size is None else self.exceeded("max_dimension", f"an axis of {count_text(size)}")


def flag_name(cap: str) -> str:
    """``max_bytes`` -> ``--max-bytes``."""
    return "--" + cap.replace("_", "-")


def env_name(cap: str) -> str:
    """``max_bytes`` -> ``ATTNX_MAX_BYTES``."""
    return "ATTNX_" + cap.upper()


def parse_cap(value: str | int, cap: str, source: str) -> int:
    """A positive whole number, with an optional binary suffix: ``4096``, ``64K``, ``512M``, ``1G``, ``2GiB``."""
    match = _SIZE.fullmatch(str(value))
    number = int(match[1]) * _UNITS[(match[2] or "").lower()] if match else 0
    if number < 1:
        raise UsageError(f"{source} takes a positive whole number, optionally with K, M or G, got {value!r}")
    if cap == "max_depth" and number > DEPTH_CEILING:
        raise UsageError(f"{source} can be at most {DEPTH_CEILING} (deeper nesting would exhaust Python's stack)")
    return number


def digits(number: int) -> int:
    """How many decimal digits ``number`` has (its sign aside), counted without ``str()``, which Python refuses past
    4,300 digits: a product of axes a header claims can have more."""
    number = abs(number)
    if number < 10**15:
        return len(str(number))
    power = math.floor(math.log10(number))  # a float's answer, off by one at most near a power of ten
    while 10**power > number:
        power -= 1
    while 10 ** (power + 1) <= number:
        power += 1
    return power + 1


def count_text(count: int, *, grouped: bool = True) -> str:
    """``1500`` -> ``"1,500"`` (``"1500"`` unless ``grouped``); a count of more than 15 digits, as a hostile header
    can claim, as its order of magnitude: ``"about 10^309"`` (``"10^309"`` unless ``grouped``)."""
    length = digits(count)
    if length > 15:
        return f"about 10^{length - 1}" if grouped else f"10^{length - 1}"
    return f"{count:,}" if grouped else str(count)


def size_text(size: int, *, decimal: bool = False) -> str:
    """``268435456`` -> ``"256 MiB"``, ``144`` -> ``"144 bytes"``; with ``decimal``, as file sizes are shown:
    ``90_900_000`` -> ``"90.9 MB"``, ``144`` -> ``"144 B"``."""
    if decimal:
        for unit, step in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if size >= step:
                return f"{size / step:.1f} {unit}"
        return f"{size} B"
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
    if size >= 1 << 1000:  # beyond what a float holds, as a header can claim: a power of two says enough
        return f"about 2^{size.bit_length() - 1} bytes"
    value, power = float(size), 0
    while value >= 1024 and power < len(units) - 1:
        value, power = value / 1024, power + 1
    return f"{size} byte{'' if size == 1 else 's'}" if power == 0 else f"{value:.4g} {units[power]}"
