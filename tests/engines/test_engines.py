"""The engines on the worked example, against a per-head loop, in every layout, chosen by name, and on chosen queries."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec
from attnx.engines import compute, numpy_engine
from attnx.engines.core import attention, merge_heads, split_heads
from attnx.errors import EngineUnavailableError
from attnx.io import load_spec
from tests.conftest import (
    AVERAGE_WEIGHTS,
    DECIMALS_4,
    HEAD1_WEIGHTS,
    HEAD2_WEIGHTS,
    OUTPUT,
    SINGLE_HEAD_CAT,
    TOKENS,
)
from tests.specs import loaded, spec_of


def reference(spec: AttentionSpec) -> dict[str, np.ndarray]:
    """Textbook multi-head attention with an explicit loop over heads, in float64."""
    d_k = spec.d_k
    weights, outputs = [], []
    for h in range(spec.settings.heads):
        cols = slice(h * d_k, (h + 1) * d_k)
        scores = spec.inputs.q[:, cols] @ spec.inputs.k[:, cols].T
        scaled = scores / math.sqrt(d_k)
        e = np.exp(scaled - scaled.max(axis=1, keepdims=True))
        w = e / e.sum(axis=1, keepdims=True)
        weights.append(w)
        outputs.append(w @ spec.inputs.v[:, cols])
    return {"weights": np.stack(weights), "output": np.concatenate(outputs, axis=1)}


class TestWorkedExample:
    def test_head_weights_match_the_tutorial(self, engine: str) -> None:
        """Both 5x5 weight matrices of the H=2 worked example agree to 4 decimals."""
        result = compute(load_spec(), engine)
        np.testing.assert_allclose(result.weights[0], HEAD1_WEIGHTS, rtol=0, atol=DECIMALS_4)
        np.testing.assert_allclose(result.weights[1], HEAD2_WEIGHTS, rtol=0, atol=DECIMALS_4)

    def test_output_matches_the_tutorial(self, engine: str) -> None:
        """The 5x4 concatenated output agrees to 4 decimals."""
        result = compute(load_spec(), engine)
        np.testing.assert_allclose(result.output, OUTPUT, rtol=0, atol=DECIMALS_4)

    def test_average_weights_match_the_tutorial(self, engine: str) -> None:
        """The head-averaged weights agree to 4 decimals."""
        result = compute(load_spec(), engine)
        np.testing.assert_allclose(result.average_weights, AVERAGE_WEIGHTS, rtol=0, atol=DECIMALS_4)

    def test_single_head_row_of_cat(self, engine: str) -> None:
        """With H=1, "cat" gives 0.4026 to "The", 0.2442 to "sat" and 0.0898 to itself."""
        result = compute(loaded(heads=1), engine)
        row = result.weights[0, TOKENS.index("cat")]
        for token, expected in SINGLE_HEAD_CAT.items():
            assert abs(row[TOKENS.index(token)] - expected) < DECIMALS_4

    def test_metadata(self, engine: str) -> None:
        """The result carries the sizes and the multiplier applied to the scores."""
        result = compute(load_spec(), engine)
        assert (result.heads, result.d_model, result.d_k) == (2, 4, 2)
        assert result.scale == pytest.approx(1 / math.sqrt(2), rel=1e-15)
        assert result.tokens == TOKENS
        np.testing.assert_allclose(result.scaled, result.scores * result.scale, rtol=1e-15)


class TestAgainstLoopReference:
    @pytest.mark.parametrize(("n", "d_model", "heads"), [(1, 1, 1), (3, 6, 3), (7, 12, 4), (16, 64, 8)])
    def test_random_inputs(self, engine: str, n: int, d_model: int, heads: int) -> None:
        """Batched heads equal a per-head loop to float64 rounding."""
        rng = np.random.default_rng(n * 100 + heads)
        q, k, v = rng.standard_normal((3, n, d_model)) * 3
        spec = spec_of(q, k, v, heads, tuple(map(str, range(n))), tuple(map(str, range(n))))
        result, ref = compute(spec, engine), reference(spec)
        np.testing.assert_allclose(result.weights, ref["weights"], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(result.output, ref["output"], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(result.weights.sum(axis=-1), 1.0, rtol=1e-14)

    def test_float32_stays_float32(self, engine: str) -> None:
        """--dtype float32 computes and returns float32 arrays close to float64."""
        spec = loaded(seed=3, tokens=tuple("abcdefgh"), d_model=16, heads=4)
        r32, r64 = compute(spec, engine, dtype="float32"), compute(spec, engine)
        for name in ("scores", "scaled", "weights", "head_outputs", "output", "average_weights"):
            assert getattr(r32, name).dtype == np.float32, name
        np.testing.assert_allclose(r32.weights, r64.weights, rtol=1e-5, atol=1e-6)

    def test_softmax_is_stable_for_huge_scores(self, engine: str) -> None:
        """Scores near the float64 limit still give finite weights that sum to one."""
        q = np.array([[1e150, 0.0], [-1e150, 0.0]])
        k = np.array([[1e150, 0.0], [1.0, 0.0]])
        spec = spec_of(q, k, k, 1, ("a", "b"), ("a", "b"))
        weights = compute(spec, engine).weights[0]
        assert np.isfinite(weights).all()
        np.testing.assert_allclose(weights, [[1.0, 0.0], [0.0, 1.0]])


class TestLayout:
    @pytest.mark.parametrize(("layout", "columns"), [("contiguous", [2, 3]), ("interleaved", [1, 4])])
    def test_split_and_merge_heads(self, layout: str, columns: list[int]) -> None:
        """Head 1 of 3 owns columns 2-3 (contiguous) or 1 and 4 (interleaved); merge undoes split."""
        ops = numpy_engine.NumpyEngine("float64")
        x = np.arange(12.0).reshape(2, 6)
        split = split_heads(ops, x, 3, layout)
        assert split.shape == (3, 2, 2)
        np.testing.assert_array_equal(split[1], x[:, columns])
        np.testing.assert_array_equal(merge_heads(ops, split, layout), x)

    def test_result_is_read_only(self, engine: str) -> None:
        """Nobody downstream can change what the engine computed."""
        result = compute(load_spec(), engine)
        with pytest.raises(ValueError, match="read-only"):
            result.weights[0, 0, 0] = 1.0


class TestEngineSelection:
    def test_dtype_follows_request(self, engine: str) -> None:
        """The default dtype is float64; the result reports engine, device and dtype."""
        result = compute(load_spec(), engine)
        assert (result.engine, result.device, result.dtype) == (engine, "cpu", "float64")
        assert result.output.dtype == np.float64

    def test_unknown_engine(self) -> None:
        """An unknown engine is a domain error naming the engines there are."""
        with pytest.raises(EngineUnavailableError, match="available: numpy, torch"):
            compute(load_spec(), "jax")

    def test_numpy_is_cpu_only(self) -> None:
        """Asking the NumPy engine for a GPU is a domain error."""
        with pytest.raises(EngineUnavailableError, match="CPU only, not 'cuda'; use --engine torch"):
            compute(load_spec(), "numpy", device="cuda")

    def test_numpy_engine_rejects_other_dtypes(self) -> None:
        """A dtype an engine lacks is a domain error listing the supported ones."""
        with pytest.raises(EngineUnavailableError, match="supported: float64, float32"):
            compute(load_spec(), "numpy", dtype="float16")


class TestDenseReuse:
    """The one-piece path writes a matrix nobody kept over with the next step, and the kept ones stay as they were."""

    @pytest.mark.parametrize(
        "keep", [{"weights"}, {"scores", "weights"}, {"scaled", "weights"}, {"scores"}, {"scaled"}, {"output"}]
    )
    def test_every_kept_matrix_equals_the_full_computation(self, engine: str, keep: set[str]) -> None:
        """Raw scores stay unscaled, scaled scores stay unnormalised: bit for bit the matrices of needs=None.

        (torch computes output alone with its fused kernel, which rounds differently.)
        """
        spec = loaded(seed=5, tokens=tuple("abcdef"), d_model=12, heads=3).with_settings(causal=True)
        full, part = compute(spec, engine), compute(spec, engine, needs=keep)
        for name in keep - {"output"}:
            np.testing.assert_array_equal(getattr(part, name), getattr(full, name), err_msg=name)
        np.testing.assert_allclose(part.output, full.output, rtol=1e-13, atol=1e-15)
        for name in {"scores", "scaled", "weights"} - keep:
            assert getattr(part, name) is None, name

    def test_one_matrix_is_made_when_only_weights_are_kept(self) -> None:
        """Peak memory of the NumPy one-piece path: one H × N × M array for weights alone, two with scaled."""
        tokens = tuple(f"t{i}" for i in range(200))
        spec = loaded(seed=1, tokens=tokens, d_model=16, heads=4)
        matrix = 4 * 200 * 200 * 8  # bytes of one float64 H × N × M array (dense: H·N·M ≤ DENSE_LIMIT)

        def peak(needs: set[str]) -> int:
            tracemalloc.start()
            try:
                compute(spec, needs=needs)
                return tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()

        assert peak({"weights"}) < 1.5 * matrix
        assert 2 * matrix < peak({"scaled", "weights"}) < 2.5 * matrix


class TestQuerySelection:
    def test_selected_rows_equal_the_full_computation(self, engine: str) -> None:
        """Computing only some query rows gives exactly those rows of the full result."""
        spec = loaded(seed=11, tokens=tuple("abcdefg"), d_model=12, heads=3)
        full, part = compute(spec, engine), compute(spec.select_queries([5, 1]), engine)
        assert part.tokens == ("f", "b") and part.query_positions == (5, 1)
        np.testing.assert_allclose(part.weights, full.weights[:, [5, 1]], rtol=1e-14, atol=1e-16)
        np.testing.assert_allclose(part.output, full.output[[5, 1]], rtol=1e-14, atol=1e-16)
        assert part.weights.shape == (3, 2, 7)

    def test_out_of_range_row(self) -> None:
        """A query index past the end is a domain error."""
        from attnx.errors import ConfigError

        with pytest.raises(ConfigError, match=r"query 5 is out of range 0\.\.4"):
            load_spec().select_queries([5])


class TestFloat32Inputs:
    @pytest.mark.parametrize("dense_limit", [1 << 20, 0], ids=["one-piece", "tiled"])
    @pytest.mark.parametrize("dtype", ["float64", "float32"])
    def test_same_result_as_the_widened_input(
        self, engine: str, dtype: str, dense_limit: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A spec kept in float32 gives bit for bit the result of the same values widened to float64."""
        monkeypatch.setattr(numpy_engine, "DENSE_LIMIT", dense_limit)
        q, k, v = np.random.default_rng(3).standard_normal((3, 40, 16)).astype(np.float32)
        labels = tuple(map(str, range(40)))
        narrow = spec_of(q, k, v, 4, labels, labels, causal=True)
        wide = spec_of(*(x.astype(np.float64) for x in (q, k, v)), 4, labels, labels, causal=True)
        assert narrow.inputs.q.dtype == np.float32 and wide.inputs.q.dtype == np.float64
        for needs in ({"output"}, None):
            a, b = compute(narrow, engine, dtype=dtype, needs=needs), compute(wide, engine, dtype=dtype, needs=needs)
            np.testing.assert_array_equal(a.output, b.output)
            if needs is None:
                np.testing.assert_array_equal(a.weights, b.weights)

    def test_torch_shares_float32_inputs_on_the_cpu(self) -> None:
        """The torch engine reads a float32 spec's arrays in place on the CPU, and copies them to float64."""
        torch_engine = pytest.importorskip("attnx.engines.torch_engine")
        values = np.arange(6, dtype=np.float32).reshape(2, 3)
        values.flags.writeable = False
        shared = torch_engine.TorchEngine("float32", "cpu").array(values)
        assert shared.data_ptr() == values.ctypes.data
        widened = torch_engine.TorchEngine("float64", "cpu").array(values)
        assert widened.dtype.is_floating_point and widened.element_size() == 8
        assert widened.tolist() == values.tolist()


