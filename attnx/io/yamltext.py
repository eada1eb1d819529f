"""The YAML side of input documents: a SafeLoader with YAML 1.2 core-schema scalars and bounded aliases.

Kept apart from ``documents`` so that PyYAML is imported only when a YAML document is read.

Scalars resolve as YAML 1.2's core schema does, not as PyYAML's YAML 1.1 default:

- ``null``, ``Null``, ``NULL``, ``~`` and nothing are null;
- only ``true``/``True``/``TRUE`` and ``false``/``False``/``FALSE`` are booleans (``on``, ``off``,
  ``yes``, ``no``, ``y``, ``n`` are text, so ``tokens: [The, cat, sat, on, mat]`` means what it says);
- ``[-+]?[0-9]+`` are decimal integers (``012`` is twelve), ``0o17`` octal, ``0x1F`` hexadecimal;
- ``1e-3``, ``1e3``, ``.5``, ``-1.5E+2``, ``.inf``, ``-.Inf``, ``.nan`` are floats;
- everything else is text: no sexagesimal numbers (``1:30``), no timestamps, no ``1_000``.

Explicit tags may name only those types (``!!str``, ``!!int``, ``!!float``, ``!!bool``, ``!!null``,
``!!seq``, ``!!map``); any other tag is refused before anything is built. Merge keys (``<<``) are
refused: YAML 1.2 has none, and an input is one flat mapping with nothing to merge.

Aliases (``k: *q``) are accepted within a bound: while composing, every node's expanded size
(nodes, counting each alias as the whole value it stands for) and depth are measured, and a value
that expands past the element cap or the depth cap is refused at its place, before anything is
built; a billion laughs stops after a few hundred bytes of parsing. An alias to a value that
contains it (a structure with no end) is refused. A value reached through several aliases is built
once and shared.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, ClassVar

import yaml

from attnx.errors import ConfigError, InputError, LimitError
from attnx.io.messages import clip, depth_problem, first_clause, located
from attnx.limits import Limits

PLAIN_COLLECTIONS = ("tag:yaml.org,2002:seq", "tag:yaml.org,2002:map")
TAG = "tag:yaml.org,2002:"
CORE_SCALARS = tuple(TAG + name for name in ("str", "int", "float", "bool", "null"))

# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), in resolution order.
NULL = re.compile(r"(?:~|null|Null|NULL|)\Z")
BOOL = re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z")
INT = re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z")
FLOAT = re.compile(
    r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
)


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
    """SafeLoader with YAML 1.2 core-schema scalars that bounds nesting and alias expansion while composing."""

    # Resolvers from scratch: none of PyYAML's YAML 1.1 ones (yes/no/on/off, 1_000, 1:30, timestamps, <<, =).
    # (A class attribute in PyYAML, declared as an instance variable in the types-PyYAML stub.)
    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, re.Pattern[str]]]]] = {}  # type: ignore[misc]

    def __init__(self, stream: str, name: str, limits: Limits) -> None:
        super().__init__(stream)
        self.name = name
        self.limits = limits
        self.depth = 0
        # id(node) -> (expanded size in nodes, expanded depth, whether an alias is inside); set once composed
        self.measured: dict[int, tuple[int, int, bool]] = {}
        self.shared: set[int] = set()  # ids of nodes some alias points at
        self.built: dict[int, Any] = {}  # their Python values, built once

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = _composed(super().compose_node(parent, index))  # the anchored node (an undefined alias: an error)
            if id(node) not in self.measured:
                raise ConfigError(
                    f"{self.located(event)}: YAML alias *{clip(event.anchor)} is used inside the value it names "
                    "(a structure with no end)"
                )
            self.shared.add(id(node))
            deepest = self.depth + self.measured[id(node)][1]  # the alias stands at level depth + 1
            if deepest > self.limits.max_depth:
                raise LimitError(
                    f"{self.located(event)}: through YAML alias *{clip(event.anchor)}: "
                    f"{depth_problem(self.limits, deepest)}"
                )
            return node
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise LimitError(f"{self.located(self.peek_event())}: {depth_problem(self.limits, self.depth)}")
        try:
            node = _composed(super().compose_node(parent, index))
        finally:
            self.depth -= 1
        self._measure(node)
        return node

    def _measure(self, node: yaml.Node) -> None:
        """Record the expanded size and depth of a node just composed; refuse aliases that expand past the cap."""
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            self.measured[id(node)] = (1, 1, False)
            return
        size, depth, aliased = 1, 1, False
        for item in children:
            item_size, item_depth, item_aliased = self.measured[id(item)]
            size += item_size
            depth = max(depth, item_depth + 1)
            aliased = aliased or item_aliased or id(item) in self.shared
        if aliased and size > self.limits.max_elements:
            found = f"a value that YAML aliases expand to {size:,} nodes"
            raise LimitError(f"{self.located(node)}: {self.limits.exceeded('max_elements', found)}")
        self.measured[id(node)] = (size, depth, aliased)

    def located(self, item: yaml.Node | yaml.Event) -> str:
        """``name:line:column`` where ``item`` starts."""
        mark = item.start_mark  # the parser marks every event and node it makes (the stub says Optional)
        return self.name if mark is None else f"{self.name}:{mark.line + 1}:{mark.column + 1}"

    def construct_scalar_value(self, node: yaml.Node) -> Any:
        """The Python value of scalar ``node``; a tag outside the core schema is a ConfigError, and a value its
        tag cannot hold an InputError, at its place."""
        if node.tag not in CORE_SCALARS:
            raise ConfigError(
                f"{self.located(node)}: YAML tag {clip(node.tag, 60)!r} is not accepted; "
                "write a plain number, text, true/false or null"
            )
        try:
            return self.construct_object(node)
        except (ValueError, OverflowError, KeyError, AttributeError, TypeError, IndexError) as exc:
            shown = clip(node.id if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)) else str(node.value))
            kind = node.tag.rsplit(":", 1)[-1]
            raise InputError(f"{self.located(node)}: cannot read {shown!r} as {kind}: {first_clause(exc)}") from None


def _composed(node: yaml.Node | None) -> yaml.Node:
    """``node``, which PyYAML's composer always makes (its stub says Optional)."""
    if node is None:
        raise RuntimeError("PyYAML composed no node where it always composes one")
    return node


