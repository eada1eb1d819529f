"""What the explorer's tests read off a screen: its lines, where each column of a heatmap ends, and an input with
the tokens a byte-level tokenizer makes."""

from __future__ import annotations

import dataclasses
import io
import re
from collections import defaultdict
from html import unescape

from rich.cells import cell_len
from rich.console import Console, RenderableType

from attnx.analysis.explore import Explorer
from attnx.cli.explore import explorer
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags

# The worked example's tokens as GPT-2, Llama 3, Qwen or SmolLM2 split "the cat sat on mat": a word after a
# space keeps the space (the tiny GPT-2 of tests/models/checkpoints.py gives these very tokens).
BYTE_LEVEL = ("the", " cat", " sat", " on", " mat")
NUMBER = re.compile(r"-?\d+\.\d+|·")  # a heatmap's cell: a number, or the dot of a masked pair


def byte_level(layers: int = 1) -> Explorer:
    """The worked example with byte-level tokens; ``layers`` > 1 makes it a model's (every layer the same)."""
    spec = explorer(None, InputFlags(), ModelFlags(), EngineFlags(), CapFlags()).spec
    spec = dataclasses.replace(spec, tokens=BYTE_LEVEL, key_tokens=BYTE_LEVEL)
    return Explorer(lambda _layer: spec, layers, "byte-level" if layers == 1 else "model", {})


def printed(*renderables: RenderableType | None, width: int) -> list[str]:
    """The lines a plain console ``width`` characters wide prints for ``renderables``."""
    out = io.StringIO()
    console = Console(width=width, file=out, color_system=None)
    for renderable in renderables:
        console.print(renderable)
    return out.getvalue().splitlines()


def screen_lines(svg: str) -> list[str]:
    """The lines of an SVG screen (Rich's export: one ``<text>`` per run of a style, at x = column × cell width)."""
    runs = [
        (int(line), float(x), float(length), unescape(text).replace("\xa0", " "))
        for x, length, line, text in re.findall(
            r'<text [^>]*x="([\d.]+)" [^>]*textLength="([\d.]+)" clip-path="url\(#terminal-\d+-line-(\d+)\)">'
            r"([^<]*)</text>",
            svg,
        )
    ]
    cell = min(length / cell_len(text) for _, _, length, text in runs if cell_len(text))  # one cell's width
    lines: dict[int, list[str]] = defaultdict(list)
    for line, x, _, text in runs:
        row = lines[line]
        column = round(x / cell)
        row.extend(" " * (column - len(row)))
        row[column : column + len(text)] = list(text)
    return ["".join(lines[line]).rstrip() for line in range(max(lines, default=-1) + 1)]


def ends(line: str, pattern: str = r"\S+") -> list[int]:
    """Where each match of ``pattern`` in ``line`` ends (the column after its last character)."""
    return [match.end() for match in re.finditer(pattern, line)]


def grids(lines: list[str], keys: tuple[str, ...]) -> list[tuple[list[int], list[list[int]]]]:
    """Each heatmap of ``lines`` whose columns are ``keys`` (several side by side count as one): where its column
    labels end, and where the numbers of each of its rows end."""
    words = [key.strip() for key in keys]
    found = []
    for i, line in enumerate(lines[:-1]):
        if line.split()[: len(words)] != words or not lines[i + 1].lstrip().startswith("─"):
            continue
        rows = []
        for row in lines[i + 2 :]:
            if not NUMBER.search(row) or row.lstrip().startswith(("weight", "scaled", "largest")):
                break
            rows.append(ends(row, NUMBER.pattern))
        found.append((ends(line), rows))
    return found
