"""How one bare array may lay out the tensor it holds (``nd``, ``bhnd``, ...), told from its shape or named."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

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


class Reading(NamedTuple):
    """What a bare array was read as: the tensor, in attnx's axis order; ``weights_too`` names the weights layouts
    its shape fits as well (N = M = d), set aside for the output (``recognise``)."""

    name: TensorName
    array: np.ndarray
    weights_too: tuple[str, ...] = ()


def recognise(
    array: np.ndarray,
    sizes: Mapping[str, int],
    layout: str | None = None,
    *,
    output_first: bool = False,
    source: str | None = None,
) -> Reading:
    """What a bare array holds, from its shape (or ``layout``), for a problem of ``sizes`` (see ``sizes_of``).

    A shape that fits no layout is a ConfigError that lists the layouts this problem's arrays would have (a bare
    array names no tensor: its shape is all that tells what it holds); one that two layouts read differently is an
    AmbiguousError, unless ``output_first`` (a kernel's file: most often its output) and every layout but weights'
    reads it one way: it is then read so, and the reading names the weights layouts it set aside. Messages begin
    with ``source``, the file the array came from, where it is given.
    """
    shape, where = tuple(array.shape), "" if source is None else f"{source}: "
    if layout is not None:
        expected = layout_shape(layout, sizes)
        if shape != expected:
            raise ConfigError(f"{where}an array in layout {layout} has shape {expected} here, got {shape}")
        return Reading(*from_layout(array, layout))
    fits = [name for name in ARRAY_LAYOUTS if shape == layout_shape(name, sizes)]
    if not fits:
        known = ", ".join(f"{name} {layout_shape(name, sizes)}" for name in ARRAY_LAYOUTS if layout_shape(name, sizes))
        raise ConfigError(f"{where}an array of shape {shape} fits none of the layouts for this input: {known}")
    if _one_reading(array, fits):
        return Reading(*from_layout(array, fits[0]))
    outputs = [name for name in fits if ARRAY_LAYOUTS[name][0] != WEIGHTS]
    if output_first and outputs and _one_reading(array, outputs):
        return Reading(*from_layout(array, outputs[0]), tuple(name for name in fits if name not in outputs))
    raise AmbiguousError(f"{where}an array of shape {shape} could be {' or '.join(fits)}: name its layout")


def _one_reading(array: np.ndarray, layouts: list[str]) -> bool:
    """True when every one of ``layouts`` reads ``array`` as the same tensor, with the same values in place."""
    first, *others = (from_layout(array, name) for name in layouts)
    return all(name == first[0] and np.array_equal(held, first[1], equal_nan=True) for name, held in others)
