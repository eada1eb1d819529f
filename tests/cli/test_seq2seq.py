"""An encoder-decoder from the command line: `model` names its stacks, and `--layer STACK:L`, `--attention` and
`--target` point `run`, `trace` and `heads` at any of its three attentions, equal to transformers'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnx.text import label
from tests.models.checkpoints import TEXT, Reference
from tests.models.encoder_decoders import TARGET, Seq2SeqReference, greedy_reference
from tests.models.whisper_checkpoints import TARGET as SPOKEN
from tests.models.whisper_checkpoints import WhisperReference
from tests.runner import Outcome, run_attnx


def invoke(*args: str, code: int = 0, columns: int = 80) -> Outcome:
    """`attnx ARGS` piped, ``columns`` wide, which must exit with ``code``."""
    result = run_attnx(*args, env={"COLUMNS": str(columns)})
    assert result.code == code, result.stderr
    return result


def weights_of(t5: Seq2SeqReference, *where: str) -> np.ndarray:
    """`run --format json`'s weights of the attention ``where`` points at."""
    out = invoke("run", "--model", str(t5.path), "--text", TEXT, "--target", TARGET, *where, "--format", "json")
    return np.asarray(json.loads(out.stdout)["weights"], dtype=float)


class TestModel:
    def test_names_the_stacks(self, t5: Seq2SeqReference) -> None:
        """`attnx model` gives a row per stack with its layers and their attentions, and the position bias."""
        out = invoke("model", str(t5.path)).stdout
        assert "encoder     2 layers · self-attention\n" in out
        assert "decoder     3 layers · causal self-attention, then cross-attention over the\n" in out
        assert "positions   a learned bias on the scores: 8 relative buckets up to 12 apart" in out
        assert "\nlayers " not in out

    def test_json_stacks(self, t5: Seq2SeqReference) -> None:
        """JSON lists each stack, what it reads and its attentions with the stacks they read."""
        data = json.loads(invoke("model", str(t5.path), "--format", "json").stdout)
        assert data["format_version"] == "1.9"
        assert data["stacks"] == [
            {"name": "encoder", "layers": 2, "heads": 3, "reads": "text",
             "attentions": [{"kind": "self", "queries": "encoder", "keys": "encoder"}]},
            {"name": "decoder", "layers": 3, "heads": 3, "reads": "text",
             "attentions": [{"kind": "causal self", "queries": "decoder", "keys": "decoder"},
                            {"kind": "cross", "queries": "decoder", "keys": "encoder"}]},
        ]  # fmt: skip


