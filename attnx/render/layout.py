"""The house style every attnx view shares: the compact table, and the verdict line under a comparison."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from attnx.render.colours import FAIL, LABEL, PASS


def compact_table(title: str | Text | None = None, **options: Any) -> Table:
    """A Rich table in attnx's house style; ``options`` override or add Table arguments.

    A string title is taken literally (never parsed as Rich markup: a token like ``[b]`` stays text).
    """
    settings: dict[str, Any] = {
        "title": Text(title) if isinstance(title, str) else title,
        "title_justify": "left",
        "title_style": "bold",
        "box": box.SIMPLE_HEAD,
        "show_edge": False,
        "pad_edge": False,
        "collapse_padding": True,
    }
    return Table(**(settings | options))


def verdict(passed: bool, agree: str, differ: str) -> Text:
    """The last line of a comparison: ``agree`` in bold PASS colour, or ``differ`` in FAIL colour."""
    return Text(agree, style=f"bold {PASS}") if passed else Text(differ, style=FAIL)


def add_columns(table: Table, *headers: str, numeric: bool = True) -> None:
    """Columns of ``headers``: numbers are never wrapped nor cut; text (labels, locations, shapes) wraps when
    the width is short."""
    for header in headers:
        table.add_column(header, justify="right" if numeric else "left", header_style=LABEL,
                         no_wrap=numeric, overflow="fold")  # fmt: skip
