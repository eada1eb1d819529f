"""Whisper against transformers: the log-mel features, the decoder's prompt, and every layer of both stacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.engines.placement import Placement
from attnx.errors import ModelError
from attnx.io.audio import read_wav
from attnx.models import Model, open_model
from attnx.models.audio import LENGTH, audio_input, log_mel, mel_filters
from attnx.models.families.whisper import prompt_ids
from attnx.models.stacks import AttentionKind, InputKind, Memory
from tests.models.encoder_decoders import assert_agrees, both_stacks
from tests.models.test_decoders import assert_close
from tests.models.whisper_checkpoints import TARGET, WhisperReference, numpy_features, speech


def encoder_decoder(model: Model, wav: Path, on: Placement) -> dict[str, list[np.ndarray]]:
    """``both_stacks`` on the WAV and the prompt + TARGET in English."""
    heard = model.encode_audio(read_wav(wav).samples)
    return both_stacks(model, heard, model.encode_target(TARGET, language="en"), on)


def extractor(bins: int) -> Any:
    """transformers' WhisperFeatureExtractor with ``bins`` mel bins."""
    transformers = pytest.importorskip("transformers")
    return transformers.WhisperFeatureExtractor(feature_size=bins)


SOUNDS = {
    "noise": lambda: np.random.default_rng(0).normal(0, 0.3, 16000 * 7).astype(np.float32),
    "sine": lambda: (0.5 * np.sin(2 * np.pi * 440 * np.arange(16000 * 3) / 16000)).astype(np.float32),
    "speech": lambda: speech(),
}


class TestFeatures:
    @pytest.mark.parametrize("bins", [80, 128])
    @pytest.mark.parametrize("sound", list(SOUNDS))
    def test_as_the_feature_extractor(self, bins: int, sound: str) -> None:
        """The features equal WhisperFeatureExtractor's NumPy path (its reference) within 1e-5 (measured: 0.0)."""
        samples = SOUNDS[sound]()
        ours, theirs = log_mel(samples, bins), numpy_features(extractor(bins), samples)
        assert ours.shape == theirs.shape == (bins, 3000) and ours.dtype == np.float32
        assert np.abs(ours - theirs).max() <= 1e-5

    @pytest.mark.parametrize("bins", [80, 128])
    def test_torch_path_close(self, bins: int) -> None:
        """With torch installed the extractor takes torch's float32 STFT: within 5e-5 of ours (measured 2.4e-5)."""
        pytest.importorskip("torch")
        samples = SOUNDS["sine"]()
        theirs = extractor(bins)(samples, sampling_rate=16000, return_tensors="np").input_features[0]
        assert np.abs(log_mel(samples, bins) - theirs).max() <= 5e-5

    @pytest.mark.parametrize("bins", [80, 128])
    def test_mel_filters(self, bins: int) -> None:
        """The Slaney filter bank equals the extractor's, value for value."""
        np.testing.assert_array_equal(mel_filters(bins), extractor(bins).mel_filters)

    def test_long_audio_is_cut_with_a_warning(self) -> None:
        """Audio past 30 s is cut to the window, as the extractor cuts it, and a warning says so."""
        samples = np.random.default_rng(1).normal(0, 0.2, LENGTH + 16000 * 5).astype(np.float32)
        found = audio_input(samples, 80, 1500)
        assert found.warnings == ("the audio lasts 35.00 s; Whisper reads 30 s: the rest is cut, as transformers' "
                                  "feature extractor cuts it",)  # fmt: skip
        assert found.seconds == 30.0
        assert np.abs(found.features - numpy_features(extractor(80), samples)).max() <= 1e-5

    def test_positions_are_times(self) -> None:
        """The encoder's 1500 positions are labelled by the time each starts at, 20 ms apart."""
        found = audio_input(np.zeros(16000, dtype=np.float32), 80, 1500)
        assert found.tokens[:3] == ("0.00s", "0.02s", "0.04s") and found.tokens[-1] == "29.98s"
        assert found.kind is InputKind.AUDIO and not any(found.special) and found.warnings == ()