class TestTorchOutputPath:
    def test_sdpa_reads_the_heads_in_place_and_returns_token_order(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """SDPA gets (1, H, N, d_k) views of the input itself, and the output comes back without a copy."""
        torch = pytest.importorskip("torch")
        from attnx.engines import torch_engine

        seen: list[torch.Tensor] = []
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def spy(q: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
            seen.append(q)
            out = sdpa(q, *args, **kwargs)  # type: ignore[arg-type]
            seen.append(out)
            return out

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
        q, k, v = np.random.default_rng(5).standard_normal((3, 6, 8))
        labels = tuple(map(str, range(6)))
        spec = spec_of(q, k, v, 2, labels, labels)
        backend = torch_engine.TorchEngine("float64", "cpu")
        with torch.inference_mode():
            arrays = attention(backend, spec, {"output"})
        (query, out), output = seen, arrays["output"]
        assert tuple(query.shape) == (1, 2, 6, 4) and query.data_ptr() == spec.inputs.q.ctypes.data
        assert output.data_ptr() == out.data_ptr()  # the concatenated output is a view of SDPA's
        np.testing.assert_allclose(output.numpy(), compute(spec, "numpy").output, rtol=1e-12, atol=1e-12)


class TestSlices:
    """The engines return each head's slices of Q, K and V (``q``, ``k``, ``v``) as they used them."""

    def test_only_when_asked(self, engine: str) -> None:
        """needs={"q", "output"} returns q and leaves k, v and the matrices out."""
        part = compute(load_spec(), engine, needs={"q", "output"})
        assert part.q is not None and part.k is None and part.v is None and part.weights is None
        np.testing.assert_array_equal(part.q[1], load_spec().inputs.q[:, 2:4])

    def test_blocked_path_leaves_q_unscaled(self, engine: str) -> None:
        """600 tokens, 4 heads (past the one-piece limit): q is Q's columns as given, not Q times the scale."""
        spec = loaded(seed=2, tokens=tuple(f"t{i}" for i in range(600)), d_model=8, heads=4)
        result = compute(spec, engine, needs={"q", "k", "v", "output"})
        assert result.q is not None and result.k is not None and result.v is not None
        np.testing.assert_array_equal(result.q, spec.inputs.q.reshape(600, 4, 2).transpose(1, 0, 2))
        np.testing.assert_array_equal(result.v[3], spec.inputs.v[:, 6:8])
        assert not result.q.flags.writeable
