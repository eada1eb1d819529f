"""Fixtures: tiny random encoder-decoders (T5, BART, mBART, Marian) built with transformers, and what it computes.

Each T5 variant's config exercises what T5 differs in: odd head counts whose width is not d_model's, more decoder
layers than encoder layers, relative buckets few and near enough that the texts reach the logarithmic ones,
the ReLU and the gated-GELU feed-forward, an LM head tied and scaled (T5) or of its own and unscaled (v1.1, as
the Hub's files store it: ``lm_head.weight`` beside ``shared.weight``, ``tie_word_embeddings: false``). The BART-like
ones: odd head counts (the encoder's and the decoder's differing), fewer encoder than decoder layers, tied and untied
tables (Marian's own source and target tables), ``scale_embedding`` on and off, a ``final_logits_bias`` not zero, and
their own special tokens (mBART's language code after ``</s>``).
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


T5_TOKENS = {"decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1, "initializer_factor": 1.0}
BART_SIZES = {"d_model": 30, "encoder_layers": 2, "decoder_layers": 3, "encoder_attention_heads": 3,
              "decoder_attention_heads": 5, "encoder_ffn_dim": 28, "decoder_ffn_dim": 36, "max_position_embeddings": 64,
              "init_std": 0.3, "bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2,
              "forced_eos_token_id": 2}  # fmt: skip
BART_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
MARIAN_TOKENS = {"pad_token_id": 2, "eos_token_id": 0, "decoder_start_token_id": 2, "forced_eos_token_id": 0,
                 "bos_token_id": None}  # fmt: skip


@dataclass(frozen=True)
class Seq2SeqVariant:
    """One tiny encoder-decoder: its name, model_type, config, whether its LM head is stored apart (T5), and its
    tokenizer's special tokens (ids 0, 1, …) and template (``$A </s>``)."""

    name: str
    family: str
    config: dict[str, Any]
    own_head: bool = False
    specials: tuple[str, ...] = ("<pad>", "</s>", "<unk>")
    template: str = "$A </s>"


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
        Seq2SeqVariant("bart", "bart", BART_SIZES, specials=BART_SPECIALS, template="<s> $A </s>"),
        Seq2SeqVariant(
            "bart-untied",
            "bart",
            {**BART_SIZES, "tie_word_embeddings": False, "scale_embedding": True, "activation_function": "relu"},
            specials=BART_SPECIALS,
            template="<s> $A </s>",
        ),
        Seq2SeqVariant(
            "mbart",
            "mbart",
            {**BART_SIZES, "scale_embedding": True},
            specials=(*BART_SPECIALS, "en_XX"),
            template="$A </s> en_XX",
        ),
        Seq2SeqVariant(
            "marian",
            "marian",
            {**BART_SIZES, **MARIAN_TOKENS, "scale_embedding": True, "activation_function": "swish"},
            specials=("</s>", "<unk>", "<pad>"),
        ),
        Seq2SeqVariant(
            "marian-own-tables",
            "marian",
            {
                **BART_SIZES,
                **MARIAN_TOKENS,
                "share_encoder_decoder_embeddings": False,
                "tie_word_embeddings": False,
                "scale_embedding": False,
                "encoder_layers": 3,
                "decoder_layers": 2,
            },
            specials=("</s>", "<unk>", "<pad>"),
        ),
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


