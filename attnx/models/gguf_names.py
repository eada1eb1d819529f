"""GGUF tensor names mapped onto the Hugging Face names the families read, with what llama.cpp's converter did to
each tensor undone.

The converter (``convert_hf_to_gguf.py``) renames every tensor (``model.layers.3.self_attn.q_proj.weight`` is
``blk.3.attn_q.weight``) and changes some:

- Llama-style models (and Mistral, Mixtral): the rows of W_q and W_k (and of their biases) are permuted within each
  head from rotate-half order to llama.cpp's interleaved pairs: row (half h, index i) of a head moves to 2i + h.
  Read as stored, every score would be wrong; ``unpermute`` puts them back.
- Gemma, Gemma 2 and Gemma 3: every norm weight is stored as 1 + w (Gemma's RMSNorm multiplies by 1 + w); ``shifted``
  subtracts the 1 again, so the family's (1 + w) gets what the converter started from.
- GPT-2: the Conv1D weights (``c_attn``, ``c_proj``, ``c_fc``) are stored transposed, as Linear weights; they are
  transposed back. ``output.weight`` is a copy of the token embeddings, which the family leaves unread.
- MoE: each layer's experts are stacked into one 3-D tensor per projection (``ffn_gate_exps``: experts × width ×
  hidden); expert e is its block of rows. Qwen 2 MoE's shared-expert gate is stored as a vector, read as 1 × hidden.
- Phi-3 keeps its fused ``qkv_proj`` ([q; k; v]) and ``gate_up_proj`` ([gate; up]) as they are; Qwen and Phi-3 use
  rotate-half RoPE in llama.cpp too, so nothing of theirs is permuted.

A GGUF tensor with no rule keeps its GGUF name, so the family's check of unread tensors refuses it by that name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnx.models.gguf_file import TensorInfo

NAME = re.compile(r"(?:blk\.(?P<layer>\d+)\.)?(?P<part>[a-z0-9_]+?)(?:\.(?P<kind>weight|bias))?")
AS_IS, UNPERMUTE, SHIFTED, TRANSPOSED = "as-is", "unpermute", "shifted", "transposed"

# Where each GGUF tensor of a Llama-line decoder goes, under ``model.`` (layers under ``model.layers.N.``).
DECODER_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
DECODER_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_rot_embd": "self_attn.rotary_emb.inv_freq",
}  # fmt: skip
GEMMA2_LAYER = {"ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
                "post_ffw_norm": "post_feedforward_layernorm"}  # fmt: skip
PHI3_LAYER = {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
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
GPT2_TOP = {"token_embd": "transformer.wte", "position_embd": "transformer.wpe", "output_norm": "transformer.ln_f",
            "output": "lm_head"}  # fmt: skip
GPT2_LAYER = {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_norm": "ln_2",
              "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}  # fmt: skip
GPT2_TRANSPOSED = frozenset({"attn_qkv", "attn_output", "ffn_up", "ffn_down"})


@dataclass(frozen=True)
class Source:
    """Where a tensor the family reads comes from: GGUF tensor ``info``, read as ``shape`` after ``transform``
    (``heads``: the heads whose rows ``unpermute`` reorders); ``expert`` selects one expert's block of rows."""

    info: TensorInfo
    shape: tuple[int, ...]
    transform: str = AS_IS
    heads: int = 0
    expert: int | None = None

    @property
    def whole(self) -> bool:
        """Whether reading some rows needs the whole tensor (a transform that moves values between rows)."""
        return self.transform in (UNPERMUTE, TRANSPOSED)


def unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's permutation of W_q or W_k (or a bias): within each of ``heads`` heads, stored row 2i + h is
    row h·(d/2) + i of the Hugging Face weight (rotate-half order)."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, half, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def layer_table(config: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The family's layer names for GGUF parts, and its experts' (``{e}`` for the expert), from its model_type."""
    kind = config["model_type"]
    table = dict(DECODER_LAYER)
    if kind in ("gemma2", "gemma3_text"):
        table.update(GEMMA2_LAYER)
    if kind == "phi3":
        table.update(PHI3_LAYER)
    if kind == "mixtral":
        table.update(MIXTRAL_LAYER)
        return table, MIXTRAL_EXPERTS
    if kind.endswith("_moe"):
        table.update(QWEN_MOE_LAYER)
        return table, QWEN_EXPERTS
    return table, {}


def source_of(info: TensorInfo, config: Mapping[str, Any], part: str, kind: str | None) -> Source:
    """How the family reads GGUF tensor ``info`` (its ``part`` and ``kind``: weight or bias)."""
    shape, model = info.shape, config["model_type"]
    if model == "gpt2":
        transposed = kind == "weight" and part in GPT2_TRANSPOSED and len(shape) == 2
        return Source(info, shape[::-1], TRANSPOSED) if transposed else Source(info, shape)
    if model in ("llama", "mixtral") and part in ("attn_q", "attn_k"):
        heads = config["num_attention_heads"] if part == "attn_q" else config["num_key_value_heads"]
        return Source(info, shape, UNPERMUTE, heads=heads)
    if model in ("gemma", "gemma2", "gemma3_text") and part.endswith("norm") and kind == "weight":
        return Source(info, shape, SHIFTED)
    if part == "ffn_gate_inp_shexp" and len(shape) == 1:
        return Source(info, (1, *shape))
    return Source(info, shape)


def map_tensors(
    tensors: Mapping[str, TensorInfo], config: Mapping[str, Any], consumed: Mapping[str, str]
) -> dict[str, Source]:
    """Every GGUF tensor under the name its family reads (one per expert for stacked experts), except those read into
    the config (``consumed``); a tensor with no rule keeps its GGUF name."""
    gpt2 = config["model_type"] == "gpt2"
    top, (layer_names, experts) = (GPT2_TOP, (GPT2_LAYER, {})) if gpt2 else (DECODER_TOP, layer_table(config))
    within = "transformer.h.{n}." if gpt2 else "model.layers.{n}."
    sources: dict[str, Source] = {}
    for name, info in tensors.items():
        match = NAME.fullmatch(name)
        if name in consumed or match is None:
            if match is None:
                sources[name] = Source(info, info.shape)
            continue
        layer, part, kind = match["layer"], match["part"], match["kind"]
        suffix = "" if kind is None else f".{kind}"
        if layer is not None and part in experts and len(info.shape) == 3:
            for e in range(info.shape[0]):
                hf = within.format(n=layer) + experts[part].format(e=e) + suffix
                sources[hf] = Source(info, info.shape[1:], expert=e)
            continue
        stem = top.get(part) if layer is None else layer_names.get(part)
        if stem is None:
            sources[name] = Source(info, info.shape)
            continue
        suffix = "" if stem.endswith("inv_freq") else suffix  # a buffer of rotary frequencies, left unread
        hf = stem + suffix if layer is None else within.format(n=layer) + stem + suffix
        sources[hf] = source_of(info, config, part, kind)
    return sources
