"""--audio beyond one layer: rollout over a speech model's encoder, and two speech checkpoints compared."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.analysis.measures import rollout
from attnx.analysis.model_diff import js_divergence
from tests.cli.test_model import invoke
from tests.models.whisper_checkpoints import TARGET, WhisperReference, run_whisper

ENCODER_Q = "model.encoder.layers.1.self_attn.q_proj.weight"


@pytest.fixture(scope="module")
def retuned(whisper: WhisperReference, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny Whisper whose encoder layer 1 W_q moved."""
    from safetensors.numpy import load_file, save_file

    moved = Path(shutil.copytree(whisper.path, tmp_path_factory.mktemp("retuned") / "whisper"))
    tensors = load_file(moved / "model.safetensors")
    noise = np.random.default_rng(1).normal(size=tensors[ENCODER_Q].shape).astype(np.float32)
    tensors[ENCODER_Q] = tensors[ENCODER_Q] + noise
    save_file(tensors, moved / "model.safetensors", metadata={"format": "pt"})
    return moved


class TestRollout:
    def test_encoder_hears_audio(self, whisper: WhisperReference) -> None:
        """Rollout over the encoder hearing the WAV is that of transformers' encoder weights; `rollout --audio` names
        the query by its time and lists the keys that reach it most."""
        from attnx import workflows
        from attnx.io.audio import read_wav
        from attnx.models import open_model

        with open_model(whisper.path) as model:
            found = workflows.rollout(model, model.encode_audio(read_wav(str(whisper.wav), model.limits).samples))
        expected = rollout([w.mean(axis=0) for w in whisper.attentions["float64"]["encoder"]], found.tokens)
        np.testing.assert_allclose(found.layers, expected.layers, rtol=1e-9, atol=1e-12)
        shown = invoke("rollout", "--model", str(whisper.path), "--audio", str(whisper.wav), "--query", "3").stdout
        assert "Attention rollout of query 3 '0.06s' after each encoder layer" in shown
        top = shown.split("the keys that reach it most:")[1].splitlines()[3].split()
        assert top[1] == found.tokens[int(np.argmax(found.final[3]))]

    def test_text_beside_audio(self, whisper: WhisperReference) -> None:
        """--text and --audio together: one line, exit 2."""
        refused = invoke("rollout", "--model", str(whisper.path), "--audio", str(whisper.wav), "--text", "a",
                         "--query", "0", code=2)  # fmt: skip
        assert refused.stderr == (
            "attnx: error: --text is what a text model reads; with --audio the model's encoder hears it\n"
        )


class TestDiff:
    def test_two_speech_checkpoints(self, whisper: WhisperReference, retuned: Path) -> None:
        """Two Whispers hearing one WAV: the encoder's heads moved as transformers' weights say, layer 0 not."""
        theirs = run_whisper(retuned, whisper.features, whisper.decoder_ids, "float64")[0]["encoder"]
        data = json.loads(invoke("diff", "--model", str(whisper.path), "--model", str(retuned), "--audio",
                                 str(whisper.wav), "--format", "json").stdout)  # fmt: skip
        grid = np.array([[head["js_mean"] for head in layer["heads"]] for layer in data["layers"]])
        expected = np.array([js_divergence(p, q).mean(axis=-1) for p, q in zip(
            whisper.attentions["float64"]["encoder"], theirs, strict=True)])  # fmt: skip
        np.testing.assert_allclose(grid, expected, rtol=1e-9, atol=1e-12)
        assert not grid[0].any() and grid[1].min() > 0 and data["stack"] == "encoder"


