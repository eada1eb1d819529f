"""Hostile result files and texts files: every value is checked where it is read, every tensor against the same caps.

`attnx diff A B` and `attnx check --against FILE` read results as JSON, JSON Lines, .npz, a folder of .npy files or
one bare .npy; `heads`/`detect --texts` read texts. Each bad case must exit 2 with one located line and no output.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import InputError
from attnx.io.results import SavedResult, load_input_or_result, read_npy
from attnx.io.texts import parse_texts
from attnx.limits import Limits, digits
from tests.cli.test_corpus import assert_one_line_exit_2
from tests.corpus.make_corpus import npy_claiming, npy_header_of, zipped
from tests.runner import Outcome, run_attnx

WEIGHTS = [[[0.5, 0.5], [0.25, 0.75]]]  # one head, two queries, two keys
BIG = 10**400  # 401 digits: beyond float64, within what Python converts


def result(**fields: object) -> str:
    """A JSON result of format 1.5 holding ``fields``."""
    return json.dumps({"format_version": "1.5", **fields})


def record(**fields: object) -> str:
    """One line of `attnx run -f jsonl` (a head-query record unless ``record`` says)."""
    return json.dumps({"record": "head_query", "format_version": "1.5", **fields})


def both_ways(path: Path, *extra: str) -> list[Outcome]:
    """The outcome of `diff FILE FILE` and of `check --against FILE` (on the built-in example)."""
    return [run_attnx("diff", str(path), str(path), *extra), run_attnx("check", "--against", str(path), *extra)]


def written(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


class TestNumbersInJsonResults:
    """Each cell, label and mask value of a JSON result is checked where it is written, with file:line:column."""

    @pytest.mark.parametrize(
        ("text", "fragment"),
        [
            (result(weights=[[[0.5, BIG]]]), "r.json:1:46: weights[0][0][1]: an integer of 401 digits is beyond float64"),
            (result(output=[[-BIG, 1]]), "r.json:1:39: output[0][0]: an integer of 401 digits is beyond float64"),
            (result(weights=[[[0.5, 1.0]]]).replace("1.0", "1e400"), "r.json:1:46: weights[0][0][1]: the number 1e400 is"),
            (result(scores=[[[-1.5, 2.0]]]).replace("-1.5", "-1e400"), "r.json:1:40: scores[0][0][0]: the number -1e400"),
            (result(weights=[[[float("inf"), 1.0]]]).replace("1.0", "1" * 400 + ".5"), "weights[0][0][1]: the number 1111"),
            (result(weights=[[[0.5, "x"]]]), "weights[0][0][1]: expected numbers (or null), got text 'x'"),
            (result(weights=[[[0.5, True]]]), "weights[0][0][1]: expected numbers (or null), got a boolean (true)"),
            (result(weights=[[[[0.5]]]]), "r.json:1:41: weights[0][0][0]: expected numbers (or null), got a list"),
            (result(weights=[[[0.5, 0.5], [0.5]]]), "weights[0]: rows of different lengths"),
            (result(weights=[[[1], [2]], [3, 4]]), "r.json:1:51: weights[1]: rows of different lengths"),
            (result(weights=WEIGHTS, tokens=5), "tokens: expected a list of token strings, got int 5"),
            (result(weights=WEIGHTS, tokens=["a", 7]), "r.json:1:84: tokens[1]: expected a token string, got int 7"),
            (result(weights=WEIGHTS, key_tokens={"a": 1}), "key_tokens: expected a list of token strings, got a mapping"),
            (result(weights=WEIGHTS, mask=[[True, 5]]), "mask[0][1]: expected true or false, got int 5"),
            (result(weights=WEIGHTS, mask=[[True], [True, False]]), "mask[1]: has 2 values but row 0 has 1"),
            (result(weights=WEIGHTS, mask="all"), "mask: expected rows of booleans"),
            (result(weights=WEIGHTS, tokens=["9" * 5000, "x"]).replace('"x"', "9" * 5000), "r.json:1:5083: invalid JSON: Exceeds the limit (4300 digits)"),
            (json.dumps({"format_version": 1.5, "weights": WEIGHTS}), "not an attnx JSON result of format 1.x"),
        ],
    )  # fmt: skip
    def test_refused_with_its_place(self, tmp_path: Path, text: str, fragment: str) -> None:
        """`diff` refuses each with one line naming the file, line, column and cell, exit 2."""
        path = written(tmp_path, "r.json", text)
        assert_one_line_exit_2(run_attnx("diff", str(path), str(path)), fragment)

    def test_check_against_reads_them_alike(self, tmp_path: Path) -> None:
        """`check --against` refuses the same cells with the same line as `diff`."""
        for text, fragment in [
            (result(weights=[[[0.5, BIG]]]), "weights[0][0][1]: an integer of 401 digits"),
            (result(weights=[[[0.5, 1.0]]]).replace("1.0", "1e999"), "the number 1e999 is beyond float64's range"),
            (result(weights=WEIGHTS, tokens=5), "tokens: expected a list of token strings"),
        ]:
            path = written(tmp_path, "r.json", text)
            assert_one_line_exit_2(run_attnx("check", "--against", str(path)), fragment)

    def test_infinity_and_nan_literals_are_values(self, tmp_path: Path) -> None:
        """`Infinity`, `-Infinity` and `NaN` are read as the values they name (as an .npz holds them), and null is
        NaN: only a number written beyond float64's range is refused."""
        text = result(weights=[[[float("inf"), float("-inf"), float("nan"), None]]])
        saved = load_input_or_result(str(written(tmp_path, "r.json", text)))
        assert isinstance(saved, SavedResult)
        weights = saved.tensors["weights"]
        assert weights.shape == (1, 1, 4) and weights[0, 0, 0] == np.inf and weights[0, 0, 1] == -np.inf
        assert np.isnan(weights[0, 0, 2:]).all()

    def test_a_yaml_result_alike(self, tmp_path: Path) -> None:
        """In a YAML result, 1e400 and a 400-digit integer are refused at their cell; .inf is a value."""
        for cell, fragment in (("1e400", "r.yaml:2:18: weights[0][0][1]: the number 1e400 is beyond float64's range"),
                               ("9" * 400, "r.yaml:2:18: weights[0][0][1]: an integer of 400 digits")):  # fmt: skip
            path = written(tmp_path, "r.yaml", f'format_version: "1.5"\nweights: [[[0.5, {cell}]]]\n')
            assert_one_line_exit_2(run_attnx("diff", str(path), str(path)), fragment)
        path = written(tmp_path, "r.yaml", 'format_version: "1.5"\nweights: [[[.inf, -.Inf]]]\n')
        saved = load_input_or_result(str(path))
        assert isinstance(saved, SavedResult) and saved.tensors["weights"].tolist() == [[[np.inf, -np.inf]]]

    def test_an_overflow_after_infinities_is_placed_right(self, tmp_path: Path) -> None:
        """A 1e400 behind Infinity literals and a "1e400" in a token is named at its own cell."""
        text = result(tokens=["1e400"], weights=[[[float("inf"), 0.5], [float("-inf"), 2.0]]]).replace("2.0", "1e400")
        outcome = run_attnx("diff", str(written(tmp_path, "r.json", text)), str(tmp_path / "r.json"))
        assert_one_line_exit_2(outcome, "weights[0][1][1]: the number 1e400 is beyond float64's range")


