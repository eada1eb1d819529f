"""attnx run: tables, rows, JSON, exports, errors, entry points and what is computed for what is shown."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnx import __version__, engines
from attnx.core.rows import Rows
from attnx.engines import compute
from attnx.io import load_spec
from tests.conftest import AVERAGE_WEIGHTS, DECIMALS_4, HEAD1_WEIGHTS, HEAD2_WEIGHTS, OUTPUT, TOKENS
from tests.runner import run_attnx

CONFIGS = Path(__file__).parents[2] / "configs"
JSON_KEYS = [
    "format_version",
    "tokens",
    "heads",
    "kv_heads",
    "kv_pooled_from",
    "d_model",
    "d_k",
    "scale",
    "q",
    "k",
    "v",
    "scores",
    "scaled",
    "weights",
    "head_outputs",
    "output",
    "average_weights",
]


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


class TestRunTable:
    def test_builtin_example_prints_the_tutorial_numbers(self) -> None:
        """`attnx run` shows the worked example's weights and output rows as the tutorial prints them."""
        result = run_attnx("run")
        assert result.code == 0, result.stderr
        out = result.stdout
        assert "Head 0 · columns 0-1 · d_k = 2" in out and "Head 1 · columns 2-3 · d_k = 2" in out
        assert "Head 2" not in out
        for row in (*HEAD1_WEIGHTS, *HEAD2_WEIGHTS, *OUTPUT, *AVERAGE_WEIGHTS):
            assert " ".join(f"{x:.4f}" for x in row) in " ".join(out.replace("│", " ").split())

    def test_show_picks_sections(self) -> None:
        """--show output prints only the concatenated output."""
        result = run_attnx("run", "--show", "output")
        assert result.code == 0
        assert "Concatenated output" in result.stdout
        assert "weights (softmax)" not in result.stdout and "Head 0" not in result.stdout

    def test_show_accepts_commas_and_repeats(self) -> None:
        """--show weights,output --show average prints those three sections."""
        result = run_attnx("run", "--show", "weights,output", "--show", "average")
        assert result.code == 0
        assert "weights (softmax)" in result.stdout and "Weights averaged" in result.stdout
        assert "raw scores" not in result.stdout

    def test_show_q_k_v(self) -> None:
        """--show q,k,v prints each head's slices of Q, K and V and nothing else."""
        result = run_attnx("run", "--show", "q,k,v", env={"NO_COLOR": "1"})
        assert result.code == 0, result.stderr
        out = result.stdout
        assert out.count("Q_h (columns") == out.count("K_h (columns") == out.count("V_h (columns") == 2
        assert "weights (softmax)" not in out and "Concatenated output" not in out
        rows = [line.split() for line in out.splitlines()]
        assert ["cat", "0.0000", "2.0000"] in rows  # Q_h of "cat" in head 0

    def test_show_all_adds_q_k_v_to_the_default(self) -> None:
        """--show all prints every section; the default leaves out q, k and v."""
        every = run_attnx("run", "--show", "all").stdout
        default = run_attnx("run").stdout
        assert "Q_h (columns 0-1 of Q)" in every and "Weights averaged" in every
        assert "Q_h" not in default and "K_h" not in default and "Weights averaged" in default

    @pytest.mark.parametrize("head", ["1", "-1"])
    def test_head_shows_one_head(self, head: str) -> None:
        """--head 1 (or -1, the last) prints head 1's tables alone; the output and the average, made of every
        head, stay and say so."""
        result = run_attnx("run", "--head", head, env={"NO_COLOR": "1"})
        assert result.code == 0, result.stderr
        out, flat = result.stdout, " ".join(result.stdout.replace("│", " ").split())
        assert "Head 1 · columns 2-3 · d_k = 2" in out and "Head 0" not in out
        assert out.count("weights (softmax)") == 1
        for row in (*HEAD2_WEIGHTS, *OUTPUT, *AVERAGE_WEIGHTS):
            assert " ".join(f"{x:.4f}" for x in row) in flat
        assert " ".join(f"{x:.4f}" for x in HEAD1_WEIGHTS[1]) not in flat  # head 0's row of "cat"
        assert "Concatenated output (2 heads × d_k 2)" in out and "Weights averaged over 2 heads" in out

    def test_head_with_a_heatmap(self) -> None:
        """--view heatmap --head 0 draws head 0's weights alone."""
        out = run_attnx("run", "--view", "heatmap", "--head", "0", env={"NO_COLOR": "1"}).stdout
        assert "Head 0 · columns 0-1" in out and "Head 1" not in out and "0.3664" in out

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--head", "2"], "head 2 is out of range; heads are numbered 0..1 (or -2..-1)"),
            (["--head", "0", "-f", "json"], "--head picks the tables' heads; --format json holds every head's arrays"),
        ],
    )
    def test_head_refused(self, args: list[str], message: str) -> None:
        """A head the input lacks, or --head with a machine format (which holds every head): exit 2, one line."""
        result = run_attnx("run", *args)
        assert result.code == 2 and result.stderr.startswith(f"attnx: error: {message}")
        assert result.stderr.count("\n") == 1

    def test_precision(self) -> None:
        """--precision 2 rounds table cells to two decimals."""
        result = run_attnx("run", "--show", "output", "--precision", "2")
        assert "0.41" in result.stdout and "0.4109" not in result.stdout

    def test_random_input_from_flags(self) -> None:
        """--seed/--tokens/--d-model/--heads draw a random problem labelled by the tokens."""
        result = run_attnx("run", "--seed", "7", "--tokens", "the quick brown fox", "--d-model", "8", "--heads", "2",
                           "--format", "json")  # fmt: skip
        assert result.code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["tokens"] == ["the", "quick", "brown", "fox"]
        assert (data["heads"], data["d_model"], data["d_k"]) == (2, 8, 4)
        q, k, _ = np.random.default_rng(7).standard_normal((3, 4, 8))
        np.testing.assert_allclose(np.array(data["scores"])[1], q[:, 4:] @ k[:, 4:].T, rtol=1e-12)


