"""Images as a vision encoder reads them: preprocessed pixels, the patch grid, and a name for every position."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnx.models.stacks import InputKind


@dataclass(frozen=True, eq=False)
class ImageInput:
    """An image as a stack reads it: its preprocessed ``pixels`` ``[channel, height, width]`` (float32: resized,
    cropped, rescaled and normalised as the checkpoint's preprocessor_config.json says), the patch ``grid`` (rows,
    columns), the labels of the stack's positions (``tokens``: the ``leading`` tokens first, ``CLS``, ``reg0`` …,
    ``dist``, then each patch by row and column, ``p(0,0)``, ``p(0,1)``, …, row by row) and ``notes`` on what was
    done to the image (EXIF orientation, a mode converted to RGB)."""

    pixels: np.ndarray
    grid: tuple[int, int]
    tokens: tuple[str, ...]
    leading: int = 0
    notes: tuple[str, ...] = ()
    kind: InputKind = InputKind.IMAGE

    @property
    def special(self) -> tuple[bool, ...]:
        """The leading tokens (CLS, registers, distillation) are special; the patches are not."""
        return tuple(i < self.leading for i in range(len(self.tokens)))

    @property
    def positions(self) -> range:
        """The stack's positions, 0..N-1: the rows of its position table."""
        return range(len(self.tokens))


def patch_names(rows: int, columns: int) -> tuple[str, ...]:
    """``p(row,col)`` for every patch of a ``rows`` × ``columns`` grid, row by row (both from 0)."""
    return tuple(f"p({row},{column})" for row in range(rows) for column in range(columns))


def image_input(
    pixels: np.ndarray, patch: int, leading: tuple[str, ...] = ("CLS",), notes: tuple[str, ...] = ()
) -> ImageInput:
    """``pixels`` ``[channel, height, width]`` cut into ``patch`` × ``patch`` patches (the edge that does not fill a
    patch dropped, as a strided convolution drops it), named after the ``leading`` tokens."""
    rows, columns = pixels.shape[1] // patch, pixels.shape[2] // patch
    tokens = (*leading, *patch_names(rows, columns))
    return ImageInput(np.asarray(pixels, dtype=np.float32), (rows, columns), tokens, len(leading), notes)
