"""Reading YAML and JSON input documents, keeping where every value was written."""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnx.environment import current
from attnx.errors import AttnxError, ConfigError, InputError, LimitError
from attnx.io import jsontext
from attnx.io.messages import depth_problem, first_clause, located
from attnx.io.output import note_read
from attnx.limits import Limits, size_text

if TYPE_CHECKING:  # pragma: no cover
    import yaml

STDIN = "-"

Path_ = tuple[str | int, ...]


def format_path(path: Path_) -> str:
    """``("q", 2, 1)`` -> ``"q[2][1]"``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@dataclass(frozen=True)
class Document:
    """A parsed input document: plain Python data plus a way to locate any value in the source.

    ``name`` is what messages call the source (a path, ``<stdin>`` or a description). For YAML the
    composed node tree is kept, for JSON the text, so that ``where(path)`` can answer
    ``file:line:column``. ``limits`` are the caps the document was read under; the schema checks
    what it builds against them too.
    """

    data: dict[str, Any]
    name: str
    root: yaml.Node | None = field(default=None, repr=False)
    text: str | None = field(default=None, repr=False)
    limits: Limits = field(default=Limits(), repr=False)

    def where(self, path: Path_ = (), *, key: bool = False) -> str:
        """``name:line:column`` of the value at ``path`` (of its key, with ``key``), or just ``name``."""
        if self.text is not None and path:
            offset = jsontext.value_offset(self.text, path, key=key)
            return self.name if offset is None else f"{self.name}:{jsontext.line_col(self.text, offset)}"
        if self.root is None:
            return self.name
        from attnx.io.yamltext import child  # a node tree exists only if YAML was read

        node: yaml.Node | None = self.root
        for i, part in enumerate(path):
            node = child(node, part, key=key and i == len(path) - 1)
            if node is None:
                return self.name
        if node is None or not path:
            return self.name
        mark = node.start_mark
        return f"{self.name}:{mark.line + 1}:{mark.column + 1}"

    def error(
        self, path: Path_, message: str, *, key: bool = False, kind: type[AttnxError] = ConfigError
    ) -> AttnxError:
        """An error (a ConfigError unless ``kind`` says) located at ``path``: ``file:line:col: q[2][1]: message``."""
        label = format_path(path)
        return kind(f"{self.where(path, key=key)}: {label + ': ' if label else ''}{message}")


def read_bytes(source: str, limits: Limits | None = None) -> tuple[bytes, str]:
    """The bytes of ``source`` (a path, or ``-`` for the stdin of the environment in force) and its name, never
    more than ``max_bytes``.

    A regular file's size is checked before it is opened; stdin, pipes and devices are read up to
    one byte past the cap, so an endless stream ends with the same error.
    """
    limits = limits or Limits.from_env()
    if source == STDIN:
        name = "<stdin>"
        stream = getattr(current().stdin, "buffer", None)
        if stream is None:  # `attnx run - <&-`: no stdin at all
            raise InputError(f"{name}: stdin is closed; pipe the input in, or give a file")
        try:
            raw = stream.read(limits.max_bytes + 1)
        except (OSError, ValueError) as exc:  # ValueError: a closed file object
            raise InputError(f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    else:
        name = source
        try:
            info = os.stat(source)
            if stat.S_ISDIR(info.st_mode):
                raise InputError(f"{name}: is a directory, expected an input file")
            if stat.S_ISREG(info.st_mode):
                limits.check_bytes(info.st_size, name)
            with open(source, "rb") as stream:
                raw = stream.read(limits.max_bytes + 1)
            note_read(source)
        except FileNotFoundError:
            raise InputError(f"{name}: no such file") from None
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise InputError(f"{name}: cannot read: {reason}") from None
    if len(raw) > limits.max_bytes:
        found = f"a stream longer than {size_text(limits.max_bytes)}"
        raise LimitError(f"{name}: {limits.exceeded('max_bytes', found)}")
    return raw, name


def decode_text(raw: bytes, name: str) -> str:
    """``raw`` as UTF-8 text (a byte-order mark is dropped); empty text is an error."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    if not text.strip():
        raise InputError(f"{name}: is empty, expected a YAML or JSON mapping")
    return text


def read_text(source: str, limits: Limits | None = None) -> tuple[str, str]:
    """Read ``source`` (a path, or ``-`` for stdin) as UTF-8 text; return ``(text, name)``."""
    raw, name = read_bytes(source, limits)
    return decode_text(raw, name), name


def parse_document(text: str, name: str, limits: Limits | None = None) -> Document:
    """Parse YAML or JSON text (JSON when the name ends in .json or the text starts with ``{``)."""
    limits = limits or Limits.from_env()
    if name.lower().endswith(".json") or text.lstrip().startswith("{"):
        limits.check_bytes(_utf8_size(text, limits.max_bytes), name)
        data, root, source = _parse_json(text, name, limits), None, text
    else:
        limits.check_bytes(_utf8_size(text, limits.max_yaml_bytes), name, "max_yaml_bytes")
        from attnx.io.yamltext import parse_yaml  # PyYAML is imported only when YAML is read

        (data, root), source = parse_yaml(text, name, limits), None
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a mapping of keys (q, k, v, heads, ...) at the top level")
    return Document(data, name, root, source, limits)


def load_document(source: str, limits: Limits | None = None) -> Document:
    """Read and parse one input document."""
    limits = limits or Limits.from_env()
    text, name = read_text(source, limits)
    return parse_document(text, name, limits)


def _utf8_size(text: str, cap: int) -> int:
    """Bytes of ``text`` in UTF-8, or just its length when that alone is over ``cap``."""
    return len(text) if len(text) > cap else len(text.encode("utf-8", "surrogatepass"))


class _DuplicateKey(Exception):
    """Stops ``json.loads`` at a repeated key; the key is located in the text afterwards."""


def _parse_json(text: str, name: str, limits: Limits) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise _DuplicateKey(key)
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except _DuplicateKey as exc:
        key = exc.args[0]
        raise ConfigError(f"{located(name, text, jsontext.duplicate_key(text, key))}: duplicate key {key!r}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        offset, level = jsontext.too_deep(text, limits.max_depth) or (None, limits.max_depth + 1)
        raise LimitError(f"{located(name, text, offset)}: {depth_problem(limits, level)}") from None
    except ValueError as exc:  # an integer longer than Python converts (4300 digits)
        where = located(name, text, jsontext.long_integer(text, _int_digits()))
        raise InputError(f"{where}: invalid JSON: {first_clause(exc)}") from None


def _int_digits() -> int:
    """How many digits Python converts to an int (``sys.get_int_max_str_digits``, 4300 by default)."""
    return getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300