class TestNumbersInJsonLines:
    """Each record of a JSON Lines result is checked as it is read, with file:line(:column)."""

    @pytest.mark.parametrize(
        ("text", "fragment"),
        [
            (record(head=0, query=0, weights=[BIG, 0]), "r.jsonl:1:86: weights[0]: an integer of 401 digits"),
            (record(head=0, query=0, weights=[0.5, 1.0]).replace("1.0", "-1e400"), "r.jsonl:1:91: weights[1]: the number"),
            (record(head=0, query=0, weights=[[1, 2]]), "r.jsonl:1:86: weights[0]: expected numbers (or null), got a list"),
            (record(head=0, query=0, weights=["x"]), "weights[0]: expected numbers (or null), got text 'x'"),
            (record(head=0, query=0, weights="x"), "r.jsonl:1:85: weights: expected a list of numbers, got text 'x'"),
            (record(head=0, query=0, weights=[1]).replace("[1]", "[" + "9" * 5000 + "]"), "r.jsonl:1: not a JSON record"),
            (record(head=0, query=0, weights=[1.0], query_token=5), "query_token: expected a token string, got int 5"),
            (record(head=0, query=0, weights=[1.0], sink_weight=BIG), "sink_weight: an integer of 401 digits"),
            (record(head=0, query=0, weights=[1.0], sink_weight=[0.5]), "sink_weight: expected numbers (or null)"),
            (record(head=0, query=0, weights=[1.0]).replace('"1.5"', "1.5"), "format_version: expected a format 1.x"),
            (record(head=0, query=-1, weights=[1.0]), "r.jsonl:1: query must be a whole number from 0, got int -1"),
            (record(head=True, query=0, weights=[1.0]), "r.jsonl:1: head must be a whole number from 0"),
            (record(head=0, query=0, weights=[1.0]) + "\n" + record(head=0, query=0, weights=[1.0]),
             "r.jsonl:2: a second record of weights at head 0, query 0"),
        ],
    )  # fmt: skip
    def test_refused_with_its_place(self, tmp_path: Path, text: str, fragment: str) -> None:
        """`diff` refuses each with one line naming the file and line (and the column of a cell), exit 2."""
        path = written(tmp_path, "r.jsonl", text + "\n")
        assert_one_line_exit_2(run_attnx("diff", str(path), str(path)), fragment)

    def test_a_line_separator_in_a_token_stays_in_its_record(self, tmp_path: Path) -> None:
        """Records end at newlines only: a token holding U+2028 as it is keeps its line whole."""
        text = record(head=0, query=0, weights=[1.0], query_token="a\u2028b")
        path = written(tmp_path, "r.jsonl", text.replace("\\u2028", "\u2028") + "\n")
        saved = load_input_or_result(str(path))
        assert isinstance(saved, SavedResult) and saved.meta["tokens"] == ["a\u2028b"]

    def test_sink_weights_are_read_back(self, tmp_path: Path) -> None:
        """A head-query record's sink_weight becomes sink_weights [head, query], null as NaN."""
        lines = [record(head=h, query=i, weights=[1.0], sink_weight=[0.25, None][h] if i else 0.5)
                 for h in range(2) for i in range(2)]  # fmt: skip
        saved = load_input_or_result(str(written(tmp_path, "r.jsonl", "\n".join(lines) + "\n")))
        assert isinstance(saved, SavedResult)
        sinks = saved.tensors["sink_weights"]
        assert sinks.shape == (2, 2) and sinks[0].tolist() == [0.5, 0.25] and sinks[1, 0] == 0.5
        assert np.isnan(sinks[1, 1])


