"""A local Hugging Face checkpoint folder: config.json, and model.safetensors read tensor by tensor, within the caps."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnx.errors import LimitError, ModelError
from attnx.limits import Limits

CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"
FILES = (CONFIG, WEIGHTS, TOKENIZER)
INSTALL_HINT = (
    'python -m pip install safetensors tokenizers (from a clone of attnx: python -m pip install -e ".[models]")'
)

# What a folder that lacks one of FILES may hold instead, and what to say about it.
ALTERNATIVES = {
    WEIGHTS: (
        ("model.safetensors.index.json", "sharded checkpoints are not supported; save the model as one file"),
        ("pytorch_model.bin", "attnx reads safetensors only; re-save the model with safe_serialization=True"),
    ),
    TOKENIZER: (("vocab.txt", "attnx needs the fast tokenizer's tokenizer.json; save it with a fast tokenizer"),),
}


def require_libraries() -> None:
    """Raise ModelError (one line, with the install command) when safetensors or tokenizers is missing."""
    import importlib.util

    missing = [name for name in ("safetensors", "tokenizers") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelError(f"reading models needs {' and '.join(missing)}, which is not installed: {INSTALL_HINT}")


class Checkpoint:
    """A checkpoint folder: its config, and its weights opened lazily, each tensor read when asked for.

    ``prefix`` is put before every tensor name: checkpoints saved from a task model carry the base
    model under a prefix (``bert.``, ``transformer.``), bare ones none (see ``use_prefix``).
    ``limits`` bound config.json (``max_bytes``, ``max_depth``) and every tensor read, checked against
    ``max_dimension`` and ``max_elements`` from the file's header before its data is touched (an
    embedding table read by rows counts only the rows read).
    """

    def __init__(self, path: str | Path, limits: Limits | None = None) -> None:
        require_libraries()
        self.name = str(path)
        self.path = Path(path)
        self.limits = limits or Limits.from_env()
        if not self.path.is_dir():
            raise ModelError(f"{self.name}: no such folder; a checkpoint folder holds {', '.join(FILES)}")
        for name in FILES:
            self.file(name)
        self.config = self._read_config()
        self.prefix = ""
        self._handle: Any = None
        self._held: frozenset[str] | None = None

    def file(self, name: str) -> Path:
        """The path of ``name`` in the folder; a missing file is a ModelError that names it."""
        path = self.path / name
        if path.is_file():
            return path
        hint = next((why for other, why in ALTERNATIVES.get(name, ()) if (self.path / other).is_file()), None)
        held = "; " + hint if hint else f" (a checkpoint folder holds {', '.join(FILES)})"
        raise ModelError(f"{path}: missing{held}")

    def _read_config(self) -> dict[str, Any]:
        from attnx.io.jsontext import line_col, too_deep

        path = self.path / CONFIG
        try:
            self.limits.check_bytes(path.stat().st_size, str(path))
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"{path}: cannot be read: {exc}") from None
        deep = too_deep(text, self.limits.max_depth)
        if deep is not None:
            offset, level = deep
            found = self.limits.exceeded("max_depth", f"level {level} of nesting")
            raise LimitError(f"{path}:{line_col(text, offset)}: {found}")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
        except ValueError as exc:  # an integer of more than 4300 digits
            raise ModelError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ModelError(f"{path}: expected a JSON object")
        return data

    def integer(self, *keys: str, default: int | None = None) -> int:
        """The first of ``keys`` present in config.json, a positive whole number (or ``default``)."""
        for key in keys:
            value = self.config.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"{self.path / CONFIG}: {key} must be a positive whole number, got {value!r}")
            return value
        if default is None:
            raise ModelError(f"{self.path / CONFIG}: {keys[0]} is missing")
        return default

    def number(self, key: str, default: float) -> float:
        """A number from config.json, or ``default`` when absent."""
        value = self.config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ModelError(f"{self.path / CONFIG}: {key} must be a number, got {value!r}")
        return float(value)

    @property
    def weights(self) -> Any:
        """The open safetensors file (opened on first use; only its header is read then)."""
        if self._handle is None:
            from safetensors import SafetensorError, safe_open

            try:
                self._handle = safe_open(str(self.path / WEIGHTS), framework="numpy")
            except (SafetensorError, OSError) as exc:
                raise ModelError(f"{self.path / WEIGHTS}: not a readable safetensors file: {exc}") from None
        return self._handle

    def keys(self) -> frozenset[str]:
        """Every tensor name in the weights file, as stored (prefix included)."""
        if self._held is None:
            self._held = frozenset(self.weights.keys())
        return self._held

    def has(self, name: str) -> bool:
        """True when the weights hold tensor ``name`` (under the prefix)."""
        return self.prefix + name in self.keys()

    def use_prefix(self, prefixes: Sequence[str], probe: str, family: str) -> None:
        """Pick the first of ``prefixes`` under which the weights hold ``probe``; none is a ModelError."""
        held = self.keys()
        for prefix in prefixes:
            if prefix + probe in held:
                self.prefix = prefix
                return
        looked = " or ".join(repr(p + probe) for p in prefixes)
        raise ModelError(f"{self.path / WEIGHTS}: no tensor {looked}: not a {family} checkpoint")

    def _slice(self, name: str, *alternatives: str) -> tuple[Any, str]:
        held = self.keys()
        for candidate in (name, *alternatives):
            if self.prefix + candidate in held:
                return self.weights.get_slice(self.prefix + candidate), self.prefix + candidate
        raise ModelError(f"{self.path / WEIGHTS}: missing tensor {self.prefix + name!r}")

    def tensor(self, name: str, *alternatives: str) -> np.ndarray:
        """Tensor ``name`` (under the prefix; else the first of ``alternatives`` held), read now."""
        part, full = self._slice(name, *alternatives)
        self._check_shape(full, tuple(part.get_shape()))
        return self._read(part, full, slice(None))

    def rows(self, name: str, index: slice | Sequence[int] | np.ndarray) -> np.ndarray:
        """Rows of a 2-D tensor: a slice, or the rows of ``index`` (each read alone: the table stays on disk)."""
        part, full = self._slice(name)
        shape = tuple(part.get_shape())
        count = len(range(*index.indices(shape[0]))) if isinstance(index, slice) else len(index)
        self._check_shape(full, (count, *shape[1:]))
        if isinstance(index, slice):
            return self._read(part, full, index)
        unique, inverse = np.unique(np.asarray(index, dtype=np.intp), return_inverse=True)
        rows = np.concatenate([self._read(part, full, slice(int(i), int(i) + 1)) for i in unique])
        return rows[inverse]

    def _check_shape(self, full: str, shape: tuple[int, ...]) -> None:
        """Refuse to read ``shape`` of tensor ``full`` when an axis or its element count is over the caps."""
        problem = self.limits.shape_problem(shape)
        if problem:
            raise LimitError(f"{self.path / WEIGHTS}: tensor {full!r}: {problem}")

    def _read(self, part: Any, full: str, index: slice) -> np.ndarray:
        if part.get_dtype() == "BF16":  # NumPy has no bfloat16: widen the raw 16 bits to float32
            return _bfloat16(self.path / WEIGHTS, full, index)
        try:
            return np.asarray(part[index])
        except Exception as exc:  # safetensors reports bad data as assorted exception types
            raise ModelError(f"{self.path / WEIGHTS}: tensor {full!r} cannot be read: {exc}") from None

    def shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Every tensor's shape and safetensors dtype name (``F32``, ``F16``, ``BF16``, ``I64``), from the header."""
        out = {}
        for name in sorted(self.keys()):
            part = self.weights.get_slice(name)
            out[name] = (tuple(part.get_shape()), part.get_dtype())
        return out

    def close(self) -> None:
        """Let go of the weights file."""
        if self._handle is not None and hasattr(self._handle, "__exit__"):
            self._handle.__exit__(None, None, None)
        self._handle = None

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bfloat16(path: Path, name: str, index: slice) -> np.ndarray:
    """Rows ``index`` of bfloat16 tensor ``name`` as float32, read from the file's header offsets."""
    with path.open("rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
    entry = header[name]
    shape = tuple(entry["shape"])
    start, _ = entry["data_offsets"]
    raw = np.memmap(path, dtype="<u2", mode="r", offset=8 + size + start, shape=shape)
    return (raw[index].astype(np.uint32) << 16).view(np.float32)
