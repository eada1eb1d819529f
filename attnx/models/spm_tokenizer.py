"""Tokenizers shipped as SentencePiece models, not a tokenizer.json: Marian's and T5's, read with sentencepiece.

Marian's folders (the opus-mt models) hold ``source.spm`` and ``target.spm`` (SentencePiece models that cut the
source and the target text into pieces) and ``vocab.json`` (the model's own ids for those pieces; with
``separate_vocabs``, ``target_vocab.json`` for the target's): a piece the vocabulary lacks is ``<unk>``, a text
starting with a language code (``>>fr<<``) keeps it as one token, and ``</s>`` ends every text, as
transformers' ``MarianTokenizer`` does. A T5 folder without tokenizer.json (mT5's) holds ``spiece.model``, whose
own ids are the model's, ``</s>`` at the end, and the ``<extra_id_N>`` sentinels counting down from the top of
the vocabulary, as ``T5Tokenizer`` does.

``Pieces`` is the small part of ``tokenizers.Tokenizer``'s interface that ``TextTokenizer`` uses, so that one
tokenizer class serves both kinds of file; ``target`` is the side a decoder's text is cut with. The ``sentencepiece``
package is imported only here, only when such a folder opens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnx.errors import ModelError
from attnx.io.output import note_read
from attnx.limits import Limits

MARIAN = ("source.spm", "target.spm", "vocab.json")
T5 = "spiece.model"
INSTALL = "python -m pip install sentencepiece"
EOS, UNK = "</s>", "<unk>"


@dataclass(frozen=True)
class Encoding:
    """What ``tokenizers``' ``Encoding`` holds that attnx reads: ids, pieces, type ids, the special tokens' mask."""

    ids: list[int]
    tokens: list[str]
    type_ids: list[int]
    special_tokens_mask: list[int]


@dataclass
class Pieces:
    """One side of a SentencePiece tokenizer: its model (``processor``), the ids of its pieces (``vocab``: piece ->
    id; None: the processor's own ids), the names of ids beyond them (``beyond``: T5's sentinels), the special
    pieces, whether a leading language code is kept whole (Marian's), and the other side (``target``)."""

    path: Path
    processor: Any
    vocab: Mapping[str, int] | None
    kind: str
    special: frozenset[str] = frozenset({EOS, UNK, "<pad>"})
    beyond: Mapping[int, str] = field(default_factory=dict)
    codes: bool = False
    target: Pieces | None = None
    spelling: str = "metaspace"
    padding: None = None
    truncation: None = None

    def __post_init__(self) -> None:
        own = self.vocab if self.vocab is not None else {self.processor.id_to_piece(i): i
                                                         for i in range(self.processor.get_piece_size())}  # fmt: skip
        self._ids = {**own, **{piece: i for i, piece in self.beyond.items()}}
        self._pieces = {i: piece for piece, i in self._ids.items()}
        if EOS not in self._ids or UNK not in self._ids:
            raise ModelError(f"{self.path}: the vocabulary has no {EOS} or {UNK}: not a SentencePiece model's")

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        """``text`` cut into pieces and their ids, ``</s>`` after them (``add_special_tokens``)."""
        code: list[str] = []
        if self.codes and text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        pieces = [*code, *self.processor.encode(text, out_type=str)] + [EOS] * add_special_tokens
        ids = [self._ids.get(piece, self._ids[UNK]) for piece in pieces]
        special = [int(piece in self.special) for piece in pieces]
        return Encoding(ids, pieces, [0] * len(ids), special)

    def id_to_token(self, index: int) -> str | None:
        """The piece of id ``index`` (None: no piece has it)."""
        return self._pieces.get(index)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        """How many ids the vocabulary names."""
        return len(self._ids)

    def get_added_tokens_decoder(self) -> dict[int, Any]:
        """No piece is an added token: the special ones are the vocabulary's own (``<pad>``, ``</s>``, ``<unk>``)."""
        return {}

    def no_padding(self) -> None:
        """Nothing to turn off: a SentencePiece model neither pads nor truncates."""

    def no_truncation(self) -> None:
        """Nothing to turn off: a SentencePiece model neither pads nor truncates."""


def sentencepiece_files(folder: Path) -> tuple[str, ...] | None:
    """The SentencePiece files ``folder`` holds in place of a tokenizer.json (Marian's three, or T5's one); None."""
    if all((folder / name).is_file() for name in MARIAN):
        return MARIAN
    return (T5,) if (folder / T5).is_file() else None


def read_pieces(folder: Path, limits: Limits) -> Pieces:
    """The tokenizer of ``folder``'s SentencePiece files (``sentencepiece_files``), every file read within the caps; a
    missing package or a bad file is one ModelError line."""
    try:
        import sentencepiece
    except ImportError:
        raise ModelError(f"{folder}: its tokenizer is a SentencePiece model (no tokenizer.json); reading it needs the "
                         f"sentencepiece package: {INSTALL}") from None  # fmt: skip
    files = sentencepiece_files(folder)
    if files is None:  # pragma: no cover - the caller asked because there are some
        raise ModelError(f"{folder}: no SentencePiece files")

    def processor(name: str) -> Any:
        path = folder / name
        limits.check_bytes(path.stat().st_size, str(path))
        note_read(path)
        try:
            return sentencepiece.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError) as exc:
            raise ModelError(f"{path}: not a readable SentencePiece model ({str(exc)[:120]})") from None

    if files == MARIAN:
        settings = read_json(folder / "tokenizer_config.json", limits, optional=True)
        vocab = vocabulary(folder / "vocab.json", limits)
        separate = bool(settings.get("separate_vocabs", False))
        target_vocab = vocabulary(folder / "target_vocab.json", limits) if separate else vocab
        kind = "SentencePiece (source.spm, target.spm)"
        target = Pieces(folder / "target.spm", processor("target.spm"), target_vocab, kind, codes=not separate)
        return Pieces(folder / "source.spm", processor("source.spm"), vocab, kind, codes=not separate, target=target)
    model = processor(T5)
    extra = read_json(folder / "tokenizer_config.json", limits, optional=True).get("extra_ids", 100)
    if not isinstance(extra, int) or isinstance(extra, bool) or not 0 <= extra <= 100_000:
        raise ModelError(f"{folder / 'tokenizer_config.json'}: extra_ids must be a whole number ≥ 0, not {extra!r:.40}")
    size = model.get_piece_size()
    beyond = {size + n: f"<extra_id_{extra - 1 - n}>" for n in range(extra)}  # the sentinels, the last first
    return Pieces(folder / T5, model, None, "SentencePiece (spiece.model)", beyond=beyond)


def vocabulary(path: Path, limits: Limits) -> dict[str, int]:
    """A ``vocab.json``: piece -> id, every id a whole number."""
    found = read_json(path, limits)
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in found.values()):
        raise ModelError(f"{path}: every piece's id must be a whole number ≥ 0")
    return found


def read_json(path: Path, limits: Limits, *, optional: bool = False) -> dict[str, Any]:
    """The JSON object in ``path``, within the byte cap (an absent ``optional`` file: {})."""
    if optional and not path.is_file():
        return {}
    try:
        limits.check_bytes(path.stat().st_size, str(path))
        note_read(path)
        found = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelError(f"{path}: not a readable JSON file ({str(exc)[:120]})") from None
    if not isinstance(found, dict):
        raise ModelError(f"{path}: expected a JSON object")
    return found