class TestAgreement:
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_every_layer_every_kind(self, whisper: WhisperReference, dtype: str) -> None:
        """From the WAV: the encoder's self-attention, the decoder's causal self-attention and cross-attention, each
        block's output, the encoder's output and the logits equal transformers' (1e-5 float32, 1e-10 float64)."""
        with open_model(whisper.path, dtype) as model:
            ours = encoder_decoder(model, whisper.wav, Placement())
        assert [len(ours[kind]) for kind in ("encoder", "decoder", "cross")] == [2, 3, 3]
        assert ours["cross"][0].shape == (3, len(whisper.decoder_ids), 1500)
        assert_agrees(ours, whisper, dtype)

    def test_torch_engine(self, whisper: WhisperReference) -> None:
        """On the torch engine the three kinds and the logits agree with transformers too (float32)."""
        pytest.importorskip("torch")
        with open_model(whisper.path, "float32") as model:
            ours = encoder_decoder(model, whisper.wav, Placement("torch"))
        for kind in ("encoder", "decoder", "cross"):
            for mine, their in zip(ours[kind], whisper.attentions["float32"][kind], strict=True):
                assert_close(mine, their, "float32")
        assert_close(ours["logits"][0], whisper.logits["float32"], "float32")

    def test_features_from_the_wav(self, whisper: WhisperReference) -> None:
        """The WAV read by attnx gives the very features transformers' extractor makes of its samples."""
        with open_model(whisper.path) as model:
            found = model.encode_audio(read_wav(whisper.wav).samples)
        np.testing.assert_array_equal(found.features, whisper.features)


def generated_prompt(path: Path, features: np.ndarray, **settings: str) -> list[int]:
    """The decoder's first input ids when transformers' ``generate`` runs (a hook on the decoder)."""
    import torch
    import transformers

    model = transformers.WhisperForConditionalGeneration.from_pretrained(path)
    seen: list[list[int]] = []
    hook = model.model.decoder.register_forward_pre_hook(
        lambda _m, _args, kwargs: seen.append(kwargs["input_ids"][0].tolist()), with_kwargs=True
    )
    model.generate(torch.tensor(features[None]), max_new_tokens=1, do_sample=False, num_beams=1, **settings)
    hook.remove()
    return seen[0]


class TestPrompt:
    @pytest.mark.parametrize(("language", "task"), [("en", "transcribe"), ("en", None), ("fr", "translate")])
    def test_as_generate_starts(self, whisper: WhisperReference, language: str, task: str | None) -> None:
        """The prompt is what transformers' generate feeds the decoder first for the same language and task."""
        pytest.importorskip("torch")
        settings = {"language": language, **({"task": task} if task else {})}
        with open_model(whisper.path) as model:
            ours = model.architecture.prompt(language=language, task=task)
        assert ours == generated_prompt(whisper.path, whisper.features, **settings)

    def test_as_the_tokenizer(self, whisper: WhisperReference) -> None:
        """The teacher-forced ids equal WhisperTokenizer's (language en, transcribe) for the target, less its end
        token: ``<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>`` then the text."""
        transformers = pytest.importorskip("transformers")
        tokenizer = transformers.WhisperTokenizer.from_pretrained(whisper.path, language="en", task="transcribe")
        with open_model(whisper.path) as model:
            found = model.encode_target(TARGET, language="en")
        assert found.ids.tolist() == tokenizer(TARGET).input_ids[:-1] == whisper.decoder_ids
        assert found.tokens[:4] == ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")
        assert found.special == (True,) * 4 + (False,) * (len(found.ids) - 4)

    def test_a_multilingual_model_needs_a_language(self, whisper: WhisperReference) -> None:
        """Without a language, a multilingual model is refused: transformers would detect one by running it."""
        with open_model(whisper.path) as model, pytest.raises(ModelError, match="needs a language"):
            model.encode_target(TARGET)

    def test_forced_decoder_ids(self) -> None:
        """An English-only config's ``forced_decoder_ids`` give the prompt where no language or task is named."""
        config = {"decoder_start_token_id": 9, "forced_decoder_ids": [[1, 4], [2, 5]], "no_timestamps_token_id": 6}
        assert prompt_ids(config, 10) == [9, 4, 5, 6]
        assert prompt_ids({**config, "no_timestamps_token_id": 5}, 10) == [9, 4, 5]

    def test_unknown_language(self, whisper: WhisperReference) -> None:
        """A language the generation config does not hold is one ModelError naming what it holds."""
        with open_model(whisper.path) as model, pytest.raises(ModelError, match=r"no '<\|de\|>'.*<\|en\|>"):
            model.encode_target(TARGET, language="de")


