"""Checking kernels: right ones pass in every dtype and size, wrong ones fail and are diagnosed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attnx.analysis.array_layouts import ARRAY_LAYOUTS, recognise
from attnx.analysis.check import verify_kernel
from attnx.analysis.check_against import verify
from attnx.analysis.tolerance import default_tolerance
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import AmbiguousError, ConfigError
from attnx.io.results import BareArray, SavedResult
from tests.analysis import kernels

DTYPES = ["float64", "float32", "float16", "bfloat16"]


def problem(n: int, dtype: str, *, m: int | None = None, heads: int = 4, kv_heads: int = 2, d: int = 16, seed: int = 0):
    """Random q [1, H, N, d], k and v [1, H_kv, M, d] in ``dtype``, and the causal spec of those very values."""
    torch = pytest.importorskip("torch")
    m = n if m is None else m
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, n, d, generator=generator, dtype=torch.float64).to(getattr(torch, dtype))
    k, v = (torch.randn(1, kv_heads, m, d, generator=generator, dtype=torch.float64).to(getattr(torch, dtype))
            for _ in range(2))  # fmt: skip

    def flat(x):  # type: ignore[no-untyped-def]
        return x[0].double().numpy().transpose(1, 0, 2).reshape(x.shape[2], -1)

    tokens, keys = tuple(f"t{i}" for i in range(n)), tuple(f"k{j}" for j in range(m))
    spec = AttentionSpec.build(q=flat(q), k=flat(k), v=flat(v), heads=heads, kv_heads=kv_heads, tokens=tokens,
                               key_tokens=keys, causal=True)  # fmt: skip
    return spec, (q, k, v)


class TestTolerances:
    """The default tolerance of each dtype, and where it comes from."""

    def test_defaults(self) -> None:
        """float64 1e-7/1e-7; float32 1.3e-6 and 1e-5 × max(1, |ref|); half: torch's rtol, atol 2 ε × max|ref|."""
        ref = np.array([0.5, -3.0])
        assert default_tolerance("float64", ref).atol == 1e-7
        assert default_tolerance("float32", ref).atol == pytest.approx(3e-5)
        assert default_tolerance("float32", ref / 10).atol == pytest.approx(1e-5)  # at least 1 × 1e-5
        assert (default_tolerance("float16", ref).rtol, default_tolerance("float16", ref).atol) == (1e-3, 6 * 2**-10)
        assert (default_tolerance("bfloat16", ref).rtol, default_tolerance("bfloat16", ref).atol) == (1.6e-2, 6 * 2**-7)

    def test_unknown_dtype(self) -> None:
        """A dtype with no tolerance is a ConfigError naming the four."""
        with pytest.raises(ConfigError, match="float64, float32, float16, bfloat16"):
            default_tolerance("int8", np.ones(2))


class TestRightAndWrongAtEverySize:
    """On random causal GQA inputs of N = 16, 256 and 1024 (the tiled paths, errors summed over a thousand keys):
    the right kernel passes in every dtype by the default tolerances, and every wrong kernel fails."""

    @pytest.mark.parametrize("n", [16, 256, 1024])
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_right_passes_and_wrong_fail(self, n: int, dtype: str) -> None:
        spec, (q, k, v) = problem(n, dtype, d=32 if n == 1024 else 16, seed=n)
        reference = compute(spec, "numpy", dtype="float64", needs={"head_outputs"})
        name, values = kernels.right(q, k, v)
        passed = verify(reference, {name: values}, dtype)
        assert passed.passed, [(c.name, c.max_abs, c.eps_units) for c in passed.checks]
        for label, (kernel, _) in kernels.WRONG.items():
            if label == "over_queries" and n == 1024 and dtype == "float64":
                continue  # the manual kernel's N × N float64 softmax over queries: covered at the other sizes
            name, values = kernel(q, k, v)
            verification = verify(reference, {name: values}, dtype)
            assert not verification.passed, f"{label} passed in {dtype} at N = {n}"

    @pytest.mark.parametrize("n", [16, 256, 1024])
    def test_half_kernel_on_rounded_inputs_passes(self, n: int) -> None:
        """The reference from float32 inputs, the kernel from the same inputs rounded to float16 or bfloat16 (a
        half-precision kernel tested against a float32 file): still within the half-precision tolerance."""
        import torch

        spec, (q, k, v) = problem(n, "float32", d=32, seed=n + 1)
        reference = compute(spec, "numpy", dtype="float64", needs={"head_outputs"})
        for dtype in ("float16", "bfloat16"):
            half = getattr(torch, dtype)
            name, values = kernels.right(q.to(half), k.to(half), v.to(half))
            assert verify(reference, {name: values}, dtype).passed


