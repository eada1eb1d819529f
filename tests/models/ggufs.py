"""Fixtures: tiny random GGUF files written as llama.cpp's converter writes them, and what transformers reads from them.

A random transformers model (norms and biases moved off their defaults) is converted here the way
``convert_hf_to_gguf.py`` does it: tensor names by the gguf package's own name map, W_q and W_k permuted for
interleaved RoPE (Llama), norms stored as 1 + w (Gemma), Conv1D weights transposed and the embeddings copied to
``output.weight`` (GPT-2), experts stacked (MoE), 2-D weights quantized (Q8_0 by default) and F16 where asked, norms
and biases F32; the tokenizer written into the metadata (tokens, types, merges or scores, special ids). The
reference is transformers loading the same file (``from_pretrained(folder, gguf_file=name)``): a file written here
is never checked against attnx's reading alone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from tests.models.checkpoints import SENTENCES, TEXT
from tests.models.decoders import metaspace_tokenizer, randomise

SIZES = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "max_position_embeddings": 64}
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6  # llama.cpp's token types
# Texts whose tokens must be transformers': spaces, digits, accents, emoji, CJK, a special token.
TEXTS = (
    TEXT, "  two  spaces and\ttabs\nnew lines ", "digits 1 22 333 4444 3.14 -7", "café naïve Ünïcödé façade",
    "emoji 😀🚀 👩‍💻 ok", "你好，世界。日本語のテキスト", "mixed: the cat 猫 ran 🐈 42 times!", "<|endoftext|> the end",
)  # fmt: skip


@dataclass(frozen=True)
class GgufVariant:
    """One tiny GGUF model: transformers' family and config, llama.cpp's architecture, how it is stored."""

    name: str
    family: str
    arch: str
    config: dict[str, Any]
    tokenizer: str = "byte-level"  # or "metaspace": SentencePiece style, written as tokenizer model "llama"
    pre: str = "qwen2"  # tokenizer.ggml.pre of a byte-level tokenizer
    quant: str = "Q8_0"  # the ggml type of 2-D weights
    half: tuple[str, ...] = ()  # parts of GGUF names stored as F16 instead
    keys: dict[str, Any] = field(default_factory=dict)  # extra {arch}.* metadata


VARIANTS = {
    v.name: v
    for v in (
        GgufVariant(  # GQA 4/2, head_dim 16 ≠ 32 / 4, untied, biases on q/k/v/o: all permuted back
            "llama", "llama", "llama",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "tie_word_embeddings": False, "rope_theta": 100.0},
            tokenizer="metaspace", half=("attn_v",),
        ),
        GgufVariant(  # biases on q, k and v (not permuted: Qwen's RoPE is rotate-half in llama.cpp too), untied
            "qwen2", "qwen2", "qwen2",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False},
        ),
        GgufVariant(  # QK-norm on each head, head_dim 128 ≠ 32 / 4 (transformers' GGUF reader reads no other: it
            # takes Qwen3Config's 128), tied; Q4_0 weights; a byte-level tokenizer split as Qwen 2
            "qwen3", "qwen3", "qwen3",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128, "tie_word_embeddings": True},
            quant="Q4_0",
        ),
        GgufVariant(  # norms stored as 1 + w, soft caps and the scale as transformers' GGUF reader assumes them
            # (it reads none of them: Gemma2Config's 50, 30 and 256), windows of 4 on layer 0
            "gemma2", "gemma2", "gemma2",
            {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 4,
             "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
        ),
        GgufVariant(  # norms stored as 1 + w (q_norm and k_norm too), windows of 4, all layers sliding (pattern 6)
            "gemma3", "gemma3_text", "gemma3",
            {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 4,
             "query_pre_attn_scalar": 256, "rope_theta": 1e6, "tie_word_embeddings": True},
            tokenizer="metaspace", quant="Q8_0",
        ),
        GgufVariant(  # 4 experts stacked per projection, top-2 not renormalised, a shared expert with a gate stored as
            # a vector; expert widths as Qwen2MoeConfig's defaults (transformers' GGUF reader reads neither)
            "qwen2moe", "qwen2_moe", "qwen2moe",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
             "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "tie_word_embeddings": False},
        ),
        GgufVariant(  # QK-norm, 4 experts, top-2 renormalised (llama.cpp always renormalises Qwen 3 MoE's)
            "qwen3moe", "qwen3_moe", "qwen3moe",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4,
             "num_experts_per_tok": 2, "moe_intermediate_size": 768, "norm_topk_prob": True,
             "tie_word_embeddings": True},
            quant="Q4_1",
        ),
        GgufVariant(  # fused qkv_proj and gate_up_proj kept fused; sliding_window 0 meaning none, as the converter
            # writes it; a SentencePiece vocabulary whose spaces a normalizer marks
            "phi3", "phi3", "phi3",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False, "pad_token_id": None,
             "eos_token_id": None, "bos_token_id": None},
            tokenizer="metaspace",
        ),
        GgufVariant(  # Conv1D weights transposed, output.weight a copy of the embeddings; 1,024 positions (transformers
            # reads context_length as n_ctx, not n_positions: any other size would not load)
            "gpt2", "gpt2", "gpt2",
            {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 1024, "bos_token_id": None, "eos_token_id": None},
            pre="gpt-2", quant="F16",
        ),
    )
}  # fmt: skip


# Files transformers' GGUF reader cannot be the reference for, checked against the model they were written from.
ORIGINALS = {
    v.name: v
    for v in (
        GgufVariant(  # Llama 3.1's rope scaling, which llama.cpp stores as per-pair divisors (rope_freqs)
            "llama3", "llama", "llama",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "tie_word_embeddings": True,
             "max_position_embeddings": 131072, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
            tokenizer="metaspace", quant="F32",
        ),
        GgufVariant(  # Mixtral, which llama.cpp writes as a Llama with experts: W_q and W_k permuted, experts stacked
            "mixtral", "mixtral", "llama",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
             "tie_word_embeddings": False, "rope_theta": 100.0},
            tokenizer="metaspace", quant="F32",
        ),
        GgufVariant(  # linear rope scaling (rope.scaling.type and factor), which transformers' GGUF reader drops
            "linear", "llama", "llama",
            {"num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": True,
             "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 100.0}},
            tokenizer="metaspace", quant="F32",
        ),
        GgufVariant(  # yarn (a factor of 4 over 16 trained positions, attention factor 1.139)
            "yarn", "qwen2", "qwen2",
            {"num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
             "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                 "rope_theta": 10000.0}},
            quant="F32",
        ),
        GgufVariant(  # Gemma (1): norms stored as 1 + w, embeddings × √hidden, tied
            "gemma", "gemma", "gemma",
            {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16},
            tokenizer="metaspace", quant="F32",
        ),
    )
}  # fmt: skip


@functools.cache
def byte_level_tokenizer() -> Any:
    """A byte-level BPE trained on SENTENCES with two special tokens (``<|endoftext|>`` is the EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>"], show_progress=False)  # fmt: skip
    tokenizer.train_from_iterator(SENTENCES * 4, trainer)
    return tokenizer


def tokenizer_metadata(writer: Any, kind: str, pre: str) -> int:
    """Write a tokenizer into the metadata as llama.cpp's converter does; the vocabulary's size."""
    tokenizer = byte_level_tokenizer() if kind == "byte-level" else metaspace_tokenizer()
    model = json.loads(tokenizer.to_str())["model"]
    vocab = tokenizer.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    specials = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    if kind == "byte-level":
        types = [CONTROL if token in specials else NORMAL for token in tokens]
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_merges([" ".join(pair) if isinstance(pair, list) else pair for pair in model["merges"]])
        writer.add_eos_token_id(vocab["<|endoftext|>"])
        writer.add_add_bos_token(False)
    else:
        types = [UNKNOWN if t == "<unk>" else CONTROL if t in ("<s>", "</s>") else BYTE if t.startswith("<0x") else NORMAL
                 for t in tokens]  # fmt: skip
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_scores([-float(i) for i in range(len(tokens))])  # merges rebuilt from the scores
        writer.add_bos_token_id(vocab["<s>"])
        writer.add_eos_token_id(vocab["</s>"])
        writer.add_unk_token_id(vocab["<unk>"])
        writer.add_pad_token_id(vocab["</s>"])  # Phi-3's config would pad with 32000, past a tiny vocabulary
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    return len(tokens)


def permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's permutation of W_q and W_k rows (and biases) for interleaved RoPE: (half, i) -> (i, half)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def converted(model: Any, variant: GgufVariant) -> Iterator[tuple[str, np.ndarray]]:
    """The model's tensors as llama.cpp's converter yields them: GGUF names, values changed where it changes them."""
    import gguf

    config = model.config
    layers = config.num_hidden_layers
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[variant.arch.upper()], layers)
    state = {name: tensor.detach().float().numpy() for name, tensor in model.state_dict().items()}
    for name, values in state.items():
        tied = name == "lm_head.weight" and (variant.arch == "gpt2" or config.tie_word_embeddings)
        if tied or name.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")):
            continue
        if variant.arch == "llama" and ".self_attn.q_proj." in name:
            values = permute(values, config.num_attention_heads)
        if variant.arch == "llama" and ".self_attn.k_proj." in name:
            values = permute(values, config.num_key_value_heads)
        if variant.arch.startswith("gemma") and name.endswith("norm.weight"):
            values = values + 1
        if variant.arch == "gpt2" and name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            values = values.T
        if name.endswith("mlp.experts.gate_up_proj"):  # transformers 5 fuses gate and up: stacked apart in GGUF
            half = values.shape[1] // 2
            prefix = names.get_name(name.replace("gate_up_proj", "gate_proj"))
            yield prefix + ".weight", np.ascontiguousarray(values[:, :half])
            yield prefix.replace("gate", "up") + ".weight", np.ascontiguousarray(values[:, half:])
            continue
        if name.endswith("mlp.experts.down_proj"):
            name += ".weight"
        if name.endswith("shared_expert_gate.weight"):
            values = values.reshape(-1)  # llama.cpp's loader expects a vector
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert target is not None, name
        yield target, np.ascontiguousarray(values)
        if variant.arch == "gpt2" and target == "token_embd.weight":
            yield "output.weight", values


