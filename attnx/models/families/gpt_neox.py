"""GPT-NeoX and Pythia: a per-head fused query_key_value, partial rotary, LayerNorm, a parallel residual."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from attnx.core.spec import Linear
from attnx.engines.arrays import Array
from attnx.errors import ModelError
from attnx.models.architecture import Architecture, WeightRef, weights_and_biases
from attnx.models.decoder import Decoder, Norms
from attnx.models.nn import layer_norm

EMBED_OUT = "embed_out.weight"  # the untied output layer, beside the ``gpt_neox.`` tensors


class GptNeox(Decoder):
    """GPT-NeoX (Pythia): ``query_key_value`` stacks each head's q, k and v rows in turn ([head, (q, k, v), d]);
    RoPE turns ``rotary_pct`` of each head (0.25 when absent) by ``rotary_emb_base``; LayerNorms with biases
    (``layer_norm_eps``); a plain MLP ``dense_4h_to_h(act(dense_h_to_4h(x)))``; attention and MLP read the same
    stream with ``use_parallel_residual`` (the default); an untied ``embed_out``."""

    name = "gpt_neox"
    family = "GPT-NeoX"
    design = "pre-LayerNorm causal decoder"
    stems = ("GPTNeoX",)
    prefixes = ("gpt_neox.", "")
    probe = "embed_in.weight"
    outside = (EMBED_OUT,)
    norms = Norms(before_attention="input_layernorm", before_mlp="post_attention_layernorm", final="final_layer_norm")
    partial_rotary = True
    activation_default = "gelu"
    reads = frozenset({"rotary_pct", "rotary_emb_base", "use_parallel_residual"})

    def read_config(self) -> None:
        """The decoder's settings, then LayerNorm's eps, the residual form and a plain MLP."""
        super().read_config()
        self.eps = self.checkpoint.number("layer_norm_eps", 1e-5, low=0, high=1)
        self.parallel_residual = self.checkpoint.flag("use_parallel_residual", True)
        self.gated = False

    def check_heads(self) -> None:
        """hidden_size splits into the heads, which each have their own K and V: transformers' GPT-NeoX reads no
        ``head_dim`` nor ``num_key_value_heads``, so one set to another size is refused."""
        Architecture.check_heads(self)
        if (self.head_dim, self.kv_heads) != (self.d_model // self.heads, self.heads):
            raise ModelError(
                f"{self.checkpoint.config_path}: head_dim {self.head_dim} or num_key_value_heads {self.kv_heads} "
                f"is not read by {self.name} ({self.family}): each of its {self.heads} heads is "
                f"{self.d_model // self.heads} wide with its own K and V"
            )

    def flat_rope(self) -> dict[str, Any]:
        """GPT-NeoX's names for the base and the turned fraction, with transformers' defaults (10 000 and 0.25)."""
        ckpt = self.checkpoint
        return {
            "rope_theta": ckpt.number("rotary_emb_base", self.default_theta, low=0),
            "partial_rotary_factor": ckpt.number("rotary_pct", 0.25, low=0),
        }

    def attention_prefix(self, layer: int) -> str:
        """``layers.N.attention.``."""
        return f"{self.layer_prefix(layer)}attention."

    def projections(self, layer: int) -> tuple[Linear, Linear, Linear, Linear]:
        """W_q, W_k and W_v from ``query_key_value``, whose rows are [head, (q, k, v), d]; W_o is ``dense``."""
        p, d, heads, width = self.attention_prefix(layer), self.d_model, self.heads, self.head_dim
        name = p + "query_key_value"
        weight = self.checkpoint.tensor(f"{name}.weight", shape=(3 * d, d)).reshape(heads, 3, width, d)
        held = self.checkpoint.has(f"{name}.bias")
        bias = self.checkpoint.tensor(f"{name}.bias", shape=(3 * d,)).reshape(heads, 3, width) if held else None
        w_q, w_k, w_v = (
            Linear.of(weight[:, part].reshape(d, d).T, None if bias is None else bias[:, part].reshape(d))
            for part in range(3)
        )
        return w_q, w_k, w_v, self.linear(p + "dense", d, d)

    def claimed_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """The embeddings, and layer 0's ``query_key_value``, ``[3 × d_model, d_model]`` (``check_heads`` ties the
        heads to d_model)."""
        yield from Architecture.claimed_shapes(self)
        yield f"{self.attention_prefix(0)}query_key_value.weight", (3 * self.d_model, self.d_model)

    def attention_tensors(self, layer: int) -> Iterator[str]:
        """The tensors of ``projections``."""
        p = self.attention_prefix(layer)
        return weights_and_biases(p + "query_key_value", p + "dense")

    def norm(self, x: Array, name: str) -> Array:
        """LayerNorm ``name``, with its weight and bias."""
        width = (x.shape[-1],)
        weight, bias = self.weight(f"{name}.weight", shape=width), self.weight(f"{name}.bias", shape=width)
        return layer_norm(x, weight, bias, self.eps)

    def norm_tensors(self, name: str) -> tuple[str, ...]:
        """A LayerNorm's weight and bias."""
        return tuple(weights_and_biases(name))

    def mlp(self, layer: int, x: Array) -> Array:
        """The plain MLP: ``dense_4h_to_h(act(dense_h_to_4h(x)))``."""
        p = self.layer_prefix(layer) + "mlp."
        inner = self.act(self.project(x, p + "dense_h_to_4h", self.d_ff))  # (N, d_ff)
        return self.project(inner, p + "dense_4h_to_h", self.d_model)

    def mlp_tensors(self, layer: int) -> Iterator[str]:
        """The tensors of ``mlp``."""
        p = self.layer_prefix(layer) + "mlp."
        return weights_and_biases(p + "dense_h_to_4h", p + "dense_4h_to_h")

    @property
    def has_lm_head(self) -> bool:
        """Tied embeddings, or ``embed_out`` beside the model's tensors."""
        return self.tied or self.checkpoint.has(EMBED_OUT, prefixed=False)

    def output_tensor(self) -> WeightRef:
        """The tied embeddings, or ``embed_out``."""
        name, prefixed = (self.probe, True) if self.tied else (EMBED_OUT, False)
        return WeightRef(name, (), (self.vocab_size, self.d_model), prefixed)

    def is_buffer(self, name: str) -> bool:
        """Older checkpoints also store each layer's causal mask (``attention.bias``, ``attention.masked_bias``)."""
        return name.endswith((".attention.bias", ".attention.masked_bias")) or super().is_buffer(name)


FAMILIES = (GptNeox,)
