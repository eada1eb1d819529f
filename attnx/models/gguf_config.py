"""A GGUF file's ``{arch}.*`` metadata read as the config.json of the family that runs it, every key accounted for.

llama.cpp's converter writes a model's settings under its own names (``llama.attention.head_count``); the family
whose ``GgufForm`` answers to ``general.architecture`` (attnx/models/gguf_form.py) reads them into Hugging Face's
(``num_attention_heads``) with ``Metadata`` (there too), which remembers where each came from (for messages); its
builder, in its own module, sets what llama.cpp decides without a key (Gemma's attention scale by model size, Qwen 3
MoE's renormalised top-k) as llama.cpp does, and ``decoder`` here reads what every decoder of the Llama line has. A
``{arch}.*`` key no builder reads is a ModelError naming it: it could change what the model computes. Settings
llama.cpp stores as tensors (Llama 3's ``rope_freqs``, Phi-3's ``rope_factors_long`` and ``rope_factors_short``) are
read by the builder too, through ``read``, and left out of the tensors the family sees.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnx.errors import ModelError
from attnx.models.gguf_file import Strings
from attnx.models.gguf_form import DECODER_WITHIN, GgufForm, Metadata, Read

BLOCK = re.compile(r"blk\.(\d{1,19})\.")  # a layer's tensor: blk.N.…


@dataclass(frozen=True)
class Built:
    """A config dict, where each key came from, the GGUF tensors read into it (not the family's), and the form of the
    family that runs it (its tensor names)."""

    config: dict[str, Any]
    origin: dict[str, str]
    consumed: dict[str, str]  # GGUF tensor name -> what it was read as
    form: GgufForm


def block_count(meta: Metadata, tensors: Mapping[str, Any], hf: str) -> int:
    """``{arch}.block_count`` (read as ``hf``), refused where the file holds fewer blocks (the distinct N of its
    ``blk.N.…`` tensors): a builder makes a list per layer (Gemma 3's layer types, Qwen MoE's dense layers)."""
    layers = meta.need("block_count", hf)
    held = len({match[1] for name in tensors if (match := BLOCK.match(name))})
    if layers > held:
        raise ModelError(f"{meta.path}: {meta.key('block_count')} claims {layers:,} layers, but the file holds {held} "
                         "(blk.N.…)")  # fmt: skip
    return layers


def decoder(
    meta: Metadata, model_type: str, tensors: Mapping[str, Any], *, experts: bool = False, longrope: bool = False
) -> dict[str, Any]:
    """The settings every Llama-line decoder has: sizes, heads, head width, eps, context, RoPE base, ties (and no
    experts unless ``experts``: their keys are read elsewhere); ``longrope``: as ``rope_scaling``."""
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
    config["rope_scaling"] = rope_scaling(meta, longrope=longrope)
    return {key: value for key, value in config.items() if value is not None}


def rope_scaling(meta: Metadata, *, longrope: bool = False) -> dict[str, Any] | None:
    """``{arch}.rope.scaling.*`` as a rope object: none, ``linear`` or ``yarn`` (another type is refused), or, for a
    family that reads ``longrope`` from tensors (``longrope``: Phi-3), that type, its factors left to the family's
    builder, which reads ``rope.scaling.attn_factor`` too. Every ``rope.scaling`` key is read, and one that would
    change the angles beyond transformers' reading is refused."""
    kind = meta.get("rope.scaling.type", (str,), "a string", "rope_scaling")
    factor, context = meta.number("rope.scaling.factor"), meta.whole("rope.scaling.original_context_length")
    names = ("yarn_ext_factor", "yarn_attn_factor", "yarn_log_multiplier", "yarn_beta_fast", "yarn_beta_slow")
    extra = {suffix: meta.number(f"rope.scaling.{suffix}") for suffix in names}
    if not longrope:
        meta.neutral("rope.scaling.attn_factor", 1.0, "attnx does not scale the rotary angles' cos and sin here")
    for suffix, neutral in (("yarn_attn_factor", 1.0), ("yarn_log_multiplier", 0.0)):
        if extra[suffix] not in (None, neutral):
            raise ModelError(f"{meta.path}: {meta.key('rope.scaling.' + suffix)} is {extra[suffix]:g}, which "
                             "transformers' yarn has no setting for")  # fmt: skip
    mixing = extra["yarn_ext_factor"]
    if mixing is not None and mixing >= 0 and mixing != 1.0:  # negative: llama.cpp's "use the default", 1
        raise ModelError(f"{meta.path}: {meta.key('rope.scaling.yarn_ext_factor')} is {mixing:g}; transformers' yarn "
                         "mixes with a factor of 1")  # fmt: skip
    if kind == "longrope" and longrope:  # its factors are tensors: the family's builder reads them
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


def answering(forms: Mapping[str, GgufForm]) -> dict[str, str]:
    """Each ``general.architecture`` the families' ``forms`` (by family name, in the registry's order) answer to,
    mapped to the family's name: the Llama line's first (their layers ``within`` ``model.layers.N.``)."""
    ordered = sorted(forms.items(), key=lambda item: item[1].within != DECODER_WITHIN)  # stable: registry order
    return {arch: name for name, form in ordered for arch in form.archs}


def build_config(
    metadata: Mapping[str, Any], tensors: Mapping[str, Any], read: Read, path: Path, forms: Mapping[str, GgufForm]
) -> Built:
    """The config dict of the family that runs the GGUF file at ``path`` (its ``metadata`` and tensor names), built by
    the form among ``forms`` (each family's, by its name) that answers to ``general.architecture``, with
    ``vocab_size`` from ``{arch}.vocab_size``, else the tokenizer's token count."""
    names = answering(forms)
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in names:
        raise ModelError(f"{path}: general.architecture {arch!r:.40} is not supported; attnx reads GGUF files of "
                         f"{', '.join(names)}")  # fmt: skip
    name = names[arch]
    meta, form = Metadata(metadata, arch, path), forms[name]
    consumed: dict[str, str] = {}
    if form.config is None:
        config = decoder(meta, name, tensors)
    else:
        config, consumed = form.config(meta, tensors, read)
    built = config["model_type"]
    if built not in (name, *form.produces) or built not in forms:  # a form's own mistake, not the file's
        raise RuntimeError(f"{name}'s GGUF form built a {built!r} config")
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = meta.whole("vocab_size", "vocab_size") or (len(tokens) if isinstance(tokens, (list, Strings)) else None)
    if vocab is not None:
        config["vocab_size"] = vocab
    meta.unread()
    return Built(config, meta.origin, consumed, forms[built])