class TestDiagnoses:
    """Each wrong kernel is diagnosed as its bug, and only as it; a right kernel gets no diagnosis."""

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("label", list(kernels.WRONG))
    def test_each_bug_is_named(self, label: str, dtype: str) -> None:
        spec, (q, k, v) = problem(12, dtype, seed=3)
        kernel, bug = kernels.WRONG[label]
        name, values = kernel(q, k, v)
        verification = verify_kernel(spec, SavedResult("kernel", {}, {name: values}, dtype))
        assert not verification.passed
        assert [d.bug for d in verification.diagnoses] == [bug]

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_bottom_right_mask(self, dtype: str) -> None:
        """With fewer queries than keys, a mask aligned to the bottom-right corner is named so."""
        spec, (q, k, v) = problem(5, dtype, m=9, seed=4)
        name, values = kernels.bottom_right(q, k, v)
        verification = verify_kernel(spec, SavedResult("kernel", {}, {name: values}, dtype))
        assert [d.bug for d in verification.diagnoses] == ["causal mask aligned bottom-right"]

    def test_right_kernel_has_none(self) -> None:
        spec, (q, k, v) = problem(12, "bfloat16", seed=3)
        name, values = kernels.right(q, k, v)
        verification = verify_kernel(spec, SavedResult("kernel", {}, {name: values}, "bfloat16"))
        assert verification.passed and verification.diagnoses == ()

    @pytest.mark.parametrize(("empty", "bug"), [("nan", "masked rows NaN"), ("uniform", "masked rows uniform")])
    def test_fully_masked_rows(self, empty: str, bug: str) -> None:
        """Query 1 sees no key: a kernel that gives it NaN (nn.MultiheadAttention) or uniform weights is named."""
        rng = np.random.default_rng(2)
        q, k, v = rng.standard_normal((3, 4, 8))
        allowed = np.ones((4, 4), dtype=bool)
        allowed[1] = False
        tokens = tuple("abcd")
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=2, tokens=tokens, key_tokens=tokens, mask=allowed)
        output = compute(spec).output.copy()
        output[1] = np.nan if empty == "nan" else v.mean(axis=0)
        verification = verify_kernel(spec, SavedResult("kernel", {}, {"output": output}, "float64"))
        assert [d.bug for d in verification.diagnoses] == [bug]

    def test_score_bias_is_in_the_reference_and_the_hypotheses(self) -> None:
        """A kernel that adds the bias right passes; one that adds it but scales by 1/√d_model is named so."""
        rng = np.random.default_rng(48)
        q, k, v = rng.standard_normal((3, 5, 8))
        tokens = tuple("abcde")
        bias = rng.standard_normal((2, 5, 5)) * 2
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=2, tokens=tokens, key_tokens=tokens, causal=True,
                                   score_bias=bias)  # fmt: skip
        right = compute(spec).weights
        passed = verify_kernel(spec, SavedResult("kernel", {}, {"weights": right}, "float64"))
        assert passed.passed and passed.diagnoses == ()
        wrong = compute(dataclasses.replace(spec, settings=dataclasses.replace(spec.settings, scale="sqrt_d_model")))
        assert not np.allclose(wrong.weights, right)
        failed = verify_kernel(spec, SavedResult("kernel", {}, {"weights": wrong.weights}, "float64"))
        assert [d.bug for d in failed.diagnoses] == ["scale 1/√d_model"]


class TestVerification:
    """What a verification reports."""

    def test_worst_element_and_error_maps(self) -> None:
        """One wrong element: located, counted as the one beyond tolerance, and alone in the per-head map."""
        spec, _ = problem(6, "float64", seed=5)
        reference = compute(spec)
        output = reference.output.copy()
        output[4, 37] += 0.5  # query 4, column 37: head 2 (d_k 16), its d 5
        check = verify(reference, {"output": output}, "float64").checks[0]
        assert (check.worst, check.beyond, check.size) == ((4, 37), 1, 6 * 64)
        assert check.max_abs == pytest.approx(0.5) and check.eps_units == pytest.approx(0.5 / 2**-52 / np.abs(
            reference.output).max())  # fmt: skip
        assert check.by_head is not None and np.argwhere(check.by_head > 0.1).tolist() == [[2, 4]]

    def test_weights_map_shows_the_diagonal(self) -> None:
        """A kernel's weights with the mask one key late: the per-query-and-key map is off just above the diagonal."""
        spec, (q, k, _) = problem(6, "float64", seed=6)
        reference = compute(spec)
        import torch

        scores = (q @ k.repeat_interleave(2, dim=1).transpose(-1, -2)) / 4.0
        weights = torch.softmax(scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(1), float("-inf")), -1)
        check = verify(reference, {"weights": weights[0].numpy()}, "float64").checks[0]
        off = np.argwhere(check.by_key > 1e-9)
        assert check.by_key is not None and len(off) and all(j - i in (0, 1) or j < i for i, j in off)
        assert {(i, i + 1) for i in range(5)} <= {tuple(x) for x in off.tolist()}

    def test_nothing_in_common(self) -> None:
        spec, _ = problem(4, "float64")
        with pytest.raises(ConfigError, match="hold no tensor in common"):
            verify(compute(spec, needs={"head_outputs"}), {"projected": np.zeros((4, 64))}, "float64")


