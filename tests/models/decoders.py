"""Fixtures: tiny random Llama, Mistral, Qwen 2/3 and Gemma 1/2 checkpoints built with transformers, and their references.

Each family's config is chosen to exercise what it differs in (see ``VARIANTS``): grouped and single
K/V heads, head_dim ≠ hidden / heads, biases, llama3 rope scaling, sliding windows shorter than the
text, soft-capped scores, QK-norm, tied and untied embeddings, sharded, bfloat16 and float16 files.
Norm weights and biases are moved away from their defaults so that every term matters.

The float64 reference: transformers keeps some steps in float32 even in a float64 model (the rotary
frequencies and angles, RMSNorm's mean square, the softmax), each written ``torch.float``,
``torch.float32`` or ``tensor.float()`` in its modelling code. ``float64_everywhere`` points the three
at float64 while the
rotary module is rebuilt (its frequencies) and while the model runs, so every step of the reference
is float64. (Loading the weights needs the real names: safetensors sizes its reads by them.)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from tests.models.checkpoints import SENTENCES, TEXT, gpt2_tokenizer

SIZES = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3, "max_position_embeddings": 64}
PHI3_TOKENS = {"pad_token_id": None, "eos_token_id": None}  # Phi-3's defaults (32000) lie past a tiny vocabulary


@dataclass(frozen=True)
class Variant:
    """One tiny checkpoint: its family, config, how it is saved and which tokenizer it has."""

    name: str
    family: str
    config: dict[str, Any]
    stored: str = "float32"  # the weights' dtype on disk
    shard: str | None = None  # save_pretrained's max_shard_size: sharded with an index
    tokenizer: str = "byte-level"  # or "metaspace" (SentencePiece style, "▁" for spaces)
    facts: dict[str, Any] = field(default_factory=dict)  # what attnx must read from the config
    rewritten: dict[str, Any] = field(default_factory=dict)  # config.json keys set after saving (None removes one)


VARIANTS = {
    v.name: v
    for v in (
        Variant(
            "llama", "llama",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "attention_bias": True,
             "mlp_bias": True, "tie_word_embeddings": False,
             "rope_parameters": {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 32}},
            shard="8KB", tokenizer="metaspace",
        ),
        Variant(
            "mistral", "mistral",
            {"num_attention_heads": 4, "num_key_value_heads": 1, "sliding_window": 3, "tie_word_embeddings": True},
            stored="bfloat16",
        ),
        Variant(
            "qwen2", "qwen2",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "use_sliding_window": True, "sliding_window": 4,
             "max_window_layers": 1, "tie_word_embeddings": False},
            stored="float16",
        ),
        Variant(
            "qwen3", "qwen3",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "tie_word_embeddings": True},
        ),
        Variant(
            "gemma", "gemma",
            {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}, tokenizer="metaspace",
        ),
        Variant(
            "gemma2", "gemma2",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 4,
             "attn_logit_softcapping": 2.0, "query_pre_attn_scalar": 24, "final_logit_softcapping": 30.0},
        ),
        Variant(  # Gemma 3: QK-norm; layer_types given (full first: no pattern makes it); rope_parameters by layer
            # type, linear ×8 on the full layer only; windows of 4 (10 tokens); biases; logits capped; untied
            "gemma3", "gemma3_text",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4,
             "query_pre_attn_scalar": 24, "final_logit_softcapping": 30.0, "attention_bias": True,
             "tie_word_embeddings": False, "layer_types": ["full_attention", "sliding_attention", "sliding_attention"],
             "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
        ),
        Variant(  # Gemma 3 as older configs have it: flat rope keys (rope_scaling on the full layer only, its own base
            # for the sliding ones), layer_types only as sliding_window_pattern 3, query_pre_attn_scalar by default
            "gemma3_flat", "gemma3_text",
            {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "sliding_window": 4,
             "sliding_window_pattern": 3},
            stored="bfloat16",
            rewritten={"layer_types": None, "_sliding_window_pattern": None, "query_pre_attn_scalar": None,
                       "rope_parameters": None, "rope_theta": 2e5, "rope_local_base_freq": 100.0,
                       "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
        ),
        Variant(  # SmolLM3: a NoPE layer between rotary ones, which slides (use_sliding_window: layer_types derived)
            "smollm3", "smollm3",
            {"num_attention_heads": 4, "num_key_value_heads": 1, "no_rope_layers": [1, 0, 1], "sliding_window": 4,
             "use_sliding_window": True, "rope_parameters": {"rope_type": "default", "rope_theta": 100.0},
             "pad_token_id": None, "bos_token_id": None, "eos_token_id": None},
        ),
        Variant(  # Phi-3: fused qkv_proj and gate_up_proj, GQA, 0.75 of d_k 8 turned, longrope past its 8 positions
            "phi3", "phi3",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "partial_rotary_factor": 0.75, "sliding_window": 5,
             "original_max_position_embeddings": 8, "tie_word_embeddings": False, **PHI3_TOKENS,
             "rope_parameters": {"rope_type": "longrope", "rope_theta": 100.0, "short_factor": [1.0, 1.5, 2.0],
                                 "long_factor": [4.0, 6.0, 12.0]}},
        ),
        Variant(  # Phi-3.5: every column turned, one K/V head, longrope within its 32 positions (the short factors)
            "phi3_short", "phi3",
            {"num_attention_heads": 4, "num_key_value_heads": 1, "original_max_position_embeddings": 32,
             "tie_word_embeddings": False, **PHI3_TOKENS,
             "rope_parameters": {"rope_type": "longrope", "rope_theta": 100.0, "short_factor": [2.0, 1.5, 3.0, 1.0],
                                 "long_factor": [8.0, 6.0, 12.0, 4.0]}},
        ),
        Variant(  # OLMo 2: QK-norm over the whole projections (q 32 wide, k 16: GQA), norms after each sublayer
            "olmo2", "olmo2",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False, "eos_token_id": None,
             "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}},
            rewritten={"rms_norm_eps": None},  # Olmo2Config's default, 10⁻⁵, where config.json has none
        ),
        Variant(
            "gpt_neox", "gpt_neox",
            {"num_attention_heads": 2, "rotary_pct": 0.25, "rotary_emb_base": 500.0, "use_parallel_residual": True,
             "layer_norm_eps": 1e-4},
        ),
        Variant(
            "gpt_neox_sequential", "gpt_neox",
            {"num_attention_heads": 4, "rotary_pct": 0.5, "use_parallel_residual": False, "attention_bias": False,
             "hidden_act": "gelu_new", "tie_word_embeddings": True},
            stored="float16",
        ),
        Variant(  # Mixtral: 4 experts (w1/w3/w2), top-2 always renormalised, on every layer; Mistral's window of 4
            "mixtral", "mixtral",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
             "sliding_window": 4, "tie_word_embeddings": False},
        ),
        Variant(  # Qwen 2 MoE: 4 experts, top-2 not renormalised, a gated shared expert; layer 1 dense; q/k/v biases
            "qwen2_moe", "qwen2_moe",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
             "moe_intermediate_size": 24, "shared_expert_intermediate_size": 40, "norm_topk_prob": False,
             "mlp_only_layers": [1], "tie_word_embeddings": False},
        ),
        Variant(  # Qwen 3 MoE: QK-norm, 4 experts, top-2 renormalised, decoder_sparse_step 2 (layers 0 and 2 dense)
            "qwen3_moe", "qwen3_moe",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "num_experts": 4,
             "num_experts_per_tok": 2, "moe_intermediate_size": 24, "norm_topk_prob": True,
             "decoder_sparse_step": 2, "tie_word_embeddings": True},
        ),
        Variant(  # OLMo 3: OLMo 2 with windows of 3 on layers 0 and 2 (layer_types), rope parameters by layer type
            "olmo3", "olmo3",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "sliding_window": 3,
             "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
             "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 900.0},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 300.0}}},
        ),
        Variant(  # Granite: every multiplier away from 1 (scores × 0.2 in place of 1/√8, branches × 0.5, embeddings × 3)
            "granite", "granite",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "embedding_multiplier": 3.0,
             "attention_multiplier": 0.2, "residual_multiplier": 0.5, "logits_scaling": 4.0,
             "tie_word_embeddings": True},
        ),
        Variant(  # gpt-oss: learned sinks, windows of 3 on layers 0 and 2, YaRN (factor 4 of 16 positions, not truncated)
            "gpt_oss", "gpt_oss",  # past its 16 positions; biases; 4 experts, top-2, a clamp of 0.5 that bites
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_local_experts": 4,
             "num_experts_per_tok": 2, "sliding_window": 3, "swiglu_limit": 0.5,
             "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "beta_fast": 32.0,
                                 "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 16}},
        ),
    )
}  # fmt: skip


@dataclass(frozen=True)
class DecoderReference:
    """A checkpoint folder and what transformers computes on TEXT, per layer: weights ``[head, query, key]``
    and the hidden state each layer outputs ``[query, d_model]``, in float32 and in float64."""

    path: Path
    variant: Variant
    ids: list[int]
    tokens: list[str]
    attentions: dict[str, list[np.ndarray]]
    hidden: dict[str, list[np.ndarray]]


def metaspace_tokenizer() -> Any:
    """A SentencePiece-style BPE (``▁`` marks a space, unknown bytes as ``<0x..>``) with ``<s>`` before a text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    specials = ["<unk>", "<s>", "</s>"]
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials + bytes_, show_progress=False)
    tokenizer.train_from_iterator(SENTENCES * 4, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tokenizer


@contextlib.contextmanager
def float64_everywhere() -> Iterator[None]:
    """While active, ``torch.float``, ``torch.float32`` and ``Tensor.float()`` mean float64 (see the module's docstring)."""
    import torch

    with (
        mock.patch.object(torch, "float", torch.float64),
        mock.patch.object(torch, "float32", torch.float64),
        mock.patch.object(torch.Tensor, "float", torch.Tensor.double),
    ):
        yield


def randomise(model: Any) -> None:
    """Norm weights near 1 (Gemma's, stored as w in (1 + w): near 0) and biases near 0, but not equal."""
    import torch

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):  # gpt-oss's learned sinks: logits as large as the scores
                p.copy_(torch.randn(p.shape, generator=generator))
            elif name.endswith("bias") or ("norm" in name and "gemma" in type(model).__name__.lower()):
                p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
            elif "norm" in name:
                p.copy_(1 + torch.randn(p.shape, generator=generator) * 0.1)


