"""attnx diff: sweeps of heads, scale, layout and K/V heads, two inputs side by side, masks and widths."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from attnx.io import load_spec
from attnx.render.numbers import MASKED, fmt
from attnx.render.tolerance import sci, tolerance_text
from tests.analysis.test_diff import needs_pooling
from tests.engines.test_engines import reference
from tests.runner import Outcome, run_attnx
from tests.specs import loaded

RANDOM = ["--seed", "0", "--tokens", "The cat sat on mat", "--d-model", "4"]


def invoke(*args: str, code: int = 0, stdin: bytes = b"", columns: int = 120) -> Outcome:
    """`attnx ARGS` piped, ``columns`` wide, which must exit with ``code``."""
    result = run_attnx(*args, stdin=stdin, env={"COLUMNS": str(columns)})
    assert result.code == code, result.stderr
    return result


# A number as a table shows it, standing alone: not part of a longer number, nor cut by an ellipsis.
NUMBER = re.compile(r"(?<![\w.…])-?\d+(?:\.\d+)?(?:e[-+]\d+)?(?![\w.…])")


def whole_numbers(text: str) -> set[str]:
    """Every number ``text`` shows whole."""
    return set(NUMBER.findall(text))


@pytest.fixture
def worked_json(tmp_path: Path) -> str:
    """The worked example's result, as `attnx run --format json` writes it."""
    path = tmp_path / "worked.json"
    path.write_text(invoke("run", "-f", "json").stdout)
    return str(path)


def input_file(tmp_path: Path, name: str, nudge: float = 0.0, **changes: object) -> str:
    """The worked example as a JSON input, with q nudged by ``nudge`` and other keys changed."""
    spec = load_spec()
    doc = {"tokens": list(spec.tokens), "heads": 2, "q": (spec.inputs.q + nudge).tolist(), "k": spec.inputs.k.tolist(),
           "v": spec.inputs.v.tolist(), **changes}  # fmt: skip
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


