"""Shapes, tolerances and arguments a comparison is given: a wrong shape fails, a tolerance that is no finite number
≥ 0 is refused everywhere, and the pytest API names the argument it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnx.testing import assert_attention_close, reference
from tests.cli.test_corpus import assert_one_line_exit_2
from tests.cli.test_kernel_check import save
from tests.runner import run_attnx


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """The built-in example's result, as `attnx run -f npz` writes it (weights (2, 5, 5), output (5, 4), ...)."""
    path = tmp_path_factory.mktemp("example") / "ok.npz"
    assert run_attnx("run", "-f", "npz", "-o", str(path)).code == 0
    return dict(np.load(path))


class TestCheckShapes:
    """`check --against`: a tensor held under a known name in another shape fails, naming both shapes."""

    @pytest.mark.parametrize(
        ("name", "change"),
        [
            ("weights", lambda w: np.concatenate([w, w[:1]])),  # a head too many
            ("weights", lambda w: w[:, :4]),  # a query too few
            ("head_outputs", lambda h: h[..., :1]),  # d_v of 1
        ],
    )
    @pytest.mark.parametrize("form", ["npz", "json", "folder"])
    def test_wrong_shape_fails(
        self, tmp_path: Path, example: dict[str, np.ndarray], name: str, change, form: str
    ) -> None:
        """Exit 1, the tensor and both shapes named, the other tensors still compared (and passing)."""
        tensors = {"weights": example["weights"], "output": example["output"], "head_outputs": example["head_outputs"]}
        tensors[name] = change(tensors[name])
        outcome = run_attnx("check", "--against", save(tmp_path, form, tensors), "-f", "json")
        assert outcome.code == 1, outcome.stderr
        found = json.loads(outcome.stdout)
        assert found["passed"] is False
        assert found["mismatched"] == [{"tensor": name, "shape": list(tensors[name].shape),
                                        "reference_shape": list(example[name].shape)}]  # fmt: skip
        assert {t["tensor"]: t["passed"] for t in found["tensors"]} == {t: True for t in tensors if t != name}

    def test_the_table_says_so(self, tmp_path: Path, example: dict[str, np.ndarray]) -> None:
        """The report's line names the shapes, and the verdict counts the mismatch with the failures."""
        path = tmp_path / "kernel.npz"
        np.savez(path, weights=np.concatenate([example["weights"]] * 2))
        outcome = run_attnx("check", "--against", str(path))
        assert outcome.code == 1
        assert "weights: the kernel's shape is (4, 5, 5), the reference's (2, 5, 5)" in outcome.stdout
        assert "the kernel differs: 1 of 1 beyond tolerance or in another shape" in outcome.stdout

    def test_a_tensor_not_held_is_not_compared(self, tmp_path: Path, example: dict[str, np.ndarray]) -> None:
        """A file holding only the output, right: exit 0, the rest listed as not compared."""
        path = tmp_path / "kernel.npz"
        np.savez(path, output=example["output"])
        outcome = run_attnx("check", "--against", str(path), "-f", "json")
        found = json.loads(outcome.stdout)
        assert outcome.code == 0 and found["passed"] and found["mismatched"] == []
        assert {"head_outputs", "q"} <= {s["tensor"] for s in found["skipped"]}


class TestTolerances:
    """A tolerance is a finite number ≥ 0, on the command line and in the API alike."""

    @pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-1", "1e999", "-0.5"])
    @pytest.mark.parametrize("flag", ["--rtol", "--atol"])
    def test_refused_by_diff_and_check(self, value: str, flag: str) -> None:
        """Each is one line naming the flag, exit 2, for diff and for check, before any input is read."""
        for command in (["diff", "configs/gqa.yaml", "configs/gqa.yaml"], ["check"]):
            outcome = run_attnx(*command, f"{flag}={value}")
            assert_one_line_exit_2(outcome, f"{flag} must be a finite number ≥ 0, got ")

    def test_zero_and_finite_values_work(self) -> None:
        """--rtol 0 --atol 0 compares an input with itself exactly: equal, exit 0."""
        assert run_attnx("diff", "configs/gqa.yaml", "configs/gqa.yaml", "--rtol", "0", "--atol", "0").code == 0

    @pytest.mark.parametrize(
        ("options", "error", "fragment"),
        [
            ({"rtol": float("inf")}, ValueError, "rtol must be a finite number ≥ 0, got inf"),
            ({"atol": float("nan")}, ValueError, "atol must be a finite number ≥ 0, got nan"),
            ({"rtol": -1e-3}, ValueError, "rtol must be a finite number ≥ 0"),
            ({"atol": "1e-3"}, TypeError, "atol must be a number, got str"),
        ],
    )
    def test_refused_by_the_api(self, options: dict, error: type[Exception], fragment: str) -> None:
        """assert_attention_close refuses them with the argument's name, before anything is computed."""
        q = np.random.default_rng(0).standard_normal((4, 8))
        actual = reference(q, q, q, heads=2).output
        with pytest.raises(error, match=fragment):
            assert_attention_close(actual, q, q, q, heads=2, **options)