class TestTexts:
    """--texts: a JSON line holding what Python does not convert, or a text no encoding writes, is a located line."""

    @pytest.mark.parametrize(
        ("raw", "fragment"),
        [
            ('{"text": ' + "9" * 5000 + "}", "t, line 2: not valid JSON: Exceeds the limit (4300 digits)"),
            ('{"text": "a", "id": ' + "9" * 5000 + "}", "t, line 2: not valid JSON: Exceeds the limit (4300 digits)"),
            ('{"text": "a", "id": [' * 3000, "t, line 2: not valid JSON"),
            ('{"text": "a \\ud800 b"}', "t, line 2: the text holds U+D800, half of a UTF-16 surrogate pair"),
            ('"\\udfff"', "t, line 2: the text holds U+DFFF"),
            ('{"text": 1e400}', 't, line 2: a JSON line must be a string or an object with a non-empty string "text"'),
        ],
    )
    def test_refused(self, raw: str, fragment: str) -> None:
        """Each is an InputError naming the file and line."""
        with pytest.raises(InputError) as caught:
            parse_texts(f"the cat\n{raw}\n".encode(), "t", 10)
        assert fragment in str(caught.value)

    def test_lines_end_at_newlines_only(self) -> None:
        """U+2028 inside a JSON string and form feeds in a plain line do not split a text."""
        raw = '{"text": "a\u2028b"}\r\nc\x0cd\n'.encode()
        assert parse_texts(raw, "t", 10) == ["a\u2028b", "c\x0cd"]

    @pytest.mark.parametrize("command", ["detect", "heads"])
    def test_the_commands_refuse_before_the_model_is_opened(self, tmp_path: Path, command: str) -> None:
        """`detect --texts` and `heads --texts` say what is wrong with the texts file in one line, exit 2."""
        texts = written(tmp_path, "texts.jsonl", '{"text": "the cat"}\n{"text": ' + "9" * 5000 + "}\n")
        outcome = run_attnx(command, "--model", str(tmp_path / "no-model"), "--texts", str(texts))
        assert_one_line_exit_2(outcome, "texts.jsonl, line 2: not valid JSON: Exceeds the limit (4300 digits)")


