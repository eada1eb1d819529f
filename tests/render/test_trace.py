"""The trace's renderables and its JSON: numbers, dot products term by term, the view of one query."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from attnx.analysis.trace import Trace, build_trace
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.io import load_spec
from attnx.render.numbers import fmt
from attnx.render.serialize import dumps
from attnx.render.trace import (
    dot_product,
    dot_terms,
    fmt_vector,
    head_label,
    operand,
    trace_view,
)
from attnx.render.trace_data import trace_to_dict
from tests.conftest import DECIMALS_4, OUTPUT, TOKENS, TRACES, trace_terms
from tests.specs import loaded, spec_of


def worked_trace(token: str) -> Trace:
    """The trace of ``token`` in the worked example."""
    return build_trace(compute(load_spec().select_queries([TOKENS.index(token)])))


def wide_trace(keys: int | None = 10, terms: int | None = 8) -> Trace:
    """A trace with d_k = 16 over 30 keys: terms are elided and keys collapse by default."""
    q, k, v = np.random.default_rng(2).standard_normal((3, 30, 32))
    tokens = tuple(f"w{i}" for i in range(30))
    spec = spec_of(q, k, v, 2, tokens, tokens)
    return build_trace(compute(spec.select_queries([7])), keys=keys, terms=terms)


def render(trace: Trace, width: int = 100, precision: int = 4, entries: int | None = 8) -> str:
    """Plain text of ``trace_view`` on a console ``width`` columns wide."""
    console = Console(width=width, color_system=None, record=True, file=io.StringIO())
    console.print(trace_view(trace, precision, entries))
    return console.export_text()


def squeeze(text: str) -> str:
    """Runs of spaces as one space, lines kept."""
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


class TestNumbers:
    @pytest.mark.parametrize(
        ("value", "precision", "text"),
        [
            (2.0, 4, "2.0000"),
            (0.5, 4, "0.5000"),
            (0.30125, 4, "0.3013"),
            (-1.25, 4, "(-1.2500)"),
            (-1.486, 4, "(-1.4860)"),
            (-1e-9, 4, "0.0000"),
            (3, 0, "3"),
        ],
    )
    def test_operand(self, value: float, precision: int, text: str) -> None:
        """Factors and subtrahends have the trace's decimals, as every number it shows; negatives in parentheses."""
        assert operand(value, precision) == text

    def test_vector_elides_its_middle(self) -> None:
        """A vector longer than the limit keeps its first and last entries and says how many are left out."""
        values = np.arange(10.0)
        assert fmt_vector(values, 1, 4) == "[0.0, 1.0, … 6 more …, 8.0, 9.0]"
        assert fmt_vector(values[:3], 1, 4) == "[0.0, 1.0, 2.0]"
        assert fmt_vector(values, 0, None) == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"


class TestDotTerms:
    @pytest.mark.parametrize("token", ["The", "cat"])
    def test_the_tutorial_strings(self, token: str) -> None:
        """Each dot product is written term by term as the tutorial writes it, at the trace's 4 decimals (the
        tutorial writes one)."""
        for head, (_, rows, _) in zip(worked_trace(token).heads, TRACES[token], strict=True):
            for line, (_, short, dot, _, _) in zip(head.keys, rows, strict=True):
                terms = trace_terms(short)
                assert dot_terms(head.query, line, 4) == terms
                assert dot_product(head.query, line, 4) == f"{terms} = {dot:.4f}"

    def test_elided_terms_end_with_their_sum(self) -> None:
        """Past eight terms the line ends with how many are left out and their sum, then the raw score."""
        head = wide_trace().heads[0]
        line = head.keys[0]
        text = dot_product(head.query, line, 4)
        assert text.count("×") == 8
        assert text.endswith(f" + … (8 more: {fmt(line.remainder, 4)}) = {fmt(line.raw, 4)}")

    def test_precision_drives_the_factors(self) -> None:
        """At precision 2 every factor has two decimals, at 4 four: one precision for the whole trace."""
        head = wide_trace().heads[0]
        for precision in (2, 4):
            decimals = re.findall(r"\d+\.(\d+)", dot_terms(head.query, head.keys[0], precision).split("…")[0])
            assert len(decimals) == 16 and {len(d) for d in decimals} == {precision}