class TestLayouts:
    """A bare array is read as the tensor its shape fits."""

    @pytest.mark.parametrize("layout", list(ARRAY_LAYOUTS))
    def test_every_layout_round_trips(self, layout: str) -> None:
        """Each layout written from the reference reads back as the reference's tensor."""
        spec, _ = problem(5, "float64", m=7)
        reference = compute(spec)
        name, axes = ARRAY_LAYOUTS[layout]
        held = getattr(reference, name)
        if "N H D" in axes:
            held = held.transpose(1, 0, 2)
        array = held[None] if axes.startswith("1 ") else held
        read_as, read, _ = recognise(array, {"query": 5, "key": 7, "head": 4, "d_k": 16, "d_model": 64}, layout)
        assert read_as == name
        np.testing.assert_array_equal(read, getattr(reference, name))

    def test_ambiguous_shape_asks_for_the_layout(self) -> None:
        """4 queries and 4 heads: [4, 4, 16] could be hnd or nhd, and the two read differently (an AmbiguousError,
        which names no flag: the CLI adds --array-layout)."""
        sizes = {"query": 4, "key": 4, "head": 4, "d_k": 16, "d_model": 64}
        with pytest.raises(AmbiguousError, match=r"could be hnd or nhd: name its layout$"):
            recognise(np.arange(256.0).reshape(4, 4, 16), sizes)

    def test_n_equal_to_d_reads_a_kernel_file_as_its_output(self) -> None:
        """N = M = d = 4: [1, 2, 4, 4] fits bhnd (head outputs) and bhnm (weights). A kernel's file is read as its
        output, naming the weights layout set aside; elsewhere (diff) the shape stays ambiguous."""
        sizes = {"query": 4, "key": 4, "head": 2, "d_k": 4, "d_model": 8}
        array = np.arange(32.0).reshape(1, 2, 4, 4)
        name, read, weights_too = recognise(array, sizes, output_first=True)
        assert (name, weights_too) == ("head_outputs", ("bhnm",))
        np.testing.assert_array_equal(read, array[0])
        assert recognise(array, sizes, "bhnm", output_first=True)[:1] == ("weights",)
        with pytest.raises(AmbiguousError, match=r"could be bhnd or bhnm: name its layout$"):
            recognise(array, sizes)

    def test_two_readings_of_the_output_stay_ambiguous(self) -> None:
        """H = N = M = d: hnd and nhd read [4, 4, 4] differently, both as head outputs: no reading is preferred."""
        sizes = {"query": 4, "key": 4, "head": 4, "d_k": 4, "d_model": 16}
        with pytest.raises(AmbiguousError, match=r"could be hnd or nhd or hnm: name its layout$"):
            recognise(np.arange(64.0).reshape(4, 4, 4), sizes, output_first=True)

    def test_a_shape_that_fits_nothing_lists_the_layouts(self) -> None:
        with pytest.raises(ConfigError, match=r"fits none of the layouts for this input: nd \(5, 64\)"):
            recognise(np.zeros((3, 3)), {"query": 5, "key": 5, "head": 4, "d_k": 16, "d_model": 64})

    def test_bare_array_in_verify_kernel(self) -> None:
        """SDPA's [1, H, N, d] output saved alone passes; its kernel line says what it was read as."""
        spec, (q, k, v) = problem(8, "float32")
        _, values = kernels.right(q, k, v)
        verification = verify_kernel(spec, BareArray("out.npy", values[None].astype(np.float32)))
        assert verification.passed and verification.dtype == "float32"
        assert verification.kernel == "out.npy, one array read as head_outputs [head, query, d_k]"


def small() -> AttentionSpec:
    """2 heads of 3 over 4 queries and 5 keys: weights (2, 4, 5), head outputs (2, 4, 3), output (4, 6)."""
    q, k, v = np.random.default_rng(8).standard_normal((3, 5, 6))
    return AttentionSpec.build(q=q[:4], k=k, v=v, heads=2, tokens=tuple("abcd"), key_tokens=tuple("vwxyz"))


