"""The house style every attnx view shares: the compact table, the verdict line under a comparison, and the first of
several layouts that fits the width."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.text import Text

from attnx.render.colours import FAIL, LABEL, PASS

if TYPE_CHECKING:  # pragma: no cover
    from rich.table import Table  # 5 ms with fractions: only where a table is drawn (not run's default view)


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
    from rich.table import Table

    return Table(**(settings | options))


def meanings(columns: Iterable[tuple[str, str]]) -> str:
    """What a table's columns mean, in one line: ``std: of the scaled scores · max w: mean max weight``."""
    return " · ".join(f"{header}: {meaning}" for header, meaning in columns)


def column_legend(*columns: tuple[str, str]) -> Text:
    """The dim line under a table saying what its columns (header, meaning) are, as `heads` prints under its own."""
    return Text(meanings(columns), style="dim")


def verdict(passed: bool, agree: str, differ: str) -> Text:
    """The last line of a comparison: ``agree`` in bold PASS colour, or ``differ`` in FAIL colour."""
    return Text(agree, style=f"bold {PASS}") if passed else Text(differ, style=FAIL)


def under_name(name: str, detail: Text) -> RenderableType:
    """A table cell: ``name``, and under it ``detail`` two cells in, its wrapped lines too (a narrow table's
    place for what a wide one gives a column)."""
    return Group(Text(name), Padding(detail, (0, 0, 0, 2)))


def add_columns(table: Table, *headers: str, numeric: bool = True) -> None:
    """Columns of ``headers``: numbers are never wrapped nor cut; text (labels, locations, shapes) wraps when
    the width is short."""
    for header in headers:
        table.add_column(header, justify="right" if numeric else "left", header_style=LABEL,
                         no_wrap=numeric, overflow="fold")  # fmt: skip


class FirstFit:
    """The first of several renderings that fits the width without wrapping, else the last (the narrowest)."""

    def __init__(self, *choices: RenderableType) -> None:
        self.choices = choices

    @staticmethod
    def natural(console: Console, options: ConsoleOptions, renderable: RenderableType) -> int:
        """The width ``renderable`` takes when nothing limits it."""
        return Measurement.get(console, options.update(max_width=1 << 16), renderable).maximum

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for choice in self.choices[:-1]:
            if self.natural(console, options, choice) <= options.max_width:
                yield choice
                return
        yield self.choices[-1]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        sizes = [Measurement.get(console, options, choice) for choice in self.choices]
        return Measurement(min(size.minimum for size in sizes), sizes[0].maximum)


def fit_words(text: str, width: int) -> str:
    """``text`` with each word too wide for ``width`` cells cut in its middle with ``…``, as tokens are (``label``):
    to leave room, where it can, for the rest of its clause (up to the next `` · ``), else to ``width``. A long
    model path then stays one word, whole at both ends, instead of breaking across lines."""
    from rich.cells import cell_len

    from attnx.text import label

    lines = []
    for line in text.split("\n"):
        words = line.split(" ")
        for i, word in enumerate(words):
            if label(word, width) == word:
                continue
            clause = " ".join(words[i + 1 :]).split("·")[0].rstrip()
            room = width - cell_len(clause) - 1 if clause else width
            words[i] = label(word, room if room >= width // 2 else width)
        lines.append(" ".join(words))
    return "\n".join(lines)


class Headline:
    """A header's lines (the source, the sizes, the engine) whose too-wide words are cut to the console's width
    when drawn (``fit_words``); never parsed as markup."""

    def __init__(self, text: str, style: str = "dim") -> None:
        self.text = text
        self.style = style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(fit_words(self.text, options.max_width), style=self.style)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, Text(fit_words(self.text, options.max_width), style=self.style))
