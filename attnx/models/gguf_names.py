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

Which of these a family's tensors need, and the names they go to, the family declares in its own module (its
``GgufForm``, attnx/models/gguf_form.py): ``map_tensors`` applies that form. A GGUF tensor with no rule keeps its GGUF
name, so the family's check of unread tensors refuses it by that name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnx.models.gguf_file import TensorInfo
from attnx.models.gguf_form import GgufForm

NAME = re.compile(r"(?:blk\.(?P<layer>\d+)\.)?(?P<part>[a-z0-9_]+?)(?:\.(?P<kind>weight|bias))?")
AS_IS, UNPERMUTE, SHIFTED, TRANSPOSED = "as-is", "unpermute", "shifted", "transposed"
HEADS = {"attn_q": "num_attention_heads", "attn_k": "num_key_value_heads"}  # whose heads a permuted part's rows are


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


def source_of(info: TensorInfo, config: Mapping[str, Any], form: GgufForm, part: str, kind: str | None) -> Source:
    """How the family of ``form`` reads GGUF tensor ``info`` (its ``part`` and ``kind``: weight or bias)."""
    shape = info.shape
    if form.transposed:
        transposed = kind == "weight" and part in form.transposed and len(shape) == 2
        return Source(info, shape[::-1], TRANSPOSED) if transposed else Source(info, shape)
    if part in form.unpermuted:
        return Source(info, shape, UNPERMUTE, heads=config[HEADS[part]])
    if form.shifted_norms and part.endswith("norm") and kind == "weight":
        return Source(info, shape, SHIFTED)
    if part == "ffn_gate_inp_shexp" and len(shape) == 1:
        return Source(info, (1, *shape))
    return Source(info, shape)


def map_tensors(
    tensors: Mapping[str, TensorInfo], config: Mapping[str, Any], consumed: Mapping[str, str], form: GgufForm
) -> dict[str, Source]:
    """Every GGUF tensor under the name the family of ``form`` reads (one per expert for stacked experts), except
    those read into the config (``consumed``); a tensor with no rule keeps its GGUF name."""
    top, layer_names, experts, within = form.top, form.layer, form.experts, form.within
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
        sources[hf] = source_of(info, config, form, part, kind)
    return sources