class TestHeadsSweep:
    def test_json_matches_a_per_head_loop(self) -> None:
        """`diff --heads 1,2,4 -f json`: each configuration's weights and output equal an explicit loop; shifts too."""
        data = json.loads(invoke("diff", "--heads", "1,2,4", "-f", "json").stdout)
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

    def test_table_shows_every_configuration_and_the_shifts(self) -> None:
        """The table names each configuration, prints the tutorial's "cat" row for H=1 and the shifts."""
        out = invoke("diff", "--heads", "1,2,4").stdout
        for title in ("H=1 · 1 head × d_k 4", "H=2 · 2 heads × d_k 2", "H=4 · 4 heads × d_k 1"):
            assert title in out
        assert "cat   0.4026   0.0898   0.2442" in out
        assert "L2 shift of output per token" in out and "H=1 → H=4" in out
        one, two = (reference(load_spec().with_heads(h))["output"] for h in (1, 2))
        assert f"{np.linalg.norm(two[1] - one[1]):.4f}" in out  # "cat", H=1 → H=2

    def test_head_count_that_does_not_divide_is_refused(self) -> None:
        """H=3 on d_model 4: refused before anything is computed, in the line `run -H 3` gives, exit 2 as it does
        (the sweep exited 0 with "H=3: not computed" under a header saying "every configuration has d_k 4")."""
        line = (
            "attnx: error: built-in example (cat-sat-on-mat): d_model 4 is not divisible by heads 3; head counts "
            "that work: 1, 2, 4\n"
        )
        for args in (["--heads", "1,3,2"], ["--heads", "1,3", "-f", "json"]):
            refused = invoke("diff", *args, code=2)
            assert (refused.stdout, refused.stderr) == ("", line)
        assert run_attnx("run", "--heads", "3").stderr == line

    def test_the_header_names_only_what_every_configuration_shares(self) -> None:
        """H=1 and H=2 differ in d_k and K/V heads: the header says only the scale and layout they share."""
        header = " ".join(invoke("diff", "--heads", "1,2").stdout.split("\nConfigurations")[0].split())
        assert header.endswith("--heads varies; every configuration has scale 1/√d_k · layout contiguous")

    def test_a_legend_explains_the_saturation_columns(self) -> None:
        """The line under the configurations says what std scaled and mean max w are."""
        lines = invoke("diff", "--heads", "1,2", columns=200).stdout.splitlines()
        under = lines[lines.index(next(line for line in lines if line.lstrip().startswith("H1 "))) + 1]
        assert under == (
            "std scaled: standard deviation of the head's scaled scores over the pairs it may attend · mean max w: "
            "its largest weight, averaged over the queries that see two keys or more (near 1: saturated)"
        )

    def test_scale_sweep_shows_saturation(self) -> None:
        """--scale on random d_k = 64 rows: without scaling the scores spread ~√64 times wider and max weights grow."""
        args = ["--seed", "3", "--tokens", "a b c d e f g h i j", "--d-model", "64", "-f", "json"]
        data = json.loads(invoke("diff", "--scale", "sqrt_dk,none", *args).stdout)
        scaled, unscaled = data["configs"]
        assert unscaled["scaled_std"][0] == pytest.approx(8 * scaled["scaled_std"][0], rel=1e-12)
        assert unscaled["mean_max_weight"][0] > 2 * scaled["mean_max_weight"][0]

    def test_layout_sweep_table(self) -> None:
        """--layout contiguous,interleaved: the second configuration's heads 0 and 1 read columns 0,2 and 1,3."""
        out = invoke("diff", "--layout", "contiguous,interleaved").stdout
        assert "Head 0 · columns 0,2 · d_k = 2" in out and "Head 1 · columns 1,3 · d_k = 2" in out
        assert "layout=interleaved" in out

    def test_heads_count_from_0(self) -> None:
        """The configurations table names heads H0.. and gives each its own saturation numbers."""
        out = invoke("diff", "--heads", "1,2,4").stdout
        data = json.loads(invoke("diff", "--heads", "1,2,4", "-f", "json").stdout)
        four = data["configs"][2]
        for h in range(4):
            std, top = fmt(four["scaled_std"][h], 4), fmt(four["mean_max_weight"][h], 4)
            assert re.search(rf"\bH{h}\s+{std}\s+{top}\b", out)
        assert "H4" not in out and "Head 4" not in out

    def test_fixed_setting_beside_the_sweep(self) -> None:
        """One value of another sweep flag fixes that setting: --scale none --heads 1,2 multiplies by 1 in both."""
        data = json.loads(invoke("diff", "--scale", "none", "--heads", "1,2", "-f", "json").stdout)
        assert data["varied"] == "heads"
        assert [(c["heads"], c["scale_mode"], c["scale"]) for c in data["configs"]] == [
            (1, "none", 1.0),
            (2, "none", 1.0),
        ]
        spec = load_spec()
        np.testing.assert_allclose(
            data["configs"][0]["weights"], [softmax(spec.inputs.q @ spec.inputs.k.T)], rtol=1e-13
        )

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            ([], "give exactly one of --heads, --scale, --layout, --kv-heads as a comma list"),
            (["--heads", "2"], "lists given: none"),
            (["--heads", ","], "--heads takes one value, or two or more to compare"),
            (["--heads", "1,two"], "--heads takes whole numbers of at least 1, not 'two'"),
            (["--kv-heads", "0,1"], "--kv-heads takes whole numbers of at least 1, not '0'"),
            (["--heads", "1,2", "--scale", "none,sqrt_dk"], "lists given: --heads, --scale"),
            (["--layout", "contiguous,diagonal"], "--layout takes contiguous, interleaved, not 'diagonal'"),
            (["--heads", "1,2", "--atol", "1"], "--rtol and --atol apply to two inputs"),
        ],
    )
    def test_usage_errors(self, args: list[str], message: str) -> None:
        """Wrong sweep flags are exit 2 with one line."""
        assert message in invoke("diff", *args, code=2).stderr


