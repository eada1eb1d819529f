"""Granite: Llama's decoder with four multipliers: on the embeddings, the scores, each residual branch, the logits."""

from __future__ import annotations

import numpy as np

from attnx.engines.arrays import Array, arrays_of
from attnx.models.decoder import Decoder


class Granite(Decoder):
    """IBM Granite 3.x (``granite``): the embeddings × ``embedding_multiplier``; the scores × ``attention_multiplier``
    in place of 1/√d_k; each sublayer's output × ``residual_multiplier`` before its residual add
    (h += m · attn(norm h); h += m · mlp(norm h)); the logits ÷ ``logits_scaling``. Each is 1 where config.json has
    none (GraniteConfig's defaults)."""

    name = "granite"
    family = "Granite"
    stems = ("Granite",)
    reads = frozenset({"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"})

    def read_config(self) -> None:
        """The decoder's settings, then the four multipliers."""
        super().read_config()
        ckpt = self.checkpoint
        self.embedding_multiplier = ckpt.number("embedding_multiplier", 1.0)
        self.scale = ckpt.number("attention_multiplier", 1.0)
        self.residual_multiplier = ckpt.number("residual_multiplier", 1.0)
        self.logits_scaling = ckpt.number("logits_scaling", 1.0, low=np.finfo(np.float64).tiny)

    def embed_scale(self) -> float:
        """``embedding_multiplier``."""
        return self.embedding_multiplier

    def after_attention(self, layer: int, stream: Array, projected: np.ndarray) -> Array:
        """Each residual branch (the attention's output, then the MLP's) × ``residual_multiplier`` before its add."""
        m = self.residual_multiplier  # a Python float keeps the stream's dtype
        h = stream + arrays_of(stream).like(projected) * m
        return h + self.mlp(layer, self.normed(h, layer, self.norms.before_mlp)) * m

    def shape_logits(self, logits: Array) -> Array:
        """The decoder's logits ÷ ``logits_scaling``."""
        return super().shape_logits(logits) / self.logits_scaling


FAMILIES = (Granite,)
