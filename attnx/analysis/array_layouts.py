"""How one bare array may lay out the tensor it holds (``nd``, ``bhnd``, ...), told from its shape or named."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from attnx.core.tensors import HEAD_OUTPUTS, OUTPUT, TENSORS, WEIGHTS, TensorName
from attnx.errors import AmbiguousError, ConfigError

# How a bare array may lay out what a kernel computed: the tensor it holds, and its axes in terms of
# N (queries), M (keys), H (heads), D (one head's width) and C (all heads' width, H·D).
ARRAY_LAYOUTS: dict[str, tuple[TensorName, str]] = {
    "nd": (OUTPUT, "N C"),
    "bnd": (OUTPUT, "1 N C"),
    "hnd": (HEAD_OUTPUTS, "H N D"),
    "bhnd": (HEAD_OUTPUTS, "1 H N D"),
    "nhd": (HEAD_OUTPUTS, "N H D"),
    "bnhd": (HEAD_OUTPUTS, "1 N H D"),
    "hnm": (WEIGHTS, "H N M"),
    "bhnm": (WEIGHTS, "1 H N M"),
}


def sizes_of(tensors: Mapping[TensorName, np.ndarray]) -> dict[str, int]:
    """The problem's sizes by axis word (``query``, ``key``, ``head``, ``d_k``, ``d_model``), read from the
    shapes of named tensors (their axes are in the tensor registry)."""
    sizes: dict[str, int] = {}
    for name, array in tensors.items():
        for axis, size in zip(TENSORS[name].axes, np.shape(array), strict=False):
            sizes.setdefault(axis, int(size))
    if "d_model" not in sizes and "head" in sizes and "d_k" in sizes:
        sizes["d_model"] = sizes["head"] * sizes["d_k"]
    return sizes


def layout_shape(layout: str, sizes: Mapping[str, int]) -> tuple[int, ...] | None:
    """The shape an array in ``layout`` has for a problem of ``sizes`` (None when a size is unknown)."""
    words = {"N": "query", "M": "key", "H": "head", "D": "d_k", "C": "d_model"}
    shape = []
    for axis in ARRAY_LAYOUTS[layout][1].split():
        if axis == "1":
            shape.append(1)
        elif words[axis] in sizes:
            shape.append(sizes[words[axis]])
        else:
            return None
    return tuple(shape)


def from_layout(array: np.ndarray, layout: str) -> tuple[TensorName, np.ndarray]:
    """The tensor an array in ``layout`` holds, in attnx's axis order (``[head, query, d_k]``, ...)."""
    name, axes = ARRAY_LAYOUTS[layout]
    if axes.startswith("1 "):
        array = array[0]
    if layout in ("nhd", "bnhd"):
        array = array.transpose(1, 0, 2)  # (N, H, D) -> (H, N, D)
    return name, array


def recognise(array: np.ndarray, sizes: Mapping[str, int], layout: str | None = None) -> tuple[TensorName, np.ndarray]:
    """What a bare array holds, from its shape (or ``layout``), as ``(tensor name, array in attnx's order)``,
    for a problem of ``sizes`` (see ``sizes_of``).

    A shape that fits no layout, or two that read it differently, is a ConfigError that lists the layouts
    this problem's arrays would have.
    """
    shape = tuple(array.shape)
    if layout is not None:
        expected = layout_shape(layout, sizes)
        if shape != expected:
            raise ConfigError(f"an array in layout {layout} has shape {expected} here, got {shape}")
        return from_layout(array, layout)
    fits = [name for name in ARRAY_LAYOUTS if shape == layout_shape(name, sizes)]
    if not fits:
        known = ", ".join(f"{name} {layout_shape(name, sizes)}" for name in ARRAY_LAYOUTS if layout_shape(name, sizes))
        raise ConfigError(f"an array of shape {shape} fits none of the layouts for this input: {known}")
    readings = [from_layout(array, name) for name in fits]
    first = readings[0]
    if any(name != first[0] or not np.array_equal(held, first[1], equal_nan=True) for name, held in readings[1:]):
        raise AmbiguousError(f"an array of shape {shape} could be {' or '.join(fits)}: name its layout")
    return first