class TestRows:
    def test_sweep_tables_keep_to_rows(self) -> None:
        """A sweep over 30 tokens at --rows 2: weights, output and shift tables show t0, ⋮, t29."""
        tokens = " ".join(f"t{i}" for i in range(30))
        out = invoke("diff", "--heads", "1,2", "--seed", "0", "--tokens", tokens, "--d-model", "4",
                     "--rows", "2").stdout  # fmt: skip
        assert "t0 " in out and "t29 " in out and "t15 " not in out
        # weights (1 + 2 heads), two outputs and two shift tables, each with its note
        assert out.count("28 of 30 rows left out (⋮)") == 7

    def test_locations_are_text_not_markup(self, tmp_path: Path) -> None:
        """The largest differences name tokens as typed: [b] is not read as Rich markup."""
        spec = load_spec()
        doc = {"tokens": ["[b]", "x", "y", "z", "w"], "heads": 2, "q": spec.inputs.q.tolist(), "k": spec.inputs.k.tolist(),
               "v": spec.inputs.v.tolist()}  # fmt: skip
        a, b = tmp_path / "a.json", tmp_path / "b.json"
        a.write_text(json.dumps(doc))
        b.write_text(json.dumps({**doc, "scale": 0.75}))
        out = invoke("diff", str(a), str(b), code=1).stdout
        assert "head 0 · query 1 'x' · key 0 '[b]'" in out


class TestTwoInputs:
    def test_equal_is_exit_0(self, worked_json: str, tmp_path: Path) -> None:
        """A JSON result against the input it came from: every tensor 0 apart, exit 0."""
        out = invoke("diff", worked_json, input_file(tmp_path, "same.json")).stdout
        assert "A and B agree: all 9 tensors compared are within tolerance" in out
        assert "(saved result, float64)" in out and "(input, computed here, float64)" in out

    def test_near_equal_is_exit_0(self, worked_json: str, tmp_path: Path) -> None:
        """Q nudged by 1e-12 stays within rtol 1e-7, atol 1e-7."""
        data = json.loads(invoke("diff", worked_json, input_file(tmp_path, "near.json", 1e-12), "-f", "json").stdout)
        assert data["passed"] is True
        assert 0 < data["tensors"][0]["max_abs"] < 1e-11

    def test_different_is_exit_1_with_locations(self, worked_json: str, tmp_path: Path) -> None:
        """A different scale: exit 1; the largest weight difference is at head 0, query sat, key sat."""
        other = input_file(tmp_path, "scaled.json", scale=0.75)
        data = json.loads(invoke("diff", worked_json, other, "-f", "json", code=1).stdout)
        weights = next(t for t in data["tensors"] if t["tensor"] == "weights")
        assert data["passed"] is False and weights["passed"] is False
        assert weights["axes"] == ["head", "query", "key"] and weights["worst_index"] == [0, 2, 2]
        top = weights["largest"][0]
        # head 0, query 2 'sat' · key 2 'sat': raw scores [1, 1, 2, 0, 1], scaled by 1/√2 in A and by 0.75 in B
        a, b = (math.exp(2 * m) / sum(math.exp(x * m) for x in (1, 1, 2, 0, 1)) for m in (2**-0.5, 0.75))
        assert (top["a"], top["b"]) == (pytest.approx(a, rel=1e-12), pytest.approx(b, rel=1e-12))
        assert top["abs_diff"] == pytest.approx(b - a, rel=1e-9)
        table = invoke("diff", worked_json, other, code=1).stdout
        assert "head 0 · query 2 'sat' · key 2 'sat'" in table and "A and B differ: 5 of 9 tensors" in table

    def test_tolerance_flags(self, worked_json: str, tmp_path: Path) -> None:
        """--atol large enough turns the same comparison into exit 0."""
        other = input_file(tmp_path, "scaled.json", scale=0.75)
        invoke("diff", worked_json, other, "--atol", "0.2")

    def test_shapes_differ_is_exit_1(self, worked_json: str, tmp_path: Path) -> None:
        """Two heads against four: 'shapes differ' rows, exit 1, no traceback."""
        four = input_file(tmp_path, "four.json", heads=4)
        result = invoke("diff", worked_json, four, "-f", "json", code=1)
        weights = next(t for t in json.loads(result.stdout)["tensors"] if t["tensor"] == "weights")
        assert weights["problem"] == "shapes differ: (2,5,5) vs (4,5,5)" and weights["max_abs"] is None
        assert "shapes differ" in invoke("diff", worked_json, four, code=1).stdout

    def test_nan_is_null_and_fails(self, worked_json: str, tmp_path: Path) -> None:
        """A null (NaN) weight in a JSON result: the difference is NaN, written as null, and fails."""
        data = json.loads(Path(worked_json).read_text())
        data["weights"][0][0][0] = None
        broken = tmp_path / "broken.json"
        broken.write_text(json.dumps(data))
        out = json.loads(invoke("diff", str(broken), worked_json, "-f", "json", code=1).stdout)
        weights = next(t for t in out["tensors"] if t["tensor"] == "weights")
        assert (weights["max_abs"], weights["passed"]) == (None, False)
        assert weights["largest"][0]["index"] == [0, 0, 0] and weights["largest"][0]["a"] is None

    def test_stdin_side(self, worked_json: str) -> None:
        """`-` reads one side from stdin, input or result alike."""
        text = Path(worked_json).read_text()
        invoke("diff", "-", worked_json, stdin=text.encode())

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["missing.yaml", "other.yaml"], "missing.yaml: no such file"),
            (["-", "-"], "only one of A and B can be -"),
        ],
    )
    def test_bad_input_is_exit_2(self, args: list[str], message: str) -> None:
        """Unreadable inputs are exit 2 with one line."""
        assert message in invoke("diff", *args, code=2).stderr

    def test_sweep_flag_with_two_inputs_is_exit_2(self, worked_json: str) -> None:
        """Two inputs and a sweep flag contradict each other."""
        assert (
            "give two inputs A B, or one input"
            in invoke("diff", worked_json, worked_json, "--heads", "1,2", code=2).stderr
        )

    def test_heatmap_of_differences(self, worked_json: str, tmp_path: Path) -> None:
        """--view heatmap adds |A − B| of the weights per head, with its legend."""
        other = input_file(tmp_path, "scaled.json", scale=0.75)
        out = invoke("diff", worked_json, other, "--view", "heatmap", code=1).stdout
        assert "Head 0 · |A − B| of weights" in out and "Head 1 · |A − B| of weights" in out
        assert "Head 2" not in out and "|A − B| of weights: ' ' 0.0000" in out


