"""Where one element of a tensor sits, worded one way wherever attnx names it (`check`, `diff`, ``attnx.testing``).

``head 1 · query 3 'cat' · key 0 'The'``, ``K/V head 0 · key 2 'sat' · d 1``, ``query 2 'sat' · column 5 (head 1,
d 1)``: every index from 0, each token after its index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attnx.core.tensors import TENSORS, TensorName
from attnx.text import label


def locate(
    name: TensorName,
    index: Sequence[int],
    queries: Sequence[str],
    keys: Sequence[str],
    head_of: Callable[[int], tuple[int, int]] | None = None,
) -> str:
    """Where element ``index`` of tensor ``name`` sits, its query and key labelled by ``queries`` and ``keys``.

    ``head_of`` maps a column of the concatenated heads to its head and the column within it (None: the
    columns' heads are not known, and a column is named alone).
    """
    parts = []
    for axis, i in zip(TENSORS[name].axes, index, strict=False):
        if axis == "head":
            parts.append(f"head {i}")
        elif axis == "kv_head":
            parts.append(f"K/V head {i}")
        elif axis == "query":
            parts.append(f"query {i}{_label(queries, i)}")
        elif axis == "key":
            parts.append(f"key {i}{_label(keys, i)}")
        elif axis == "d_model":
            within = f" (head {head_of(i)[0]}, d {head_of(i)[1]})" if head_of is not None else ""
            parts.append(f"column {i}{within}")
        else:
            parts.append(f"d {i}")
    return " · ".join(parts)


def _label(tokens: Sequence[str], index: int) -> str:
    """`` 'cat'``; nothing for a token labelled by its index (as ``attnx.testing`` labels them), nor past the labels."""
    if index >= len(tokens) or tokens[index] == str(index):
        return ""
    return f" {label(tokens[index])!r}"
