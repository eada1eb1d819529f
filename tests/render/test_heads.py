"""The renderers of head measures: `heads`' tables and JSON, the model view and `detect`, each with its counts."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from attnx.analysis.detect import Detector
from attnx.analysis.heads import HeadStats, head_stats
from attnx.analysis.measures import head_measures
from attnx.analysis.model_view import ModelView
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.io import load_spec
from attnx.render.detect import detection_to_dict, detection_view
from attnx.render.heads import heads_to_dict, heads_view, labels_table, queries_text, writes_lines
from attnx.render.model import codes_line, counts_line, model_view_table, model_view_to_dict

PATTERNS = str(Path(__file__).parents[2] / "configs" / "attention-patterns.yaml")


def plain(renderable: object, width: int = 120) -> str:
    """What a console ``width`` characters wide prints, without colour."""
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


@pytest.fixture(scope="module")
def patterns() -> tuple[AttentionResult, tuple[HeadStats, ...]]:
    """configs/attention-patterns.yaml: causal, six tokens ``a b c a b c``, heads self, previous-token, sink,
    uniform and induction."""
    result = compute(load_spec(PATTERNS))
    return result, head_stats(result)


class TestLabelsTable:
    def test_counts_row_under_the_scores(self, patterns: tuple[AttentionResult, tuple[HeadStats, ...]]) -> None:
        """Query 0 sees one key, so every score rests on 5 queries; induction on the 3 of the repeat."""
        _, stats = patterns
        lines = plain(labels_table(stats, 4)).splitlines()
        assert lines[1].split() == ["head", "label", "self", "prev", "sink", "induct", "unif", "std", "max", "w"]
        assert lines[5].split()[:2] == ["H2", "sink"]
        assert lines[-1].split() == ["queries", "5", "5", "5", "3", "5", "5"]

    def test_each_head_names_the_queries_its_label_rests_on(
        self, patterns: tuple[AttentionResult, tuple[HeadStats, ...]]
    ) -> None:
        """The rule above each head's queries: its label, score and count."""
        result, stats = patterns
        out = plain(heads_view(stats, result, 4))
        assert "Head 4 · columns 24-29 · d_k = 6 · induction (0.9942) over 3 queries" in out
        assert "Head 2 · columns 12-17 · d_k = 6 · sink (0.9957) over 5 queries" in out
        assert "labels (best positional label, else uniform, else focused): self ≥ 0.5 · previous-token ≥ 0.5 · " in out

    def test_queries_words(self) -> None:
        """One query, many queries with thousands separated, none."""
        assert (queries_text(1), queries_text(1024), queries_text(None)) == ("1 query", "1,024 queries", "no query")


class TestWrites:
    def test_notes_and_sinks_line(self, patterns: tuple[AttentionResult, tuple[HeadStats, ...]]) -> None:
        """The writes table's legend names the sink keys and states both notes' rules from the registry."""
        result, _ = patterns
        measures = head_measures(result, sinks=(0, 2))
        text = plain(writes_lines(measures))
        assert "sinks here: keys 0, 2" in text
        assert "notes: sink = sink ≥ 0.5 · faint = a labelled head whose share < 0.2" in text


class TestHeadsJson:
    def test_counts_label_count_and_the_former_key(
        self, patterns: tuple[AttentionResult, tuple[HeadStats, ...]]
    ) -> None:
        """Each head carries its counts and its label's; `first-token` repeats `sink` in scores and thresholds."""
        result, stats = patterns
        data = heads_to_dict(stats, result, head_measures(result))
        induction = data["heads"][4]
        assert (induction["label"], induction["label_count"]) == ("induction", 3)
        assert induction["counts"] == {"self": 5, "previous-token": 5, "sink": 5, "induction": 3, "uniform": 5,
                                       "focused": 5}  # fmt: skip
        sink = data["heads"][2]
        assert sink["label"] == "sink" and sink["scores"]["first-token"] == sink["scores"]["sink"] == sink["sink_mass"]
        assert data["thresholds"]["first-token"] == data["thresholds"]["sink"] == 0.5
        assert list(sink["scores"]) == ["self", "previous-token", "sink", "induction", "uniform", "focused",
                                        "first-token"]  # fmt: skip

    def test_no_label_no_count(self) -> None:
        """The worked example's head 0 has no label: label_count is null."""
        result = compute(load_spec())
        data = heads_to_dict(head_stats(result), result)
        assert data["heads"][0]["label"] is None and data["heads"][0]["label_count"] is None
        assert data["heads"][1]["label_count"] == 5