class TestTraceView:
    def test_worked_example_cat(self) -> None:
        """The trace of "cat" shows the head headers, query slices, term-by-term rows, outputs."""
        text = squeeze(render(worked_trace("cat"), width=120))
        assert "Trace of 'cat' (query 1) · 5 keys · d_model 4 · 2 heads" in text
        assert "Head 0 · columns 0-1 · d_k = 2" in text and "Head 1 · columns 2-3 · d_k = 2" in text
        assert "Q_h[cat] = [0.0000, 2.0000]" in text and "Q_h[cat] = [0.0000, 1.0000]" in text
        assert "0 The [0.0000, 1.0000] 0.0000×0.0000 + 2.0000×1.0000 = 2.0000 2.0000 1.4142 no 0.3664 ◀ max" in text
        assert "1 cat [1.0000, 0.0000] 0.0000×1.0000 + 2.0000×0.0000 = 0.0000 0.0000 0.0000 no 0.0891" in text
        assert "4 mat 0.1904 [0.5000, 0.5000] [0.0952, 0.0952]" in text
        assert "O_h[cat] 1.0000 [0.4109, 0.1336]" in text and "O_h[cat] 1.0000 [0.2289, 0.3663]" in text
        assert "concatenated output O[cat] = [0.4109, 0.1336, 0.2289, 0.3663]" in text

    def test_top_mark_on_every_tied_key(self) -> None:
        """ "The" ties three keys in head 0 and two in head 1: each of their rows carries the mark, in the
        scores table and in the softmax table."""
        lines = [line for line in render(worked_trace("The")).splitlines() if "◀ max" in line]
        assert [line.split()[1] for line in lines] == ["cat", "sat", "mat"] * 2 + ["cat", "on"] * 2

    def test_uniform_row_marks_all_five(self) -> None:
        """ "on" weighs every key 0.2 in head 0: all five rows of each table carry the mark."""
        lines = [line for line in render(worked_trace("on")).splitlines() if "◀ max" in line]
        assert [line.split()[1] for line in lines] == [*TOKENS, *TOKENS, "on", "on"]

    def test_softmax_written_out(self) -> None:
        """ "cat", head 0: each exp(scaled − max), each division by Σe, and Σe written out, as in the tutorial."""
        text = squeeze(render(worked_trace("cat")))
        assert "softmax (max = 1.4142, the largest scaled score)" in text
        assert "0 The exp(1.4142 − 1.4142) = 1.0000 1.0000 / 2.7294 = 0.3664 ◀ max" in text
        assert "1 cat exp(0.0000 − 1.4142) = 0.2431 0.2431 / 2.7294 = 0.0891" in text
        assert "Σe = 1.0000 + 0.2431 + 1.0000 + 0.2431 + 0.2431 = 2.7294" in text
        # head 1: max 0.7071; "mat" scales to 0.3536
        assert "4 mat exp(0.3536 − 0.7071) = 0.7022 0.7022 / 3.6883 = 0.1904" in text

    def test_softmax_stacks_when_narrow(self) -> None:
        """At 60 columns each division goes under its exp, and no line is wider than 60."""
        out = render(worked_trace("cat"), width=60)
        text = squeeze(out)
        assert "e = exp(scaled − max), then e / Σe" in text
        assert "0 The exp(1.4142 − 1.4142) = 1.0000 ◀ max\n1.0000 / 2.7294 = 0.3664" in text
        assert max(len(line) for line in out.splitlines()) <= 60

    def test_softmax_of_collapsed_keys(self) -> None:
        """With 30 keys, the 20 not shown are one row with their e and its division, and one term of Σe."""
        trace = wide_trace()
        head = trace.heads[0]
        rest = head.rest
        assert rest is not None
        text = squeeze(render(trace, width=200))
        division = f"{fmt(rest.exp, 4)} / {fmt(head.exp_sum, 4)} = {fmt(rest.weight, 4)}"
        assert f"… 20 more {fmt(rest.exp, 4)} {division}" in text
        assert f" + {fmt(rest.exp, 4)} (… 20 more) = {fmt(head.exp_sum, 4)}" in text

    def test_no_softmax_when_every_key_is_masked(self) -> None:
        """A query that may attend no key says so instead of a softmax table."""
        mask = np.array([[False, False], [True, True]])
        spec = spec_of(np.eye(2), np.eye(2), np.eye(2), 1, ("a", "b"), ("a", "b"), mask=mask)
        text = squeeze(render(build_trace(compute(spec.select_queries([0])))))
        assert "softmax: every key is masked for this query" in text and "Σe" not in text

    def test_collapsed_keys(self) -> None:
        """With 30 keys, 10 rows and one '… 20 more' row with their total weight and contribution."""
        trace = wide_trace()
        text = render(trace, width=200)
        rest = trace.heads[0].rest
        assert rest is not None
        assert "… 20 more" in text and f"{rest.weight:.4f}" in text
        assert fmt_vector(rest.contribution, 4, 8) in text

    def test_wide_heads_split_their_table(self) -> None:
        """Where the one-table layout does not fit, the dot products get a table of their own."""
        trace = worked_trace("cat")
        assert "dot products Q_h[cat]·K_h[key], term by term" not in render(trace, width=110)
        narrow = squeeze(render(trace, width=60))
        assert "dot products Q_h[cat]·K_h[key], term by term" in narrow
        assert "0.0000×0.0000 + 2.0000×1.0000 = 2.0000" in narrow
        assert max(len(line) for line in render(trace, width=60).splitlines()) <= 60

    def test_masked_key(self) -> None:
        """A masked key says so in its row."""
        trace = worked_trace("cat")
        head = trace.heads[0]
        masked = dataclasses.replace(head, keys=(dataclasses.replace(head.keys[0], masked=True), *head.keys[1:]))
        text = squeeze(render(dataclasses.replace(trace, heads=(masked,)), width=120))
        assert "0 The [0.0000, 1.0000] 0.0000×0.0000 + 2.0000×1.0000 = 2.0000 2.0000 1.4142 yes · ◀ max" in text

    def test_causal_masked_keys_show_the_marker(self) -> None:
        """Causal "cat": the later keys keep their scores, and show · for weight, e and contribution."""
        trace = build_trace(compute(loaded(causal=True).select_queries([1])), heads=(0,))
        text = squeeze(render(trace, width=120))
        assert "2 sat [1.0000, 1.0000] 0.0000×1.0000 + 2.0000×1.0000 = 2.0000 2.0000 1.4142 yes ·" in text
        assert "2 sat · ·" in text  # the softmax table: left out
        assert "2 sat · [0.0000, 0.0000] ·" in text  # the weighted sum of values
        assert "softmax (max = 1.4142, the largest scaled score of the visible keys)" in text
        assert "Σe = 1.0000 + 0.2431 = 1.2431" in text
        assert "0 The exp(1.4142 − 1.4142) = 1.0000 1.0000 / 1.2431 = 0.8044 ◀ max" in text

    def test_grouped_heads_are_labelled_from_zero(self) -> None:
        """gqa.yaml: head 3 reads K/V head 1, shared by heads 2-3, as `attnx run` titles it."""
        spec = load_spec(str(Path(__file__).parents[2] / "configs" / "gqa.yaml"))
        trace = build_trace(compute(spec.select_queries([0])), heads=(3,))
        assert head_label(trace.heads[0]) == "Head 3 · columns 6-7 · d_k = 2 · K/V head 1 (shared by heads 2-3)"
        assert "· head 3 of 4" in render(trace).splitlines()[0]

    def test_tokens_are_not_markup(self) -> None:
        """A token that looks like Rich markup is printed as it is."""
        spec = spec_of(np.eye(2), np.eye(2), np.eye(2), 1, ("[bold]", "x"), ("[bold]", "x"))
        text = render(build_trace(compute(spec)))
        assert "Q_h[[bold]] = [1.0000, 0.0000]" in text and "0  [bold]" in text

    def test_styles(self) -> None:
        """On a colour console the top key's row is in the emphasis colour (bold orange #d75f00)."""
        console = Console(width=100, color_system="truecolor", force_terminal=True, record=True, file=io.StringIO())
        console.print(trace_view(worked_trace("cat"), 4))
        assert "\x1b[1;38;2;215;95;0m" in console.export_text(styles=True)


