"""Llama, and the families that differ from it only in how config.json's values are read: Mistral and Qwen 2.

Llama is the decoder as ``attnx.models.decoder`` defines it, every hook at its default; each family here is a
``Row`` of this table: its ``model_type``, title, transformers class stems, which layers slide, and how it reads a
GGUF file (Llama's: W_q and W_k unpermuted, Llama 3's ``rope_freqs``, experts as Mixtral).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from attnx.core.positions import RopeScaling, plain_frequencies
from attnx.errors import ModelError
from attnx.models.decoder import Decoder, Row
from attnx.models.gguf_config import decoder
from attnx.models.gguf_form import QK, GgufForm, Metadata, Read

LLAMA3 = (1.0, 4.0, 8192)  # low_freq_factor, high_freq_factor, original context: every Llama 3.x release's


def llama3_scaling(factors: np.ndarray, theta: float, head_dim: int, where: str) -> dict[str, Any] | None:
    """The Llama 3 rope scaling whose per-frequency divisors ``rope_freqs`` holds (None: all 1, no scaling): the
    factor is the largest divisor, the rest Llama 3.x's (``LLAMA3``); divisors that are not those are refused."""
    if factors.shape != (head_dim // 2,) or not np.all(np.isfinite(factors)) or np.any(factors <= 0):
        raise ModelError(f"{where}: rope_freqs must hold {head_dim // 2} positive numbers, one per pair of columns")
    if np.all(factors == 1):
        return None
    factor = float(factors.max())
    low, high, context = LLAMA3
    implied = RopeScaling("llama3", factor, low, high, context).frequencies(theta, head_dim)
    if not np.allclose(plain_frequencies(theta, head_dim) / implied, factors, rtol=1e-4, atol=0):
        raise ModelError(f"{where} holds per-frequency factors that are not Llama 3's (factor {factor:g}, low 1, "
                         f"high 4, original context {context}): attnx cannot tell what scaling they are")  # fmt: skip
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
            "original_max_position_embeddings": context}  # fmt: skip


def llama_gguf(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """A GGUF file's ``llama.*`` metadata: Llama, Mistral (llama.cpp writes it as Llama) and Mixtral (a Llama with
    ``expert_count`` experts)."""
    experts = meta.whole("expert_count", "num_local_experts") or 0
    config = decoder(meta, "mixtral" if experts else "llama", tensors, experts=bool(experts))
    consumed = {}
    if "rope_freqs.weight" in tensors:
        where = f"{meta.path}: tensor 'rope_freqs.weight'"
        scaling = llama3_scaling(read("rope_freqs.weight").ravel(), config["rope_theta"], config["head_dim"], where)
        if scaling is not None and config.get("rope_scaling") is not None:
            raise ModelError(f"{where} and {meta.key('rope.scaling.type')} both scale the rotary frequencies")
        config["rope_scaling"] = scaling or config.get("rope_scaling")
        consumed["rope_freqs.weight"] = "the rope scaling (Llama 3's factors)"
    if experts:
        config["num_local_experts"] = experts
        config["num_experts_per_tok"] = meta.need("expert_used_count", "num_experts_per_tok")
    return {k: v for k, v in config.items() if v is not None}, consumed


# Llama 2, 3, 3.1, 3.2 (and the models built as Llama: SmolLM2, TinyLlama, DeepSeek-R1-Distill-Llama); its GGUF files
# are Mistral's and Mixtral's too (``produces``).
Llama = Decoder.of(
    Row("llama", "Llama", ("Llama",), gguf=GgufForm(("llama",), llama_gguf, produces=("mixtral",), unpermuted=QK))
)
# Mistral: a sliding_window on every layer.
Mistral = Decoder.of(Row("mistral", "Mistral", ("Mistral",), sliding="all", window=4096, reads=("sliding_window",)))
# Qwen 2, 2.5: windows from max_window_layers on, when use_sliding_window (biases on q, k and v are in the weights).
Qwen2 = Decoder.of(
    Row("qwen2", "Qwen 2", ("Qwen2",), sliding="upper", window=4096, reads=("sliding_window", "use_sliding_window"),
        gguf=GgufForm(("qwen2",)))
)  # fmt: skip

FAMILIES = (Llama, Mistral, Qwen2)
