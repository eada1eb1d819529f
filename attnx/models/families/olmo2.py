"""OLMo 2: Llama's decoder with QK-norm over the whole q and k projections and its norms after each sublayer."""

from __future__ import annotations

from typing import ClassVar

from attnx.models.decoder import Decoder, Norms


class Olmo2(Decoder):
    """OLMo 2 (``olmo2``): ``q_norm`` and ``k_norm`` are RMSNorms over each token's whole q (heads × d_k wide) and k
    (kv_heads × d_k) projections, before the head split and RoPE; a layer has no norm before attention or the MLP,
    but one after each, inside its residual branch: h += post_attention_layernorm(attn(h)), then
    h += post_feedforward_layernorm(mlp(h)). RMSNorm's eps is 10⁻⁵ where config.json has none (Olmo2Config's)."""

    name = "olmo2"
    family = "OLMo 2"
    design = "causal decoder, RMSNorm after each sublayer"
    stems = ("Olmo2",)
    qk_norm_over = "projection"
    norms: ClassVar[Norms] = Norms(
        before_attention=None,
        after_attention="post_attention_layernorm",
        before_mlp=None,
        after_mlp="post_feedforward_layernorm",
    )

    def read_config(self) -> None:
        """The decoder's settings, with Olmo2Config's default eps."""
        super().read_config()
        self.eps = self.checkpoint.number("rms_norm_eps", 1e-5, low=0, high=1)


FAMILIES = (Olmo2,)