def row_labels(out: str) -> list[str]:
    """The first word of each table row that starts with a token label ``w<i>`` or the ⋮ of left-out rows."""
    return [line.split()[0] for line in out.splitlines() if re.match(r"(w\d+|⋮)\s", line)]


class TestRows:
    """Tables of many tokens show the first and last rows (--rows, 40 by default) and say what they left out."""

    TOKENS = " ".join(f"w{i}" for i in range(50))

    def invoke(self, *args: str, show: tuple[str, ...] = ("--show", "weights")) -> str:
        argv = ["run", "--seed", "1", "--tokens", self.TOKENS, "--d-model", "4", "-H", "1", *show]
        result = run_attnx(*argv, *args, env={"COLUMNS": "100", "NO_COLOR": "1"})
        assert result.code == 0, result.stderr
        return result.stdout

    def test_forty_rows_by_default(self) -> None:
        """50 tokens: w0-w19, a ⋮ row, w30-w49, and a note naming --rows all."""
        out = self.invoke()
        assert row_labels(out) == [f"w{i}" for i in range(20)] + ["⋮"] + [f"w{i}" for i in range(30, 50)]
        assert "10 of 50 rows left out (⋮);" in out and "--rows all" in out

    def test_rows_all_and_a_number(self) -> None:
        """--rows all prints every row and no note; --rows 3 the first two and the last."""
        out = self.invoke("--rows", "all")
        assert row_labels(out) == [f"w{i}" for i in range(50)] and "rows left out" not in out
        assert row_labels(self.invoke("--rows", "3")) == ["w0", "w1", "⋮", "w49"]

    def test_heatmap_rows(self) -> None:
        """--view heatmap keeps to --rows too."""
        out = self.invoke("--rows", "2", "--view", "heatmap", show=())
        assert row_labels(out) == ["w0", "⋮", "w49"] and "48 of 50 rows left out (⋮)" in out

    def test_csv_is_never_cut(self) -> None:
        """--rows shapes tables only: CSV still has every weight (50 × 50 and a header)."""
        out = self.invoke("--rows", "2", "--format", "csv", "--tensor", "weights")
        assert len(out.splitlines()) == 1 + 50 * 50

    @pytest.mark.parametrize("view", [(), ("--view", "heatmap")])
    def test_rows_computed_alone_print_as_the_whole(
        self, monkeypatch: pytest.MonkeyPatch, view: tuple[str, ...]
    ) -> None:
        """Every section (causal mask, W^O, a dropped head) prints the same whether the matrices of the rows
        shown are computed alone or taken from the whole result."""
        args = ("--rows", "6", "--causal", "--drop-head", "1", "-H", "2", "--d-model", "8", *view)
        alone = self.invoke(*args, show=())

        monkeypatch.setattr(Rows, "complete", property(lambda rows: True))  # compute then takes every row
        assert self.invoke(*args, show=()) == alone
        assert "44 of 50 rows left out" in alone and row_labels(alone)[:4] == ["w0", "w1", "w2", "⋮"]

    def test_matrices_only_for_the_rows_shown(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past --rows, the engine computes the whole output without matrices, then the matrices of the rows shown."""
        calls: list[tuple[int, set[str]]] = []

        def spy(spec, engine="numpy", **options):  # type: ignore[no-untyped-def]
            calls.append((spec.n_queries, set(options["needs"])))
            return compute(spec, engine, **options)

        monkeypatch.setattr(engines, "compute", spy)
        self.invoke("--rows", "4", show=("--show", "weights,output"))
        assert calls == [(50, {"weights", "output", "mask"}), (50, {"output"}), (4, {"weights", "mask"})]
        calls.clear()
        self.invoke("--rows", "all", show=("--show", "weights,output"))
        assert calls == [(50, {"weights", "output", "mask"})]

    def test_a_long_input_within_the_element_cap(self) -> None:
        """50 × 50 scores pass a cap of 1,000 elements only as the 6 rows shown: --rows all is refused."""
        out = self.invoke("--rows", "6", "--max-elements", "1000", show=())
        assert "44 of 50 rows left out" in out
        argv = ["run", "--seed", "1", "--tokens", self.TOKENS, "--d-model", "4", "-H", "1", "--max-elements", "1000"]
        refused = run_attnx(*argv, "--rows", "all")
        assert refused.code == 2 and "exceeds the element cap of 1,000" in refused.stderr

    @pytest.mark.parametrize("value", ["0", "-3", "some"])
    def test_bad_rows_is_exit_2(self, value: str) -> None:
        """A --rows that is not a whole number ≥ 1 or all: one line and exit 2."""
        result = run_attnx("run", "--rows", value)
        assert result.code == 2
        assert result.stderr == f"attnx: error: --rows expects a whole number of at least 1 or 'all', got {value!r}\n"


class TestRunJson:
    def test_contract_keys_and_values(self) -> None:
        """--format json carries the contract keys, format_version first, unrounded values."""
        result = run_attnx("run", "--format", "json")
        assert result.code == 0
        data = json.loads(result.stdout)
        assert next(iter(data)) == "format_version" and data["format_version"] == "1.9"
        assert set(JSON_KEYS) <= set(data)
        assert data["tokens"] == list(TOKENS)
        assert data["scale"] == pytest.approx(2**-0.5, rel=1e-15)
        np.testing.assert_allclose(data["weights"], [HEAD1_WEIGHTS, HEAD2_WEIGHTS], atol=DECIMALS_4, rtol=0)
        assert np.array(data["head_outputs"]).shape == (2, 5, 2)
        assert np.array(data["output"]).shape == (5, 4)
        # Full precision: the first weight is softmax's exact value, not a 4-decimal rounding.
        e = np.exp([0.0, 2**-0.5, 2**-0.5, 0.0, 2**-0.5])
        assert data["weights"][0][0][0] == pytest.approx(e[0] / e.sum(), rel=1e-15)

    def test_projected_q_k_v(self) -> None:
        """q is [head, query, d_k] and k, v are [kv_head, key, d_k], equal to the input's column slices."""
        data = json.loads(run_attnx("run", "configs/gqa.yaml", "--format", "json").stdout)
        spec = load_spec(str(CONFIGS / "gqa.yaml"))
        q, k, v = (np.array(data[name]) for name in ("q", "k", "v"))
        assert (q.shape, k.shape, v.shape) == ((4, 3, 2), (2, 3, 2), (2, 3, 2))
        np.testing.assert_array_equal(q[3], spec.inputs.q[:, 6:8])
        np.testing.assert_array_equal(k[1], spec.inputs.k[:, 2:4])
        np.testing.assert_array_equal(v[0], spec.inputs.v[:, 0:2])
        assert data["kv_pooled_from"] is None
        assert list(data)[list(data).index("kv_pooled_from") :][:4] == ["kv_pooled_from", "d_model", "d_k", "scale"]

    def test_projections_are_applied(self) -> None:
        """With W_q, the q key holds X·W_q + b_q split into heads, not the input."""
        data = json.loads(run_attnx("run", "configs/projections-with-wo.yaml", "--format", "json").stdout)
        spec = load_spec(str(CONFIGS / "projections-with-wo.yaml"))
        assert spec.inputs.x is not None and spec.inputs.w_q is not None
        projected = spec.inputs.x @ spec.inputs.w_q.weight + (
            spec.inputs.w_q.bias if spec.inputs.w_q.bias is not None else 0.0
        )
        q = np.array(data["q"])
        np.testing.assert_allclose(np.concatenate(list(q), axis=1), projected, rtol=1e-15)

    def test_file_and_heads_override(self) -> None:
        """A config file runs, and --heads on the command line overrides its heads."""
        result = run_attnx("run", "configs/cat-sat-on-mat.yaml", "-H", "4", "--format", "json")
        assert result.code == 0
        assert json.loads(result.stdout)["d_k"] == 1

    def test_stdin(self) -> None:
        """- reads the input from stdin."""
        doc = '{"heads": 1, "q": [[1.0]], "k": [[1.0]], "v": [[2.5]]}'
        result = run_attnx("run", "-", "--format", "json", stdin=doc.encode())
        assert result.code == 0
        assert json.loads(result.stdout)["output"] == [[2.5]]

    def test_float32(self) -> None:
        """--dtype float32 is reported and close to the float64 numbers."""
        result = run_attnx("run", "--format", "json", "--dtype", "float32")
        data = json.loads(result.stdout)
        assert data["dtype"] == "float32"
        np.testing.assert_allclose(data["output"], OUTPUT, atol=DECIMALS_4, rtol=0)


class TestRunExports:
    def test_npy_q(self) -> None:
        """--format npy --tensor q writes the [head, query, d_k] query slices."""
        data = run_attnx("run", "-f", "npy", "--tensor", "q").stdout_bytes
        q = np.load(io.BytesIO(data))
        assert q.shape == (2, 5, 2)
        np.testing.assert_array_equal(q[1, 1], [0.0, 1.0])

    def test_csv_k_has_a_kv_head_axis(self) -> None:
        """--format csv --tensor k names its axes kv_head, key, dim."""
        text = run_attnx("run", "configs/gqa.yaml", "-f", "csv", "--tensor", "k").stdout
        lines = text.splitlines()
        assert lines[0] == "tensor,kv_head,key,dim,key_token,value"
        assert len(lines) == 1 + 2 * 3 * 2 and lines[1] == "k,0,0,0,a,1.0"

    def test_jsonl_carries_the_query_slice(self) -> None:
        """Each head-query record of --format jsonl has its q."""
        records = [json.loads(line) for line in run_attnx("run", "-f", "jsonl").stdout.splitlines()]
        cat = next(r for r in records if r["record"] == "head_query" and (r["head"], r["query"]) == (0, 1))
        assert cat["q"] == [0.0, 2.0]


class TestRunErrors:
    @pytest.mark.parametrize(
        ("name", "text", "message"),
        [
            ("bad.yaml", "q: [[1, 2]\nk: 1\n", r"bad\.yaml:2:\d+: invalid YAML"),
            ("bad.json", '{"q": [[1]],\n  "k": }', r"bad\.json:2:8: invalid JSON"),
            (
                "key.yaml",
                "q: [[1]]\nk: [[1]]\nv: [[1]]\nheds: 1\n",
                r"key\.yaml:4:1: heds: unknown key \(did you mean 'heads'\?\)",
            ),
            ("ragged.yaml", "q: [[1, 2], [3]]\nk: [[1]]\nv: [[1]]\n", r"q\[1\]: has 1 values but row 0 has 2"),
            ("empty.yaml", "q: [[]]\nk: [[1]]\nv: [[1]]\n", r"q\[0\]: expected a non-empty list of numbers"),
            (
                "cell.yaml",
                "q: [[1, abc]]\nk: [[1, 2]]\nv: [[1, 2]]\n",
                r"cell\.yaml:1:9: q\[0\]\[1\]: expected a number, got text 'abc'",
            ),
            (
                "shape.yaml",
                "q: [[1, 2]]\nk: [[1, 2, 3]]\nv: [[1, 2, 3]]\n",
                r"q, k and v must have the same number of columns \(d_model\), got q 1x2, k 1x3, v 1x3",
            ),
            (
                "div.yaml",
                "heads: 3\nq: [[1, 2, 3, 4]]\nk: [[1, 2, 3, 4]]\nv: [[1, 2, 3, 4]]\n",
                r"d_model 4 is not divisible by heads 3; head counts that work: 1, 2, 4",
            ),
            ("zero.yaml", "heads: 0\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", r"heads: must be positive, got 0"),
        ],
    )
    def test_bad_input_is_one_line_and_exit_2(self, tmp_path: Path, name: str, text: str, message: str) -> None:
        """Each bad input gives exit 2 and exactly one line on stderr, nothing on stdout."""
        result = run_attnx("run", write(tmp_path, name, text))
        assert result.code == 2
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("attnx: error: ")
        import re

        assert re.search(message, lines[0]), lines[0]

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file is exit 2 with one line naming it."""
        result = run_attnx("run", str(tmp_path / "absent.yaml"))
        assert result.code == 2
        assert result.stderr == f"attnx: error: {tmp_path / 'absent.yaml'}: no such file\n"

    def test_unreadable_file(self, tmp_path: Path) -> None:
        """A directory in place of a file is exit 2 with one line."""
        result = run_attnx("run", str(tmp_path))
        assert result.code == 2
        assert result.stderr == f"attnx: error: {tmp_path}: is a directory, expected an input file\n"

    def test_heads_flag_not_dividing(self) -> None:
        """--heads 3 on the 4-column example lists the head counts that work."""
        result = run_attnx("run", "--heads", "3")
        assert result.code == 2
        assert "head counts that work: 1, 2, 4" in result.stderr

    def test_non_positive_heads_flag(self) -> None:
        """--heads 0 is a usage error (exit 2)."""
        result = run_attnx("run", "--heads", "0")
        assert result.code == 2

    def test_unknown_section(self) -> None:
        """--show with an unknown section lists the valid ones."""
        result = run_attnx("run", "--show", "wieghts")
        assert result.code == 2
        assert "unknown section 'wieghts' for --show; choose from q, k, v, scores, scaled" in result.stderr
        assert result.stderr.endswith(", average, all\n")


class TestEntryPoints:
    def test_version(self) -> None:
        """--version prints the package version."""
        result = run_attnx("--version")
        assert (result.code, result.stdout, result.stderr) == (0, f"attnx {__version__}\n", "")

    def test_python_dash_m(self) -> None:
        """`python -m attnx run --format json` works as the console script does."""
        proc = subprocess.run(
            [sys.executable, "-m", "attnx", "run", "--format", "json"], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["heads"] == 2
        assert proc.stderr == ""


class TestNeeds:
    def test_table_asks_only_for_shown_sections(self) -> None:
        """A table of the output alone asks for no H × N × M matrix."""
        from attnx.cli.options import OutputFormat
        from attnx.cli.run import needs_for

        assert needs_for(OutputFormat.table, ["output"], None) == {"mask", "output"}
        assert needs_for(OutputFormat.table, ["q", "v"], None) == {"mask", "output", "q", "v"}
        assert needs_for(OutputFormat.table, ["weights", "average"], None) == {
            "mask",
            "output",
            "weights",
            "average_weights",
        }

    def test_exports_ask_only_for_their_tensors(self) -> None:
        """npy/csv/npz with --tensor ask for those tensors; json and un-narrowed exports ask for all."""
        from attnx.cli.options import OutputFormat
        from attnx.cli.run import needs_for

        assert needs_for(OutputFormat.npy, [], ["output"]) == {"output"}
        assert needs_for(OutputFormat.csv, [], ["weights"]) == {"output", "weights"}
        assert needs_for(OutputFormat.json, [], ["weights"]) is None
        assert needs_for(OutputFormat.npz, [], None) is None


class TestRope:
    """--rope-theta and --rope-pairs turn Q and K of any input; the summary and the JSON say so."""

    def test_scores_are_those_of_the_turned_spec(self) -> None:
        """run --rope-theta 100 --rope-pairs interleaved: the JSON's scores are compute's on that setting."""
        from attnx.core.positions import Rotary
        from attnx.engines import compute
        from attnx.io import load_spec

        done = run_attnx("run", "--rope-theta", "100", "--rope-pairs", "interleaved", "-f", "json")
        assert done.code == 0, done.stderr
        data = json.loads(done.stdout)
        assert data["format_version"] == "1.9"
        assert data["rope"] == {"theta": 100.0, "pairs": "interleaved", "fraction": 1.0, "scaling": None}
        expected = compute(load_spec().with_settings(rotary=Rotary(theta=100.0, pairs="interleaved")))
        np.testing.assert_allclose(data["scores"], expected.scores, rtol=1e-15, atol=0)
        assert not np.allclose(data["scores"], compute(load_spec()).scores)  # the turn changed them
        assert json.loads(run_attnx("run", "-f", "json").stdout)["rope"] is None

    def test_summary_names_the_setting(self) -> None:
        """The table's summary line says RoPE θ and the pairs."""
        done = run_attnx("run", "--rope-theta", "500", "--show", "weights")
        assert "RoPE θ 500 (half pairs)" in done.stdout

    def test_bad_theta_is_one_line(self) -> None:
        """θ at most 1 is bad input: exit 2 with one line."""
        done = run_attnx("run", "--rope-theta", "0.5")
        assert done.code == 2
        assert done.stderr == (
            "attnx: error: built-in example (cat-sat-on-mat): rope theta must be a finite number above 1, got 0.5\n"
        )


class TestWindow:
    """--window and the `window` key: a sliding window any input can use."""

    def test_json_summary_and_weights(self, tmp_path: Path) -> None:
        """run --window 2: the JSON says window 2, each query weighs at most two keys, the summary names it."""
        data = json.loads(run_attnx("run", "--window", "2", "-f", "json").stdout)
        assert data["window"] == 2 and json.loads(run_attnx("run", "-f", "json").stdout)["window"] is None
        assert all(np.count_nonzero(row) <= 2 for head in data["weights"] for row in head)
        assert "sliding window 2" in run_attnx("run", "--window", "2", "--show", "weights").stdout
        path = tmp_path / "w.yaml"
        path.write_text(
            "q: [[1, 0], [0, 1], [1, 1]]\nk: [[1, 0], [0, 1], [1, 1]]\nv: [[1, 0], [0, 1], [1, 1]]\nwindow: 0\n"
        )
        done = run_attnx("run", str(path))
        assert (done.code, done.stderr) == (2, f"attnx: error: {path}:4:9: window: must be positive, got 0\n")


class TestSoftcap:
    """--softcap and the `softcap` key: the JSON, the summary and the scaled table say it."""

    def test_json_and_table(self, tmp_path: Path) -> None:
        """run --softcap 0.5: every scaled score within ±0.5, the JSON carries 0.5, the table titles name it."""
        data = json.loads(run_attnx("run", "--softcap", "0.5", "-f", "json").stdout)
        assert data["softcap"] == 0.5 and np.abs(np.array(data["scaled"])).max() < 0.5
        table = run_attnx("run", "--softcap", "0.5", "--show", "scaled").stdout
        assert "scores soft-capped at 0.5" in table and "soft-capped at 0.5)" in table
        path = tmp_path / "c.yaml"
        path.write_text("q: [[1, 0]]\nk: [[1, 0]]\nv: [[1, 0]]\nsoftcap: -3\n")
        done = run_attnx("run", str(path))
        assert (done.code, done.stderr) == (
            2,
            f"attnx: error: {path}:4:10: softcap: expected a positive number, got int -3\n",
        )
