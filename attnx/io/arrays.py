"""NumPy inputs: an .npz archive holding the same keys as a YAML input."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from attnx.errors import InputError
from attnx.io.documents import Document


def load_npz(source: str) -> Document:
    """Read an ``.npz`` whose members are named as the input keys (``q``, ``k``, ``v``, ``tokens``, ...).

    Arrays stay NumPy arrays (the schema checks them without turning them into lists); 0-d members
    become scalars; string arrays (``tokens``) become lists of strings. Pickled objects are refused.
    """
    path = Path(source)
    if path.is_dir():
        raise InputError(f"{source}: is a directory, expected an input file")
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {name: _plain(archive[name]) for name in archive.files}
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except ValueError as exc:
        reason = "holds pickled objects, which attnx never loads" if "pickle" in str(exc) else str(exc)
        raise InputError(f"{source}: cannot read as .npz: {reason}") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{source}: cannot read as .npz: {exc}") from None
    return Document(data, source)


def _plain(array: np.ndarray) -> Any:
    if array.ndim == 0:
        return array.item()
    if array.dtype.kind in "US":
        return [str(item) for item in array.tolist()]
    return array