class TestAddressing:
    @pytest.mark.parametrize(
        ("where", "kind", "layer"),
        [(("--layer", "enc:1"), "encoder", 1), (("--layer", "dec:2"), "decoder", 2),
         (("--layer", "decoder:-1", "--attention", "cross"), "cross", 2), (("--layer", "dec:0", "--attention",
                                                                             "causal-self"), "decoder", 0)],
    )  # fmt: skip
    def test_run_equals_transformers(self, t5: Seq2SeqReference, where: tuple[str, ...], kind: str, layer: int) -> None:
        """Each kind's weights, pointed at from the command line, equal transformers' (float64 run, its float64)."""
        if where[1].startswith("enc"):
            out = invoke("run", "--model", str(t5.path), "--text", TEXT, *where, "--format", "json")
            found = np.asarray(json.loads(out.stdout)["weights"], dtype=float)
        else:
            found = weights_of(t5, *where)
        expected = t5.attentions["float64"][kind][layer]
        assert found.shape == expected.shape
        np.testing.assert_allclose(found, expected, rtol=0, atol=1e-10)

    def test_json_says_where(self, t5: Seq2SeqReference) -> None:
        """`run`'s JSON names the stack, the layer (from 0) and the attention kind its arrays belong to."""
        out = invoke("run", "--model", str(t5.path), "--text", TEXT, "--target", TARGET, "--layer", "dec:-1",
                     "--attention", "cross", "--format", "json")  # fmt: skip
        data = json.loads(out.stdout)
        assert data["origin"] == {"model": str(t5.path), "stack": "decoder", "layer": 2, "attention": "cross",
                                  "written": []}  # fmt: skip
        assert len(data["tokens"]) == len(t5.decoder_ids) and len(data["key_tokens"]) == len(t5.source_ids)

    def test_header_says_where(self, t5: Seq2SeqReference) -> None:
        """The table's first line names the stack, the layer and the kind."""
        out = invoke("run", "--model", str(t5.path), "--text", TEXT, "--target", TARGET, "--layer", "dec:1",
                     "--attention", "cross", columns=200).stdout  # fmt: skip
        assert out.splitlines()[0].startswith(f"{t5.path} (t5), decoder layer 1 of 3, cross-attention")

    def test_trace_a_target_token(self, t5: Seq2SeqReference) -> None:
        """`trace` explains a target token's cross-attention over the source's tokens."""
        out = invoke("trace", "--model", str(t5.path), "--text", TEXT, "--target", TARGET, "--layer", "dec:0",
                     "--attention", "cross", "--query", "3", "--keys", "all", "--format", "json")  # fmt: skip
        data = json.loads(out.stdout)
        heads = data["heads"]
        assert [key["index"] for key in heads[0]["keys"]] == list(range(len(t5.source_ids)))
        weights = np.asarray([[key["weight"] for key in head["keys"]] for head in heads])
        np.testing.assert_allclose(weights, t5.attentions["float64"]["cross"][0][:, 3, :], rtol=0, atol=1e-10)

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("--layer", "dec:0"), "--layer dec:0: the decoder reads a target text: give --target T"),
            (("--target", "a", "--layer", "1"), "--target is for a decoder's layers (--layer dec:L); the encoder "
                                                "reads --text"),
            (("--layer", "vision:0"), "--layer vision:0: the model has no stack 'vision'; its stacks: encoder, "
                                      "decoder"),
            (("--layer", "enc:0", "--attention", "cross"), "--layer enc:0 --attention cross: the encoder's layers "
                                                           "hold no cross-attention; they hold self-attention"),
            (("--attention", "crossx"), "--attention: an attention kind is one of self, causal-self, cross, not "
                                        "'crossx'"),
            (("--layer", "dec:x"), "--layer: a layer is a number counted from 0 (-1: the last), or STACK:N (enc:3), "
                                   "not 'dec:x'"),
            (("--layer", "dec:3", "--target", "a"), "layer 3 does not exist: its decoder has layers 0..2"),
        ],
    )  # fmt: skip
    def test_refused(self, t5: Seq2SeqReference, args: tuple[str, ...], message: str) -> None:
        """Pointing at what the model lacks is one line naming what it has, exit 2."""
        result = invoke("run", "--model", str(t5.path), "--text", TEXT, *args, code=2)
        assert message in result.stderr and result.stderr.count("\n") == 1 and result.stdout == ""

    def test_single_stack_models_refuse_a_target(self, gpt2: Reference) -> None:
        """A decoder-only model has no decoder reading a target: --target is refused."""
        result = invoke("run", "--model", str(gpt2.path), "--text", TEXT, "--target", "a", code=2)
        assert "--target is for an encoder-decoder's decoder; the model reads --text alone" in result.stderr


class TestEncoderCommands:
    def test_model_view_reads_the_encoder(self, t5: Seq2SeqReference) -> None:
        """`heads --layer all` shows the encoder's layers × heads; --target without a decoder's attention is refused
        there, naming why."""
        out = invoke("heads", "--model", str(t5.path), "--text", TEXT, "--layer", "all", "--format", "json").stdout
        assert len(json.loads(out)["layers"]) == 2
        result = invoke("heads", "--model", str(t5.path), "--text", TEXT, "--layer", "all", "--target", "a", code=2)
        assert (
            "--target is what a decoder reads; they go with a decoder's attention: --attention causal-self or "
            "cross" in result.stderr
        )

    def test_ablate_measures_the_encoders_output_only(self, t5: Seq2SeqReference) -> None:
        """Dropping an encoder head moves the encoder's output; no next-token change is claimed from it (the
        decoder predicts, reading that output)."""
        out = invoke("ablate", "--model", str(t5.path), "--text", TEXT, "--layer", "0", "--format", "json").stdout
        data = json.loads(out)
        assert data["lm_head"] is False and len(data["ablations"]) == 3
        assert all(ablation["mean_shift"] > 0 and ablation["mean_kl"] is None for ablation in data["ablations"])


