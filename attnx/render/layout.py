"""The one table style every attnx view uses: compact, no outer edge, a rule under the header."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text


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
