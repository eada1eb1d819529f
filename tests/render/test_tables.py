"""The run command's tables: tied maxima, masked cells, per-head numbers, slices and the summary line."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import numpy as np
from rich.console import Console

from attnx.analysis.ablation import ablation
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.io import load_spec
from attnx.render.numbers import MASKED, MASKED_NOTE
from attnx.render.tables import (
    DEFAULT_SECTIONS,
    Section,
    ablation_table,
    head_title,
    matrix_table,
    run_view,
    summary_line,
)
from tests.conftest import TOKENS
from tests.specs import loaded

CONFIGS = Path(__file__).parents[2] / "configs"
TOP = "\x1b[1;33m"  # bold yellow: a row's maximum
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(renderable: object, width: int = 100) -> str:
    """What a console ``width`` characters wide prints, without colour."""
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


def styled_lines(renderable: object, width: int = 100) -> list[str]:
    """The lines a colour console prints, with their ANSI styles."""
    console = Console(file=io.StringIO(), width=width, color_system="standard", force_terminal=True)
    console.print(renderable)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined, no-any-return]


def highlighted(lines: list[str]) -> dict[str, int]:
    """Per row label, how many cells are highlighted as the row's maximum (the last row of a label wins)."""
    counts = {}
    for line in lines:
        words = ANSI.sub("", line).split()
        if words:
            counts[words[0]] = line.count(TOP)
    return counts


def worked(**overrides: object) -> AttentionResult:
    """The worked example, computed whole."""
    return compute(loaded(**overrides))


class TestTiedMaxima:
    """Every cell that ties its row's maximum is highlighted, not only the first."""

    def test_uniform_row_highlights_all_five(self) -> None:
        """Head 0's weights: "on" (five × 0.2000) highlights five cells, "sat" one, "The" three."""
        result = worked()
        lines = styled_lines(matrix_table("w", result.weights[0], TOKENS, TOKENS, 4, emphasise_row_max=True))
        assert highlighted(lines[3:]) == {"The": 3, "cat": 2, "sat": 1, "on": 5, "mat": 3}

    def test_average_weights_tie_too(self) -> None:
        """The averaged weights of "mat": 0.1974, 0.1923, 0.1923, 0.1974, 0.2206: one maximum."""
        lines = styled_lines(run_view(worked(), [Section.average], 4))
        assert highlighted(lines)["mat"] == 1
        assert f"{TOP}0.2206" in next(line for line in lines if ANSI.sub("", line).startswith("mat "))

    def test_no_highlight_without_emphasis(self) -> None:
        """Scores are never highlighted."""
        lines = styled_lines(matrix_table("s", worked().scores[0], TOKENS, TOKENS, 4))
        assert not any(TOP in line for line in lines)


class TestMaskedCells:
    """A masked pair looks the same in every table: weights show the marker, scores their number."""

    def test_causal_weights_scores_and_average(self) -> None:
        """Causal: "cat" shows · for sat, on, mat in weights and in the average, and its raw scores as numbers."""
        text = plain(run_view(worked(causal=True), [Section.scores, Section.weights, Section.average], 4))
        rows = [line.split() for line in text.splitlines() if line.startswith("cat ")]
        scores, weights, _, _, average = rows  # head 0 scores, weights; head 1 scores, weights; the average
        assert scores == ["cat", "2.0000", "0.0000", "2.0000", "0.0000", "0.0000"]
        assert weights == ["cat", "0.8044", "0.1956", MASKED, MASKED, MASKED]
        assert average[3:] == [MASKED] * 3

    def test_summary_says_how_masked_cells_look(self) -> None:
        """With a mask the summary counts the blocked pairs and says what · means; without, it says nothing."""
        text = plain(summary_line(worked(causal=True), "x"))
        assert "mask: 10 of 25 query-key pairs blocked (·)" in text and MASKED_NOTE in " ".join(text.split())
        assert MASKED_NOTE not in plain(summary_line(worked(), "x"))


class TestHeadNumbers:
    """Heads are counted from 0 in titles and ablation lines."""

    def test_titles(self) -> None:
        """The worked example's heads are Head 0 and Head 1; GQA names the K/V head and its group."""
        result = worked()
        assert head_title(result, 0) == "Head 0 · columns 0-1 · d_k = 2"
        assert head_title(result, 1) == "Head 1 · columns 2-3 · d_k = 2"
        gqa = compute(load_spec(str(CONFIGS / "gqa.yaml")))
        assert head_title(gqa, 3) == "Head 3 · columns 6-7 · d_k = 2 · K/V head 1 (shared by heads 2-3)"

    def test_dropped_head(self) -> None:
        """Dropping head 1 titles it DROPPED and the ablation table names head 1."""
        spec = load_spec().with_settings(dropped_heads=(1,))
        result = compute(spec)
        assert head_title(result, 1).endswith(" · DROPPED") and "DROPPED" not in head_title(result, 0)
        shift = ablation(result)
        assert shift is not None
        assert plain(ablation_table(shift, TOKENS, 4)).startswith("Ablation · head 1 dropped")


