"""Fixtures: tiny random T5 checkpoints built with transformers, and what transformers computes on them.

Each variant's config exercises what T5 differs in: odd head counts whose width is not d_model's, more decoder
layers than encoder layers, relative buckets few and near enough that the texts reach the logarithmic ones,
the ReLU and the gated-GELU feed-forward, an LM head tied and scaled (T5) or of its own and unscaled (v1.1, as
the Hub's files store it: ``lm_head.weight`` beside ``shared.weight``, ``tie_word_embeddings: false``).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.models.checkpoints import SENTENCES, TEXT
from tests.models.decoders import float64_everywhere, randomise

TARGET = "a dog ran far away because it was tired"
T5_SIZES = {"d_model": 20, "d_kv": 8, "d_ff": 28, "num_layers": 2, "num_decoder_layers": 3, "num_heads": 3,
            "relative_attention_num_buckets": 8, "relative_attention_max_distance": 12}  # fmt: skip


@dataclass(frozen=True)
class Seq2SeqVariant:
    """One tiny encoder-decoder: its name, model_type, config, and whether its LM head is stored apart."""

    name: str
    family: str
    config: dict[str, Any]
    own_head: bool = False


SEQ2SEQ = {
    v.name: v
    for v in (
        Seq2SeqVariant("t5", "t5", {**T5_SIZES, "feed_forward_proj": "relu"}),
        Seq2SeqVariant(
            "t5-v1.1",
            "t5",
            {**T5_SIZES, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
            own_head=True,
        ),
        Seq2SeqVariant("mt5", "mt5", {**T5_SIZES, "num_heads": 5, "feed_forward_proj": "gated-gelu"}),
    )
}


@dataclass(frozen=True)
class Seq2SeqReference:
    """A checkpoint folder and what transformers computes on TEXT (source) and TARGET (teacher-forced), per dtype:
    each kind's weights per layer ``[head, query, key]``, each block's output ``[token, d_model]`` per stack, the
    encoder's output and the logits."""

    path: Path
    variant: Seq2SeqVariant
    source_ids: list[int]
    decoder_ids: list[int]
    attentions: dict[str, dict[str, list[np.ndarray]]]  # dtype -> encoder / decoder / cross -> layers
    hidden: dict[str, dict[str, list[np.ndarray]]]  # dtype -> encoder / decoder -> layers
    memory: dict[str, np.ndarray]  # dtype -> the encoder's last hidden state
    logits: dict[str, np.ndarray]


def unigram_tokenizer() -> Any:
    """A T5-style tokenizer, the same on every run: Metaspace pieces (``▁cat``), ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2,
    a Unigram model over the test sentences' words and the letters, ``</s>`` after a text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    words = sorted({word for text in (*SENTENCES, TEXT, TARGET) for word in text.split()})
    letters = sorted({letter for word in words for letter in word})
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    pieces += [(f"\u2581{word}", -1.0) for word in words] + [(letter, -5.0) for letter in letters]
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=2))
    tokenizer.add_special_tokens(["<pad>", "</s>", "<unk>"])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return tokenizer


def run_seq2seq(path: Path, source: list[int], target: list[int], dtype: str) -> tuple[Any, ...]:
    """transformers' attentions of the three kinds, each block's output, the encoder's output and the logits."""
    import torch
    import transformers

    wide = dtype == "float64"
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        path, attn_implementation="eager", dtype=torch.float64 if wide else torch.float32
    )
    model.eval()
    blocks: dict[str, list[np.ndarray]] = {"encoder": [], "decoder": []}
    hooks = [
        block.register_forward_hook(lambda _m, _i, out, name=name: blocks[name].append(out[0][0].numpy().copy()))
        for name in blocks
        for block in getattr(model, name).block
    ]
    with float64_everywhere() if wide else contextlib.nullcontext(), torch.no_grad():
        out = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]), output_attentions=True)
    for hook in hooks:
        hook.remove()
    kinds = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    attentions = {kind: [a[0].numpy() for a in found] for kind, found in kinds.items()}
    return attentions, blocks, out.encoder_last_hidden_state[0].numpy(), out.logits[0].numpy()


def add_own_head(path: Path, vocab: int, width: int) -> None:
    """Store an ``lm_head.weight`` of its own beside ``shared.weight``, as T5 v1.1's files on the Hub have it."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    tensors["lm_head.weight"] = np.random.default_rng(7).normal(0, 0.5, (vocab, width)).astype(np.float32)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))


def build_seq2seq(path: Path, variant: Seq2SeqVariant) -> Seq2SeqReference:
    """Save ``variant`` as a random model with its tokenizer in ``path`` and run transformers on it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    tokenizer = unigram_tokenizer()
    config = transformers.AutoConfig.for_model(
        variant.family, vocab_size=tokenizer.get_vocab_size(), decoder_start_token_id=0, pad_token_id=0,
        eos_token_id=1, initializer_factor=1.0, **variant.config,
    )  # fmt: skip
    model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    randomise(model)
    with torch.no_grad():  # position biases as strong as trained T5's, so that they shape every row
        for name, p in model.named_parameters():
            if name.endswith("relative_attention_bias.weight"):
                p.mul_(8.0)
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    if variant.own_head:
        add_own_head(path, tokenizer.get_vocab_size(), variant.config["d_model"])
    source = tokenizer.encode(TEXT).ids
    decoder = [0, *tokenizer.encode(TARGET).ids[:-1]]  # the start token, then the target shifted right
    attentions, hidden, memory, logits = {}, {}, {}, {}
    for dtype in ("float32", "float64"):
        attentions[dtype], hidden[dtype], memory[dtype], logits[dtype] = run_seq2seq(path, source, decoder, dtype)
    return Seq2SeqReference(path, variant, source, decoder, attentions, hidden, memory, logits)


_BUILT: dict[str, Seq2SeqReference] = {}


def built_seq2seq(name: str, factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """The tiny encoder-decoder ``name`` of ``SEQ2SEQ``, built once per session."""
    if name not in _BUILT:
        _BUILT[name] = build_seq2seq(factory.mktemp(name), SEQ2SEQ[name])
    return _BUILT[name]


@pytest.fixture(scope="session", params=list(SEQ2SEQ))
def seq2seq(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """Each tiny encoder-decoder in turn."""
    return built_seq2seq(request.param, tmp_path_factory)


@pytest.fixture(scope="session")
def t5(tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """The T5: ReLU feed-forward, tied and scaled LM head, 3 heads of 8 over a width of 20."""
    return built_seq2seq("t5", tmp_path_factory)
