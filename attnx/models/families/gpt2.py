"""The GPT-2 family (pre-LayerNorm causal decoders) in NumPy around attnx's attention."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from attnx.core.spec import AttentionSpec, Linear
from attnx.engines.arrays import Array, arrays_of, host
from attnx.models.architecture import Architecture, WeightRef, weights_and_biases
from attnx.models.decoder import LM_HEAD
from attnx.models.gguf_config import block_count
from attnx.models.gguf_form import GgufForm, Metadata, Read
from attnx.models.nn import dense, layer_norm
from attnx.models.tokenize import Encoded

# GPT-2's own names for its sizes in config.json (newer files may use the usual ones too).
CONFIG_KEYS = {
    "layers": ("n_layer", "num_hidden_layers"),
    "heads": ("n_head", "num_attention_heads"),
    "d_model": ("n_embd", "hidden_size"),
    "d_ff": ("n_inner",),
    "max_length": ("n_positions", "max_position_embeddings"),
}
# Its GGUF tensors: their names, and the Conv1D weights, which llama.cpp stores transposed (as Linear weights).
GGUF_TOP = {"token_embd": "transformer.wte", "position_embd": "transformer.wpe", "output_norm": "transformer.ln_f",
            "output": "lm_head"}  # fmt: skip
GGUF_LAYER = {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_norm": "ln_2",
              "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}  # fmt: skip
GGUF_TRANSPOSED = frozenset({"attn_qkv", "attn_output", "ffn_up", "ffn_down"})


def gpt2_gguf(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """A GGUF file's ``gpt2.*`` metadata: GPT-2's sizes under its own names; llama.cpp's GELU is the tanh
    approximation (``gelu_new``)."""
    config = {
        "model_type": "gpt2", "n_layer": block_count(meta, tensors, "n_layer"),
        "n_head": meta.need("attention.head_count", "n_head"), "n_embd": meta.need("embedding_length", "n_embd"),
        "n_inner": meta.whole("feed_forward_length", "n_inner"),
        "n_positions": meta.whole("context_length", "n_positions"),
        "layer_norm_epsilon": meta.number("attention.layer_norm_epsilon", "layer_norm_epsilon"),
        "activation_function": "gelu_new",
    }  # fmt: skip
    meta.neutral("attention.causal", True, "attnx runs GPT-2 as a causal decoder")
    return {key: value for key, value in config.items() if value is not None}, {}


class Gpt2(Architecture):
    """GPT-2: token + position embeddings; per layer, x = ln_1(h), h += attention(x), h += MLP(ln_2(h)).

    Its Conv1D weights are stored input-major (``[in, out]``), as attnx's W: ``c_attn`` is
    ``[d, 3d]``, the q, k and v thirds side by side; ``c_proj`` is W_o.
    """

    name = "gpt2"
    family = "GPT-2"
    design = "pre-LayerNorm causal decoder"
    prefixes = ("transformer.", "")
    probe = "wte.weight"
    causal = True
    stems = ("GPT2",)
    unused = ("lm_head.weight",)  # a tied file's copy of wte (an untied one is read: ``output_tensor``)
    layer_stem = "h."
    gguf = GgufForm(("gpt2",), gpt2_gguf, top=GGUF_TOP, layer=GGUF_LAYER, within="transformer.h.{n}.",
                    transposed=GGUF_TRANSPOSED)  # fmt: skip

    def read_config(self) -> None:
        """Sizes and the attention scale from config.json."""
        ckpt = self.checkpoint
        self.read_sizes(CONFIG_KEYS, mlp_ratio=4, max_length=1024)
        self.eps = ckpt.number("layer_norm_epsilon", 1e-5, low=0, high=1)
        self.act = self.activation("activation_function", "gelu_new")
        self.scaled = ckpt.flag("scale_attn_weights", True)
        self.by_layer = ckpt.flag("scale_attn_by_inverse_layer_idx", False)

    def tensor_names(self) -> Iterator[str]:
        """The token and position embeddings, the final LayerNorm, and each layer's LayerNorms, attention and MLP."""
        yield from ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")
        for layer in range(self.layers):
            parts = ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
            yield from weights_and_biases(*(f"h.{layer}.{part}" for part in parts))

    def scale(self, layer: int) -> str | float:
        """1/√d_k (``scale_attn_weights``), times 1/(layer + 1) with ``scale_attn_by_inverse_layer_idx``."""
        if not self.by_layer:
            return "sqrt_dk" if self.scaled else "none"
        return (1 / math.sqrt(self.d_model // self.heads) if self.scaled else 1.0) / (layer + 1)

    def norm(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A LayerNorm's weight and bias."""
        return self.weight(f"{name}.weight", shape=(self.d_model,)), self.weight(f"{name}.bias", shape=(self.d_model,))

    def conv(self, x: Array, name: str, reads: int, width: int) -> Array:
        """A Conv1D: ``x @ weight + bias`` (the weight is already ``[in, out]``: ``[reads, width]``)."""
        return dense(
            x, self.weight(f"{name}.weight", shape=(reads, width)), self.weight(f"{name}.bias", shape=(width,))
        )

    def embed(self, encoded: Encoded) -> np.ndarray:
        """Token + position embeddings, ``[token, d_model]``."""
        words = self.checkpoint.rows("wte.weight", encoded.ids, (self.vocab_size, self.d_model)).astype(self.dtype)
        positions = self.checkpoint.rows("wpe.weight", encoded.positions, (None, self.d_model))
        return words + positions.astype(self.dtype)

    def attention_spec(self, layer: int, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """Causal self-attention on ln_1 of the stream; W_q, W_k, W_v are the thirds of ``c_attn``."""
        p = f"h.{layer}."
        x = host(layer_norm(stream, *self.norm(p + "ln_1"), self.eps))
        d = self.d_model
        weight = self.checkpoint.tensor(p + "attn.c_attn.weight", shape=(d, 3 * d))
        bias = self.checkpoint.tensor(p + "attn.c_attn.bias", shape=(3 * d,))
        w_q, w_k, w_v = (Linear.of(weight[:, i * d : (i + 1) * d], bias[i * d : (i + 1) * d]) for i in range(3))
        out = (
            self.checkpoint.tensor(p + "attn.c_proj.weight", shape=(d, d)),
            self.checkpoint.tensor(p + "attn.c_proj.bias", shape=(d,)),
        )
        return AttentionSpec.build(
            heads=self.heads, tokens=tokens, key_tokens=tokens, source=source, x=x,
            w_q=w_q, w_k=w_k, w_v=w_v, w_o=Linear.of(*out), causal=self.attention(layer).kind.causal,
            scale=self.scale(layer),
        )  # fmt: skip

    def after_attention(self, layer: int, stream: Array, projected: np.ndarray) -> Array:
        """Residual add, then h + MLP(ln_2(h))."""
        p = f"h.{layer}."
        h = stream + arrays_of(stream).like(projected)
        normed = layer_norm(h, *self.norm(p + "ln_2"), self.eps)
        inner = self.act(self.conv(normed, p + "mlp.c_fc", self.d_model, self.d_ff))  # (N, d_ff)
        return h + self.conv(inner, p + "mlp.c_proj", self.d_ff, self.d_model)

    def final(self, stream: Array) -> Array:
        """ln_f of the stream leaving the last layer."""
        return layer_norm(stream, *self.norm("ln_f"), self.eps)

    @property
    def has_lm_head(self) -> bool:
        """GPT-2 ties its output layer to the token embeddings unless ``tie_word_embeddings`` is false, where
        ``lm_head.weight`` (beside ``transformer.``) holds it."""
        return self.tied or self.checkpoint.has(LM_HEAD, prefixed=False)

    def output_tensor(self) -> WeightRef:
        """``wte`` (tied, the default), else ``lm_head``."""
        shape = (self.vocab_size, self.d_model)
        return WeightRef("wte.weight", (), shape, True) if self.tied else WeightRef(LM_HEAD, (), shape, False)

    def is_buffer(self, name: str) -> bool:
        """Older GPT-2 checkpoints store each layer's causal mask (``attn.bias``, ``attn.masked_bias``)."""
        return name.endswith((".attn.bias", ".attn.masked_bias")) or super().is_buffer(name)


FAMILIES = (Gpt2,)
