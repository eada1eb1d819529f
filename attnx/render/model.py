"""Showing models: what a checkpoint holds (`attnx model`) and the model view (`attnx heads --layer all`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attnx.analysis.heads import HeadStats
from attnx.analysis.model_view import ModelView
from attnx.core.measures import CODES, HEADS, MEASURES
from attnx.limits import size_text
from attnx.models.architecture import ModelInfo
from attnx.models.stacks import InputKind
from attnx.render.colours import ACCENT, hex_of
from attnx.render.heads import NONE, cell, head_summary, thresholds_json
from attnx.render.heatmap import HeatScale, cell_style
from attnx.render.layout import Headline, add_columns, compact_table
from attnx.render.serialize import FORMAT_VERSION
from attnx.text import NAME_LIMIT, label

if TYPE_CHECKING:  # pragma: no cover
    from attnx.models.gguf import GgufSummary
    from attnx.models.stacks import Stack

# CODES (the measure registry's): each label's code in the grids, five characters at most, so twelve heads fit
# 80 columns.
HEAD_LABELS = HEADS.labels
ENTROPY = MEASURES["entropy"]  # the number under each label
TOKENS_SHOWN = 16
LABEL_STYLE = f"bold {hex_of(ACCENT)}"  # layer and head labels, fact names: legible on dark and light terminals


def info_rows(info: ModelInfo) -> list[tuple[str, str]]:
    """The facts of `attnx model`, one (name, value) pair per line."""
    named = f" ({', '.join(label(name, NAME_LIMIT) for name in info.architectures)})" if info.architectures else ""
    stored = " and ".join(info.tokenizer_settings)
    ignored = [("not applied", f"tokenizer.json {stored}; attnx never pads or truncates a text")] if stored else []
    heads = f"{info.heads} × d_k {info.head_dim}"
    if info.kv_heads < info.heads:
        group = info.heads // info.kv_heads
        kind = "multi-query" if info.kv_heads == 1 else "grouped-query"
        heads += f", {info.kv_heads} K/V heads ({kind}: groups of {group})"
    attention = [("heads", heads), ("positions", positions_text(info))]
    if info.qk_norm:
        where = "on each head's q and k before"
        if info.qk_norm_over == "projection":  # OLMo 2's
            where = "over the whole projection of q and of k, before the head split and"
        attention.append(("QK-norm", f"RMSNorm {where} rotary positions"))
    attention += [("window", text) for text in [windows_text(info.windows)] if text]
    if info.softcap is not None:
        attention.append(("soft cap", f"scores capped at {info.softcap:g} (cap · tanh(s / cap))"))
    if info.sinks:
        attention.append(("sinks", "a learned logit per head joins each row's softmax (a key without a value)"))
    experts = [] if info.mixture is None else [("experts", info.mixture.describe())]
    images = bool(info.stacks) and info.stacks[0].reads is InputKind.IMAGE  # a vision encoder: no vocabulary
    vocabulary = [] if images else [("vocabulary", f"{info.vocab_size:,} tokens")]
    length = "positions (CLS and patches)" if images else "tokens (special tokens included)"
    return [
        ("family", f"{info.family} ({info.design})"),
        *([("model_type", f"{info.model_type}{named}")] if info.gguf is None else gguf_names(info.gguf, info)),
        *stack_rows(info),
        *attention,
        ("d_model", f"{info.d_model} · MLP {info.d_ff} · {info.activation}{', gated' if info.gated else ''}"),
        *experts,
        *vocabulary,
        *[("embeddings", "tied: the output layer reuses them" if tied else "untied") for tied in tied_of(info)],
        ("max length", f"{info.max_length} {length}"),
        *(safetensors_rows(info) if info.gguf is None else gguf_rows(info.gguf, info)),
        *[("not read", f"{head.describe()}, after the last layer") for head in info.task_heads],
        *ignored,
    ]


def stack_rows(info: ModelInfo) -> list[tuple[str, str]]:
    """``layers  6`` for a model of one stack; for several, a row per stack: its layers (and their heads where they
    are not the model's ``heads``) and their attentions."""
    if len(info.stacks) == 1 and info.stacks[0].reads is InputKind.IMAGE:
        stack = info.stacks[0]
        return [(stack.name, f"{stack.layers} layer{'s' if stack.layers != 1 else ''} · self-attention over an image")]
    if len(info.stacks) < 2:
        return [("layers", str(info.layers))]
    rows = []
    for stack in info.stacks:
        kinds = ", then ".join(
            attention.kind.label + ("" if attention.is_self else f" over the {attention.keys}'s output")
            for attention in stack.attentions
        )
        heads = f" × {stack.heads} heads" if stack.heads not in (None, info.heads) else ""
        rows.append((stack.name, f"{stack.layers} layer{'s' if stack.layers != 1 else ''}{heads} · {kinds}"))
    return rows


def safetensors_rows(info: ModelInfo) -> list[tuple[str, str]]:
    """A safetensors checkpoint's parameters (and their dtypes), weight files and tokenizer."""
    files = "model.safetensors" if info.weight_files == 1 else f"{info.weight_files} safetensors shards"
    tokenizer = f"{info.tokenizer}, {info.tokenizer_vocab_size:,} tokens"
    return [
        ("parameters", f"{info.parameters:,} ({', '.join(info.dtypes)})"),
        ("weights", f"{files}, {size_text(info.size_bytes, decimal=True)}"),
        ("tokenizer", "none: it reads images" if info.tokenizer == "none" else tokenizer),
    ]


def gguf_names(gguf: GgufSummary, info: ModelInfo) -> list[tuple[str, str]]:
    """The model_type attnx runs a GGUF file as, beside the file's ``general.architecture``, and its
    ``general.name``."""
    named = [("name", label(gguf.name, NAME_LIMIT))] if gguf.name else []
    return [("model_type", f"{info.model_type} (general.architecture {label(gguf.architecture, NAME_LIMIT)})"), *named]


def gguf_rows(gguf: GgufSummary, info: ModelInfo) -> list[tuple[str, str]]:
    """A GGUF file's parameters, file and size, its quantization (bits per weight, then tensors, values and bytes
    per ggml type, one row each), its tokenizer, and what attnx does not read of it: the chat template, and the
    tensors it reads as settings instead of weights."""
    first = PurePath(gguf.paths[0]).name if gguf.paths else gguf.path
    files = first if gguf.files == 1 else f"{first} and {gguf.files - 1} more"
    types = [
        (f"  {kind.name}", f"{kind.tensors:,} tensor{'s' if kind.tensors != 1 else ''} · {kind.elements:,} values · "
                           f"{size_text(kind.size_bytes, decimal=True)}")
        for kind in gguf.types
    ]  # fmt: skip
    pre = f", pre-tokenizer {label(gguf.pre_tokenizer, NAME_LIMIT)}" if gguf.pre_tokenizer else ""
    stored = f" (GGUF {label(gguf.tokenizer, NAME_LIMIT)}{pre})" if gguf.tokenizer else ""
    unread = [("not read", "the chat template: attnx tokenizes a text as given")] if gguf.chat_template else []
    unread += [("not a weight", f"{name}: read as {what}") for name, what in gguf.unread]
    return [
        ("parameters", f"{info.parameters:,}"),
        ("weights", f"{files} (GGUF v{gguf.version}), {size_text(gguf.size_bytes, decimal=True)}"),
        ("quantization", f"{gguf.bits_per_weight:.2f} bits per weight over {gguf.tensors:,} tensors"),
        *types,
        ("tokenizer", f"{info.tokenizer}, {info.tokenizer_vocab_size:,} tokens{stored}"),
        *unread,
    ]


def tied_of(info: ModelInfo) -> list[bool]:
    """Whether the output layer reuses the embeddings, as a list of none (encoders) or one."""
    return [] if info.tied_embeddings is None else [info.tied_embeddings]


def positions_text(info: ModelInfo) -> str:
    """Each layer's positions, grouped where layers agree: ``RoPE θ 1e+06 (half pairs, linear ×8) on layers 5, 11;
    RoPE θ 10000 (half pairs) on layers 0-4, 6-10``; ``none (NoPE)`` for a layer without; one text when all
    agree; ``learned embeddings`` for a family without rotary positions, unless it says otherwise (``positions``)."""
    if info.positions is not None:
        return info.positions
    if info.position_bias is not None:
        return info.position_bias
    if not info.rotaries:
        return info.rotary.describe() if info.rotary else info.positions or "learned embeddings"
    groups: dict[str, list[int]] = {}
    for layer, rotary in enumerate(info.rotaries):
        groups.setdefault(rotary.describe() if rotary else "none (NoPE)", []).append(layer)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(
        f"{text} on layer{'s' if len(layers) > 1 else ''} {layer_ranges(layers)}" for text, layers in groups.items()
    )


def layer_ranges(layers: list[int]) -> str:
    """``[0, 1, 2, 4, 6, 7]`` -> ``0-2, 4, 6-7``."""
    runs: list[list[int]] = []
    for layer in layers:
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def windows_text(windows: tuple[int | None, ...]) -> str:
    """``4 keys on layers 0, 2 (2 of 4); the others see every earlier token``, or ``""`` without windows."""
    sliding = [layer for layer, window in enumerate(windows) if window is not None]
    if not sliding:
        return ""
    sizes = sorted({w for w in windows if w is not None})
    size = " or ".join(map(str, sizes))
    if len(sliding) == len(windows):
        return f"{size} keys on every layer"
    shown = ", ".join(map(str, sliding[:8])) + (", …" if len(sliding) > 8 else "")
    return f"{size} keys on layers {shown} ({len(sliding)} of {len(windows)}); the others see every earlier token"


def info_view(info: ModelInfo) -> RenderableType:
    """`attnx model`: the checkpoint's folder, then its facts as a two-column table."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style=LABEL_STYLE, no_wrap=True)
    table.add_column()
    for name, value in info_rows(info):
        table.add_row(name, Text(value))  # a path or name with [brackets] is not Rich markup
    return Group(Headline(info.path, style="bold"), table)


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
        "kv_heads": info.kv_heads,
        "d_model": info.d_model,
        "d_k": info.head_dim,
        "d_ff": info.d_ff,
        "activation": info.activation,
        "gated_mlp": info.gated,
        "rope": None if info.rotary is None else dataclasses.asdict(info.rotary),
        "rope_layers": [None if rotary is None else dataclasses.asdict(rotary) for rotary in info.rotaries],
        "qk_norm": info.qk_norm,
        "windows": list(info.windows),
        "softcap": info.softcap,
        "sinks": info.sinks,
        "mixture": None if info.mixture is None else dataclasses.asdict(info.mixture),
        "tied_embeddings": info.tied_embeddings,
        "causal": info.causal,
        "vocab_size": info.vocab_size,
        "max_length": info.max_length,
        "parameters": info.parameters,
        "dtypes": list(info.dtypes),
        "size_bytes": info.size_bytes,
        "weight_files": info.weight_files,
        "tokenizer": {
            "kind": info.tokenizer,
            "vocab_size": info.tokenizer_vocab_size,
            "stored_settings": list(info.tokenizer_settings),
        },
        "gguf": None if info.gguf is None else gguf_to_dict(info.gguf),
        "task_heads": [{"kind": head.kind, "tensors": list(head.tensors)} for head in info.task_heads],
        "stacks": [stack_to_dict(stack, info.heads) for stack in info.stacks],
        "position_bias": info.position_bias,
    }


def stack_to_dict(stack: Stack, heads: int) -> dict[str, Any]:
    """One of the ``stacks`` of `attnx model --format json`: its name, layers, heads (``heads``, the model's, unless
    the stack has its own), input and attentions."""
    attentions = [{"kind": a.kind.value, "queries": a.queries, "keys": a.keys} for a in stack.attentions]
    return {
        "name": stack.name,
        "layers": stack.layers,
        "heads": stack.heads or heads,
        "reads": stack.reads.value,
        "attentions": attentions,
    }


def gguf_to_dict(gguf: GgufSummary) -> dict[str, Any]:
    """The ``gguf`` object of `attnx model --format json`: a GGUF file's storage, quantization and tokenizer."""
    return {
        "files": list(gguf.paths),
        "version": gguf.version,
        "architecture": gguf.architecture,
        "name": gguf.name,
        "size_bytes": gguf.size_bytes,
        "tensors": gguf.tensors,
        "elements": gguf.parameters,
        "types": [
            {"type": kind.name, "tensors": kind.tensors, "elements": kind.elements, "size_bytes": kind.size_bytes}
            for kind in gguf.types
        ],
        "bits_per_weight": gguf.bits_per_weight,
        "tokenizer": {"model": gguf.tokenizer, "pre": gguf.pre_tokenizer},
        "chat_template": gguf.chat_template,
        "unread": [{"tensor": name, "read_as": what} for name, what in gguf.unread],
    }


def tokens_line(tokens: tuple[str, ...]) -> str:
    """The first tokens of the text, each in quotes (a leading space shows), and how many there are."""
    more = len(tokens) - TOKENS_SHOWN
    return (
        "tokens: "
        + " ".join(f"'{label(t)}'" for t in tokens[:TOKENS_SHOWN])
        + (f" … ({more} more)" if more > 0 else "")
    )


def codes_line(labels: Sequence[str]) -> str:
    """``prev = previous-token, ind = induction, …``: the codes of ``labels`` that differ from the label."""
    return ", ".join(f"{CODES[label]} = {label}" for label in labels if CODES[label] != label)


def head_grid(heads: int, rows: Sequence[Sequence[Text]], labels: Sequence[str] | None = None) -> Table:
    """A layer × head grid (``L0``, ``H0``: both from 0) of ready cells, one row per layer (``labels``: the
    rows' own, when not layers 0, 1, …). No padding: the box's one-space column separators are the only gaps
    (12 heads × 6 + 4 = 76 columns)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=0)
    table.add_column("", style=LABEL_STYLE, no_wrap=True)
    for h in range(heads):
        table.add_column(f"H{h}", justify="right", no_wrap=True, header_style=LABEL_STYLE)
    for layer, cells in enumerate(rows):
        table.add_row(labels[layer] if labels is not None else f"L{layer}", *cells)
    return table


def coded_cell(code: str | None, value: float | None, scale: HeatScale, precision: int, *, colour: bool) -> Text:
    """A head's label code (``—`` without one) over a number, the number drawn on its heatmap colour (dark: 0,
    bright: the top of ``scale``) when ``colour``; its colour picks black or white numbers to stay legible."""
    width = max(len(c) for c in CODES.values())
    text = Text()
    text.append(code or NONE, style="bold" if code else "dim")
    number = cell(value, precision)
    if colour and value is not None and np.isfinite(value):  # not dimmed: it keeps its cell's contrast
        text.append("\n" + number.rjust(width), cell_style(scale.fraction(value)))
    else:
        text.append("\n" + number)
    return text


def model_view_table(view: ModelView, precision: int = 2, *, colour: bool = True) -> RenderableType:
    """The layer × head grid: each cell a head's label code over its mean normalised entropy.

    With colour the entropy is drawn on a heatmap cell (dark: one key, bright: uniform), its number
    black or white, whichever reads on the cell (see ``attnx.render.colours``). A stack's attention other than the
    model's first names the stack and the kind in the header; a cross-attention's heads are labelled by how they
    read the source (the CROSS rule), its other measures said in the legend.
    """
    scale = HeatScale(1.0, "entropy")
    rows = [
        [coded_cell(CODES.get(s.label or ""), s.scores.get(ENTROPY.key), scale, precision, colour=colour)
         for s in stats]
        for stats in view.layers
    ]  # fmt: skip
    codes = codes_line(view.rule.labels)
    where = f" · {view.stack} {view.kind}-attention" if view.stacks > 1 else ""
    about = (
        f"{view.model} ({view.architecture}){where} · {len(view.tokens)} tokens · {len(view.layers)} layers × "
        f"{view.heads} heads · {view.engine} {view.dtype} {view.device}"
    )
    lines: list[RenderableType] = [Headline(about), Text(tokens_line(view.tokens), style="dim")]
    if view.kind == "cross":
        lines.append(Text(tokens_line(view.key_tokens).replace("tokens:", "source:", 1), style="dim"))
    if view.written:
        lines.append(Text(f"queries {view.written[0]}-{view.written[-1]} written by the model", style="dim"))
    if view.rule is HEADS:
        legend = (f"labels as in attnx heads ({codes}; {NONE} none); entropy: mean over queries of entropy ÷ "
                  "log(visible keys), 0 = one key, 1 = uniform")  # fmt: skip
        extra: list[RenderableType] = []
    else:
        legend = (f"labels: {view.rule.words} ({view.rule.rules_text()}; {codes}; {NONE} none); entropy: mean over "
                  "target tokens of entropy ÷ log(source tokens), 0 = one source token, 1 = uniform")  # fmt: skip
        extra = [Text("; ".join(f"{MEASURES[name].header}: {MEASURES[name].description}"
                                for name in view.rule.measures), style="dim"),
                 whole_table(view, precision)]  # fmt: skip
    return Group(
        *lines,
        Text("Model view: each head's pattern label over its mean normalised entropy", style="bold"),
        head_grid(view.heads, rows),
        Text(legend, style="dim"),
        Text(counts_line(view), style="dim"),
        *extra,
    )


def whole_table(view: ModelView, precision: int) -> Table:
    """Every head of a cross-attention's model view, a row each: its label and each measure of its rule."""
    measures = [MEASURES[name] for name in view.rule.measures]
    table = compact_table()
    add_columns(table, "head", "label", numeric=False)
    add_columns(table, *(m.header for m in measures))
    for layer, stats in enumerate(view.layers):
        for s in stats:
            table.add_row(f"L{layer}H{s.head}", s.label or NONE, *(cell(s.scores.get(m.key), precision)
                                                                   for m in measures))  # fmt: skip
    return table


