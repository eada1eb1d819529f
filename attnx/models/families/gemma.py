"""Gemma and Gemma 2: RMSNorm by (1 + w), embeddings × √hidden, a GELU (tanh) gated MLP.

Gemma 2 adds norms after attention and the MLP, scaled and soft-capped scores, and sliding layers alternating with
full ones.
"""

from __future__ import annotations

import math
from typing import ClassVar

from attnx.models.decoder import Decoder, Norms


class Gemma(Decoder):
    """Gemma: RMSNorm multiplies by (1 + w), the embeddings by √hidden; ``hidden_act`` ``gelu`` means the tanh
    approximation, as in transformers' Gemma; embeddings tied unless config.json says otherwise."""

    name = "gemma"
    family = "Gemma"
    stems: ClassVar[tuple[str, ...]] = ("Gemma",)  # typed as declared, not tuple[str]: Gemma 3 names two
    norm_offset = True
    ties_by_default = True
    activation_default = "gelu_pytorch_tanh"
    activation_aliases: ClassVar[tuple[tuple[str, str], ...]] = (("gelu", "gelu_pytorch_tanh"),)

    def embed_scale(self) -> float:
        """√hidden, which Gemma multiplies its embeddings by."""
        return math.sqrt(self.d_model)


class Gemma2(Gemma):
    """Gemma 2: as Gemma, plus scores × ``query_pre_attn_scalar``^-½ soft-capped by ``attn_logit_softcapping``,
    norms after attention and the MLP too, and sliding layers alternating with full ones (``layer_types``)."""

    name = "gemma2"
    family = "Gemma 2"
    stems: ClassVar[tuple[str, ...]] = ("Gemma2",)
    activation_key = "hidden_activation"
    activation_aliases = ()
    norms = Norms(
        after_attention="post_attention_layernorm",
        before_mlp="pre_feedforward_layernorm",
        after_mlp="post_feedforward_layernorm",
    )
    sliding = "alternate"
    window_default = 4096
    reads = frozenset({"sliding_window", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"})
    # What config.json means where it leaves a key out, as the family's transformers config fills it in.
    absent: ClassVar[dict[str, float | None]] = {
        "query_pre_attn_scalar": 256.0, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
    }  # fmt: skip

    def read_config(self) -> None:
        """The decoder's settings, then the scale, the scores' cap and the logits' cap."""
        super().read_config()
        scalar = self.cap("query_pre_attn_scalar")
        self.scale = (scalar if scalar is not None else float(self.head_dim)) ** -0.5
        self.softcap = self.cap("attn_logit_softcapping")
        self.final_softcap = self.cap("final_logit_softcapping")

    def cap(self, key: str) -> float | None:
        """A positive number from config.json: the family's value where the key is absent, None where it is null."""
        if key not in self.checkpoint.config:
            return self.absent[key]
        return None if self.checkpoint.config[key] is None else self.checkpoint.number(key, 1.0, low=0)


FAMILIES = (Gemma, Gemma2)
