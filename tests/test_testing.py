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
from attnx.errors import ConfigError, LimitError
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
        with pytest.raises(ConfigError, match=r"^q, k and v: d_model 32 is not divisible by heads 3") as refused:
            flat = (x.transpose(0, 2, 1, 3).reshape(1, 6, 32) for x in (actual, q, k, v))  # [B, N, H·d]
            assert_attention_close(*flat, heads=3)
        with pytest.raises(ValueError, match=r"^kv_heads=3 must divide heads=4") as argument:
            assert_attention_close(actual, q, k, v, heads=4, kv_heads=3)
        for caught in (failed, refused, argument):
            shown = [Path(entry.path) for entry in caught.traceback.filter(caught)]
            assert shown and [path for path in shown if path.is_relative_to(package)] == []

    def test_an_actual_of_integers_is_a_type_error(self) -> None:
        actual, q, k, v = self.wrong(n=3)
        with pytest.raises(TypeError, match=r"^actual must hold real floating-point numbers \(float64, float32, "):
            assert_attention_close(actual.astype(int), q, k, v, heads=4)


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
