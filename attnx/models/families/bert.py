"""The BERT family (post-LayerNorm encoders such as all-MiniLM-L6-v2) in NumPy around attnx's attention."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from attnx.core.spec import AttentionSpec, Linear
from attnx.engines.arrays import Array, arrays_of, host
from attnx.errors import ModelError
from attnx.models.architecture import Architecture, weights_and_biases
from attnx.models.nn import dense, layer_norm
from attnx.models.tokenize import Encoded


class Bert(Architecture):
    """BERT: embeddings (word + position + token type, then LayerNorm); per layer, attention, Add & Norm,
    MLP, Add & Norm. torch's Linear stores ``[out, in]``, so every weight is transposed for attnx.
    """

    name = "bert"
    family = "BERT"
    design = "post-LayerNorm encoder"
    prefixes = ("bert.", "")
    probe = "embeddings.word_embeddings.weight"
    causal = False
    stems = ("Bert",)
    layer_stem = "encoder.layer."

    def read_config(self) -> None:
        """Sizes from config.json; relative position embeddings and decoder BERTs are refused."""
        ckpt = self.checkpoint
        self.read_sizes({}, mlp_ratio=4, max_length=512)
        self.eps = ckpt.number("layer_norm_eps", 1e-12, low=0, high=1)
        self.act = self.activation("hidden_act", "gelu")
        kind = ckpt.text("position_embedding_type", "absolute")
        if kind != "absolute":
            raise ModelError(f"{ckpt.config_path}: position_embedding_type {kind!r} is not supported (only absolute)")
        if ckpt.flag("is_decoder", False) or ckpt.flag("add_cross_attention", False):
            raise ModelError(f"{ckpt.config_path}: BERT as a decoder is not supported, only the encoder")

    def tensor_names(self) -> Iterator[str]:
        """The embeddings and their LayerNorm, then each layer's attention, MLP and two LayerNorms (a LayerNorm's
        weight and bias may be called gamma and beta)."""
        yield from (f"embeddings.{kind}_embeddings.weight" for kind in ("word", "position", "token_type"))
        yield from self.norm_names("embeddings.LayerNorm")
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."
            yield from weights_and_biases(*(p + "attention.self." + name for name in ("query", "key", "value")))
            yield from weights_and_biases(p + "attention.output.dense", p + "intermediate.dense", p + "output.dense")
            yield from (*self.norm_names(p + "attention.output.LayerNorm"), *self.norm_names(p + "output.LayerNorm"))

    @staticmethod
    def norm_names(name: str) -> tuple[str, ...]:
        """The names a LayerNorm's weight and bias may have."""
        return tuple(f"{name}.{part}" for part in ("weight", "bias", "gamma", "beta"))

    def norm(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A LayerNorm's weight and bias (older checkpoints call them gamma and beta)."""
        d = (self.d_model,)
        return self.weight(f"{name}.weight", f"{name}.gamma", shape=d), self.weight(
            f"{name}.bias", f"{name}.beta", shape=d
        )

    def linear(self, name: str, width: int | None = None, reads: int | None = None) -> Linear:
        """A torch Linear (``[out, in]``, both d_model unless given) as attnx's ``x @ W + b`` (``W``: ``[in, out]``)."""
        out, into = width or self.d_model, reads or self.d_model
        weight = self.checkpoint.tensor(f"{name}.weight", shape=(out, into))
        return Linear.of(weight.T, self.checkpoint.tensor(f"{name}.bias", shape=(out,)))

    def dense(self, x: Array, name: str, width: int, reads: int) -> Array:
        """``x @ weight.T + bias`` in the working dtype (weight ``[width, reads]``)."""
        return dense(
            x, self.weight(f"{name}.weight", shape=(width, reads)).T, self.weight(f"{name}.bias", shape=(width,))
        )

    def embed(self, encoded: Encoded) -> np.ndarray:
        """LayerNorm(word + token type + position embeddings), ``[token, d_model]``."""
        ckpt = self.checkpoint
        words = ckpt.rows("embeddings.word_embeddings.weight", encoded.ids, (self.vocab_size, self.d_model))
        words = words.astype(self.dtype)
        if ckpt.has("embeddings.token_type_embeddings.weight"):
            types = ckpt.tensor("embeddings.token_type_embeddings.weight", shape=(None, self.d_model))
            if int(encoded.type_ids.max()) >= types.shape[0]:
                raise ModelError(f"token type {int(encoded.type_ids.max())} is beyond the model's {types.shape[0]}")
            words = words + types[encoded.type_ids].astype(self.dtype)
        positions = ckpt.rows("embeddings.position_embeddings.weight", encoded.positions, (None, self.d_model))
        positions = positions.astype(self.dtype)
        return layer_norm(words + positions, *self.norm("embeddings.LayerNorm"), self.eps)

    def attention_spec(self, layer: int, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """Self-attention on the stream entering the layer: no mask, 1/√d_k, W_o the output dense."""
        p = f"encoder.layer.{layer}.attention."
        return AttentionSpec.build(
            heads=self.heads, tokens=tokens, key_tokens=tokens, source=source, x=host(stream),
            w_q=self.linear(p + "self.query"), w_k=self.linear(p + "self.key"), w_v=self.linear(p + "self.value"),
            w_o=self.linear(p + "output.dense"), causal=self.attention(layer).kind.causal,
        )  # fmt: skip

    def after_attention(self, layer: int, stream: Array, projected: np.ndarray) -> Array:
        """Add & Norm, MLP (dense, activation, dense), Add & Norm."""
        p = f"encoder.layer.{layer}."
        attended = stream + arrays_of(stream).like(projected)
        h = layer_norm(attended, *self.norm(p + "attention.output.LayerNorm"), self.eps)
        inner = self.act(self.dense(h, p + "intermediate.dense", self.d_ff, self.d_model))  # (N, d_ff)
        out = self.dense(inner, p + "output.dense", self.d_model, self.d_ff)
        return layer_norm(h + out, *self.norm(p + "output.LayerNorm"), self.eps)


FAMILIES = (Bert,)
