"""`attnx align --audio --timestamps`: a Whisper's words with their times, as a table and as JSON, and the refusals."""

from __future__ import annotations

import json

import pytest

from attnx.render.serialize import FORMAT_VERSION
from tests.models.whisper_checkpoints import TARGET, WhisperReference
from tests.runner import Outcome, run_attnx


def invoke(*args: str, code: int = 0) -> Outcome:
    """`attnx ARGS` piped, 80 columns wide, which must exit with ``code``."""
    result = run_attnx(*args, env={"COLUMNS": "80"})
    assert result.code == code, result.stderr
    return result


def timed(reference: WhisperReference, *args: str, code: int = 0) -> Outcome:
    """`align --timestamps` on the WAV in English."""
    return invoke("align", "--model", str(reference.path), "--audio", str(reference.wav), "--language", "en",
                  "--timestamps", *args, code=code)  # fmt: skip


class TestTimestamps:
    def test_table(self, timed_whisper: WhisperReference) -> None:
        """Each word with its start and end: the times tests/models/test_whisper_timestamps.py finds transformers'
        (a token ends at transformers' timestamp for it and starts where the one before it ends)."""
        out = timed(timed_whisper, "--target", TARGET + ".").stdout
        assert out.splitlines()[:10] == [
            "Word timestamps from the alignment heads (L1 H1, L1 H2, L2 H0), the first 3.50 s",
            "of audio",
            "#  word  start   end",
            "────────────────────",
            "0  the    0.00  0.00",
            "1  cat    0.00  1.24",
            "2  sat    1.24  1.24",
            "3  on     1.24  1.38",
            "4  the    1.38  1.38",
            "5  mat.   1.38  3.48",
        ]

    def test_json(self, timed_whisper: WhisperReference) -> None:
        """JSON: the alignment heads, every token of the sequence (prompt and end token included) with transformers'
        time, and the words with their tokens."""
        data = json.loads(timed(timed_whisper, "--target", TARGET, "--format", "json").stdout)
        assert data["format_version"] == FORMAT_VERSION and data["model"] == str(timed_whisper.path)
        assert data["alignment_heads"] == [[1, 1], [1, 2], [2, 0]] and data["median_filter_width"] == 7
        assert data["time_precision"] == 0.02 and data["audio_positions"] == 175 and data["written"] == []
        ends = [token["end"] for token in data["tokens"]]  # transformers' token timestamps
        assert ends == [0.0] * 5 + [1.22, 1.24, 1.38, 1.4, 3.48, 3.48]
        assert [token["start"] for token in data["tokens"]] == [0.0, *ends[:-1]]
        assert data["tokens"][0]["token"] == "<|startoftranscript|>" and data["tokens"][-1]["token"] == "<|endoftext|>"
        assert [t["special"] for t in data["tokens"]] == [True] * 4 + [False] * 6 + [True]
        assert data["words"][:2] == [{"word": "the", "start": 0.0, "end": 0.0, "tokens": [4]},
                                     {"word": "cat", "start": 0.0, "end": 1.22, "tokens": [5]}]  # fmt: skip
        assert [w["word"] for w in data["words"]] == TARGET.split()

    def test_generate(self, timed_whisper: WhisperReference) -> None:
        """--generate N times what the decoder writes greedily; JSON names the tokens it wrote."""
        data = json.loads(timed(timed_whisper, "--generate", "5", "--format", "json").stdout)
        assert data["written"] == [4, 5, 6, 7, 8] and len(data["tokens"]) == 9
        assert data["tokens"][-1]["end"] == 3.48  # as generate(return_token_timestamps=True) gives it

    def test_no_alignment_heads(self, whisper: WhisperReference) -> None:
        """A generation config naming no alignment heads: one line, exit 2."""
        result = timed(whisper, "--target", TARGET, code=2)
        assert result.stderr.count("\n") == 1
        assert "generation_config.json names no alignment_heads: word timestamps need the [layer, head] pairs" in (
            result.stderr
        )

    @pytest.mark.parametrize(
        ("args", "message"),
        [(("--timestamps", "--text", "a"), "--timestamps times the words in audio: give --audio FILE.wav"),
         (("--audio", "WAV", "--text", "a"), "--text is what a text model reads; with --audio the model's encoder"),
         (("--audio", "WAV", "--timestamps", "--head", "0"), "--head picks weights to average; --timestamps reads"),
         (("--text", "a", "--language", "en"), "--language is the language a speech model's decoder writes in")],
    )  # fmt: skip
    def test_refused(self, timed_whisper: WhisperReference, args: tuple[str, ...], message: str) -> None:
        """Flags that do not go together: one line, exit 2."""
        given = [str(timed_whisper.wav) if arg == "WAV" else arg for arg in args]
        result = invoke("align", "--model", str(timed_whisper.path), "--target", TARGET, *given, code=2)
        assert message in result.stderr
