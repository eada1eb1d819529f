"""compute is the one checked entry: it refuses, before anything is allocated, what it would build over the caps."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

from attnx.core.rows import Rows
from attnx.core.spec import AttentionSpec, Linear
from attnx.engines import check_caps, compute
from attnx.engines.numpy_engine import NumpyEngine
from attnx.errors import LimitError
from attnx.limits import Limits
from tests.specs import spec_of

TOKENS = tuple("abcdefghijklmnop")  # 16 tokens, as `--tokens "a b c ... p"`
CAP = Limits(max_elements=200)
HINT = "raise it with --max-elements or ATTNX_MAX_ELEMENTS"


def scores_refusal(rows: int, elements: int) -> str:
    """The one line LimitError says for 2 heads' scores over ``rows`` of the 16 queries under a cap of 200."""
    return (
        f"in.yaml: the scores: an array of 2 × {rows} × 16 ({elements} elements) exceeds the element cap of "
        f"200 elements per array; {HINT}"
    )


@pytest.fixture
def problem() -> AttentionSpec:
    """2 heads over 16 tokens, d_model 4: Q, K and V hold 64 elements each, the scores 2 × 16 × 16 = 512."""
    q, k, v = np.random.default_rng(0).standard_normal((3, 16, 4))
    return spec_of(q, k, v, 2, TOKENS, TOKENS, "in.yaml")


@pytest.fixture(autouse=True)
def no_caps_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caps these tests mean, whatever ATTNX_MAX_* the shell that runs them sets."""
    for name in ("BYTES", "YAML_BYTES", "DEPTH", "DIMENSION", "ELEMENTS"):
        monkeypatch.delenv(f"ATTNX_MAX_{name}", raising=False)


class TestMatrices:
    """With a [head, query, key] matrix in needs, the matrices count against the element cap."""

    def test_weights_over_the_cap_are_refused(self, problem: AttentionSpec, engine: str) -> None:
        """The 2 × 16 × 16 scores (512 elements) are refused under a cap of 200, on every engine, in one line."""
        with pytest.raises(LimitError) as info:
            compute(problem, engine, needs={"weights"}, limits=CAP)
        assert str(info.value) == scores_refusal(16, 512)

    def test_needs_none_means_every_matrix(self, problem: AttentionSpec) -> None:
        """needs None asks for every array, the matrices among them: refused as weights alone are."""
        with pytest.raises(LimitError) as info:
            compute(problem, limits=CAP)
        assert str(info.value) == scores_refusal(16, 512)

    def test_the_cap_itself_is_allowed(self, problem: AttentionSpec) -> None:
        """A cap of exactly 512 elements lets the 512 scores through, with every weight computed."""
        result = compute(problem, limits=Limits(max_elements=512))
        assert result.weights is not None and result.weights.shape == (2, 16, 16)
        np.testing.assert_allclose(result.weights.sum(axis=-1), np.ones((2, 16)), rtol=1e-12)

    def test_refused_before_the_engine_runs(self, problem: AttentionSpec, monkeypatch: pytest.MonkeyPatch) -> None:
        """The refusal comes before the engine is asked for anything: its attend is never called."""
        calls: list[str] = []
        monkeypatch.setattr(NumpyEngine, "attend", lambda *args: calls.append("attend"))
        with pytest.raises(LimitError):
            compute(problem, "numpy", limits=CAP)
        assert calls == []

    def test_refusal_allocates_nothing_large(self) -> None:
        """8 heads over 4096 tokens (1 GiB of float64 scores) are refused with under 64 KiB allocated on the way."""
        q = np.zeros((4096, 64))
        tokens = tuple(map(str, range(4096)))
        spec = spec_of(q, q, q, 8, tokens, tokens, "big.npz")
        tracemalloc.start()
        try:
            with pytest.raises(LimitError, match=r"^big\.npz: the scores: an array of 8 × 4096 × 4096 "):
                compute(spec, limits=Limits())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 * 1024


class TestBlockedPath:
    """Without a matrix in needs the engines work in blocks: only Q, K and V count."""

    def test_output_only_is_accepted(self, problem: AttentionSpec, engine: str) -> None:
        """needs={"output"} under the cap of 200: the output is the uncapped one's, to the bit, and no matrix is built."""
        capped = compute(problem, engine, needs={"output"}, limits=CAP)
        np.testing.assert_array_equal(capped.output, compute(problem, engine, needs={"output"}).output)
        np.testing.assert_allclose(capped.output, compute(problem).output, rtol=1e-12, atol=1e-15)
        assert capped.output.shape == (16, 4)
        assert (capped.scores, capped.scaled, capped.weights) == (None, None, None)

    def test_projected_q_over_the_cap(self) -> None:
        """Q after projection counts, not X: X of 16 × 2 (32 elements) projected to 16 × 16 (256) is refused."""
        x = np.ones((16, 2))
        w = Linear.of(np.ones((2, 16)))
        spec = AttentionSpec.build(x=x, w_q=w, w_k=w, w_v=w, heads=2, tokens=TOKENS, key_tokens=TOKENS,
                                   source="in.yaml")  # fmt: skip
        with pytest.raises(LimitError) as info:
            compute(spec, needs={"output"}, limits=CAP)
        assert str(info.value) == (
            f"in.yaml: Q: an array of 16 × 16 (256 elements) exceeds the element cap of 200 elements per array; {HINT}"
        )


