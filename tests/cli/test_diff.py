from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attnx.cli import app
from attnx.io import load_spec
from tests.engines.test_engines import reference


def invoke(runner: CliRunner, *args: str, code: int = 0, input: str | None = None):
    result = runner.invoke(app, list(args), input=input, env={"COLUMNS": "120"})
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def worked_json(runner: CliRunner, tmp_path: Path) -> str:
    """The worked example's result, as `attnx run --format json` writes it."""
    path = tmp_path / "worked.json"
    path.write_text(invoke(runner, "run", "-f", "json").stdout)
    return str(path)


def input_file(tmp_path: Path, name: str, nudge: float = 0.0, **changes: object) -> str:
    """The worked example as a JSON input, with q nudged by ``nudge`` and other keys changed."""
    spec = load_spec()
    doc = {"tokens": list(spec.tokens), "heads": 2, "q": (spec.q + nudge).tolist(), "k": spec.k.tolist(),
           "v": spec.v.tolist(), **changes}  # fmt: skip
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


class TestHeadsSweep:
    def test_json_matches_a_per_head_loop(self, runner: CliRunner) -> None:
        """`diff --heads 1,2,4 -f json`: each configuration's weights and output equal an explicit loop; shifts too."""
        data = json.loads(invoke(runner, "diff", "--heads", "1,2,4", "-f", "json").stdout)
        assert next(iter(data)) == "format_version" and data["mode"] == "sweep" and data["varied"] == "heads"
        assert [c["label"] for c in data["configs"]] == ["H=1", "H=2", "H=4"]
        spec = load_spec()
        expected = [reference(spec.with_heads(h)) for h in (1, 2, 4)]
        for config, ref, h in zip(data["configs"], expected, (1, 2, 4), strict=True):
            assert (config["heads"], config["d_k"], config["error"]) == (h, 4 // h, None)
            np.testing.assert_allclose(config["weights"], ref["weights"], rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(config["output"], ref["output"], rtol=1e-13, atol=1e-15)
        assert data["configs"][2]["scale"] == 1.0  # d_k = 1
        pairs = [(s["from"], s["to"]) for s in data["shifts"]]
        assert pairs == [(0, 1), (1, 2), (0, 2)]
        for s in data["shifts"]:
            change = expected[s["to"]]["output"] - expected[s["from"]]["output"]
            np.testing.assert_allclose(s["l2"], np.linalg.norm(change, axis=1), rtol=1e-12)
            np.testing.assert_allclose(s["max_abs"], np.abs(change).max(axis=1), rtol=1e-12)
            assert s["l2_overall"] == pytest.approx(np.linalg.norm(change), rel=1e-12)

    def test_table_shows_every_configuration_and_the_shifts(self, runner: CliRunner) -> None:
        """The table names each configuration, prints the tutorial's "cat" row for H=1 and the shifts."""
        out = invoke(runner, "diff", "--heads", "1,2,4").stdout
        for title in ("H=1 · 1 head × d_k 4", "H=2 · 2 heads × d_k 2", "H=4 · 4 heads × d_k 1"):
            assert title in out
        assert "cat   0.4026   0.0898   0.2442" in out
        assert "L2 shift of output per token" in out and "H=1 → H=4" in out
        one, two = (reference(load_spec().with_heads(h))["output"] for h in (1, 2))
        assert f"{np.linalg.norm(two[1] - one[1]):.4f}" in out  # "cat", H=1 → H=2

    def test_head_count_that_does_not_divide_is_a_row(self, runner: CliRunner) -> None:
        """H=3 on d_model 4: reported with the reason, exit 0, the others still shown."""
        out = invoke(runner, "diff", "--heads", "1,3,2").stdout
        assert "H=3: not computed: d_model 4 is not divisible by heads 3; head counts that work: 1, 2, 4" in out
        data = json.loads(invoke(runner, "diff", "--heads", "1,3", "-f", "json").stdout)
        assert data["configs"][1] == {
            "label": "H=3",
            "value": 3,
            "error": "d_model 4 is not divisible by heads 3; head counts that work: 1, 2, 4",
        }
        assert data["shifts"] == []

    def test_scale_sweep_shows_saturation(self, runner: CliRunner) -> None:
        """--scale on random d_k = 64 rows: without scaling the scores spread ~√64 times wider and max weights grow."""
        args = ["--seed", "3", "--tokens", "a b c d e f g h i j", "--d-model", "64", "-f", "json"]
        data = json.loads(invoke(runner, "diff", "--scale", "sqrt_dk,none", *args).stdout)
        scaled, unscaled = data["configs"]
        assert unscaled["scaled_std"][0] == pytest.approx(8 * scaled["scaled_std"][0], rel=1e-12)
        assert unscaled["mean_max_weight"][0] > 2 * scaled["mean_max_weight"][0]

    def test_layout_sweep_table(self, runner: CliRunner) -> None:
        """--layout contiguous,interleaved: the second configuration's heads read columns 0,2 and 1,3."""
        out = invoke(runner, "diff", "--layout", "contiguous,interleaved").stdout
        assert "Head 1 · columns 0,2 · d_k = 2" in out and "layout=interleaved" in out

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            ([], "give exactly one of --heads, --scale, --layout, --kv-heads"),
            (["--heads", "2"], "--heads compares two values or more"),
            (["--heads", "1,two"], "--heads takes whole numbers of at least 1, not 'two'"),
            (["--heads", "1,2", "--scale", "none,sqrt_dk"], "got --heads, --scale"),
            (["--layout", "contiguous,diagonal"], "--layout takes contiguous, interleaved, not 'diagonal'"),
            (["--heads", "1,2", "--atol", "1"], "--rtol and --atol apply to two inputs"),
        ],
    )
    def test_usage_errors(self, runner: CliRunner, args: list[str], message: str) -> None:
        """Wrong sweep flags are exit 2 with one line."""
        assert message in invoke(runner, "diff", *args, code=2).stderr


