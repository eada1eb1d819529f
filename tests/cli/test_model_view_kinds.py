"""The model view of an encoder-decoder per attention kind: `heads --layer all --attention cross|causal-self` shows
every decoder layer × head, its numbers equal to measures computed from transformers' own weights."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tests.models.checkpoints import TEXT, Reference
from tests.models.encoder_decoders import TARGET, Seq2SeqReference, greedy_reference
from tests.runner import Outcome, run_attnx


def invoke(*args: str, code: int = 0, columns: int = 80) -> Outcome:
    """`attnx ARGS` piped, ``columns`` wide, which must exit with ``code``."""
    result = run_attnx(*args, env={"COLUMNS": str(columns)})
    assert result.code == code, result.stderr
    return result


def view(reference: Seq2SeqReference, *args: str) -> dict[str, Any]:
    """`heads --layer all ARGS --format json` of the checkpoint on TEXT."""
    out = invoke("heads", "--model", str(reference.path), "--text", TEXT, "--layer", "all", *args, "--format", "json")
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def source_specials(reference: Seq2SeqReference) -> list[int]:
    """The source positions holding a special token (the tokenizer's specials are ids 0, 1, …)."""
    return [i for i, token in enumerate(reference.source_ids) if token < len(reference.variant.specials)]


def cross_measures(weights: np.ndarray, specials: list[int]) -> dict[str, float | None]:
    """One cross-attention head's measures, ``weights`` ``[target, source]``, computed here from scratch: Spearman's
    correlation (scipy's) of target position and the source position of largest weight, coverage, the weight on the
    source's special tokens, entropy ÷ log(source length), the largest weight."""
    stats = pytest.importorskip("scipy.stats")
    targets, sources = weights.shape
    best = weights.argmax(axis=1)
    monotonic = None if len(set(best.tolist())) == 1 else float(stats.spearmanr(np.arange(targets), best)[0])
    entropy = -(weights * np.log(weights)).sum(axis=1) / np.log(sources)
    return {
        "monotonic": monotonic,
        "coverage": len(set(best.tolist())) / sources,
        "end-sink": float(weights[:, specials].sum(axis=1).mean()),
        "uniform": float(entropy.mean()),
        "focused": float(weights.max(axis=1).mean()),
    }


def assert_scores(found: dict[str, float | None], expected: dict[str, float | None]) -> None:
    """Each expected score equals the found one within 1e-9 (None where undefined)."""
    for key, value in expected.items():
        if value is None:
            assert found[key] is None, key
        else:
            assert found[key] == pytest.approx(value, abs=1e-9), key


class TestCross:
    @pytest.mark.parametrize("name", ["t5", "bart"])
    def test_equals_measures_of_transformers_weights(self, name: str, request: pytest.FixtureRequest) -> None:
        """Every decoder layer × head: monotonicity, coverage, the weight on the source's end token, entropy and max
        weight equal those of transformers' cross-attention weights (float64); JSON names the stack and kind."""
        reference: Seq2SeqReference = request.getfixturevalue(name)
        data = view(reference, "--attention", "cross", "--target", TARGET)
        cross = reference.attentions["float64"]["cross"]
        assert (data["stack"], data["attention"], data["n_layers"]) == ("decoder", "cross", len(cross))
        assert data["n_heads"] == cross[0].shape[0] and len(data["key_tokens"]) == len(reference.source_ids)
        assert len(data["tokens"]) == len(reference.decoder_ids) and data["written"] == []
        assert data["thresholds"] == {"monotonic": 0.7, "end-sink": 0.5, "uniform": 0.95, "focused": 0.8}
        specials = source_specials(reference)
        assert specials  # the end token, and BART's <s>
        for layer, weights in enumerate(cross):
            for head, found in enumerate(data["layers"][layer]["heads"]):
                assert found["head"] == head
                assert_scores(found["scores"], cross_measures(weights[head], specials))

    def test_label_follows_the_rule(self, t5: Seq2SeqReference) -> None:
        """A head's label is the cross rule's: monotonic or end-sink reaching its threshold (the higher), else
        uniform, else focused, else none; its label_score is that measure's score."""
        data = view(t5, "--attention", "cross", "--target", TARGET)
        for layer in data["layers"]:
            for head in layer["heads"]:
                scores = head["scores"]
                first = [(key, scores[key]) for key in ("monotonic", "end-sink")
                         if scores[key] is not None and scores[key] >= data["thresholds"][key]]  # fmt: skip
                if first:
                    expected: tuple[Any, Any] = max(first, key=lambda pair: pair[1])
                elif scores["uniform"] >= 0.95:
                    expected = ("uniform", scores["uniform"])
                elif scores["focused"] >= 0.8:
                    expected = ("focused", scores["focused"])
                else:
                    expected = (None, None)
                assert (head["label"], head["label_score"]) == expected

    def test_table(self, t5: Seq2SeqReference) -> None:
        """The table names the stack and the kind, the source's tokens, the rule and each measure, and lists every
        head with its measures."""
        out = invoke("heads", "--model", str(t5.path), "--text", TEXT, "--layer", "all", "--attention", "cross",
                     "--target", TARGET, columns=200).stdout  # fmt: skip
        lines = out.splitlines()
        assert lines[0].startswith(f"{t5.path} (t5) · decoder cross-attention · {len(t5.decoder_ids)} tokens · "
                                   "3 layers × 3 heads")  # fmt: skip
        assert lines[2].startswith("source: ' the'")
        words = " ".join(out.split())
        assert "labels: monotonic or end-sink, the higher, else uniform, else focused (monotonic ≥ 0.7" in words
        assert "mono: Spearman of target position and the source position it weighs most" in words
        assert "end: mean weight on the source's special tokens (its end token)" in words
        header = next(line for line in lines if line.startswith("head"))
        assert header.split() == ["head", "label", "mono", "cover", "end", "unif", "max", "w"]
        rows = [line.split() for line in lines if line.startswith("L") and "H" in line.split()[0]]
        assert [row[0] for row in rows] == [f"L{layer}H{head}" for layer in range(3) for head in range(3)]
        data = view(t5, "--attention", "cross", "--target", TARGET)
        coverage = data["layers"][2]["heads"][1]["scores"]["coverage"]
        assert rows[7][3] == f"{coverage:.2f}"

    def test_reads_what_the_decoder_writes(self, bart: Seq2SeqReference) -> None:
        """--generate N: the decoder writes transformers' greedy tokens, then the view reads them; the positions it
        wrote are in JSON's ``written``, and the numbers are the measures of transformers' weights on those tokens."""
        ids, expected = greedy_reference(bart, 4)
        data = view(bart, "--attention", "cross", "--generate", "4")
        assert len(data["tokens"]) == ids.shape[1] and data["written"] == list(range(1, ids.shape[1]))
        last = expected[-1][0].numpy()
        for head, found in enumerate(data["layers"][-1]["heads"]):
            assert_scores(found["scores"], cross_measures(last[head], source_specials(bart)))


class TestCausalSelf:
    def test_equals_measures_of_transformers_weights(self, t5: Seq2SeqReference) -> None:
        """The decoder's causal self-attention, labelled as `heads` labels: previous-token, sink (key 0 and the
        target's special tokens: T5's start token is key 0) and entropy equal those of transformers' weights."""
        data = view(t5, "--attention", "causal-self", "--target", TARGET)
        decoder = t5.attentions["float64"]["decoder"]
        assert (data["stack"], data["attention"], data["n_layers"]) == ("decoder", "causal self", len(decoder))
        for layer, weights in enumerate(decoder):
            for head, found in enumerate(data["layers"][layer]["heads"]):
                rows = weights[head][1:]  # the queries with a choice: from position 1
                previous = [rows[i, i] for i in range(len(rows))]  # query i + 1's weight on key i
                visible = np.arange(2, len(weights[head]) + 1)
                entropy = -np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1)), 0).sum(axis=1)
                assert found["scores"]["previous-token"] == pytest.approx(np.mean(previous), abs=1e-9)
                assert found["scores"]["sink"] == pytest.approx(rows[:, 0].mean(), abs=1e-9)
                assert found["scores"]["uniform"] == pytest.approx(np.mean(entropy / np.log(visible)), abs=1e-9)

    def test_table_names_the_decoder(self, t5: Seq2SeqReference) -> None:
        """The header names the decoder's causal self-attention; the labels are `heads`' own."""
        out = invoke("heads", "--model", str(t5.path), "--text", TEXT, "--layer", "all", "--attention",
                     "causal-self", "--target", TARGET, columns=200).stdout  # fmt: skip
        assert out.splitlines()[0].startswith(f"{t5.path} (t5) · decoder causal self-attention · ")
        assert "labels as in attnx heads (prev = previous-token" in " ".join(out.split())


