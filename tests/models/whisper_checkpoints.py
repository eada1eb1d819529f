"""Fixtures: a tiny random Whisper built with transformers, a WAV of synthetic speech-like audio, and what
transformers computes on them.

The config exercises what Whisper differs in: 80 mel bins over the full 30-s window (1500 encoder positions), odd
heads (3 of 8 over a width of 24), more decoder layers than encoder layers, learned decoder positions, a tied
``proj_out``; the tokenizer is a GPT-2-style byte BPE with Whisper's special tokens added, the prompt
``<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>`` taken from generation_config.json.
"""

from __future__ import annotations

import contextlib
import json
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.models.checkpoints import SENTENCES, TEXT
from tests.models.decoders import float64_everywhere, randomise

TARGET = "the cat sat on the mat"
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|fr|>", "<|translate|>", "<|transcribe|>",
            "<|notimestamps|>"]  # fmt: skip
WHISPER_SIZES = {"d_model": 24, "encoder_layers": 2, "decoder_layers": 3, "encoder_attention_heads": 3,
                 "decoder_attention_heads": 3, "encoder_ffn_dim": 40, "decoder_ffn_dim": 40, "num_mel_bins": 80,
                 "max_source_positions": 1500, "max_target_positions": 32}  # fmt: skip


def whisper_tokenizer() -> Any:
    """A byte-level BPE trained on the test sentences, Whisper's special tokens added after its vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    tokenizer.train_from_iterator([*SENTENCES, TEXT, TARGET] * 4, trainer)
    tokenizer.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in SPECIALS])
    return tokenizer


def generation_config(tokenizer: Any) -> dict[str, Any]:
    """generation_config.json as the Hub's multilingual Whisper folders have it (its token ids this vocabulary's)."""
    ids = {name: tokenizer.token_to_id(name) for name in SPECIALS}
    return {
        "decoder_start_token_id": ids["<|startoftranscript|>"], "eos_token_id": ids["<|endoftext|>"],
        "pad_token_id": ids["<|endoftext|>"], "bos_token_id": ids["<|endoftext|>"], "is_multilingual": True,
        "lang_to_id": {"<|en|>": ids["<|en|>"], "<|fr|>": ids["<|fr|>"]},
        "task_to_id": {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        "no_timestamps_token_id": ids["<|notimestamps|>"], "max_length": 32,
        "forced_decoder_ids": [[1, None], [2, ids["<|transcribe|>"]]], "begin_suppress_tokens": [],
    }  # fmt: skip


def speech(seconds: float = 3.5, rate: int = 16000) -> np.ndarray:
    """Speech-like audio: two gliding tones under a syllable-rate envelope, with a little noise (float32)."""
    t = np.arange(int(seconds * rate)) / rate
    voiced = np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 0.7 * t)) * t) + 0.4 * np.sin(2 * np.pi * 1200 * t)
    envelope = 0.5 * (1 + np.sin(2 * np.pi * 4 * t)) * np.exp(-((t - seconds / 2) ** 2))
    noise = np.random.default_rng(3).normal(0, 0.02, len(t))
    return (0.3 * voiced * envelope + noise).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray, rate: int = 16000) -> Path:
    """``samples`` in [-1, 1] as a 16-bit PCM mono WAV, written by the standard library's ``wave``."""
    ints = np.clip(np.round(samples * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(ints.tobytes())
    return path


def numpy_features(extractor: Any, samples: np.ndarray) -> np.ndarray:
    """``extractor(samples)`` on its NumPy path (the reference; with torch installed it would take torch's STFT)."""
    from unittest import mock

    from transformers.models.whisper import feature_extraction_whisper

    with mock.patch.object(feature_extraction_whisper, "is_torch_available", lambda: False):
        return extractor(samples, sampling_rate=16000, return_tensors="np").input_features[0]


@dataclass(frozen=True)
class WhisperReference:
    """A checkpoint folder, its WAV and what transformers computes on the WAV's features and the prompt + TARGET
    per dtype: each kind's weights per layer, each block's output per stack, the encoder's output and the logits."""

    path: Path
    wav: Path
    features: np.ndarray  # (80, 3000), float32: transformers' feature extractor on the WAV's samples
    decoder_ids: list[int]
    attentions: dict[str, dict[str, list[np.ndarray]]]
    hidden: dict[str, dict[str, list[np.ndarray]]]
    memory: dict[str, np.ndarray]
    logits: dict[str, np.ndarray]


def run_whisper(path: Path, features: np.ndarray, target: list[int], dtype: str) -> tuple[Any, ...]:
    """transformers' attentions of the three kinds, each block's output, the encoder's output and the logits."""
    import torch
    import transformers

    wide = dtype == "float64"
    torch_dtype = torch.float64 if wide else torch.float32
    model = transformers.WhisperForConditionalGeneration.from_pretrained(path, attn_implementation="eager",
                                                                         dtype=torch_dtype)  # fmt: skip
    model.eval()
    blocks: dict[str, list[np.ndarray]] = {"encoder": [], "decoder": []}

    def keep(name: str) -> Any:
        return lambda _m, _i, out: blocks[name].append((out[0] if isinstance(out, tuple) else out)[0].numpy().copy())

    hooks = [layer.register_forward_hook(keep(name)) for name in blocks for layer in getattr(model.model, name).layers]
    with float64_everywhere() if wide else contextlib.nullcontext(), torch.no_grad():
        out = model(input_features=torch.tensor(features[None], dtype=torch_dtype),
                    decoder_input_ids=torch.tensor([target]), output_attentions=True)  # fmt: skip
    for hook in hooks:
        hook.remove()
    kinds = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    attentions = {kind: [a[0].numpy() for a in found] for kind, found in kinds.items()}
    return attentions, blocks, out.encoder_last_hidden_state[0].numpy(), out.logits[0].numpy()


def build_whisper(path: Path) -> WhisperReference:
    """Save a random tiny Whisper with its tokenizer, configs and a WAV in ``path``; run transformers on it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    tokenizer = whisper_tokenizer()
    generation = generation_config(tokenizer)
    start = generation["decoder_start_token_id"]
    config = transformers.WhisperConfig(vocab_size=tokenizer.get_vocab_size(), decoder_start_token_id=start,
                                        pad_token_id=generation["pad_token_id"], eos_token_id=generation["eos_token_id"],
                                        bos_token_id=generation["bos_token_id"], init_std=0.2,
                                        **WHISPER_SIZES)  # fmt: skip
    model = transformers.WhisperForConditionalGeneration(config)
    randomise(model)
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "generation_config.json").write_text(json.dumps(generation))
    extractor = transformers.WhisperFeatureExtractor(feature_size=80)
    extractor.save_pretrained(path)
    wav = write_wav(path / "speech.wav", speech())
    with wave.open(str(wav)) as read:
        samples = np.frombuffer(read.readframes(read.getnframes()), dtype="<i2") / 32768.0
    features = numpy_features(extractor, samples.astype(np.float32))
    ids = generation
    prompt = [start, ids["lang_to_id"]["<|en|>"], ids["task_to_id"]["transcribe"], ids["no_timestamps_token_id"]]
    decoder = [*prompt, *tokenizer.encode(TARGET).ids]
    attentions, hidden, memory, logits = {}, {}, {}, {}
    for dtype in ("float32", "float64"):
        attentions[dtype], hidden[dtype], memory[dtype], logits[dtype] = run_whisper(path, features, decoder, dtype)
    return WhisperReference(path, wav, features, decoder, attentions, hidden, memory, logits)


@pytest.fixture(scope="session")
def whisper(tmp_path_factory: pytest.TempPathFactory) -> WhisperReference:
    """The tiny Whisper, built once per session."""
    return build_whisper(tmp_path_factory.mktemp("whisper"))


ALIGNMENT_HEADS = [[1, 1], [1, 2], [2, 0]]  # heads of the tiny Whisper whose times move on its WAV (most stay at 0 s)


@pytest.fixture(scope="session")
def timed_whisper(whisper: WhisperReference, tmp_path_factory: pytest.TempPathFactory) -> WhisperReference:
    """The tiny Whisper's folder copied, its generation_config.json naming ``ALIGNMENT_HEADS`` and forcing no tokens
    (so that greedy decoding runs as transformers' with ``language="en"``)."""
    import shutil

    path = tmp_path_factory.mktemp("timed") / "whisper"
    shutil.copytree(whisper.path, path)
    config = path / "generation_config.json"
    generation = json.loads(config.read_text())
    generation.pop("forced_decoder_ids")
    config.write_text(json.dumps({**generation, "alignment_heads": ALIGNMENT_HEADS}))
    return WhisperReference(path, path / whisper.wav.name, whisper.features, whisper.decoder_ids, whisper.attentions,
                            whisper.hidden, whisper.memory, whisper.logits)  # fmt: skip