class TestSlices:
    """`--show q,k,v`: each head's slices of Q, K and V, as the engine used them."""

    def test_worked_example_head_1(self) -> None:
        """Head 1 reads columns 2-3: Q_h of "cat" is [0, 1], K_h of "on" [1, 1], V_h of "mat" [0.5, 0.5]."""
        text = plain(run_view(worked(), [Section.q, Section.k, Section.v], 4))
        head_1 = text[text.index("Head 1 ·") :]
        assert "Q_h (columns 2-3 of Q)" in head_1 and "K_h (columns 2-3 of K)" in head_1
        rows = [line.split() for line in head_1.splitlines()]
        assert ["cat", "0.0000", "1.0000"] in rows[:10]
        assert ["on", "1.0000", "1.0000"] in rows[10:20] and ["mat", "0.5000", "0.5000"] in rows[20:]

    def test_grouped_heads_show_k_and_v_once(self) -> None:
        """gqa.yaml: K and V of K/V head 1 appear under head 2; head 3 points there."""
        text = plain(run_view(compute(load_spec(str(CONFIGS / "gqa.yaml"))), [Section.k, Section.v], 4))
        assert text.count("K_h of K/V head 1 (columns 2-3 of K)") == 1
        assert text.count("V_h of K/V head 0 (columns 0-1 of V)") == 1
        assert "K_h, V_h: those of K/V head 1, shown under head 2" in text
        head_2 = text[text.index("Head 2 ·") : text.index("Head 3 ·")]
        assert "K_h of K/V head 1" in head_2

    def test_not_shown_by_default(self) -> None:
        """The default sections leave the slices out."""
        assert not {Section.q, Section.k, Section.v} & set(DEFAULT_SECTIONS)
        assert "Q_h" not in plain(run_view(worked(), DEFAULT_SECTIONS, 4))


class TestSummaryLine:
    def test_pooled_kv_heads(self) -> None:
        """A result whose K/V heads were mean-pooled from 4 to 2 says so; from 4 to 1 is MQA."""
        gqa = compute(load_spec(str(CONFIGS / "gqa.yaml")))
        text = plain(summary_line(dataclasses.replace(gqa, kv_pooled_from=4), "gqa.yaml"))
        assert "K/V heads mean-pooled 4 → 2 (grouped-query attention)" in text
        mqa = dataclasses.replace(gqa, settings=dataclasses.replace(gqa.settings, kv_heads=1), kv_pooled_from=4)
        assert "K/V heads mean-pooled 4 → 1 (multi-query attention)" in plain(summary_line(mqa, "gqa.yaml"))
        assert "mean-pooled" not in plain(summary_line(gqa, "gqa.yaml"))

    def test_spec_pooling_reaches_the_result(self) -> None:
        """A spec's kv_pooled_from (set by a --kv-heads override that pooled) is carried by the result."""
        spec = load_spec(str(CONFIGS / "gqa.yaml"))
        object.__setattr__(spec, "kv_pooled_from", 4)
        assert compute(spec).kv_pooled_from == 4
        assert compute(load_spec(str(CONFIGS / "gqa.yaml"))).kv_pooled_from is None

    def test_precision_of_tables(self) -> None:
        """Slices follow --precision like every table: Q_h of "cat" at two decimals."""
        text = plain(run_view(worked(), [Section.q], 2))
        assert ["cat", "0.00", "2.00"] in [line.split() for line in text.splitlines()]
        assert np.array_equal(worked().q[0, 1], [0.0, 2.0])


class TestScoreBiasTitle:
    """The scaled scores' title says when a score bias is in them."""

    def test_bias_in_the_title(self) -> None:
        """With a bias the title reads ``× s + bias`` (then the cap); without, as before."""
        rng = np.random.default_rng(0)
        q, k, v = rng.standard_normal((3, 3, 4))
        tokens = ("a", "b", "c")
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=1, tokens=tokens, key_tokens=tokens, softcap=5.0,
                                   score_bias=rng.standard_normal((1, 3, 3)))  # fmt: skip
        text = plain(run_view(compute(spec), [Section.scaled], 4))
        assert "scaled scores (× 0.5000 + bias, soft-capped at 5)" in text
        plain_text = plain(run_view(compute(spec.with_settings(softcap=None)), [Section.scaled], 4))
        assert "+ bias" in plain_text
        assert "scaled scores (× 0.7071) " in plain(run_view(compute(loaded()), [Section.scaled], 4))