class TestTraceToDict:
    def test_shape_and_values(self) -> None:
        """format_version first; per head the dims, query slice, per key the arithmetic; the output."""
        data = json.loads(dumps(trace_to_dict(worked_trace("cat"))))
        assert next(iter(data)) == "format_version" and data["format_version"] == "1.9"
        assert (data["token"], data["query"], data["n_heads"], data["n_keys"]) == ("cat", 1, 2, 5)
        assert data["scale"] == pytest.approx(2**-0.5, rel=1e-15)
        head = data["heads"][0]
        assert (head["head"], head["columns"], head["d_k"], head["q"]) == (0, [0, 1], 2, [0.0, 2.0])
        the = head["keys"][0]
        assert the["token"] == "The" and the["k"] == [0.0, 1.0] and the["products"] == [0.0, 2.0]
        assert (the["raw"], the["masked"], the["top"]) == (2.0, False, True)
        assert the["scaled"] == pytest.approx(math.sqrt(2), rel=1e-15) and the["exp"] == 1.0
        assert head["softmax"]["max"] == pytest.approx(math.sqrt(2), rel=1e-15)
        assert head["softmax"]["sum"] == pytest.approx(2 + 3 * math.exp(-math.sqrt(2)), rel=1e-15)
        assert [key["exp"] / head["softmax"]["sum"] for key in head["keys"]] == pytest.approx(
            [key["weight"] for key in head["keys"]], rel=1e-14
        )
        assert abs(the["weight"] - 0.3664) < DECIMALS_4
        np.testing.assert_allclose(the["contribution"], [the["weight"], 0.0], rtol=1e-15)
        assert head["rest"] is None
        np.testing.assert_allclose(head["output"], [0.4109, 0.1336], rtol=0, atol=DECIMALS_4)
        np.testing.assert_allclose(data["output"], OUTPUT[1], rtol=0, atol=DECIMALS_4)
        assert data["projected"] is None

    def test_rest_and_all_products(self) -> None:
        """The summary of the collapsed keys is there, and products list every term whatever --terms says."""
        data = trace_to_dict(wide_trace())
        head = data["heads"][1]
        assert head["head"] == 1 and len(head["keys"]) == 10 and head["rest"]["count"] == 20
        exps = sum(key["exp"] for key in head["keys"]) + head["rest"]["exp"]
        assert exps == pytest.approx(head["softmax"]["sum"], rel=1e-14)
        assert all(len(key["products"]) == 16 for key in head["keys"])
        total = np.sum([key["contribution"] for key in head["keys"]], axis=0) + head["rest"]["contribution"]
        np.testing.assert_allclose(total, head["output"], rtol=1e-12)

    def test_non_finite_numbers_are_null(self) -> None:
        """A NaN raw score is written as null and the text is strict JSON."""
        trace = worked_trace("cat")
        head = trace.heads[0]
        broken = dataclasses.replace(head, keys=(dataclasses.replace(head.keys[0], raw=math.nan), *head.keys[1:]))
        data = trace_to_dict(dataclasses.replace(trace, heads=(broken,)))
        assert data["heads"][0]["keys"][0]["raw"] is None
        json.loads(dumps(data))