class TestRows:
    def test_sweep_tables_keep_to_rows(self, runner: CliRunner) -> None:
        """A sweep over 30 tokens at --rows 2: weights, output and shift tables show t0, ⋮, t29."""
        tokens = " ".join(f"t{i}" for i in range(30))
        out = invoke(runner, "diff", "--heads", "1,2", "--seed", "0", "--tokens", tokens, "--d-model", "4",
                     "--rows", "2").stdout  # fmt: skip
        assert "t0 " in out and "t29 " in out and "t15 " not in out
        # weights (1 + 2 heads), two outputs and two shift tables, each with its note
        assert out.count("28 of 30 rows left out (⋮)") == 7

    def test_locations_are_text_not_markup(self, runner: CliRunner, tmp_path: Path) -> None:
        """The largest differences name tokens as typed: [b] is not read as Rich markup."""
        spec = load_spec()
        doc = {"tokens": ["[b]", "x", "y", "z", "w"], "heads": 2, "q": spec.q.tolist(), "k": spec.k.tolist(),
               "v": spec.v.tolist()}  # fmt: skip
        a, b = tmp_path / "a.json", tmp_path / "b.json"
        a.write_text(json.dumps(doc))
        b.write_text(json.dumps({**doc, "scale": 0.75}))
        out = invoke(runner, "diff", str(a), str(b), code=1).stdout
        assert "head 1 · x → [b]" in out


