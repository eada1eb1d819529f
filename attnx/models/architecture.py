"""What a model family supplies to the forward pass: its sizes, embeddings, attention layers and the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from attnx.core.spec import AttentionSpec
from attnx.errors import ModelError
from attnx.models.checkpoint import CONFIG, Checkpoint
from attnx.models.nn import ACTIVATIONS
from attnx.models.tokenize import Encoded


@dataclass(frozen=True)
class ModelInfo:
    """What a checkpoint holds: its family, sizes and weights (``parameters`` counts learned values)."""

    path: str
    architecture: str
    family: str
    design: str
    model_type: str
    architectures: tuple[str, ...]
    layers: int
    heads: int
    d_model: int
    d_ff: int
    vocab_size: int
    max_length: int
    activation: str
    causal: bool
    parameters: int
    dtypes: tuple[str, ...]
    size_bytes: int
    tokenizer: str
    tokenizer_vocab_size: int
    tokenizer_settings: tuple[str, ...]

    @property
    def d_k(self) -> int:
        """Width of one head."""
        return self.d_model // self.heads


class Architecture:
    """One model family: its tensor names, and the forward pass around attention, in NumPy.

    A subclass names its weights' prefixes and a tensor that proves the family (``probe``), reads
    its sizes from config.json, and supplies ``embed``, ``attention_spec`` (the spec of one layer,
    built from the residual stream entering it) and ``after_attention`` (the rest of that layer,
    given the attention's projected output). Weights are read from the checkpoint when a layer
    needs them, never before.
    """

    name: ClassVar[str]
    family: ClassVar[str]
    design: ClassVar[str]
    prefixes: ClassVar[tuple[str, ...]]
    probe: ClassVar[str]
    causal: ClassVar[bool]

    layers: int
    heads: int
    d_model: int
    d_ff: int
    vocab_size: int
    max_length: int
    activation_name: str

    def __init__(self, checkpoint: Checkpoint, dtype: str = "float64") -> None:
        self.checkpoint = checkpoint
        self.dtype = np.dtype(dtype)
        self.read_config()
        if self.d_model % self.heads:
            where = checkpoint.path / CONFIG
            raise ModelError(f"{where}: hidden size {self.d_model} is not divisible by {self.heads} heads")
        checkpoint.use_prefix(self.prefixes, self.probe, self.family)

    def read_config(self) -> None:
        """Set the sizes from config.json (ModelError for what this family cannot run)."""
        raise NotImplementedError

    def activation(self, key: str, default: str) -> Callable[[np.ndarray], np.ndarray]:
        """The activation named by config key ``key``; one attnx does not know is a ModelError."""
        name = self.checkpoint.config.get(key, default)
        self.activation_name = str(name)
        if name not in ACTIVATIONS:
            raise ModelError(
                f"{self.checkpoint.path / CONFIG}: {key} {name!r} is not supported; supported: {', '.join(ACTIVATIONS)}"
            )
        return ACTIVATIONS[name]

    def weight(self, name: str, *alternatives: str) -> np.ndarray:
        """A tensor of the checkpoint in the working dtype."""
        return self.checkpoint.tensor(name, *alternatives).astype(self.dtype, copy=False)

    def embed(self, encoded: Encoded) -> np.ndarray:
        """The residual stream entering layer 0, ``[token, d_model]``."""
        raise NotImplementedError

    def attention_spec(self, layer: int, stream: np.ndarray, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """Layer ``layer``'s attention on the residual stream ``stream`` entering it, as a spec."""
        raise NotImplementedError

    def after_attention(self, layer: int, stream: np.ndarray, projected: np.ndarray) -> np.ndarray:
        """The residual stream leaving layer ``layer``, from the one entering it and its attention's output."""
        raise NotImplementedError

    def is_buffer(self, name: str) -> bool:
        """True for stored tensors that are not learned (position ids, causal-mask buffers)."""
        return name.endswith("position_ids")
