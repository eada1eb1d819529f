"""Reading YAML and JSON input documents, keeping where every value was written."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnx.errors import ConfigError, InputError

if TYPE_CHECKING:  # pragma: no cover
    import yaml

STDIN = "-"
MAX_DEPTH = 32

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
    composed node tree is kept so that ``where(path)`` can answer ``file:line:column``.
    """

    data: dict[str, Any]
    name: str
    root: yaml.Node | None = field(default=None, repr=False)

    def where(self, path: Path_ = (), *, key: bool = False) -> str:
        """``name:line:column`` of the value at ``path`` (of its key, with ``key``), or just ``name``."""
        node = self.root
        for i, part in enumerate(path):
            node = _child(node, part, key=key and i == len(path) - 1)
            if node is None:
                return self.name
        if node is None or not path:
            return self.name
        mark = node.start_mark
        return f"{self.name}:{mark.line + 1}:{mark.column + 1}"

    def error(self, path: Path_, message: str, *, key: bool = False) -> ConfigError:
        """A ConfigError located at ``path``: ``file:line:col: q[2][1]: message``."""
        label = format_path(path)
        return ConfigError(f"{self.where(path, key=key)}: {label + ': ' if label else ''}{message}")


def _child(node: yaml.Node | None, part: str | int, *, key: bool = False) -> yaml.Node | None:
    import yaml  # a node exists only if YAML was parsed, so this import is free

    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key_node, value in node.value:
            if key_node.value == part:
                return key_node if key else value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None


def read_text(source: str) -> tuple[str, str]:
    """Read ``source`` (a path, or ``-`` for stdin) as UTF-8 text; return ``(text, name)``."""
    if source == STDIN:
        name, raw = "<stdin>", sys.stdin.buffer.read()
    else:
        name, path = source, Path(source)
        if path.is_dir():
            raise InputError(f"{name}: is a directory, expected an input file")
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{name}: no such file") from None
        except OSError as exc:
            raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    if not text.strip():
        raise InputError(f"{name}: is empty, expected a YAML or JSON mapping")
    return text, name


def parse_document(text: str, name: str) -> Document:
    """Parse YAML or JSON text (JSON when the name ends in .json or the text starts with ``{``)."""
    if name.lower().endswith(".json") or text.lstrip().startswith("{"):
        data, root = _parse_json(text, name), None
    else:
        data, root = _parse_yaml(text, name)
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a mapping of keys (q, k, v, heads, ...) at the top level")
    return Document(data, name, root)


def load_document(source: str) -> Document:
    """Read and parse one input document."""
    return parse_document(*read_text(source))


def _parse_json(text: str, name: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ConfigError(f"{name}: duplicate key {key!r}")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{name}: JSON nested too deeply") from None


@cache
def _loader_class() -> type:
    """The YAML loader, built on first use: PyYAML is imported only when YAML is read."""
    import yaml

    class _Loader(yaml.SafeLoader):
        """SafeLoader that refuses aliases and deep nesting while composing."""

        def __init__(self, stream: str, name: str) -> None:
            super().__init__(stream)
            self.name = name
            self.depth = 0

        def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:  # type: ignore[override]
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"{self.name}:{mark.line + 1}:{mark.column + 1}: YAML aliases (*name) are not accepted; "
                    "write the values out"
                )
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"{self.name}:{mark.line + 1}:{mark.column + 1}: nested more than {MAX_DEPTH} levels deep"
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return _Loader


def _parse_yaml(text: str, name: str) -> tuple[Any, yaml.Node | None]:
    import yaml

    loader = _loader_class()(text, name)
    try:
        root = loader.get_single_node()
        return (_to_python(root, loader, name) if root is not None else None), root
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise InputError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{name}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _to_python(node: yaml.Node, loader: yaml.SafeLoader, name: str) -> Any:
    """Build plain Python values from composed nodes, refusing duplicate and non-string keys."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, loader, name) for item in node.value]
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            mark = key_node.start_mark
            where = f"{name}:{mark.line + 1}:{mark.column + 1}"
            if not isinstance(key, str):
                raise ConfigError(f"{where}: keys must be strings, got {key!r}")
            if key in out:
                raise ConfigError(f"{where}: duplicate key {key!r}")
            out[key] = _to_python(value_node, loader, name)
        return out
    return loader.construct_object(node)
