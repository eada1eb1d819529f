"""Turning a text into a model's tokens with its tokenizer.json: never padded, never truncated."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnx.errors import ModelError


@dataclass(frozen=True, eq=False)
class Encoded:
    """A text as token ids (``[token]``), token type ids, and labels spelled as the tokenizer spells them."""

    ids: np.ndarray
    type_ids: np.ndarray
    tokens: tuple[str, ...]


class TextTokenizer:
    """A checkpoint's tokenizer with its stored padding and truncation turned off.

    Some tokenizer.json files pad every input to a fixed length or cut it short (all-MiniLM-L6-v2's
    pads to 128): attnx never does either to a single text. ``stored`` says what the file asked for.
    """

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = path
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception subclasses for bad files
            raise ModelError(f"{path}: not a readable tokenizer.json: {exc}") from None
        self.stored = _stored_settings(self._tokenizer)
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()

    @property
    def kind(self) -> str:
        """The tokenizer's model: ``WordPiece``, ``BPE``, ``Unigram`` or ``WordLevel``."""
        return type(self._tokenizer.model).__name__

    @property
    def vocab_size(self) -> int:
        """Number of tokens the tokenizer knows, added tokens included."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, max_length: int, vocab_size: int) -> Encoded:
        """``text`` with the model's special tokens; too long for the model, or empty, is a ModelError."""
        encoding = self._tokenizer.encode(text, add_special_tokens=True)
        n = len(encoding.ids)
        if n == 0:
            raise ModelError(f"{self.path}: the text gives no tokens; give a --text with some words")
        if n > max_length:
            raise ModelError(
                f"the text is {n} tokens long (special tokens included) but the model reads at most {max_length}; "
                "give a shorter --text (attnx never truncates it)"
            )
        ids = np.asarray(encoding.ids, dtype=np.intp)
        if int(ids.max()) >= vocab_size:
            raise ModelError(
                f"{self.path}: token id {int(ids.max())} is beyond the model's vocabulary of {vocab_size}: "
                "the tokenizer does not belong to this model"
            )
        return Encoded(ids, np.asarray(encoding.type_ids, dtype=np.intp), tuple(encoding.tokens))


def _stored_settings(tokenizer: Any) -> tuple[str, ...]:
    """What the file's padding and truncation settings would have done, in words."""
    notes = []
    padding = tokenizer.padding
    if padding:
        length = padding.get("length")
        notes.append(f"pads every input to {length} tokens" if length else "pads batches to their longest input")
    truncation = tokenizer.truncation
    if truncation:
        notes.append(f"truncates inputs to {truncation.get('max_length')} tokens")
    return tuple(notes)