def _construct_null(loader: _Loader, node: yaml.ScalarNode) -> None:
    if not NULL.match(node.value):
        raise ValueError("expected null, Null, NULL or ~")


def _construct_bool(loader: _Loader, node: yaml.ScalarNode) -> bool:
    if not BOOL.match(node.value):
        raise ValueError("expected true or false")
    return node.value.lower() == "true"


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    text = node.value
    if not INT.match(text):
        raise ValueError("expected a YAML 1.2 integer (123, -4, 0o17, 0x1F)")
    if text.startswith(("0o", "0x")):
        value = int(text[2:], 8 if text[1] == "o" else 16)
        if value.bit_length() > _int_digits() * math.log2(10):  # str() of it would fail later
            raise ValueError(f"Exceeds the limit ({_int_digits()} digits) for integer string conversion")
        return value
    return int(text, 10)  # a decimal beyond Python's digit limit raises ValueError, as in JSON


def _construct_float(loader: _Loader, node: yaml.ScalarNode) -> float:
    text = node.value
    if not FLOAT.match(text):
        raise ValueError("expected a YAML 1.2 float (1.5, 1e-3, .5, .inf, .nan)")
    if text.lower().endswith(".inf"):
        return -math.inf if text.startswith("-") else math.inf
    if text.lower() == ".nan":
        return math.nan
    return float(text)


def _int_digits() -> int:
    """How many digits Python converts to an int (``sys.get_int_max_str_digits``, 4300 by default; 0 is none)."""
    return getattr(sys, "get_int_max_str_digits", lambda: 4300)() or sys.maxsize


_Loader.add_implicit_resolver(TAG + "null", NULL, ["~", "n", "N", ""])
_Loader.add_implicit_resolver(TAG + "bool", BOOL, list("tTfF"))
_Loader.add_implicit_resolver(TAG + "int", INT, list("-+0123456789"))
_Loader.add_implicit_resolver(TAG + "float", FLOAT, list("-+0123456789."))
_Loader.add_constructor(TAG + "null", _construct_null)
_Loader.add_constructor(TAG + "bool", _construct_bool)
_Loader.add_constructor(TAG + "int", _construct_int)
_Loader.add_constructor(TAG + "float", _construct_float)


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
    """Build plain Python values from composed nodes, refusing tagged collections, merge keys, duplicate and
    non-string keys. A node that aliases point at is built once; every alias gives that same value."""
    if id(node) in loader.built:
        return loader.built[id(node)]
    if isinstance(node, yaml.CollectionNode) and node.tag not in PLAIN_COLLECTIONS:
        raise ConfigError(
            f"{loader.located(node)}: YAML tag {clip(node.tag, 60)!r} is not accepted; write a plain list or mapping"
        )
    value: Any
    if isinstance(node, yaml.SequenceNode):
        value = [_to_python(item, loader) for item in node.value]
    elif isinstance(node, yaml.MappingNode):
        value = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                got = "a list" if isinstance(key_node, yaml.SequenceNode) else "a mapping"
                raise ConfigError(f"{loader.located(key_node)}: keys must be strings, got {got}")
            key = loader.construct_scalar_value(key_node)
            if not isinstance(key, str):
                raise ConfigError(f"{loader.located(key_node)}: keys must be strings, got {clip(repr(key), 40)}")
            if key == "<<" and key_node.style is None:
                raise ConfigError(
                    f"{loader.located(key_node)}: merge keys (<<) are not accepted (YAML 1.2 has none); "
                    "write the keys out, or alias a whole value (k: *q)"
                )
            if key in value:
                raise ConfigError(f"{loader.located(key_node)}: duplicate key {key!r}")
            value[key] = _to_python(value_node, loader)
    else:
        value = loader.construct_scalar_value(node)
    if id(node) in loader.shared:
        loader.built[id(node)] = value
    return value
