"""The one sanitiser: no control, format or bidi character reaches a terminal, whatever text carries it."""

from __future__ import annotations

import io
import json
import unicodedata
from pathlib import Path

import pytest
from rich.table import Table
from rich.text import Text

from attnx.text import clip, console, inert, message_line
from tests.runner import run_attnx

# One of each kind: C0 and C1 controls, DEL, escape sequences, bidi overrides and isolates, zero-width and
# format characters, line and paragraph separators, a lone surrogate.
HOSTILE = ["\x1b[2J", "\x07", "\x7f", "\x9b31m", "\u202e", "\u2066", "\u2069", "\u200b", "\ufeff", "\u2028",
           "\u2029", "\ud800", "\r", "\t"]  # fmt: skip
ESCAPED = ("Cc", "Cf", "Zl", "Zp", "Cs")


def is_inert(text: str, keep: str = "") -> bool:
    """True when no character of ``text`` (but those in ``keep``) is a control, format, separator or surrogate."""
    return all(char in keep or unicodedata.category(char) not in ESCAPED for char in text)


class TestInert:
    """``inert`` writes every dangerous character as a visible escape and leaves the rest alone."""

    @pytest.mark.parametrize("bad", HOSTILE)
    def test_each_kind_is_escaped(self, bad: str) -> None:
        out = inert(f"a{bad}b")
        assert is_inert(out) and out.startswith("a") and out.endswith("b") and "\\" in out

    def test_every_code_point_of_the_escaped_categories(self) -> None:
        """All of Cc, Cf, Zl, Zp and Cs in the Basic Multilingual Plane come out as escapes."""
        chars = "".join(chr(c) for c in range(0x10000) if unicodedata.category(chr(c)) in ESCAPED)
        assert len(chars) > 2000 and is_inert(inert(chars))

    def test_ordinary_text_is_unchanged(self) -> None:
        text = "The cat · 猫 · café ─█▒ 1/√d_k Ġcat"
        assert inert(text) is text

    def test_named_escapes_and_keep(self) -> None:
        assert inert("a\nb\tc\x1bd") == "a\\nb\\tc\\x1bd"
        assert inert("a\nb\x1b", keep="\n") == "a\nb\\x1b"


class TestClip:
    """A long message keeps its start and its end (the remedy), and says how much it left out."""

    def test_clip(self) -> None:
        text = "s" * 100_000 + " raise it with --max-bytes"
        out = clip(text)
        assert len(out) < 700 and out.endswith("raise it with --max-bytes") and "(99,426 characters)" in out
        assert clip("short") == "short"

    def test_message_line_is_one_inert_line(self) -> None:
        out = message_line("first\nsecond \x1b[31m" + "x" * 5000)
        assert "\n" not in out and is_inert(out) and len(out) < 700 and out.startswith("first second \\x1b[31m")


class TestConsoles:
    """Everything printed through attnx's consoles is inert: tables, titles, plain text, exports."""

    def test_table_and_text(self) -> None:
        buffer = io.StringIO()
        shown = console(file=buffer, width=100, color_system=None)
        table = Table(title="\x1b]0;title\x07")
        table.add_column("tok\u202eken")
        table.add_row("a\x1b[2Jb")
        shown.print(table)
        shown.print(Text("line one\nline two \u2066x\u2069"))
        out = buffer.getvalue()
        assert is_inert(out, keep="\n") and "\\x1b[2J" in out and "\\u202e" in out and "\\u2066" in out
        assert "line one\nline two" in out  # a renderer's own line breaks stay

    def test_colour_keeps_only_rich_styles(self) -> None:
        """With colour on, the only escape sequences are the styles Rich writes, none from the text."""
        buffer = io.StringIO()
        shown = console(file=buffer, width=60, color_system="truecolor", force_terminal=True)
        shown.print(Text("\x1b[31mred\x1b[0m", style="bold"))
        out = buffer.getvalue()
        assert "\\x1b[31m" in out and out.count("\x1b[") == 2  # Rich's bold on, and off

    def test_export(self) -> None:
        shown = console(file=io.StringIO(), record=True, width=60)
        shown.print(Text("a\x1bb"))
        assert "a\\x1bb" in shown.export_text()


class TestCommands:
    """Hostile text from files reaches neither stdout nor stderr raw."""

    def test_bidi_token_file_name_and_unknown_key(self, tmp_path: Path) -> None:
        name = tmp_path / "in\x1b[2Jput.yaml"
        name.write_text(
            'tokens: ["a\\u202eb", "c\\u2066"]\nq: [[1, 0], [0, 1]]\nk: [[1, 0], [0, 1]]\nv: [[1, 0], [0, 1]]\n'
        )
        out = run_attnx("run", name.name, "--show", "weights", cwd=tmp_path)  # a short path: its line does not wrap
        assert out.code == 0 and is_inert(out.stdout, keep="\n") and "a\\u202eb" in out.stdout
        assert "in\\x1b[2Jput.yaml" in out.stdout
        data = json.loads(run_attnx("run", str(name), "-f", "json").stdout)
        assert data["tokens"] == ["a\u202eb", "c\u2066"]  # machine output keeps the exact text
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"tokens": ["a"], "q": [[1]], "k": [[1]], "v": [[1]], "\x1b]0;x\x07" * 40_000: 1}))
        out = run_attnx("run", str(bad))
        assert out.code == 2 and is_inert(out.stderr, keep="\n") and len(out.stderr) < 1000
        assert out.stderr.count("\n") == 1

    def test_typer_usage_error_echoing_an_option(self) -> None:
        out = run_attnx("run", "--\x1b[31mbad")
        assert out.code == 2 and is_inert(out.stderr, keep="\n")

    def test_csv_keeps_text_exactly(self, tmp_path: Path) -> None:
        """CSV is machine output: a token that looks like a spreadsheet formula is written as it is (see
        docs/output-formats.md)."""
        path = tmp_path / "f.yaml"
        path.write_text(
            'tokens: ["=HYPERLINK(1)", "@x"]\nq: [[1, 0], [0, 1]]\nk: [[1, 0], [0, 1]]\nv: [[1, 0], [0, 1]]\n'
        )
        out = run_attnx("run", str(path), "-f", "csv", "--tensor", "weights")
        assert out.code == 0 and ",=HYPERLINK(1),@x," in out.stdout


def test_no_module_prints_on_its_own() -> None:
    """Only the CLI (and the console entry, with fixed words) writes to stderr: the sanitiser is the gate, so
    attnx's library never writes there itself."""
    root = Path(__file__).parent.parent / "attnx"
    writers = [p for p in root.rglob("*.py") if "stderr.write" in p.read_text() and "cli" not in p.parts
               and p.name != "console.py"]  # fmt: skip
    assert writers == [], writers
