"""The YAML side of input documents: a SafeLoader that refuses aliases, tags and deep nesting.

Kept apart from ``documents`` so that PyYAML is imported only when a YAML document is read.
"""

from __future__ import annotations

from typing import Any

import yaml

from attnx.errors import ConfigError, InputError, LimitError
from attnx.io.documents import clip, depth_problem, first_clause, located
from attnx.limits import Limits

PLAIN_COLLECTIONS = ("tag:yaml.org,2002:seq", "tag:yaml.org,2002:map")


def child(node: yaml.Node | None, part: str | int, *, key: bool = False) -> yaml.Node | None:
    """The node at ``part`` (a mapping key or a list index) under ``node``; its key node with ``key``."""
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key_node, value in node.value:
            if key_node.value == part:
                return key_node if key else value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None


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
            raise LimitError(f"{self.located(self.peek_event())}: {depth_problem(self.limits, self.depth)}")
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


def parse_yaml(text: str, name: str, limits: Limits) -> tuple[Any, yaml.Node | None]:
    """Plain Python data and the node tree of YAML ``text``; every failure is one located AttnxError."""
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
        where = located(name, text, exc.position)
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
