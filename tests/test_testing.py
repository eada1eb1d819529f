"""attnx.testing: assert_attention_close and reference, for kernels' own test suites."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnx
from attnx.engines import compute
from attnx.errors import LimitError, NumericError
from attnx.limits import Limits
from attnx.testing import assert_attention_close, reference
from tests.analysis import kernels


def tensors(b: int = 2, heads: int = 4, kv_heads: int = 2, n: int = 9, m: int = 9, d: int = 8, dtype: str = "float32"):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(b, heads, n, d, generator=generator).to(getattr(torch, dtype))
    k, v = (torch.randn(b, kv_heads, m, d, generator=generator).to(getattr(torch, dtype)) for _ in range(2))
    return q, k, v


class TestRightKernelsPass:
    """SDPA's output, in its own layouts and dtypes, against the reference."""

    @pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
    def test_sdpa_every_dtype(self, dtype: str) -> None:
        """[B, H, N, d] tensors with GQA and a causal mask, a batch of 2."""
        import torch.nn.functional as F

        q, k, v = tensors(dtype=dtype)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        assert_attention_close(out, q, k, v, heads=4, kv_heads=2, causal=True)

    def test_mask_scale_and_window(self) -> None:
        """A boolean mask (True: may attend), a given scale, and a window as an SDPA mask."""
        import torch
        import torch.nn.functional as F

        q, k, v = tensors(kv_heads=4)
        allowed = torch.rand(9, 9, generator=torch.Generator().manual_seed(1)) > 0.3
        allowed[:, 0] = True
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=0.2)
        assert_attention_close(out, q, k, v, heads=4, mask=allowed, scale=0.2)
        window = torch.ones(9, 9, dtype=torch.bool).tril() & ~torch.ones(9, 9, dtype=torch.bool).tril(-3)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=window)
        assert_attention_close(out, q, k, v, heads=4, window=3)

    def test_numpy_flat_layouts(self) -> None:
        """[B, N, H·d] and [N, H·d] NumPy arrays, the output concatenated."""
        rng = np.random.default_rng(0)
        q, k, v = rng.standard_normal((3, 2, 5, 12))
        out = np.stack([reference(q[b], k[b], v[b], heads=3).output for b in range(2)])
        assert_attention_close(out, q, k, v, heads=3)
        assert_attention_close(out[0], q[0], k[0], v[0], heads=3)


class TestWrongKernelsRaise:
    """A wrong kernel raises AssertionError with the located report and the bug."""

    def test_the_report(self) -> None:
        q, k, v = tensors()
        _, wrong = kernels.scale_d_model(q[:1], k[:1], v[:1])
        with pytest.raises(AssertionError) as caught:
            assert_attention_close(wrong[None], q[:1], k[:1], v[:1], heads=4, kv_heads=2, causal=True)
        message = str(caught.value)
        assert message.startswith("attention differs from attnx's float64 reference in 1 of 1 batch elements")
        assert "head_outputs: worst at head" in message and "largest |actual − reference| per head and query" in message
        assert f"diagnosis: scale 1/√d_model: scores × 1/√d_model = {1 / math.sqrt(32):.4g}" in message
        assert "\x1b[" not in message  # plain text

    @pytest.mark.parametrize("label", list(kernels.WRONG))
    def test_every_bug_fails_in_bfloat16(self, label: str) -> None:
        """Even at bfloat16's loose tolerance, every wrong kernel is caught and named."""
        import torch

        q, k, v = tensors(b=1, dtype="bfloat16")
        kernel, bug = kernels.WRONG[label]
        name, values = kernel(q, k, v)
        actual = torch.from_numpy(values[None] if name == "head_outputs" else values).to(torch.bfloat16)
        with pytest.raises(AssertionError, match=f"diagnosis: {bug}"):
            assert_attention_close(actual, q, k, v, heads=4, kv_heads=2, causal=True)


