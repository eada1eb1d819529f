"""Llama-style decoders (Llama, Mistral, Qwen 2 and 3, Gemma 1 and 2) in NumPy around attnx's attention.

One decoder, parametrized: a ``Family`` row says what a ``model_type`` does differently, and config.json
gives the sizes. Per layer: h += o_proj(attention(RMSNorm(h))); h += down(act(gate(x)) * up(x)) with
x = RMSNorm(h). Rotary positions, grouped K/V heads, QK-norm, sliding windows and soft-capped scores
are settings of the attention spec, so the engines apply them: the layer's spec is the plain input X
with its projections, not pre-rotated Q and K.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from attnx.core.inputs import HeadNorm
from attnx.core.positions import RopeScaling, Rotary
from attnx.core.spec import AttentionSpec, Linear
from attnx.errors import ConfigError, ModelError
from attnx.models.architecture import Architecture
from attnx.models.checkpoint import CONFIG
from attnx.models.nn import dense
from attnx.models.tokenize import Encoded

ROPE_TYPES = ("default", "linear", "llama3")
LM_HEAD = "lm_head.weight"  # beside the model's tensors (outside the ``model.`` prefix) when not tied


@dataclass(frozen=True)
class Family:
    """What one ``model_type`` does differently from Llama.

    ``gemma_norm``: RMSNorm multiplies by (1 + w) and the embeddings by √hidden; ``sandwich``: norms after
    the attention and the MLP too (Gemma 2); ``qk_norm``: RMSNorm on each head's q and k before rotary
    positions (Qwen 3); ``sliding``: which layers slide when config.json has no ``layer_types`` (``none``,
    ``all``, ``alternate``: 0, 2, 4, …, ``upper``: from ``max_window_layers`` on, when ``use_sliding_window``);
    ``query_scalar``: scores scaled by ``query_pre_attn_scalar``^-½ and soft-capped by
    ``attn_logit_softcapping`` (Gemma 2).
    """

    model_type: str
    title: str
    activation_key: str = "hidden_act"
    activation_default: str = "silu"
    activation_aliases: tuple[tuple[str, str], ...] = ()  # (as config.json names it, what the family runs)
    gemma_norm: bool = False
    sandwich: bool = False
    qk_norm: bool = False
    sliding: str = "none"
    query_scalar: bool = False


FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family("llama", "Llama"),
        Family("mistral", "Mistral", sliding="all"),
        Family("qwen2", "Qwen 2", sliding="upper"),
        Family("qwen3", "Qwen 3", qk_norm=True, sliding="upper"),
        Family("gemma", "Gemma", "hidden_act", "gelu_pytorch_tanh", (("gelu", "gelu_pytorch_tanh"),), gemma_norm=True),
        Family(
            "gemma2", "Gemma 2", "hidden_activation", "gelu_pytorch_tanh",
            gemma_norm=True, sandwich=True, sliding="alternate", query_scalar=True,
        ),
    )
}  # fmt: skip


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float, *, offset: bool = False) -> np.ndarray:
    """``x / sqrt(mean(x²) + eps) * w`` over the last axis in ``x``'s dtype (``offset``: ``* (1 + w)``, Gemma)."""
    scale = weight.astype(x.dtype, copy=False)
    if offset:
        scale = scale + np.asarray(1, dtype=x.dtype)
    mean_square = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(mean_square + np.asarray(eps, dtype=x.dtype)) * scale


