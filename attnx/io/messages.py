"""The words input errors share: where (``file:line:column``), a parser's first clause, a clipped value, the depth cap,
the name the user may have meant.

The JSON reader (``documents``) and the YAML reader (``yamltext``) both word their errors with them: kept apart
from both, so that ``yamltext`` needs nothing from ``documents``, which imports it only when YAML is read.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from attnx.io.jsontext import line_col
from attnx.limits import Limits


def located(name: str, text: str, offset: int | None) -> str:
    """``name:line:column`` of ``offset`` in ``text`` (just ``name`` without an offset)."""
    return name if offset is None else f"{name}:{line_col(text, offset)}"


def depth_problem(limits: Limits, level: int) -> str:
    """The message for nesting past the depth cap, saying how to raise it."""
    return limits.exceeded("max_depth", f"level {level} of nesting")


def first_clause(exc: Exception) -> str:
    """The message of ``exc`` up to its first ``;`` (Python's hints after it are for programmers)."""
    return str(exc).split(";")[0].strip()


def clip(text: str, width: int = 20) -> str:
    """``text``, cut to ``width`` characters with ``...`` when longer."""
    return text if len(text) <= width else text[: width - 3] + "..."


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'cat'?)``: the first of ``known`` that is ``word`` but for case and surrounding spaces,
    else the closest by spelling; nothing when none is close."""
    names = list(dict.fromkeys(known))
    folded = word.strip().casefold()
    same = [name for name in names if name.strip().casefold() == folded]
    close = same[:1] or difflib.get_close_matches(word, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