class TestModelView:
    @staticmethod
    def view(result: AttentionResult, *more: AttentionResult) -> ModelView:
        layers = tuple(head_stats(r) for r in (result, *more))
        return ModelView("m", "gpt2", result.tokens, layers, result.heads, result.d_k, result.scale,
                         result.scale_mode, "numpy", "cpu", "float64")  # fmt: skip

    def test_counts_line(self, patterns: tuple[AttentionResult, tuple[HeadStats, ...]]) -> None:
        """Below the grid: the queries every label rests on, and the labels that rest on fewer."""
        result, _ = patterns
        view = self.view(result, result)
        assert counts_line(view) == "queries behind each label: 5 (ind 3)"
        grid = plain(model_view_table(view, colour=False), width=80)
        assert "L0 self prev sink unif  ind" in grid and counts_line(view) in grid

    def test_counts_that_differ_between_layers_show_a_range(
        self, patterns: tuple[AttentionResult, tuple[HeadStats, ...]]
    ) -> None:
        """A layer without the causal mask scores query 0 too: 5–6 queries, but it has no previous token."""
        result, _ = patterns
        spec = load_spec(PATTERNS)
        open_result = compute(AttentionSpec.build(q=np.asarray(spec.inputs.q), k=np.asarray(spec.inputs.k),
                                                  v=np.asarray(spec.inputs.v), heads=5, tokens=result.tokens,
                                                  key_tokens=result.key_tokens))  # fmt: skip
        assert counts_line(self.view(result, open_result)) == "queries behind each label: 5–6 (prev 5, ind 3)"

    def test_codes_line_and_json(self, patterns: tuple[AttentionResult, tuple[HeadStats, ...]]) -> None:
        """The legend names the codes that differ from their label; JSON heads carry counts and the former key."""
        result, _ = patterns
        assert codes_line(("self", "previous-token", "sink", "induction")) == "prev = previous-token, ind = induction"
        data = model_view_to_dict(self.view(result))
        head = data["layers"][0]["heads"][4]
        assert head["label_count"] == 3 and head["mean_normalized_entropy"] == head["scores"]["uniform"]
        assert "first-token" in data["thresholds"]


class TestDetection:
    @staticmethod
    def found() -> Detector:
        """Two sequences of a causal head aimed at key 0 (a sink) over ids 7 3 7 3."""
        ids = [7, 3, 7, 3]
        q = np.zeros((4, 4))
        q[:, 0] = 20.0 * 2  # key 0 scores 20 above the rest
        tokens = tuple(map(str, ids))
        detector = Detector()
        spec = AttentionSpec.build(q=q, k=np.eye(4), v=np.eye(4), heads=1, tokens=tokens, key_tokens=tokens,
                                   causal=True)  # fmt: skip
        for _ in range(2):
            detector.add(0, compute(spec), ids)
        return detector

    def test_json_label_count(self) -> None:
        """The sink label rests on queries 1..3 of two sequences: 6 positions, in label_count and sink.count."""
        data = detection_to_dict(self.found().done(model="m", architecture="a", source="s"))
        head = data["layers"][0]["heads"][0]
        assert (head["label"], head["label_count"], head["sink"]["count"]) == ("sink", 6, 6)
        assert data["thresholds"] == {"previous-token": 0.5, "duplicate-token": 0.5, "induction": 0.5, "sink": 0.5}
        assert list(head)[4:] == ["previous-token", "duplicate-token", "induction", "sink", "entropy"]

    def test_view_words_from_the_registry(self) -> None:
        """The grid's title and the label rules read the registry's descriptions and thresholds."""
        out = plain(detection_view(self.found().done(model="m", architecture="a", source="s"), "sink", 2, colour=False))
        assert (
            "Heads found: each head's label over its sink (mean weight on key 0, the special tokens and a learned sink)"
            in out
        )
        assert "labels: the best detector reaching its threshold, else sink (previous-token ≥ 0.5 · " in out
        assert "L0H0  sink   1.00    0.00          6          2" in out


class TestModelPositions:
    """`attnx model` says each layer's positions, grouped where layers agree."""

    def test_layers_that_differ_are_grouped(self) -> None:
        """Two bases and a layer without positions read as three groups of layer ranges."""
        from types import SimpleNamespace

        from attnx.core.positions import Rotary
        from attnx.render.model import layer_ranges, positions_text

        local, full = Rotary(theta=10000.0), Rotary(theta=1e6)
        info = SimpleNamespace(
            rotaries=(local, local, None, local, full, full), rotary=local, position_bias=None, positions=None
        )
        assert positions_text(info) == (  # type: ignore[arg-type]
            "RoPE θ 10000 (half pairs) on layers 0-1, 3; none (NoPE) on layer 2; RoPE θ 1e+06 (half pairs) on "
            "layers 4-5"
        )
        assert (
            positions_text(SimpleNamespace(rotaries=(full, full), rotary=full, position_bias=None, positions=None))
            == "RoPE θ 1e+06 (half pairs)"
        )  # type: ignore[arg-type]
        learned = SimpleNamespace(rotaries=(), rotary=None, position_bias=None, positions=None)
        assert positions_text(learned) == "learned embeddings"  # type: ignore[arg-type]
        sines = SimpleNamespace(rotaries=(), rotary=None, position_bias=None, positions="sinusoidal embeddings")
        assert positions_text(sines) == "sinusoidal embeddings"  # type: ignore[arg-type]
        assert layer_ranges([0, 1, 2, 4, 6, 7]) == "0-2, 4, 6-7"
