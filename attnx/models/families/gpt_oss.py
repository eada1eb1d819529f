"""gpt-oss: learned attention sinks, sliding and full layers in turn, YaRN, biases everywhere, clamped SwiGLU experts.

Per layer, as transformers' GptOss does it: the attention of the Llama line with biases on q, k, v and o, and one
learned logit per head (``self_attn.sinks``) that joins each row's softmax as a key without a value, so the weights
over the keys sum to less than 1 (attnx shows the sink's share as its own column). Layers alternate sliding
(``sliding_window``, 128) and full attention as ``layer_types`` lists them; RoPE is YaRN (θ 150 000, factor 32 of
4096 positions, ``truncate`` false) where config.json sets no rope object.

The MLP is a routed mixture on every layer: router logits x·W_routerᵀ + b, the ``num_experts_per_tok`` largest,
a softmax over those, and each chosen expert e computes, from ``gate_up = x·gate_up_proj[e] + b`` with gate and up
interleaved (even and odd columns), gate clamped above at ``swiglu_limit`` and up to ±limit,
``(up + 1) · gate · sigmoid(alpha · gate)`` · down_proj[e] + b. Experts are stored fused, one 3-D tensor per
projection (``experts.gate_up_proj`` ``[expert, hidden, 2·ff]``, ``experts.down_proj`` ``[expert, ff, hidden]``),
each expert read alone when a token chooses it. The checkpoints OpenAI released quantize the experts' two matrices
as MXFP4 (``quantization_config`` ``quant_method`` ``mxfp4``): ``{name}_blocks`` ``[expert, out, in / 32, 16]``
bytes, each holding two FP4 (E2M1) values, low nibble first, and ``{name}_scales`` ``[expert, out, in / 32]``, a
power of two 2^(s − 127) per block of 32; they are dequantized exactly (every value is a float) when read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from attnx.engines.arrays import Array, arrays_of, host
from attnx.errors import LimitError, ModelError
from attnx.models.families.moe import Routed
from attnx.models.nn import dense

# What transformers' GptOssConfig puts in place of a rope object config.json lacks (its rope_theta read beside it).
# The sixteen values of an FP4 (E2M1) code: sign, two exponent bits, one mantissa bit.
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
BLOCK = 32  # values per MXFP4 block, which share one scale
QUANTIZED = ("gate_up_proj", "down_proj")  # the experts' matrices an MXFP4 checkpoint stores packed


def mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``[rows, groups, 16]`` bytes and ``[rows, groups]`` scales as ``[rows, groups · 32]`` float64 values: each
    byte's low nibble, then its high one, an FP4 code, times 2^(scale − 127) for its block."""
    values = np.empty((*blocks.shape[:-1], 2 * blocks.shape[-1]))  # (rows, groups, 32)
    values[..., 0::2] = FP4[blocks & 0x0F]
    values[..., 1::2] = FP4[blocks >> 4]
    values = np.ldexp(values, scales.astype(np.int32)[..., None] - 127)
    return values.reshape(*blocks.shape[:-2], -1)


DEFAULT_ROPE: dict[str, Any] = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                "truncate": False, "original_max_position_embeddings": 4096}  # fmt: skip


