"""Llama, and the families that differ from it only in how config.json's values are read: Mistral and Qwen 2.

Llama is the decoder as ``attnx.models.decoder`` defines it, every hook at its default; each family here is a
``Row`` of this table: its ``model_type``, title, transformers class stems, and which layers slide.
"""

from __future__ import annotations

from attnx.models.decoder import Decoder, Row

# Llama 2, 3, 3.1, 3.2 (and the models built as Llama: SmolLM2, TinyLlama, DeepSeek-R1-Distill-Llama).
Llama = Decoder.of(Row("llama", "Llama", ("Llama",)))
# Mistral: a sliding_window on every layer.
Mistral = Decoder.of(Row("mistral", "Mistral", ("Mistral",), sliding="all", window=4096, reads=("sliding_window",)))
# Qwen 2, 2.5: windows from max_window_layers on, when use_sliding_window (biases on q, k and v are in the weights).
Qwen2 = Decoder.of(
    Row("qwen2", "Qwen 2", ("Qwen2",), sliding="upper", window=4096, reads=("sliding_window", "use_sliding_window"))
)

FAMILIES = (Llama, Mistral, Qwen2)
