"""Head statistics: labels, per-query numbers, induction targets, counts, sinks and the shared pattern pick."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from attnx.analysis.heads import (
    LABELS,
    THRESHOLDS,
    earlier_copies,
    entropy,
    head_stats,
    normalized_entropy,
    pick_label,
    query_scores,
    saturation,
    target_keys,
)
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.io import load_spec
from tests.specs import spec_of

TOKENS = ("a", "b", "c", "a", "b", "c")
N = len(TOKENS)
SHARP = 3.0  # one-hot q and k scaled by 3: a match scores 9 / √6, every other key 0
MATCH = 9 / math.sqrt(N)
# The weight on the matched key when all N keys are visible: e^s / (e^s + N − 1).
P = math.exp(MATCH) / (math.exp(MATCH) + N - 1)

# For each pattern, the key each query's q is built to match (None: q = 0, no preference).
PATTERNS = {
    "self": [0, 1, 2, 3, 4, 5],
    "previous-token": [None, 0, 1, 2, 3, 4],
    "sink": [0, 0, 0, 0, 0, 0],
    "uniform": [None] * N,
    "induction": [None, None, None, 1, 2, 3],  # "a b c a b c": the second a looks at the first b, ...
    "focused": [2, 3, 4, 5, 0, 1],  # one key per query, but none of the positional rules
}


def pattern_spec(*patterns: str, causal: bool = False) -> AttentionSpec:
    """One head of d_k = N per pattern; keys are SHARP times the identity, values the identity."""
    eye = np.eye(N)
    q = np.concatenate(
        [np.array([SHARP * eye[t] if t is not None else np.zeros(N) for t in PATTERNS[name]]) for name in patterns],
        axis=1,
    )
    k = np.concatenate([SHARP * eye] * len(patterns), axis=1)
    v = np.concatenate([eye] * len(patterns), axis=1)
    return spec_of(q, k, v, len(patterns), TOKENS, TOKENS, causal=causal)


class TestLabels:
    @pytest.mark.parametrize("pattern", ["self", "previous-token", "sink", "induction", "focused"])
    def test_built_heads_get_their_label_and_score(self, pattern: str) -> None:
        """A head built to match one key per query is labelled so, scoring the weight e^s/(e^s + 5) it puts there."""
        (stats,) = head_stats(compute(pattern_spec(pattern)))
        assert stats.label == pattern
        assert stats.label_score == pytest.approx(P, abs=1e-12)
        assert stats.scores[pattern] == pytest.approx(P, abs=1e-12)

    def test_uniform_head_scores_exactly_one(self) -> None:
        """q = 0 spreads every query evenly: normalised entropy 1, effective keys 6, max weight 1/6."""
        (stats,) = head_stats(compute(pattern_spec("uniform")))
        assert (stats.label, stats.label_score) == ("uniform", pytest.approx(1.0, abs=1e-12))
        np.testing.assert_allclose(stats.normalized_entropy, 1.0, atol=1e-12)
        np.testing.assert_allclose(stats.effective_keys, 6.0, atol=1e-12)
        np.testing.assert_allclose(stats.max_weight, 1 / 6, atol=1e-15)

    def test_uniform_head_ties_every_visible_key(self) -> None:
        """q = 0 under a causal mask: query i ties its i + 1 visible keys, the first of them key 0."""
        (stats,) = head_stats(compute(pattern_spec("uniform", causal=True)))
        assert stats.top_ties.tolist() == [1, 2, 3, 4, 5, 6]
        assert stats.top_key.tolist() == [0] * 6

    def test_other_scores_of_a_self_head(self) -> None:
        """A self head leaves (1 − p)/5 on each other key: that is its previous-token and sink score."""
        (stats,) = head_stats(compute(pattern_spec("self")))
        rest = (1 - P) / (N - 1)
        assert stats.scores["previous-token"] == pytest.approx(rest, abs=1e-12)
        # query 0 puts p on key 0 (its own position), the other five queries (1 − p)/5
        assert stats.scores["sink"] == pytest.approx((P + 5 * rest) / 6, abs=1e-12)
        assert stats.scores["induction"] == pytest.approx(rest, abs=1e-12)

    def test_induction_score_counts_only_repeated_tokens(self) -> None:
        """Queries 0-2 (first occurrences, q = 0) leave the induction score at p, but lower the self score."""
        (stats,) = head_stats(compute(pattern_spec("induction")))
        assert stats.scores["induction"] == pytest.approx(P, abs=1e-12)
        assert stats.scores["self"] == pytest.approx((3 / 6 + 3 * (1 - P) / 5) / 6, abs=1e-12)

    def test_five_heads_at_once_keep_their_order(self) -> None:
        """Heads are labelled independently, in order, 0-based."""
        names = ("self", "previous-token", "sink", "uniform", "induction")
        stats = head_stats(compute(pattern_spec(*names)))
        assert [s.head for s in stats] == [0, 1, 2, 3, 4]
        assert [s.label for s in stats] == list(names)

    def test_no_label_when_nothing_passes(self) -> None:
        """Head 1 of the worked example is spread but not evenly (0.9468 < 0.95): no label."""
        stats = head_stats(compute(load_spec()))
        assert stats[0].label is None and stats[0].label_score is None
        assert stats[0].scores["uniform"] == pytest.approx(0.946780360115467, abs=1e-12)
        assert stats[1].label == "uniform"


class TestPerQuery:
    def test_entropy_of_a_self_head(self) -> None:
        """Entropy −Σ w log w, its exp and its ratio to log 6 match the weights [p, q, q, q, q, q]."""
        (stats,) = head_stats(compute(pattern_spec("self")))
        q = (1 - P) / (N - 1)
        entropy = -(P * math.log(P) + (N - 1) * q * math.log(q))
        np.testing.assert_allclose(stats.entropy, entropy, rtol=1e-12)
        np.testing.assert_allclose(stats.effective_keys, math.exp(entropy), rtol=1e-12)
        np.testing.assert_allclose(stats.normalized_entropy, entropy / math.log(N), rtol=1e-12)
        np.testing.assert_array_equal(stats.top_key, np.arange(N))
        np.testing.assert_allclose(stats.max_weight, P, rtol=1e-12)

    def test_causal_mask_counts_visible_keys(self) -> None:
        """Under a causal mask query i sees i + 1 keys: uniform over them, entropy log(i + 1)."""
        (stats,) = head_stats(compute(pattern_spec("uniform", causal=True)))
        np.testing.assert_array_equal(stats.visible_keys, np.arange(1, N + 1))
        np.testing.assert_allclose(stats.entropy, np.log(np.arange(1, N + 1)), atol=1e-12)
        np.testing.assert_allclose(stats.effective_keys, np.arange(1, N + 1), rtol=1e-12)
        assert math.isnan(stats.normalized_entropy[0])  # one visible key: log 1 = 0, undefined
        np.testing.assert_allclose(stats.normalized_entropy[1:], 1.0, atol=1e-12)
        assert stats.label == "uniform"

    def test_causal_patterns_keep_their_labels(self) -> None:
        """The same five heads under a causal mask: every target is visible, so the labels stand."""
        names = ("self", "previous-token", "sink", "uniform", "induction")
        stats = head_stats(compute(pattern_spec(*names, causal=True)))
        assert [s.label for s in stats] == list(names)

    def test_fully_masked_row_has_no_entropy(self) -> None:
        """A query with every key blocked has NaN entropy, max weight 0 and no top key."""
        base = pattern_spec("uniform")
        mask = np.ones((N, N), dtype=bool)
        mask[2] = False
        (stats,) = head_stats(
            compute(spec_of(base.inputs.q, base.inputs.k, base.inputs.v, 1, TOKENS, TOKENS, mask=mask))
        )
        assert math.isnan(stats.entropy[2]) and stats.max_weight[2] == 0 and stats.top_key[2] == -1
        assert stats.visible_keys[2] == 0


class TestInductionTargets:
    @pytest.mark.parametrize(
        ("tokens", "targets"),
        [
            ("a b c a b c", [-1, -1, -1, 1, 2, 3]),
            ("a a a", [-1, 1, 2]),
            ("a b a c a", [-1, -1, 1, -1, 3]),  # the latest earlier occurrence counts
            ("x y z", [-1, -1, -1]),
        ],
    )
    def test_targets(self, tokens: str, targets: list[int]) -> None:
        """The key after the latest earlier occurrence of the query's token, or -1."""
        words = tokens.split()
        assert target_keys(words, words, range(len(words)))["induction"].tolist() == targets


