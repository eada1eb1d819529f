"""Reading YAML and JSON documents: bounded reading, parsing, nesting and located errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from attnx.environment import Environment, using
from attnx.errors import ConfigError, InputError, LimitError
from attnx.io.documents import format_path, load_document, parse_document, read_bytes
from attnx.io.schema import spec_from_document
from attnx.limits import Limits


class TestReading:
    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file names itself."""
        with pytest.raises(InputError, match=r"nope\.yaml: no such file"):
            load_document(str(tmp_path / "nope.yaml"))

    def test_directory(self, tmp_path: Path) -> None:
        """A directory is not an input file."""
        with pytest.raises(InputError, match="is a directory"):
            load_document(str(tmp_path))

    def test_not_utf8(self, tmp_path: Path) -> None:
        """Bytes that are not UTF-8 are reported with their offset."""
        path = tmp_path / "bad.yaml"
        path.write_bytes(b"q: [[1]]\n\xff\xfe")
        with pytest.raises(InputError, match=r"not UTF-8 text \(byte 0xff at offset 9\)"):
            load_document(str(path))

    def test_empty(self, tmp_path: Path) -> None:
        """An empty file is an error, not an empty problem."""
        path = tmp_path / "empty.yaml"
        path.write_text("  \n")
        with pytest.raises(InputError, match="is empty"):
            load_document(str(path))


class TestParsing:
    def test_yaml_syntax_error_has_line_and_column(self) -> None:
        """Invalid YAML names the line and column of the problem."""
        with pytest.raises(InputError, match=r"^in\.yaml:2:\d+: invalid YAML"):
            parse_document("q: [[1, 2]\nk: [[1]]\n", "in.yaml")

    def test_json_syntax_error_has_line_and_column(self) -> None:
        """Invalid JSON names the line and column of the problem."""
        with pytest.raises(InputError, match=r"^in\.json:2:7: invalid JSON: Expecting value"):
            parse_document('{"q": [[1]],\n "k": ]}', "in.json")

    def test_stdin_json_is_detected(self) -> None:
        """Text starting with { is JSON whatever its name."""
        assert parse_document('{"heads": 2}', "<stdin>").data == {"heads": 2}

    def test_locations_follow_paths(self) -> None:
        """where() finds the line and column of nested values."""
        doc = parse_document("heads: 2\nq:\n  - [1, 2]\n  - [3, 4]\n", "f.yaml")
        assert doc.where(("q", 1, 1)) == "f.yaml:4:9"
        assert doc.where(("nothing",)) == "f.yaml"

    def test_format_path(self) -> None:
        """Key paths read like code."""
        assert format_path(("q", 2, 1)) == "q[2][1]"


class TestBoundedReading:
    """No more than the input size cap is ever read, from files, streams or devices."""

    def test_file_over_the_cap_is_refused_by_its_size(self, tmp_path: Path) -> None:
        """A regular file's size is checked before it is opened."""
        path = tmp_path / "big.json"
        path.write_bytes(b" " * 3000)
        with pytest.raises(
            LimitError,
            match=r"big\.json: 2\.93 KiB exceeds the input size cap of 2 KiB; raise it with --max-bytes or ATTNX_MAX_BYTES$",
        ):
            read_bytes(str(path), Limits(max_bytes=2048))

    def test_endless_device_stops_at_the_cap(self) -> None:
        """/dev/zero never ends: reading stops one byte past the cap."""
        with pytest.raises(LimitError, match=r"^/dev/zero: a stream longer than 1 KiB exceeds the input size cap"):
            read_bytes("/dev/zero", Limits(max_bytes=1024))

    def test_stdin_over_the_cap(self) -> None:
        """stdin is read up to the cap and refused beyond it."""
        stdin = io.TextIOWrapper(io.BytesIO(b"q: 1\n" * 1000))
        with using(Environment(stdin=stdin)), pytest.raises(LimitError, match=r"^<stdin>: a stream longer than 1 KiB"):
            read_bytes("-", Limits(max_bytes=1024))

    def test_within_the_cap(self, tmp_path: Path) -> None:
        """A file at the cap exactly is read whole."""
        path = tmp_path / "in.yaml"
        path.write_bytes(b"a" * 1024)
        assert read_bytes(str(path), Limits(max_bytes=1024)) == (b"a" * 1024, str(path))

    def test_yaml_has_its_own_cap(self) -> None:
        """YAML text over the YAML cap is refused before parsing, with a hint to use JSON or .npz."""
        with pytest.raises(
            LimitError, match=r"^in\.yaml: 2 KiB of YAML exceeds the YAML size cap of 1 KiB; .*JSON or \.npz\)$"
        ):
            parse_document("#" * 2048, "in.yaml", Limits(max_yaml_bytes=1024))

    def test_json_is_not_held_to_the_yaml_cap(self) -> None:
        """JSON is parsed in C: the YAML cap does not apply to it."""
        text = '{"heads": 1' + " " * 4096 + "}"
        assert parse_document(text, "in.json", Limits(max_yaml_bytes=1024)).data == {"heads": 1}


