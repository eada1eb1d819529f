"""Input contract version 1: turning a parsed document into an AttentionSpec."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnx.io.documents import Document
from attnx.spec import AttentionSpec

INPUT_VERSION = 1
KEYS = ("version", "tokens", "heads", "q", "k", "v", "seed", "d_model")
DEFAULT_HEADS = 1
DEFAULT_D_MODEL = 8


@dataclass(frozen=True)
class Overrides:
    """Values given on the command line; each one that is not None replaces the document's key."""

    heads: int | None = None
    seed: int | None = None
    tokens: tuple[str, ...] | None = None
    d_model: int | None = None

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``data`` with these values put in."""
        merged = dict(data)
        for key in ("heads", "seed", "d_model"):
            if getattr(self, key) is not None:
                merged[key] = getattr(self, key)
        if self.tokens is not None:
            merged["tokens"] = list(self.tokens)
        return merged


def spec_from_document(doc: Document, overrides: Overrides | None = None) -> AttentionSpec:
    """Check every key of ``doc`` against the contract and build the spec it describes."""
    data = (overrides or Overrides()).apply(doc.data)
    for key in data:
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise doc.error((key,), f"unknown key{hint}; known keys: {', '.join(KEYS)}", key=True)

    version = data.get("version", INPUT_VERSION)
    if version != INPUT_VERSION or isinstance(version, bool):
        raise doc.error(("version",), f"unsupported input version {version!r}; this attnx reads version 1")

    heads = _whole(doc, data, "heads", DEFAULT_HEADS, minimum=1)
    tokens = _tokens(doc, data)
    given = [key for key in ("q", "k", "v") if key in data]

    if "seed" in data:
        if given:
            raise doc.error((given[0],), "give either q, k and v or a seed to draw them from, not both")
        seed = _whole(doc, data, "seed", 0, minimum=0)
        if tokens is None:
            raise doc.error(("seed",), "a seed needs tokens, to know how many rows to draw")
        d_model = _whole(doc, data, "d_model", DEFAULT_D_MODEL, minimum=1)
        q, k, v = random_qkv(seed, len(tokens), d_model)
    else:
        if len(given) != 3:
            missing = [key for key in ("q", "k", "v") if key not in data]
            raise doc.error((), f"missing {', '.join(missing)}: give q, k and v, or a seed to draw them from")
        q, k, v = (matrix(doc, data[key], (key,)) for key in ("q", "k", "v"))
        if "d_model" in data:
            d_model = _whole(doc, data, "d_model", 0, minimum=1)
            if d_model != q.shape[1]:
                raise doc.error(("d_model",), f"is {d_model} but q has {q.shape[1]} columns")
        if tokens is None:
            tokens = tuple(f"t{i}" for i in range(q.shape[0]))

    if q.shape != k.shape or q.shape != v.shape:
        raise doc.error(
            (),
            f"q, k and v must have the same shape, got q {_shape(q)}, k {_shape(k)}, v {_shape(v)}",
        )
    if len(tokens) != q.shape[0]:
        raise doc.error(("tokens",), f"{len(tokens)} tokens given but q has {q.shape[0]} rows")
    return AttentionSpec(q, k, v, heads, tokens, tokens, source=doc.name)


def random_qkv(seed: int, n: int, d_model: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, K and V drawn together: ``default_rng(seed).standard_normal((3, n, d_model))``."""
    q, k, v = np.random.default_rng(seed).standard_normal((3, n, d_model))
    return q, k, v


def matrix(doc: Document, value: Any, path: tuple[str | int, ...]) -> np.ndarray:
    """A non-empty rectangular matrix of real, finite numbers, as float64."""
    if not isinstance(value, list) or not value:
        raise doc.error(path, f"expected a non-empty list of rows, got {_describe(value)}")
    width = None
    for i, row in enumerate(value):
        if not isinstance(row, list) or not row:
            raise doc.error((*path, i), f"expected a non-empty list of numbers, got {_describe(row)}")
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise doc.error((*path, i), f"has {len(row)} values but row 0 has {width} (ragged matrix)")
        for j, cell in enumerate(row):
            if type(cell) is not float and (type(cell) is not int):
                hint = " (write 1000.0, not 1e3: YAML 1.1 reads 1e3 as text)" if _looks_numeric(cell) else ""
                raise doc.error((*path, i, j), f"expected a number, got {_describe(cell)}{hint}")
            if type(cell) is float and not math.isfinite(cell):
                raise doc.error((*path, i, j), f"expected a finite number, got {cell}")
    return np.asarray(value, dtype=np.float64)


def _whole(doc: Document, data: dict[str, Any], key: str, default: int, minimum: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error((key,), f"expected a whole number, got {_describe(value)}")
    if value < minimum:
        word = "positive" if minimum == 1 else f"at least {minimum}"
        raise doc.error((key,), f"must be {word}, got {value}")
    return value


def _tokens(doc: Document, data: dict[str, Any]) -> tuple[str, ...] | None:
    if "tokens" not in data:
        return None
    value = data["tokens"]
    if not isinstance(value, list) or not value:
        raise doc.error(("tokens",), f"expected a non-empty list of strings, got {_describe(value)}")
    out = []
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, (str, int, float)):
            raise doc.error(("tokens", i), f"expected a string, got {_describe(token)} (quote it)")
        out.append(str(token))
    return tuple(out)


def _shape(array: np.ndarray) -> str:
    return "x".join(map(str, array.shape))


def _looks_numeric(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        shown = value if len(value) <= 20 else value[:17] + "..."
        return f"text {shown!r}"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{type(value).__name__} {value!r}"
