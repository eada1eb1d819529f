"""Checking your own kernel from the shell: `attnx diff` on what both sides hold and `attnx check --against`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_corpus import assert_one_line_exit_2
from tests.cli.test_diff import invoke as invoke_at
from tests.runner import Outcome, run_attnx


def invoke(*args: str, code: int = 0) -> Outcome:
    """As tests/cli/test_diff.py's, wide enough that no line of these reports wraps (the paths are long)."""
    return invoke_at(*args, code=code, columns=400)


H, N, D = 4, 6, 4


@pytest.fixture
def kernel_dir(tmp_path: Path) -> Path:
    """qkv.npz (float32, 6 tokens, 4 heads of 4) and what kernels computed for it: right and wrong."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((N, H * D)).astype(np.float32) for _ in range(3))
    np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v, heads=np.array(H))
    heads = [x.astype(np.float64).reshape(N, H, D).transpose(1, 0, 2) for x in (q, k, v)]

    def attention(scale: float) -> np.ndarray:  # [H, N, D]
        s = heads[0] @ heads[1].transpose(0, 2, 1) * scale
        w = np.exp(s - s.max(-1, keepdims=True))
        return (w / w.sum(-1, keepdims=True)) @ heads[2]

    right, wrong = attention(1 / math.sqrt(D)), attention(1 / math.sqrt(H * D))
    np.save(tmp_path / "sdpa.npy", right[None].astype(np.float32))  # [1, H, N, d], as SDPA returns it
    np.save(tmp_path / "out.npy", right.transpose(1, 0, 2).reshape(N, H * D).astype(np.float32))
    np.save(tmp_path / "wrong.npy", wrong.transpose(1, 0, 2).reshape(N, H * D).astype(np.float32))
    return tmp_path


def path(folder: Path, name: str) -> str:
    return str(folder / name)


class TestTheThreeFailures:
    """What failed for an engineer before: each now works."""

    def test_a_result_with_only_weights_and_output(self, kernel_dir: Path) -> None:
        """mine.json holds weights and output only: diff compares those two and lists the rest as not compared."""
        full = json.loads(invoke("run", path(kernel_dir, "qkv.npz"), "-f", "json").stdout)
        mine = {key: full[key] for key in ("format_version", "tokens", "weights", "output", "dtype")}
        (kernel_dir / "mine.json").write_text(json.dumps(mine))
        out = invoke("diff", path(kernel_dir, "mine.json"), path(kernel_dir, "qkv.npz")).stdout
        assert "not compared: q, k, v, scores, scaled, head_outputs, average_weights (only in B)" in out
        assert "A and B agree: all 2 tensors compared are within tolerance" in out

    def test_attnx_npz_result_against_its_input(self, kernel_dir: Path) -> None:
        """run -f npz -o r.npz, then diff r.npz qkv.npz: every tensor read back, exit 0."""
        invoke("run", path(kernel_dir, "qkv.npz"), "-f", "npz", "-o", path(kernel_dir, "r.npz"))
        data = json.loads(invoke("diff", path(kernel_dir, "r.npz"), path(kernel_dir, "qkv.npz"), "-f",
                                 "json").stdout)  # fmt: skip
        assert data["passed"] and data["skipped"] == [] and len(data["tensors"]) == 9

    def test_a_bare_output_against_an_input(self, kernel_dir: Path) -> None:
        """diff qkv.npz out.npy: the array is read as output [query, d_model]; a wrong one is exit 1."""
        out = invoke("diff", path(kernel_dir, "qkv.npz"), path(kernel_dir, "out.npy"), "--rtol", "1e-6",
                     "--atol", "1e-6").stdout  # fmt: skip
        assert "one array, read as output [query, d_model], float32" in out and "agree" in out
        invoke("diff", path(kernel_dir, "qkv.npz"), path(kernel_dir, "wrong.npy"), code=1)


class TestDiffReads:
    """diff reads every format attnx writes, and refuses what it cannot compare."""

    def test_jsonl_and_a_folder_of_npy(self, kernel_dir: Path) -> None:
        """run -f jsonl read back, and a folder holding output.npy and weights.npy, both agree with the input."""
        invoke("run", path(kernel_dir, "qkv.npz"), "-f", "jsonl", "-o", path(kernel_dir, "r.jsonl"))
        data = json.loads(invoke("diff", path(kernel_dir, "r.jsonl"), path(kernel_dir, "qkv.npz"), "-f",
                                 "json").stdout)  # fmt: skip
        names = [row["tensor"] for row in data["tensors"]]
        assert data["passed"] and names == ["q", "scores", "scaled", "weights", "head_outputs", "output",
                                            "average_weights"]  # fmt: skip
        folder = kernel_dir / "saved"
        folder.mkdir()
        for name in ("output", "weights"):
            invoke("run", path(kernel_dir, "qkv.npz"), "-f", "npy", "--tensor", name, "-o", str(folder / f"{name}.npy"))
        assert json.loads(invoke("diff", str(folder), path(kernel_dir, "qkv.npz"), "-f", "json").stdout)["passed"]

    def test_tensor_chooses(self, kernel_dir: Path) -> None:
        """--tensor output compares output only; a tensor one side lacks is exit 2."""
        invoke("run", path(kernel_dir, "qkv.npz"), "-f", "npz", "-o", path(kernel_dir, "r.npz"))
        args = ["diff", path(kernel_dir, "r.npz"), path(kernel_dir, "qkv.npz")]
        data = json.loads(invoke(*args, "--tensor", "output", "-f", "json").stdout)
        assert [row["tensor"] for row in data["tensors"]] == ["output"]
        result = invoke(*args, "--tensor", "projected", code=2)
        assert "holds no 'projected' to compare" in result.stderr

    def test_nothing_in_common_and_two_arrays(self, kernel_dir: Path) -> None:
        """A side holding nothing the other holds, or two bare arrays, is exit 2 with one line."""
        np.savez(kernel_dir / "proj.npz", projected=np.zeros((N, 3)))
        result = invoke("diff", path(kernel_dir, "proj.npz"), path(kernel_dir, "qkv.npz"), code=2)
        assert "hold no tensor in common" in result.stderr and len(result.stderr.splitlines()) == 1
        result = invoke("diff", path(kernel_dir, "out.npy"), path(kernel_dir, "wrong.npy"), code=2)
        assert "both bare .npy arrays" in result.stderr

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("not json\n", "r.jsonl:1: not a JSON record"),
            ('{"record": "head_query", "query": -1}\n', "r.jsonl:1: query must be a whole number from 0"),
            ('{"record": "query", "query": 1, "output": [1.0]}\n', "output: 1 records of the 2 a complete result has"),
        ],
    )
    def test_broken_jsonl(self, kernel_dir: Path, text: str, message: str) -> None:
        (kernel_dir / "r.jsonl").write_text(text)
        result = invoke("diff", path(kernel_dir, "r.jsonl"), path(kernel_dir, "qkv.npz"), code=2)
        assert message in result.stderr


class TestCheckAgainst:
    """check INPUT --against FILE: a kernel's output against the float64 reference, exit 0 or 1."""

    def test_right_kernel(self, kernel_dir: Path) -> None:
        """SDPA's [1, H, N, d] output is recognised from its shape and passes at float32's tolerance."""
        out = invoke("check", path(kernel_dir, "qkv.npz"), "--against", path(kernel_dir, "sdpa.npy")).stdout
        assert "one array read as head_outputs [head, query, d_k] (float32)" in out
        assert "the kernel agrees with the reference: 1 of 1 within tolerance" in out

    @pytest.mark.parametrize("columns", [100, 120])
    def test_the_worst_place_is_never_wrapped(self, kernel_dir: Path, columns: int) -> None:
        """At 100 columns and more, the worst element's place is whole on a line of the table: in its column where
        the table fits, else under the tensor's name; no line passes the width or ends in blanks."""
        args = ["check", path(kernel_dir, "qkv.npz"), "--against", path(kernel_dir, "wrong.npy")]
        out = invoke_at(*args, code=1, columns=columns).stdout
        where = out.split("output: worst at ", 1)[1].split(": kernel", 1)[0]
        assert where.startswith("query ") and "column" in where
        table = out.split("output: worst at ", 1)[0].splitlines()
        assert [line for line in table if where in line]
        assert all(len(line) <= columns and not line.endswith(" ") for line in out.splitlines())

    def test_n_equal_to_d_is_read_as_the_output(self, tmp_path: Path) -> None:
        """SDPA's [1, H, N, d] with N = d (4) fits weights [1, H, N, M] too: it is read as the head outputs it is, and
        a line says so and how to read it as weights; --array-layout bhnm does, for a file that holds weights."""
        from attnx.engines import compute
        from attnx.io import load_spec

        q, k, v = np.random.default_rng(1).standard_normal((3, 4, 8)).astype(np.float32)
        np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v, heads=2)
        result = compute(load_spec(path(tmp_path, "qkv.npz")), dtype="float32")
        np.save(tmp_path / "sdpa.npy", result.head_outputs[None])
        np.save(tmp_path / "weights.npy", result.weights[None])
        out = invoke("check", path(tmp_path, "qkv.npz"), "--against", path(tmp_path, "sdpa.npy")).stdout
        assert "one array read as head_outputs [head, query, d_k] (float32)\n" in out
        assert "\nits shape fits weights [head, query, key] too: --array-layout bhnm reads it as weights\n" in out
        assert "the kernel agrees with the reference: 1 of 1 within tolerance" in out
        args = ["check", path(tmp_path, "qkv.npz"), "--against", path(tmp_path, "weights.npy")]
        out = invoke(*args, "--array-layout", "bhnm").stdout
        assert "one array read as weights [head, query, key] (float32)" in out and "fits weights" not in out
        assert "the kernel agrees with the reference: 1 of 1 within tolerance" in out
        assert "the kernel differs" in invoke(*args, code=1).stdout  # weights read as head outputs: wrong

    def test_wrong_kernel_is_located_and_diagnosed(self, kernel_dir: Path) -> None:
        """A kernel scaling by 1/√d_model: exit 1, the worst element, a heatmap per head, the diagnosis."""
        out = invoke("check", path(kernel_dir, "qkv.npz"), "--against", path(kernel_dir, "wrong.npy"),
                     code=1).stdout  # fmt: skip
        assert "output: worst at query" in out and "largest |kernel − reference| per head and query" in out
        assert "diagnosis: scale 1/√d_model: scores × 1/√d_model = 0.25 where the reference uses 0.5" in out
        assert "the kernel differs: 1 of 1 beyond tolerance" in out

    def test_a_result_file_compares_every_tensor_it_holds(self, kernel_dir: Path) -> None:
        """attnx's own JSON result as the kernel: weights, head outputs, output, ... all within float64's tolerance;
        --tensor weights compares the weights alone."""
        invoke("run", path(kernel_dir, "qkv.npz"), "-f", "json", "-o", path(kernel_dir, "r.json"))
        args = ["check", path(kernel_dir, "qkv.npz"), "--against", path(kernel_dir, "r.json"), "-f", "json"]
        data = json.loads(invoke(*args).stdout)
        assert data["dtype"] == "float64" and {"weights", "head_outputs", "output", "scores"} <= {
            row["tensor"] for row in data["tensors"]
        }
        data = json.loads(invoke(*args, "--tensor", "weights").stdout)
        assert [row["tensor"] for row in data["tensors"]] == ["weights"] and data["passed"]

    def test_json(self, kernel_dir: Path) -> None:
        """--format json: per tensor the errors and where; the diagnoses; passed false."""
        data = json.loads(invoke("check", path(kernel_dir, "qkv.npz"), "--against",
                                 path(kernel_dir, "wrong.npy"), "-f", "json", code=1).stdout)  # fmt: skip
        (tensor,) = data["tensors"]
        assert data["mode"] == "kernel" and data["dtype"] == "float32" and not data["passed"]
        assert tensor["tensor"] == "output" and tensor["beyond"] > 0 and len(tensor["by_head"]) == H
        assert [d["bug"] for d in data["diagnoses"]] == ["scale 1/√d_model"]

    def test_kernel_dtype_sets_the_tolerance(self, kernel_dir: Path) -> None:
        """A bfloat16 kernel's output saved as float32: beyond float32's tolerance, within bfloat16's."""
        out = np.load(kernel_dir / "out.npy")
        rounded = ((out.view(np.uint32) + 0x8000) & 0xFFFF0000).view(np.float32)  # to bfloat16 and back
        np.save(kernel_dir / "bf16.npy", rounded)
        args = ["check", path(kernel_dir, "qkv.npz"), "--against", path(kernel_dir, "bf16.npy")]
        invoke(*args, code=1)
        assert "(bfloat16)" in invoke(*args, "--kernel-dtype", "bfloat16").stdout

    def test_a_float64_file_of_float32_inputs_is_judged_at_float32(self, kernel_dir: Path) -> None:
        """A right kernel's float32 output saved as float64 (NumPy 2 promotes ``s / np.sqrt(d)``): judged at the
        inputs' float32 tolerance, and said; --kernel-dtype float64 holds it to float64's."""
        n, d = 16, 32  # 2e-7 off: beyond float64's tolerance, within float32's
        q, k, v = np.random.default_rng(0).standard_normal((3, n, 2 * d)).astype(np.float32)
        np.savez(kernel_dir / "wide.npz", q=q, k=k, v=v, heads=np.array(2))
        qh, kh, vh = (x.reshape(n, 2, d).transpose(1, 0, 2) for x in (q, k, v))
        s = qh @ kh.transpose(0, 2, 1) / np.sqrt(d)  # float32 scores, float64 once divided
        w = np.exp(s - s.max(-1, keepdims=True))
        out = (w / w.sum(-1, keepdims=True)) @ vh
        assert out.dtype == np.float64
        np.save(kernel_dir / "promoted.npy", out.transpose(1, 0, 2).reshape(n, 2 * d))
        args = ["check", path(kernel_dir, "wide.npz"), "--against", path(kernel_dir, "promoted.npy")]
        lines = invoke(*args).stdout.splitlines()
        assert (
            f"kernel: {path(kernel_dir, 'promoted.npy')}, one array read as output [query, d_model] (float64)" in lines
        )
        assert ("the kernel's file is float64 but the inputs are float32: judged at float32's tolerance; "
                "--kernel-dtype float64 holds it to that dtype's") in lines  # fmt: skip
        assert any(line.startswith("tolerance (float32): ") for line in lines)
        assert "judged at" not in invoke(*args, "--kernel-dtype", "float64", code=1).stdout

    def test_ambiguous_shape_takes_a_layout(self, tmp_path: Path) -> None:
        """4 tokens, 4 heads of 4: [4, 4, 4] is hnd, nhd or hnm (weights); --array-layout nhd reads it."""
        rng = np.random.default_rng(1)
        q, k, v = (rng.standard_normal((4, 16)) for _ in range(3))
        np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v, heads=np.array(4))
        result = invoke("run", str(tmp_path / "qkv.npz"), "-f", "npy", "--tensor", "head_outputs", "-o",
                        str(tmp_path / "h.npy"))  # fmt: skip
        np.save(tmp_path / "nhd.npy", np.load(tmp_path / "h.npy").transpose(1, 0, 2))
        args = ["check", str(tmp_path / "qkv.npz"), "--against", str(tmp_path / "nhd.npy")]
        result = invoke(*args, code=2)
        assert "could be hnd or nhd or hnm: name its layout with --array-layout" in result.stderr
        invoke(*args, "--array-layout", "nhd")
        invoke(*args, "--array-layout", "hnd", code=1)  # read the wrong way round, it is wrong

    def test_usage_errors(self, kernel_dir: Path) -> None:
        """An input as --against, --kernel-dtype without --against, or --format csv with it: exit 2."""
        qkv = path(kernel_dir, "qkv.npz")
        assert "is an input" in invoke("check", qkv, "--against", qkv, code=2).stderr
        assert "describe the file given with --against" in invoke("check", qkv, "--kernel-dtype",
                                                                    "float16", code=2).stderr  # fmt: skip
        invoke("check", qkv, "--against", path(kernel_dir, "out.npy"), "-f", "csv", code=2)