def run_reference(path: Path, ids: list[int], dtype: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each layer's weights and output hidden state (captured by a hook on the layer) from transformers."""
    import torch
    import transformers

    wide = dtype == "float64"
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path,
        attn_implementation="eager",
        dtype=torch.float64 if wide else torch.float32,
        experts_implementation="eager",  # MoE experts one by one (grouped_mm refuses float64)
    )
    model.eval()
    with float64_everywhere() if wide else contextlib.nullcontext():
        if wide:
            model.base_model.rotary_emb = type(model.base_model.rotary_emb)(model.config)
        outputs: list[np.ndarray] = []
        hooks = [
            layer.register_forward_hook(lambda _m, _i, out: outputs.append(
                (out[0] if isinstance(out, tuple) else out)[0].numpy().copy()))
            for layer in model.base_model.layers  # model.model, or GPT-NeoX's gpt_neox
        ]  # fmt: skip
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
        for hook in hooks:
            hook.remove()
    return [a[0].numpy() for a in out.attentions], outputs


def rewrite_config(path: Path, changes: dict[str, Any]) -> None:
    """Set keys of the saved config.json (None removes one): the forms transformers reads but does not write."""
    if changes:
        config = json.loads((path / "config.json").read_text())
        config = {key: value for key, value in (config | changes).items() if key not in changes or value is not None}
        (path / "config.json").write_text(json.dumps(config))