class TestApiArguments:
    """Every argument of assert_attention_close is checked, the error naming it."""

    @staticmethod
    def inputs(batch: int = 1) -> tuple[np.ndarray, ...]:
        """q, k, v as [B, H, N, d] = [batch, 2, 3, 4] and the right head outputs."""
        q, k, v = np.random.default_rng(1).standard_normal((3, batch, 2, 3, 4))
        actual = np.stack(
            [reference(q[b : b + 1], k[b : b + 1], v[b : b + 1], heads=2).head_outputs for b in range(batch)]
        )
        return actual, q, k, v

    def test_right_arguments_pass(self) -> None:
        """The right head outputs of a batch of 2 pass: the checks refuse nothing that is right."""
        assert_attention_close(*self.inputs(2), heads=2)

    @pytest.mark.parametrize(
        ("edit", "error", "fragment"),
        [
            (lambda a, q, k, v: (a, q, k[:, :, :2], v), ValueError, "k and v must have the same number of keys"),
            (lambda a, q, k, v: (a, q, np.concatenate([k, k]), np.concatenate([v, v])), ValueError,
             "q, k and v must have the same batch size, got 1, 2 and 2"),
            (lambda a, q, k, v: (a, q[0], k, v), ValueError, "q, k and v must all be"),
            (lambda a, q, k, v: (a, q, k[..., :2], v[..., :2]), ValueError, "k must be [B, H_kv, M, d] with q's d"),
            (lambda a, q, k, v: (a, q.astype(complex), k, v), TypeError, "q must hold real floating-point numbers"),
            (lambda a, q, k, v: (a, q, k > 0, v), TypeError, "k must hold real floating-point numbers"),
            (lambda a, q, k, v: (a, q, k, v.astype(np.int64)), TypeError, "v must hold real floating-point"),
            (lambda a, q, k, v: (a, q, k, None), TypeError, "v must be an array of floating-point numbers"),
            (lambda a, q, k, v: (a.astype(object), q, k, v), TypeError, "actual must hold real floating-point"),
            (lambda a, q, k, v: (a[:, :1], q, k, v), ValueError, "actual has shape (1, 1, 3, 4)"),
        ],
    )  # fmt: skip
    def test_arrays(self, edit, error: type[Exception], fragment: str) -> None:
        """Ranks, batch sizes, key counts, widths and dtypes: a TypeError or ValueError naming the argument."""
        with pytest.raises(error) as caught:
            assert_attention_close(*edit(*self.inputs()), heads=2)
        assert fragment in str(caught.value)

    @pytest.mark.parametrize(
        ("options", "error", "fragment"),
        [
            ({"heads": 2.0}, TypeError, "heads must be an int, got float"),
            ({"heads": 0}, ValueError, "heads must be at least 1, got 0"),
            ({"heads": 2, "kv_heads": True}, TypeError, "kv_heads must be an int, got bool"),
            ({"heads": 2, "window": 0}, ValueError, "window must be at least 1"),
            ({"heads": 2, "causal": "yes"}, TypeError, "causal must be True or False, got str"),
            ({"heads": 2, "scale": float("nan")}, ValueError, "scale must be finite, got nan"),
            ({"heads": 2, "mask": np.ones((3, 3))}, TypeError, "mask must be boolean"),
            ({"heads": 2, "mask": np.ones((3, 2), bool)}, ValueError, "mask must end in [N, M] = [3, 3]"),
            ({"heads": 2, "mask": np.ones((2, 3, 3), bool)}, ValueError, "mask has 2 [N, M] masks for a batch of 1"),
        ],
    )
    def test_settings_and_mask(self, options: dict, error: type[Exception], fragment: str) -> None:
        """heads, kv_heads, window, causal, scale and the mask's dtype and shape."""
        with pytest.raises(error) as caught:
            assert_attention_close(*self.inputs(), **options)
        assert fragment in str(caught.value)

    def test_torch_complex_and_bool(self) -> None:
        """A complex or boolean torch tensor is a TypeError naming it (not torch's cast warning)."""
        torch = pytest.importorskip("torch")
        actual, q, k, v = (torch.from_numpy(x) for x in self.inputs())
        with pytest.raises(TypeError, match=r"q must hold real floating-point numbers .*got complex128"):
            assert_attention_close(actual, q.to(torch.complex128), k, v, heads=2)
        with pytest.raises(TypeError, match=r"actual must hold real floating-point numbers .*got bool"):
            assert_attention_close(actual > 0, q, k, v, heads=2)
