"""Mixtral, Qwen 2 MoE and Qwen 3 MoE: decoders of the Llama line whose MLP is a routed mixture of gated experts.

Per MoE layer, on the normed stream x ``[token, d_model]``: router logits x·W_routerᵀ (``[token, expert]``), a
softmax over the experts, the ``num_experts_per_tok`` most probable experts (renormalised to sum 1: always in
Mixtral, where ``norm_topk_prob`` in Qwen), and the sum of each chosen expert's SwiGLU MLP, down(act(gate(x)) *
up(x)), times its weight; Qwen 2 MoE adds a shared expert times sigmoid(x·w_sharedᵀ). Qwen MoE layers listed in
``mlp_only_layers``, or off the ``decoder_sparse_step`` rule, have one dense SwiGLU MLP instead.

The experts are read as ``save_pretrained`` writes them (one 2-D weight per expert and projection: Mixtral's
``w1``/``w3``/``w2``, Qwen's ``gate_proj``/``up_proj``/``down_proj``), not transformers 5's fused 3-D
``experts.gate_up_proj`` in memory. Every expert's weights are read on every layer, chosen or not, so a forward
pass reads exactly the tensors the family names.

Ties: the chosen experts are the top ``k`` of a stable descending sort (the lower expert index first among equal
probabilities). torch.topk leaves the order of exact ties unspecified (on CPU its selection may return either of
two equal experts), so where two experts' router probabilities are exactly equal at the k-th place the expert chosen
may differ from transformers'; otherwise the experts, and their sum (taken in ascending expert order, as
transformers' ``index_add_`` loop does), are transformers'.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from attnx.engines.arrays import Array, arrays_of, host
from attnx.errors import ModelError
from attnx.models.architecture import Mixture
from attnx.models.decoder import Decoder
from attnx.models.gguf_config import decoder
from attnx.models.gguf_form import QK, GgufForm, Metadata, Read, decoder_layer
from attnx.models.nn import dense

QWEN_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")  # gate, up, down
MIXTRAL_PROJECTIONS = ("w1", "w3", "w2")  # gate, up, down

# Their GGUF tensors: a layer's router and shared expert, and its experts stacked per projection ({e}: the expert).
QWEN_MOE_LAYER = {
    "ffn_gate_inp": "mlp.gate", "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj", "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
}  # fmt: skip
QWEN_EXPERTS = {"ffn_gate_exps": "mlp.experts.{e}.gate_proj", "ffn_up_exps": "mlp.experts.{e}.up_proj",
                "ffn_down_exps": "mlp.experts.{e}.down_proj"}  # fmt: skip
MIXTRAL_LAYER = {"ffn_gate_inp": "block_sparse_moe.gate"}
MIXTRAL_EXPERTS = {"ffn_gate_exps": "block_sparse_moe.experts.{e}.w1", "ffn_up_exps": "block_sparse_moe.experts.{e}.w3",
                   "ffn_down_exps": "block_sparse_moe.experts.{e}.w2"}  # fmt: skip


def softmax(logits: np.ndarray) -> np.ndarray:
    """The softmax over the last axis, in ``logits``' dtype."""
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def top_k(probabilities: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` largest probabilities ``[token, k]`` and their expert indices, the lower index first among
    equal values (a stable sort; see the module's docstring on torch.topk's ties)."""
    chosen = np.argsort(-probabilities, axis=-1, kind="stable")[:, :k]
    return np.take_along_axis(probabilities, chosen, axis=-1), chosen


def qwen_moe_config(meta: Metadata, model_type: str, tensors: Mapping[str, Any]) -> dict[str, Any]:
    """A GGUF file's metadata as Qwen 2 MoE's or Qwen 3 MoE's config: experts, top-k, widths, renormalisation as
    llama.cpp does it (Qwen 3 MoE always, Qwen 2 MoE never, unless ``expert_weights_norm`` says), and dense layers
    where a layer has no router."""
    config = decoder(meta, model_type, tensors, experts=True)
    config["num_experts"] = meta.need("expert_count", "num_experts")
    config["num_experts_per_tok"] = meta.need("expert_used_count", "num_experts_per_tok")
    config["moe_intermediate_size"] = meta.need("expert_feed_forward_length", "moe_intermediate_size")
    norm = meta.get("expert_weights_norm", (bool,), "true or false", "norm_topk_prob")
    config["norm_topk_prob"] = (model_type == "qwen3_moe") if norm is None else norm
    meta.neutral("expert_gating_func", 1, "attnx routes by a softmax (gating function 1)")
    if model_type == "qwen2_moe":
        config["shared_expert_intermediate_size"] = meta.need("expert_shared_feed_forward_length",
                                                              "shared_expert_intermediate_size")  # fmt: skip
    layers = config["num_hidden_layers"]
    config["mlp_only_layers"] = [n for n in range(layers) if f"blk.{n}.ffn_gate_inp.weight" not in tensors]
    config.setdefault("intermediate_size", config["moe_intermediate_size"])  # read only on dense layers
    return config


def qwen2_moe_gguf(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """A GGUF file's ``qwen2moe.*`` metadata."""
    return qwen_moe_config(meta, "qwen2_moe", tensors), {}


def qwen3_moe_gguf(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """A GGUF file's ``qwen3moe.*`` metadata."""
    return qwen_moe_config(meta, "qwen3_moe", tensors), {}


class Routed(Decoder):
    """A decoder whose MLP is a routed mixture of SwiGLU experts (see the module's docstring); each family below sets
    where the mixture lives, its experts' names and widths, and whether it renormalises or has a shared expert."""

    moe: ClassVar[str] = "mlp."  # the mixture's tensors, under the layer
    projections_of_expert: ClassVar[tuple[str, str, str]] = QWEN_PROJECTIONS
    expert_width_key: ClassVar[str] = "moe_intermediate_size"
    expert_keys: ClassVar[tuple[str, ...]] = ("num_experts", "num_local_experts")
    defaults: ClassVar[tuple[int, int]] = (8, 2)  # transformers' num_experts and num_experts_per_tok
    always_renormalises: ClassVar[bool] = False  # else as ``norm_topk_prob`` says (absent: False)
    shared_expert: ClassVar[bool] = False
    dense_layers: ClassVar[bool] = True  # whether mlp_only_layers and decoder_sparse_step are read
    router: ClassVar[str] = "gate.weight"  # the router's weight, under the mixture

    def read_config(self) -> None:
        """The decoder's settings, then the mixture's: experts, top-k, renormalisation, widths, sparse layers."""
        super().read_config()
        ckpt, where = self.checkpoint, self.checkpoint.config_path
        self.experts = ckpt.integer(*self.expert_keys, default=self.defaults[0])
        self.top_k = ckpt.integer("num_experts_per_tok", default=self.defaults[1])
        if self.top_k > self.experts:
            raise ModelError(f"{where}: num_experts_per_tok {self.top_k} exceeds the {self.experts} experts")
        self.renormalise = self.always_renormalises or ckpt.flag("norm_topk_prob", False)
        self.expert_width = ckpt.integer(self.expert_width_key)
        self.shared_width = ckpt.integer("shared_expert_intermediate_size") if self.shared_expert else None
        self.sparse = tuple(self.is_sparse(layer) for layer in range(self.layers))
        dense = tuple(layer for layer, sparse in enumerate(self.sparse) if not sparse)
        self.mixture = Mixture(self.experts, self.top_k, self.expert_width, self.renormalise, self.shared_width, dense)
        self.design = f"{Decoder.design}, routed MLP"

    def claimed_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """The decoder's, and the first routed layer's router, ``[experts, d_model]``: the experts."""
        yield from super().claimed_shapes()
        routed = next((layer for layer, sparse in enumerate(self.sparse) if sparse), None)
        if routed is not None:
            yield f"{self.mixture_prefix(routed)}{self.router}", (self.experts, self.d_model)

    def is_sparse(self, layer: int) -> bool:
        """Whether layer ``layer``'s MLP is the mixture: not in ``mlp_only_layers`` and ``decoder_sparse_step``
        dividing layer + 1 (Qwen's rule; every layer where the family has no dense layers)."""
        if not self.dense_layers:
            return True
        listed = self.checkpoint.config.get("mlp_only_layers") or []
        if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
            raise ModelError(f"{self.checkpoint.config_path}: mlp_only_layers must list layer numbers")
        return layer not in listed and (layer + 1) % self.checkpoint.integer("decoder_sparse_step", default=1) == 0

    def swiglu(self, x: Array, prefix: str, names: tuple[str, str, str], width: int) -> Array:
        """down(act(gate(x)) * up(x)) with the bias-free torch Linears ``prefix`` + each of ``names``."""
        gate, up, down = (prefix + name + ".weight" for name in names)
        hidden = self.act(dense(x, self.weight(gate, shape=(width, self.d_model)).T, None))
        hidden = hidden * dense(x, self.weight(up, shape=(width, self.d_model)).T, None)
        return dense(hidden, self.weight(down, shape=(self.d_model, width)).T, None)

    def route(self, layer: int, x: Array) -> tuple[np.ndarray, np.ndarray]:
        """Each token's chosen experts ``[token, k]`` and their weights: the top-k of the router's softmax,
        renormalised where the family does (chosen on the host, in NumPy, from the router's logits)."""
        router = self.weight(f"{self.mixture_prefix(layer)}gate.weight", shape=(self.experts, self.d_model))
        weights, chosen = top_k(softmax(host(dense(x, router.T, None))), self.top_k)
        if self.renormalise:
            weights = weights / weights.sum(axis=-1, keepdims=True)
        return chosen, weights

    def mixture_prefix(self, layer: int) -> str:
        """Where layer ``layer``'s mixture (its router, experts and shared expert) is."""
        return self.layer_prefix(layer) + self.moe

    def mlp(self, layer: int, x: Array) -> Array:
        """The routed mixture (plus the gated shared expert), or the dense SwiGLU MLP on a dense layer."""
        p = self.mixture_prefix(layer)
        if not self.sparse[layer]:
            return self.swiglu(x, p, QWEN_PROJECTIONS, self.d_ff)
        chosen, weights = self.route(layer, x)
        xp = arrays_of(x)
        out = xp.zeros_like(x)
        for expert in range(self.experts):  # every expert's weights are read, as ``mlp_tensors`` names them
            rows, slot = np.nonzero(chosen == expert)  # each token picks an expert at most once
            at = xp.indices(rows)
            y = self.swiglu(x[at], f"{p}experts.{expert}.", self.projections_of_expert, self.expert_width)
            out[at] += y * xp.like(weights[rows, slot][:, None])
        if self.shared_width is not None:
            gate = dense(x, self.weight(f"{p}shared_expert_gate.weight", shape=(1, self.d_model)).T, None)
            shared = self.swiglu(x, f"{p}shared_expert.", QWEN_PROJECTIONS, self.shared_width)
            out = out + shared / (1 + xp.exp(-gate))  # sigmoid(gate) * shared
        return out

    def mlp_tensors(self, layer: int) -> Iterator[str]:
        """The tensors of ``mlp``: weights only (a bias transformers would leave unread is refused)."""
        p = self.mixture_prefix(layer)
        if not self.sparse[layer]:
            yield from (f"{p}{name}.weight" for name in QWEN_PROJECTIONS)
            return
        yield f"{p}gate.weight"
        for expert in range(self.experts):
            yield from (f"{p}experts.{expert}.{name}.weight" for name in self.projections_of_expert)
        if self.shared_expert:
            yield f"{p}shared_expert_gate.weight"
            yield from (f"{p}shared_expert.{name}.weight" for name in QWEN_PROJECTIONS)


class Mixtral(Routed):
    """Mixtral: Mistral's attention (``sliding_window`` on every layer, where set) and on every layer
    ``block_sparse_moe``: router ``gate``, experts ``w1`` (gate), ``w3`` (up), ``w2`` (down), intermediate_size
    wide; the top-k weights always renormalised."""

    name = "mixtral"
    family = "Mixtral"
    stems = ("Mixtral",)
    sliding = "all"
    reads = frozenset({"sliding_window", "num_local_experts"})
    moe = "block_sparse_moe."
    projections_of_expert = MIXTRAL_PROJECTIONS
    expert_width_key = "intermediate_size"
    expert_keys = ("num_local_experts",)
    always_renormalises = True
    dense_layers = False
    # llama.cpp writes Mixtral as a Llama with experts: Llama's form builds its config (``produces``).
    gguf = GgufForm(layer=decoder_layer(**MIXTRAL_LAYER), experts=MIXTRAL_EXPERTS, unpermuted=QK)


class Qwen2Moe(Routed):
    """Qwen 2 MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen 2's attention (biases on q, k and v; sliding windows, which
    its layer rule places otherwise, are refused) and a mixture of moe_intermediate_size experts plus a shared
    expert (shared_expert_intermediate_size) gated by sigmoid(``shared_expert_gate``)."""

    name = "qwen2_moe"
    family = "Qwen 2 MoE"
    stems = ("Qwen2Moe",)
    sliding = "upper"
    window_default = 4096
    reads = frozenset({"sliding_window", "num_experts", "num_local_experts"})
    defaults = (60, 4)
    shared_expert = True
    gguf = GgufForm(("qwen2moe",), qwen2_moe_gguf, layer=decoder_layer(**QWEN_MOE_LAYER), experts=QWEN_EXPERTS)


class Qwen3Moe(Routed):
    """Qwen 3 MoE (Qwen3-30B-A3B, 235B-A22B): Qwen 3's attention (QK-norm on each head; sliding windows refused)
    and a mixture of moe_intermediate_size experts, renormalised where ``norm_topk_prob``."""

    name = "qwen3_moe"
    family = "Qwen 3 MoE"
    stems = ("Qwen3Moe",)
    qk_norm_over = "head"
    sliding = "upper"
    window_default = 4096
    reads = frozenset({"sliding_window", "num_experts", "num_local_experts"})
    defaults = (128, 8)
    gguf = GgufForm(("qwen3moe",), qwen3_moe_gguf, layer=decoder_layer(**QWEN_MOE_LAYER), experts=QWEN_EXPERTS)


FAMILIES = (Mixtral, Qwen2Moe, Qwen3Moe)
