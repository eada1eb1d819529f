"""attnx heads: per-head statistics and labels, in a table and JSON."""

from __future__ import annotations

import json
import math
import re

import pytest

from attnx.analysis.heads import THRESHOLDS
from tests.runner import Outcome, run_attnx

PATTERNS = "configs/attention-patterns.yaml"


def invoke(*args: str, code: int = 0, env: dict[str, str] | None = None) -> Outcome:
    """`attnx ARGS` piped, 120 columns wide, which must exit with ``code``."""
    result = run_attnx(*args, env={"COLUMNS": "120", **(env or {})})
    assert result.code == code, result.stderr
    return result


class TestHeadPicked:
    """--head N: that head's rows alone, in the tables and the JSON (-1: the last)."""

    def test_json(self) -> None:
        """The JSON lists head 4 alone, with the numbers it has among all five."""
        every = json.loads(invoke("heads", PATTERNS, "-f", "json").stdout)
        for head in ("4", "-1"):
            picked = json.loads(invoke("heads", PATTERNS, "--head", head, "-f", "json").stdout)
            assert picked["heads"] == [every["heads"][4]] and picked["n_heads"] == 5

    def test_table(self) -> None:
        """The label table, the writes table and the per-query tables show head 1 alone."""

        def head_rows(out: str) -> list[list[str]]:
            return [line.split() for line in out.splitlines() if re.match(r"\s*H\d ", line)]

        out = invoke("heads", PATTERNS, "--head", "1", env={"NO_COLOR": "1"}).stdout
        every = head_rows(invoke("heads", PATTERNS, env={"NO_COLOR": "1"}).stdout)
        assert head_rows(out) == [row for row in every if row[0] == "H1"]  # its label row, then what it writes
        assert [row[:2] for row in head_rows(out)] == [["H1", "previous-token"], ["H1", "0.2009"]]
        assert "Head 1 · columns 6-11 · d_k = 6 · previous-token" in out and "Head 0 ·" not in out

    def test_heatmap(self) -> None:
        """--view heatmap --head 2 draws head 2's weights alone."""
        out = invoke("heads", PATTERNS, "--head", "2", "--view", "heatmap", env={"NO_COLOR": "1"}).stdout
        assert "Head 2 · columns 12-17" in out and "Head 0 ·" not in out and "Head 3 ·" not in out

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--head", "5"], "head 5 is out of range; heads are numbered 0..4 (or -5..-1)"),
            (["--head", "0", "--model", "m", "--text", "a", "--layer", "all"], "--head shows one head of one layer"),
        ],
    )
    def test_refused(self, args: list[str], message: str) -> None:
        """A head the input lacks, or --head with the model view: exit 2, one line."""
        result = invoke("heads", *([PATTERNS] if "--model" not in args else []), *args, code=2)
        assert result.stderr == f"attnx: error: {message}\n" or result.stderr.startswith(f"attnx: error: {message}")