class TestPromotedOutput:
    """A float64 output of float32 inputs (NumPy 2 promotes ``s / np.sqrt(d)``) is judged at float32's tolerance."""

    @staticmethod
    def numpy_kernel(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """softmax(QKᵀ/√d)V written out in NumPy, the scores divided by a float64 ``np.sqrt``: float64 out."""
        scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1] * scale)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (weights / weights.sum(axis=-1, keepdims=True)) @ v

    @staticmethod
    def inputs() -> tuple[np.ndarray, ...]:
        return tuple(np.random.default_rng(0).standard_normal((3, 1, 2, 16, 32)).astype(np.float32))

    def test_a_right_kernel_passes(self) -> None:
        """Its output is float64 and 2e-7 off: beyond float64's tolerance, within float32's, where it is judged."""
        q, k, v = self.inputs()
        out = self.numpy_kernel(q, k, v)
        assert out.dtype == np.float64
        assert 1e-7 < np.abs(out[0] - reference(q, k, v, heads=2).head_outputs).max() < 1e-6
        assert_attention_close(out, q, k, v, heads=2)

    def test_a_wrong_kernel_is_caught_and_the_report_says_which_tolerance(self) -> None:
        """1/√(2d) in place of 1/√d fails at float32's tolerance; the report names both dtypes."""
        q, k, v = self.inputs()
        with pytest.raises(AssertionError) as caught:
            assert_attention_close(self.numpy_kernel(q, k, v, scale=2.0), q, k, v, heads=2)
        lines = str(caught.value).splitlines()
        assert "actual: head_outputs [head, query, d_k] (float64)" in lines
        assert "actual is float64 but q, k and v are float32: judged at float32's tolerance" in lines
        assert (
            "tolerance (float32): |actual − reference| ≤ atol + rtol·|reference|, rtol 1.3e-06, atol 1.6e-05" in lines
        )

    def test_float64_inputs_keep_float64s_tolerance(self) -> None:
        """The same 2e-7 error from float64 inputs is beyond float64's tolerance: nothing is loosened."""
        q, k, v = self.inputs()
        out = self.numpy_kernel(q, k, v)
        with pytest.raises(AssertionError, match=r"tolerance \(float64\)") as caught:
            assert_attention_close(out, *(x.astype(np.float64) for x in (q, k, v)), heads=2)
        assert "judged at" not in str(caught.value)


class TestInsidePytest:
    """The report speaks pytest's language: the arguments' names, no flag, and no frame of attnx's own."""

    @staticmethod
    def wrong(n: int = 40) -> tuple[np.ndarray, ...]:
        """Head outputs [1, H, N, d] 10% too large, for n queries over 4 heads, with their q, k and v."""
        q, k, v = np.random.default_rng(0).standard_normal((3, 1, 4, n, 8)).astype(np.float32)
        return (reference(q, k, v, heads=4).head_outputs[None] * 1.1).astype(np.float32), q, k, v

    def test_the_report_names_the_arguments(self) -> None:
        """actual and q, k, v name the sides; a heatmap too wide for 100 columns says how to see it all from Python."""
        with pytest.raises(AssertionError) as caught:
            assert_attention_close(*self.wrong(), heads=4)
        message = str(caught.value)
        for line in (
            "reference: q, k and v, computed in float64",
            "actual: head_outputs [head, query, d_k] (float32)",
            "tolerance (float32): |actual − reference| ≤ atol + rtol·|reference|, rtol 1.3e-06, atol 1.5e-05",
            "not compared: output, q, k, v (not in actual)",
            "head_outputs: worst at head 1 · query 10 · d 2: actual 1.66057, reference 1.50961",
            "head_outputs: largest |actual − reference| per head and query, ×1e-1",
            "actual differs: 1 of 1 beyond tolerance",
        ):
            assert line in message.splitlines()
        assert "28 of 40 columns left out (…) to fit the width; to see them all, compare actual with" in message
        assert "kernel" not in message and "--" not in message and " \n" not in message

    def test_no_frame_of_attnx_in_the_traceback(self) -> None:
        """pytest hides every attnx frame: of the AssertionError, and of an attnx error raised deep inside."""
        package = Path(attnx.__file__).parent
        actual, q, k, v = self.wrong(n=6)
        with pytest.raises(AssertionError) as failed:
            assert_attention_close(actual, q, k, v, heads=4)
        with pytest.raises(NumericError, match=r"^q, k and v: .* overflows float64") as refused:
            big = q.astype(np.float64) * 1e160
            assert_attention_close(actual, big, big, v, heads=4)  # scores beyond float64
        with pytest.raises(ValueError, match=r"^kv_heads=3 must divide heads=4") as argument:
            assert_attention_close(actual, q, k, v, heads=4, kv_heads=3)
        with pytest.raises(ValueError, match=r"^heads=3 must divide q's width H·d = 32") as shape:
            flat = (x.transpose(0, 2, 1, 3).reshape(1, 6, 32) for x in (actual, q, k, v))  # [B, N, H·d]
            assert_attention_close(*flat, heads=3)
        for caught in (failed, refused, argument, shape):
            shown = [Path(entry.path) for entry in caught.traceback.filter(caught)]
            assert shown and [path for path in shown if path.is_relative_to(package)] == []

    def test_an_actual_of_integers_is_a_type_error(self) -> None:
        actual, q, k, v = self.wrong(n=3)
        with pytest.raises(TypeError, match=r"^actual must hold real floating-point numbers \(float64, float32, "):
            assert_attention_close(actual.astype(int), q, k, v, heads=4)