class TestEncoder:
    def test_self_is_the_encoder(self, t5: Seq2SeqReference) -> None:
        """--attention self, or none, is the encoder's view, as before; JSON says so."""
        plain, named = view(t5), view(t5, "--attention", "self")
        assert plain == named
        assert (plain["stack"], plain["attention"], plain["n_layers"]) == ("encoder", "self", 2)
        assert "key_tokens" not in plain

    def test_a_decoder_only_model(self, gpt2: Reference) -> None:
        """A decoder-only model's view names its stack and its causal self-attention."""
        out = invoke("heads", "--model", str(gpt2.path), "--text", TEXT, "--layer", "all", "--format", "json")
        data = json.loads(out.stdout)
        assert data["attention"] == "causal self" and data["stack"]


class TestRefused:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("--attention", "cross"), "--attention cross: the decoder reads a target text: give --target T, or "
                                       "--generate N to let it write one"),
            (("--target", "a"), "--target is what a decoder reads; they go with a decoder's attention: --attention "
                                "causal-self or cross"),
            (("--attention", "self", "--generate", "2"), "--generate is what a decoder reads"),
            (("--attention", "cross", "--target", "a", "--generate", "2"), "--generate writes the target the decoder "
                                                                           "reads; --target gives it"),
            (("--attention", "crossx"), "--attention: an attention kind is one of self, causal-self, cross"),
        ],
    )  # fmt: skip
    def test_one_line(self, t5: Seq2SeqReference, args: tuple[str, ...], message: str) -> None:
        """What does not fit is one line naming the flag, exit 2, nothing on stdout."""
        result = invoke("heads", "--model", str(t5.path), "--text", TEXT, "--layer", "all", *args, code=2)
        assert message in result.stderr and result.stderr.count("\n") == 1 and result.stdout == ""

    def test_a_model_without_cross_attention(self, gpt2: Reference) -> None:
        """A decoder-only model has no cross-attention: one line naming what it has."""
        result = invoke("heads", "--model", str(gpt2.path), "--text", TEXT, "--layer", "all", "--attention", "cross",
                        code=2)  # fmt: skip
        assert "--attention cross: " in result.stderr and "has no cross-attention; it has causal self-attention" in (
            result.stderr
        )


