"""attnx trace: its table and JSON, its errors, its start-up, settings in the trace and rotary bands."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

import attnx.engines
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from tests.conftest import DECIMALS_4, OUTPUT, TRACES, trace_terms
from tests.runner import run_attnx
from tests.specs import loaded

RANDOM = ["--seed", "4", "--tokens", " ".join(f"w{i}" for i in range(30)), "--d-model", "32", "--heads", "2"]


def squeeze(text: str) -> str:
    """Runs of spaces as one space, lines kept."""
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


def trace_json(*args: str) -> dict:
    """Run `attnx trace ... --format json` and parse its stdout."""
    result = run_attnx("trace", *args, "--format", "json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


class TestTraceTable:
    @pytest.mark.parametrize("token", ["The", "cat"])
    def test_worked_example(self, token: str) -> None:
        """`attnx trace --token T` prints each of the tutorial's dot products with its weight, and the outputs."""
        result = run_attnx("trace", "--token", token, "--no-color", env={"COLUMNS": "120"})
        assert result.code == 0, result.stderr
        text = squeeze(result.stdout)
        for _, rows, output in TRACES[token]:
            for key, terms, dot, scaled, weight in rows:
                row = f"{trace_terms(terms)} = {dot:.4f} {dot:.4f} {scaled:.4f} no {weight:.4f}"
                assert f"{key} " in text and row in text
            assert f"O_h[{token}] 1.0000 [{output[0]:.4f}, {output[1]:.4f}]" in text

    def test_query_picks_the_same_row(self) -> None:
        """--query 1 prints exactly what --token cat prints."""
        by_token = run_attnx("trace", "--token", "cat", "--no-color")
        by_query = run_attnx("trace", "--query", "1", "--no-color")
        assert by_token.code == by_query.code == 0
        assert by_token.stdout == by_query.stdout

    def test_head_restricts(self) -> None:
        """--head 1 prints the second head only (heads count from 0), titled as `run` titles it."""
        result = run_attnx("trace", "-t", "cat", "--head", "1", "--no-color")
        assert result.code == 0
        assert "Head 1 · columns 2-3" in result.stdout and "Head 0 ·" not in result.stdout
        assert "head 1 of 2" in result.stdout
        first = run_attnx("trace", "-t", "cat", "--head", "0", "--no-color")
        assert "Head 0 · columns 0-1" in first.stdout and "Head 1 ·" not in first.stdout

    def test_token_matches_without_the_leading_space(self) -> None:
        """--token cat finds the token shown as ' cat' (a GPT-2 style byte-level token, decoded)."""
        doc = '{"heads": 1, "tokens": ["The", " cat"], "q": [[1.0], [2.0]], "k": [[1.0], [0.5]], "v": [[1.0], [3.0]]}'
        result = run_attnx("trace", "-", "-t", "cat", "--format", "json", stdin=doc.encode())
        assert result.code == 0, result.stderr
        data = json.loads(result.stdout)
        assert (data["token"], data["query"]) == (" cat", 1)

    def test_keys_collapse_and_all(self) -> None:
        """By default 10 keys of 30 are shown with '… 20 more'; --keys all shows every key."""
        summary = re.compile(r"… (\d+) more(?! …)")
        default = run_attnx("trace", *RANDOM, "-t", "w3", "--no-color", env={"COLUMNS": "200"})
        assert default.code == 0
        assert summary.findall(default.stdout) == ["20"] * 8  # two heads, three tables and the Σe line each
        every = run_attnx("trace", *RANDOM, "-t", "w3", "--keys", "all", "--no-color")
        assert every.code == 0 and summary.findall(every.stdout) == []
        two = run_attnx("trace", *RANDOM, "-t", "w3", "--keys", "2", "--no-color")
        assert summary.findall(two.stdout) == ["28"] * 8

    def test_terms_elide_and_all(self) -> None:
        """With d_k = 16, eight products per dot product by default; --terms all writes all sixteen."""
        product = re.compile(r"[\d)]×[\d(]")
        args = ["trace", *RANDOM, "-t", "w3", "--keys", "1", "--no-color"]
        default = run_attnx(*args, env={"COLUMNS": "400"})
        lines = [line for line in default.stdout.splitlines() if product.search(line)]
        assert [len(product.findall(line)) for line in lines] == [8, 8]
        assert all("… (8 more: " in line for line in lines)
        every = run_attnx(*args, "--terms", "all", env={"COLUMNS": "400"})
        lines = [line for line in every.stdout.splitlines() if product.search(line)]
        assert [len(product.findall(line)) for line in lines] == [16, 16]
        assert not any("more:" in line for line in lines)

    def test_long_example_config(self) -> None:
        """configs/random-long-sentence.yaml traces "fox" with elided terms and collapsed keys."""
        data = trace_json("configs/random-long-sentence.yaml", "-t", "fox")
        assert (data["query"], data["n_keys"], len(data["heads"])) == (3, 24, 4)
        assert all(head["d_k"] == 16 and head["rest"]["count"] == 14 for head in data["heads"])

    def test_precision(self) -> None:
        """--precision 2 rounds the numbers to two decimals."""
        result = run_attnx("trace", "-t", "cat", "-p", "2", "--no-color")
        assert "O[cat] = [0.41, 0.13, 0.23, 0.37]" in result.stdout

    def test_computes_one_query_row(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The engine is asked for the traced query's row only, not the whole matrix."""
        seen: list[AttentionSpec] = []
        compute = attnx.engines.compute

        def spy(spec: AttentionSpec, *args: object, **kwargs: object) -> AttentionResult:
            seen.append(spec)
            return compute(spec, *args, **kwargs)

        monkeypatch.setattr(attnx.engines, "compute", spy)
        result = run_attnx("trace", *RANDOM, "--query", "12", "--format", "json")
        assert result.code == 0
        assert [(s.n_queries, s.n_keys, s.query_positions) for s in seen] == [(1, 30, (12,))]


class TestTraceJson:
    def test_worked_example(self) -> None:
        """--format json carries per head the dims, slices, per-key arithmetic and outputs."""
        data = trace_json("--token", "cat")
        assert next(iter(data)) == "format_version" and (data["token"], data["query"]) == ("cat", 1)
        for head, (query, rows, output) in zip(data["heads"], TRACES["cat"], strict=True):
            assert head["q"] == query and head["d_k"] == 2
            assert [key["raw"] for key in head["keys"]] == [row[2] for row in rows]
            np.testing.assert_allclose([key["weight"] for key in head["keys"]], [r[4] for r in rows], atol=DECIMALS_4)
            np.testing.assert_allclose(head["output"], output, rtol=0, atol=DECIMALS_4)
        assert [head["columns"] for head in data["heads"]] == [[0, 1], [2, 3]]
        np.testing.assert_allclose(data["output"], OUTPUT[1], rtol=0, atol=DECIMALS_4)

    def test_agrees_with_run(self) -> None:
        """Trace and run print the same scores, weights and outputs for the same query.

        Equal to float64 rounding, not bit for bit: the engine computes the traced row alone, and a
        one-row matrix product may round its last bit differently from the full one.
        """
        run = json.loads(run_attnx("run", *RANDOM, "--format", "json").stdout)
        trace = trace_json(*RANDOM, "--query", "9", "--keys", "all")
        for h, head in enumerate(trace["heads"]):
            for name, tensor in (("raw", "scores"), ("scaled", "scaled"), ("weight", "weights")):
                got = [key[name] for key in head["keys"]]
                np.testing.assert_allclose(got, run[tensor][h][9], rtol=1e-13, atol=0)
            np.testing.assert_allclose(head["output"], run["head_outputs"][h][9], rtol=1e-13, atol=0)
        np.testing.assert_allclose(trace["output"], run["output"][9], rtol=1e-13, atol=0)

    def test_head_and_keys(self) -> None:
        """--head 1 --keys 3 gives head 1, three keys and the summary of the other 27."""
        data = trace_json(*RANDOM, "-t", "w0", "--head", "1", "--keys", "3")
        (head,) = data["heads"]
        assert head["head"] == 1 and len(head["keys"]) == 3 and head["rest"]["count"] == 27


class TestTraceErrors:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                ["--seed", "1", "--tokens", "the cat saw the dog", "-t", "the"],
                "token 'the' appears at queries 0, 3; pick one by its position with --query",
            ),
            (["-t", "dog"], "token 'dog' is not in the input; tokens: The, cat, sat, on, mat"),
            (["--query", "5"], "query 5 is out of range; the input has queries 0..4 (or -5..-1)"),
            (["-t", "cat", "--head", "2"], "head 2 is out of range; heads are numbered 0..1 (or -2..-1)"),
            (["-t", "cat", "--head", "-3"], "head -3 is out of range; heads are numbered 0..1 (or -2..-1)"),
            ([], "pick the query to trace with --token or --query; tokens: The, cat, sat, on, mat"),
            (["-t", "cat", "--query", "1"], "give --token or --query, not both (got --token 'cat' and --query 1)"),
            (["-t", "cat", "--terms", "none"], "--terms expects a whole number of at least 1 or 'all', got 'none'"),
            (["-t", "cat", "--keys", "0"], "--keys expects a whole number of at least 1 or 'all', got '0'"),
        ],
    )
    def test_one_line_and_exit_2(self, args: list[str], message: str) -> None:
        """Each mistake is exit 2 with exactly one line on stderr and nothing on stdout."""
        result = run_attnx("trace", *args)
        assert result.code == 2
        assert result.stdout == ""
        assert result.stderr == f"attnx: error: {message}\n"