def sdpa(batch: int = 1, causal: bool = False, scale: float | None = None) -> tuple[np.ndarray, ...]:
    """NumPy q [B, 2, 3, 4], k and v [B, 2, 5, 4], and their right head outputs [B, 2, 3, 4] (actual first)."""
    q = np.random.default_rng(4).standard_normal((batch, 2, 3, 4))
    k, v = np.random.default_rng(5).standard_normal((2, batch, 2, 5, 4))
    one = [(q[b : b + 1], k[b : b + 1], v[b : b + 1]) for b in range(batch)]
    heads = [reference(*x, heads=2, causal=causal, scale=scale).head_outputs for x in one]
    return np.stack(heads), q, k, v


def refused(error: type[Exception], call) -> str:  # type: ignore[no-untyped-def]
    """The message of the ``error`` that ``call()`` raises."""
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


class TestMaskArgument:
    """The mask is boolean and lines up with the weights from the right, as SDPA broadcasts it."""

    @pytest.mark.parametrize("shape", [(3, 5), (1, 3, 5), (1, 1, 3, 5), (2, 1, 3, 5)])
    def test_shapes_taken(self, shape: tuple[int, ...]) -> None:
        """[N, M], [1, N, M], [1, 1, N, M] and [B, 1, N, M] beside [B, H, N, d]: all keys visible, the right
        output passes."""
        assert_attention_close(*sdpa(2), heads=2, mask=np.ones(shape, dtype=bool))

    def test_one_mask_per_batch_element(self) -> None:
        """[B, 1, N, M] gives element b its own mask: the outputs of the two masks pass, swapped they fail."""
        _, q, k, v = sdpa(2)
        allowed = np.ones((2, 1, 3, 5), dtype=bool)
        allowed[0, 0, :, 4], allowed[1, 0, :, 0] = False, False
        one = [(q[b : b + 1], k[b : b + 1], v[b : b + 1]) for b in range(2)]
        out = np.stack([reference(*x, heads=2, mask=allowed[b, 0]).head_outputs for b, x in enumerate(one)])
        assert_attention_close(out, q, k, v, heads=2, mask=allowed)
        with pytest.raises(AssertionError, match="in 2 of 2 batch elements"):
            assert_attention_close(out, q, k, v, heads=2, mask=allowed[::-1])

    @pytest.mark.parametrize(
        ("shape", "rank", "fragment"),
        [
            ((1, 2, 3, 5), 4, "mask must be [N, M] or [B, 1, N, M] (one mask for every head) with B = 1 or 2, got "
                              "shape (1, 2, 3, 5)"),  # per head: SDPA reads it so
            ((2, 3, 5), 4, "mask must be [N, M] or [B, 1, N, M]"),  # SDPA lines its 2 up with the heads
            ((1, 1, 1, 3, 5), 4, "got shape (1, 1, 1, 3, 5)"),  # more axes than the weights
            ((2, 2, 3, 5), 4, "mask has 4 [N, M] masks for a batch of 2"),
            ((3, 3, 5), 3, "mask has 3 [N, M] masks for a batch of 2"),
            ((2, 1, 3, 5), 3, "mask must be [N, M] or [B, N, M] with B = 1 or 2"),
            ((3, 5, 3), 4, "mask must end in [N, M] = [3, 5], got shape (3, 5, 3)"),
            ((5,), 3, "mask must end in [N, M] = [3, 5], got shape (5,)"),
        ],
    )  # fmt: skip
    def test_shapes_refused(self, shape: tuple[int, ...], rank: int, fragment: str) -> None:
        """Per-head masks, more masks than the batch, extra axes, wrong [N, M]: a ValueError with the shape."""
        actual, q, k, v = sdpa(2)
        if rank == 3:  # [B, N, H·d]
            actual, q, k, v = (x.transpose(0, 2, 1, 3).reshape(2, x.shape[2], 8) for x in (actual, q, k, v))
        assert fragment in refused(ValueError, lambda: assert_attention_close(
            actual, q, k, v, heads=2, mask=np.ones(shape, dtype=bool)))  # fmt: skip

    @pytest.mark.parametrize(
        ("mask", "error", "fragment"),
        [
            (np.ones((3, 5), dtype=int), TypeError, "mask must be boolean (True: may attend), got dtype int64"),
            (np.zeros((3, 5)), TypeError, "got dtype float64"),  # an additive float mask is no boolean one
            (np.ones((3, 5), dtype=object), TypeError, "got dtype object"),
            ("causal", TypeError, "mask must be an array of booleans, got str"),
            ([[True], [True, False]], ValueError, "mask is not an array: setting an array element with a sequence"),
        ],
    )
    def test_types_refused(self, mask: object, error: type[Exception], fragment: str) -> None:
        """Integers, floats, objects, text and ragged lists: the error names the mask."""
        assert fragment in refused(error, lambda: assert_attention_close(*sdpa(), heads=2, mask=mask))

    def test_a_list_of_booleans(self) -> None:
        """Nested lists of booleans are a mask as NumPy reads them."""
        assert_attention_close(*sdpa(), heads=2, mask=[[True] * 5] * 3)


