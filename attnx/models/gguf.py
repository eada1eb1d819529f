"""GGUF checkpoints (llama.cpp, Ollama, LM Studio): a file read as the same ``Checkpoint`` the families read, and
``--model`` resolved to one (a ``.gguf`` file, a folder holding one model's GGUF, or ``ollama:NAME[:TAG]``).

``GgufCheckpoint`` presents a GGUF file as a checkpoint folder would be: its metadata as a config dict
(``gguf_config``), its tensors under Hugging Face's names with the converter's changes undone (``gguf_names``),
each read within the caps only when the family asks for it and dequantized then, by rows where it can be (an
embedding table's rows are whole quantization blocks: only the text's tokens' are read).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from attnx.errors import LimitError, ModelError
from attnx.limits import Limits
from attnx.models.checkpoint import CONFIG, Checkpoint, require_libraries
from attnx.models.gguf_config import build_config
from attnx.models.gguf_file import SPLIT, GgufModel, dequantizable, readable_types
from attnx.models.gguf_names import SHIFTED, TRANSPOSED, UNPERMUTE, Source, map_tensors, unpermute
from attnx.models.gguf_summary import GgufSummary, GgufType

OLLAMA = "ollama:"
OLLAMA_MODEL = "application/vnd.ollama.image.model"  # the media type of a manifest's weights layer
OLLAMA_REGISTRY = ("manifests", "registry.ollama.ai", "library")
SUFFIX = ".gguf"


class GgufPart:
    """One tensor the family reads, as a safetensors slice answers: ``get_shape()``, ``get_dtype()`` (the ggml type:
    ``Q4_K``) and ``[rows]``, dequantized to float32 with the converter's change undone."""

    def __init__(self, model: GgufModel, source: Source) -> None:
        self.model, self.source = model, source

    def get_shape(self) -> list[int]:
        """The shape the family reads."""
        return list(self.source.shape)

    def get_dtype(self) -> str:
        """How it is stored."""
        return self.source.info.type_name

    def __getitem__(self, index: slice) -> np.ndarray:
        """Rows ``index`` (a slice of the first axis): only their blocks are read, unless a transform moves values
        between rows (W_q and W_k of a Llama, GPT-2's transposed weights), which reads the whole tensor."""
        source, info = self.source, self.source.info
        if source.expert is not None:
            per = source.shape[0]
            start, stop, _ = index.indices(per)
            first = source.expert * per
            return self.model.rows(info, first + start, first + stop).reshape(stop - start, *source.shape[1:])
        if len(source.shape) >= 2 and source.shape == info.shape and not source.whole:
            start, stop, _ = index.indices(source.shape[0])
            per = info.rows // source.shape[0]
            values = self.model.rows(info, start * per, stop * per).reshape(stop - start, *source.shape[1:])
        else:
            values = self.model.rows(info, 0, info.rows).reshape(info.shape)
            if source.transform == UNPERMUTE:
                values = unpermute(values, source.heads)
            elif source.transform == TRANSPOSED:
                values = values.T
            values = np.ascontiguousarray(values.reshape(source.shape)[index])
        if source.transform == SHIFTED:  # stored as 1 + w
            values = values - np.float32(1)
        return values


