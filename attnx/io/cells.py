"""The cells of an input document: matrices, vectors, whole numbers and token lists, each checked in place."""

from __future__ import annotations

import re
import sys
from typing import Any

import numpy as np

from attnx.errors import LimitError
from attnx.io.documents import Document
from attnx.io.messages import clip
from attnx.limits import digits

FLOAT_MAX = sys.float_info.max
NUMBER = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*")  # text a reader would take for a number
UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")  # control characters, lone surrogates


def matrix(doc: Document, value: Any, path: tuple[str | int, ...]) -> np.ndarray:
    """A non-empty rectangular matrix of real, finite numbers, as float64."""
    if isinstance(value, np.ndarray):
        return numeric_array(doc, value, path, ndim=2)
    if not isinstance(value, list) or not value:
        raise doc.error(path, f"expected a non-empty list of rows, got {describe(value)}")
    check_shape(doc, path, (len(value), len(value[0]) if isinstance(value[0], list) else 0))
    width = None
    for i, row in enumerate(value):
        check_numbers(doc, row, (*path, i))
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise doc.error((*path, i), f"has {len(row)} values but row 0 has {width} (ragged matrix)")
    return np.asarray(value, dtype=np.float64)


def vector(doc: Document, value: Any, path: tuple[str | int, ...]) -> np.ndarray:
    """A non-empty list of real, finite numbers, as float64."""
    if isinstance(value, np.ndarray):
        return numeric_array(doc, value, path, ndim=1)
    check_shape(doc, path, (len(value),) if isinstance(value, list) else ())
    check_numbers(doc, value, path)
    return np.asarray(value, dtype=np.float64)


def numeric_array(doc: Document, array: np.ndarray, path: tuple[str | int, ...], ndim: int) -> np.ndarray:
    """An array from a binary input: real numbers (not booleans), the right rank, non-empty, finite.

    float32 arrays stay float32; other numbers become float64.
    """
    if array.dtype.kind not in "iuf":
        raise doc.error(path, f"expected an array of numbers, got dtype {array.dtype}")
    if array.ndim != ndim or 0 in array.shape:
        kind = "matrix" if ndim == 2 else "vector"
        raise doc.error(path, f"expected a non-empty {kind}, got shape {array.shape}")
    check_shape(doc, path, array.shape)
    array = array if array.dtype == np.float32 else array.astype(np.float64)  # float32 stays: no precision to add
    bad = ~np.isfinite(array)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise doc.error((*path, *where), f"expected a finite number, got {array[where]}")
    return array


def check_numbers(doc: Document, row: Any, path: tuple[str | int, ...]) -> None:
    """Refuse a row whose cells are not all real, finite numbers, naming the first that is not."""
    if not isinstance(row, list) or not row:
        raise doc.error(path, f"expected a non-empty list of numbers, got {describe(row)}")
    for j, cell in enumerate(row):
        if type(cell) is not float and type(cell) is not int:
            hint = text_hint(cell)
            raise doc.error((*path, j), f"expected a number, got {describe(cell)}{hint}")
        if not finite(cell):
            got = cell if isinstance(cell, float) else f"an integer of {digits(cell)} digits"
            raise doc.error((*path, j), f"expected a finite number, got {got}")


def finite(number: float) -> bool:
    """True for a number float64 holds (NaN, infinities and integers beyond ±1.8e308 are not)."""
    return -FLOAT_MAX <= number <= FLOAT_MAX


def check_shape(doc: Document, path: tuple[str | int, ...], shape: tuple[int, ...]) -> None:
    """Refuse, before it is built, an array whose shape passes the dimension or element cap."""
    problem = doc.limits.shape_problem(shape)
    if problem:
        raise doc.error(path, problem, kind=LimitError)


def whole(doc: Document, data: dict[str, Any], key: str, default: int, minimum: int) -> int:
    """Key ``key`` of ``data`` as a whole number of at least ``minimum`` (``default`` when absent)."""
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error((key,), f"expected a whole number, got {describe(value)}")
    if value < minimum:
        word = "positive" if minimum == 1 else f"at least {minimum}"
        raise doc.error((key,), f"must be {word}, got {value}")
    return value


def token_list(doc: Document, data: dict[str, Any], key: str) -> tuple[str, ...]:
    """A list of tokens, or one string of words separated by spaces (as ``--tokens`` takes them)."""
    value = written = data[key]
    if isinstance(value, str):
        bad = UNPRINTABLE.search(value)
        if bad:
            raise doc.error((key,), f"control character U+{ord(bad[0]):04X} in the tokens (tokens are printed)")
        value = value.split()
    if not isinstance(value, list) or not value:
        got = describe(written)
        raise doc.error((key,), f"expected a non-empty list of strings or one string of words, got {got}")
    check_shape(doc, (key,), (len(value),))
    out = []
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, (str, int, float)):
            hint = " (quote it)" if isinstance(token, bool) or token is None else ""
            raise doc.error((key, i), f"expected a string, got {describe(token)}{hint}")
        bad = UNPRINTABLE.search(token) if isinstance(token, str) else None
        if bad:
            raise doc.error((key, i), f"control character U+{ord(bad[0]):04X} in a token (tokens are printed)")
        out.append(str(token))
    return tuple(out)


def shape(array: np.ndarray) -> str:
    """``2x3``: an array's shape as messages write it."""
    return "x".join(map(str, array.shape))


def text_hint(value: Any) -> str:
    """Why a number came out as text: it was written in quotes."""
    if isinstance(value, str) and NUMBER.fullmatch(value):
        return " (a number in quotes is text: remove the quotes)"
    return ""


def describe(value: Any) -> str:
    """What a wrong value is, in a few words: ``nothing (null)``, ``true``, ``text 'abc'``, ..."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"text {clip(value)!r}"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{type(value).__name__} {clip(repr(value), 40)}"