class TestAlign:
    def test_equals_transformers_mean(self, t5: Seq2SeqReference) -> None:
        """`align` averages transformers' cross-attentions over every decoder layer and head; each target token's
        source is that mean's largest."""
        out = invoke("align", "--model", str(t5.path), "--text", TEXT, "--target", TARGET, "--format", "json")
        data = json.loads(out.stdout)
        expected = np.mean(np.stack(t5.attentions["float64"]["cross"]), axis=(0, 1))  # (T, S)
        np.testing.assert_allclose(np.asarray(data["mean_weights"]), expected, rtol=0, atol=1e-10)
        assert [row["source"] for row in data["alignment"]] == np.argmax(expected, axis=1).tolist()
        assert data["layers"] == [0, 1, 2] and data["heads"] == [0, 1, 2]
        last = t5.attentions["float64"]["cross"][2][1]  # layer 2, head 1: [target, source]
        found = next(h for h in data["per_head"] if (h["layer"], h["head"]) == (2, 1))
        assert len(data["per_head"]) == 9
        assert found["coverage"] == len(set(np.argmax(last, axis=1).tolist())) / last.shape[1]
        assert len(data["target_tokens"]) == len(t5.decoder_ids) and len(data["source_tokens"]) == len(t5.source_ids)

    def test_chosen_layer_and_head(self, t5: Seq2SeqReference) -> None:
        """--layer -1 --head 1 is the last layer's head 1 alone."""
        out = invoke("align", "--model", str(t5.path), "--text", TEXT, "--target", TARGET, "--layer", "-1", "--head",
                     "1", "--format", "json")  # fmt: skip
        np.testing.assert_allclose(np.asarray(json.loads(out.stdout)["mean_weights"]), t5.attentions["float64"]["cross"][2][1],
                                   rtol=0, atol=1e-10)  # fmt: skip

    def test_table(self, t5: Seq2SeqReference) -> None:
        """The table names what it averages, then a row per target token with its source token and weight."""
        out = invoke("align", "--model", str(t5.path), "--text", TEXT, "--target", TARGET).stdout
        lines = out.splitlines()
        assert " ".join(lines[:2]) == ("The source token each target token attends most: cross-attention of decoder "
                                       "layers 0-2 × heads 0-2, mean")  # fmt: skip
        assert lines[2].split() == ["#", "target", "#", "source", "weight"]
        rows = [line.split() for line in lines[4 : 4 + len(t5.decoder_ids)]]
        assert [row[:2] for row in rows[:2]] == [["0", "<pad>"], ["1", "a"]] and rows[-1][0] == "9"

    @pytest.mark.parametrize(
        ("args", "message"),
        [(("--target", "a", "--head", "7"), "--head 7 does not exist: there are heads 0..2"),
         ((), "give --target T (the text aligned with --text's) or --generate N (the decoder writes it), one of them")],
    )  # fmt: skip
    def test_refused(self, t5: Seq2SeqReference, args: tuple[str, ...], message: str) -> None:
        """A head the decoder lacks, or no target: one line, exit 2."""
        result = invoke("align", "--model", str(t5.path), "--text", TEXT, *args, code=2)
        assert message in result.stderr

    def test_aligns_what_the_decoder_writes(self, bart: Seq2SeqReference) -> None:
        """`align --generate N` aligns the tokens the decoder writes greedily: as many rows as transformers writes."""
        ids, _ = greedy_reference(bart, 4)
        out = invoke("align", "--model", str(bart.path), "--text", TEXT, "--generate", "4", "--format", "json")
        data = json.loads(out.stdout)
        assert len(data["target_tokens"]) == ids.shape[1] and data["written"] == list(range(1, ids.shape[1]))
        rows = invoke("align", "--model", str(bart.path), "--text", TEXT, "--generate", "4").stdout.splitlines()
        assert "* written by the model" in rows[1]
        targets = [line.split()[1] for line in rows[4 : 4 + ids.shape[1]]]
        assert [t.endswith("*") for t in targets] == [False] + [True] * (ids.shape[1] - 1)

    def test_a_decoder_only_model_is_refused(self, gpt2: Reference) -> None:
        """A model without cross-attention cannot align: one line saying an encoder-decoder is needed."""
        result = invoke("align", "--model", str(gpt2.path), "--text", TEXT, "--target", "a", code=2)
        assert "a gpt2 model has no cross-attention: alignment needs an encoder-decoder" in result.stderr


