"""`attnx align --timestamps`: each word a speech model wrote with its start and end in seconds, and as JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from attnx.analysis.timestamps import Timestamps
from attnx.render.layout import add_columns, compact_table
from attnx.render.serialize import FORMAT_VERSION
from attnx.text import label


def heads_named(found: Timestamps) -> str:
    """The alignment heads as ``L1 H2, L2 H0`` (layers and heads from 0)."""
    return ", ".join(f"L{layer} H{head}" for layer, head in found.heads)


def timestamps_view(found: Timestamps, *, max_rows: int | None = None) -> RenderableType:
    """The words, each with its start and end (seconds, to the encoder's 20 ms), then how they were found."""
    title = Text(f"Word timestamps from the alignment heads ({heads_named(found)}), the first "
                 f"{found.positions * found.precision:.2f} s of audio")  # fmt: skip
    table = compact_table()
    add_columns(table, "#", numeric=True)
    add_columns(table, "word", numeric=False)
    add_columns(table, "start", "end")
    shown = found.words if max_rows is None else found.words[:max_rows]
    for index, word in enumerate(shown):
        table.add_row(str(index), Text(label(word.text)), f"{word.start:.2f}", f"{word.end:.2f}")
    parts: list[RenderableType] = [title, table]
    if len(shown) < len(found.words):
        parts.append(Text(f"… {len(found.words) - len(shown)} more words (--max-rows)", style="dim"))
    if not found.words:
        parts.append(Text("no word: the decoder's sequence holds only special tokens", style="dim"))
    words = (f"seconds: a token ends at transformers' timestamp for it (median filter of width {found.width}, "
             "dynamic time warping) and starts where the token before it ends; a word spans its tokens")  # fmt: skip
    if found.written:
        words += f"; tokens {found.written[0]}-{found.written[-1]} written by the model"
    parts.append(Text(words, style="dim"))
    return Group(*parts)


def timestamps_to_dict(found: Timestamps, model: str) -> dict[str, Any]:
    """The JSON object of `attnx align --timestamps` (``format_version`` first; tokens, layers and heads from 0)."""
    return {
        "format_version": FORMAT_VERSION,
        "model": model,
        "alignment_heads": [list(pair) for pair in found.heads],
        "median_filter_width": found.width,
        "time_precision": found.precision,
        "audio_positions": found.positions,
        "written": list(found.written),
        "words": [
            {"word": word.text, "start": word.start, "end": word.end, "tokens": list(word.tokens)}
            for word in found.words
        ],
        "tokens": [
            {"index": t.index, "id": t.id, "token": t.token, "start": t.start, "end": t.end, "special": t.special}
            for t in found.tokens
        ],
    }
