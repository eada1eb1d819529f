"""Head detection against attention patterns whose heads are known, and the `attnx detect` command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnx.analysis.detect import Detector, detection_targets, text_scores
from attnx.analysis.heads import head_stats
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import InputError
from attnx.io.texts import parse_texts
from tests.models.checkpoints import Reference
from tests.runner import run_attnx

IDS = [7, 3, 9, 4, 7, 3, 9, 4]  # four tokens, repeated


def constructed(ids: list[int]) -> AttentionSpec:
    """Causal heads with one-hot queries aimed at a known key, 20 units above the rest: head 0 at the token
    after the query's earlier copy (induction), head 1 at the token before (previous-token), head 2 at key 0."""
    n = len(ids)
    targets = detection_targets(ids)
    q = np.zeros((n, 3 * n))
    for i in range(n):
        for h, name in ((0, "induction"), (1, "previous-token")):
            if targets[name][i] >= 0:
                q[i, h * n + targets[name][i]] = 20.0 * np.sqrt(n)
        q[i, 2 * n] = 20.0 * np.sqrt(n)
    k = np.hstack([np.eye(n)] * 3)
    tokens = tuple(map(str, ids))
    return AttentionSpec.build(q=q, k=k, v=k, heads=3, tokens=tokens, key_tokens=tokens, causal=True)


class TestTargets:
    """The key each detector scores a query on."""

    def test_by_hand(self) -> None:
        targets = detection_targets([5, 6, 5, 5, 6])
        assert targets["previous-token"].tolist() == [-1, 0, 1, 2, 3]
        assert targets["duplicate-token"].tolist() == [-1, -1, 0, 2, 1]  # the latest earlier copy
        assert targets["induction"].tolist() == [-1, -1, 1, 3, 2]


class TestConstructedHeads:
    """Heads built to attend one way are found, with the counts behind each score."""

    def test_induction_previous_and_sink(self) -> None:
        detector = Detector()
        for _ in range(3):
            detector.add(0, compute(constructed(IDS)), IDS)
        found = detector.done(model="m", architecture="a", source="s")
        induction, previous, sink = (found.tallies[0][h] for h in range(3))
        assert induction["induction"].mean == pytest.approx(1.0, abs=1e-6)
        assert induction["induction"].count == 3 * 4  # the four queries of the repeat, three times
        assert induction["induction"].spread == pytest.approx(0.0, abs=1e-9)
        assert previous["previous-token"].mean == pytest.approx(1.0, abs=1e-6)
        assert previous["previous-token"].count == 3 * 7  # queries 1..7 (query 0 sees one key: no choice)
        assert sink["sink"].mean == pytest.approx(1.0, abs=1e-6)
        assert [found.label(0, h)[0] for h in range(3)] == ["induction", "previous-token", "sink"]
        assert found.grid("induction")[0, 1] < 0.01 and found.sequences == 3 and found.tokens == 24

    def test_no_repeat_no_induction_score(self) -> None:
        """Without a repeated token, induction and duplicate scores rest on no position: None, not 0."""
        detector = Detector()
        own = [detector.add(0, compute(constructed([1, 2, 3, 4])), [1, 2, 3, 4])]
        found = detector.done(model="m", architecture="a", source="s")
        assert found.tallies[0][0]["induction"].mean is None and found.tallies[0][0]["induction"].count == 0
        assert own[0][0]["induction"] is None
        assert np.isnan(found.grid("duplicate-token")).all()


class TestLabels:
    """The DETECT rule of the measure registry: the best detector reaching 0.5, else sink; each with its count."""

    def test_label_count_is_the_labels_positions(self) -> None:
        """Three sequences: the induction head's label rests on 12 positions, the sink head's on 21."""
        detector = Detector()
        for _ in range(3):
            detector.add(0, compute(constructed(IDS)), IDS)
        found = detector.done(model="m", architecture="a", source="s")
        assert [found.label_count(0, h) for h in range(3)] == [12, 21, 21]

    def test_sink_only_when_no_detector_passes(self) -> None:
        """Head 2 parks all weight on key 0 and is a sink; with key 0 counted as no sink it has no label at all."""
        detector = Detector()
        detector.add(0, compute(constructed(IDS)), IDS, sinks=(5,))
        found = detector.done(model="m", architecture="a", source="s")
        assert found.label(0, 2) == (None, None) and found.label_count(0, 2) is None
        assert found.tallies[0][2]["sink"].mean == pytest.approx(0.0, abs=1e-6)


class TestSharedWithHeads:
    """detect scores every position as `attnx heads` does: the same function, the same numbers."""

    def test_entropy_and_sink_equal_head_stats(self) -> None:
        """On one sequence, each head's entropy and sink means equal head_stats' uniform and sink scores."""
        result = compute(constructed(IDS))
        detector = Detector()
        own = [detector.add(0, result, IDS)]
        stats = head_stats(result)
        assert [row["entropy"] for row in own[0]] == [s.scores["uniform"] for s in stats]
        assert [row["sink"] for row in own[0]] == [s.scores["sink"] for s in stats]
        assert [row["induction"] for row in own[0]] == [s.scores["induction"] for s in stats]

    def test_ids_not_strings_find_repeats(self) -> None:
        """Two ids shown as the same string are different tokens to detect: no repeat, no induction target."""
        eye = np.eye(2)
        result = compute(AttentionSpec.build(q=eye, k=eye, v=eye, heads=1, tokens=("x", "x"), key_tokens=("x", "x")))
        assert head_stats(result)[0].counts["induction"] == 1  # by strings, query 1 repeats query 0
        scores = text_scores(result, [1, 2])
        assert scores["induction"].shape == (1, 0) and scores["previous-token"].shape == (1, 1)


