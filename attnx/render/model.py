"""Showing models: what a checkpoint holds (`attnx model`) and the model view (`attnx heads --layer all`)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attnx.analysis.heads import THRESHOLDS, HeadStats
from attnx.analysis.model_view import ModelView
from attnx.limits import size_text
from attnx.models.architecture import ModelInfo
from attnx.render.colours import ACCENT, hex_of
from attnx.render.heads import NONE, cell, head_summary
from attnx.render.heatmap import HeatScale, cell_style
from attnx.render.serialize import FORMAT_VERSION

# Label codes of the model view's cells: five characters at most, so twelve heads fit 80 columns.
CODES = {
    "self": "self",
    "previous-token": "prev",
    "first-token": "first",
    "induction": "ind",
    "uniform": "unif",
    "focused": "focus",
}
TOKENS_SHOWN = 16
LABEL_STYLE = f"bold {hex_of(ACCENT)}"  # layer and head labels, fact names: legible on dark and light terminals


def info_rows(info: ModelInfo) -> list[tuple[str, str]]:
    """The facts of `attnx model`, one (name, value) pair per line."""
    named = f" ({', '.join(info.architectures)})" if info.architectures else ""
    stored = " and ".join(info.tokenizer_settings)
    ignored = [("not applied", f"tokenizer.json {stored}; attnx never pads or truncates a text")] if stored else []
    return [
        ("family", f"{info.family} ({info.design})"),
        ("model_type", f"{info.model_type}{named}"),
        ("layers", str(info.layers)),
        ("heads", f"{info.heads} × d_k {info.d_k}"),
        ("d_model", f"{info.d_model} · MLP {info.d_ff} · {info.activation}"),
        ("vocabulary", f"{info.vocab_size:,} tokens"),
        ("max length", f"{info.max_length} tokens (special tokens included)"),
        ("parameters", f"{info.parameters:,} ({', '.join(info.dtypes)})"),
        ("weights", f"model.safetensors, {size_text(info.size_bytes, decimal=True)}"),
        ("tokenizer", f"{info.tokenizer}, {info.tokenizer_vocab_size:,} tokens"),
        *ignored,
    ]


def info_view(info: ModelInfo) -> RenderableType:
    """`attnx model`: the checkpoint's folder, then its facts as a two-column table."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style=LABEL_STYLE, no_wrap=True)
    table.add_column()
    for name, value in info_rows(info):
        table.add_row(name, Text(value))  # a path or name with [brackets] is not Rich markup
    return Group(Text(info.path, style="bold"), table)


def info_to_dict(info: ModelInfo) -> dict[str, Any]:
    """The JSON object of `attnx model --format json` (``format_version`` first)."""
    return {
        "format_version": FORMAT_VERSION,
        "path": info.path,
        "architecture": info.architecture,
        "family": info.family,
        "design": info.design,
        "model_type": info.model_type,
        "architectures": list(info.architectures),
        "layers": info.layers,
        "heads": info.heads,
        "d_model": info.d_model,
        "d_k": info.d_k,
        "d_ff": info.d_ff,
        "activation": info.activation,
        "causal": info.causal,
        "vocab_size": info.vocab_size,
        "max_length": info.max_length,
        "parameters": info.parameters,
        "dtypes": list(info.dtypes),
        "size_bytes": info.size_bytes,
        "tokenizer": {
            "kind": info.tokenizer,
            "vocab_size": info.tokenizer_vocab_size,
            "stored_settings": list(info.tokenizer_settings),
        },
    }


def tokens_line(tokens: tuple[str, ...]) -> str:
    """The first tokens of the text, each in quotes (a leading space shows), and how many there are."""
    more = len(tokens) - TOKENS_SHOWN
    return "tokens: " + " ".join(f"'{t}'" for t in tokens[:TOKENS_SHOWN]) + (f" … ({more} more)" if more > 0 else "")


def model_view_table(view: ModelView, precision: int = 2, *, colour: bool = True) -> RenderableType:
    """The layer × head grid (``L0``, ``H0``: both count from 0): each cell a head's label code over its
    mean normalised entropy.

    With colour the entropy is drawn on a heatmap cell (dark: one key, bright: uniform), its number
    black or white, whichever reads on the cell (see ``attnx.render.colours``).
    """
    scale = HeatScale(1.0, "entropy")
    # No padding: the box's one-space column separators are the only gaps (12 heads × 6 + 4 = 76 columns).
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=0)
    table.add_column("", style=LABEL_STYLE, no_wrap=True)
    for h in range(view.heads):
        table.add_column(f"H{h}", justify="right", no_wrap=True, header_style=LABEL_STYLE)
    width = max(len(CODES[label]) for label in CODES)
    for layer, stats in enumerate(view.layers):
        cells = []
        for s in stats:
            entropy = s.scores.get("uniform")
            text = Text()
            text.append(CODES.get(s.label or "", NONE), style="bold" if s.label else "dim")
            number = cell(entropy, precision)
            if colour and entropy is not None:  # the number, not dimmed: it keeps the contrast chosen for its cell
                text.append("\n" + number.rjust(width), cell_style(scale.fraction(entropy)))
            else:
                text.append("\n" + number)
            cells.append(text)
        table.add_row(f"L{layer}", *cells)
    codes = ", ".join(f"{code} = {label}" for label, code in CODES.items() if code != label)
    about = (
        f"{view.model} ({view.architecture}) · {len(view.tokens)} tokens · {len(view.layers)} layers × "
        f"{view.heads} heads · {view.engine} {view.dtype} {view.device}"
    )
    return Group(
        Text(about, style="dim"),
        Text(tokens_line(view.tokens), style="dim"),
        Text("Model view: each head's pattern label over its mean normalised entropy", style="bold"),
        table,
        Text(
            f"labels as in attnx heads ({codes}; {NONE} none); entropy: mean over queries of entropy ÷ "
            "log(visible keys), 0 = one key, 1 = uniform",
            style="dim",
        ),
    )


def _summary(s: HeadStats) -> dict[str, Any]:
    summary = head_summary(s)
    summary["mean_normalized_entropy"] = summary["scores"]["uniform"]
    return summary


def model_view_to_dict(view: ModelView) -> dict[str, Any]:
    """The JSON object of `attnx heads --layer all --format json` (layers and heads 0-based)."""
    return {
        "format_version": FORMAT_VERSION,
        "model": view.model,
        "architecture": view.architecture,
        "tokens": list(view.tokens),
        "n_layers": len(view.layers),
        "n_heads": view.heads,
        "d_k": view.d_k,
        "scale": view.scale,
        "scale_mode": view.scale_mode,
        "engine": view.engine,
        "device": view.device,
        "dtype": view.dtype,
        "thresholds": dict(THRESHOLDS),
        "layers": [
            {
                "layer": layer,
                "heads": [_summary(s) for s in stats],
            }
            for layer, stats in enumerate(view.layers)
        ],
    }