def unigram_tokenizer(specials: tuple[str, ...] = ("<pad>", "</s>", "<unk>"), template: str = "$A </s>") -> Any:
    """A SentencePiece-style tokenizer, the same on every run: Metaspace pieces (``▁cat``), ``specials`` first (T5's:
    ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2), a Unigram model over the test sentences' words and their letters, a text
    put in ``template``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    words = sorted({word for text in (*SENTENCES, TEXT, TARGET) for word in text.split()})
    letters = sorted({letter for word in words for letter in word})
    pieces = [(special, 0.0) for special in specials] + [("\u2581", -2.0)]
    pieces += [(f"\u2581{word}", -1.0) for word in words] + [(letter, -5.0) for letter in letters]
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=specials.index("<unk>")))
    tokenizer.add_special_tokens(list(specials))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    used = [(token, specials.index(token)) for token in template.split() if token in specials]
    tokenizer.post_processor = processors.TemplateProcessing(single=template, special_tokens=used)
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
    stacks = {"encoder": model.get_encoder(), "decoder": model.get_decoder()}
    hooks = [
        block.register_forward_hook(lambda _m, _i, out, name=name: blocks[name].append(first(out)[0].numpy().copy()))
        for name, stack in stacks.items()
        for block in getattr(stack, "block", None) or stack.layers  # T5's blocks, BART's layers
    ]
    with float64_everywhere() if wide else contextlib.nullcontext(), torch.no_grad():
        out = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]), output_attentions=True)
    for hook in hooks:
        hook.remove()
    kinds = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    attentions = {kind: [a[0].numpy() for a in found] for kind, found in kinds.items()}
    return attentions, blocks, out.encoder_last_hidden_state[0].numpy(), out.logits[0].numpy()


def first(out: Any) -> Any:
    """A block's output hidden state: T5's blocks return a tuple, BART's layers the tensor."""
    return out[0] if isinstance(out, tuple) else out


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
    tokenizer = unigram_tokenizer(variant.specials, variant.template)
    settings = {**(T5_TOKENS if variant.family in ("t5", "mt5") else {}), **variant.config}
    config = transformers.AutoConfig.for_model(variant.family, vocab_size=tokenizer.get_vocab_size(), **settings)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    randomise(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("relative_attention_bias.weight"):  # as strong as trained T5's: they shape every row
                p.mul_(8.0)
        if hasattr(model, "final_logits_bias"):  # zeros as initialised: make it show
            model.final_logits_bias.copy_(
                torch.randn(model.final_logits_bias.shape, generator=torch.Generator().manual_seed(2))
            )
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    if variant.own_head:
        add_own_head(path, tokenizer.get_vocab_size(), variant.config["d_model"])
    source = tokenizer.encode(TEXT).ids
    labels = torch.tensor([tokenizer.encode(TARGET).ids])
    decoder = model.prepare_decoder_input_ids_from_labels(labels)[0].tolist()  # the start token, then shifted right
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


def named(*families: str) -> list[str]:
    """The variants of ``families``."""
    return [name for name, variant in SEQ2SEQ.items() if variant.family in families]


@pytest.fixture(scope="session", params=named("t5", "mt5"))
def seq2seq(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """Each tiny T5 in turn."""
    return built_seq2seq(request.param, tmp_path_factory)


@pytest.fixture(scope="session", params=named("bart", "mbart"))
def bart_like(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """Each tiny BART and mBART in turn."""
    return built_seq2seq(request.param, tmp_path_factory)


@pytest.fixture(scope="session", params=named("marian"))
def marian_like(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """Each tiny Marian in turn."""
    return built_seq2seq(request.param, tmp_path_factory)


@pytest.fixture(scope="session")
def bart(tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """The BART: tied tables, 3 encoder heads and 5 decoder heads over a width of 30, unscaled embeddings."""
    return built_seq2seq("bart", tmp_path_factory)


@pytest.fixture(scope="session")
def mbart(tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """The mBART: pre-LN, scaled embeddings, ``en_XX`` after ``</s>``."""
    return built_seq2seq("mbart", tmp_path_factory)


@pytest.fixture(scope="session")
def marian(tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """The Marian: one shared table, scaled embeddings, SiLU (``swish``), pad 2 as the decoder's start."""
    return built_seq2seq("marian", tmp_path_factory)


@pytest.fixture(scope="session")
def t5(tmp_path_factory: pytest.TempPathFactory) -> Seq2SeqReference:
    """The T5: ReLU feed-forward, tied and scaled LM head, 3 heads of 8 over a width of 20."""
    return built_seq2seq("t5", tmp_path_factory)


def assert_two_stacks(model: Any) -> None:
    """An encoder of 2 layers (self-attention) and a decoder of 3 (causal self-attention, then cross-attention over
    the encoder's output), as the SEQ2SEQ sizes make them."""
    from attnx.models.stacks import AttentionKind

    encoder, decoder = model.stacks
    assert (encoder.name, encoder.layers, decoder.name, decoder.layers) == ("encoder", 2, "decoder", 3)
    assert [a.kind for a in encoder.attentions] == [AttentionKind.SELF]
    assert [(a.kind, a.queries, a.keys) for a in decoder.attentions] == [
        (AttentionKind.CAUSAL_SELF, "decoder", "decoder"),
        (AttentionKind.CROSS, "decoder", "encoder"),
    ]


def greedy_reference(reference: Seq2SeqReference, steps: int) -> tuple[Any, Any]:
    """transformers' greedy tokens (``generate(do_sample=False, num_beams=1)``, float64, eager) after the reference's
    source, ``[1, token]``, and its cross-attentions over them (per layer ``[1, head, token, source]``)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(reference.path, attn_implementation="eager",
                                                               dtype=torch.float64)  # fmt: skip
    source = torch.tensor([reference.source_ids])
    with torch.no_grad():
        ids = model.generate(source, max_new_tokens=steps, do_sample=False, num_beams=1)
        cross = model(input_ids=source, decoder_input_ids=ids, output_attentions=True).cross_attentions
    return ids, cross


def both_stacks(model: Any, source: Any, target: Any, on: Any) -> dict[str, list[np.ndarray]]:
    """attnx's weights of each kind per layer (``encoder``, ``decoder``, ``cross``), each block's output per stack
    (``encoder blocks``, ``decoder blocks``), the encoder's output (``memory``) and the logits, the encoder reading
    ``source`` (a text, its tokens or audio) and the decoder ``target`` (its tokens, teacher-forced)."""
    from attnx.models.stacks import Memory

    encoder, decoder = model.stacks
    found: dict[str, list[np.ndarray]] = {"encoder": [], "decoder": [], "cross": [], "encoder blocks": [],
                                          "decoder blocks": []}  # fmt: skip
    read = model.run(source, on=on, stack=encoder)
    for _ in range(encoder.layers):
        found["encoder"].append(read.step({"weights"}).weights)
        found["encoder blocks"].append(read.stream())
    memory = read.finish()
    written = model.run(target, on=on, stack=decoder, memory=Memory(memory, read.tokens))
    for _ in range(decoder.layers):
        found["decoder"].append(written.step({"weights"}).weights)
        found["cross"].append(written.step({"weights"}).weights)
        found["decoder blocks"].append(written.stream())
    found["memory"] = [memory]
    found["logits"] = [model.architecture.logits(written.finish())]
    return found


def assert_agrees(ours: dict[str, list[np.ndarray]], reference: Any, dtype: str) -> None:
    """Each kind's weights, each block's output, the encoder's output and the logits within ``dtype``'s tolerance of
    ``reference``'s (its ``attentions``, ``hidden``, ``memory`` and ``logits``)."""
    from tests.models.test_decoders import assert_close

    for kind in ("encoder", "decoder", "cross"):
        for mine, their in zip(ours[kind], reference.attentions[dtype][kind], strict=True):
            assert mine.shape == their.shape
            assert_close(mine, their, dtype)
    for stack in ("encoder", "decoder"):
        for mine, their in zip(ours[f"{stack} blocks"], reference.hidden[dtype][stack], strict=True):
            assert_close(mine, their, dtype)
    assert_close(ours["memory"][0], reference.memory[dtype], dtype)
    assert_close(ours["logits"][0], reference.logits[dtype], dtype)
