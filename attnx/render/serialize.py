"""Machine-readable results: JSON with a format version, non-finite numbers written as null."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from attnx.core.result import AttentionResult

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.ablation import Ablation
from attnx.core.tensors import MASK, PROJECTED, SINK_WEIGHTS, TENSORS

# 1.1 added `q`, `k`, `v` and `kv_pooled_from` to `run`'s JSON and the softmax arithmetic to `trace`'s;
# 1.2 added `rope`, `window` and `softcap` to `run`'s JSON; 1.5 `sink_logits` and, with them, `sink_weights`.
FORMAT_VERSION = "1.9"
# The tensors every JSON result carries (null where not computed); ``projected`` and ``mask`` follow when held.
ALWAYS = tuple(name for name, tensor in TENSORS.items() if tensor.exported and tensor.present == "always")


def to_plain(array: np.ndarray) -> Any:
    """Nested lists of Python floats at full precision; NaN and infinities become None."""
    if np.isfinite(array).all():
        return array.tolist()
    cleaned = array.astype(object)
    cleaned[~np.isfinite(array)] = None
    return cleaned.tolist()


def result_to_dict(result: AttentionResult, shift: Ablation | None = None) -> dict[str, Any]:
    """The JSON object of `attnx run --format json` (``format_version`` first).

    ``q`` is ``[head, query, d_k]``, ``k`` and ``v`` ``[kv_head, key, d_k]``: the slices each head
    reads. ``projected`` appears when W_o exists, ``mask`` when a mask or padding applies, ``sink_weights``
    ``[head, query]`` with learned sinks,
    ``ablation`` when heads were dropped (``shift``, measured by ``attnx.analysis.ablation``);
    ``fully_masked_rows`` is always present (often empty), and ``kv_pooled_from`` (null unless a
    ``--kv-heads`` override mean-pooled the K/V heads).
    """
    out: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "tokens": list(result.tokens),
        "key_tokens": list(result.key_tokens),
        "heads": result.heads,
        "kv_heads": result.kv_heads,
        "kv_pooled_from": result.kv_pooled_from,
        "d_model": result.d_model,
        "d_k": result.d_k,
        "scale": result.scale,
        "scale_mode": result.scale_mode,
        "layout": result.layout,
        **result.settings.optional_json(),
        "parameters": result.parameters,
        "engine": result.engine,
        "device": result.device,
        "dtype": result.dtype,
        **({} if result.origin is None else {"origin": result.origin.to_json()}),
    }
    for name in ALWAYS:
        out[name] = to_plain(getattr(result, name))
    if result.projected is not None:
        out[PROJECTED] = to_plain(result.projected)
    if result.mask is not None:
        out[MASK] = result.mask.tolist()
    if result.sink_weights is not None:
        out[SINK_WEIGHTS] = to_plain(result.sink_weights)
    out["fully_masked_rows"] = list(result.fully_masked_rows)
    if shift is not None:
        out["ablation"] = {
            "dropped_heads": list(shift.dropped_heads),
            "compared": shift.compared,
            "shift_per_token": to_plain(shift.per_token),
            "shift_overall": shift.overall,
        }
    return out


def dumps(obj: dict[str, Any]) -> str:
    """Strict JSON text (``allow_nan=False``) ending in a newline."""
    return json.dumps(obj, allow_nan=False) + "\n"
