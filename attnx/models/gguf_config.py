"""A GGUF file's ``{arch}.*`` metadata read as the config.json of the family that runs it, every key accounted for.

llama.cpp's converter writes a model's settings under its own names (``llama.attention.head_count``); each builder
here reads them into Hugging Face's (``num_attention_heads``), remembers where each came from (for messages), and
sets what llama.cpp decides without a key (Gemma's attention scale by model size, Qwen 3 MoE's renormalised
top-k) as llama.cpp does. A ``{arch}.*`` key no builder reads is a ModelError naming it: it could change what the
model computes. Settings llama.cpp stores as tensors (Llama 3's ``rope_freqs``, Phi-3's ``rope_factors_long`` and
``rope_factors_short``) are read here too, through ``read``, and left out of the tensors the family sees.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnx.core.positions import RopeScaling, plain_frequencies
from attnx.errors import ModelError
from attnx.models.gguf_file import Strings

Read = Callable[[str], np.ndarray]  # a tensor of the file by its GGUF name, dequantized, float32
LLAMA3 = (1.0, 4.0, 8192)  # low_freq_factor, high_freq_factor, original context: every Llama 3.x release's
GEMMA_LARGE = {"gemma2": 46, "gemma3": 62}  # layers of the 27B models, which llama.cpp scales by hidden / heads
GEMMA3_PATTERN = 6  # llama.cpp's Gemma 3: five sliding layers, then a full one
FULL, SLIDING = "full_attention", "sliding_attention"
BLOCK = re.compile(r"blk\.(\d{1,19})\.")  # a layer's tensor: blk.N.…

HARMLESS = frozenset({"rope.scaling.finetuned"})  # {arch}.* keys that change nothing attnx computes


@dataclass
class Metadata:
    """A GGUF file's ``{arch}.*`` keys, read with their types checked; ``origin`` maps each Hugging Face key set to
    the GGUF key it came from, ``read`` lists the GGUF keys read."""

    values: Mapping[str, Any]
    arch: str
    path: Path
    origin: dict[str, str] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)

    def key(self, suffix: str) -> str:
        """``llama.attention.head_count`` for ``attention.head_count``."""
        return f"{self.arch}.{suffix}"

    def get(self, suffix: str, kinds: tuple[type, ...], expected: str, hf: str | None = None) -> Any:
        """The value of ``{arch}.{suffix}`` (None: absent) when it is one of ``kinds``; ``hf``: the config key it
        becomes, remembered for messages."""
        key = self.key(suffix)
        self.read.add(key)
        if hf is not None:
            self.origin[hf] = key
        value = self.values.get(key)
        if value is None:
            return None
        if object not in kinds and ((isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds)):
            raise ModelError(f"{self.path}: {key} must be {expected}, got {value!r:.60}")
        return value

    def whole(self, suffix: str, hf: str | None = None) -> int | None:
        """A whole number (a per-layer list of one repeated number counts as it)."""
        value = self.get(suffix, (int, list), "a whole number", hf)
        if isinstance(value, list):
            if not value or any(isinstance(v, bool) or not isinstance(v, int) or v != value[0] for v in value):
                raise ModelError(f"{self.path}: {self.key(suffix)} differs between layers ({value!r:.60}); attnx "
                                 "runs layers of one shape")  # fmt: skip
            return int(value[0])
        return value

    def number(self, suffix: str, hf: str | None = None) -> float | None:
        """A real number."""
        value = self.get(suffix, (int, float), "a number", hf)
        if value is not None and not math.isfinite(value):
            raise ModelError(f"{self.path}: {self.key(suffix)} must be a finite number, got {value!r}")
        return None if value is None else float(value)

    def need(self, suffix: str, hf: str) -> int:
        """A whole number the model cannot do without."""
        value = self.whole(suffix, hf)
        if value is None:
            raise ModelError(f"{self.path}: {self.key(suffix)} is missing")
        return value

    def real(self, suffix: str, hf: str) -> float:
        """A real number the model cannot do without."""
        value = self.number(suffix, hf)
        if value is None:
            raise ModelError(f"{self.path}: {self.key(suffix)} is missing")
        return value

    def neutral(self, suffix: str, value: object, reason: str) -> None:
        """``{arch}.{suffix}`` must be absent or ``value``: anything else is refused with ``reason``."""
        found = self.get(suffix, (object,), "")
        if found is not None and found != value:
            raise ModelError(f"{self.path}: {self.key(suffix)} is {found!r:.40}; {reason}")

    def unread(self) -> None:
        """Refuse a ``{arch}.*`` key that was not read and is not ``HARMLESS``."""
        for key in sorted(self.values):
            if key.startswith(self.arch + ".") and key not in self.read and key[len(self.arch) + 1 :] not in HARMLESS:
                raise ModelError(f"{self.path}: {key} is a setting attnx does not read for {self.arch}, and it may "
                                 "change what the model computes")  # fmt: skip


@dataclass(frozen=True)
class Built:
    """A config dict, where each key came from, and the GGUF tensors read into it (not the family's)."""

    config: dict[str, Any]
    origin: dict[str, str]
    consumed: dict[str, str]  # GGUF tensor name -> what it was read as


def block_count(meta: Metadata, tensors: Mapping[str, Any], hf: str) -> int:
    """``{arch}.block_count`` (read as ``hf``), refused where the file holds fewer blocks (the distinct N of its
    ``blk.N.…`` tensors): a builder makes a list per layer (Gemma 3's layer types, Qwen MoE's dense layers)."""
    layers = meta.need("block_count", hf)
    held = len({match[1] for name in tensors if (match := BLOCK.match(name))})
    if layers > held:
        raise ModelError(f"{meta.path}: {meta.key('block_count')} claims {layers:,} layers, but the file holds {held} "
                         "(blk.N.…)")  # fmt: skip
    return layers


def decoder(meta: Metadata, model_type: str, tensors: Mapping[str, Any], *, experts: bool = False) -> dict[str, Any]:
    """The settings every Llama-line decoder has: sizes, heads, head width, eps, context, RoPE base, ties (and no
    experts unless ``experts``: their keys are read elsewhere)."""
    hidden = meta.need("embedding_length", "hidden_size")
    heads = meta.need("attention.head_count", "num_attention_heads")
    config: dict[str, Any] = {
        "model_type": model_type, "num_hidden_layers": block_count(meta, tensors, "num_hidden_layers"),
        "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": meta.whole("attention.head_count_kv", "num_key_value_heads") or heads,
        "intermediate_size": meta.whole("feed_forward_length", "intermediate_size"),
        "max_position_embeddings": meta.whole("context_length", "max_position_embeddings"),
        "rms_norm_eps": meta.real("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
        "rope_theta": meta.number("rope.freq_base", "rope_theta") or 10000.0,
        "tie_word_embeddings": "output.weight" not in tensors,
    }  # fmt: skip
    head_dim = meta.whole("attention.key_length", "head_dim") or hidden // heads
    if meta.whole("attention.value_length") not in (None, head_dim):
        raise ModelError(f"{meta.path}: {meta.key('attention.value_length')} differs from the key length {head_dim}: "
                         "attnx runs heads whose values are as wide as their keys")  # fmt: skip
    config["head_dim"] = head_dim
    rotated = meta.whole("rope.dimension_count", "partial_rotary_factor") or head_dim
    if rotated != head_dim:
        config["partial_rotary_factor"] = rotated / head_dim
    meta.neutral("attention.causal", True, "attnx runs causal decoders")
    if not experts:
        meta.neutral("expert_count", 0, f"{model_type} has no experts")
        meta.neutral("expert_used_count", 0, f"{model_type} has no experts")
    config["rope_scaling"] = rope_scaling(meta)
    return {key: value for key, value in config.items() if value is not None}


def rope_scaling(meta: Metadata) -> dict[str, Any] | None:
    """``{arch}.rope.scaling.*`` as a rope object: none, ``linear`` or ``yarn`` (another type is refused; Phi-3's
    ``longrope`` is read by ``phi3``). Every ``rope.scaling`` key is read, and one that would change the angles
    beyond transformers' reading is refused."""
    kind = meta.get("rope.scaling.type", (str,), "a string", "rope_scaling")
    factor, context = meta.number("rope.scaling.factor"), meta.whole("rope.scaling.original_context_length")
    names = ("yarn_ext_factor", "yarn_attn_factor", "yarn_log_multiplier", "yarn_beta_fast", "yarn_beta_slow")
    extra = {suffix: meta.number(f"rope.scaling.{suffix}") for suffix in names}
    if meta.arch != "phi3":
        meta.neutral("rope.scaling.attn_factor", 1.0, "attnx does not scale the rotary angles' cos and sin here")
    for suffix, neutral in (("yarn_attn_factor", 1.0), ("yarn_log_multiplier", 0.0)):
        if extra[suffix] not in (None, neutral):
            raise ModelError(f"{meta.path}: {meta.key('rope.scaling.' + suffix)} is {extra[suffix]:g}, which "
                             "transformers' yarn has no setting for")  # fmt: skip
    mixing = extra["yarn_ext_factor"]
    if mixing is not None and mixing >= 0 and mixing != 1.0:  # negative: llama.cpp's "use the default", 1
        raise ModelError(f"{meta.path}: {meta.key('rope.scaling.yarn_ext_factor')} is {mixing:g}; transformers' yarn "
                         "mixes with a factor of 1")  # fmt: skip
    if kind == "longrope" and meta.arch == "phi3":  # its factors are tensors: ``phi3`` reads them
        return {"rope_type": "longrope"}
    if kind in (None, "none"):
        if factor not in (None, 1.0):
            raise ModelError(f"{meta.path}: {meta.key('rope.scaling.factor')} is {factor:g} with no scaling type")
        return None
    if kind not in ("linear", "yarn"):
        raise ModelError(f"{meta.path}: {meta.key('rope.scaling.type')} {kind!r} is not supported (none, linear, yarn)")
    if factor is None:
        raise ModelError(f"{meta.path}: {meta.key('rope.scaling.factor')} is missing for rope scaling {kind!r}")
    if kind == "linear":
        return {"rope_type": "linear", "factor": factor}
    scaling: dict[str, Any] = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": context}
    for suffix, key in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
        if extra[suffix] is not None:
            scaling[key] = extra[suffix]
    return scaling


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


def llama(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """Llama, Mistral (llama.cpp writes it as Llama) and Mixtral (a Llama with ``expert_count`` experts)."""
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


def moe(meta: Metadata, model_type: str, tensors: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen 2 MoE and Qwen 3 MoE: experts, top-k, widths, renormalisation as llama.cpp does it (Qwen 3 MoE always,
    Qwen 2 MoE never, unless ``expert_weights_norm`` says), and dense layers where a layer has no router."""
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


def gemma(meta: Metadata, model_type: str, tensors: Mapping[str, Any]) -> dict[str, Any]:
    """Gemma, Gemma 2 and Gemma 3: the decoder's keys, and for 2 and 3 the window, the caps and the attention
    scale: llama.cpp's rule, 1/√head_dim, but 1/√(hidden / heads) for the 27B models (by their layer count)."""
    config = decoder(meta, model_type, tensors)
    if model_type == "gemma":
        return config
    arch = meta.arch
    large = config["num_hidden_layers"] == GEMMA_LARGE[arch]
    width = config["hidden_size"] // config["num_attention_heads"]
    config["query_pre_attn_scalar"] = width if large else config["head_dim"]
    config["sliding_window"] = meta.whole("attention.sliding_window", "sliding_window") or 4096
    final = meta.number("final_logit_softcapping", "final_logit_softcapping")
    if arch == "gemma2":
        attn = meta.number("attn_logit_softcapping", "attn_logit_softcapping")
        config["attn_logit_softcapping"] = 50.0 if attn is None else attn  # llama.cpp's defaults where absent
        config["final_logit_softcapping"] = 30.0 if final is None else final
        return config
    config["final_logit_softcapping"] = final
    config["layer_types"] = gemma3_layers(meta, config["num_hidden_layers"])
    full = {"rope_type": "default", "rope_theta": meta.number("rope.freq_base") or 1_000_000.0}
    full.update(config.pop("rope_scaling", None) or {})  # llama.cpp scales the full layers only
    local = {"rope_type": "default", "rope_theta": meta.number("rope.freq_base_swa", "rope_local_base_freq") or 10000.0}
    config["rope_parameters"] = {FULL: full, SLIDING: local}
    del config["rope_theta"]
    return {key: value for key, value in config.items() if value is not None}


def gemma3_layers(meta: Metadata, layers: int) -> list[str]:
    """Gemma 3's layer types: ``attention.sliding_window_pattern`` (a period, or one true per sliding layer), else
    llama.cpp's period of 6."""
    pattern = meta.get("attention.sliding_window_pattern", (int, list), "a whole number or a list", "layer_types")
    if isinstance(pattern, list):
        if len(pattern) != layers or not all(isinstance(flag, bool) for flag in pattern):
            raise ModelError(f"{meta.path}: {meta.key('attention.sliding_window_pattern')} must hold true or false "
                             f"for each of the {layers} layers")  # fmt: skip
        return [SLIDING if flag else FULL for flag in pattern]
    period = GEMMA3_PATTERN if pattern is None else pattern
    if isinstance(period, bool) or period < 1:
        raise ModelError(f"{meta.path}: {meta.key('attention.sliding_window_pattern')} must be positive")
    return [FULL if (layer + 1) % period == 0 else SLIDING for layer in range(layers)]


def phi3(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """Phi-3: partial rotary from ``rope.dimension_count``, its window (0: none), and longrope from the
    ``rope_factors_long`` and ``rope_factors_short`` tensors with ``rope.scaling.attn_factor``."""
    config = decoder(meta, "phi3", tensors)
    context = meta.whole("rope.scaling.original_context_length", "original_max_position_embeddings")
    if context is not None:
        config["original_max_position_embeddings"] = context
    config["sliding_window"] = meta.whole("attention.sliding_window", "sliding_window") or None
    attention = meta.number("rope.scaling.attn_factor")
    names = ("rope_factors_short.weight", "rope_factors_long.weight")
    if not any(name in tensors for name in names):
        if config.get("rope_scaling") is not None or attention not in (None, 1.0):
            raise ModelError(f"{meta.path}: {meta.key('rope.scaling.type')} is set, but the file has no longrope "
                             "factors (rope_factors_short, rope_factors_long)")  # fmt: skip
        return {k: v for k, v in config.items() if v is not None}, {}
    if not all(name in tensors for name in names):
        raise ModelError(f"{meta.path}: holds one of {' and '.join(names)} without the other")
    if config.get("rope_scaling") not in (None, {"rope_type": "longrope"}):
        raise ModelError(f"{meta.path}: longrope factors beside {meta.key('rope.scaling.type')} "
                         f"{config['rope_scaling'].get('rope_type')!r}")  # fmt: skip
    short, long = (read(name).ravel().astype(float).tolist() for name in names)
    config["rope_scaling"] = {"rope_type": "longrope", "short_factor": short, "long_factor": long}
    if attention is not None:
        config["rope_scaling"]["attention_factor"] = attention
    return {k: v for k, v in config.items() if v is not None}, {name: "the rope scaling (longrope factors)"
                                                                 for name in names}  # fmt: skip


def gpt2(meta: Metadata, tensors: Mapping[str, Any]) -> dict[str, Any]:
    """GPT-2's sizes under its own names; llama.cpp's GELU is the tanh approximation (``gelu_new``)."""
    config = {
        "model_type": "gpt2", "n_layer": block_count(meta, tensors, "n_layer"),
        "n_head": meta.need("attention.head_count", "n_head"), "n_embd": meta.need("embedding_length", "n_embd"),
        "n_inner": meta.whole("feed_forward_length", "n_inner"),
        "n_positions": meta.whole("context_length", "n_positions"),
        "layer_norm_epsilon": meta.number("attention.layer_norm_epsilon", "layer_norm_epsilon"),
        "activation_function": "gelu_new",
    }  # fmt: skip
    meta.neutral("attention.causal", True, "attnx runs GPT-2 as a causal decoder")
    return {key: value for key, value in config.items() if value is not None}


SUPPORTED = ("llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gemma", "gemma2", "gemma3", "phi3", "gpt2")


def build_config(metadata: Mapping[str, Any], tensors: Mapping[str, Any], read: Read, path: Path) -> Built:
    """The config dict of the family that runs the GGUF file at ``path`` (its ``metadata`` and tensor names), with
    ``vocab_size`` from ``{arch}.vocab_size``, else the tokenizer's token count."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in SUPPORTED:
        raise ModelError(f"{path}: general.architecture {arch!r:.40} is not supported; attnx reads GGUF files of "
                         f"{', '.join(SUPPORTED)}")  # fmt: skip
    meta = Metadata(metadata, arch, path)
    consumed: dict[str, str] = {}
    if arch == "llama":
        config, consumed = llama(meta, tensors, read)
    elif arch == "phi3":
        config, consumed = phi3(meta, tensors, read)
    elif arch == "gpt2":
        config = gpt2(meta, tensors)
    elif arch.startswith("gemma"):
        config = gemma(meta, "gemma3_text" if arch == "gemma3" else arch, tensors)
    elif arch.endswith("moe"):
        config = moe(meta, arch.replace("moe", "_moe"), tensors)
    else:
        config = decoder(meta, arch, tensors)
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = meta.whole("vocab_size", "vocab_size") or (len(tokens) if isinstance(tokens, (list, Strings)) else None)
    if vocab is not None:
        config["vocab_size"] = vocab
    meta.unread()
    return Built(config, meta.origin, consumed)
