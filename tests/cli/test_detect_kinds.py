"""`detect --attention cross|causal-self` on an encoder-decoder: the decoder's heads over each text's target (JSON
Lines with ``text`` and ``target``) or what it writes (``--generate N``), scored as transformers' weights say; and
`rollout` naming the encoder it rolls out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.errors import InputError
from attnx.io.texts import parse_pairs, parse_texts
from tests.cli.test_model_view_kinds import cross_measures, source_specials
from tests.models.checkpoints import TEXT, Reference
from tests.models.encoder_decoders import TARGET, Seq2SeqReference, greedy_reference
from tests.runner import Outcome, run_attnx

CONFIG = Path(__file__).parents[2] / "configs" / "translation-pairs.jsonl"


def invoke(*args: str, code: int = 0, columns: int = 80) -> Outcome:
    """`attnx ARGS` piped, ``columns`` wide, which must exit with ``code``."""
    result = run_attnx(*args, env={"COLUMNS": str(columns)})
    assert result.code == code, result.stderr
    return result


def pairs(tmp_path: Path, *lines: dict[str, str]) -> str:
    """A JSON Lines file of ``lines``, its path."""
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return str(path)


def detected(reference: Seq2SeqReference, texts: str, *args: str) -> dict[str, Any]:
    """`detect --texts TEXTS ARGS --format json` of the checkpoint."""
    out = invoke("detect", "--model", str(reference.path), "--texts", texts, *args, "--format", "json")
    data: dict[str, Any] = json.loads(out.stdout)
    return data


class TestCross:
    @pytest.mark.parametrize("name", ["t5", "bart"])
    def test_equals_measures_of_transformers_weights(
        self, name: str, request: pytest.FixtureRequest, tmp_path: Path
    ) -> None:
        """Over one text and its target, each head's means are the measures of transformers' cross-attention weights
        (float64): monotonicity, coverage, the weight on the source's special tokens, entropy, max weight."""
        reference: Seq2SeqReference = request.getfixturevalue(name)
        data = detected(reference, pairs(tmp_path, {"text": TEXT, "target": TARGET}), "--attention", "cross")
        cross = reference.attentions["float64"]["cross"]
        assert (data["stack"], data["attention"], data["n_layers"]) == ("decoder", "cross", len(cross))
        assert data["sequences"] == 1 and data["tokens"] == len(reference.decoder_ids)
        assert data["thresholds"] == {"monotonic": 0.7, "end-sink": 0.5, "uniform": 0.95, "focused": 0.8}
        keys = {"monotonic": "monotonicity", "coverage": "coverage", "end-sink": "source-end", "uniform": "entropy",
                "focused": "max-weight"}  # fmt: skip
        for layer, weights in enumerate(cross):
            for head, found in enumerate(data["layers"][layer]["heads"]):
                for key, value in cross_measures(weights[head], source_specials(reference)).items():
                    tally = found[keys[key]]
                    if value is None:
                        assert tally["mean"] is None and tally["count"] == 0
                    else:
                        assert tally["mean"] == pytest.approx(value, abs=1e-9), (layer, head, key)
                assert found["coverage"]["count"] == 1 and found["entropy"]["count"] == len(reference.decoder_ids)

    def test_texts_pool(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """The same pair twice: the same means, each count doubled, no spread; JSONL gives one record a text, its
        tokens the decoder's."""
        once = detected(t5, pairs(tmp_path, {"text": TEXT, "target": TARGET}), "--attention", "cross")
        (tmp_path / "twice").mkdir()
        twice_path = pairs(tmp_path / "twice", *[{"text": TEXT, "target": TARGET}] * 2)
        twice = detected(t5, twice_path, "--attention", "cross")
        for mine, theirs in zip(once["layers"], twice["layers"], strict=True):
            for a, b in zip(mine["heads"], theirs["heads"], strict=True):
                assert b["entropy"]["mean"] == pytest.approx(a["entropy"]["mean"], abs=1e-12)
                assert b["entropy"]["count"] == 2 * a["entropy"]["count"] and b["entropy"]["spread"] == 0
                assert b["label"] == a["label"]
        out = invoke("detect", "--model", str(t5.path), "--texts", twice_path, "--attention", "cross", "-f", "jsonl")
        records = [json.loads(line) for line in out.stdout.splitlines()]
        assert [r["index"] for r in records] == [0, 1] and len(records[0]["tokens"]) == len(t5.decoder_ids)
        assert set(records[0]["layers"][0][0]) == {"monotonicity", "coverage", "source-end", "entropy", "max-weight"}

    def test_table(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """The grid shows monotonicity by default, the header names the decoder's cross-attention, the legend says
        what each measure is; --measure picks another of the cross rule's."""
        texts = pairs(tmp_path, {"text": TEXT, "target": TARGET})
        out = invoke("detect", "--model", str(t5.path), "--texts", texts, "--attention", "cross", columns=200).stdout
        words = " ".join(out.split())
        assert out.startswith(f"{t5.path} (t5) · decoder cross-attention · 3 layers × 3 heads · the texts of ")
        assert "Heads found: each head's label over its monotonicity (Spearman of target position" in words
        assert "labels: monotonic or end-sink, the higher, else uniform, else focused" in words
        assert "coverage: share of the source's positions some target token weighs most" in words
        data = detected(t5, texts, "--attention", "cross")
        labelled = [h for layer in data["layers"] for h in layer["heads"] if h["label"] is not None]
        assert ("Labelled heads" in out) == bool(labelled)
        other = invoke("detect", "--model", str(t5.path), "--texts", texts, "--attention", "cross", "-m", "coverage",
                       columns=200).stdout  # fmt: skip
        assert "Heads found: each head's label over its coverage" in " ".join(other.split())

    def test_reads_what_the_decoder_writes(self, bart: Seq2SeqReference, tmp_path: Path) -> None:
        """--generate N: per text, the decoder reads what it writes greedily (transformers' tokens), scored on
        transformers' weights over them."""
        ids, expected = greedy_reference(bart, 4)
        data = detected(bart, pairs(tmp_path, {"text": TEXT}), "--attention", "cross", "--generate", "4")
        assert data["tokens"] == ids.shape[1]
        last = expected[-1][0].numpy()
        for head, found in enumerate(data["layers"][-1]["heads"]):
            measures = cross_measures(last[head], source_specials(bart))
            assert found["entropy"]["mean"] == pytest.approx(measures["uniform"], abs=1e-9)
            assert found["coverage"]["mean"] == pytest.approx(measures["coverage"], abs=1e-12)

    def test_heads_over_texts(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """`heads --texts FILE --attention cross` is detect's view of the same heads."""
        texts = pairs(tmp_path, {"text": TEXT, "target": TARGET})
        out = invoke("heads", "--model", str(t5.path), "--texts", texts, "--attention", "cross", "--format", "json")
        assert json.loads(out.stdout) == detected(t5, texts, "--attention", "cross")

    def test_the_config(self, t5: Seq2SeqReference) -> None:
        """configs/translation-pairs.jsonl gives a text and a target on each line: detect runs over it."""
        lines = [json.loads(line) for line in CONFIG.read_text(encoding="utf-8").splitlines() if line.strip()]
        assert lines and all(set(line) == {"text", "target"} for line in lines)
        data = detected(t5, str(CONFIG), "--attention", "cross")
        assert data["sequences"] == len(lines) and data["source"] == f"the texts of {CONFIG}"


class TestCausalSelf:
    def test_equals_transformers_weights(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """The decoder's own heads over the target, by detect's detectors: previous-token and sink (key 0, T5's start
        token) equal the means of transformers' decoder self-attention weights."""
        data = detected(t5, pairs(tmp_path, {"text": TEXT, "target": TARGET}), "--attention", "causal-self")
        assert (data["stack"], data["attention"]) == ("decoder", "causal self")
        assert set(data["thresholds"]) == {"previous-token", "duplicate-token", "induction", "sink"}
        for layer, weights in enumerate(t5.attentions["float64"]["decoder"]):
            for head, found in enumerate(data["layers"][layer]["heads"]):
                rows = weights[head][1:]  # the queries with a choice
                previous = np.mean([rows[i, i] for i in range(len(rows))])
                assert found["previous-token"]["mean"] == pytest.approx(previous, abs=1e-9)
                assert found["sink"]["mean"] == pytest.approx(rows[:, 0].mean(), abs=1e-9)


class TestRefused:
    def test_a_text_without_a_target(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """A line without a target (and no --generate): one line naming the text, exit 2."""
        texts = pairs(tmp_path, {"text": TEXT, "target": TARGET}, {"text": TEXT})
        result = invoke("detect", "--model", str(t5.path), "--texts", texts, "--attention", "cross", code=2)
        assert result.stderr == (f'attnx: error: --attention cross: the texts of {texts}, text 1 (from 0), has no '
                                 '"target" for the decoder to read: give each line a "target" beside its "text", or '
                                 "--generate N\n")  # fmt: skip

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("--attention", "cross"), "--attention cross: the decoder reads each text's target: give --texts FILE"),
            (("--generate", "2"), "--generate writes what a decoder reads: it goes with --attention cross or "
                                  "causal-self"),
            (("--attention", "crossx"), "--attention: an attention kind is one of self, causal-self, cross"),
        ],
    )  # fmt: skip
    def test_one_line(self, t5: Seq2SeqReference, args: tuple[str, ...], message: str) -> None:
        """Without texts, or --generate for the encoder: one line, exit 2."""
        result = invoke("detect", "--model", str(t5.path), *args, code=2)
        assert message in result.stderr and result.stderr.count("\n") == 1 and result.stdout == ""

    def test_generate_beside_targets(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """Targets in the file and --generate: one or the other."""
        texts = pairs(tmp_path, {"text": TEXT, "target": TARGET})
        result = invoke("detect", "--model", str(t5.path), "--texts", texts, "--attention", "cross", "--generate",
                        "2", code=2)  # fmt: skip
        assert "--generate writes the targets the decoder reads" in result.stderr

    def test_a_measure_of_another_rule(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """--measure induction names what a cross-attention's heads are scored by."""
        texts = pairs(tmp_path, {"text": TEXT, "target": TARGET})
        result = invoke("detect", "--model", str(t5.path), "--texts", texts, "--attention", "cross", "-m",
                        "induction", code=2)  # fmt: skip
        assert ("--measure induction: a cross-attention's heads are scored by monotonicity, coverage, source-end, "
                "entropy, max-weight") in result.stderr  # fmt: skip

    def test_a_model_without_cross_attention(self, gpt2: Reference, tmp_path: Path) -> None:
        """A decoder-only model has no cross-attention: one line naming what it has."""
        texts = pairs(tmp_path, {"text": TEXT, "target": TARGET})
        result = invoke("detect", "--model", str(gpt2.path), "--texts", texts, "--attention", "cross", code=2)
        assert "--attention cross: " in result.stderr and "has no cross-attention" in result.stderr

    def test_heads_texts_refuses_a_target(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """`heads --texts` reads the targets from the file: --target is refused, naming why."""
        texts = pairs(tmp_path, {"text": TEXT, "target": TARGET})
        result = invoke("heads", "--model", str(t5.path), "--texts", texts, "--target", "a", code=2)
        assert '--target reads one text; with --texts, a decoder reads each line\'s "target"' in result.stderr


class TestPairs:
    def test_targets_beside_texts(self) -> None:
        """A JSON line's ``target`` comes with its text; a plain line and a line without one have none."""
        raw = b'{"text": "a b", "target": "c d"}\nplain text\n{"text": "e"}\n"f"\n'
        assert parse_pairs(raw, "F", 10) == [("a b", "c d"), ("plain text", None), ("e", None), ("f", None)]
        assert parse_texts(raw, "F", 10) == ["a b", "plain text", "e", "f"]

    @pytest.mark.parametrize("target", ['""', "3", '"\\ud800"'])
    def test_a_bad_target(self, target: str) -> None:
        """A target that is not a non-empty string of characters: an InputError naming the line."""
        with pytest.raises(InputError, match="F, line 1: "):
            parse_pairs(f'{{"text": "a", "target": {target}}}'.encode(), "F", 10)


class TestRollout:
    def test_names_the_encoder(self, t5: Seq2SeqReference) -> None:
        """An encoder-decoder's rollout is its encoder's: the title and JSON say so; a one-stack model's says no
        stack."""
        out = invoke("rollout", "--model", str(t5.path), "--text", TEXT, "--query", "1").stdout
        assert "Attention rollout of query 1 ' cat' after each encoder layer" in out
        assert "after all 2 encoder layers" in out
        data = json.loads(invoke("rollout", "--model", str(t5.path), "--text", TEXT, "--query", "1", "-f",
                                 "json").stdout)  # fmt: skip
        assert data["stack"] == "encoder" and len(data["by_layer"]) == 2

    def test_one_stack_says_none(self, gpt2: Reference) -> None:
        """A decoder-only model's rollout names no stack."""
        data = json.loads(invoke("rollout", "--model", str(gpt2.path), "--text", TEXT, "--query", "1", "-f",
                                 "json").stdout)  # fmt: skip
        assert "stack" not in data
