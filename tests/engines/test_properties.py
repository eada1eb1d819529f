"""Properties of attention that hold for every input, checked on random problems on both engines."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnx.analysis.tolerance import compare, default_tolerance
from attnx.core.result import AttentionResult
from attnx.core.spec import LAYOUTS, AttentionSpec, DirectInputs, divisors
from attnx.engines import compute
from tests.specs import spec_of

# The engine fixture only names an engine, so sharing it between examples is safe.
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
EXACT = {"rtol": 1e-10, "atol": 1e-12}  # float64: the same numbers summed in another order


@st.composite
def problems(draw: st.DrawFn, *, magnitude: float = 10.0, max_heads: int = 3) -> AttentionSpec:
    """A small multi-head problem: 1-3 heads (grouped K/V too), 1-6 queries and keys, masks, layouts, scales."""
    heads = draw(st.integers(1, max_heads))
    kv_heads = draw(st.sampled_from(divisors(heads)))
    d_k, n, m = draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    cells = st.floats(-magnitude, magnitude, allow_nan=False, allow_subnormal=False)
    q = draw(hnp.arrays(np.float64, (n, heads * d_k), elements=cells))
    k = draw(hnp.arrays(np.float64, (m, kv_heads * d_k), elements=cells))
    v = draw(hnp.arrays(np.float64, (m, kv_heads * d_k), elements=cells))
    mask = draw(st.none() | hnp.arrays(np.bool_, (n, m)))
    scale = draw(st.sampled_from(["sqrt_dk", "sqrt_d_model", "none"]) | st.floats(0.01, 2.0))
    return spec_of(
        q, k, v, heads, tuple(f"q{i}" for i in range(n)), tuple(f"k{j}" for j in range(m)), "property",
        kv_heads=kv_heads, mask=mask, causal=draw(st.booleans()), layout=draw(st.sampled_from(LAYOUTS)),
        scale=scale,
    )  # fmt: skip


def explicit(spec: AttentionSpec) -> AttentionSpec:
    """The same problem with causal and padding folded into one explicit mask (so rows and keys can move)."""
    allowed = spec.allowed()
    return replace(spec.with_settings(causal=False), padding=None, mask=allowed)


def visible(spec: AttentionSpec) -> np.ndarray:
    """``[query, key]``: True where attending is allowed."""
    allowed = spec.allowed()
    return np.ones((spec.n_queries, spec.n_keys), bool) if allowed is None else allowed


def value_heads(result: AttentionResult) -> np.ndarray:
    """``[head, key, d_k]``: the V slice each query head reads (grouped heads share one)."""
    return np.stack([result.v[result.kv_head(h)] for h in range(result.heads)])


class TestWeights:
    """The softmax gives a probability distribution over the visible keys of each row."""

    @PROPERTY
    @given(spec=problems())
    def test_rows_are_distributions(self, engine: str, spec: AttentionSpec) -> None:
        """Weights are non-negative, zero on blocked keys, and each row sums to 1 (or is all zero when fully masked)."""
        weights = compute(spec, engine, device="cpu").weights
        seen = visible(spec)
        assert np.all(weights >= 0)
        assert np.all(weights[:, ~seen] == 0)
        np.testing.assert_allclose(weights.sum(axis=-1), np.broadcast_to(seen.any(axis=1), weights.shape[:2]), **EXACT)

    @PROPERTY
    @given(spec=problems(max_heads=1), shift=st.floats(-50, 50), data=st.data())
    def test_a_constant_added_to_a_row_of_scores_changes_nothing(
        self, engine: str, spec: AttentionSpec, shift: float, data: st.DataObject
    ) -> None:
        """Scores of query i raised by c_i (an extra column: a_i in Q, 1 in K, 0 in V) leave weights and outputs."""
        one = explicit(spec).with_settings(scale=1.0)  # a fixed scale: the extra column must not change it
        a = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=one.n_queries, max_size=one.n_queries))) * shift
        shifted = replace(
            one,
            inputs=DirectInputs.of(
                np.column_stack([one.inputs.q, a]),
                np.column_stack([one.inputs.k, np.ones(one.n_keys)]),
                np.column_stack([one.inputs.v, np.zeros(one.n_keys)]),
            ),
        )
        before, after = compute(one, engine, device="cpu"), compute(shifted, engine, device="cpu")
        np.testing.assert_allclose(after.scores[0], before.scores[0] + a[:, None], rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(after.weights, before.weights, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(after.output[:, :-1], before.output, rtol=1e-9, atol=1e-9)


class TestPermutations:
    """Attention has no notion of position beyond the mask: moving keys or queries moves only them."""

    @PROPERTY
    @given(spec=problems(), data=st.data())
    def test_permuting_keys_and_values_together(self, engine: str, spec: AttentionSpec, data: st.DataObject) -> None:
        """Reordering the key/value rows (and the mask's columns) with one permutation leaves the output."""
        spec = explicit(spec)
        order = np.array(data.draw(st.permutations(range(spec.n_keys))))
        mask = None if spec.mask is None else spec.mask[:, order]
        moved = replace(
            spec,
            inputs=DirectInputs.of(spec.inputs.q, spec.inputs.k[order], spec.inputs.v[order]),
            mask=mask,
            key_tokens=tuple(spec.key_tokens[j] for j in order),
        )
        before, after = compute(spec, engine, device="cpu"), compute(moved, engine, device="cpu")
        np.testing.assert_allclose(after.output, before.output, **EXACT)
        np.testing.assert_allclose(after.weights, before.weights[:, :, order], **EXACT)

    @PROPERTY
    @given(spec=problems(), data=st.data())
    def test_permuting_queries_permutes_the_output(self, engine: str, spec: AttentionSpec, data: st.DataObject) -> None:
        """Reordering the query rows (and the mask's rows) reorders the output's rows the same way."""
        spec = explicit(spec)
        order = np.array(data.draw(st.permutations(range(spec.n_queries))))
        mask = None if spec.mask is None else spec.mask[order]
        moved = replace(
            spec, inputs=spec.inputs.rows(list(order)), mask=mask, tokens=tuple(spec.tokens[i] for i in order)
        )
        before, after = compute(spec, engine, device="cpu"), compute(moved, engine, device="cpu")
        np.testing.assert_allclose(after.output, before.output[order], **EXACT)


class TestOutputs:
    """Each head output is a weighted mean of the visible value rows."""

    @PROPERTY
    @given(spec=problems())
    def test_output_within_the_range_of_the_values(self, engine: str, spec: AttentionSpec) -> None:
        """Every output column lies between the smallest and largest visible value of that column (0 when fully masked)."""
        result = compute(spec, engine, device="cpu")
        values, seen = value_heads(result), visible(spec)
        for h in range(spec.settings.heads):
            for i in range(spec.n_queries):
                out = result.head_outputs[h, i]
                if not seen[i].any():
                    assert np.all(out == 0)
                    continue
                rows = values[h][seen[i]]
                slack = 1e-12 * (1 + np.abs(rows).max())
                assert np.all(out >= rows.min(axis=0) - slack) and np.all(out <= rows.max(axis=0) + slack)

    @PROPERTY
    @given(spec=problems())
    def test_scale_zero_gives_the_mean_of_the_visible_values(self, engine: str, spec: AttentionSpec) -> None:
        """With scale 0 every visible key weighs the same: each head output is the mean of its visible values."""
        result = compute(spec.with_settings(scale=0.0), engine, device="cpu")
        values, seen = value_heads(result), visible(spec)
        counts = np.maximum(seen.sum(axis=1), 1)[None, :, None]
        expected = (seen[None, :, :].astype(float) @ values) / counts  # (H, N, d_k); fully masked rows stay 0
        np.testing.assert_allclose(result.head_outputs, expected, rtol=1e-12, atol=1e-12)


class TestPrecision:
    """float32 results agree with the float64 NumPy reference within the tolerances attnx check uses."""

    @PROPERTY
    @given(spec=problems(magnitude=2.0))
    def test_float32_agrees_with_float64(self, engine: str, spec: AttentionSpec) -> None:
        """Scores, weights, head outputs and output in float32 pass the float32 tolerance against numpy float64."""
        reference = compute(spec, "numpy", dtype="float64")
        single = compute(spec, engine, dtype="float32", device="cpu")
        assert single.weights.dtype == np.float32
        for name in ("scores", "weights", "head_outputs", "output"):
            ref = getattr(reference, name)
            diff = compare(getattr(single, name), ref, default_tolerance("float32", ref))
            assert diff.passed, (name, diff)
