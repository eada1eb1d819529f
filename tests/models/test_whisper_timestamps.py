"""Whisper's token timestamps on the tiny checkpoint and its WAV, equal to transformers' on the same weights and audio:
``_extract_token_timestamps`` on a forward pass (teacher forcing) and ``generate(return_token_timestamps=True)``."""

from __future__ import annotations

import json
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx import workflows
from attnx.errors import ModelError
from attnx.io.audio import read_wav
from attnx.models import open_model
from attnx.models.generate import greedy
from attnx.workflows.timing import sequence_of
from tests.models.whisper_checkpoints import ALIGNMENT_HEADS, TARGET, WhisperReference

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def heard(reference: WhisperReference, dtype: Any) -> tuple[Any, Any, Any]:
    """transformers' model in ``dtype``, and the WAV's features and attention mask from its feature extractor."""
    model = transformers.WhisperForConditionalGeneration.from_pretrained(reference.path, attn_implementation="eager",
                                                                         dtype=dtype)  # fmt: skip
    extractor = transformers.WhisperFeatureExtractor.from_pretrained(reference.path)
    with wave.open(str(reference.wav)) as read:
        samples = np.frombuffer(read.readframes(read.getnframes()), dtype="<i2") / 32768.0
    inputs = extractor(samples.astype(np.float32), sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    return model, inputs.input_features.to(dtype), inputs.attention_mask


def forced_times(reference: WhisperReference, ids: list[int], prompt: int, dtype: Any) -> np.ndarray:
    """transformers' token timestamps of ``ids`` read teacher-forced (every token but the last, as generate reads
    them), the weights cut to the audio's frames (its attention mask)."""
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    model, features, mask = heard(reference, dtype)
    sequence = torch.tensor([ids])
    with torch.no_grad():
        out = model(input_features=features, decoder_input_ids=sequence[:, :-1], output_attentions=True)
    generated = GenerateEncoderDecoderOutput(sequences=sequence, cross_attentions=(out.cross_attentions,))
    found = model._extract_token_timestamps(generated, ALIGNMENT_HEADS, num_frames=mask.sum(-1), num_input_ids=prompt)
    return np.asarray(found[0].numpy(), dtype=np.float64)


class TestTokenTimestamps:
    def test_target_as_transformers(self, timed_whisper: WhisperReference) -> None:
        """The target's times (the prompt, the target, the end token) equal transformers' in float64 and float32."""
        with open_model(timed_whisper.path) as model:
            audio = model.encode_audio(read_wav(timed_whisper.wav).samples)
            sequence, prompt = sequence_of(model, TARGET, language="en")
            found = workflows.timestamps(model, audio, sequence, prompt)
        ours = np.array([token.end for token in found.tokens])  # a token's end: transformers' timestamp for it
        for dtype in (torch.float64, torch.float32):
            np.testing.assert_allclose(ours, forced_times(timed_whisper, list(map(int, sequence.ids)), prompt, dtype),
                                       rtol=0, atol=1e-6)  # fmt: skip
        assert ours.tolist() == [0.0] * 5 + [1.22, 1.24, 1.38, 1.4, 3.48, 3.48]  # measured: the times move
        assert found.heads == ((1, 1), (1, 2), (2, 0)) and found.width == 7 and found.positions == 175  # 3.5 s of audio
        assert [(w.text, w.start, w.end) for w in found.words] == [("the", 0.0, 0.0), ("cat", 0.0, 1.22),
            ("sat", 1.22, 1.24), ("on", 1.24, 1.38), ("the", 1.38, 1.4), ("mat", 1.4, 3.48)]  # fmt: skip
        assert [t.start for t in found.tokens] == [0.0, *ours[:-1].tolist()]

    def test_generate_as_transformers(self, timed_whisper: WhisperReference) -> None:
        """What greedy decoding writes, timed, equals ``generate(..., return_token_timestamps=True)``: its tokens and
        their times."""
        model, features, mask = heard(timed_whisper, torch.float32)
        out = model.generate(features, attention_mask=mask, language="en", return_token_timestamps=True,
                             return_dict_in_generate=True, max_new_tokens=6)  # fmt: skip
        with open_model(timed_whisper.path) as ours:
            audio = ours.encode_audio(read_wav(timed_whisper.wav).samples)
            written = greedy(ours, audio, 6, prompt=ours.decoder_prompt(language="en"))
            assert list(written.ids) == out["sequences"][0].tolist()
            sequence = ours.tokenizer.of_ids(written.ids, written.prompt)
            found = workflows.timestamps(ours, audio, sequence, written.prompt)
        times = [t.end for t in found.tokens]
        np.testing.assert_allclose(times, out["token_timestamps"][0].numpy(), rtol=0, atol=1e-6)
        assert times[-1] > 0  # measured: 3.48 s

    @pytest.mark.parametrize(("spoken", "moves"), [("the cat sat on the mat.", True),
                                                   ("the cat sat on the mat, (the end).", False)])  # fmt: skip
    def test_words_as_the_pipeline(self, timed_whisper: WhisperReference, spoken: str, moves: bool) -> None:
        """The words and their times equal the word chunks of transformers' speech-recognition pipeline
        (``WhisperTokenizer._decode_asr``, ``return_timestamps="word"``) given transformers' token timestamps:
        a token spans the timestamp of the token before it to its own; punctuation stays with its word."""
        with open_model(timed_whisper.path) as model:
            audio = model.encode_audio(read_wav(timed_whisper.wav).samples)
            sequence, prompt = sequence_of(model, spoken, language="en")
            found = workflows.timestamps(model, audio, sequence, prompt)
        ids = list(map(int, sequence.ids))
        times = forced_times(timed_whisper, ids, prompt, torch.float64)
        tokenizer = transformers.WhisperTokenizer(tokenizer_file=str(timed_whisper.path / "tokenizer.json"))
        text = slice(prompt, len(ids) - 1)  # the text's tokens: the first starts at 0, as after the prompt's
        outputs = [{"tokens": torch.tensor([ids[text]]), "token_timestamps": torch.tensor(times[None, text])}]
        _, chunks = tokenizer._decode_asr(outputs, return_timestamps="word", return_language=False,
                                          time_precision=0.02)  # fmt: skip
        theirs = [(chunk["text"].strip(), *chunk["timestamp"]) for chunk in chunks["chunks"]]
        ours = [(word.text, word.start, word.end) for word in found.words]
        assert [word for word, _, _ in ours] == [word for word, _, _ in theirs] == spoken.split()
        np.testing.assert_allclose([t for _, *pair in ours for t in pair], [t for _, *pair in theirs for t in pair],
                                   rtol=0, atol=1e-6)  # fmt: skip
        assert (len({end for _, _, end in ours}) > 3) is moves  # measured: the times move on the first

    def test_no_alignment_heads(self, whisper: WhisperReference) -> None:
        """A generation config naming no alignment heads: one line saying what is missing."""
        with open_model(whisper.path) as model:
            audio = model.encode_audio(read_wav(whisper.wav).samples)
            sequence, prompt = sequence_of(model, TARGET, language="en")
            with pytest.raises(ModelError, match="names no alignment_heads: word timestamps need the"):
                workflows.timestamps(model, audio, sequence, prompt)

    @pytest.mark.parametrize(("heads", "msg"), [([[3, 0]], "names decoder layer 3; the model's decoder layers are "
                             "0 to 2"), ([[0, 3]], "names head 3; the model's heads are 0 to 2"),
                             ([1, 2], "must be a list of [layer, head] pairs")])  # fmt: skip
    def test_bad_alignment_heads(self, timed_whisper: WhisperReference, tmp_path: Path, heads: Any, msg: str) -> None:
        """Alignment heads the model does not have are refused, naming the one."""
        import shutil

        path = tmp_path / "whisper"
        shutil.copytree(timed_whisper.path, path)
        config = path / "generation_config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "alignment_heads": heads}))
        with open_model(path) as model, pytest.raises(ModelError, match=msg.replace("[", r"\[")):
            model.architecture.alignment_heads()  # type: ignore[attr-defined]
