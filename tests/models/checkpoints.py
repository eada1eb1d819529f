"""Fixtures: tiny random BERT and GPT-2 checkpoints built with transformers, and their reference attentions.

Nothing is downloaded: the weights are random (biases and LayerNorms too, so every term is
exercised), saved with safetensors, and the tokenizers are trained on a few sentences.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.engines.conftest import engine  # noqa: F401  (the engine fixture: numpy, and torch when installed)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "and", "it", "was", "tired", "because"]
SENTENCES = ["the cat sat on the mat", "a dog ran far away", "and it was tired because the dog ran"]
TEXT = "the cat sat on the mat because it was tired"
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


@dataclass(frozen=True)
class Reference:
    """A checkpoint folder and what transformers computes on TEXT: ids, attentions, hidden states."""

    path: Path
    ids: list[int]
    attentions: list[np.ndarray]  # per layer, [head, query, key]
    hidden: list[np.ndarray]  # per layer, the hidden state entering it, [query, d_model]
    x: list[np.ndarray]  # per layer, the attention's input (GPT-2: ln_1 of the hidden state)


def bert_tokenizer(padded: bool = False):
    """A WordLevel tokenizer with [CLS] ... [SEP]; ``padded`` stores padding to 24 and truncation to 6."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate([*BERT_SPECIALS, *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    if padded:
        tokenizer.enable_padding(length=24, pad_id=0, pad_token="[PAD]")
        tokenizer.enable_truncation(max_length=6)
    return tokenizer


def gpt2_tokenizer():
    """A byte-level BPE tokenizer trained on SENTENCES (GPT-2 style: no special tokens around a text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(SENTENCES * 4, trainer)
    return tokenizer


def randomise(model) -> None:
    """Biases and LayerNorm weights away from their 0 and 1 defaults, so that they matter."""
    import torch

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
            elif "LayerNorm.weight" in name or ".ln_" in name:
                p.copy_(1 + torch.randn(p.shape, generator=generator) * 0.1)


def reference(path: Path, model, ids: list[int], x_of=None) -> Reference:
    """Run ``model`` (eager attention) on ``ids`` with transformers and keep what the tests compare."""
    import torch

    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
        hidden = [h[0] for h in out.hidden_states[:-1]]
        x = [x_of(layer, h) if x_of else h for layer, h in enumerate(hidden)]
    return Reference(
        path,
        ids,
        [a[0].numpy() for a in out.attentions],
        [h.numpy() for h in hidden],
        [t.numpy() for t in x],
    )


def build_bert(path: Path, *, prefixed: bool = True, padded: bool = False, dtype: str = "float32") -> Reference:
    """A 3-layer, 4-head, d_model 32 BERT (with the ``bert.`` prefix when ``prefixed``) and its reference."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    tokenizer = bert_tokenizer(padded)
    config = transformers.BertConfig(
        vocab_size=len(BERT_SPECIALS) + len(WORDS), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=16, initializer_range=0.2,
    )  # fmt: skip
    model = (transformers.BertForMaskedLM if prefixed else transformers.BertModel)(config)
    randomise(model)
    model.to(getattr(torch, dtype)).save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    ids = tokenizer.encode(TEXT).ids
    loaded = transformers.BertModel.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    return reference(path, loaded, ids)


def build_gpt2(path: Path, *, prefixed: bool = True, **options: object) -> Reference:
    """A 3-layer, 4-head, d_model 32 GPT-2 (``transformer.`` prefix when ``prefixed``) and its reference."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    tokenizer = gpt2_tokenizer()
    size = tokenizer.get_vocab_size()
    config = transformers.GPT2Config(
        vocab_size=size, n_embd=32, n_layer=3, n_head=4, n_positions=16, initializer_range=0.2,
        bos_token_id=0, eos_token_id=0, **options,
    )  # fmt: skip
    model = (transformers.GPT2LMHeadModel if prefixed else transformers.GPT2Model)(config)
    randomise(model)
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    ids = tokenizer.encode(TEXT).ids
    loaded = transformers.GPT2Model.from_pretrained(path, attn_implementation="eager")
    return reference(path, loaded, ids, x_of=lambda layer, h: loaded.h[layer].ln_1(h))


@pytest.fixture(scope="session")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """A BERT saved as BertForMaskedLM (tensors under ``bert.``), its tokenizer storing padding and truncation."""
    return build_bert(tmp_path_factory.mktemp("bert"), padded=True)


@pytest.fixture(scope="session")
def bert_bare(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """A BERT saved as BertModel (tensors without a prefix)."""
    return build_bert(tmp_path_factory.mktemp("bert-bare"), prefixed=False)


@pytest.fixture(scope="session")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """A GPT-2 saved as GPT2LMHeadModel (tensors under ``transformer.``)."""
    return build_gpt2(tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def gpt2_variant(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """A bare GPT-2 with exact GELU and attention scaled by 1/(layer + 1) as well."""
    return build_gpt2(
        tmp_path_factory.mktemp("gpt2-variant"), prefixed=False, activation_function="gelu",
        scale_attn_by_inverse_layer_idx=True,
    )  # fmt: skip


@pytest.fixture(params=["bert", "bert_bare", "gpt2", "gpt2_variant"])
def checkpoint(request: pytest.FixtureRequest) -> Reference:
    """Each tiny checkpoint in turn."""
    return request.getfixturevalue(request.param)
