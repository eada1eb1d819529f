"""The pre-norm causal decoder of the Llama line, whose documented hooks each family sets in one module of families/.

Per layer, as Llama does it: h += o_proj(attention(RMSNorm(h))); h += down(act(gate(x)) * up(x)) with
x = RMSNorm(h). Rotary positions, grouped K/V heads, QK-norm, sliding windows and soft-capped scores are
settings of the attention spec, so the engines apply them: the layer's spec is its input x with W_q, W_k,
W_v and W_o, not pre-rotated Q and K.

What a family changes, it changes through these hooks (Llama's behaviour is each one's default):

==========================  ===============================================================================
hook                        decides (default)
==========================  ===============================================================================
``projections(layer)``      the layer's W_q, W_k, W_v, W_o as ``Linear`` (``self_attn.{q,k,v,o}_proj``, a bias
                            where one is held); a fused tensor is split here (``fused``)
``norms``                   which norms sit where: before/after attention, before/after the MLP, final
                            (``input_layernorm`` before attention, ``post_attention_layernorm`` before the MLP)
``norm(x, name)``           what a norm computes (RMSNorm; ``norm_offset``: × (1 + w), Gemma)
``qk_norm_over``            QK-norm: ``none``, ``head`` (RMSNorm on each head's q and k before RoPE, Qwen 3) or
                            ``projection`` (on the whole q and k projections, before the head split, OLMo 2) (none)
``parallel_residual``       x + attn(ln1 x) + mlp(ln2 x), GPT-NeoX's form, instead of one after the other (False)
``mlp(layer, x)``           the MLP (gated: down(act(gate(x)) * up(x))); plain or routed MLPs override it
``layer_types()``           each layer's attention, full or sliding, from ``layer_types`` or the rule ``sliding``
``rotary_of(layer)``        the layer's rotary positions (its layer type's, from ``flat_rope`` and the rope
                            object; None: a layer without positions)
``rope_mapping(mapping)``   a rope object as the family's transformers config rewrites it before reading it
                            (Phi-3: a legacy ``su`` or ``yarn`` type is ``longrope``) (as config.json has it)
``sink_logits(layer)``      a learned logit per head that joins each row's softmax as a key without a value
                            (gpt-oss's ``self_attn.sinks``) (None: none)
``embed_scale()``           what the embeddings are multiplied by (None: nothing; Gemma: √hidden)
``read_config()``           the rest read from config.json: ``scale``, ``softcap``, ``final_softcap``
==========================  ===============================================================================

Each hook that reads tensors has a twin that names them (``attention_tensors``, ``mlp_tensors``,
``norm_tensors``): together they are ``tensor_names``, and a tensor of the checkpoint outside them is refused
(``Architecture.check_tensors``). A config key in ``SEMANTIC_KEYS`` that the family does not name in ``reads``
is refused when it is set: it would change what the model computes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np

from attnx.core.inputs import HeadNorm
from attnx.core.positions import Rotary
from attnx.core.spec import AttentionSpec, Linear
from attnx.engines.arrays import Array, arrays_of, host
from attnx.errors import ConfigError, ModelError
from attnx.models.architecture import Architecture, WeightRef, weights_and_biases
from attnx.models.gguf_form import GgufForm
from attnx.models.nn import dense
from attnx.models.rope import FULL, LAYER_TYPES, SLIDING, rope_mappings
from attnx.models.tokenize import Encoded

LM_HEAD = "lm_head.weight"  # beside the model's tensors (outside the ``model.`` prefix) when not tied
QK_NORMS = ("none", "head", "projection")
SLIDING_RULES = ("none", "all", "alternate", "upper")

# Config keys that change what a decoder computes, each with the value that changes nothing. A family reads those
# it names in ``reads``; any other set to something else is a ModelError: attnx never runs a model without it.
SEMANTIC_KEYS: dict[str, object] = {
    "sliding_window": None,
    "use_sliding_window": False,
    "sliding_window_pattern": None,
    "rope_local_base_freq": None,
    "no_rope_layers": None,
    "rotary_pct": None,
    "rotary_emb_base": None,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "query_pre_attn_scalar": None,
    "use_bidirectional_attention": False,
    "attention_chunk_size": None,
    "use_parallel_residual": False,
    "qk_layernorm": False,
    "use_qk_norm": False,
    "attention_multiplier": None,
    "embedding_multiplier": None,
    "residual_multiplier": None,
    "logits_scaling": None,
    "quantization_config": None,
    "num_local_experts": None,
    "num_experts": None,
}


@dataclass(frozen=True)
class Norms:
    """Which norms a decoder layer has and where: each the name of its weight under the layer, without ``.weight``
    (None: no norm there), and the final norm's under the model."""

    before_attention: str | None = "input_layernorm"
    after_attention: str | None = None
    before_mlp: str | None = "post_attention_layernorm"
    after_mlp: str | None = None
    final: str = "norm"

    def within(self) -> tuple[str, ...]:
        """The names of the norms inside each layer."""
        return tuple(n for n in (self.before_attention, self.after_attention, self.before_mlp, self.after_mlp) if n)


