"""The measure registry: its entries, the commands' label rules, and the docs tables generated from it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from attnx.core.measures import (
    CODES,
    CROSS,
    DETECT,
    FORMER_KEYS,
    HEADS,
    MEASURES,
    NOTES,
    RULES,
    WRITES,
    Measure,
    by_label,
    markdown_table,
    measure,
)

DOC = Path(__file__).parents[2] / "docs" / "commands.md"


class TestEntries:
    def test_names_keys_and_labels_are_unique(self) -> None:
        """No two measures share a name, a JSON key or a label."""
        entries = list(MEASURES.values())
        for field in ("name", "key", "label"):
            values = [getattr(m, field) for m in entries if getattr(m, field) is not None]
            assert len(values) == len(set(values)), field

    def test_every_rule_names_registered_measures(self) -> None:
        """Each command's measures, tiers, the writes and the notes are registry names; tiers are among the measures."""
        for rule in RULES.values():
            assert set(rule.measures) <= set(MEASURES)
            assert {name for tier in rule.tiers for name in tier} <= set(rule.measures)
        assert set(WRITES) <= set(MEASURES) and set(NOTES) <= set(WRITES)

    def test_codes_fit_the_grid(self) -> None:
        """Every label a grid shows has a code of five characters at most (twelve heads in 80 columns)."""
        assert set(CODES) == set(HEADS.labels) | set(DETECT.labels) | set(CROSS.labels)
        assert all(1 <= len(code) <= 5 for code in CODES.values())

    def test_derived_spellings(self) -> None:
        """A measure's label, JSON key and grid code follow from its name and header unless given: the label is the
        name for a thresholded measure, the key the label (else the name), the code the header of one that labels."""
        derived = {m.name: (m.label, m.key, m.code) for m in MEASURES.values()}
        assert derived == {
            "self": ("self", "self", "self"),
            "previous-token": ("previous-token", "previous-token", "prev"),
            "duplicate-token": ("duplicate-token", "duplicate-token", "dup"),
            "induction": ("induction", "induction", "ind"),
            "sink": ("sink", "sink", "sink"),
            "entropy": ("uniform", "uniform", "unif"),
            "max-weight": ("focused", "focused", "focus"),
            "sink-by-value": (None, "sink_mass_by_value", ""),
            "write": (None, "write", ""),
            "share": ("faint", "write_share", ""),
            "monotonicity": ("monotonic", "monotonic", "mono"),
            "coverage": (None, "coverage", ""),
            "source-end": ("end-sink", "end-sink", "end"),
        }
        made = Measure("made-up", "x", "y", threshold=0.5, header="made")
        assert (made.label, made.key, made.code) == ("made-up", "made-up", "made")
        assert Measure("kept", "x", "y", header="kept").key == "kept" and not Measure("kept", "x", "y").code

    def test_the_mass_on_key_0_has_one_name(self) -> None:
        """`sink` is the one name of the weight on key 0 (and a model's special tokens); `first-token` is only a
        JSON key kept for format 1.x."""
        assert by_label("sink") is measure("sink") and "first-token" not in CODES
        assert FORMER_KEYS == {"first-token": "sink"}
        assert "sink" in HEADS.measures and "sink" in DETECT.measures and "sink" in NOTES

    def test_entries_are_frozen(self) -> None:
        """Entries cannot be changed at run time."""
        assert isinstance(measure("sink"), Measure)
        with pytest.raises(AttributeError):
            measure("sink").threshold = 0.1  # type: ignore[misc]

    def test_lookup_of_an_unknown_name(self) -> None:
        """An unknown measure is a KeyError naming it."""
        with pytest.raises(KeyError, match="first-token"):
            measure("first-token")


class TestHolds:
    @pytest.mark.parametrize(
        ("score", "holds"), [(0.5, True), (0.49, False), (None, False), (math.nan, False), (1.0, True)]
    )
    def test_at_or_above(self, score: float | None, holds: bool) -> None:
        """A label holds from its threshold up; None and NaN never hold."""
        assert measure("induction").holds(score) is holds

    def test_below(self) -> None:
        """`faint` holds under the share's threshold, not at it."""
        share = measure("share")
        assert share.holds(0.19) and not share.holds(0.2) and share.rule_text == "faint < 0.2"

    def test_no_threshold(self) -> None:
        """A measure without a threshold labels nothing."""
        assert not measure("write").holds(1.0) and measure("write").rule_text == ""