class TestTwoInputs:
    def test_equal_is_exit_0(self, runner: CliRunner, worked_json: str, tmp_path: Path) -> None:
        """A JSON result against the input it came from: every tensor 0 apart, exit 0."""
        out = invoke(runner, "diff", worked_json, input_file(tmp_path, "same.json")).stdout
        assert "A and B agree: all 6 tensors within tolerance" in out
        assert "(attnx result, float64)" in out and "(input, computed here, float64)" in out

    def test_near_equal_is_exit_0(self, runner: CliRunner, worked_json: str, tmp_path: Path) -> None:
        """Q nudged by 1e-12 stays within rtol 1e-7, atol 1e-7."""
        data = json.loads(
            invoke(runner, "diff", worked_json, input_file(tmp_path, "near.json", 1e-12), "-f", "json").stdout
        )
        assert data["passed"] is True
        assert 0 < data["tensors"][0]["max_abs"] < 1e-11

    def test_different_is_exit_1_with_locations(self, runner: CliRunner, worked_json: str, tmp_path: Path) -> None:
        """A different scale: exit 1; the largest weight difference is at head 1, query sat, key sat."""
        other = input_file(tmp_path, "scaled.json", scale=0.75)
        data = json.loads(invoke(runner, "diff", worked_json, other, "-f", "json", code=1).stdout)
        weights = next(t for t in data["tensors"] if t["tensor"] == "weights")
        assert data["passed"] is False and weights["passed"] is False
        assert weights["axes"] == ["head", "query", "key"] and weights["worst_index"] == [0, 2, 2]
        top = weights["largest"][0]
        # head 1, sat → sat: raw scores [1, 1, 2, 0, 1], scaled by 1/√2 in A and by 0.75 in B
        a, b = (math.exp(2 * m) / sum(math.exp(x * m) for x in (1, 1, 2, 0, 1)) for m in (2**-0.5, 0.75))
        assert (top["a"], top["b"]) == (pytest.approx(a, rel=1e-12), pytest.approx(b, rel=1e-12))
        assert top["abs_diff"] == pytest.approx(b - a, rel=1e-9)
        table = invoke(runner, "diff", worked_json, other, code=1).stdout
        assert "head 1 · sat → sat" in table and "A and B differ: 5 of 6 tensors" in table

    def test_tolerance_flags(self, runner: CliRunner, worked_json: str, tmp_path: Path) -> None:
        """--atol large enough turns the same comparison into exit 0."""
        other = input_file(tmp_path, "scaled.json", scale=0.75)
        invoke(runner, "diff", worked_json, other, "--atol", "0.2")

    def test_shapes_differ_is_exit_1(self, runner: CliRunner, worked_json: str, tmp_path: Path) -> None:
        """Two heads against four: 'shapes differ' rows, exit 1, no traceback."""
        four = input_file(tmp_path, "four.json", heads=4)
        result = invoke(runner, "diff", worked_json, four, "-f", "json", code=1)
        weights = next(t for t in json.loads(result.stdout)["tensors"] if t["tensor"] == "weights")
        assert weights["problem"] == "shapes differ: (2,5,5) vs (4,5,5)" and weights["max_abs"] is None
        assert "shapes differ" in invoke(runner, "diff", worked_json, four, code=1).stdout

    def test_nan_is_null_and_fails(self, runner: CliRunner, worked_json: str, tmp_path: Path) -> None:
        """A null (NaN) weight in a JSON result: the difference is NaN, written as null, and fails."""
        data = json.loads(Path(worked_json).read_text())
        data["weights"][0][0][0] = None
        broken = tmp_path / "broken.json"
        broken.write_text(json.dumps(data))
        out = json.loads(invoke(runner, "diff", str(broken), worked_json, "-f", "json", code=1).stdout)
        weights = next(t for t in out["tensors"] if t["tensor"] == "weights")
        assert (weights["max_abs"], weights["passed"]) == (None, False)
        assert weights["largest"][0]["index"] == [0, 0, 0] and weights["largest"][0]["a"] is None

    def test_stdin_side(self, runner: CliRunner, worked_json: str) -> None:
        """`-` reads one side from stdin, input or result alike."""
        text = Path(worked_json).read_text()
        invoke(runner, "diff", "-", worked_json, input=text)

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["missing.yaml", "other.yaml"], "missing.yaml: no such file"),
            (["-", "-"], "only one of A and B can be -"),
        ],
    )
    def test_bad_input_is_exit_2(self, runner: CliRunner, args: list[str], message: str) -> None:
        """Unreadable inputs are exit 2 with one line."""
        assert message in invoke(runner, "diff", *args, code=2).stderr

    def test_sweep_flag_with_two_inputs_is_exit_2(self, runner: CliRunner, worked_json: str) -> None:
        """Two inputs and a sweep flag contradict each other."""
        assert (
            "give two inputs A B, or one input"
            in invoke(runner, "diff", worked_json, worked_json, "--heads", "1,2", code=2).stderr
        )

    def test_heatmap_of_differences(self, runner: CliRunner, worked_json: str, tmp_path: Path) -> None:
        """--view heatmap adds |A − B| of the weights per head, with its legend."""
        other = input_file(tmp_path, "scaled.json", scale=0.75)
        out = invoke(runner, "diff", worked_json, other, "--view", "heatmap", code=1).stdout
        assert "Head 1 · |A − B| of weights" in out and "|A − B| of weights: ' ' 0.0000" in out
