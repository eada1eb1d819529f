"""The trace of a query under a score bias: each key's bias term, and scale · raw + bias giving the scaled score."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.analysis.trace import Trace, build_trace
from attnx.core.spec import AttentionSpec
from attnx.engines import compute


def biased_trace(softcap: float | None = None, query: int = 3, keys: int | None = None) -> tuple[Trace, AttentionSpec]:
    """The trace of query ``query`` of 6 causal tokens, 2 heads, a random bias (and ``softcap``), and its spec."""
    rng = np.random.default_rng(48)
    q, k, v = rng.standard_normal((3, 6, 8))
    tokens = tuple(f"t{i}" for i in range(6))
    spec = AttentionSpec.build(q=q, k=k, v=v, heads=2, tokens=tokens, key_tokens=tokens, causal=True,
                               softcap=softcap, score_bias=rng.standard_normal((2, 6, 6)) * 3)  # fmt: skip
    return build_trace(compute(spec.select_queries([query])), keys=keys), spec


class TestBiasTerms:
    """Each key line carries its bias, and the numbers add up to the scaled score shown."""

    def test_terms_add_up_to_scaled(self) -> None:
        """scale · raw + bias is the scaled score of every key, masked ones too, and bias is the spec's entry."""
        trace, spec = biased_trace()
        for head in trace.heads:
            for line in head.keys:
                assert line.bias == spec.score_bias[head.head, 3, line.index]
                assert line.unbent(trace.scale) == pytest.approx(line.scaled, rel=1e-13, abs=1e-13)
                assert trace.scale * line.raw + line.bias == pytest.approx(line.scaled, rel=1e-13, abs=1e-13)

    def test_softcap_bends_the_sum(self) -> None:
        """With a cap, the scaled score is C·tanh((scale · raw + bias) / C)."""
        trace, _ = biased_trace(softcap=2.0)
        lines = [line for head in trace.heads for line in head.keys]
        assert any(abs(line.unbent(trace.scale)) > 2.0 for line in lines)  # the cap bends some of them
        for line in lines:
            assert 2.0 * np.tanh(line.unbent(trace.scale) / 2.0) == pytest.approx(line.scaled, rel=1e-13, abs=1e-13)

    def test_weights_are_the_softmax_of_the_biased_scores(self) -> None:
        """The weights of the visible keys are exp(scaled − max) / Σe, with the bias inside scaled."""
        trace, _ = biased_trace()
        for head in trace.heads:
            visible = [line for line in head.keys if not line.masked]
            assert [line.index for line in visible] == [0, 1, 2, 3]
            for line in visible:
                assert line.weight == pytest.approx(np.exp(line.scaled - head.exp_max) / head.exp_sum, rel=1e-12)

    def test_no_bias_means_none(self) -> None:
        """Without a bias every line's bias is None and unbent is scale · raw."""
        rng = np.random.default_rng(1)
        q, k, v = rng.standard_normal((3, 4, 4))
        tokens = tuple("abcd")
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=2, tokens=tokens, key_tokens=tokens)
        trace = build_trace(compute(spec.select_queries([1])))
        line = trace.heads[0].keys[2]
        assert line.bias is None and line.unbent(trace.scale) == trace.scale * line.raw == line.scaled