class TestModelView:
    def test_encoder_and_cross_attention(self, whisper: WhisperReference) -> None:
        """`heads --layer all --audio`: the encoder's heads over the audio's positions, each head's mean largest
        weight that of transformers' weights; with --attention cross and --target, the decoder's layers over them."""
        base = ["heads", "--model", str(whisper.path), "--audio", str(whisper.wav), "--layer", "all", "-f", "json"]
        data = json.loads(invoke(*base).stdout)
        found = np.array([[head["mean_max_weight"] for head in layer["heads"]] for layer in data["layers"]])
        expected = np.array([w.max(axis=-1).mean(axis=-1) for w in whisper.attentions["float64"]["encoder"]])
        np.testing.assert_allclose(found, expected, rtol=1e-9, atol=1e-12)
        assert (data["stack"], data["attention"], len(data["tokens"])) == ("encoder", "self", 1500)
        cross = json.loads(invoke(*base, "--attention", "cross", "--target", "the cat sat", "--language", "en").stdout)
        assert (cross["stack"], cross["attention"], len(cross["layers"])) == ("decoder", "cross", 3)
        assert cross["key_tokens"][:2] == ["0.00s", "0.02s"] and cross["tokens"][1] == "<|en|>"


class TestAblate:
    def test_speech_model(self, whisper: WhisperReference) -> None:
        """`ablate --audio`: the encoder's heads one by one; with --target and --language, the decoder's next-token
        log-probabilities, intact equal to transformers' on the prompt and the target, moved by a cross head."""
        from attnx.analysis.effects import log_softmax

        base = ["ablate", "--model", str(whisper.path), "--audio", str(whisper.wav), "-f", "json"]
        encoder = json.loads(invoke(*base, "--layer", "0").stdout)
        assert len(encoder["ablations"]) == 3 and len(encoder["tokens"]) == 1500  # layer 0's heads, one by one
        data = json.loads(invoke(*base, "--target", TARGET, "--language", "en", "--head", "cross:L1H2").stdout)
        ids, logp = whisper.decoder_ids, log_softmax(whisper.logits["float64"])
        expected = [logp[i, ids[i + 1]] for i in range(len(ids) - 1)]
        assert data["next"][: len(expected)] == ids[1:]
        np.testing.assert_allclose(data["logp"][: len(expected)], expected, rtol=0, atol=1e-10)
        assert data["ablations"][0]["labels"] == ["cross:L1H2"] and max(map(abs, data["ablations"][0]["delta_logp"]
                                                                              [: len(expected)])) > 0  # fmt: skip


class TestDetect:
    @pytest.mark.parametrize("args", [(), ("--attention", "cross", "--generate", "2", "--texts", "configs/texts.txt")])
    def test_refused_for_a_speech_model(self, whisper: WhisperReference, args: tuple[str, ...]) -> None:
        """Detection runs texts and token sequences: a speech model is one line, exit 2, saying what shows its heads."""
        refused = invoke("detect", "--model", str(whisper.path), *args, code=2)
        assert refused.stderr.startswith("attnx: error: ") and refused.stderr.count("\n") == 1
        assert "its encoder hears audio, and detection runs texts and token sequences" in refused.stderr

    def test_decoder_over_a_recording(self, whisper: WhisperReference, tmp_path: Path) -> None:
        """`detect --audio --attention cross --texts`: each cross head's means over the recording are the measures of
        transformers' cross-attention weights on the prompt and the line's text (float64)."""
        from tests.cli.test_model_view_kinds import cross_measures

        lines = tmp_path / "said.txt"
        lines.write_text(TARGET + "\n", "utf-8")
        data = json.loads(invoke("detect", "--model", str(whisper.path), "--audio", str(whisper.wav), "--attention",
                                 "cross", "--texts", str(lines), "--language", "en", "-f", "json").stdout)  # fmt: skip
        cross = whisper.attentions["float64"]["cross"]
        assert (data["stack"], data["attention"], data["tokens"]) == ("decoder", "cross", len(whisper.decoder_ids))
        for layer, weights in enumerate(cross):
            for head, found in enumerate(data["layers"][layer]["heads"]):
                expected = cross_measures(weights[head], [])["monotonic"]
                assert found["monotonicity"]["mean"] == pytest.approx(expected, abs=1e-9)