def softmax(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def grouped(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, kv_heads: int) -> dict[str, np.ndarray]:
    """Textbook grouped-query attention, a loop over heads: head h reads K/V head h // (heads / kv_heads)."""
    d_k = q.shape[1] // heads
    weights, outputs = [], []
    for h in range(heads):
        g = h // (heads // kv_heads)
        w = softmax(q[:, h * d_k : (h + 1) * d_k] @ k[:, g * d_k : (g + 1) * d_k].T / math.sqrt(d_k))
        weights.append(w)
        outputs.append(w @ v[:, g * d_k : (g + 1) * d_k])
    return {"weights": np.stack(weights), "output": np.concatenate(outputs, axis=1)}


def pooled(m: np.ndarray, kv_before: int, kv_heads: int) -> np.ndarray:
    """K or V (contiguous heads) with its K/V heads averaged in groups of kv_before / kv_heads, by hand."""
    n, d_k = m.shape[0], m.shape[1] // kv_before
    return m.reshape(n, kv_heads, kv_before // kv_heads, d_k).mean(axis=2).reshape(n, -1)


class TestKvHeadsSweep:
    def test_labels_and_values_the_input_cannot_take(self) -> None:
        """gqa.yaml at 2 K/V heads is computed as it is; 4 K/V heads (more than it has) is refused, exit 2."""
        data = json.loads(invoke("diff", "configs/gqa.yaml", "--kv-heads", "2,1", "-f", "json").stdout)
        assert data["varied"] == "kv_heads" and [c["label"] for c in data["configs"]] == ["kv_heads=2", "kv_heads=1"]
        two = data["configs"][0]
        assert (two["heads"], two["kv_heads"], two["kv_pooled_from"], two["error"]) == (4, 2, None, None)
        spec = load_spec("configs/gqa.yaml")
        np.testing.assert_allclose(
            two["weights"], grouped(spec.inputs.q, spec.inputs.k, spec.inputs.v, 4, 2)["weights"], rtol=1e-13
        )
        refused = invoke("diff", "configs/gqa.yaml", "--kv-heads", "2,4", code=2)
        assert refused.stdout == "" and "kv_heads" in refused.stderr and len(refused.stderr.splitlines()) == 1

    def test_random_input_keeps_its_draw(self) -> None:
        """--heads 4 fixes the head count of a random input; its 4 K/V heads are `run --seed 0 -H 4`'s."""
        data = json.loads(invoke("diff", *RANDOM, "--heads", "4", "--kv-heads", "4,2", "-f", "json").stdout)
        mha = json.loads(invoke("run", *RANDOM, "-H", "4", "-f", "json").stdout)
        first = data["configs"][0]
        assert (first["label"], first["heads"], first["kv_heads"]) == ("kv_heads=4", 4, 4)
        np.testing.assert_array_equal(first["weights"], mha["weights"])
        np.testing.assert_array_equal(first["output"], mha["output"])

    @needs_pooling
    def test_gqa_sweep_pools(self) -> None:
        """gqa.yaml pooled to one K/V head: its keys average to [0.5, 0.5] each, so every weight is 1/3."""
        data = json.loads(invoke("diff", "configs/gqa.yaml", "--kv-heads", "1,2", "-f", "json").stdout)
        one, two = data["configs"]
        assert (one["kv_heads"], one["kv_pooled_from"], one["error"]) == (1, 2, None)
        np.testing.assert_allclose(one["weights"], np.full((4, 3, 3), 1 / 3), rtol=1e-13)
        np.testing.assert_allclose(one["output"], np.full((3, 8), 1 / 3), rtol=1e-13)  # mean of pooled V rows
        assert two["error"] is None
        (shift,) = data["shifts"]
        change = np.asarray(two["output"]) - 1 / 3
        assert (shift["from"], shift["to"]) == (0, 1)
        np.testing.assert_allclose(shift["l2"], np.linalg.norm(change, axis=1), rtol=1e-12)
        out = invoke("diff", "configs/gqa.yaml", "--kv-heads", "1,2").stdout
        assert "kv_heads=1 · 4 heads × d_k 2 · K/V heads mean-pooled 2 → 1" in out

    @needs_pooling
    def test_random_sweep_compares_all_three(self) -> None:
        """4, 2 and 1 K/V heads of one random draw: each pooled configuration equals attention on K/V pooled by hand."""
        args = ["diff", *RANDOM, "--heads", "4", "--kv-heads", "4,2,1", "-f", "json"]
        data = json.loads(invoke(*args).stdout)
        assert [c["error"] for c in data["configs"]] == [None, None, None]
        base = loaded(seed=0, tokens=("The", "cat", "sat", "on", "mat"), d_model=4, heads=4)
        for config in data["configs"]:
            kv = config["kv_heads"]
            expected = grouped(base.inputs.q, pooled(base.inputs.k, 4, kv), pooled(base.inputs.v, 4, kv), 4, kv)
            np.testing.assert_allclose(config["weights"], expected["weights"], rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(config["output"], expected["output"], rtol=1e-12, atol=1e-15)
        assert [(s["from"], s["to"]) for s in data["shifts"]] == [(0, 1), (1, 2), (0, 2)]


def sweep_numbers(data: dict[str, Any], matrices: bool) -> set[str]:
    """Every number a sweep's table must show, formatted as the table formats it (precision 4)."""
    numbers = set()
    for config in data["configs"]:
        numbers.add(fmt(config["scale"], 4))
        numbers.update(fmt(x, 4) for x in [*config["scaled_std"], *config["mean_max_weight"]])
        if matrices:
            numbers.update(fmt(x, 4) for x in np.ravel(config["weights"]))
            numbers.update(fmt(x, 4) for x in np.ravel(config["output"]))
    for s in data["shifts"]:
        numbers.update(fmt(x, 4) for x in [*s["l2"], *s["max_abs"], s["l2_overall"], s["max_abs_overall"]])
    return numbers


def comparison_numbers(data: dict[str, Any]) -> set[str]:
    """Every number the tables of `diff A B` must show: differences, tolerances, and the largest of failures."""
    numbers = set()
    for row in data["tensors"]:
        numbers.update({sci(row["max_abs"]), sci(row["max_rel"]), tolerance_text(row["rtol"]),
                        tolerance_text(row["atol"])})  # fmt: skip
        if not row["passed"]:
            for loc in row["largest"]:
                numbers.update({fmt(loc["a"], 4), fmt(loc["b"], 4), sci(loc["abs_diff"])})
    return numbers


class TestLegibleWidths:
    SWEEPS: ClassVar[dict[str, tuple[list[str], bool]]] = {
        "heads": (["--heads", "1,2,4"], True),
        "scale": (["--scale", "sqrt_dk,sqrt_d_model,none"], True),
        "layout": (["--layout", "contiguous,interleaved"], True),
        "kv-heads": (["configs/gqa.yaml", "--kv-heads", "2,1"], False),  # 8 output columns: left out at 60
    }

    @staticmethod
    def check(out: str, expected: set[str], columns: int) -> None:
        missing = expected - whole_numbers(out)
        assert not missing, f"numbers not shown whole at {columns} columns: {sorted(missing)}\n{out}"
        assert not re.search(r"\d…|…\d", out), out
        assert max(map(len, out.splitlines())) <= columns

    @pytest.mark.parametrize("columns", [60, 80, 100])
    @pytest.mark.parametrize("kind", SWEEPS)
    def test_sweep_numbers_whole(self, kind: str, columns: int) -> None:
        """At 60, 80 and 100 columns every number of the sweep's JSON shows whole in its table."""
        args, matrices = self.SWEEPS[kind]
        data = json.loads(invoke("diff", *args, "-f", "json").stdout)
        out = invoke("diff", *args, columns=columns).stdout
        self.check(out, sweep_numbers(data, matrices), columns)

    @needs_pooling
    @pytest.mark.parametrize("columns", [60, 80, 100])
    def test_pooled_sweep_numbers_whole(self, columns: int) -> None:
        """A --kv-heads 4,2,1 sweep of a random input: every number whole, its labels on the shift tables."""
        args = ["diff", *RANDOM, "--heads", "4", "--kv-heads", "4,2,1"]
        data = json.loads(invoke(*args, "-f", "json").stdout)
        assert [c["error"] for c in data["configs"]] == [None, None, None] and len(data["shifts"]) == 3
        out = invoke(*args, columns=columns).stdout
        self.check(out, sweep_numbers(data, True), columns)

    @pytest.mark.parametrize("columns", [60, 80, 100])
    @pytest.mark.parametrize("dtype", ["float64", "float32"])
    def test_two_inputs_numbers_whole(self, worked_json: str, tmp_path: Path, dtype: str, columns: int) -> None:
        """`diff A B` (float32: a tolerance per tensor): differences, tolerances and the largest ones whole."""
        args = ["diff", worked_json, input_file(tmp_path, "scaled.json", scale=0.75), "--dtype", dtype]
        data = json.loads(invoke(*args, "-f", "json", code=1).stdout)
        out = invoke(*args, columns=columns, code=1).stdout
        self.check(out, comparison_numbers(data), columns)
        for row in data["tensors"]:
            assert row["tensor"] in out

    def test_shift_labels_where_they_fit(self) -> None:
        """Labels head the shift columns where they fit (H=1 → H=2 at 80, the scales' at 120); else letters."""
        heads = invoke("diff", "--heads", "1,2,4", columns=80).stdout
        assert "H=1 → H=2" in heads and "A → B" not in heads
        args = ["diff", "--scale", "sqrt_dk,sqrt_d_model,none"]
        wide, narrow = (invoke(*args, columns=columns).stdout for columns in (120, 80))
        assert "scale=sqrt_dk → scale=none" in wide and "A → C" not in wide
        assert "A → B" in narrow and "A → C" in narrow and "scale=sqrt_dk → scale=none" not in narrow
        assert "A = scale=sqrt_dk · B = scale=sqrt_d_model · C = scale=none" in narrow

    def test_many_shifts_continue_below(self) -> None:
        """Six scales give nine shift columns: at 60 columns they continue in a second table, none left out."""
        args = ["diff", "--scale", "0.1,0.2,0.3,0.4,0.5,0.6"]
        data = json.loads(invoke(*args, "-f", "json").stdout)
        out = invoke(*args, columns=60).stdout
        assert "L2 shift of output per token (continued)" in out and "columns left out" not in out.split("Output")[1]
        self.check(out, sweep_numbers(data, True), 60)


class TestMaskedCells:
    def test_sweep_weights_look_as_in_run(self) -> None:
        """A causal input's weights in a sweep read line for line as `run` prints them, masked cells included."""
        config = "configs/causal-self-attention.yaml"
        run = invoke("run", config, "--show", "weights", columns=60).stdout
        out = invoke("diff", config, "--heads", "2,1", columns=60).stdout
        rows = [line for line in run.splitlines() if re.match(r"\w+ +\d\.\d{4} ", line)]
        assert len(rows) == 12 and all(line in out.splitlines() for line in rows)  # 2 heads × 6 tokens
        assert f"the   1.0000{MASKED:>9}" in out  # "the" attends to itself only
        assert "masked (weight 0)" in out

    def test_delta_heatmap_marks_pairs_masked_on_both_sides(self, tmp_path: Path) -> None:
        """|A − B| of a causal result against its input: blocked pairs show the marker, the others 0.0000."""
        config = "configs/causal-self-attention.yaml"
        saved = tmp_path / "causal.json"
        saved.write_text(invoke("run", config, "-f", "json").stdout)
        out = invoke("diff", str(saved), config, "--view", "heatmap", "--no-color").stdout
        first = next(line for line in out.splitlines() if line.startswith("the "))
        assert first.split() == ["the", "0.0000", *[MASKED] * 5]
        assert "masked (weight 0)" in out


class TestDifferencesBeyondFloat64:
    """Differences, ratios and tolerance bounds beyond float64 are infinite, and nothing warns of them."""

    @staticmethod
    def sides(tmp_path: Path, a: float, b: float) -> list[str]:
        """Two results holding only an output of 5 × 4 and weights of 2 × 5 × 5, filled with ``a`` and ``b``."""
        paths = []
        for name, value in (("a", a), ("b", b)):
            np.savez(tmp_path / f"{name}.npz", output=np.full((5, 4), value), weights=np.full((2, 5, 5), value))
            paths.append(str(tmp_path / f"{name}.npz"))
        return paths

    def test_opposite_extremes(self, tmp_path: Path) -> None:
        """1e308 against -1e308: |A − B| is inf, both tensors fail (exit 1), stderr is empty."""
        outcome = run_attnx("diff", *self.sides(tmp_path, 1e308, -1e308), "-f", "json")
        rows = json.loads(outcome.stdout)["tensors"]
        assert (outcome.code, outcome.stderr) == (1, "")
        assert [(row["tensor"], row["max_abs"], row["passed"]) for row in rows] == [
            ("weights", None, False),  # inf is written as null
            ("output", None, False),
        ]

    def test_a_huge_tolerance(self, tmp_path: Path) -> None:
        """--rtol 1e308 --atol 1e308 on values of 1e300 apart by 1e300: within (the bound overflows), silently."""
        outcome = run_attnx("diff", *self.sides(tmp_path, 2e300, 1e300), "--rtol", "1e308", "--atol", "1e308")
        assert (outcome.code, outcome.stderr) == (0, "")
        assert "A and B agree: all 2 tensors compared are within tolerance" in outcome.stdout
