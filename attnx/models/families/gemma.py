"""Gemma and Gemma 2: RMSNorm by (1 + w), embeddings × √hidden, a GELU (tanh) gated MLP.

Gemma 2 adds norms after attention and the MLP, scaled and soft-capped scores, and sliding layers alternating with
full ones. In a GGUF file, every norm weight is stored as 1 + w, and the vocabulary's spaces as spaces.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from attnx.models.decoder import Decoder, Norms
from attnx.models.gguf_config import decoder
from attnx.models.gguf_form import REPLACED, GgufForm, Metadata, Read, decoder_layer

# Gemma 2's (and 3's) GGUF layer names: a norm before and after each sublayer.
GEMMA2_LAYER = decoder_layer(ffn_norm="pre_feedforward_layernorm", post_attention_norm="post_attention_layernorm",
                             post_ffw_norm="post_feedforward_layernorm")  # fmt: skip
GEMMA2_LARGE = 46  # the layers of Gemma 2 27B, whose scores llama.cpp scales by hidden / heads


def windowed(meta: Metadata, model_type: str, tensors: Mapping[str, Any], large: int) -> tuple[dict[str, Any], Any]:
    """Gemma 2's and Gemma 3's GGUF metadata: the decoder's keys, the window and the attention scale: llama.cpp's
    rule, 1/√head_dim, but 1/√(hidden / heads) for the 27B models (``large``: their layer count); and the final
    logits' cap as read (None: absent), which each sets its way."""
    config = decoder(meta, model_type, tensors)
    width = config["hidden_size"] // config["num_attention_heads"]
    config["query_pre_attn_scalar"] = width if config["num_hidden_layers"] == large else config["head_dim"]
    config["sliding_window"] = meta.whole("attention.sliding_window", "sliding_window") or 4096
    return config, meta.number("final_logit_softcapping", "final_logit_softcapping")


def gemma2_gguf(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """A GGUF file's ``gemma2.*`` metadata: ``windowed``, and both caps (llama.cpp's 50 and 30 where absent)."""
    config, final = windowed(meta, "gemma2", tensors, GEMMA2_LARGE)
    attn = meta.number("attn_logit_softcapping", "attn_logit_softcapping")
    config["attn_logit_softcapping"] = 50.0 if attn is None else attn  # llama.cpp's defaults where absent
    config["final_logit_softcapping"] = 30.0 if final is None else final
    return config, {}


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
    gguf = GgufForm(("gemma",), shifted_norms=True, spaces=REPLACED)

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
    gguf = GgufForm(("gemma2",), gemma2_gguf, layer=GEMMA2_LAYER, shifted_norms=True, spaces=REPLACED)
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
