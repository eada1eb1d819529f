"""Tokenizing a text for a model: labels, special tokens, limits, and what tokenizer.json would pad or cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.models.tokenize import LABEL_WIDTH, TextTokenizer, byte_decoder, byte_level_text, label
from attnx.text import inert as escape
from tests.models.checkpoints import Reference, gpt2_tokenizer


def tokenizer_file(tmp_path: Path, added: tuple[str, ...] = ()) -> Path:
    """The tiny GPT-2 tokenizer (byte-level BPE), with ``added`` tokens, saved as tokenizer.json."""
    tokenizer = gpt2_tokenizer()
    tokenizer.add_tokens(list(added))
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def encode(path: Path, text: str):
    return TextTokenizer(path).encode(text, max_length=1000, vocab_size=10**6)


class TestByteAlphabet:
    def test_matches_gpt2s_bytes_to_unicode(self) -> None:
        """The byte alphabet read backwards is transformers' bytes_to_unicode inverted: 256 characters, one per byte."""
        convert = pytest.importorskip("transformers.convert_slow_tokenizer")
        assert byte_decoder() == {char: byte for byte, char in convert.bytes_to_unicode().items()}
        assert sorted(byte_decoder().values()) == list(range(256))

    @pytest.mark.parametrize(
        ("piece", "text"),
        [("Ġcat", " cat"), ("Ċ", "\n"), ("ĉ", "\t"), ("the", "the"), ("Ã©", "é"), ("ð", "\\xf0"), ("çĮ«", "猫")],
    )
    def test_pieces_read_back_as_text(self, piece: str, text: str) -> None:
        """Each byte-level piece stands for its bytes as UTF-8; a piece holding part of a character shows its bytes."""
        assert byte_level_text(piece) == text

    def test_outside_the_alphabet(self) -> None:
        """A piece with a character the alphabet lacks is not byte-level text."""
        assert byte_level_text("猫") is None


class TestLabels:
    @pytest.mark.parametrize(
        ("text", "shown"),
        [
            ("\x1b[31mred", "\\x1b[31mred"),
            ("a\tb\r\n", "a\\tb\\r\\n"),
            ("\u202eevil", "\\u202eevil"),
            ("line\u2028next", "line\\u2028next"),
            ("\x7f\x9b", "\\x7f\\x9b"),
            ("naïve 猫 🙂", "naïve 猫 🙂"),
        ],
    )
    def test_escape_controls_format_characters_and_separators(self, text: str, shown: str) -> None:
        """Characters that would move the cursor, recolour or reorder the terminal are written as escapes."""
        assert escape(text) == shown

    def test_byte_level_labels(self) -> None:
        """A byte-level token's label is its text, escaped: ``Ġcat`` is `` cat``, ``Ċ`` is ``\\n``."""
        assert [label(p, spelling="byte-level") for p in ("Ġcat", "Ċ", "ĠâĢ®")] == [" cat", "\\n", " \\u202e"]
        assert label("Ġcat") == "Ġcat"  # not byte-level: as spelled

    def test_long_tokens_are_clipped(self) -> None:
        """A token longer than LABEL_WIDTH cells is cut in its middle, its two ends kept around an ellipsis; a
        control character at the cut is escaped whole."""
        shown = label("A" + "x" * 100 + "Z")
        assert len(shown) == LABEL_WIDTH and shown.startswith("Ax") and shown.endswith("xZ") and shown.count("…") == 1
        escaped = label("x" * 31 + "\x07" + "y" * 100)
        assert "\\x07" in escaped or "\\x0" not in escaped


class TestTextTokenizer:
    def test_gpt2_tokens_are_labelled_as_text(self, gpt2: Reference) -> None:
        """A GPT-2 text keeps its stored pieces and gets labels that are the tokenizer's own decoding of each."""
        path = gpt2.path / "tokenizer.json"
        encoded = encode(path, "the cat\nsat")
        assert encoded.pieces == ("the", "Ġcat", "Ċ", "sat")
        assert encoded.tokens == ("the", " cat", "\\n", "sat")
        from tokenizers import Tokenizer

        native = Tokenizer.from_file(str(path))
        assert [escape(native.decode([int(i)])) for i in encoded.ids] == list(encoded.tokens)

    def test_added_tokens_are_not_read_as_bytes(self, tmp_path: Path) -> None:
        """An added token is stored as text, not in the byte alphabet: ``é!`` stays ``é!`` (not ``\\xe9!``)."""
        encoded = encode(tokenizer_file(tmp_path, ("é!",)), "é! the")
        assert encoded.tokens[0] == "é!" and encoded.tokens[1:] == (" the",)

    def test_text_the_tokenizer_cannot_take(self, gpt2: Reference) -> None:
        """A lone surrogate (what undecodable command-line bytes become) is a ModelError, not a crash."""
        from attnx.errors import ModelError

        with pytest.raises(ModelError, match="the text cannot be tokenized"):
            encode(gpt2.path / "tokenizer.json", "the \udcff cat")

    def test_bert_tokens_unchanged(self, bert: Reference) -> None:
        """A WordPiece/WordLevel tokenizer is not byte-level: its tokens are shown as spelled."""
        encoded = encode(bert.path / "tokenizer.json", "the cat")
        assert encoded.tokens == encoded.pieces == ("[CLS]", "the", "cat", "[SEP]")
