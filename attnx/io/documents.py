"""Reading YAML and JSON input documents, keeping where every value was written."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import Any

import yaml

from attnx.errors import AttnxError, ConfigError, InputError, LimitError
from attnx.io import jsontext
from attnx.limits import Limits, size_text

STDIN = "-"
PLAIN_COLLECTIONS = ("tag:yaml.org,2002:seq", "tag:yaml.org,2002:map")

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
        node = self.root
        for i, part in enumerate(path):
            node = _child(node, part, key=key and i == len(path) - 1)
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


def _child(node: yaml.Node | None, part: str | int, *, key: bool = False) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key_node, value in node.value:
            if key_node.value == part:
                return key_node if key else value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None


def read_bytes(source: str, limits: Limits | None = None) -> tuple[bytes, str]:
    """The bytes of ``source`` (a path, or ``-`` for stdin) and its name, never more than ``max_bytes``.

    A regular file's size is checked before it is opened; stdin, pipes and devices are read up to
    one byte past the cap, so an endless stream ends with the same error.
    """
    limits = limits or Limits.from_env()
    if source == STDIN:
        name, raw = "<stdin>", sys.stdin.buffer.read(limits.max_bytes + 1)
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
        (data, root), source = _parse_yaml(text, name, limits), None
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


def _located(name: str, text: str, offset: int | None) -> str:
    return name if offset is None else f"{name}:{jsontext.line_col(text, offset)}"


def _depth_problem(limits: Limits, level: int) -> str:
    return limits.exceeded("max_depth", f"level {level} of nesting")


def first_clause(exc: Exception) -> str:
    """The message of ``exc`` up to its first ``;`` (Python's hints after it are for programmers)."""
    return str(exc).split(";")[0].strip()


def clip(text: str, width: int = 20) -> str:
    """``text``, cut to ``width`` characters with ``...`` when longer."""
    return text if len(text) <= width else text[: width - 3] + "..."


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
        raise ConfigError(f"{_located(name, text, jsontext.duplicate_key(text, key))}: duplicate key {key!r}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        offset, level = jsontext.too_deep(text, limits.max_depth) or (None, limits.max_depth + 1)
        raise LimitError(f"{_located(name, text, offset)}: {_depth_problem(limits, level)}") from None
    except ValueError as exc:  # an integer longer than Python converts (4300 digits)
        digits = re.search(rf"\d{{{_int_digits() + 1},}}", text)
        where = _located(name, text, digits.start() if digits else None)
        raise InputError(f"{where}: invalid JSON: {first_clause(exc)}") from None


def _int_digits() -> int:
    """How many digits Python converts to an int (``sys.get_int_max_str_digits``, 4300 by default)."""
    return getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and deep nesting while composing."""

    def __init__(self, stream: str, name: str, limits: Limits) -> None:
        super().__init__(stream)
        self.name = name
        self.limits = limits
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            raise ConfigError(
                f"{self.located(self.peek_event())}: YAML aliases (*name) are not accepted; write the values out"
            )
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise LimitError(f"{self.located(self.peek_event())}: {_depth_problem(self.limits, self.depth)}")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def located(self, item: yaml.Node | yaml.Event) -> str:
        """``name:line:column`` where ``item`` starts."""
        mark = item.start_mark
        return f"{self.name}:{mark.line + 1}:{mark.column + 1}"

    def construct_scalar_value(self, node: yaml.Node) -> Any:
        """The Python value of ``node``; a value its tag cannot hold is an InputError at its place.

        The SafeConstructor fails on such values with plain Python errors: ``2001-02-30`` (ValueError),
        an integer of 5000 digits (ValueError), ``!!bool maybe`` (KeyError), ``!!timestamp x``
        (AttributeError).
        """
        try:
            return self.construct_object(node)
        except (ValueError, OverflowError, KeyError, AttributeError, TypeError, IndexError) as exc:
            shown = clip(str(node.value) if isinstance(node, yaml.ScalarNode) else node.id)
            kind = node.tag.rsplit(":", 1)[-1]
            raise InputError(f"{self.located(node)}: cannot read {shown!r} as {kind}: {first_clause(exc)}") from None


def _parse_yaml(text: str, name: str, limits: Limits) -> tuple[Any, yaml.Node | None]:
    try:
        loader = _Loader(text, name, limits)  # the reader refuses unprintable characters right here
        try:
            root = loader.get_single_node()
            return (_to_python(root, loader) if root is not None else None), root
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        reason = ", ".join(part for part in (exc.context, exc.problem) if part)
        raise InputError(f"{where}: invalid YAML: {reason}") from None
    except yaml.reader.ReaderError as exc:
        where = _located(name, text, exc.position)
        raise InputError(f"{where}: invalid YAML: character U+{exc.character:04X} is not allowed") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{name}: invalid YAML: {first_clause(exc)}") from None


def _to_python(node: yaml.Node, loader: _Loader) -> Any:
    """Build plain Python values from composed nodes, refusing tagged collections, duplicate and non-string keys."""
    if isinstance(node, yaml.CollectionNode) and node.tag not in PLAIN_COLLECTIONS:
        raise ConfigError(
            f"{loader.located(node)}: YAML tag {node.tag!r} is not accepted; write a plain list or mapping"
        )
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, loader) for item in node.value]
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                got = "a list" if isinstance(key_node, yaml.SequenceNode) else "a mapping"
                raise ConfigError(f"{loader.located(key_node)}: keys must be strings, got {got}")
            key = loader.construct_scalar_value(key_node)
            if not isinstance(key, str):
                raise ConfigError(f"{loader.located(key_node)}: keys must be strings, got {clip(repr(key), 40)}")
            if key in out:
                raise ConfigError(f"{loader.located(key_node)}: duplicate key {key!r}")
            out[key] = _to_python(value_node, loader)
        return out
    return loader.construct_scalar_value(node)