class GgufCheckpoint(Checkpoint):
    """A GGUF file (or split files) read as a checkpoint: ``config`` built from its metadata, tensors under the names
    the family reads (``keys``), each dequantized when read; ``tokenizer()`` built from the metadata (only when called:
    ``tokenizer_facts()`` says what it will be).

    Messages about a config key name the GGUF key it came from (``model.gguf: llama.attention.head_count``); every
    tensor's type is checked when the file is opened (one the gguf package cannot dequantize is refused then).
    """

    config_name = "its metadata"

    def __init__(self, path: str | Path, limits: Limits | None = None, *, name: str | None = None) -> None:
        require_libraries()
        self.name = name or str(path)  # what sources and messages call the model (``ollama:NAME:TAG``)
        self.gguf = Path(path)
        self.path = Path(path)
        self.limits = limits or Limits.from_env()
        self.prefix = ""
        self._held = None
        self.model = GgufModel(self.gguf, self.limits)
        try:
            self._open_model()
        except BaseException:
            self.model.close()
            raise

    def _open_model(self) -> None:
        """Check every tensor's type, build the config, map the tensors."""
        for info in self.model.tensors.values():
            if not dequantizable(info.kind):
                raise ModelError(f"{info.path}: tensor {info.name!r} is stored as {info.type_name}, which the gguf "
                                 f"package cannot dequantize (it reads {', '.join(readable_types())})")  # fmt: skip
        from attnx.models.families import FAMILIES  # the registry: each family's GGUF form, by its name

        forms = {family.name: family.gguf for family in FAMILIES if family.gguf is not None}
        built = build_config(self.model.metadata, self.model.tensors, self._whole, self.gguf, forms)
        self.config, self.origin, self.consumed, self.form = built.config, built.origin, built.consumed, built.form
        self.sources = map_tensors(self.model.tensors, self.config, self.consumed, self.form)

    def _whole(self, name: str) -> np.ndarray:
        """GGUF tensor ``name`` whole, as stored (for the settings llama.cpp keeps as tensors), within the caps."""
        info = self.model.tensors[name]
        problem = self.limits.weight_problem(info.shape)
        if problem:
            raise LimitError(f"{info.path}: tensor {name!r}: {problem}")
        return self.model.rows(info, 0, info.rows).reshape(info.shape)

    def _key(self, key: str) -> str:
        origin = self.origin.get(key)
        return f"{self.gguf}: {origin} (read as {key})" if origin else f"{self.gguf} (metadata): {key}"

    @property
    def weights_path(self) -> Path:
        """The GGUF file."""
        return self.gguf

    @property
    def config_path(self) -> Path:
        """The GGUF file's metadata, as messages name it: ``model.gguf (metadata)``."""
        return Path(f"{self.gguf} (metadata)")

    def file(self, name: str) -> Path:
        """A GGUF file holds everything: there is no other file to find."""
        raise ModelError(f"{self.gguf}: a GGUF file holds its {name} itself")

    def weight_files(self) -> list[Path]:
        """The GGUF file, or every file of a split model."""
        return [file.path for file in self.model.files]

    def file_of(self, full: str) -> Path:
        """The file that holds tensor ``full``."""
        return self.sources[full].info.path

    def keys(self) -> frozenset[str]:
        """Every tensor, under the name the family reads (a GGUF tensor with no rule under its own)."""
        if self._held is None:
            self._held = frozenset(self.sources)
        return self._held

    def _part(self, full: str) -> GgufPart:
        return GgufPart(self.model, self.sources[full])

    def _readable(self, dtype: str) -> bool:
        return True  # every type was checked when the file was opened

    def _read(self, part: Any, full: str, index: slice) -> np.ndarray:
        return np.asarray(part[index])

    def tokenizer(self) -> Any:
        """The tokenizer the metadata describes (``tokenizers.Tokenizer``)."""
        from attnx.models.gguf_tokenizer import build_tokenizer

        return build_tokenizer(self.model.metadata, self.gguf, self.form.spaces)

    def tokenizer_facts(self) -> tuple[str, int]:
        """The kind and vocabulary size of the tokenizer the metadata describes, read without building it."""
        from attnx.models.gguf_tokenizer import described

        return described(self.model.metadata, self.gguf)

    def summary(self) -> GgufSummary:
        """What the file holds and how it is stored (``GgufSummary``)."""
        return summarize(self)

    def close(self) -> None:
        """Let go of the mapped files."""
        self.model.close()


# What attnx model shows of a GGUF file.


def summarize(checkpoint: GgufCheckpoint) -> GgufSummary:
    """``checkpoint``'s ``GgufSummary`` (from its header: no tensor is read)."""
    model, metadata = checkpoint.model, checkpoint.model.metadata
    infos = list(model.tensors.values())
    counts: Counter[str] = Counter()
    elements: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for info in infos:
        counts[info.type_name] += 1
        elements[info.type_name] += info.elements
        sizes[info.type_name] += info.size
    types = tuple(GgufType(name, counts[name], elements[name], sizes[name]) for name, _ in elements.most_common())
    total = sum(elements.values())
    name, pre = metadata.get("general.name"), metadata.get("tokenizer.ggml.pre")
    return GgufSummary(
        path=checkpoint.name, architecture=str(metadata.get("general.architecture")),
        name=name if isinstance(name, str) else None, version=model.files[0].version, files=len(model.files),
        size_bytes=model.size, tensors=len(infos), parameters=total, types=types,
        bits_per_weight=8 * sum(sizes.values()) / max(total, 1),
        tokenizer=str(metadata.get("tokenizer.ggml.model", "")), pre_tokenizer=pre if isinstance(pre, str) else None,
        unread=tuple(sorted(checkpoint.consumed.items())), paths=tuple(map(str, checkpoint.weight_files())),
        chat_template=any(key.startswith("tokenizer.chat_template") for key in metadata),  # named ones too
    )  # fmt: skip


def gguf_summary(path: str | Path, limits: Limits | None = None) -> GgufSummary:
    """The ``GgufSummary`` of what ``--model`` names (``resolve_model_path``), which must be a GGUF file."""
    checkpoint = open_checkpoint(path, limits)
    with checkpoint:
        if not isinstance(checkpoint, GgufCheckpoint):
            raise ModelError(f"{path}: not a GGUF file")
        return checkpoint.summary()


# --model: a file, a folder holding one, or an Ollama model.