class TestAudio:
    def test_encoder_hears_the_wav(self, whisper: WhisperReference, tmp_path: Path) -> None:
        """`run --audio` shows the encoder's self-attention over the audio's frames, equal to transformers' (NPZ: the
        1500 × 1500 matrices of three heads are too many numbers to print as JSON in a test)."""
        saved = tmp_path / "enc1.npz"
        invoke("run", "--model", str(whisper.path), "--audio", str(whisper.wav), "--layer", "enc:1", "--format", "npz",
               "--output", str(saved))  # fmt: skip
        with np.load(saved) as arrays:
            np.testing.assert_allclose(arrays["weights"], whisper.attentions["float64"]["encoder"][1], rtol=0,
                                       atol=1e-10)  # fmt: skip

    def test_cross_attention_over_the_audio(self, whisper: WhisperReference) -> None:
        """`--layer dec:L --attention cross --target T --language en`: the decoder reads the prompt, then the text,
        and its cross-attention over the frames equals transformers'."""
        out = invoke("run", "--model", str(whisper.path), "--audio", str(whisper.wav), "--layer", "dec:-1",
                     "--attention", "cross", "--target", SPOKEN, "--language", "en", "--format", "json")  # fmt: skip
        data = json.loads(out.stdout)
        np.testing.assert_allclose(np.asarray(data["weights"]), whisper.attentions["float64"]["cross"][-1],
                                   rtol=0, atol=1e-10)  # fmt: skip
        assert len(data["tokens"]) == len(whisper.decoder_ids) and len(data["key_tokens"]) == 1500
        assert data["key_tokens"][:3] == ["0.00s", "0.02s", "0.04s"]
        assert data["origin"] == {"model": str(whisper.path), "stack": "decoder", "layer": 2, "attention": "cross",
                                  "written": []}  # fmt: skip

    @pytest.mark.parametrize(
        ("args", "message"),
        [(("--text", "a"), "--text is what a text model reads; with --audio the model's encoder hears it"),
         (("--language", "en"), "--language is the language a decoder writes in: it goes with --target")],
    )  # fmt: skip
    def test_refused(self, whisper: WhisperReference, args: tuple[str, ...], message: str) -> None:
        """--text beside --audio, or a language without a decoder's layer: one line, exit 2."""
        result = invoke("run", "--model", str(whisper.path), "--audio", str(whisper.wav), *args, code=2)
        assert message in result.stderr

    def test_not_a_wav(self, whisper: WhisperReference, tmp_path: Path) -> None:
        """A file that is not a WAV is one line, exit 2, before the model opens."""
        fake = tmp_path / "x.wav"
        fake.write_bytes(b"\\x89PNG\\r\\n\\x1a\\n" + bytes(64))
        result = invoke("run", "--model", str(whisper.path), "--audio", str(fake), code=2)
        assert result.stderr.startswith("attnx: error: ") and result.stderr.count("\\n") == 1


class TestGenerate:
    def test_decoder_reads_what_it_wrote(self, bart: Seq2SeqReference) -> None:
        """`--generate N`: the decoder writes transformers' greedy tokens, then its cross-attention over them equals
        transformers' on those tokens."""
        ids, expected = greedy_reference(bart, 5)
        out = invoke("run", "--model", str(bart.path), "--text", TEXT, "--generate", "5", "--layer", "dec:-1",
                     "--attention", "cross", "--format", "json")  # fmt: skip
        data = json.loads(out.stdout)
        assert len(data["tokens"]) == ids.shape[1]
        assert data["origin"]["written"] == list(range(1, ids.shape[1]))  # all but the start token
        np.testing.assert_allclose(np.asarray(data["weights"]), expected[-1][0].numpy(), rtol=0, atol=1e-10)

    @pytest.mark.parametrize("kind", ["causal-self", "cross"])
    def test_written_tokens_marked(self, bart: Seq2SeqReference, kind: str) -> None:
        """Every row label of a token the model wrote ends in *, in the weights table, the per-query table of heads
        and the trace's title (JSON: ``written``); the start token is not marked, nor a source token (a column of the
        cross-attention), while the decoder's self-attention marks its written keys too."""
        args = ["--model", str(bart.path), "--text", TEXT, "--generate", "3", "--layer", "dec:-1", "--attention", kind]
        data = json.loads(invoke("run", *args, "--format", "json").stdout)
        written, tokens = data["origin"]["written"], data["tokens"]
        assert written == list(range(1, len(tokens))) and written
        shown = invoke("run", *args, "--show", "weights", "--head", "0").stdout
        assert "written by the model (marked *)" in shown
        table = shown.split("weights (softmax)\n")[1].splitlines()
        header, rows = table[0].split(), [line.split()[0] for line in table[2 : 2 + len(tokens)]]
        assert rows == [label(tokens[0]), *(f"{label(token)}*" for token in tokens[1:])]
        marked_keys = [column for column in header if column.endswith("*")]
        assert len(marked_keys) == (len(written) if kind == "causal-self" else 0)  # the source's: never marked
        heads = invoke("heads", *args).stdout.split("top key\n")[1].splitlines()
        assert [line.split()[0] for line in heads[1 : 1 + len(tokens)]] == rows
        trace = invoke("trace", *args, "--query", "-1").stdout
        assert f"(query {len(tokens) - 1}, written by the model)" in trace
        assert json.loads(invoke("trace", *args, "--query", "-1", "--format", "json").stdout)["written"] is True
        assert "written" not in json.loads(invoke("trace", *args, "--query", "0", "--format", "json").stdout)

    @pytest.mark.parametrize(
        ("args", "message"),
        [(("--generate", "3", "--target", "a", "--layer", "dec:0"), "--generate writes the target the decoder "
                                                                     "reads; --target gives it"),
         (("--generate", "3"), "--generate writes what a decoder reads: it goes with a decoder's layer")],
    )  # fmt: skip
    def test_refused(self, bart: Seq2SeqReference, args: tuple[str, ...], message: str) -> None:
        """--generate beside --target, or for the encoder's layer: one line, exit 2."""
        result = invoke("run", "--model", str(bart.path), "--text", TEXT, *args, code=2)
        assert message in result.stderr