class TestHeadsCommand:
    def test_pattern_config_labels(self) -> None:
        """configs/attention-patterns.yaml: its five heads are self, previous-token, sink, uniform, induction."""
        data = json.loads(invoke("heads", PATTERNS, "-f", "json").stdout)
        assert next(iter(data)) == "format_version" and data["thresholds"] == {
            **THRESHOLDS,
            "first-token": THRESHOLDS["sink"],
        }
        assert [h["label"] for h in data["heads"]] == ["self", "previous-token", "sink", "uniform", "induction"]
        # q and k are 4 × one-hot, d_k = 6: a match scores 16/√6; causal, so query i sees i + 1 keys
        s = 16 / math.sqrt(6)
        sharp = [math.exp(s) / (math.exp(s) + i) for i in range(1, 6)]  # queries 1..5
        assert data["heads"][0]["label_score"] == pytest.approx(sum(sharp) / 5, abs=1e-12)
        assert data["heads"][3]["label_score"] == pytest.approx(1.0, abs=1e-12)
        # induction: queries 3, 4, 5 (the repeated a, b, c) see 4, 5, 6 keys
        assert data["heads"][4]["label_score"] == pytest.approx(sum(sharp[2:]) / 3, abs=1e-12)

    def test_per_query_json(self) -> None:
        """Per query: visible keys, entropy (null where undefined), top key by index and token, 0-based."""
        data = json.loads(invoke("heads", PATTERNS, "-f", "json").stdout)
        first = data["heads"][3]["queries"]  # the uniform head
        assert [q["visible_keys"] for q in first] == [1, 2, 3, 4, 5, 6]
        assert first[0]["normalized_entropy"] is None and first[0]["entropy"] == 0.0
        assert first[5]["entropy"] == pytest.approx(math.log(6)) and first[5]["effective_keys"] == pytest.approx(6)
        induction = data["heads"][4]["queries"]
        assert (induction[3]["top_key"], induction[3]["top_key_token"]) == (1, "b")

    def test_table(self) -> None:
        """The table lists labels, the score meanings and thresholds, and per-head query tables."""
        out = invoke("heads", PATTERNS).stdout
        assert "induction" in out and "previous-token" in out
        assert "self ≥ 0.5 · previous-token ≥ 0.5" in out
        assert "Head 4 · columns 24-29 · d_k = 6 · induction (0.9942)" in out
        rows = [line.split() for line in out.splitlines() if re.match(r"\s*H\d ", line)]
        assert [row[:2] for row in rows[:5]] == [["H0", "self"], ["H1", "previous-token"], ["H2", "sink"],
                                                 ["H3", "uniform"], ["H4", "induction"]]  # fmt: skip
        # What the heads write: H2 puts 0.9957 of its weight on key 0 over queries 1-5, a sink; no head is faint.
        assert rows[7] == ["H2", "0.9957", "0.9957", "0.9964", "1.0000", "sink"]
        assert [row[-1] for row in rows[5:]] == ["—", "—", "sink", "—", "—"]

    def test_worked_example_scale_diagnostics(self) -> None:
        """On the worked example the saturation numbers are the scaled-score std and mean max weight."""
        data = json.loads(invoke("heads", "-f", "json").stdout)
        head = data["heads"][0]
        assert head["scaled_std"] == pytest.approx(math.sqrt(0.24), rel=1e-12)  # head 0: 0.4899
        assert head["mean_max_weight"] == pytest.approx((0.2509 + 0.3664 + 0.3673 + 0.2 + 0.2509) / 5, abs=1e-4)

    def test_tied_top_keys(self) -> None:
        """The worked example's head 0: "on" weighs all five keys 0.2, so its top key is The and four more tie it."""
        out = invoke("heads").stdout
        rows = [line.split() for line in out.splitlines() if re.match(r"(The|cat|sat|on|mat)\s+\d", line)]
        assert [row[6:] for row in rows[:5]] == [["cat", "+2", "tied"], ["The", "+1", "tied"], ["sat"],
                                                 ["The", "+4", "tied"], ["cat", "+2", "tied"]]  # fmt: skip
        data = json.loads(invoke("heads", "-f", "json").stdout)
        queries = data["heads"][0]["queries"]
        assert [(q["top_key"], q["top_key_ties"]) for q in queries] == [(1, 3), (0, 2), (2, 1), (0, 5), (1, 3)]

    def test_heatmap_view_without_colour(self) -> None:
        """--view heatmap with NO_COLOR draws shades under the label table."""
        result = invoke("heads", "--view", "heatmap", env={"NO_COLOR": "1"})
        assert "cat ██ 0.3664 ░░ 0.0891" in result.stdout and "uniform" in result.stdout

    def test_unsupported_format_is_exit_2(self) -> None:
        """heads writes table or json; csv is a usage error naming those."""
        assert "'csv' is not one of 'table', 'json'" in invoke("heads", "-f", "csv", code=2).stderr

    def test_per_query_tables_keep_to_rows(self) -> None:
        """30 queries at --rows 4: each head's table shows q0, q1, ⋮, q28, q29 and says 26 were left out."""
        tokens = " ".join(f"q{i}" for i in range(30))
        out = invoke("heads", "--seed", "0", "--tokens", tokens, "--d-model", "4", "-H", "2", "--rows", "4").stdout
        rows = [line.split()[0] for line in out.splitlines() if re.match(r"(q\d+|⋮)\s", line)]
        assert rows == ["q0", "q1", "⋮", "q28", "q29"] * 2
        assert out.count("26 of 30 rows left out (⋮); use --rows all or --format csv to see them") == 2

    def test_tokens_are_text_not_markup(self) -> None:
        """A token such as [b] is shown as typed in the query and top key columns (Rich read it as markup)."""
        out = invoke("heads", "--seed", "0", "--tokens", "[b] cat [red]x", "--d-model", "4", "-H", "1").stdout
        queries = [line.split()[0] for line in out.splitlines()[-3:]]
        assert queries == ["[b]", "cat", "[red]x"]