class TestRules:
    @staticmethod
    def picked(rule_scores: dict[str, float | None], command: str = "heads") -> tuple[str | None, float | None]:
        found, score = RULES[command].pick(lambda m: rule_scores.get(m.name))
        return (found.label if found else None, score)

    def test_heads_positional_beats_later_tiers(self) -> None:
        """A sharp self head is also focused and uniform enough: the first tier's label wins."""
        assert self.picked({"self": 0.9, "entropy": 0.96, "max-weight": 0.95}) == ("self", 0.9)

    def test_ties_go_to_the_earlier_measure(self) -> None:
        """Two positional scores of 0.6: previous-token comes before sink."""
        assert self.picked({"sink": 0.6, "previous-token": 0.6}) == ("previous-token", 0.6)

    def test_heads_fall_back_to_uniform_then_focused(self) -> None:
        """Without a positional label, uniform (entropy ≥ 0.95), then focused (max weight ≥ 0.8), else none."""
        assert self.picked({"self": 0.2, "entropy": 0.97, "max-weight": 0.9}) == ("uniform", 0.97)
        assert self.picked({"self": 0.2, "entropy": 0.5, "max-weight": 0.85}) == ("focused", 0.85)
        assert self.picked({"induction": None, "max-weight": 0.5}) == (None, None)

    def test_detect_labels_sink_only_without_a_detector(self) -> None:
        """detect's sink is its second tier: an induction head that is also a sink is induction."""
        assert self.picked({"induction": 0.55, "sink": 0.9}, "detect") == ("induction", 0.55)
        assert self.picked({"induction": 0.45, "sink": 0.9}, "detect") == ("sink", 0.9)
        assert self.picked({"entropy": 1.0}, "detect") == (None, None)

    def test_thresholds_by_label(self) -> None:
        """The JSON ``thresholds`` objects: label → threshold, tier by tier."""
        assert HEADS.thresholds() == {"self": 0.5, "previous-token": 0.5, "sink": 0.5, "induction": 0.5,
                                      "uniform": 0.95, "focused": 0.8}  # fmt: skip
        assert DETECT.thresholds() == {"previous-token": 0.5, "duplicate-token": 0.5, "induction": 0.5, "sink": 0.5}
        assert HEADS.rules_text().startswith("self ≥ 0.5 · previous-token ≥ 0.5 · sink ≥ 0.5 · induction ≥ 0.5")

    def test_detect_measures_keep_their_json_order(self) -> None:
        """detect's JSON and JSONL list its measures as format 1.3 did."""
        assert DETECT.measures == ("previous-token", "duplicate-token", "induction", "sink", "entropy")


class TestMarkdown:
    def test_one_row_per_measure(self) -> None:
        """The heads table lists its six scores and the three write measures; detect's its five measures."""
        heads, detect = markdown_table("heads").splitlines(), markdown_table("detect").splitlines()
        assert len(heads) == 2 + 9 and len(detect) == 2 + 5
        assert (
            "| `entropy` | `uniform` | entropy ÷ log(visible keys): 0 one key, 1 uniform | `uniform` | ≥ 0.95 |"
            in heads
        )
        assert "| `entropy` | `entropy` | entropy ÷ log(visible keys): 0 one key, 1 uniform | — | — |" in detect
        assert any(row.startswith("| `share` | `write_share` |") and row.endswith("| `faint` (note) | < 0.2 |")
                   for row in heads)  # fmt: skip

    @pytest.mark.parametrize("command", ["heads", "detect", "cross"])
    def test_docs_hold_the_generated_table(self, command: str) -> None:
        """docs/commands.md holds exactly the registry's table of each command between its markers."""
        text = DOC.read_text(encoding="utf-8")
        begin, end = f"<!-- measures {command}: begin -->\n", f"<!-- measures {command}: end -->"
        assert begin in text, f"docs/commands.md has no {begin.strip()} marker"
        assert text.split(begin, 1)[1].split(end, 1)[0] == markdown_table(command)
