"""Hostile result files and texts files: every value is checked where it is read, every tensor against the same caps.

`attnx diff A B` and `attnx check --against FILE` read results as JSON, JSON Lines, .npz, a folder of .npy files or
one bare .npy; `heads`/`detect --texts` read texts. Each case must exit 2 with one located line and no output.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_corpus import assert_one_line_exit_2
from tests.corpus.make_corpus import npy_claiming, zipped
from tests.runner import run_attnx

WEIGHTS = [[[0.5, 0.5], [0.25, 0.75]]]  # one head, two queries, two keys


def result(**fields: object) -> str:
    """A JSON result of format 1.5 holding ``fields``."""
    return json.dumps({"format_version": "1.5", **fields})


def record(**fields: object) -> str:
    """One line of `attnx run -f jsonl`."""
    return json.dumps({"record": "head_query", "format_version": "1.5", **fields})


def both_ways(path: Path, *extra: str) -> list:
    """The outcome of `diff FILE FILE` and of `check --against FILE` (on the built-in example)."""
    return [run_attnx("diff", str(path), str(path), *extra), run_attnx("check", "--against", str(path), *extra)]


class TestNumbersWhereRead:
    """Integers and floats beyond float64, and values of the wrong type, in every result form."""

    @pytest.mark.parametrize(
        ("name", "text", "fragment"),
        [
            ("big.json", result(weights=[[[0.5, 10**400]]]), "big.json:1:46: weights[0][0][1]: an integer of 401 digits"),
            ("text.json", result(weights=[[[0.5, "x"]]]), "weights[0][0][1]: expected numbers (or null), got str"),
            ("bool.json", result(weights=[[[0.5, True]]]), "weights[0][0][1]: expected numbers (or null), got bool"),
            ("ragged.json", result(weights=[[[0.5, 0.5], [0.5]]]), "weights[0]: rows of different lengths"),
            ("tokens.json", result(weights=WEIGHTS, tokens=5), "tokens: expected a list of token strings, got int"),
            ("keys.json", result(weights=WEIGHTS, key_tokens=[1, 2]), "key_tokens: expected a list of token strings"),
            ("version.json", json.dumps({"format_version": 1.5, "weights": WEIGHTS}), "format_version 1.5"),
            ("big.jsonl", record(head=0, query=0, weights=[10**400, 0]), "big.jsonl:1: weights: an integer of 401 digits"),
            ("text.jsonl", record(head=0, query=0, weights=["x"]), "text.jsonl:1: weights: expected numbers"),
            ("digits.jsonl", record(head=0, query=0, weights=[1]).replace("[1]", "[" + "9" * 5000 + "]"),
             "digits.jsonl:1: not a JSON record"),
        ],
    )  # fmt: skip
    def test_json_and_jsonl(self, tmp_path: Path, name: str, text: str, fragment: str) -> None:
        """`diff` refuses each with one located line, exit 2 (the first line of the file is line 1)."""
        path = tmp_path / name
        path.write_text(text)
        assert_one_line_exit_2(run_attnx("diff", str(path), str(path)), fragment)

    def test_texts_with_an_integer_past_pythons_limit(self, tmp_path: Path, gpt2) -> None:
        """A --texts JSON line holding a 5,000-digit integer is a located refusal, not a ValueError."""
        texts = tmp_path / "texts.jsonl"
        texts.write_text('{"text": "the cat"}\n{"text": ' + "9" * 5000 + "}\n")
        outcome = run_attnx("detect", "--model", str(gpt2.path), "--texts", str(texts))
        assert_one_line_exit_2(outcome, "texts.jsonl, line 2: not valid JSON: Exceeds the limit (4300 digits)")


class TestNpyHeaders:
    """A header's length, and its shape, are checked against the file before anything is read or sized."""

    @pytest.mark.parametrize(
        ("raw", "fragment"),
        [
            (b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{", "its header claims 4,294,967,280 bytes"),
            (b"\x93NUMPY\x01\x00" + struct.pack("<H", 0xFFF0) + b"{", "its header claims 65,520 bytes"),
            (npy_claiming((10**309, 2)), "an axis of about 10^309 exceeds the dimension cap"),
            (b"\x93NUMPY", "not a valid .npy array: the magic string is not correct"),
        ],
    )
    def test_bare_npy_and_folder(self, tmp_path: Path, raw: bytes, fragment: str) -> None:
        """As a bare .npy given to `diff` and to `check --against`, and in a folder of results: one line, exit 2."""
        bare = tmp_path / "weights.npy"
        bare.write_bytes(raw)
        for outcome in [*both_ways(bare), run_attnx("diff", str(tmp_path), str(tmp_path))]:
            assert_one_line_exit_2(outcome, fragment)

    def test_npz_member_of_a_result(self, tmp_path: Path) -> None:
        """A result .npz whose weights member claims an axis of 10^309: the cap refuses it, nothing overflows."""
        path = tmp_path / "result.npz"
        path.write_bytes(zipped([("weights.npy", npy_claiming((1, 10**309, 2)))]))
        for outcome in both_ways(path):
            assert_one_line_exit_2(outcome, "weights: the header claims a 1 × 10^309 × 2 float64 array")


class TestOneCapRule:
    """--max-elements and --max-dimension hold for a result however it is written."""

    @pytest.fixture
    def wide(self, tmp_path: Path) -> dict[str, Path]:
        """The same (1, 1, 1500) weights as JSON, JSON Lines, .npz, a folder and a bare .npy."""
        array = np.full((1, 1, 1500), 1 / 1500)
        paths = {form: tmp_path / f"wide.{form}" for form in ("json", "jsonl", "npz", "npy")}
        paths["json"].write_text(result(weights=array.tolist()))
        paths["jsonl"].write_text(record(head=0, query=0, weights=array[0, 0].tolist()) + "\n")
        np.savez(paths["npz"], weights=array)
        np.save(paths["npy"], array)
        (tmp_path / "folder").mkdir()
        np.save(tmp_path / "folder" / "weights.npy", array)
        return {**paths, "folder": tmp_path / "folder"}

    @pytest.mark.parametrize("form", ["json", "jsonl", "npz", "npy", "folder"])
    def test_dimension_and_elements(self, wide: dict[str, Path], form: str) -> None:
        """Each form is refused by both caps, by `diff` and by `check --against`, naming the cap."""
        for flag, fragment in (("--max-dimension", "exceeds the dimension cap of 1,000"),
                               ("--max-elements", "exceeds the element cap of 1,000")):  # fmt: skip
            for outcome in both_ways(wide[form], flag, "1000"):
                assert_one_line_exit_2(outcome, fragment)

    def test_within_the_caps_it_compares(self, wide: dict[str, Path]) -> None:
        """The same files under the default caps: diff of a file with itself agrees, exit 0."""
        for form in ("json", "jsonl", "npz", "folder"):
            outcome = run_attnx("diff", str(wide[form]), str(wide[form]))
            assert outcome.code == 0, outcome.stderr

    def test_a_record_index_far_out_allocates_nothing(self, tmp_path: Path) -> None:
        """A JSONL record at query 2^31 − 1: the implied shape is refused by the dimension cap before assembly."""
        path = tmp_path / "far.jsonl"
        path.write_text(record(head=0, query=2**31 - 1, weights=[1.0]) + "\n")
        assert_one_line_exit_2(run_attnx("diff", str(path), str(path)), "an axis of 2,147,483,648 exceeds")