class TestStartup:
    def test_module_does_not_import_numpy(self) -> None:
        """Importing the command line, trace included, leaves NumPy (and torch) unimported."""
        code = "import sys, attnx.cli.trace; print('numpy' in sys.modules, 'torch' in sys.modules)"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert proc.stdout == "False False\n"

    def test_help_counts_heads_from_zero(self) -> None:
        """The help of --head says heads are counted from 0, -1 the last, on every command that takes it."""
        for command in ("trace", "run", "heads"):
            result = run_attnx(command, "--help", env={"COLUMNS": "200"})
            assert result.code == 0
            assert "Only head N, counted from 0 as in the tables, -1 the last." in squeeze(result.stdout)

    def test_head_from_the_end(self) -> None:
        """--head -1 traces the last head, as --head 1 does on two heads; --query -1 is the last query."""
        last = run_attnx("trace", "-t", "cat", "--head", "-1", "-f", "json")
        assert last.code == 0, last.stderr
        assert [h["head"] for h in json.loads(last.stdout)["heads"]] == [1]
        assert json.loads(run_attnx("trace", "--query", "-1", "-f", "json").stdout)["query"] == 4


class TestSettingsInTheTrace:
    """A trace says how a soft cap and rotary positions made its numbers."""

    def test_softcap_and_rope(self) -> None:
        """--softcap 0.5 --rope-theta 100: each scaled score is 0.5·tanh(raw·s/0.5); table and JSON say both."""
        args = ("trace", "--token", "cat", "--softcap", "0.5", "--rope-theta", "100")
        data = json.loads(run_attnx(*args, "-f", "json").stdout)
        assert data["softcap"] == 0.5 and data["rope"] == {
            "theta": 100.0,
            "pairs": "half",
            "fraction": 1.0,
            "scaling": None,
        }
        for head in data["heads"]:
            for key in head["keys"]:
                assert key["scaled"] == pytest.approx(0.5 * math.tanh(key["raw"] * data["scale"] / 0.5), abs=1e-15)
        table = run_attnx(*args).stdout
        assert "scaled = 0.5·tanh(raw × 0.7071 / 0.5)" in table and "(after RoPE at position 1)" in table