class TestShape:
    def test_two_stacks_three_kinds(self, whisper: WhisperReference) -> None:
        """An encoder over audio (self-attention) and a decoder over text (causal self, then cross-attention)."""
        with open_model(whisper.path) as model:
            encoder, decoder = model.stacks
            info = model.info()
        assert (encoder.name, encoder.layers, encoder.reads) == ("encoder", 2, InputKind.AUDIO)
        assert (decoder.name, decoder.layers, decoder.reads) == ("decoder", 3, InputKind.TEXT)
        assert [a.kind for a in decoder.attentions] == [AttentionKind.CAUSAL_SELF, AttentionKind.CROSS]
        assert (info.architecture, info.heads, info.d_model, info.tied_embeddings) == ("whisper", 3, 24, True)

    def test_a_stack_reads_its_own_kind(self, whisper: WhisperReference) -> None:
        """Text into the encoder, or audio into the decoder, is a ModelError before anything runs."""
        with open_model(whisper.path) as model:
            encoder, decoder = model.stacks
            audio = model.encode_audio(np.zeros(1600, dtype=np.float32))
            with pytest.raises(ModelError, match="its encoder reads audio, not text"):
                model.run(TARGET, stack=encoder)
            with pytest.raises(ModelError, match="its decoder reads text, not audio"):
                model.run(audio, stack=decoder, memory=Memory(np.zeros((1500, 24)), audio.tokens))

    def test_cross_attention_keys_are_times(self, whisper: WhisperReference) -> None:
        """The cross-attention's keys are the encoder's positions, labelled by time."""
        with open_model(whisper.path) as model:
            encoder, decoder = model.stacks
            source = model.run(model.encode_audio(read_wav(whisper.wav).samples), stack=encoder)
            memory = Memory(source.finish(), source.tokens)
            target = model.run(model.encode_target(TARGET, language="en"), stack=decoder, memory=memory)
            target.step()
            spec = target.spec()
        assert spec.key_tokens[:2] == ("0.00s", "0.02s") and len(spec.key_tokens) == 1500
        assert spec.source.endswith("decoder layer 0 of 3, cross-attention")

    def test_an_extractor_attnx_does_not_compute(self, whisper: WhisperReference, tmp_path: Path) -> None:
        """A preprocessor_config.json asking for another hop (or mel bins the model does not read) is refused."""
        folder = Path(shutil.copytree(whisper.path, tmp_path / "copy"))
        config = json.loads((folder / "preprocessor_config.json").read_text())
        (folder / "preprocessor_config.json").write_text(json.dumps({**config, "hop_length": 200}))
        with open_model(folder) as model, pytest.raises(ModelError, match="hop_length 200 is not what attnx computes"):
            model.encode_audio(np.zeros(1600, dtype=np.float32))
        (folder / "preprocessor_config.json").write_text(json.dumps({**config, "feature_size": 128}))
        with open_model(folder) as model, pytest.raises(ModelError, match="feature_size 128 differs"):
            model.encode_audio(np.zeros(1600, dtype=np.float32))

    def test_claimed_mel_bins_checked(self, whisper: WhisperReference, tmp_path: Path) -> None:
        """A config.json claiming mel bins the convolution does not read is refused when the model opens."""
        folder = Path(shutil.copytree(whisper.path, tmp_path / "copy"))
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "num_mel_bins": 128}))
        with pytest.raises(ModelError, match=r"'model.encoder.conv1.weight' has shape \(24, 80, 3\)"):
            open_model(folder)

    def test_a_text_model_reads_no_audio(self, t5: Any) -> None:
        """A model without a stack over audio refuses audio in one line."""
        with open_model(t5.path) as model, pytest.raises(ModelError, match="reads text, not audio"):
            model.encode_audio(np.zeros(1600, dtype=np.float32))