class TestCounts:
    def test_every_score_says_how_many_queries_it_averages(self) -> None:
        """All six queries see six keys; query 0 has no previous token and only the repeat a b c has an induction
        target, so those scores rest on 5 and 3 queries."""
        (stats,) = head_stats(compute(pattern_spec("induction")))
        assert dict(stats.counts) == {"self": 6, "previous-token": 5, "sink": 6, "induction": 3, "uniform": 6,
                                      "focused": 6}  # fmt: skip
        assert (stats.label, stats.label_count) == ("induction", 3)

    def test_a_causal_query_0_has_no_choice(self) -> None:
        """Under a causal mask query 0 sees key 0 alone: it is left out of every score, sink included."""
        stats = head_stats(compute(pattern_spec("sink", "uniform", causal=True)))
        assert dict(stats[0].counts) == {"self": 5, "previous-token": 5, "sink": 5, "induction": 3, "uniform": 5,
                                         "focused": 5}  # fmt: skip
        assert (stats[0].label, stats[0].label_count) == ("sink", 5)
        # the sink head's queries 1..5 see 2..6 keys and put e^s / (e^s + i) on key 0
        sharp = [math.exp(MATCH) / (math.exp(MATCH) + i) for i in range(1, 6)]
        assert stats[0].scores["sink"] == pytest.approx(sum(sharp) / 5, abs=1e-12)

    def test_no_label_no_count(self) -> None:
        """Head 0 of the worked example has no label, so no count behind one; its scores still have theirs."""
        stats = head_stats(compute(load_spec()))
        assert stats[0].label_count is None and stats[0].counts["uniform"] == 5

    def test_unscored_measure_counts_zero(self) -> None:
        """Without a repeated token the induction score is None and rests on no query."""
        spec = pattern_spec("self")
        tokens = tuple("uvwxyz")
        result = compute(spec_of(spec.inputs.q, spec.inputs.k, spec.inputs.v, 1, tokens, tokens))
        (stats,) = head_stats(result)
        assert stats.scores["induction"] is None and stats.counts["induction"] == 0


