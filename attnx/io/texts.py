"""Reading a batch of texts (``--texts FILE``): one text per line, or JSON Lines with a ``text`` on each line (and,
for an encoder-decoder's decoder, a ``target`` beside it)."""

from __future__ import annotations

import json
import re

from attnx.errors import InputError
from attnx.io.documents import read_bytes
from attnx.limits import Limits
from attnx.text import clip

SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair: JSON's "\\ud800" reads as one, UTF-8 holds none


def parse_texts(raw: bytes, name: str, limit: int) -> list[str]:
    """The texts of ``raw``: each non-blank line is a text; a line starting with ``{`` or ``"`` is JSON (an
    object with a string ``text``, or a string). Lines end at a newline only (a JSON string may hold U+2028 as it is).
    Bad UTF-8, bad JSON (an integer past Python's 4,300 digits included), a text holding half of a surrogate pair,
    no texts or more than ``limit`` are InputErrors naming the line (from 1, as editors count lines)."""
    return [text for text, _ in parse_pairs(raw, name, limit)]


def parse_pairs(raw: bytes, name: str, limit: int) -> list[tuple[str, str | None]]:
    """The texts of ``raw`` as ``parse_texts`` reads them, each with its ``target`` (None where the line has none:
    a plain line, a JSON string, an object without one); a target is checked as a text is."""
    try:
        document = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    texts: list[tuple[str, str | None]] = []
    for number, line in enumerate(document.split("\n"), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        target = None
        if stripped[0] in '{"':
            stripped, target = _json_text(stripped, f"{name}, line {number}")
        if len(texts) == limit:
            raise InputError(f"{name}: more than {limit:,} texts (the cap of max_dimension); split the file")
        texts.append((stripped, target))
    if not texts:
        raise InputError(f'{name}: no texts: give one text per line, or JSON Lines with a "text" on each')
    return texts


def _json_text(line: str, where: str) -> tuple[str, str | None]:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        raise InputError(f"{where}: not valid JSON: {clip(line, 40)}") from None
    except ValueError as exc:  # an integer longer than Python converts (4300 digits)
        raise InputError(f"{where}: not valid JSON: {str(exc).split(';')[0]}") from None
    target = None
    if isinstance(value, dict):
        target = value.get("target")
        if target is not None and (not isinstance(target, str) or not target.strip()):
            raise InputError(f'{where}: "target" must be a non-empty string')
        value = value.get("text")
    if not isinstance(value, str) or not value.strip():
        raise InputError(f'{where}: a JSON line must be a string or an object with a non-empty string "text"')
    for what, given in (("text", value), ("target", target)):
        half = SURROGATE.search(given or "")
        if half:
            raise InputError(
                f"{where}: the {what} holds U+{ord(half[0]):04X}, half of a UTF-16 surrogate pair, not a character"
            )
    return value, target


def read_texts(source: str, limits: Limits | None = None) -> list[str]:
    """The texts of the file ``source`` (``-``: stdin), within ``max_bytes`` and at most ``max_dimension`` texts."""
    return [text for text, _ in read_pairs(source, limits)]


def read_pairs(source: str, limits: Limits | None = None) -> list[tuple[str, str | None]]:
    """The texts of the file ``source`` (``-``: stdin) with their targets (``parse_pairs``), within ``max_bytes`` and
    at most ``max_dimension`` texts."""
    limits = limits or Limits.from_env()
    raw, name = read_bytes(source, limits)
    return parse_pairs(raw, name, limits.max_dimension)