def add_tensor(writer: Any, name: str, values: np.ndarray, variant: GgufVariant) -> None:
    """A tensor stored as llama.cpp stores it: 1-D F32, 2-D quantized (F16 where ``variant.half`` says, or where rows
    are not whole blocks)."""
    import gguf

    kind = gguf.GGMLQuantizationType[variant.quant]
    if values.ndim == 1 or name.endswith("norm.weight"):
        kind = gguf.GGMLQuantizationType.F32
    elif any(f".{part}." in name for part in variant.half) or values.shape[-1] % gguf.GGML_QUANT_SIZES[kind][0]:
        kind = gguf.GGMLQuantizationType.F16  # as llama.cpp falls back where rows are not whole blocks
    data = gguf.quants.quantize(values.astype(np.float32), kind)
    writer.add_tensor(name, data, raw_dtype=kind if data.dtype == np.uint8 else None)


def rope_factors(config: Any) -> Iterator[tuple[str, np.ndarray]]:
    """Llama 3's rope scaling as llama.cpp's converter stores it: each pair's divisor, in ``rope_freqs.weight``."""
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type") != "llama3":
        return
    dim = config.head_dim
    freqs = 1.0 / (rope["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    context = rope["original_max_position_embeddings"]
    divisors = []
    for freq in freqs:
        wavelength = 2 * np.pi / freq
        if wavelength < context / high:
            divisors.append(1.0)
        elif wavelength > context / low:
            divisors.append(factor)
        else:
            smooth = (context / wavelength - low) / (high - low)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    yield "rope_freqs.weight", np.asarray(divisors, dtype=np.float32)


def write_metadata(writer: Any, model: Any, variant: GgufVariant) -> None:
    """The ``{arch}.*`` keys llama.cpp's converter writes for the variant."""
    import gguf

    config = model.config
    if variant.arch == "gpt2":
        writer.add_block_count(config.n_layer)
        writer.add_context_length(config.n_positions)
        writer.add_embedding_length(config.n_embd)
        writer.add_feed_forward_length(4 * config.n_embd)
        writer.add_head_count(config.n_head)
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
        return
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    rope = config.rope_parameters
    writer.add_rope_freq_base(rope.get("full_attention", rope)["rope_theta"])
    if rope.get("rope_type") in ("linear", "yarn"):  # as the converter writes a rope scaling
        writer.add_rope_scaling_type(gguf.RopeScalingType(rope["rope_type"]))
        writer.add_rope_scaling_factor(rope["factor"])
    if rope.get("rope_type") == "yarn":
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    if "sliding_attention" in rope:  # the base of the sliding layers, as newer converters write it
        writer.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    if getattr(config, "head_dim", None) is not None:
        writer.add_key_length(config.head_dim)
        writer.add_value_length(config.head_dim)
    if variant.arch in ("llama", "phi3"):
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        writer.add_rope_dimension_count(int(head_dim * config.rope_parameters.get("partial_rotary_factor", 1.0)))
    if variant.arch == "phi3":
        writer.add_sliding_window(config.sliding_window or 0)
        writer.add_rope_scaling_orig_ctx_len(config.original_max_position_embeddings)
    experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(config.num_experts_per_tok)
    if hasattr(config, "moe_intermediate_size"):
        writer.add_expert_feed_forward_length(config.moe_intermediate_size)
    if hasattr(config, "shared_expert_intermediate_size"):
        writer.add_expert_shared_feed_forward_length(config.shared_expert_intermediate_size)
    if variant.arch in ("gemma2", "gemma3"):
        writer.add_sliding_window(config.sliding_window)
    if variant.arch == "gemma2":
        writer.add_attn_logit_softcapping(config.attn_logit_softcapping)
        writer.add_final_logit_softcapping(config.final_logit_softcapping)
    for key, value in variant.keys.items():
        writer.add_key_value(f"{variant.arch}.{key}", *value)


def write_gguf(
    path: Path, model: Any, variant: GgufVariant, *, split: int = 0, extra: dict[str, np.ndarray] | None = None
) -> Path:
    """Write ``model`` as llama.cpp would, to ``path`` (``split``: at most that many tensors per file; ``extra``:
    tensors added under their GGUF names)."""
    import gguf

    writer = gguf.GGUFWriter(path, variant.arch, split_max_tensors=split)
    writer.add_name(f"tiny {variant.name}")
    write_metadata(writer, model, variant)
    vocab = tokenizer_metadata(writer, variant.tokenizer, variant.pre)
    if variant.arch != "gpt2":
        writer.add_vocab_size(vocab)
    for name, values in [*converted(model, variant), *rope_factors(model.config), *(extra or {}).items()]:
        add_tensor(writer, name, values, variant)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def random_model(variant: GgufVariant) -> Any:
    """A random transformers model of the variant, norms and biases moved off their defaults."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    tokenizer = byte_level_tokenizer() if variant.tokenizer == "byte-level" else metaspace_tokenizer()
    sizes = {} if variant.family == "gpt2" else SIZES
    config = transformers.AutoConfig.for_model(
        variant.family, vocab_size=tokenizer.get_vocab_size(), initializer_range=0.2, **{**sizes, **variant.config}
    )
    model = transformers.AutoModelForCausalLM.from_config(config)
    randomise(model)
    if variant.family == "gpt2":
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".ln_" in name and name.endswith("weight"):
                    p.copy_(1 + 0.1 * torch.randn(p.shape))
    return model


_CONFIGS: dict[str, Any] = {}  # what transformers reads of each file's metadata, kept for the session


@functools.cache
def _reader(path: str, mode: str) -> Any:
    """The gguf package's reader of ``path``, made once."""
    from gguf.gguf_reader import GGUFReader

    return GGUFReader(path, mode)


@functools.cache
def _names(arch: Any, layers: int) -> Any:
    """The gguf package's tensor-name map of ``arch``, made once."""
    from gguf.tensor_mapping import get_tensor_name_map

    return get_tensor_name_map(arch, layers)


@contextmanager
def quick_transformers() -> Iterator[None]:
    """transformers' GGUF loader made quicker, no less faithful: the gguf package's reader and tensor-name map, and
    the metadata-only reading of a file (its config), each computed once per file in the session instead of once per
    call (gguf.GGUFReader takes 4 s over SmolLM2's 49,152-token vocabulary, and transformers reads it four times)."""
    import copy

    import gguf
    from transformers import modeling_gguf_pytorch_utils as loader

    load = loader.load_gguf_checkpoint

    def load_once(path: Any, return_tensors: bool = False, **options: Any) -> Any:
        if return_tensors or options:
            return load(path, return_tensors=return_tensors, **options)
        if str(path) not in _CONFIGS:
            _CONFIGS[str(path)] = load(path, return_tensors=False)
        return copy.deepcopy(_CONFIGS[str(path)])

    with (  # transformers imports these from gguf when it reads a file: patched where it finds them
        mock.patch.object(gguf, "get_tensor_name_map", _names),
        mock.patch.object(gguf, "GGUFReader", lambda path, mode="r": _reader(str(path), mode)),
        mock.patch.object(loader, "load_gguf_checkpoint", load_once),
    ):
        yield


@dataclass(frozen=True)
class GgufReference:
    """A GGUF file and what transformers computes on TEXT from it: ids, each layer's weights and output state."""

    path: Path
    variant: GgufVariant
    ids: list[int]
    attentions: list[np.ndarray]
    hidden: list[np.ndarray]


def transformers_run(path: Path, ids: list[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """transformers on the GGUF file (float32, eager attention): each layer's weights and output hidden state."""
    import torch
    import transformers

    with quick_transformers():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
        )
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    return [a[0].numpy() for a in out.attentions], [h[0].numpy() for h in out.hidden_states[1:]]


def transformers_tokens(path: Path, texts: tuple[str, ...]) -> list[list[int]]:
    """transformers' GGUF tokenizer's ids for each text (special tokens added as it adds them)."""
    import transformers

    with quick_transformers():
        tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return [tokenizer(text)["input_ids"] for text in texts]


def original_run(model: Any, ids: list[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """transformers on the model a GGUF file was written from (float32, eager attention): for what its GGUF reader
    drops (Llama 3's rope_freqs) or cannot read (Gemma), with the file storing float32, not quantized, weights."""
    import torch

    model.config._attn_implementation = "eager"
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    return [a[0].numpy() for a in out.attentions], [h[0].numpy() for h in out.hidden_states[1:]]


def build(folder: Path, variant: GgufVariant) -> GgufReference:
    """Write the variant's GGUF into ``folder`` and run transformers on it."""
    path = write_gguf(folder / f"{variant.name}.gguf", random_model(variant), variant)
    (ids,) = transformers_tokens(path, (TEXT,))
    attentions, hidden = transformers_run(path, ids)
    return GgufReference(path, variant, ids, attentions, hidden)


_BUILT: dict[str, GgufReference] = {}


def built(name: str, factory: pytest.TempPathFactory) -> GgufReference:
    """The tiny GGUF ``name`` of ``VARIANTS``, built once per session."""
    if name not in _BUILT:
        _BUILT[name] = build(factory.mktemp(f"gguf-{name}"), VARIANTS[name])
    return _BUILT[name]