class TestSinks:
    def test_special_keys_count_as_sinks(self) -> None:
        """With key 5 a sink too, a self head's sink score adds query 5's weight p on its own key."""
        rest = (1 - P) / (N - 1)
        (alone,) = head_stats(compute(pattern_spec("self")))
        (both,) = head_stats(compute(pattern_spec("self")), sinks=(0, 5))
        assert alone.scores["sink"] == pytest.approx((P + 5 * rest) / 6, abs=1e-12)
        assert both.scores["sink"] == pytest.approx((2 * P + 10 * rest) / 6, abs=1e-12)
        assert both.label == "self"

    def test_sinks_past_the_keys_are_ignored(self) -> None:
        """A sink key beyond the last key (or repeated) adds nothing."""
        (stats,) = head_stats(compute(pattern_spec("sink")), sinks=(0, 0, 9))
        assert stats.scores["sink"] == pytest.approx(P, abs=1e-12)


class TestShared:
    def test_entropy_in_nats_with_zero_weights(self) -> None:
        """−Σ w log w over the last axis, 0 log 0 = 0: [0.5, 0.5, 0] has log 2, [1, 0, 0] none."""
        nats = entropy(np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]))
        np.testing.assert_allclose(nats, [math.log(2), 0.0], atol=1e-15)

    def test_normalized_entropy_needs_two_keys(self) -> None:
        """Entropy ÷ log(visible keys): log 2 over 2 keys is 1, over 4 keys 0.5; one key is NaN."""
        found = normalized_entropy(np.array([math.log(2), math.log(2), 0.0]), np.array([2, 4, 1]))
        np.testing.assert_allclose(found[:2], [1.0, 0.5], rtol=1e-15)
        assert math.isnan(found[2])

    def test_earlier_copies_of_ids_and_strings(self) -> None:
        """Ids and strings find the same latest earlier copy."""
        ids = [5, 6, 5, 5, 6]
        words = ["x", "y", "x", "x", "y"]
        assert earlier_copies(ids, ids, range(5)).tolist() == [-1, -1, 0, 2, 1]
        assert earlier_copies(words, words, range(5)).tolist() == [-1, -1, 0, 2, 1]

    def test_targets_of_queries_at_later_positions(self) -> None:
        """Two queries at positions 4 and 2 over five keys (rows of a longer input): each looks only before itself."""
        keys = ["a", "b", "a", "c", "a"]
        targets = target_keys(["a", "a"], keys, [4, 2])
        assert targets["self"].tolist() == [4, 2]
        assert targets["previous-token"].tolist() == [3, 1]
        assert targets["duplicate-token"].tolist() == [2, 0]
        assert targets["induction"].tolist() == [3, 1]

    def test_an_induction_target_past_the_last_key_is_none(self) -> None:
        """A query whose earlier copy is the last key has no key after it to score."""
        assert target_keys(["a"], ["b", "a"], [2])["induction"].tolist() == [-1]

    def test_query_scores_rows_and_values(self) -> None:
        """Each measure names the queries it scores and the value at each: the induction head's 3 repeat queries
        carry p, the entropy is scored at all six."""
        scored = query_scores(compute(pattern_spec("induction")), ("induction", "entropy")).scored
        assert scored["induction"].rows.tolist() == [3, 4, 5] and scored["induction"].count == 3
        np.testing.assert_allclose(scored["induction"].values, [[P, P, P]], rtol=1e-12)
        assert scored["entropy"].rows.tolist() == list(range(6))

    def test_unknown_measure_is_refused(self) -> None:
        """A measure not scored from the weights (write) is a ValueError naming those that are."""
        with pytest.raises(ValueError, match="'write' is not a measure scored here: self, previous-token"):
            query_scores(compute(pattern_spec("self")), ("write",))