@dataclass(frozen=True)
class Row:
    """A family that differs from a decoder only in how config.json's values are read: a row of a table.

    ``sliding``: which layers slide when config.json has no ``layer_types`` (``none``; ``all``; ``alternate``:
    0, 2, 4, …; ``upper``: from ``max_window_layers`` on, when ``use_sliding_window``); ``window``: the
    window where ``sliding_window`` is absent (transformers' default); ``reads``: the ``SEMANTIC_KEYS`` it reads;
    ``gguf``: how it reads a GGUF file (``GgufForm``; None: it does not).
    """

    model_type: str
    title: str
    stems: tuple[str, ...]
    sliding: str = "none"
    window: int | None = None
    reads: tuple[str, ...] = ()
    gguf: GgufForm | None = None


def rms_norm(x: Array, weight: np.ndarray, eps: float) -> Array:
    """``x / sqrt(mean(x²) + eps) * weight`` over the last axis, in ``x``'s dtype."""
    xp = arrays_of(x)
    return x / xp.sqrt(xp.mean(x * x) + eps) * xp.like(weight)


class Decoder(Architecture):
    """A Llama-style causal decoder whose hooks (see the module's docstring) a family overrides; a family sets
    ``name`` (its ``model_type``), ``family`` (its title) and ``stems`` (its transformers class names' stems)."""

    design = "pre-RMSNorm causal decoder"
    prefixes: ClassVar[tuple[str, ...]] = ("model.", "transformer.", "")  # transformer.: Llama's, Qwen's, … QA classes
    probe = "embed_tokens.weight"
    causal = True
    outside = (LM_HEAD,)
    layer_stem = "layers."

    norms: ClassVar[Norms] = Norms()
    norm_offset: ClassVar[bool] = False
    qk_norm_over: ClassVar[str] = "none"
    sliding: ClassVar[str] = "none"
    window_default: ClassVar[int | None] = None
    reads: ClassVar[frozenset[str]] = frozenset()
    partial_rotary: ClassVar[bool] = False  # whether partial_rotary_factor is read (else it must be 1)
    default_theta: ClassVar[float] = 10000.0
    local_rope: ClassVar[tuple[str, float] | None] = None  # a flat config's key for the sliding layers' base
    ties_by_default: ClassVar[bool] = False
    activation_key: ClassVar[str] = "hidden_act"
    activation_default: ClassVar[str] = "silu"
    activation_aliases: ClassVar[tuple[tuple[str, str], ...]] = ()  # (as config.json names it, what runs)

    parallel_residual = False
    scale: str | float = "sqrt_dk"
    final_softcap: float | None = None

    def __init_subclass__(cls, **options: Any) -> None:
        """Check a family's ``sliding`` and ``qk_norm_over`` as it is defined: a misspelt one fails on import."""
        super().__init_subclass__(**options)
        for name, allowed in (("sliding", SLIDING_RULES), ("qk_norm_over", QK_NORMS)):
            if getattr(cls, name) not in allowed:
                raise TypeError(
                    f"{cls.__name__}.{name} must be one of {', '.join(allowed)}, got {getattr(cls, name)!r}"
                )

    @classmethod
    def of(cls, row: Row) -> type[Decoder]:
        """The family of ``row``: this decoder, reading config.json as the row says."""
        attributes = {"name": row.model_type, "family": row.title, "stems": row.stems, "sliding": row.sliding,
                      "window_default": row.window, "reads": frozenset(row.reads), "gguf": row.gguf}  # fmt: skip
        return type(f"{cls.__name__}[{row.model_type}]", (cls,), attributes)

    def read_config(self) -> None:
        """Sizes, layer types, windows, rotary positions per layer and the norms' eps from config.json; a key that
        would change the model and that the family does not read is a ModelError."""
        ckpt, where = self.checkpoint, self.checkpoint.config_path
        own = {"kv_heads": ("num_key_value_heads",), "head_dim": ("head_dim",)}  # beside the usual names
        self.read_sizes(own, mlp_ratio=None, max_length=2048)
        self.eps = ckpt.number("rms_norm_eps", 1e-6, low=0, high=1)
        self.act = self.activation(self.activation_key, self.activation_default, aliases=dict(self.activation_aliases))
        if self.heads % self.kv_heads:
            raise ModelError(f"{where}: {self.heads} attention heads cannot be shared among {self.kv_heads} K/V heads")
        self.types = self.layer_types()
        size = self.window_size()
        self.windows = tuple(size if kind == SLIDING else None for kind in self.types)
        self.by_type = self.read_rotaries()
        self.rotaries = tuple(self.rotary_of(layer) for layer in range(self.layers))
        self.rotary = next((rotary for rotary in self.rotaries if rotary is not None), None)
        self.qk_norm, self.gated = self.qk_norm_over != "none", True
        self.check_keys()

    def check_keys(self) -> None:
        """A key of ``SEMANTIC_KEYS`` set in config.json to a value that changes something, and not in ``reads``, is
        a ModelError naming it."""
        for key, neutral in SEMANTIC_KEYS.items():
            value = self.checkpoint.config.get(key)
            if key not in self.reads and value is not None and value != neutral:
                raise ModelError(
                    f"{self.checkpoint.config_path}: {key} {value!r:.40} is not read by {self.name} "
                    f"({self.family}), and it would change what the model computes"
                )

    @property
    def tied(self) -> bool:
        """Whether the output layer reuses the embeddings (``tie_word_embeddings``; the family's default)."""
        return self.checkpoint.flag("tie_word_embeddings", self.ties_by_default)

    def check_heads(self) -> None:
        """Heads need not divide hidden_size here: ``head_dim`` is given or derived."""

    # Layer types, windows and rotary positions.

    def listed_types(self) -> tuple[str, ...] | None:
        """config.json's ``layer_types`` (None: absent), each one attnx runs, one per layer."""
        where, listed = self.checkpoint.config_path, self.checkpoint.config.get("layer_types")
        if listed is None:
            return None
        if not isinstance(listed, list) or len(listed) != self.layers:
            raise ModelError(f"{where}: layer_types must list one type per layer ({self.layers})")
        unknown = sorted({str(t) for t in listed} - set(LAYER_TYPES))
        if unknown:
            raise ModelError(f"{where}: layer_types {unknown[0]!r} is not supported (sliding or full attention)")
        return tuple(listed)

    def window_size(self) -> int | None:
        """The sliding layers' window: ``sliding_window`` (absent: the family's default; null: none)."""
        ckpt = self.checkpoint
        if self.sliding == "none" or (self.sliding == "upper" and not ckpt.flag("use_sliding_window", False)):
            return None
        if "sliding_window" not in ckpt.config:
            return self.window_default
        return None if ckpt.config["sliding_window"] is None else ckpt.integer("sliding_window")

    def layer_types(self) -> tuple[str, ...]:
        """Hook: each layer's attention, ``full_attention`` or ``sliding_attention``.

        Families whose rule is ``alternate`` or ``upper`` read ``layer_types`` where config.json lists them, else
        the rule; for the others transformers ignores the key, so a list that disagrees with the rule is refused.
        """
        listed, sliding = self.listed_types(), self.window_size() is not None
        first = self.checkpoint.integer("max_window_layers", default=self.layers) if self.sliding == "upper" else 0
        slides = {
            "none": lambda i: False,
            "all": lambda i: sliding,
            "alternate": lambda i: sliding and i % 2 == 0,
            "upper": lambda i: sliding and i >= first,
        }[self.sliding]
        derived = tuple(SLIDING if slides(i) else FULL for i in range(self.layers))
        if listed is None or self.sliding in ("alternate", "upper"):
            return listed or derived
        if listed != derived:
            raise ModelError(
                f"{self.checkpoint.config_path}: layer_types disagrees with {self.family}'s layers "
                f"({'sliding' if sliding else 'full'} attention on each), and transformers ignores it there"
            )
        return derived

    def flat_rope(self) -> dict[str, Any]:
        """Hook: the top-level rope keys, in ``Rotary.from_config``'s names (``rope_theta``,
        ``partial_rotary_factor``, ``original_max_position_embeddings``), that the rope object may leave out: a
        family with its own names maps them here (GPT-NeoX: ``rotary_emb_base``, ``rotary_pct``)."""
        config = self.checkpoint.config
        return {key: config[key] for key in ("rope_theta", "partial_rotary_factor") if config.get(key) is not None}

    def read_rotaries(self) -> dict[str, Rotary]:
        """The rotary positions of each layer type the layers use."""
        where, flat = self.checkpoint.config_path, self.flat_rope()
        rotaries = {}
        for kind, mapping in rope_mappings(self.checkpoint, sorted(set(self.types)), self.local_rope).items():
            try:
                rotary = Rotary.from_config(
                    self.rope_mapping(mapping), head_dim=self.head_dim, max_position_embeddings=self.max_length,
                    rope_theta=flat.get("rope_theta", self.default_theta),
                    partial_rotary_factor=flat.get("partial_rotary_factor", 1.0),
                    original_max_position_embeddings=flat.get("original_max_position_embeddings"),
                )  # fmt: skip
            except ConfigError as exc:
                raise ModelError(f"{where}: {exc}") from None
            if rotary.fraction != 1 and not self.partial_rotary:
                raise ModelError(
                    f"{where}: partial_rotary_factor {rotary.fraction:g} is not read by {self.name} ({self.family}): "
                    "it turns every column of a head"
                )
            rotaries[kind] = rotary
        return rotaries

    def rope_mapping(self, mapping: Mapping[str, Any]) -> Mapping[str, Any]:
        """Hook: a layer type's rope object (``rope_mappings``) as the family's transformers config rewrites it
        before reading it; by default as config.json has it."""
        return mapping

    def rotary_of(self, layer: int) -> Rotary | None:
        """Hook: layer ``layer``'s rotary positions: its layer type's (None: a layer without positions)."""
        return self.by_type[self.types[layer]]

    # Tensors: names, norms and projections.

    def layer_prefix(self, layer: int) -> str:
        """Where layer ``layer``'s tensors are, under the model's prefix."""
        return f"{self.layer_stem}{layer}."

    def attention_prefix(self, layer: int) -> str:
        """Where layer ``layer``'s attention tensors are."""
        return f"{self.layer_prefix(layer)}self_attn."

    def tensor_names(self) -> Iterator[str]:
        """The embeddings, the final norm and every layer's tensors (``layer_tensors``)."""
        yield self.probe
        yield from self.norm_tensors(self.norms.final)
        for layer in range(self.layers):
            yield from self.layer_tensors(layer)

    def claimed_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """The embeddings, and layer 0's W_q, ``[heads × head_dim, d_model]`` (the heads and their width), where the
        file holds it: one that stores another layout is refused by ``check_tensors``, naming what it holds."""
        yield from super().claimed_shapes()
        name = f"{self.attention_prefix(0)}q_proj.weight"
        if self.checkpoint.has(name):
            yield name, (self.heads * self.head_dim, self.d_model)

    def layer_tensors(self, layer: int) -> Iterator[str]:
        """Layer ``layer``'s norms, attention and MLP tensors."""
        for name in self.norms.within():
            yield from self.norm_tensors(self.layer_prefix(layer) + name)
        yield from self.attention_tensors(layer)
        yield from self.mlp_tensors(layer)

    def norm_tensors(self, name: str) -> tuple[str, ...]:
        """The tensors of norm ``name`` (``norm``'s twin): its weight."""
        return (f"{name}.weight",)

    def norm(self, x: Array, name: str) -> Array:
        """Hook: norm ``name`` (its weight's name without ``.weight``) of ``x`` over its last axis: RMSNorm."""
        return rms_norm(x, self.norm_weight(name, x.shape[-1]), self.eps)

    def norm_weight(self, name: str, width: int) -> np.ndarray:
        """Norm ``name``'s weight in the working dtype, plus 1 under ``norm_offset`` (Gemma's (1 + w))."""
        weight = self.weight(f"{name}.weight", shape=(width,))
        return weight + np.asarray(1, dtype=self.dtype) if self.norm_offset else weight

    def normed(self, x: Array, layer: int, name: str | None) -> Array:
        """``x`` through layer ``layer``'s norm ``name`` (None: ``x`` as it is)."""
        return x if name is None else self.norm(x, self.layer_prefix(layer) + name)

    def linear(self, name: str, width: int, reads: int) -> Linear:
        """A torch Linear (``[out, in]`` = ``[width, reads]``) as attnx's ``x @ W + b``, its bias only where the
        checkpoint has one."""
        held = self.checkpoint.has(f"{name}.bias")
        bias = self.weight(f"{name}.bias", shape=(width,)) if held else None
        return Linear.of(self.weight(f"{name}.weight", shape=(width, reads)).T, bias)

    def fused(self, name: str, widths: Sequence[int], reads: int) -> list[Linear]:
        """A torch Linear whose output rows stack several maps (Phi-3's ``qkv_proj``: [q; k; v]) as one Linear per
        part, ``widths`` wide each, in order."""
        held = self.checkpoint.has(f"{name}.bias")
        weight = self.weight(f"{name}.weight", shape=(sum(widths), reads))
        bias = self.weight(f"{name}.bias", shape=(sum(widths),)) if held else None
        bounds = np.cumsum([0, *widths])
        return [Linear.of(weight[a:b].T, None if bias is None else bias[a:b]) for a, b in pairwise(bounds)]

    def project(self, x: Array, name: str, width: int) -> Array:
        """``x @ weight.T (+ bias)`` in the working dtype (weight ``[width, x's width]``)."""
        bias = self.weight(f"{name}.bias", shape=(width,)) if self.checkpoint.has(f"{name}.bias") else None
        return dense(x, self.weight(f"{name}.weight", shape=(width, x.shape[-1])).T, bias)

    def projections(self, layer: int) -> tuple[Linear, Linear, Linear, Linear]:
        """Hook: layer ``layer``'s W_q, W_k, W_v and W_o: the torch Linears ``q_proj``, ``k_proj``, ``v_proj`` and
        ``o_proj`` (a family with fused tensors splits them here, with ``fused``)."""
        p, d = self.attention_prefix(layer), self.d_model
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        w_q, w_k, w_v = (self.linear(p + name, width, d) for name, width in
                         (("q_proj", q_width), ("k_proj", kv_width), ("v_proj", kv_width)))  # fmt: skip
        return w_q, w_k, w_v, self.linear(p + "o_proj", d, q_width)

    def attention_tensors(self, layer: int) -> Iterator[str]:
        """The tensors of ``projections`` and ``qk_norms`` (their twin)."""
        p = self.attention_prefix(layer)
        yield from weights_and_biases(*(p + name for name in ("q_proj", "k_proj", "v_proj", "o_proj")))
        if self.qk_norm_over != "none":
            yield from (f"{p}q_norm.weight", f"{p}k_norm.weight")

    def qk_norms(self, layer: int) -> tuple[HeadNorm | None, HeadNorm | None]:
        """Hook: the norms of q and k before rotary positions, the RMSNorms ``q_norm`` and ``k_norm`` (× (1 + w) under
        ``norm_offset``): with ``qk_norm_over`` ``head`` on each head (d_k wide), with ``projection`` on the whole
        projections before the head split (heads × d_k and kv_heads × d_k wide); else none."""
        if self.qk_norm_over == "none":
            return None, None
        p, over = self.attention_prefix(layer), self.qk_norm_over
        heads, kv_heads = (self.heads, self.kv_heads) if over == "projection" else (1, 1)
        return (HeadNorm.of(self.norm_weight(p + "q_norm", heads * self.head_dim), self.eps, over),
                HeadNorm.of(self.norm_weight(p + "k_norm", kv_heads * self.head_dim), self.eps, over))  # fmt: skip

    def mlp(self, layer: int, x: Array) -> Array:
        """Hook: layer ``layer``'s MLP on ``x`` ``[token, d_model]``: gated, down(act(gate(x)) * up(x))."""
        p = self.layer_prefix(layer) + "mlp."
        gate, up = self.project(x, p + "gate_proj", self.d_ff), self.project(x, p + "up_proj", self.d_ff)
        return self.project(self.act(gate) * up, p + "down_proj", self.d_model)  # (N, d_ff) -> (N, d_model)

    def mlp_tensors(self, layer: int) -> Iterator[str]:
        """The tensors of ``mlp`` (its twin)."""
        p = self.layer_prefix(layer) + "mlp."
        return weights_and_biases(*(p + name for name in ("gate_proj", "up_proj", "down_proj")))

    def embed_scale(self) -> float | None:
        """Hook: what the token embeddings are multiplied by (None: nothing)."""
        return None

    # The forward pass.

    def embed(self, encoded: Encoded) -> np.ndarray:
        """The token embeddings, ``[token, d_model]``, times ``embed_scale`` (rounded to the working dtype)."""
        words = self.checkpoint.rows(self.probe, encoded.ids, (self.vocab_size, self.d_model)).astype(self.dtype)
        scale = self.embed_scale()
        if scale is not None:
            words *= np.asarray(scale, dtype=self.dtype)
        return words

    def attention_spec(self, layer: int, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """Causal self-attention on the layer's input (the stream, normed where ``norms`` says) with the layer's
        projections, head norms, rotary positions and window, and the family's scale and soft cap."""
        x = self.normed(stream, layer, self.norms.before_attention)
        w_q, w_k, w_v, w_o = self.checkpoint.remember(("projections", layer), lambda: self.projections(layer))
        q_norm, k_norm = self.checkpoint.remember(("qk_norms", layer), lambda: self.qk_norms(layer))
        return AttentionSpec.build(
            heads=self.heads, kv_heads=self.kv_heads, tokens=tokens, key_tokens=tokens, source=source, x=host(x),
            w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, q_norm=q_norm, k_norm=k_norm, scale=self.scale,
            causal=self.attention(layer).kind.causal, rotary=self.rotaries[layer], window=self.windows[layer],
            softcap=self.softcap,
            sink_logits=self.sink_logits(layer),
        )  # fmt: skip

    def sink_logits(self, layer: int) -> tuple[float, ...] | None:
        """Hook: layer ``layer``'s learned sink logit per head, which joins each row's softmax (None: no sinks)."""
        return None

    def after_attention(self, layer: int, stream: Array, projected: np.ndarray) -> Array:
        """The residual add of the attention's output (normed where ``norms.after_attention``), then of the MLP of
        the normed stream (``parallel_residual``: of the stream entering the layer), normed where
        ``norms.after_mlp``."""
        h = stream + self.normed(arrays_of(stream).like(projected), layer, self.norms.after_attention)
        inner = self.mlp(layer, self.normed(stream if self.parallel_residual else h, layer, self.norms.before_mlp))
        return h + self.normed(inner, layer, self.norms.after_mlp)

    def final(self, stream: Array) -> Array:
        """The final norm of the stream leaving the last layer."""
        return self.norm(stream, self.norms.final)

    @property
    def has_lm_head(self) -> bool:
        """Tied embeddings, or an ``lm_head.weight`` beside the model's tensors."""
        return self.tied or self.checkpoint.has(LM_HEAD, prefixed=False)

    def output_tensor(self) -> WeightRef:
        """The tied embeddings, or ``lm_head`` beside the model's tensors."""
        shape = (self.vocab_size, self.d_model)
        return WeightRef(self.probe, (), shape, True) if self.tied else WeightRef(LM_HEAD, (), shape, False)

    def shape_logits(self, logits: Array) -> Array:
        """``hidden @ W.T`` soft-capped by ``final_softcap`` where the family reads one."""
        if self.final_softcap is not None:
            cap = self.final_softcap  # a Python float keeps the logits' dtype
            logits = cap * arrays_of(logits).tanh(logits / cap)
        return logits

    def is_buffer(self, name: str) -> bool:
        """Older checkpoints store each layer's rotary frequencies (``rotary_emb.inv_freq``)."""
        return name.endswith("inv_freq") or super().is_buffer(name)
