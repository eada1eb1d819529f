"""The words input errors share: where (``file:line:column``), a parser's first clause, a clipped value, the depth cap.

The JSON reader (``documents``) and the YAML reader (``yamltext``) both word their errors with them: kept apart
from both, so that ``yamltext`` needs nothing from ``documents``, which imports it only when YAML is read.
"""

from __future__ import annotations

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