def build(path: Path, variant: Variant) -> DecoderReference:
    """Save ``variant`` as a random model with its tokenizer in ``path`` and run transformers on TEXT."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    tokenizer = metaspace_tokenizer() if variant.tokenizer == "metaspace" else gpt2_tokenizer()
    config = transformers.AutoConfig.for_model(
        variant.family, vocab_size=tokenizer.get_vocab_size(), initializer_range=0.2, **SIZES, **variant.config
    )
    model = transformers.AutoModelForCausalLM.from_config(config)
    randomise(model)
    model.to(getattr(torch, variant.stored))
    model.save_pretrained(path, **({"max_shard_size": variant.shard} if variant.shard else {}))
    tokenizer.save(str(path / "tokenizer.json"))
    rewrite_config(path, variant.rewritten)
    encoding = tokenizer.encode(TEXT)
    attentions, hidden = {}, {}
    for dtype in ("float32", "float64"):
        attentions[dtype], hidden[dtype] = run_reference(path, encoding.ids, dtype)
    return DecoderReference(path, variant, encoding.ids, encoding.tokens, attentions, hidden)


_BUILT: dict[str, DecoderReference] = {}


def built(name: str, factory: pytest.TempPathFactory) -> DecoderReference:
    """The tiny decoder ``name`` of ``VARIANTS``, built once per session."""
    if name not in _BUILT:
        _BUILT[name] = build(factory.mktemp(name), VARIANTS[name])
    return _BUILT[name]


@pytest.fixture(scope="session", params=list(VARIANTS))
def decoder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """Each tiny decoder in turn."""
    return built(request.param, tmp_path_factory)


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """The Llama: GQA, head_dim 16 ≠ 32 / 4, biases, llama3 rope scaling, untied, sharded, SentencePiece tokens."""
    return built("llama", tmp_path_factory)


@pytest.fixture(scope="session")
def gemma2(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """The Gemma 2: soft-capped scores, query_pre_attn_scalar 24, windows of 4 on layers 0 and 2."""
    return built("gemma2", tmp_path_factory)
