"""Fixtures: tiny random checkpoints saved by transformers' task classes (``BertForSequenceClassification``,
``LlamaForQuestionAnswering``, …), one per class of every family attnx reads, without a reference run.

``task_classes()`` lists, from transformers itself, every class whose name is one of a family's (``Family.names``):
its ``*For*``, ``*LMHeadModel`` and ``*DoubleHeadsModel`` classes, less those built on another model_type (Gemma 3's
multimodal ``Gemma3ForSequenceClassification`` reads a ``gemma3`` config, which attnx refuses). Each family's config
is its first ``Variant`` of ``tests.models.decoders`` or ``Seq2SeqVariant`` of ``tests.models.encoder_decoders``
(BERT's and GPT-2's as ``tests.models.checkpoints`` builds them).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest

from attnx.models.families import FAMILIES
from tests.models.checkpoints import BERT_SPECIALS, WORDS, bert_tokenizer, gpt2_tokenizer
from tests.models.decoders import SIZES, VARIANTS
from tests.models.encoder_decoders import SEQ2SEQ
from tests.models.vision_checkpoints import save_vit
from tests.models.whisper_checkpoints import WHISPER_SIZES

TASK_CLASS = re.compile(r"\w+(?:For[A-Z]\w*|LMHeadModel|DoubleHeadsModel)")


@functools.cache
def task_classes() -> tuple[tuple[str, str], ...]:
    """``(model_type, class name)`` of every transformers task class of a family attnx reads, in FAMILIES' order:
    the classes of its auto mappings (``MODEL_FOR_…_MAPPING_NAMES``, by model_type, without importing a model), and
    the family's other classes by name (GPT2DoubleHeadsModel) unless mapped only under other model_types."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto import modeling_auto

    mapped: dict[str, set[str]] = {}  # class -> the model_types mapped to it
    for mapping in (getattr(modeling_auto, n) for n in dir(modeling_auto) if n.endswith("_MAPPING_NAMES")):
        for model_type, classes in mapping.items() if isinstance(mapping, dict) else ():
            for name in classes if isinstance(classes, (list, tuple)) else (classes,):
                mapped.setdefault(name, set()).add(model_type)
    found = []
    for family in FAMILIES:
        names = {n for n in (*dir(transformers), *mapped) if TASK_CLASS.fullmatch(n) and family.names(n)}
        found += [(family.name, n) for n in sorted(names) if family.name in mapped.get(n, {family.name})]
    return tuple(found)


def family_config(model_type: str, vocab_size: int) -> Any:
    """A tiny config of ``model_type``: hidden 32, 2 or 3 layers, its decoder variant's settings."""
    transformers = pytest.importorskip("transformers")
    if model_type == "bert":
        return transformers.BertConfig(
            vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=16, initializer_range=0.2,
        )  # fmt: skip
    if model_type == "gpt2":
        return transformers.GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4, n_positions=16,
                                       initializer_range=0.2, bos_token_id=0, eos_token_id=0)  # fmt: skip
    if model_type == "whisper":
        return transformers.WhisperConfig(vocab_size=vocab_size, decoder_start_token_id=1, pad_token_id=0,
                                          eos_token_id=0, bos_token_id=0, **WHISPER_SIZES)  # fmt: skip
    seq2seq = next((v for v in SEQ2SEQ.values() if v.family == model_type and not v.own_head), None)
    if seq2seq is not None:  # its first variant; T5's token ids where it gives none
        tokens = {"decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
        return transformers.AutoConfig.for_model(model_type, vocab_size=vocab_size, **{**tokens, **seq2seq.config})
    variant = next(v for v in VARIANTS.values() if v.family == model_type)
    return transformers.AutoConfig.for_model(
        model_type, vocab_size=vocab_size, initializer_range=0.2, **SIZES, **variant.config
    )


def save_task(path: Path, model_type: str, class_name: str) -> Path:
    """Save a random ``class_name`` of ``model_type`` (float32) with a tokenizer into ``path`` (ViT's randomised, with
    a preprocessor_config.json instead)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    if model_type == "vit":  # an image model: a preprocessor_config.json, no tokenizer
        return save_vit(path, class_name)
    torch.manual_seed(0)
    tokenizer = bert_tokenizer() if model_type == "bert" else gpt2_tokenizer()
    size = len(BERT_SPECIALS) + len(WORDS) if model_type == "bert" else tokenizer.get_vocab_size()
    model = getattr(transformers, class_name)(family_config(model_type, size))
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    return path