class TestRopeBands:
    """With rotary positions, the trace splits each Q·K by pair: the bands add up to the raw score."""

    @pytest.mark.parametrize(
        ("extra", "columns"),
        [((), ["p0", "p1", "p2", "p3"]), (("--rope-pairs", "interleaved"), ["p0", "p1", "p2", "p3"])],
    )
    def test_bands_add_up(self, extra: tuple[str, ...], columns: list[str]) -> None:
        """d_k 8: four pairs per key in the JSON and the table, summing to each key's raw score."""
        args = ("trace", "--token", "c", "--rope-theta", "100", "--seed", "1", "--tokens", "a b c d e f",
                "--d-model", "8", "-H", "1", *extra)  # fmt: skip
        data = json.loads(run_attnx(*args, "-f", "json").stdout)
        for key in data["heads"][0]["keys"]:
            assert len(key["bands"]) == 4 and sum(key["bands"]) == pytest.approx(key["raw"], abs=1e-12)
        table = run_attnx(*args).stdout
        assert "Q·K by RoPE pair (p0 turns fastest with position)" in table
        header = next(line for line in table.splitlines() if line.split()[:1] == ["p0"])
        assert header.split() == columns
        assert (
            "bands" not in json.loads(run_attnx("trace", "--token", "cat", "-f", "json").stdout)["heads"][0]["keys"][0]
        )

    def test_partial_rotary_adds_the_unturned_rest(self) -> None:
        """Half of d_k 8 turned: two pairs and the rest of the columns, summing to the raw score."""
        from attnx.analysis.trace import build_trace
        from attnx.core.positions import Rotary
        from attnx.engines import compute

        spec = loaded(seed=1, tokens=tuple("abcdef"), d_model=8, heads=1)
        trace = build_trace(compute(spec.with_settings(rotary=Rotary(fraction=0.5)).select_queries([2])))
        for line in trace.heads[0].keys:
            assert line.bands is not None and len(line.bands) == 3
            assert line.bands.sum() == pytest.approx(line.raw, abs=1e-12)


class TestBeforeRope:
    """The trace shows the query and each key before rotary positions turned them."""

    def test_slices_before_rope_are_the_unturned_ones(self) -> None:
        """q_before_rope and k_before_rope equal Q and K computed without rotary positions; the table shows them."""
        args = ("trace", "--token", "c", "--seed", "1", "--tokens", "a b c d e f", "--d-model", "8", "-H", "2")
        turned = json.loads(run_attnx(*args, "--rope-theta", "100", "-f", "json").stdout)
        plain = json.loads(run_attnx(*args, "-f", "json").stdout)
        for head_turned, head_plain in zip(turned["heads"], plain["heads"], strict=True):
            np.testing.assert_allclose(head_turned["q_before_rope"], head_plain["q"], rtol=0, atol=1e-14)
            assert not np.allclose(head_turned["q"], head_plain["q"])  # position 2 turned it
            for key_turned, key_plain in zip(head_turned["keys"], head_plain["keys"], strict=True):
                np.testing.assert_allclose(key_turned["k_before_rope"], key_plain["k"], rtol=0, atol=1e-14)
        assert "q_before_rope" not in plain["heads"][0]
        table = run_attnx(*args, "--rope-theta", "100").stdout
        assert "Q_h[c] before RoPE = [" in table and "K_h[key] before RoPE" in table