class TestNesting:
    """Deep nesting fails fast at the depth cap, with a location, never with a RecursionError."""

    @pytest.mark.parametrize(
        ("text", "name", "where"),
        [
            ("[" * 50_000 + "]" * 50_000, "deep.yaml", "deep.yaml:1:33"),
            ("- " * 50_000 + "1\n", "deep.yaml", "deep.yaml:1:65"),
            ("a: {" * 50_000 + "}" * 50_000, "deep.yaml", "deep.yaml:1:125"),
            ("[" * 50_000 + "]" * 50_000, "deep.json", "deep.json:1:33"),
            ('{"a": ' * 50_000 + "1" + "}" * 50_000, "deep.json", "deep.json:1:193"),
        ],
    )
    def test_fifty_thousand_levels(self, text: str, name: str, where: str) -> None:
        """50,000 levels (flow, block, mappings; YAML and JSON) stop at level 33, located at its bracket."""
        with pytest.raises(LimitError) as info:
            parse_document(text, name, Limits(max_yaml_bytes=1 << 20))  # 50,000 levels need more than 64 KiB
        assert str(info.value) == (
            f"{where}: level 33 of nesting exceeds the depth cap of 32 levels; raise it with --max-depth or ATTNX_MAX_DEPTH"
        )

    def test_raised_cap_lets_deeper_yaml_through(self) -> None:
        """With --max-depth 40, 35 levels parse."""
        value, depth = parse_document("q: " + "[" * 34 + "1" + "]" * 34, "in.yaml", Limits(max_depth=40)).data["q"], 0
        while isinstance(value, list):
            value, depth = value[0], depth + 1
        assert (value, depth) == (1, 34)

    def test_json_between_the_cap_and_the_parser_guard_reaches_the_schema(self) -> None:
        """JSON is bounded by its C parser's recursion guard; 40 levels parse, and the schema refuses them."""
        doc = parse_document('{"q": ' + "[" * 40 + "]" * 40 + ', "k": [[1]], "v": [[1]]}', "in.json", Limits())
        with pytest.raises(ConfigError, match=r"^in\.json:1:9: q\[0\]\[0\]: expected a number, got a list$"):
            spec_from_document(doc)


class TestJsonLocations:
    """JSON errors name line, column and key path, like YAML's."""

    def test_value_offset_follows_paths(self) -> None:
        """where() finds nested values, keys and misses."""
        doc = parse_document('{"heads": 2,\n "q": [[1, 2],\n       [3, "x"]]}', "f.json")
        assert doc.where(("q", 1, 1)) == "f.json:3:12"
        assert doc.where(("q",), key=True) == "f.json:2:2"
        assert doc.where(("q", 5)) == "f.json"
        assert doc.where(("nothing",)) == "f.json"

    def test_duplicate_key_is_located(self) -> None:
        """A repeated key names where it repeats, inner objects included."""
        with pytest.raises(ConfigError, match=r"^in\.json:2:17: duplicate key 'y'$"):
            parse_document('{"x": 1,\n "x2": {"y": 1, "y": 2}}', "in.json")

    def test_long_integer_is_located(self) -> None:
        """An integer longer than Python reads is an input error at its place, not a crash."""
        with pytest.raises(InputError, match=r"^in\.json:1:9: invalid JSON: Exceeds the limit \(4300 digits\)"):
            parse_document('{"q": [[' + "1" * 5000 + "]]}", "in.json")

    def test_nan_literal_parses_for_the_schema_to_refuse(self) -> None:
        """NaN and Infinity literals reach the finiteness check (see test_schema) as floats."""
        data = parse_document('{"q": [[NaN, Infinity, -Infinity]]}', "in.json").data
        assert [str(x) for x in data["q"][0]] == ["nan", "inf", "-inf"]