class TestScoreBiasArgument:
    """A score bias, [H, N, M] or [B, H, N, M], is added before the mask, as T5 adds its position bias."""

    def test_t5_like_kernel_passes_and_a_biasless_one_fails(self) -> None:
        """softmax(q·kᵀ + bias + additive mask) in plain torch passes with scale 1; without the bias it fails."""
        torch = pytest.importorskip("torch")
        _, q, k, v = sdpa(2)
        bias = np.random.default_rng(6).standard_normal((2, 2, 3, 5)) * 2  # (B, H, N, M)
        allowed = torch.ones(3, 5, dtype=torch.bool).tril()
        additive = torch.zeros(3, 5, dtype=torch.float64).masked_fill(~allowed, torch.finfo(torch.float64).min)
        tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
        scores = tq @ tk.transpose(-1, -2)  # (B, H, N, M)
        t5 = torch.softmax(scores + torch.tensor(bias) + additive, dim=-1) @ tv  # (B, H, N, d)
        assert_attention_close(t5, q, k, v, heads=2, causal=True, scale=1.0, score_bias=bias)
        plain = torch.softmax(scores + additive, dim=-1) @ tv
        with pytest.raises(AssertionError, match="2 of 2 batch elements"):
            assert_attention_close(plain, q, k, v, heads=2, causal=True, scale=1.0, score_bias=bias)

    def test_reference_adds_it(self) -> None:
        """reference() with one [H, N, M] bias: scaled = scale · scores + bias, its weights the softmax of that."""
        _, q, k, v = sdpa(1)
        bias = np.random.default_rng(7).standard_normal((2, 3, 5))
        result = reference(q, k, v, heads=2, score_bias=bias)
        np.testing.assert_allclose(result.scaled, result.scores * 0.5 + bias, rtol=1e-15)
        e = np.exp(result.scaled - result.scaled.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(result.weights, e / e.sum(axis=-1, keepdims=True), rtol=1e-13)

    def test_refusals(self) -> None:
        """A wrong shape, integers or NaN are refused, naming score_bias."""
        _, q, k, v = sdpa(2)
        shape = refused(ValueError, lambda: reference(q[:1], k[:1], v[:1], heads=2, score_bias=np.zeros((2, 5, 3))))
        assert shape == "score_bias must be [H, N, M] = [2, 3, 5] or [B, H, N, M] with B = 1, got shape (2, 5, 3)"
        batch = refused(
            ValueError, lambda: assert_attention_close(*sdpa(2), heads=2, score_bias=np.zeros((3, 2, 3, 5)))
        )
        assert "with B = 1 or 2, got shape (3, 2, 3, 5)" in batch
        integers = refused(
            TypeError, lambda: reference(q[:1], k[:1], v[:1], heads=2, score_bias=np.zeros((2, 3, 5), dtype=int))
        )
        assert integers.startswith("score_bias must hold real floating-point numbers")
        nan = np.zeros((2, 3, 5))
        nan[1, 2, 0] = np.nan
        assert "score_bias must hold finite numbers" in refused(
            ValueError, lambda: reference(q[:1], k[:1], v[:1], heads=2, score_bias=nan)
        )


class TestShapeArguments:
    """q, k, v and the heads agree, or the error names the one that does not."""

    @pytest.mark.parametrize(
        ("edit", "options", "fragment"),
        [
            (lambda q, k, v: (q, k[..., :3], v[..., :3]), {}, "k must be [B, H_kv, M, d] with q's d = 4"),
            (lambda q, k, v: (q, k, v[..., :3]), {}, "v must have k's shape (1, 2, 5, 4) (attnx takes d_v = d_k), "
                                                     "got (1, 2, 5, 3)"),
            (lambda q, k, v: (q, k[:, :1], v[:, :1]), {}, "k and v are [B, H_kv, M, d] with H_kv = 1, but kv_heads is "
                                                          "heads=2 by default"),
            (lambda q, k, v: (q, k[:, :1], v[:, :1]), {"kv_heads": 2}, "with H_kv = 1, but kv_heads=2"),
            (lambda q, k, v: flat(q, k[..., :3], v[..., :3]), {}, "k must have H_kv·d = 2 × 4 = 8 columns (d = q's "
                                                                   "width / heads), got 6"),
            (lambda q, k, v: flat(q, k, v), {"heads": 3}, "heads=3 must divide q's width H·d = 8"),
            (lambda q, k, v: flat(q, k, v), {"kv_heads": 1}, "k must have H_kv·d = 1 × 4 = 4 columns"),
            (lambda q, k, v: flat(q, k, v[:, :, :4]), {}, "k and v must have the same number of keys, got 5 and 4"),
        ],
    )  # fmt: skip
    def test_refused(self, edit, options: dict, fragment: str) -> None:  # type: ignore[no-untyped-def]
        """d between q and k, d_v, K/V heads against kv_heads, heads that do not divide, key counts."""
        actual, *qkv = sdpa()
        q, k, v = edit(*qkv)
        settings = {"heads": 2} | options
        assert fragment in refused(ValueError, lambda: assert_attention_close(actual, q, k, v, **settings))
        assert fragment in refused(ValueError, lambda: reference(q, k, v, **settings))

    @pytest.mark.parametrize(("name", "where"), [("q", (0, 1, 2, 3)), ("k", (0, 0, 4, 0)), ("v", (0, 1, 0, 2))])
    @pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
    def test_not_finite(self, name: str, where: tuple[int, ...], value: float) -> None:
        """NaN or infinity in q, k or v is refused where it is; in actual it is a failure of the kernel."""
        actual, q, k, v = sdpa()
        arrays = {"q": q, "k": k, "v": v}
        arrays[name][where] = value
        message = refused(ValueError, lambda: assert_attention_close(actual, **arrays, heads=2))
        assert message == f"{name} must hold finite numbers, got {value} at {name}{list(where)}"

    def test_not_finite_actual_fails(self) -> None:
        """A NaN in actual fails the comparison (AssertionError), as any wrong value."""
        actual, q, k, v = sdpa()
        actual[0, 1, 2, 3] = np.nan
        with pytest.raises(AssertionError, match="actual differs: 1 of 1 beyond tolerance"):
            assert_attention_close(actual, q, k, v, heads=2)


def flat(*arrays: np.ndarray) -> list[np.ndarray]:
    """[1, H, N, d] arrays as [N, H·d]."""
    return [x[0].transpose(1, 0, 2).reshape(x.shape[2], -1) for x in arrays]


class TestSettingArguments:
    """NumPy's scalars are taken as Python's; what is no number, or no finite one, is refused by name."""

    def test_numpy_scalars(self) -> None:
        """heads, kv_heads, window as NumPy integers, scale as float32, causal as NumPy's bool: the right output
        of those settings passes."""
        actual, q, k, v = sdpa(causal=True, scale=0.5)
        assert_attention_close(actual, q, k, v, heads=np.int64(2), kv_heads=np.int32(2), window=np.int64(9),
                               scale=np.float32(0.5), causal=np.bool_(True))  # fmt: skip

    @pytest.mark.parametrize(
        ("options", "error", "message"),
        [
            ({"scale": "sqrt_dk"}, TypeError, "scale must be a number or None, got str"),
            ({"scale": 10**400}, ValueError, "scale must be finite, got a number beyond float64's range"),
            ({"window": np.float64(2)}, TypeError, "window must be an int, got float64"),
            ({"causal": np.int64(1)}, TypeError, "causal must be True or False, got int64"),
            ({"rtol": np.float32("inf")}, ValueError, "rtol must be a finite number ≥ 0, got inf"),
            ({"atol": 10**400}, ValueError, "atol must be a finite number ≥ 0, got a number beyond float64's range"),
            ({"atol": -1}, ValueError, "atol must be a finite number ≥ 0, got -1"),
            ({"rtol": np.array(1e-3)}, TypeError, "rtol must be a number, got ndarray"),
        ],
    )
    def test_refused(self, options: dict, error: type[Exception], message: str) -> None:
        """Each message is the whole sentence, naming the argument."""
        assert refused(error, lambda: assert_attention_close(*sdpa(), heads=2, **options)) == message

    def test_limits_of_another_type(self) -> None:
        """reference's limits are attnx.limits.Limits or None."""
        _, q, k, v = sdpa()
        message = refused(TypeError, lambda: reference(q, k, v, heads=2, limits={"max_elements": 9}))
        assert message == "limits must be attnx.limits.Limits or None, got dict"

    def test_huge_tolerances_say_nothing(self) -> None:
        """rtol and atol of 1e308 on values of 1e3: the bound is beyond float64; right and NaN outputs are judged
        without a warning (pytest would raise it)."""
        actual, q, k, v = sdpa()
        q, k, v, actual = q, k, v * 1e3, actual * 1e3
        assert_attention_close(actual + 1e300, q, k, v, heads=2, rtol=1e308, atol=1e308)
        actual[0, 0, 0, 0] = np.nan
        with pytest.raises(AssertionError, match="actual differs"):
            assert_attention_close(actual, q, k, v, heads=2, rtol=1e308, atol=1e308)


class TestTorchArguments:
    """Torch tensors are checked by their own dtype, before NumPy sees them."""

    def test_refused(self) -> None:
        """Float, bfloat16 and per-head masks, integer, boolean and complex arrays: each names the argument."""
        torch = pytest.importorskip("torch")
        actual, q, k, v = (torch.from_numpy(x) for x in sdpa(2))
        cases = [
            (TypeError, {"mask": torch.zeros(3, 5)}, "mask must be boolean (True: may attend), got dtype float32"),
            (TypeError, {"mask": torch.ones(3, 5, dtype=torch.bfloat16)}, "got dtype bfloat16"),
            (ValueError, {"mask": torch.ones(1, 2, 3, 5, dtype=torch.bool)}, "[B, 1, N, M] (one mask for every head)"),
            (TypeError, {"q": q.to(torch.int64)}, "q must hold real floating-point numbers"),
            (TypeError, {"k": k > 0}, "k must hold real floating-point numbers (float64, float32, float16, bfloat16), "
                                      "got bool"),
            (TypeError, {"actual": actual.to(torch.complex64)}, "actual must hold real floating-point numbers"),
        ]  # fmt: skip
        for error, change, fragment in cases:
            arguments = {"actual": actual, "q": q, "k": k, "v": v, "heads": 2} | change
            assert fragment in refused(error, lambda: assert_attention_close(**arguments))  # noqa: B023

    def test_a_boolean_mask_per_batch_element(self) -> None:
        """A torch [B, 1, N, M] boolean mask, all True: the right output passes."""
        torch = pytest.importorskip("torch")
        tensors = [torch.from_numpy(x) for x in sdpa(2)]
        assert_attention_close(*tensors, heads=2, mask=torch.ones(2, 1, 3, 5, dtype=torch.bool))


class TestReference:
    """attnx.reference: the float64 result of one sequence."""

    def test_equals_compute(self) -> None:
        rng = np.random.default_rng(3)
        q, k, v = rng.standard_normal((3, 5, 8))
        result = attnx.reference(q, k, v, heads=2, causal=True)
        assert result.dtype == "float64" and result.weights.shape == (2, 5, 5)
        from attnx.core.spec import AttentionSpec

        tokens = tuple(map(str, range(5)))
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=2, tokens=tokens, key_tokens=tokens, causal=True)
        np.testing.assert_array_equal(result.output, compute(spec).output)

    def test_torch_batch_of_one(self) -> None:
        q, k, v = tensors(b=1, kv_heads=4)
        assert reference(q, k, v, heads=4).head_outputs.shape == (4, 9, 8)
        with pytest.raises(ValueError, match="one sequence; got a batch of 2"):
            reference(*tensors(kv_heads=4), heads=4)

    @pytest.mark.parametrize(
        ("change", "error", "message"),
        [
            ({"heads": 3}, ValueError, "H = 4, but heads=3"),
            ({"mask": np.ones((9, 9))}, TypeError, "mask must be boolean"),
            ({"mask": np.ones((4, 4), dtype=bool)}, ValueError, r"mask must end in \[N, M\] = \[9, 9\]"),
        ],
    )
    def test_bad_arguments(self, change: dict, error: type[Exception], message: str) -> None:
        q, k, v = tensors(b=1, kv_heads=4)
        with pytest.raises(error, match=message):
            reference(q, k, v, **({"heads": 4} | change))


