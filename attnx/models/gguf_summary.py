"""What ``attnx model`` shows of a GGUF file, as plain data (``GgufSummary``, made by ``gguf.summarize``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GgufType:
    """One ggml type of a file: how many tensors and values are stored as it, and their bytes."""

    name: str
    tensors: int
    elements: int
    size_bytes: int


@dataclass(frozen=True)
class GgufSummary:
    """A GGUF file at a glance, as plain data: its architecture and name (``general.*``), format version, files
    (``paths``: each file of a split model) and bytes, tensors and values per ggml type (most values first), bits per
    weight over all tensors, its tokenizer (``tokenizer.ggml.model`` and ``pre``), the tensors attnx does not pass to
    the family, with what it reads them as, and whether it holds a chat template (which attnx never applies)."""

    path: str
    architecture: str
    name: str | None
    version: int
    files: int
    size_bytes: int
    tensors: int
    parameters: int
    types: tuple[GgufType, ...]
    bits_per_weight: float
    tokenizer: str
    pre_tokenizer: str | None
    unread: tuple[tuple[str, str], ...]
    paths: tuple[str, ...] = ()
    chat_template: bool = False
