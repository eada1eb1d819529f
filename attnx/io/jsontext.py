"""Finding places in JSON text (a value by key path, a duplicate key, a nesting too deep) after parsing.

``json.loads`` gives values without positions. These scans run only when a message needs a
position, so a valid document pays nothing for them; none of them recurses.
"""

from __future__ import annotations

import json
import json.decoder
import math
import re
from collections.abc import Callable

# The scanners json.loads itself uses: CPython's json.decoder has them, typeshed's stub does not declare them.
WHITESPACE: re.Pattern[str] = json.decoder.WHITESPACE  # type: ignore[attr-defined]  # missing from typeshed
scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]  # idem

PathPart = str | int

# A string literal or a bracket: numbers, commas and colons are skipped by the regex engine.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_DECODER = json.JSONDecoder()
# A string literal, an infinity or a number: what a scan for numbers must see whole (a string may hold digits).
_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?', re.DOTALL)


def line_col(text: str, offset: int) -> str:
    """``"line:column"`` (both from 1) of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"{line}:{column}"


def too_deep(text: str, max_depth: int) -> tuple[int, int] | None:
    """``(offset, level)`` of the first bracket that opens level ``max_depth + 1``, or None."""
    if text.count("[") + text.count("{") <= max_depth:  # too few brackets to nest that deep: no scan (a million
        return None  # strings in one list took seconds token by token)
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match[0]
        if token in ("[", "{"):
            depth += 1
            if depth > max_depth:
                return match.start(), depth
        elif token in ("]", "}"):
            depth -= 1
    return None


def duplicate_key(text: str, key: str) -> int | None:
    """Offset of the first repeat of ``key`` within one object, or None."""
    seen: list[set[str] | None] = []  # per open bracket: the keys of an object, None for an array
    for match in _TOKEN.finditer(text):
        token = match[0]
        if token in ("{", "["):
            seen.append(set() if token == "{" else None)
        elif token in ("}", "]"):
            if seen:
                seen.pop()
        elif seen and seen[-1] is not None and text.startswith(":", _skip(text, match.end())):
            name = json.loads(token)
            if name == key and name in seen[-1]:
                return match.start()
            seen[-1].add(name)
    return None


def overflowing_float(text: str, start: int) -> tuple[int, int, str] | None:
    """The first number literal in the JSON value at ``start`` of valid ``text`` that is beyond float64's range
    (``1e400``, which ``json.loads`` reads as inf, as it reads ``Infinity``): ``(index, offset, literal)``, where
    ``index`` counts the literals read as ±inf before it in the value. None when there is none."""
    _, end = _DECODER.raw_decode(text, start)
    index = 0
    for match in _LITERAL.finditer(text, start, end):
        literal = match[0]
        if literal.endswith("Infinity"):
            index += 1
        elif literal[0] != '"' and _is_float(literal) and math.isinf(float(literal)):
            return index, match.start(), literal
    return None


def long_integer(text: str, digits: int) -> int | None:
    """Offset of the first integer literal of more than ``digits`` digits in JSON ``text``, or None."""
    for match in _LITERAL.finditer(text):
        literal = match[0]
        if literal[0] != '"' and not _is_float(literal) and len(literal.lstrip("-")) > digits:
            return match.start()
    return None


def _is_float(literal: str) -> bool:
    """True for a number literal JSON reads as a float: one with a fraction or an exponent."""
    return "." in literal or "e" in literal or "E" in literal


def value_offset(text: str, path: tuple[PathPart, ...], *, key: bool = False) -> int | None:
    """Offset of the value at ``path`` (``("q", 2, 1)``) in valid JSON ``text``; of its key, with ``key``.

    None when the path is not there.
    """
    try:
        pos: int | None = _skip(text, 0)
        for i, part in enumerate(path):
            if pos is None:
                return None
            if isinstance(part, str) and text.startswith("{", pos):
                pos = _member(text, _skip(text, pos + 1), part, key=key and i == len(path) - 1)
            elif isinstance(part, int) and text.startswith("[", pos):
                pos = _item(text, _skip(text, pos + 1), part)
            else:
                return None
        return pos
    except (ValueError, RecursionError):  # not valid JSON after all: no position to give
        return None


def _member(text: str, pos: int | None, name: str, *, key: bool) -> int | None:
    while pos is not None and text.startswith('"', pos):
        found, end = scanstring(text, pos + 1)
        value = _skip(text, _skip(text, end) + 1)  # past the colon
        if found == name:
            return pos if key else value
        pos = _next(text, value)
    return None


def _item(text: str, pos: int | None, index: int) -> int | None:
    for _ in range(index):
        if pos is None or text.startswith("]", pos):
            return None
        pos = _next(text, pos)
    return None if pos is None or text.startswith("]", pos) else pos


def _next(text: str, pos: int) -> int | None:
    """Past the value at ``pos`` and the comma after it; None at the end of its array or object."""
    _, end = _DECODER.raw_decode(text, pos)
    end = _skip(text, end)
    return _skip(text, end + 1) if text.startswith(",", end) else None


def _skip(text: str, pos: int) -> int:
    return next(WHITESPACE.finditer(text, pos)).end()  # `[ \t\n\r]*` matches at every position