class TestPickLabel:
    def test_positional_beats_focused(self) -> None:
        """A sharp self head is also focused; the positional label wins."""
        assert pick_label({"self": 0.9, "focused": 0.95}) == ("self", 0.9)

    def test_best_positional_score_wins(self) -> None:
        """Between two passing positional labels the higher score wins."""
        assert pick_label({"self": 0.55, "previous-token": 0.6}) == ("previous-token", 0.6)

    def test_uniform_before_focused_and_none(self) -> None:
        """Without a positional label: uniform, then focused, else nothing."""
        assert pick_label({"self": 0.2, "uniform": 0.97, "focused": 0.1}) == ("uniform", 0.97)
        assert pick_label({"self": 0.2, "uniform": 0.5, "focused": 0.85}) == ("focused", 0.85)
        assert pick_label({"self": 0.2, "uniform": 0.5, "focused": 0.5, "induction": None}) == (None, None)

    def test_thresholds_are_one_read_only_mapping(self) -> None:
        """Every label has one threshold, and the mapping cannot be changed at run time."""
        assert set(THRESHOLDS) == set(LABELS)
        with pytest.raises(TypeError):
            THRESHOLDS["self"] = 0.1  # type: ignore[index]

    def test_docs_state_every_threshold(self) -> None:
        """The command reference's label table states each threshold as the code has it."""
        readme = (Path(__file__).parents[2] / "docs" / "commands.md").read_text("utf-8")
        for name, value in THRESHOLDS.items():
            assert re.search(rf"\| `{re.escape(name)}` \|[^\n]*\| ≥ {value:g} \|", readme), name


class TestSaturation:
    def test_unscaled_scores_saturate_the_softmax(self) -> None:
        """Seed 004's demo: one query, ten keys, d_k = 512; unscaled, the std is large and the max weight ≈ 1."""
        rng = np.random.default_rng(42)
        q, k = rng.standard_normal((1, 512)), rng.standard_normal((10, 512))
        keys = tuple(f"k{j}" for j in range(10))
        for scale, multiplier in (("none", 1.0), ("sqrt_dk", 1 / math.sqrt(512))):
            spec = spec_of(q, k, k, 1, ("q",), keys, scale=scale)
            scaled = (q @ k.T)[0] * multiplier
            weights = np.exp(scaled - scaled.max()) / np.exp(scaled - scaled.max()).sum()
            found = saturation(compute(spec))
            assert found.scaled_std[0] == pytest.approx(scaled.std(), rel=1e-12)
            assert found.mean_max_weight[0] == pytest.approx(weights.max(), rel=1e-12)
        unscaled = saturation(compute(spec_of(q, k, k, 1, ("q",), keys, scale="none")))
        scaled = saturation(compute(spec_of(q, k, k, 1, ("q",), keys)))
        assert unscaled.scaled_std[0] > 10 and unscaled.mean_max_weight[0] > 0.999  # saturated: one-hot
        assert scaled.scaled_std[0] < 1 and scaled.mean_max_weight[0] < 0.3  # spread over the ten keys

    def test_std_uses_allowed_entries_only(self) -> None:
        """Under a causal mask the std is over the lower triangle of the scaled scores."""
        rng = np.random.default_rng(1)
        q, k = rng.standard_normal((2, 4, 2))
        result = compute(spec_of(q, k, k, 1, tuple("abcd"), tuple("abcd"), causal=True))
        lower = np.tril(np.ones((4, 4), dtype=bool))
        expected = ((q @ k.T) / math.sqrt(2))[lower].std()
        assert saturation(result).scaled_std[0] == pytest.approx(expected, rel=1e-12)