class TestTexts:
    """--texts: one text per line or JSON Lines."""

    def test_lines_and_json(self) -> None:
        raw = '\ufeffthe cat\n\n  "a dog"  \n{"text": "it ran", "id": 3}\n'.encode()
        assert parse_texts(raw, "t", 10) == ["the cat", "a dog", "it ran"]

    @pytest.mark.parametrize(
        ("raw", "message"),
        [
            (b"\n  \n", "no texts"),
            (b"ok\n{bad\n", "t, line 2: not valid JSON"),
            (b'{"txt": "x"}\n', 'non-empty string "text"'),
            (b"\xff\n", "not UTF-8"),
            (b"a\nb\nc\n", "more than 2 texts"),
        ],
    )
    def test_refused(self, raw: bytes, message: str) -> None:
        with pytest.raises(InputError, match=message):
            parse_texts(raw, "t", 2)


class TestCommand:
    """`attnx detect` on the tiny GPT-2 and BERT."""

    def test_random_sequences_json(self, gpt2: Reference) -> None:
        data = json.loads(run_attnx("detect", "--model", str(gpt2.path), "--samples", "3", "--length", "5",
                                    "-f", "json").stdout)  # fmt: skip
        assert data["sequences"] == 3 and data["tokens"] == 3 * 10 and data["n_layers"] == 3
        head = data["layers"][2]["heads"][1]
        assert head["induction"]["count"] == 3 * 5 and head["induction"]["sequences"] == 3
        assert head["previous-token"]["count"] == 3 * 9
        assert 0 <= head["induction"]["mean"] <= 1 and head["induction"]["spread"] >= 0

    def test_texts_from_stdin_as_jsonl(self, bert: Reference) -> None:
        out = run_attnx("detect", "--model", str(bert.path), "--texts", "-", "-f", "jsonl",
                        stdin=b"the cat sat on the mat\n{\"text\": \"the dog ran\"}\n")  # fmt: skip
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert [line["index"] for line in lines] == [0, 1]
        assert lines[1]["tokens"] == ["[CLS]", "the", "dog", "ran", "[SEP]"]
        assert len(lines[0]["layers"]) == 3 and len(lines[0]["layers"][0]) == 4
        assert lines[1]["layers"][0][0]["induction"] is None  # no token repeats in "the dog ran"

    def test_table_and_a_length_too_long(self, gpt2: Reference) -> None:
        table = run_attnx("detect", "--model", str(gpt2.path), "--length", "4", "--measure", "sink", "--no-color")
        assert (
            "Heads found: each head's label over its sink" in table.stdout and "8 sequences, 64 tokens" in table.stdout
        )
        out = run_attnx("detect", "--model", str(gpt2.path), "--length", "9")
        assert out.code == 2 and "--length 9:" in out.stderr and "18 tokens" in out.stderr


class TestHeadsOverTexts:
    """`attnx heads --model DIR --texts FILE`: every layer's heads over the texts."""

    def test_json_pools_the_texts(self, gpt2: Reference, tmp_path: Path) -> None:
        """Entropy pooled over the texts equals the mean of each text's own, weighted by its positions."""
        texts = tmp_path / "texts.txt"
        texts.write_text("the cat sat on the mat\na dog ran far away\n")
        data = json.loads(run_attnx("heads", "--model", str(gpt2.path), "--texts", str(texts), "-f", "json").stdout)
        lines = [json.loads(line) for line in
                 run_attnx("detect", "--model", str(gpt2.path), "--texts", str(texts), "-f", "jsonl").stdout.splitlines()]  # fmt: skip
        entropy = data["layers"][1]["heads"][2]["entropy"]
        own = [line["layers"][1][2]["entropy"] for line in lines]
        counts = [len(line["tokens"]) - 1 for line in lines]  # every query but the first has a choice
        assert entropy["count"] == sum(counts) and entropy["sequences"] == 2
        assert entropy["mean"] == pytest.approx(np.average(own, weights=counts), rel=1e-12)
        assert entropy["spread"] == pytest.approx(np.std(own), rel=1e-12)

    def test_refusals(self, gpt2: Reference) -> None:
        out = run_attnx("heads", "--model", str(gpt2.path), "--texts", "-", "--layer", "1", stdin=b"a\n")
        assert out.code == 2 and "--texts shows every layer" in out.stderr
        out = run_attnx("heads", "--texts", "-", stdin=b"a\n")
        assert out.code == 2 and "--texts runs a checkpoint: give --model DIR" in out.stderr