class TestShapes:
    """A tensor the kernel holds under a known name but in another shape fails, naming both shapes; only a tensor
    the kernel does not hold is not compared."""

    @pytest.mark.parametrize(
        ("name", "change"),
        [
            ("weights", lambda w: np.concatenate([w, w[:1]])),  # a head too many
            ("weights", lambda w: w[:1]),  # a head too few
            ("weights", lambda w: w[:, :3]),  # a query too few
            ("weights", lambda w: w[:, :, :4]),  # a key too few
            ("weights", lambda w: w[None]),  # a batch axis: another rank
            ("weights", lambda w: w.transpose(1, 0, 2)),  # [query, head, key]
            ("head_outputs", lambda h: h[..., :2]),  # d_v of 2
            ("output", lambda o: o[:, :5]),  # a column too few
            ("output", lambda o: o.ravel()),  # flattened
            ("average_weights", lambda a: a[:2]),  # a tensor no kernel report listed before
        ],
    )
    def test_another_shape_fails(self, name: str, change) -> None:  # type: ignore[no-untyped-def]
        """The tensor is mismatched (its shape, the reference's), the others still compared and passing."""
        reference = compute(small())
        tensors = {key: getattr(reference, key) for key in ("weights", "head_outputs", "output", "average_weights")}
        tensors[name] = change(tensors[name])
        verification = verify(reference, tensors, "float64")
        assert verification.mismatched == ((name, tensors[name].shape, getattr(reference, name).shape),)
        assert {check.name for check in verification.checks} == set(tensors) - {name}
        assert all(check.passed for check in verification.checks)
        assert (verification.passed, verification.failures) == (False, 1)

    def test_a_tensor_not_held_is_not_compared(self) -> None:
        """The output alone, right: it passes; the tensors the reference holds besides are listed, not failed."""
        reference = compute(small(), needs={"weights"})
        verification = verify(reference, {"output": reference.output}, "float64")
        assert verification.passed and verification.mismatched == ()
        assert verification.skipped == (("weights", "not in the kernel's file"),)

    def test_a_tensor_the_reference_has_not(self) -> None:
        """projected without W_o, sink weights without sinks: not compared, each with the reason, never ignored."""
        reference = compute(small(), needs={"output"})
        held = {"output": reference.output, "projected": reference.output, "sink_weights": np.zeros((2, 4))}
        verification = verify(reference, held, "float64")
        assert verification.passed and [check.name for check in verification.checks] == ["output"]
        assert verification.skipped[-2:] == (
            ("projected", "the reference has none: the input has no w_o"),
            ("sink_weights", "the reference has none: the attention has no learned sinks"),
        )

    def test_average_weights_compared(self) -> None:
        """average_weights is compared like every tensor a result holds: off by 0.5 in one cell, it fails there."""
        spec = small()
        average = compute(spec).average_weights.copy()
        average[1, 2] += 0.5
        verification = verify_kernel(spec, SavedResult("kernel", {}, {"average_weights": average}, "float64"))
        (check,) = verification.checks
        assert (check.name, check.worst, check.beyond, verification.passed) == ("average_weights", (1, 2), 1, False)

    def test_no_diagnosis_for_a_shape(self) -> None:
        """Right values beside a tensor in another shape: the verification fails, and no bug is said to explain it."""
        spec = small()
        reference = compute(spec)
        held = {"output": reference.output, "weights": reference.weights[:1]}
        verification = verify_kernel(spec, SavedResult("kernel", {}, held, "float64"))
        assert not verification.passed and verification.diagnoses == ()

    def test_a_bare_array_names_its_file(self) -> None:
        """A bare array whose shape fits no layout stays a ConfigError (no name says what it holds): it names the
        file, then the layouts it could have had."""
        with pytest.raises(ConfigError, match=r"^out\.npy: an array of shape \(7, 3\) fits none of the layouts"):
            verify_kernel(small(), BareArray("out.npy", np.zeros((7, 3))))

    def test_epsilon_units_of_a_tiny_reference(self) -> None:
        """A reference whose largest magnitude is below ε's reach (1e-310): the error in ε units is infinite, not a
        ZeroDivisionError."""
        tiny = dataclasses.replace(compute(small()), output=np.full((4, 6), 1e-310))
        check = verify(tiny, {"output": np.full((4, 6), 2e-310)}, "float64").checks[0]
        assert (check.eps_units, check.max_abs) == (np.inf, pytest.approx(1e-310))