EXAMPLE = "configs/cat-sat-on-mat.yaml"  # 2 heads, 5 tokens, d_k 2: weights (2, 5, 5), output (5, 4)


@pytest.fixture(scope="module")
def example() -> dict[str, np.ndarray]:
    """The float64 reference of the worked example, tensor by tensor."""
    from attnx.engines import compute
    from attnx.io import load_spec

    result = compute(load_spec(EXAMPLE))
    return {name: getattr(result, name) for name in ("weights", "head_outputs", "output", "average_weights")}


def save(folder: Path, form: str, tensors: dict[str, np.ndarray]) -> str:
    """``tensors`` as a kernel's file in ``form``: an .npz, a JSON result or a folder of .npy files."""
    target = folder / f"kernel.{form}"
    if form == "npz":
        np.savez(target, **tensors)
    elif form == "json":
        target.write_text(json.dumps({"format_version": "1.6", **{k: v.tolist() for k, v in tensors.items()}}))
    else:
        target.mkdir()
        for name, value in tensors.items():
            np.save(target / f"{name}.npy", value)
    return str(target)


class TestShapesInTheKernelFile:
    """A known tensor in another shape is a failing row (exit 1); a tensor not held is not compared (exit 0); what
    the readers cannot take as a result is one line (exit 2)."""

    def test_the_row_says_shapes_differ(self, tmp_path: Path, example: dict[str, np.ndarray]) -> None:
        """A head too many beside the right output: one table, the weights' row with both shapes, as diff shows it."""
        kernel = save(tmp_path, "folder", {"output": example["output"], "weights": example["weights"][[0, 1, 1]]})
        out = invoke("check", EXAMPLE, "--against", kernel, code=1).stdout.splitlines()
        table = out[out.index(next(line for line in out if line.startswith("tensor "))) :]
        assert [line.split() for line in table[2:4]] == [
            ["output", "(5,4)", "0", "0", "0", "0", "of", "20", "—", "pass"],
            ["weights", "(3,5,5)", "vs", "(2,5,5)", "shapes", "differ", "FAIL"],
        ]
        assert table[-1] == "the kernel differs: 1 of 2 beyond tolerance or in another shape"

    def test_only_a_mismatch(self, tmp_path: Path, example: dict[str, np.ndarray]) -> None:
        """Nothing compared: no tolerance line (none was applied), the row, exit 1."""
        kernel = save(tmp_path, "npz", {"head_outputs": example["head_outputs"][..., :1]})
        out = invoke("check", EXAMPLE, "--against", kernel, code=1).stdout
        assert "tolerance (" not in out and "head_outputs  (2,5,1) vs (2,5,2)" in out

    @pytest.mark.parametrize("form", ["npz", "json", "folder"])
    def test_average_weights_are_checked(self, tmp_path: Path, example: dict[str, np.ndarray], form: str) -> None:
        """average_weights in another shape fails like any tensor (it was left out of the comparison unseen)."""
        kernel = save(tmp_path, form, {"output": example["output"], "average_weights": example["average_weights"][:2]})
        found = json.loads(invoke("check", EXAMPLE, "--against", kernel, "-f", "json", code=1).stdout)
        assert found["mismatched"] == [{"tensor": "average_weights", "shape": [2, 5], "reference_shape": [5, 5]}]
        assert [(t["tensor"], t["passed"]) for t in found["tensors"]] == [("output", True)]

    @pytest.mark.parametrize("form", ["json", "folder"])
    def test_a_tensor_not_held(self, tmp_path: Path, example: dict[str, np.ndarray], form: str) -> None:
        """The right output alone: exit 0; weights are not compared, and nothing is mismatched."""
        found = json.loads(invoke("check", EXAMPLE, "--against", save(tmp_path, form, {"output": example["output"]}),
                                  "--tensor", "output", "-f", "json").stdout)  # fmt: skip
        assert found["passed"] and found["mismatched"] == [] and found["tensors"][0]["max_abs"] == 0

    @pytest.mark.parametrize("form", ["npz", "json", "folder"])
    def test_another_rank_is_no_result(self, tmp_path: Path, example: dict[str, np.ndarray], form: str) -> None:
        """weights with a batch axis: the result readers refuse a tensor of another rank as they read it, one line
        naming it (for diff and check alike), exit 2."""
        kernel = save(tmp_path, form, {"weights": example["weights"][None]})
        assert_one_line_exit_2(run_attnx("check", EXAMPLE, "--against", kernel), "weights")
        assert_one_line_exit_2(run_attnx("diff", kernel, EXAMPLE), "weights")

    def test_a_bare_array_of_no_layout(self, tmp_path: Path) -> None:
        """A bare .npy names no tensor, so a shape that fits no layout is bad input: one line, the file first."""
        np.save(tmp_path / "out.npy", np.zeros((7, 3)))
        outcome = run_attnx("check", EXAMPLE, "--against", str(tmp_path / "out.npy"))
        assert_one_line_exit_2(outcome, f"attnx: error: {tmp_path / 'out.npy'}: an array of shape (7, 3) fits none")
        assert_one_line_exit_2(run_attnx("diff", EXAMPLE, str(tmp_path / "out.npy")), "out.npy: an array of shape")


