"""OLMo 2 and 3: Llama's decoder with QK-norm over the whole q and k projections and its norms after each sublayer."""

from __future__ import annotations

from typing import ClassVar

from attnx.models.decoder import Decoder, Norms
from attnx.models.rope import FULL, SLIDING


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


class Olmo3(Olmo2):
    """OLMo 3 (``olmo3``): OLMo 2 with sliding windows (``sliding_window``, 4096) on the layers ``layer_types`` names,
    where config.json lists none three sliding to one full (layer i full when i + 1 is a multiple of 4); RoPE θ
    500 000 by default, per layer type where the rope object is nested, else a flat ``rope_scaling`` on the full
    layers only (the sliding ones turn by ``rope_theta``, unscaled), as Olmo3Config reads it."""

    name = "olmo3"
    family = "OLMo 3"
    stems = ("Olmo3",)
    sliding = "all"
    window_default = 4096
    default_theta = 500000.0
    local_rope = ("rope_theta", 500000.0)
    reads = frozenset({"sliding_window"})

    def layer_types(self) -> tuple[str, ...]:
        """``layer_types`` where config.json lists them, else three sliding layers to one full."""
        listed = self.listed_types()
        return listed or tuple(FULL if (i + 1) % 4 == 0 else SLIDING for i in range(self.layers))


FAMILIES = (Olmo2, Olmo3)