def is_gguf(path: Path) -> bool:
    """Whether ``path`` names a GGUF file (by its suffix, or by its first four bytes)."""
    if path.suffix.lower() == SUFFIX:
        return True
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


def gguf_in(folder: Path) -> Path | None:
    """The one model's GGUF file in ``folder`` (the first part of a split model), None where there is none, and a
    ModelError where there are several models."""
    files = sorted(path for path in folder.glob("*") if path.suffix.lower() == SUFFIX and path.is_file())
    models: dict[str, list[Path]] = {}
    for path in files:
        match = SPLIT.fullmatch(path.name)
        models.setdefault(match["stem"] if match else path.name, []).append(path)
    if not models:
        return None
    if len(models) > 1:
        names = ", ".join(sorted(models)[:4]) + (", …" if len(models) > 4 else "")
        raise ModelError(f"{folder}: holds the GGUF files of {len(models)} models ({names}); give --model one file")
    return min(next(iter(models.values())))


def ollama_root() -> Path:
    """Where Ollama keeps its models: ``$OLLAMA_MODELS``, else ``~/.ollama/models``."""
    configured = os.environ.get("OLLAMA_MODELS", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".ollama" / "models"


def ollama_model(text: str) -> Path:
    """The GGUF blob of ``ollama:NAME[:TAG]`` (TAG ``latest`` by default; NAME may be ``namespace/name``), from
    its manifest in Ollama's models folder, without Ollama or the network."""
    reference = text[len(OLLAMA) :]
    name, _, tag = reference.partition(":")
    tag = tag or "latest"
    parts = name.split("/")
    if not name or any(part in ("", ".", "..") or "\\" in part for part in [*parts, tag]) or len(parts) > 2:
        raise ModelError(f"{text}: not an Ollama model name (ollama:NAME or ollama:NAME:TAG)")
    root = ollama_root()
    where = root.joinpath(*OLLAMA_REGISTRY[:2], *(parts if len(parts) == 2 else [OLLAMA_REGISTRY[2], name]), tag)
    if not where.is_file():
        raise ModelError(f"{text}: no Ollama model: {where} does not exist (models folder {root}; set OLLAMA_MODELS "
                         "where Ollama keeps them elsewhere)")  # fmt: skip
    return ollama_blob(where, root, text)


def ollama_blob(manifest: Path, root: Path, text: str) -> Path:
    """The weights blob a manifest names (its ``application/vnd.ollama.image.model`` layer)."""
    try:
        if manifest.stat().st_size > 1 << 20:
            raise ModelError(f"{manifest}: an Ollama manifest of {manifest.stat().st_size:,} bytes is not one")
        data = json.loads(manifest.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"{manifest}: not a readable Ollama manifest: {exc}") from None
    layers = data.get("layers") if isinstance(data, dict) else None
    digests = [layer.get("digest") for layer in layers or [] if isinstance(layer, dict)
               and layer.get("mediaType") == OLLAMA_MODEL]  # fmt: skip
    if len(digests) != 1 or not isinstance(digests[0], str) or not digests[0].startswith("sha256:"):
        raise ModelError(f"{manifest}: expected one layer of type {OLLAMA_MODEL} with a sha256 digest")
    digest = digests[0].removeprefix("sha256:")
    if len(digest) != 64 or any(char not in "0123456789abcdef" for char in digest):
        raise ModelError(f"{manifest}: {digests[0]!r:.80} is not a sha256 digest")
    blob = root / "blobs" / f"sha256-{digest}"
    if not blob.is_file():
        raise ModelError(f"{text}: the manifest {manifest} names {blob}, which does not exist")
    return blob


def resolve_model_path(text: str | Path) -> Path:
    """What ``--model`` names: ``ollama:NAME[:TAG]`` as its GGUF blob, a folder holding one model's GGUF files (and
    no config.json) as the first, anything else as given (a checkpoint folder, a GGUF file)."""
    if isinstance(text, str) and text.startswith(OLLAMA):
        return ollama_model(text)
    path = Path(text)
    if path.is_dir() and not (path / CONFIG).is_file():
        return gguf_in(path) or path
    return path


def open_checkpoint(path: str | Path, limits: Limits | None = None) -> Checkpoint:
    """The checkpoint ``--model`` names (``resolve_model_path``): a ``GgufCheckpoint`` for a GGUF file, else the
    checkpoint folder. A missing ``.gguf`` file is a ModelError that says so."""
    resolved = resolve_model_path(path)
    if resolved.suffix.lower() == SUFFIX and not resolved.is_file():
        raise ModelError(f"{resolved}: no such file")
    if resolved.is_file() and is_gguf(resolved):
        return GgufCheckpoint(resolved, limits, name=str(path) if str(path).startswith(OLLAMA) else None)
    return Checkpoint(resolved, limits)