class TestCaps:
    """reference and assert_attention_close compute through attnx.engines.compute, the one checked entry."""

    @pytest.fixture
    def qkv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """2 heads over 16 tokens, d 2: Q, K and V hold 64 elements each, the scores 2 × 16 × 16 = 512."""
        q, k, v = np.random.default_rng(7).standard_normal((3, 16, 4))
        return q, k, v

    def test_reference_honours_the_variable(self, qkv: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
        """Under ATTNX_MAX_ELEMENTS=200, reference (which computes every matrix) refuses the 512 scores."""
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "200")
        with pytest.raises(LimitError) as info:
            reference(*qkv, heads=2)
        assert str(info.value) == (
            "q, k and v: the scores: an array of 2 × 16 × 16 (512 elements) exceeds the element cap of 200 elements "
            "per array; raise it with --max-elements or ATTNX_MAX_ELEMENTS"
        )

    def test_reference_takes_limits(self, qkv: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
        """Limits given to reference replace the variable's: a cap of 512 elements computes the 2 × 16 × 16 weights."""
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "200")
        result = reference(*qkv, heads=2, limits=Limits(max_elements=512))
        np.testing.assert_allclose(result.weights.sum(axis=-1), np.ones((2, 16)), rtol=1e-12)
        with pytest.raises(LimitError, match=r"^q, k and v: the scores: an array of 2 × 16 × 16 \(512 elements\)"):
            reference(*qkv, heads=2, limits=Limits(max_elements=511))

    def test_assert_close_is_checked(self, qkv: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
        """An output [N, H·d] is checked without matrices (passes a cap of 200); Q's 64 elements over a cap of 32 are not."""
        q, k, v = qkv
        output = reference(q, k, v, heads=2).output
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "200")
        assert_attention_close(output, q, k, v, heads=2)
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "32")
        with pytest.raises(
            LimitError, match=r"^q, k and v: Q: an array of 16 × 4 \(64 elements\) exceeds the element cap"
        ):
            assert_attention_close(output, q, k, v, heads=2)


class TestImportCost:
    """Importing attnx.testing costs nothing heavy; NumPy arrays never import torch."""

    def test_no_torch_or_numpy_on_import(self) -> None:
        code = (
            "import sys, attnx.testing; print('torch' in sys.modules, 'numpy' in sys.modules);"
            "import numpy as np; q = np.eye(4); attnx.testing.assert_attention_close("
            "attnx.testing.reference(q, q, q, heads=2).output, q, q, q, heads=2); print('torch' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.split() == ["False", "False", "False"]
