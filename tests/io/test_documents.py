from __future__ import annotations

from pathlib import Path

import pytest

from attnx.errors import InputError
from attnx.io.documents import format_path, load_document, parse_document


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