class TestRows:
    """With rows that leave some out, the matrices count only for the rows shown."""

    def test_six_shown_rows_fit(self, problem: AttentionSpec) -> None:
        """6 of 16 rows shown: 2 × 6 × 16 = 192 elements fit a cap of 200, and they equal the whole weights' rows."""
        rows = Rows.ends(16, 6)
        result = compute(problem, rows=rows, limits=CAP)
        assert rows.shown == (0, 1, 2, 13, 14, 15) and result.matrix_rows == rows.shown
        assert result.weights is not None and result.weights.shape == (2, 6, 16)
        whole = compute(problem).weights
        assert whole is not None  # computed without caps: every matrix is there
        np.testing.assert_allclose(result.weights, whole[:, list(rows.shown)], rtol=1e-12, atol=0)

    def test_seven_shown_rows_do_not(self, problem: AttentionSpec) -> None:
        """7 of 16 rows shown: 2 × 7 × 16 = 224 elements are over the cap of 200."""
        with pytest.raises(LimitError) as info:
            compute(problem, rows=Rows.ends(16, 7), limits=CAP)
        assert str(info.value) == scores_refusal(7, 224)

    def test_every_row_shown_counts_every_row(self, problem: AttentionSpec) -> None:
        """Rows that leave none out count all 16 rows."""
        with pytest.raises(LimitError) as info:
            compute(problem, rows=Rows.ends(16, None), limits=CAP)
        assert str(info.value) == scores_refusal(16, 512)

    def test_rows_without_matrices(self, problem: AttentionSpec) -> None:
        """Rows with needs={"output"}: nothing is built per row, so 16 rows of output pass the cap of 200."""
        result = compute(problem, needs={"output"}, rows=Rows.ends(16, 6), limits=CAP)
        assert result.output.shape == (16, 4) and result.weights is None


class TestSpecCaps:
    """limits None means the caps the spec was read under (``spec.limits``), when it carries them."""

    def test_the_spec_caps_compute(self, problem: AttentionSpec) -> None:
        """A spec read under a cap of 200 is refused its 512 scores with no limits given to compute."""
        with pytest.raises(LimitError) as info:
            compute(replace(problem, limits=CAP))
        assert str(info.value) == scores_refusal(16, 512)

    def test_changed_settings_keep_the_caps(self, problem: AttentionSpec) -> None:
        """A sweep's variant (heads 1, then rows selected) keeps its input's caps: 1 × 16 × 16 = 256 is refused."""
        variant = replace(problem, limits=CAP).with_heads(1)
        with pytest.raises(LimitError, match=r"^in\.yaml: the scores: an array of 1 × 16 × 16 \(256 elements\)"):
            compute(variant)
        with pytest.raises(LimitError, match=r"^in\.yaml: the scores: an array of 1 × 13 × 16 \(208 elements\)"):
            compute(variant, rows=Rows.ends(16, 13))
        assert compute(variant, rows=Rows.ends(16, 12)).matrix_rows == (*range(6), *range(10, 16))

    def test_given_limits_beat_the_spec_caps(self, problem: AttentionSpec) -> None:
        """Limits passed to compute replace the spec's: the default cap lets the 512 scores through."""
        result = compute(replace(problem, limits=CAP), limits=Limits())
        assert result.weights is not None and result.weights.shape == (2, 16, 16)

    def test_the_spec_caps_beat_the_variable(self, problem: AttentionSpec, monkeypatch: pytest.MonkeyPatch) -> None:
        """A spec read under the default caps keeps them when ATTNX_MAX_ELEMENTS=200 is set afterwards."""
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "200")
        result = compute(replace(problem, limits=Limits()))
        assert result.weights is not None and result.weights.shape == (2, 16, 16)