class TestOneLayer:
    @pytest.mark.parametrize("name", ["t5", "bart"])
    def test_cross_heads_equal_measures_of_transformers_weights(
        self, name: str, request: pytest.FixtureRequest
    ) -> None:
        """`heads --layer dec:-1 --attention cross`: each head scored by the cross rule, equal to the measures of
        transformers' weights; its sinks are the source's special tokens (its end token), not key 0."""
        reference: Seq2SeqReference = request.getfixturevalue(name)
        out = invoke("heads", "--model", str(reference.path), "--text", TEXT, "--target", TARGET, "--layer",
                     "dec:-1", "--attention", "cross", "--format", "json").stdout  # fmt: skip
        data = json.loads(out)
        assert data["thresholds"] == {"monotonic": 0.7, "end-sink": 0.5, "uniform": 0.95, "focused": 0.8}
        assert data["sinks"] == source_specials(reference)
        weights = reference.attentions["float64"]["cross"][-1]
        for head, found in enumerate(data["heads"]):
            assert_scores(found["scores"], cross_measures(weights[head], source_specials(reference)))

    def test_table(self, t5: Seq2SeqReference) -> None:
        """The label table's columns are the cross rule's; the rule line says its labels."""
        out = invoke("heads", "--model", str(t5.path), "--text", TEXT, "--target", TARGET, "--layer", "dec:-1",
                     "--attention", "cross", columns=200).stdout  # fmt: skip
        header = next(line for line in out.splitlines() if line.lstrip().startswith("head  label"))
        assert header.split() == ["head", "label", "mono", "cover", "end", "unif", "std", "max", "w"]
        assert "labels (monotonic or end-sink, the higher, else uniform, else focused): monotonic ≥ 0.7" in out

    def test_causal_self_keeps_the_positional_labels(self, t5: Seq2SeqReference) -> None:
        """The decoder's causal self-attention is labelled as any self-attention."""
        out = invoke("heads", "--model", str(t5.path), "--text", TEXT, "--target", TARGET, "--layer", "dec:0",
                     "--format", "json").stdout  # fmt: skip
        assert "previous-token" in json.loads(out)["thresholds"]