class TestScoreBias:
    """A trace under a score bias shows a bias column and says so; one without shows neither."""

    def biased(self) -> Trace:
        """Query 2 of 4 causal tokens, 2 heads, a random bias."""
        rng = np.random.default_rng(1)
        q, k, v = rng.standard_normal((3, 4, 4))
        tokens = ("the", "cat", "sat", "on")
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=2, tokens=tokens, key_tokens=tokens, causal=True,
                                   score_bias=rng.standard_normal((2, 4, 4)))  # fmt: skip
        return build_trace(compute(spec.select_queries([2])), heads=[1])

    def test_bias_column_within_80_columns(self) -> None:
        """The keys table has raw, bias and scaled, whose numbers add up, and every line fits 80 columns."""
        trace = self.biased()
        text = render(trace, width=80)
        assert "score bias" in text.splitlines()[0]
        assert "scores (scaled = raw × 0.7071 + bias) and weights" in text
        assert re.search(r"#\s+key\s+raw\s+bias\s+scaled\s+masked\s+weight", text)
        line = trace.heads[0].keys[0]
        row = f"0  the  {fmt(line.raw, 4)}  {fmt(line.bias or 0.0, 4)}  {fmt(line.scaled, 4)}      no  {fmt(line.weight, 4)}"
        assert row in text
        assert max(map(len, text.splitlines())) <= 80

    def test_softcap_rule(self) -> None:
        """With a cap the rule bends the sum: C·tanh((raw × s + bias) / C)."""
        trace = self.biased()
        capped = dataclasses.replace(trace, settings=dataclasses.replace(trace.settings, softcap=5.0))
        assert "scaled = 5·tanh((raw × 0.7071 + bias) / 5)" in render(capped)

    def test_json_has_bias_only_with_one(self) -> None:
        """Each key of the JSON has ``bias`` under a bias, and none without."""
        keys = trace_to_dict(self.biased())["heads"][0]["keys"]
        assert all(isinstance(key["bias"], float) for key in keys)
        assert all("bias" not in key for key in trace_to_dict(worked_trace("cat"))["heads"][0]["keys"])
        assert "bias" not in render(worked_trace("cat"))