def counts_line(view: ModelView) -> str:
    """``queries behind each label: 13 (prev 12, ind 1)``: how many queries a label's score is the mean of, those
    with a choice, then the labels that rest on fewer (a range where layers differ)."""
    counts = view.counts()

    def text(label: str) -> str:
        low, high = counts.get(label, (0, 0))
        return f"{low:,}" + (f"–{high:,}" if high != low else "")

    base = text(ENTROPY.key)  # every query with a choice
    fewer = [f"{CODES[label]} {text(label)}" for label in view.rule.labels if text(label) != base]
    return f"queries behind each label: {base}" + (f" ({', '.join(fewer)})" if fewer else "")


def model_keys(model: str, architecture: str, layers: int, heads: int, **read: Any) -> dict[str, Any]:
    """The keys a JSON object about a whole model opens with: ``format_version``, the checkpoint and its family,
    what the model read (``read``, in order: its tokens, or the sequences and where they came from), then its
    layer and head counts (``n_layers``, ``n_heads``)."""
    return {"format_version": FORMAT_VERSION, "model": model, "architecture": architecture, **read,
            "n_layers": layers, "n_heads": heads}  # fmt: skip


def _summary(s: HeadStats) -> dict[str, Any]:
    summary = head_summary(s)
    summary["mean_normalized_entropy"] = summary["scores"][ENTROPY.key]
    return summary


def model_view_to_dict(view: ModelView) -> dict[str, Any]:
    """The JSON object of `attnx heads --layer all --format json` (layers and heads 0-based): ``stack`` and
    ``attention`` say which attention of the model it is; a cross-attention's adds the source's ``key_tokens`` and
    its heads' scores are the CROSS rule's."""
    source = {"key_tokens": list(view.key_tokens)} if view.kind == "cross" else {}
    return {
        **model_keys(view.model, view.architecture, len(view.layers), view.heads, tokens=list(view.tokens), **source),
        "stack": view.stack,
        "attention": view.kind,
        "written": list(view.written),
        "d_k": view.d_k,
        "scale": view.scale,
        "scale_mode": view.scale_mode,
        "engine": view.engine,
        "device": view.device,
        "dtype": view.dtype,
        "thresholds": thresholds_json() if view.rule is HEADS else view.rule.thresholds(),
        "layers": [
            {
                "layer": layer,
                "heads": [_summary(s) for s in stats],
            }
            for layer, stats in enumerate(view.layers)
        ],
    }