class Decoder(Architecture):
    """A Llama-style causal decoder; ``kind`` says how this family differs (one subclass per family, ``of``)."""

    prefixes = ("model.", "")
    probe = "embed_tokens.weight"
    causal = True
    design = "pre-RMSNorm causal decoder"
    kind: ClassVar[Family] = FAMILIES["llama"]

    @classmethod
    def of(cls, kind: Family) -> type[Decoder]:
        """The decoder of family ``kind``."""
        return type(
            f"Decoder[{kind.model_type}]", (cls,), {"kind": kind, "name": kind.model_type, "family": kind.title}
        )

    def read_config(self) -> None:
        """Sizes, rotary positions, windows, scale and soft cap from config.json."""
        ckpt, kind = self.checkpoint, self.kind
        own = {"kv_heads": ("num_key_value_heads",), "head_dim": ("head_dim",)}  # beside the usual names
        self.read_sizes(own, mlp_ratio=None, max_length=2048)
        self.eps = ckpt.number("rms_norm_eps", 1e-6, low=0, high=1)
        self.act = self.activation(kind.activation_key, kind.activation_default, aliases=dict(kind.activation_aliases))
        if self.heads % self.kv_heads:
            raise ModelError(
                f"{ckpt.path / CONFIG}: {self.heads} attention heads cannot be shared among {self.kv_heads} K/V heads"
            )
        self.rotary = self._rotary()
        self.windows = self._windows()
        self.scale: str | float = "sqrt_dk"
        if kind.query_scalar:
            self.scale = ckpt.number("query_pre_attn_scalar", float(self.head_dim), low=0) ** -0.5
            cap = ckpt.config.get("attn_logit_softcapping")
            self.softcap = None if cap is None else ckpt.number("attn_logit_softcapping", 1.0, low=0)
        self.qk_norm, self.gated = kind.qk_norm, True

    @property
    def tied(self) -> bool:
        """Whether the output layer reuses the embeddings (``tie_word_embeddings``; by default Gemma's does)."""
        return self.checkpoint.flag("tie_word_embeddings", self.kind.gemma_norm)

    def check_heads(self) -> None:
        """Heads need not divide hidden_size here: ``head_dim`` is given or derived."""

    def _rope_settings(self) -> dict[str, Any]:
        """The rotary settings as config.json holds them: ``rope_parameters`` (transformers 5), or the older
        top-level ``rope_theta`` with a ``rope_scaling`` object."""
        ckpt = self.checkpoint
        found = ckpt.mapping("rope_parameters")
        if found is None:
            found = {"rope_theta": ckpt.number("rope_theta", 10000.0, low=1), **(ckpt.mapping("rope_scaling") or {})}
        return dict(found)

    def _rotary(self) -> Rotary:
        where = self.checkpoint.path / CONFIG
        settings = self._rope_settings()
        kind = settings.get("rope_type", settings.get("type", "default"))
        if kind not in ROPE_TYPES:
            raise ModelError(f"{where}: rope_type {kind!r} is not supported; attnx runs {', '.join(ROPE_TYPES)}")
        fraction = settings.get("partial_rotary_factor", self.checkpoint.config.get("partial_rotary_factor", 1.0))
        try:
            scaling = None
            if kind != "default":
                scaling = RopeScaling(
                    kind,
                    settings.get("factor", 0.0),  # each checked by RopeScaling
                    settings.get("low_freq_factor", 1.0),
                    settings.get("high_freq_factor", 4.0),
                    settings.get("original_max_position_embeddings", 8192),
                )
            return Rotary(theta=settings.get("rope_theta", 10000.0), fraction=fraction, scaling=scaling)
        except ConfigError as exc:
            raise ModelError(f"{where}: {exc}") from None

    def _windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window (None: the layer sees every earlier token)."""
        ckpt, where = self.checkpoint, self.checkpoint.path / CONFIG
        size = ckpt.config.get("sliding_window")
        if size is None:
            return (None,) * self.layers
        size = ckpt.integer("sliding_window")
        types = ckpt.config.get("layer_types")
        if types is not None:
            if not isinstance(types, list) or len(types) != self.layers:
                raise ModelError(f"{where}: layer_types must list one type per layer ({self.layers})")
            unknown = sorted({str(t) for t in types} - {"sliding_attention", "full_attention"})
            if unknown:
                raise ModelError(f"{where}: layer_types {unknown[0]!r} is not supported (sliding or full attention)")
            return tuple(size if t == "sliding_attention" else None for t in types)
        rule = self.kind.sliding
        if rule == "upper" and not ckpt.flag("use_sliding_window", False):
            rule = "none"
        first = ckpt.integer("max_window_layers", default=self.layers) if rule == "upper" else 0
        slides: Callable[[int], bool] = {
            "none": lambda i: False,
            "all": lambda i: True,
            "alternate": lambda i: i % 2 == 0,
            "upper": lambda i: i >= first,
        }[rule]
        return tuple(size if slides(i) else None for i in range(self.layers))

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:
        """The RMSNorm ``name`` (its weight's name without ``.weight``) of ``x`` (over its last axis)."""
        return rms_norm(x, self.weight(f"{name}.weight", shape=(x.shape[-1],)), self.eps, offset=self.kind.gemma_norm)

    def linear(self, name: str, width: int, reads: int) -> Linear:
        """A torch Linear (``[out, in]`` = ``[width, reads]``) as attnx's ``x @ W + b``, its bias only where the
        checkpoint has one."""
        held = self.checkpoint.has(f"{name}.bias")
        bias = self.checkpoint.tensor(f"{name}.bias", shape=(width,)) if held else None
        return Linear.of(self.checkpoint.tensor(f"{name}.weight", shape=(width, reads)).T, bias)

    def project(self, x: np.ndarray, name: str, width: int) -> np.ndarray:
        """``x @ weight.T (+ bias)`` in the working dtype (weight ``[width, x's width]``)."""
        bias = self.weight(f"{name}.bias", shape=(width,)) if self.checkpoint.has(f"{name}.bias") else None
        return dense(x, self.weight(f"{name}.weight", shape=(width, x.shape[-1])).T, bias)

    def embed(self, encoded: Encoded) -> np.ndarray:
        """The token embeddings, ``[token, d_model]`` (Gemma: times √hidden, rounded to the working dtype)."""
        words = self.checkpoint.rows("embed_tokens.weight", encoded.ids, (self.vocab_size, self.d_model))
        words = words.astype(self.dtype)
        if self.kind.gemma_norm:
            words *= np.asarray(math.sqrt(self.d_model), dtype=self.dtype)
        return words

    def attention_spec(self, layer: int, stream: np.ndarray, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """Causal self-attention on the normed stream with the layer's window, the family's scale, soft cap,
        rotary positions and (Qwen 3) head norms."""
        p = f"layers.{layer}."
        x = self.norm(stream, p + "input_layernorm")
        hd = self.head_dim
        q_norm, k_norm = (
            HeadNorm.of(self.checkpoint.tensor(f"{p}self_attn.{name}.weight", shape=(hd,)), self.eps)
            if self.kind.qk_norm
            else None
            for name in ("q_norm", "k_norm")
        )
        d, q_width, kv_width = self.d_model, self.heads * hd, self.kv_heads * hd
        w_q, w_k, w_v = (self.linear(f"{p}self_attn.{name}", width, d) for name, width in
                         (("q_proj", q_width), ("k_proj", kv_width), ("v_proj", kv_width)))  # fmt: skip
        w_o = self.linear(f"{p}self_attn.o_proj", d, q_width)
        return AttentionSpec.build(
            heads=self.heads, kv_heads=self.kv_heads, tokens=tokens, key_tokens=tokens, source=source, x=x,
            w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, q_norm=q_norm, k_norm=k_norm, causal=True, scale=self.scale,
            rotary=self.rotary, window=self.windows[layer], softcap=self.softcap,
        )  # fmt: skip

    def after_attention(self, layer: int, stream: np.ndarray, projected: np.ndarray) -> np.ndarray:
        """The residual add (Gemma 2: of the normed attention output), then h + MLP(RMSNorm(h)) (Gemma 2: normed)."""
        p = f"layers.{layer}."
        attended = projected.astype(self.dtype)
        if self.kind.sandwich:
            h = stream + self.norm(attended, p + "post_attention_layernorm")
            inner = self.mlp(self.norm(h, p + "pre_feedforward_layernorm"), p)
            return h + self.norm(inner, p + "post_feedforward_layernorm")
        h = stream + attended
        return h + self.mlp(self.norm(h, p + "post_attention_layernorm"), p)

    def mlp(self, x: np.ndarray, p: str) -> np.ndarray:
        """The gated MLP: down(act(gate(x)) * up(x))."""
        gate, up = self.project(x, p + "mlp.gate_proj", self.d_ff), self.project(x, p + "mlp.up_proj", self.d_ff)
        return self.project(self.act(gate) * up, p + "mlp.down_proj", self.d_model)  # (N, d_ff) -> (N, d_model)

    def final(self, stream: np.ndarray) -> np.ndarray:
        """The final RMSNorm (``norm``) of the stream leaving the last layer."""
        return self.norm(stream, "norm")

    @property
    def has_lm_head(self) -> bool:
        """Tied embeddings, or an ``lm_head.weight`` beside the model's tensors."""
        return self.tied or self.checkpoint.has(LM_HEAD, prefixed=False)

    @functools.cached_property
    def output_table(self) -> np.ndarray:
        """The tied embeddings, or ``lm_head`` beside the model's tensors."""
        shape = (self.vocab_size, self.d_model)
        if self.tied:
            return self.weight("embed_tokens.weight", shape=shape)
        return self.weight(LM_HEAD, shape=shape, prefixed=False)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """``hidden @ W.T`` (``output_table``), soft-capped by ``final_logit_softcapping`` where config.json sets
        it (Gemma 2)."""
        logits = super().logits(hidden)
        if self.checkpoint.config.get("final_logit_softcapping") is not None:
            cap = np.asarray(self.checkpoint.number("final_logit_softcapping", 1.0, low=0), dtype=logits.dtype)
            logits = cap * np.tanh(logits / cap)
        return logits

    def is_buffer(self, name: str) -> bool:
        """Older checkpoints store each layer's rotary frequencies (``rotary_emb.inv_freq``)."""
        return name.endswith("inv_freq") or super().is_buffer(name)
