"""The one sanitiser every text shown to a person passes: control and format characters made visible, long text clipped.

Tokens, file and folder names, strings from config.json and tokenizer.json, keys echoed in errors: any of
them may hold terminal escapes (``\\x1b[2J``), bidi controls that reorder a line (U+202E), or text long
enough to flood a terminal. ``inert`` writes every control, format, line-separator and surrogate character
as an escape (``\\x1b``, ``\\u202e``, ``\\n``); ``clip`` shortens a long message in its middle, keeping its
start and the remedy at its end. Machine output (JSON, CSV, NPY) keeps the exact text and never comes here.

Where it applies: every Rich console attnx prints on carries ``InertRenderHook`` (tables, traces, titles,
heatmaps, exports); every line attnx writes to stderr goes through ``inert(clip(...))``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})  # controls, format (bidi), separators, surrogates
NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
MESSAGE_LIMIT = 600  # characters of a one-line message before its middle is clipped
KEEP_END = 200  # characters kept from a clipped message's end (where the remedy is)
LABEL_LIMIT = 24  # terminal cells a token is shown in at most: ``the``, ``▁Paris``, or the two ends of a long one
NAME_LIMIT = 64  # terminal cells a name from a file is shown in at most (config.json classes, GGUF metadata)
MARKS = 4  # characters a label keeps per cell at most: combining marks take no cell, yet need a bound
CUT = "…"


def _escaped(char: str) -> str:
    if char in NAMED_ESCAPES:
        return NAMED_ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def inert(text: str, *, keep: str = "") -> str:
    """``text`` with every control, format, separator and surrogate character written as an escape, except
    those in ``keep`` (a renderer's own line breaks)."""
    if text.isprintable():  # the common case: no character needs looking at
        return text
    return "".join(
        _escaped(char) if char not in keep and unicodedata.category(char) in ESCAPED_CATEGORIES else char
        for char in text
    )


def clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut in its middle to about ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    head = limit - KEEP_END
    return f"{text[:head]} … ({len(text) - head - KEEP_END:,} characters) … {text[-KEEP_END:]}"


def label(token: str, limit: int = LABEL_LIMIT) -> str:
    """A token (or a name) as a table, heatmap or trace shows it: whole when it takes at most ``limit`` terminal
    cells once made inert, else its start and its end around ``…``, in ``limit`` cells together.

    Cells are counted as the text will be shown: a wide (CJK) character takes two, a character ``inert`` escapes
    its escape's length (``\\x07``: four), a combining mark none; ``limit`` × ``MARKS`` characters at most are
    kept. The raw text is cut on whole characters, then made inert as it is printed: an escape is never cut in
    half. Only the ends are read, so a token of ten million characters costs what a short one does. Every
    renderer cuts a token here before Rich measures it (Rich wraps a long text in quadratic time: the trace of a
    2,000,000-character token took 25 s). Machine output keeps the whole text.
    """
    if len(token) <= limit and token.isascii() and token.isprintable():  # the usual token: a cell a character
        return token
    if len(token) <= limit * MARKS and _fits(token, limit, limit * MARKS) == len(token):
        return token
    cells = (limit - 1) * 2 // 3  # the start's share of the cells; the end takes what the start leaves
    head = _fits(token, cells, cells * MARKS)
    tail = _fits(token, limit - 1 - _cells(token[:head]), (limit - 1) * MARKS - head, end=True)
    return f"{token[:head]}{CUT}{token[len(token) - tail :]}"


def labels(tokens: Iterable[str], limit: int = LABEL_LIMIT) -> list[str]:
    """Each of ``tokens`` as ``label`` shows it."""
    return [label(token, limit) for token in tokens]


def _cell(char: str) -> int:
    """Terminal cells ``char`` takes once made inert."""
    from rich.cells import get_character_cell_size

    if char.isprintable() or unicodedata.category(char) not in ESCAPED_CATEGORIES:
        return get_character_cell_size(char)
    return len(_escaped(char))


def _cells(text: str) -> int:
    """Terminal cells ``text`` takes once made inert."""
    return len(text) if text.isascii() and text.isprintable() else sum(map(_cell, text))


def _fits(text: str, cells: int, chars: int, *, end: bool = False) -> int:
    """How many of ``text``'s first characters (or last, with ``end``) fit in ``cells`` once made inert, and in
    ``chars`` characters."""
    most = min(len(text), chars)
    part = text[len(text) - most :] if end else text[:most]
    if part.isascii() and part.isprintable():  # a cell a character
        return min(cells, most)
    used = 0
    for count, char in enumerate(reversed(part) if end else part):
        used += _cell(char)
        if used > cells:
            return count
    return most


def message_line(text: str) -> str:
    """One line for stderr: line breaks become spaces, the rest made inert, a long text clipped."""
    return inert(clip(" ".join(text.splitlines())))


class Inert:
    """A renderable whose text is made inert as it is rendered: Rich's own control segments (cursor moves)
    and line breaks pass, every other character goes through ``inert``."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment

        segments = list(console.render(self.renderable, options))
        if "".join([s.text for s in segments]).replace("\n", "").isprintable():  # the usual case, checked at once
            return segments
        return [
            s if s.control or s.text.isprintable() else Segment(inert(s.text, keep="\n"), s.style) for s in segments
        ]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Any:
        from rich.measure import Measurement

        return Measurement.get(console, options, self.renderable)


class InertRenderHook:
    """A Rich render hook (``console.push_render_hook``) that wraps everything printed in ``Inert``."""

    def process_renderables(self, renderables: list[Any]) -> list[Any]:
        """Every renderable, made inert."""
        return [Inert(renderable) for renderable in renderables]


def console(**options: Any) -> Console:
    """A Rich console whose every printed text is made inert (``InertRenderHook``); no highlighting, no emoji
    codes unless ``options`` say otherwise. Every console attnx prints on is made here."""
    from rich.console import Console

    made = Console(**({"highlight": False, "emoji": False} | options))
    made.push_render_hook(InertRenderHook())  # type: ignore[arg-type]  # a RenderHook by its method
    return made
