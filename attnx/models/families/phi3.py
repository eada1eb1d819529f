"""Phi-3, Phi-3.5 and Phi-4-mini: fused qkv_proj and gate_up_proj, partial rotary, longrope, one window for all."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from attnx.core.positions import SCALINGS
from attnx.core.spec import Linear
from attnx.engines.arrays import Array
from attnx.errors import ModelError
from attnx.models.architecture import Architecture
from attnx.models.decoder import Decoder
from attnx.models.gguf_config import decoder
from attnx.models.gguf_form import NORMALIZED, GgufForm, Metadata, Read, decoder_layer

# transformers' Phi3Config: its defaults where config.json leaves a key out, and the rope types it accepts.
TRAINED_CONTEXT = 4096  # original_max_position_embeddings, and max_position_embeddings
RMS_EPS = 1e-5
LEGACY_LONGROPE = ("su", "yarn")  # older Phi-3 configs' names for longrope, renamed before the rope is read
SCALED_ROPE = "longrope"  # the one scaling Phi-3 runs (any other is refused, as transformers refuses it)


def phi3_gguf(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """A GGUF file's ``phi3.*`` metadata: partial rotary from ``rope.dimension_count``, its window (0: none), and
    longrope from the ``rope_factors_long`` and ``rope_factors_short`` tensors with ``rope.scaling.attn_factor``."""
    config = decoder(meta, "phi3", tensors, longrope=True)
    context = meta.whole("rope.scaling.original_context_length", "original_max_position_embeddings")
    if context is not None:
        config["original_max_position_embeddings"] = context
    config["sliding_window"] = meta.whole("attention.sliding_window", "sliding_window") or None
    attention = meta.number("rope.scaling.attn_factor")
    names = ("rope_factors_short.weight", "rope_factors_long.weight")
    if not any(name in tensors for name in names):
        if config.get("rope_scaling") is not None or attention not in (None, 1.0):
            raise ModelError(f"{meta.path}: {meta.key('rope.scaling.type')} is set, but the file has no longrope "
                             "factors (rope_factors_short, rope_factors_long)")  # fmt: skip
        return {k: v for k, v in config.items() if v is not None}, {}
    if not all(name in tensors for name in names):
        raise ModelError(f"{meta.path}: holds one of {' and '.join(names)} without the other")
    if config.get("rope_scaling") not in (None, {"rope_type": "longrope"}):
        raise ModelError(f"{meta.path}: longrope factors beside {meta.key('rope.scaling.type')} "
                         f"{config['rope_scaling'].get('rope_type')!r}")  # fmt: skip
    short, long = (read(name).ravel().astype(float).tolist() for name in names)
    config["rope_scaling"] = {"rope_type": "longrope", "short_factor": short, "long_factor": long}
    if attention is not None:
        config["rope_scaling"]["attention_factor"] = attention
    return {k: v for k, v in config.items() if v is not None}, {name: "the rope scaling (longrope factors)"
                                                                 for name in names}  # fmt: skip


class Phi3(Decoder):
    """Phi-3: W_q, W_k and W_v are the row blocks of one ``qkv_proj``, [q; k; v] (heads × d_k, then K/V heads × d_k
    twice), gate and up the halves of one ``gate_up_proj``; no biases. RoPE may turn part of each head
    (``partial_rotary_factor``, 0.75 in Phi-4-mini) and stretch by ``longrope`` against the top-level
    ``original_max_position_embeddings``; ``sliding_window``, where set, holds on every layer."""

    name = "phi3"
    family = "Phi-3"
    stems = ("Phi3",)
    sliding = "all"
    partial_rotary = True
    reads = frozenset({"sliding_window"})
    gguf = GgufForm(("phi3",), phi3_gguf, layer=decoder_layer(attn_qkv="self_attn.qkv_proj", ffn_up="mlp.gate_up_proj"),
                    spaces=NORMALIZED)  # fmt: skip

    def read_sizes(self, keys: Mapping[str, tuple[str, ...]], *, mlp_ratio: int | None, max_length: int) -> None:
        """The decoder's sizes, with Phi-3's maximum length where config.json has none (longrope's default factor is
        measured by it)."""
        super().read_sizes(keys, mlp_ratio=mlp_ratio, max_length=TRAINED_CONTEXT)

    def read_config(self) -> None:
        """The decoder's settings, with Phi-3's RMSNorm eps where config.json has none."""
        super().read_config()
        self.eps = self.checkpoint.number("rms_norm_eps", RMS_EPS, low=0, high=1)

    def flat_rope(self) -> dict[str, Any]:
        """The top-level rope keys and ``original_max_position_embeddings`` (absent: 4096), which transformers'
        Phi-3 puts over the rope object's own."""
        context = self.checkpoint.integer("original_max_position_embeddings", default=TRAINED_CONTEXT)
        return {**super().flat_rope(), "original_max_position_embeddings": context}

    def rope_mapping(self, mapping: Mapping[str, Any]) -> Mapping[str, Any]:
        """A legacy ``su`` or ``yarn`` rope type read as ``longrope``; another scaling is refused (transformers'
        Phi-3 accepts none)."""
        kind = mapping.get("rope_type", mapping.get("type"))
        if kind in LEGACY_LONGROPE:
            return {**mapping, "rope_type": SCALED_ROPE}
        if kind in SCALINGS and kind != SCALED_ROPE:
            raise ModelError(
                f"{self.checkpoint.config_path}: rope type {kind!r} is not one {self.family} runs "
                f"(default or {SCALED_ROPE}, as in transformers)"
            )
        return mapping

    def projections(self, layer: int) -> tuple[Linear, Linear, Linear, Linear]:
        """W_q, W_k and W_v split from ``qkv_proj``'s rows; W_o is ``o_proj``."""
        p, d = self.attention_prefix(layer), self.d_model
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        w_q, w_k, w_v = self.fused(p + "qkv_proj", (q_width, kv_width, kv_width), d)
        return w_q, w_k, w_v, self.linear(p + "o_proj", d, q_width)

    def claimed_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """The embeddings, and layer 0's ``qkv_proj``, ``[(heads + 2 K/V heads) × head_dim, d_model]``."""
        yield from Architecture.claimed_shapes(self)
        rows = (self.heads + 2 * self.kv_heads) * self.head_dim
        yield f"{self.attention_prefix(0)}qkv_proj.weight", (rows, self.d_model)

    def attention_tensors(self, layer: int) -> Iterator[str]:
        """The tensors of ``projections``: weights only (a bias transformers would leave unread is refused)."""
        p = self.attention_prefix(layer)
        yield from (f"{p}qkv_proj.weight", f"{p}o_proj.weight")

    def mlp(self, layer: int, x: Array) -> Array:
        """down(act(gate) * up), gate and up the first and second halves of ``gate_up_proj(x)``."""
        p = self.layer_prefix(layer) + "mlp."
        gate_up = self.project(x, p + "gate_up_proj", 2 * self.d_ff)  # (N, 2 d_ff)
        gate, up = gate_up[:, : self.d_ff], gate_up[:, self.d_ff :]
        return self.project(self.act(gate) * up, p + "down_proj", self.d_model)

    def mlp_tensors(self, layer: int) -> Iterator[str]:
        """The tensors of ``mlp``: weights only."""
        p = self.layer_prefix(layer) + "mlp."
        yield from (f"{p}gate_up_proj.weight", f"{p}down_proj.weight")


FAMILIES = (Phi3,)