class GptOss(Routed):
    """gpt-oss-20b and -120b (see the module's docstring)."""

    name = "gpt_oss"
    family = "gpt-oss"
    stems = ("GptOss",)
    sliding = "alternate"
    window_default = 128
    default_theta = 150000.0
    reads = frozenset({"sliding_window", "num_local_experts", "quantization_config"})
    expert_width_key = "intermediate_size"
    expert_keys = ("num_local_experts",)
    defaults = (128, 4)
    always_renormalises = True
    dense_layers = False
    router = "router.weight"
    sinks = True

    def read_config(self) -> None:
        """The routed decoder's settings, then the experts' clamp (``swiglu_limit``), gain (``swiglu_alpha``) and
        quantization (MXFP4, or none)."""
        super().read_config()
        self.limit = self.checkpoint.number("swiglu_limit", 7.0, low=0)
        self.alpha = self.checkpoint.number("swiglu_alpha", 1.702)
        quantized = self.checkpoint.mapping("quantization_config")
        method = None if quantized is None else quantized.get("quant_method")
        if quantized is not None and method != "mxfp4":
            raise ModelError(f"{self.checkpoint.config_path}: quantization_config quant_method {method!r:.40} is "
                             f"not one {self.family} reads (mxfp4)")  # fmt: skip
        self.mxfp4 = quantized is not None

    def rope_mapping(self, mapping: Mapping[str, Any]) -> Mapping[str, Any]:
        """The rope object, or transformers' default YaRN where config.json has none."""
        return mapping or DEFAULT_ROPE

    def sink_logits(self, layer: int) -> tuple[float, ...]:
        """The layer's learned sink logit per head (``self_attn.sinks``)."""
        sinks = self.checkpoint.tensor(f"{self.attention_prefix(layer)}sinks", shape=(self.heads,))
        return tuple(float(x) for x in sinks.astype(np.float64))

    def attention_tensors(self, layer: int) -> Iterator[str]:
        """The projections' weights and biases, and the sinks."""
        yield from super().attention_tensors(layer)
        yield f"{self.attention_prefix(layer)}sinks"

    def route(self, layer: int, x: Array) -> tuple[np.ndarray, np.ndarray]:
        """Each token's chosen experts ``[token, k]`` (the largest router logits, the lower index first among equal
        ones) and their weights, a softmax over the chosen logits (chosen on the host, in NumPy)."""
        p, experts = self.mixture_prefix(layer) + "router.", self.experts
        weight = self.weight(f"{p}weight", shape=(experts, self.d_model))
        logits = host(dense(x, weight.T, self.weight(f"{p}bias", shape=(experts,))))  # (N, E)
        chosen = np.argsort(-logits, axis=-1, kind="stable")[:, : self.top_k]  # (N, k)
        top = np.take_along_axis(logits, chosen, axis=-1)
        shares = np.exp(top - top.max(axis=-1, keepdims=True))
        return chosen, shares / shares.sum(axis=-1, keepdims=True)

    def expert(self, layer: int, expert: int, x: Array) -> Array:
        """Expert ``expert``'s clamped SwiGLU on ``x`` ``[token, d_model]`` (see the module's docstring)."""
        p, d, ff, xp = self.mixture_prefix(layer) + "experts.", self.d_model, self.expert_width, arrays_of(x)
        gate_up = dense(x, self.matrix(f"{p}gate_up_proj", expert, d, 2 * ff),
                        self.expert_part(f"{p}gate_up_proj_bias", expert, (2 * ff,)))  # (n, 2·ff)  # fmt: skip
        gate = xp.minimum(gate_up[:, 0::2], self.limit)
        up = xp.clip(gate_up[:, 1::2], -self.limit, self.limit)
        hidden = (up + 1) * (gate / (1 + xp.exp(-self.alpha * gate)))  # (n, ff)
        return dense(hidden, self.matrix(f"{p}down_proj", expert, ff, d),
                     self.expert_part(f"{p}down_proj_bias", expert, (d,)))  # fmt: skip

    def expert_part(self, name: str, expert: int, shape: tuple[int, ...]) -> np.ndarray:
        """Expert ``expert``'s entry of the fused tensor ``name`` ``[expert, *shape]``, in the working dtype."""
        return self.checkpoint.slab(name, expert, (self.experts, *shape)).astype(self.dtype, copy=False)

    def matrix(self, name: str, expert: int, reads: int, writes: int) -> np.ndarray:
        """Expert ``expert``'s matrix ``name`` as ``x @ W`` takes it, ``[reads, writes]``: stored so, or as MXFP4
        (``[writes, reads / 32, 16]`` blocks and ``[writes, reads / 32]`` scales), dequantized."""
        if not self.mxfp4:
            return self.expert_part(name, expert, (reads, writes))
        problem = self.checkpoint.limits.weight_problem((writes, reads))
        if problem:
            raise LimitError(f"{self.checkpoint.weights_path}: tensor {name!r}: {problem}")
        groups = -(-reads // BLOCK)
        blocks = self.checkpoint.slab(f"{name}_blocks", expert, (self.experts, writes, groups, 16), packed=True)
        scales = self.checkpoint.slab(f"{name}_scales", expert, (self.experts, writes, groups), packed=True)
        return mxfp4(blocks, scales)[:, :reads].T.astype(self.dtype)  # (reads, writes)

    def mlp(self, layer: int, x: Array) -> Array:
        """The routed mixture: each chosen expert's output times its weight, summed in ascending expert order."""
        chosen, weights = self.route(layer, x)
        xp = arrays_of(x)
        out = xp.zeros_like(x)
        for expert in np.unique(chosen):
            rows, slot = np.nonzero(chosen == expert)  # each token picks an expert at most once
            at = xp.indices(rows)
            out[at] += self.expert(layer, int(expert), x[at]) * xp.like(weights[rows, slot][:, None])
        return out

    def mlp_tensors(self, layer: int) -> Iterator[str]:
        """The router's weight and bias, and the fused experts' tensors."""
        p = self.mixture_prefix(layer)
        yield from (f"{p}router.weight", f"{p}router.bias")
        for name in QUANTIZED:
            stored = (f"{name}_blocks", f"{name}_scales") if self.mxfp4 else (name,)
            yield from (f"{p}experts.{part}" for part in (*stored, f"{name}_bias"))


FAMILIES = (GptOss,)
