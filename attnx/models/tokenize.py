"""Turning a text into a model's tokens with its tokenizer.json: never padded, never truncated, labelled as text."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnx.errors import ModelError
from attnx.io.output import note_read
from attnx.limits import Limits
from attnx.models.stacks import InputKind
from attnx.text import inert
from attnx.text import label as cut

LABEL_WIDTH = 48  # a longer token is clipped to this many characters in its label (the last one "…")
METASPACE = "\u2581"  # "▁", SentencePiece's mark for a space


@dataclass(frozen=True, eq=False)
class Encoded:
    """A text as token ids (``[token]``), token type ids, and each token's label and stored spelling.

    ``pieces`` are the tokens as the vocabulary spells them (``Ġcat``, ``Ċ``, ``##ing``); ``tokens``
    are their labels, what every table, trace and JSON shows (`` cat``, ``\\n``, ``##ing``; see ``label``).
    ``special`` marks the tokens the tokenizer added around the text (``[CLS]``, ``[SEP]``, ``<s>``). ``kind`` is
    what kind of input it is (a stack reads one kind: attnx/models/stacks.py).
    """

    ids: np.ndarray
    type_ids: np.ndarray
    tokens: tuple[str, ...]
    pieces: tuple[str, ...] = ()
    special: tuple[bool, ...] = ()
    kind: InputKind = InputKind.TEXT

    @property
    def positions(self) -> range:
        """Each token's position, 0..N-1 for a text: the rows a learned position table gives them."""
        return range(len(self.ids))


@functools.cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet read backwards: the printable character that stands for each byte -> the byte.

    Bytes that are printable Latin-1 stand for themselves; the other 68 (controls, space, ...) are
    moved to U+0100 onwards in order (space is ``Ġ``, newline ``Ċ``), as in GPT-2's ``bytes_to_unicode``.
    """
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    table = {chr(b): b for b in kept}
    table.update({chr(256 + i): b for i, b in enumerate(moved)})
    return table


def byte_level_text(piece: str) -> str | None:
    """The text a byte-level token stands for (``Ġcat`` -> `` cat``, ``Ċ`` -> ``\\n``), or None if ``piece``
    holds a character outside the byte alphabet.

    A token that holds only part of a character's UTF-8 bytes shows the bytes it holds as ``\\xf0``.
    """
    table = byte_decoder()
    try:
        raw = bytes(table[char] for char in piece)
    except KeyError:
        return None
    return raw.decode("utf-8", errors="backslashreplace")


def metaspace_text(piece: str) -> str:
    """The text a SentencePiece-style token stands for: ``▁`` is a space and a byte token (``<0x0A>``) its byte;
    a byte that is only part of a character shows as ``\\xe2``."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return bytes([int(piece[3:5], 16)]).decode("utf-8", errors="backslashreplace")
        except ValueError:
            return piece
    return piece.replace(METASPACE, " ")


def label(piece: str, *, spelling: str = "plain") -> str:
    """A token as people read it: the text it stands for, escaped, at most ``LABEL_WIDTH`` characters.

    Tokens are first read back from how the tokenizer spells them (``spelling``): ``byte-level`` (GPT-2,
    Llama 3, Qwen) from the byte alphabet, ``Ġcat`` as `` cat`` and ``Ċ`` as ``\\n``; ``metaspace``
    (SentencePiece: Llama 2, Mistral, Gemma) ``▁cat`` as `` cat`` and ``<0x0A>`` as ``\\n``; so
    ``--token cat`` finds it and a table shows the text.
    """
    text = piece
    if spelling == "byte-level":
        text = byte_level_text(piece) or piece
    elif spelling == "metaspace":
        text = metaspace_text(piece)
    return inert(cut(text, LABEL_WIDTH))  # cut first, then escaped: an escape is never cut in half


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """File descriptor 2 on /dev/null for the duration (Python's own sys.stderr is not touched)."""
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 at all: nothing to quiet
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def native(what: str) -> Iterator[None]:
    """Around a call into the native ``tokenizers`` library: what it raises for a bad file or text (plain
    exceptions, or a Rust panic, which reaches Python as ``PanicException``, a BaseException) becomes one
    ModelError line starting with ``what``. Ctrl-C and termination signals pass through. Rust prints a
    panic's message and backtrace on file descriptor 2 itself: stderr is pointed at /dev/null meanwhile."""
    try:
        with _quiet_native_stderr():
            yield
    except ModelError:  # already one line that says what
        raise
    except Exception as exc:
        raise ModelError(f"{what}: {exc}") from None
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        raise ModelError(f"{what}: the tokenizers library failed on it ({str(exc)[:200]})") from None


class TextTokenizer:
    """A checkpoint's tokenizer with its stored padding and truncation turned off.

    Some tokenizer.json files pad every input to a fixed length or cut it short (all-MiniLM-L6-v2's
    pads to 128): attnx never does either to a single text. ``stored`` says what the file asked for.
    The file is parsed by the native ``tokenizers`` library only once its size is within ``max_bytes``.
    ``built``: a ``tokenizers.Tokenizer`` already built (a GGUF file's, from its metadata), used instead of
    reading ``path``, which messages then name.
    """

    def __init__(self, path: Path, limits: Limits | None = None, *, built: Any = None) -> None:
        self.path = path
        self._tokenizer = self._read(path, limits) if built is None else built
        self._target = getattr(self._tokenizer, "target", None) or self._tokenizer  # what cuts a decoder's text
        with native(f"{path}: not a readable tokenizer.json"):
            self.stored = _stored_settings(self._tokenizer)
            self.spelling = _spelling(self._tokenizer)
            self._added = frozenset(self._tokenizer.get_added_tokens_decoder())
            self._tokenizer.no_padding()
            self._tokenizer.no_truncation()

    @staticmethod
    def _read(path: Path, limits: Limits | None) -> Any:
        """tokenizer.json parsed, once its size is within the caps."""
        from tokenizers import Tokenizer

        try:
            size = path.stat().st_size
        except OSError as exc:
            raise ModelError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        (limits or Limits.from_env()).check_bytes(size, str(path))
        note_read(path)
        with native(f"{path}: not a readable tokenizer.json"):
            return Tokenizer.from_file(str(path))

    @property
    def kind(self) -> str:
        """The tokenizer's model: ``WordPiece``, ``BPE``, ``Unigram`` or ``WordLevel`` (or a SentencePiece model's
        files, attnx/models/spm_tokenizer.py)."""
        named = getattr(self._tokenizer, "kind", None)
        return named if isinstance(named, str) else type(self._tokenizer.model).__name__

    @property
    def vocab_size(self) -> int:
        """Number of tokens the tokenizer knows, added tokens included."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, max_length: int, vocab_size: int, target: bool = False) -> Encoded:
        """``text`` with the model's special tokens; too long for the model, or empty, is a ModelError. ``target``: the
        text a decoder reads, where the tokenizer cuts it otherwise (Marian's target.spm)."""
        with native(f"{self.path}: the text cannot be tokenized"):  # a lone surrogate is a plain TypeError
            encoding = (self._target if target else self._tokenizer).encode(text, add_special_tokens=True)
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
        special = tuple(bool(flag) for flag in encoding.special_tokens_mask)
        return self._labelled(ids, np.asarray(encoding.type_ids, dtype=np.intp), tuple(encoding.tokens), special)

    def _labelled(
        self, ids: np.ndarray, type_ids: np.ndarray, pieces: tuple[str, ...], special: tuple[bool, ...]
    ) -> Encoded:
        labels = tuple(
            label(piece, spelling="plain" if int(i) in self._added else self.spelling)
            for piece, i in zip(pieces, ids, strict=True)
        )
        return Encoded(ids, type_ids, labels, pieces, special)

    def shifted(self, encoded: Encoded, start: int) -> Encoded:
        """``encoded`` as a decoder reads it under teacher forcing: the decoder's ``start`` token, then every token but
        the last (transformers' shift right of the labels), ``start`` marked as special."""
        ids = np.concatenate([np.asarray([start], dtype=np.intp), encoded.ids[:-1]])
        (piece,) = self.pieces(ids[:1])
        return self._labelled(ids, np.zeros_like(ids), (piece, *encoded.pieces[:-1]), (True, *encoded.special[:-1]))

    def after(self, prompt: list[int], text: str, *, max_length: int, vocab_size: int) -> Encoded:
        """``text``'s tokens without the tokenizer's special tokens, after the ``prompt`` token ids (marked special):
        the decoder's input of a model that says its own prompt (Whisper); too long, or an id beyond the vocabulary,
        is a ModelError."""
        with native(f"{self.path}: the text cannot be tokenized"):
            encoding = self._target.encode(text, add_special_tokens=False)
        ids = np.asarray([*prompt, *encoding.ids], dtype=np.intp)
        if len(ids) > max_length:
            raise ModelError(f"the prompt and the text are {len(ids)} tokens long but the decoder reads at most "
                             f"{max_length}; give a shorter text (attnx never truncates it)")  # fmt: skip
        if int(ids.max()) >= vocab_size:
            raise ModelError(f"{self.path}: token id {int(ids.max())} is beyond the model's vocabulary of {vocab_size}")
        special = (True,) * len(prompt) + (False,) * len(encoding.ids)
        return self._labelled(ids, np.zeros_like(ids), (*self.pieces(ids[: len(prompt)]), *encoding.tokens), special)

    def of_ids(self, ids: Sequence[int], prompt: int) -> Encoded:
        """Token ids a decoder wrote after a ``prompt`` of that many tokens, labelled; the prompt's marked special."""
        found = np.asarray(ids, dtype=np.intp)
        special = tuple(index < prompt for index in range(len(found)))
        return self._labelled(found, np.zeros_like(found), self.pieces(found), special)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens included, as the tokenizer's decoder joins them (bytes that are part
        of a character: U+FFFD)."""
        with native(f"{self.path}: the tokens cannot be decoded"):
            return str(self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False))

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids of the tokens added as special (``<|endoftext|>``, Whisper's ``<|en|>``)."""
        return frozenset(i for i, token in self._tokenizer.get_added_tokens_decoder().items() if token.special)

    def pieces(self, ids: np.ndarray) -> tuple[str, ...]:
        """The vocabulary's spelling of token ids (an id it does not know: ``<id 123>``)."""
        return tuple(self._target.id_to_token(int(i)) or f"<id {int(i)}>" for i in np.asarray(ids).ravel())

    def labels(self, ids: np.ndarray) -> tuple[str, ...]:
        """The labels of token ids (an id the tokenizer does not know: ``<id 123>``)."""
        out = []
        for i in np.asarray(ids).ravel():
            piece = self._target.id_to_token(int(i))
            out.append(f"<id {int(i)}>" if piece is None else label(piece, spelling="plain" if int(i) in self._added
                                                                    else self.spelling))  # fmt: skip
        return tuple(out)

    @functools.lru_cache(maxsize=1)  # noqa: B019 - one tokenizer per open model, kept while it is open
    def _ordinary(self, size: int) -> np.ndarray:
        """The ids below ``size`` that are text: not added, not special, not marked as control tokens."""
        marked = [i for i in range(size) if _marked(self._tokenizer.id_to_token(i))]
        return np.setdiff1d(np.arange(size), np.fromiter([*self._added, *marked], dtype=np.intp))

    def repeated(self, length: int, *, vocab_size: int, rng: np.random.Generator) -> Encoded:
        """``length`` random tokens (none added, special or marked as control tokens) twice over, between the
        special tokens the tokenizer puts around a text: the input that shows induction heads (Olsson et al., 2022)."""
        with native(f"{self.path}: the tokenizer cannot encode a word"):
            around = self._tokenizer.encode("a", add_special_tokens=True)
            pool = self._ordinary(min(vocab_size, self.vocab_size))
            if pool.size < length:
                raise ModelError(f"{self.path}: the vocabulary has {pool.size} ordinary tokens; {length} are needed")
            drawn = rng.choice(pool, size=length, replace=False)
            flags = list(around.special_tokens_mask)
            first = flags.index(0) if 0 in flags else len(flags)
            last = len(flags) - flags[::-1].index(0) if 0 in flags else len(flags)
            ids = np.concatenate([around.ids[:first], drawn, drawn, around.ids[last:]]).astype(np.intp)
            pieces = tuple(self._tokenizer.id_to_token(int(i)) or "" for i in ids)
        special = tuple(i < first or i >= first + 2 * length for i in range(len(ids)))
        return self._labelled(ids, np.zeros(len(ids), dtype=np.intp), pieces, special)


def _marked(piece: str | None) -> bool:
    """Whether a vocabulary entry looks like a control token, not text: ``[PAD]``, ``<s>``, ``<0x0A>``,
    ``<|endoftext|>`` (tokenizers that keep their special tokens in the vocabulary, not as added tokens)."""
    return piece is None or (len(piece) > 2 and (piece[0], piece[-1]) in (("[", "]"), ("<", ">")))


def _spelling(tokenizer: Any) -> str:
    """How the tokenizer spells text in its tokens: ``byte-level`` (GPT-2's byte alphabet), ``metaspace``
    (``▁`` for spaces, as SentencePiece) or ``plain``, from its decoder's or pre-tokenizer's JSON."""
    said = getattr(tokenizer, "spelling", None)
    if isinstance(said, str):  # a SentencePiece model's (attnx/models/spm_tokenizer.py)
        return said
    states = [part.__getstate__() for part in (tokenizer.decoder, tokenizer.pre_tokenizer) if part is not None]
    found = [state for state in states if isinstance(state, bytes)]
    if any(b'"ByteLevel"' in state for state in found):
        return "byte-level"
    if any(METASPACE.encode() in state for state in found):
        return "metaspace"
    return "plain"


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