class TestTolerancesOnTheCommandLine:
    """--rtol and --atol: refused alike when they are no finite number ≥ 0, and silent however large they are."""

    @pytest.mark.parametrize(("value", "shown"), [("-1", "-1"), ("1e999", "inf"), ("-inf", "-inf"), ("NaN", "nan")])
    def test_the_line(self, value: str, shown: str) -> None:
        """The whole line names the flag and the value as a number, before any input is read."""
        for flag in ("--rtol", "--atol"):
            outcome = run_attnx("check", "missing.yaml", "--against", "missing.npz", f"{flag}={value}")
            assert outcome.stderr == f"attnx: error: {flag} must be a finite number ≥ 0, got {shown}\n"

    def test_huge_tolerances_warn_of_nothing(self, tmp_path: Path, example: dict[str, np.ndarray]) -> None:
        """1e308 and 1e308: a NaN still fails, a wrong value passes, and stderr stays empty."""
        output = example["output"] * 1e3
        output[0, 0] = np.nan
        kernel = save(tmp_path, "npz", {"output": output})
        outcome = run_attnx("check", EXAMPLE, "--against", kernel, "--rtol", "1e308", "--atol", "1e308", "-f", "json")
        assert (outcome.code, outcome.stderr, json.loads(outcome.stdout)["tensors"][0]["beyond"]) == (1, "", 1)