LYING = [
    (b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{", "its header claims 4,294,967,280 bytes, but the"),
    (b"\x93NUMPY\x01\x00" + struct.pack("<H", 0xFFF0) + b"{", "its header claims 65,520 bytes, but the"),
    (npy_header_of(70_000), "its header claims 70,000 bytes; at most 65,535 are read"),
    (b"\x93NUMPY\x01\x00\x10", "ends in its header's length field"),
    (npy_claiming((1, 10**309, 2)), "the header claims a 1 × 10^309 × 2 float64 array (about 2^1030 bytes) but the"),
    (npy_claiming((0, 10**309, 2)), "an axis of about 10^309 exceeds the dimension cap"),
    (npy_claiming((1, True, 2), data=bytes(16)), "the header claims an axis of True, not a whole number"),
    (npy_claiming((1,) * 40, data=bytes(8)), "the header claims 40 axes; an array has at most 32"),
    (npy_claiming((1, 2, 3), data=bytes(8)), "the header claims a 1 × 2 × 3 float64 array (48 bytes) but the"),
    (npy_claiming((1, 1, 2), "<U100000000", data=bytes(8)), "U100000000 array (762.9 MiB) but the"),
    (b"\x93NUMPY", "not a valid .npy array: the magic string is not correct"),
]


class TestNpyHeaders:
    """An .npy header's length is checked against the file and 65,535 before it is read, its contents before any data,
    by one check for a bare .npy, a folder of them and an .npz member alike."""

    @pytest.mark.parametrize(("raw", "fragment"), LYING)
    def test_bare_npy_and_folder(self, tmp_path: Path, raw: bytes, fragment: str) -> None:
        """As a bare .npy given to `diff` and to `check --against`, and in a folder of results: one line, exit 2."""
        (tmp_path / "weights.npy").write_bytes(raw)
        for outcome in [*both_ways(tmp_path / "weights.npy"), run_attnx("diff", str(tmp_path), str(tmp_path))]:
            assert_one_line_exit_2(outcome, fragment)

    @pytest.mark.parametrize(("raw", "fragment"), LYING)
    def test_npz_member_of_a_result(self, tmp_path: Path, raw: bytes, fragment: str) -> None:
        """The same header as the weights member of a result .npz: one line naming the member, exit 2."""
        path = tmp_path / "result.npz"
        path.write_bytes(zipped([("weights.npy", raw)]))
        for outcome in both_ways(path):
            assert_one_line_exit_2(outcome, fragment)

    def test_a_long_header_within_the_cap_is_read(self, tmp_path: Path) -> None:
        """A header of 20,000 bytes (past NumPy's own 10,000, within 65,535) is read, not refused by NumPy."""
        path = tmp_path / "weights.npy"
        path.write_bytes(npy_header_of(20_000))
        assert read_npy(path, "w", Limits()).tolist() == [[0.0, 0.0], [0.0, 0.0]]


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
        for flag, fragment in (("--max-dimension", "an axis of 1,500 exceeds the dimension cap of 1,000"),
                               ("--max-elements", "(1,500 elements) exceeds the element cap of 1,000")):  # fmt: skip
            for outcome in both_ways(wide[form], flag, "1000"):
                assert_one_line_exit_2(outcome, fragment)

    def test_within_the_caps_it_compares(self, wide: dict[str, Path]) -> None:
        """The same files under the default caps: diff of a file with itself agrees, exit 0."""
        for form in ("json", "jsonl", "npz", "folder"):
            outcome = run_attnx("diff", str(wide[form]), str(wide[form]))
            assert outcome.code == 0, outcome.stderr

    @pytest.mark.parametrize(
        ("text", "fragment"),
        [
            (record(head=0, query=2**31 - 1, weights=[1.0]), "r.jsonl: weights: an axis of 2,147,483,648 exceeds"),
            (record(head=BIG, query=0, weights=[1.0]), "r.jsonl: weights: an axis of about 10^400 exceeds"),
            (record(head=0, query=0, weights=[1.0]) + "\n" + record(record="query", query=2**31 - 1, query_token="x"),
             "r.jsonl: tokens: an axis of 2,147,483,648 exceeds"),
        ],
    )  # fmt: skip
    def test_a_record_index_far_out_allocates_nothing(self, tmp_path: Path, text: str, fragment: str) -> None:
        """A JSONL record far out (a tensor's place or a query's token) is refused by the shape it implies, before
        anything is assembled."""
        path = written(tmp_path, "r.jsonl", text + "\n")
        assert_one_line_exit_2(run_attnx("diff", str(path), str(path)), fragment)

    def test_token_labels_of_a_json_result(self, tmp_path: Path) -> None:
        """A JSON result's tokens longer than the dimension cap are refused as its tensors would be."""
        path = written(tmp_path, "r.json", result(weights=WEIGHTS, tokens=["a", "b", "c"]))
        outcome = run_attnx("diff", str(path), str(path), "--max-dimension", "2")
        assert_one_line_exit_2(outcome, "r.json:1:78: tokens: an axis of 3 exceeds the dimension cap of 2")


class TestHugeCounts:
    """A size a header or a record implies is written as its order of magnitude, never through ``str()`` or a float."""

    def test_a_product_past_pythons_digits(self) -> None:
        """40 axes of 10^999 under caps raised past them: 10^39960 elements is named, not a ValueError."""
        limits = Limits(max_dimension=10**1000, max_elements=10**1000)
        problem = limits.shape_problem((10**999,) * 40)
        assert problem is not None and "(about 10^39960 elements) exceeds the element cap" in problem

    @pytest.mark.parametrize("power", [15, 309, 4300, 39960])
    def test_orders_of_magnitude(self, power: int) -> None:
        """10^p and 10^p − 1 are p + 1 and p digits long, at every size."""
        assert (digits(10**power), digits(10**power - 1), digits(-(10**power))) == (power + 1, power, power + 1)
