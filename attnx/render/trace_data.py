"""A trace as machine output: JSON, JSON Lines and tidy CSV, with the same names as the table."""

from __future__ import annotations

import csv
import io
from typing import Any

import numpy as np

from attnx.analysis.trace import HeadTrace, Trace
from attnx.render.colours import EMPHASIS
from attnx.render.formats import to_jsonl
from attnx.render.serialize import FORMAT_VERSION, to_plain

TOP_STYLE = EMPHASIS
MASKED_STYLE = "dim strike"
TOP_MARK = "◀ max"
UNBOUNDED = 1_000_000  # a width to measure a table's natural width with


def _number(value: float) -> float | None:
    return to_plain(np.asarray(value))


def _head_to_dict(head: HeadTrace) -> dict[str, Any]:
    keys = [
        {
            "index": line.index,
            "token": line.token,
            "k": to_plain(line.key),
            **({} if line.key_unturned is None else {"k_before_rope": to_plain(line.key_unturned)}),
            "v": to_plain(line.value),
            "products": to_plain(line.products),
            **({} if line.bands is None else {"bands": to_plain(line.bands)}),
            "raw": _number(line.raw),
            **({} if line.bias is None else {"bias": _number(line.bias)}),
            "scaled": _number(line.scaled),
            "exp": _number(line.exp),
            "masked": line.masked,
            "weight": _number(line.weight),
            "contribution": to_plain(line.contribution),
            "top": line.is_top,
        }
        for line in head.keys
    ]
    rest = None
    if head.rest is not None:
        rest = {
            "count": head.rest.count,
            "exp": _number(head.rest.exp),
            "weight": _number(head.rest.weight),
            "contribution": to_plain(head.rest.contribution),
            "masked": head.rest.masked,
        }
    return {
        "head": head.head,
        "kv_head": head.kv_head,
        "columns": list(head.columns),
        "d_k": head.d_k,
        "q": to_plain(head.query),
        **({} if head.query_unturned is None else {"q_before_rope": to_plain(head.query_unturned)}),
        "keys": keys,
        "rest": rest,
        "softmax": {"max": _number(head.exp_max), "sum": _number(head.exp_sum), **_sink(head)},
        "output": to_plain(head.output),
    }


def _sink(head: HeadTrace) -> dict[str, Any]:
    """``{"sink": {"logit", "exp", "weight"}}`` for a head with a learned sink, else nothing."""
    sink = head.sink
    if sink is None:
        return {}
    return {"sink": {"logit": _number(sink.logit), "exp": _number(sink.exp), "weight": _number(sink.weight)}}


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """The JSON object of `attnx trace --format json` (``format_version`` first; indices count from 0, heads too).

    Per head, ``softmax`` holds the row's ``max`` (the largest scaled score of the keys the query may
    attend; null when it may attend none) and ``sum`` (Σ exp(scaled − max)); per key, ``exp`` is
    exp(scaled − max) (0 for a masked key), so that ``weight`` = ``exp`` / ``sum``. A head with a learned sink
    has ``softmax.sink`` too (its ``logit``, ``exp`` and ``weight``), counted in ``max`` and ``sum``.
    """
    return {
        "format_version": FORMAT_VERSION,
        "token": trace.token,
        "query": trace.query,
        "n_heads": trace.n_heads,
        "n_keys": trace.n_keys,
        "scale": _number(trace.scale),
        **trace.settings.optional_json(),
        "heads": [_head_to_dict(head) for head in trace.heads],
        "output": to_plain(trace.output),
        "projected": None if trace.projected is None else to_plain(trace.projected),
        **({"written": True} if trace.written else {}),
    }


def trace_jsonl(trace: Trace) -> str:
    """JSON Lines: one record per traced head (its dict from ``trace_to_dict``), then the outputs."""
    data = trace_to_dict(trace)
    common = {"format_version": FORMAT_VERSION, "token": trace.token, "query": trace.query}
    records = [{**common, "record": "head", **head} for head in data["heads"]]
    records.append({**common, "record": "output", "output": data["output"], "projected": data["projected"]})
    return to_jsonl(records)


TRACE_QUANTITIES = ("raw", "scaled", "exp", "weight", "masked")


def trace_csv(trace: Trace) -> str:
    """Tidy CSV: ``head,key,key_token,quantity,value`` for the raw/scaled score, exp(scaled − max), weight and
    mask of the keys shown.

    Heads and keys are 0-based indices, as in every machine format.
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["head", "key", "key_token", "quantity", "value"])
    for head in trace.heads:
        for line in head.keys:
            values = (line.raw, line.scaled, line.exp, line.weight, float(line.masked))
            for quantity, value in zip(TRACE_QUANTITIES, values, strict=True):
                writer.writerow([head.head, line.index, line.token, quantity, repr(float(value))])
    return buffer.getvalue()