class TestEnvironment:
    """limits None, on a spec that carries no caps, means the defaults replaced by ATTNX_MAX_* variables."""

    def test_variable_caps_compute(self, problem: AttentionSpec, monkeypatch: pytest.MonkeyPatch) -> None:
        """ATTNX_MAX_ELEMENTS=200 refuses the 512 scores when compute is given no limits."""
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "200")
        with pytest.raises(LimitError) as info:
            compute(problem)
        assert str(info.value) == scores_refusal(16, 512)

    def test_variable_leaves_the_blocked_path(self, problem: AttentionSpec, monkeypatch: pytest.MonkeyPatch) -> None:
        """ATTNX_MAX_ELEMENTS=200 lets the output-only path through: Q, K and V hold 64 elements each."""
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "200")
        assert compute(problem, needs={"output"}).output.shape == (16, 4)

    def test_given_limits_beat_the_variable(self, problem: AttentionSpec, monkeypatch: pytest.MonkeyPatch) -> None:
        """Limits passed to compute replace the variable's: the default cap lets the 512 scores through."""
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "200")
        result = compute(problem, limits=Limits())
        assert result.weights is not None and result.weights.shape == (2, 16, 16)

    def test_no_variable_means_the_defaults(self, problem: AttentionSpec) -> None:
        """Without ATTNX_MAX_*, the default cap of 16 Mi elements holds the 512 scores."""
        result = compute(problem)
        assert result.scores is not None and result.scores.shape == (2, 16, 16)


class TestCheckCaps:
    """check_caps is the check compute makes first, for callers that refuse before slow work."""

    def test_same_refusal_as_compute(self, problem: AttentionSpec) -> None:
        """check_caps refuses the 512 scores with the line compute gives, and passes what compute accepts."""
        with pytest.raises(LimitError) as info:
            check_caps(problem, limits=CAP)
        assert str(info.value) == scores_refusal(16, 512)
        assert check_caps(problem, needs={"output"}, limits=CAP) is None
        assert check_caps(problem, rows=Rows.ends(16, 6), limits=CAP) is None

    def test_mask_alone_is_no_matrix(self, problem: AttentionSpec) -> None:
        """needs={"mask", "output"} holds no [head, query, key] matrix: nothing is refused under a cap of 200."""
        assert check_caps(problem, needs={"mask", "output"}, limits=CAP) is None


class TestBench:
    """attnx bench times compute, so its runs are checked too, every size before any is timed."""

    def test_weights_path_refused_before_timing(self) -> None:
        """Lengths 8 then 16 on the weights path under a cap of 200: N=16 is refused before N=8 is run at all."""
        from attnx.analysis.bench import BenchSettings, run_bench

        told: list[str] = []
        settings = BenchSettings([8, 16], heads=2, d_model=4, path="weights", repeat=1)
        with pytest.raises(LimitError) as info:
            run_bench(settings, told.append, limits=CAP)
        assert str(info.value) == (
            f"random N=16: the scores: an array of 2 × 16 × 16 (512 elements) exceeds the element cap of 200 elements "
            f"per array; {HINT}"
        )
        assert told == []

    def test_output_path_runs_under_the_same_cap(self) -> None:
        """The output path builds no matrix: lengths 8 and 16 run under a cap of 200, one row per length."""
        from attnx.analysis.bench import BenchSettings, run_bench

        settings = BenchSettings([8, 16], heads=2, d_model=4, engines=("numpy",), path="output", repeat=1)
        rows = run_bench(settings, limits=CAP)
        assert [(row.engine, row.length) for row in rows] == [("numpy", 8), ("numpy", 16)]
