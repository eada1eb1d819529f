"""Command-line values converted without pydantic where they plainly fit: Typer's own conversion for the rest.

From 0.29 Typer converts every parameter of the command that runs through a pydantic ``TypeAdapter``, a default of
None included. What this module saves, measured 2026-12-07 (whole process, 15 runs each in turn, medians; AMD EPYC,
2 cores, AVX2 only; Python 3.11.7, Typer 0.29.2, Rich 15.0.0, pydantic 2.14.3): ``attnx run`` takes 0.29 s wall
(0.40 s CPU) with it and 0.42 s (0.53 s CPU) without, 0.13 s; the floor, ``import numpy, yaml, typer,
rich.console``, is 0.33 s wall. attnx's parameters take a handful of types (str, bool, int and float with bounds,
Enums, lists of str or int), so ``fast`` converts a value that plainly is one of them (``3`` for an int of at least
1, ``numpy`` for the Engine) and hands everything else (a value out of bounds, ``x`` for an int, an unknown choice,
``1_000``) to Typer's own ``process_value``: every error message stays Typer's. Typer before 0.29 converts through
Click's types and is left as it is.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, get_args, get_origin

INTEGER = re.compile(r"[+-]?[0-9]+")
DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
UNSURE = object()  # ``fast`` leaves this value to Typer


def fast(annotation: Any, low: float | None, high: float | None, value: Any) -> Any:
    """``value`` as ``annotation`` when it plainly is one (within ``low``/``high`` for numbers), else ``UNSURE``."""
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        if isinstance(value, annotation):
            return value
        return next((member for member in annotation if member.value == value), UNSURE)
    if annotation is str or annotation is bool:
        return value if isinstance(value, annotation) else UNSURE
    if annotation is int or annotation is float:
        number = _number(annotation, value)
        if number is UNSURE or (low is not None and number < low) or (high is not None and number > high):
            return UNSURE
        return number
    return UNSURE


def _number(annotation: type, value: Any) -> Any:
    """``value`` as an int or a float when it is one already or written plainly (``3``, ``-0.5``, ``1e-3``)."""
    plain = type(value) is annotation or (annotation is float and type(value) is int)
    if not plain and not (isinstance(value, str) and (INTEGER if annotation is int else DECIMAL).fullmatch(value)):
        return UNSURE
    return int(value) if annotation is int else float(value)


def converted(param: Any, value: Any) -> Any:
    """``value`` of Typer parameter ``param`` converted by ``fast`` (each item of a list), or ``UNSURE``."""
    descriptor = param.type_descriptor
    annotation, info = descriptor.annotation, descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None or info.clamp or not info.case_sensitive:
        return UNSURE
    multiple = param.multiple or param.nargs == -1
    if value is None:
        return () if multiple else None
    if multiple:
        if get_origin(annotation) is not list or not isinstance(value, (list, tuple)):
            return UNSURE
        (item,) = get_args(annotation)
        items = [fast(item, info.min, info.max, one) for one in value]
        return UNSURE if any(one is UNSURE for one in items) else items
    return fast(annotation, info.min, info.max, value)


def lighten(param: Any) -> None:
    """Give Typer parameter ``param`` the fast path (Typer 0.29 and later; other parameters are left alone)."""
    if hasattr(param, "type_descriptor") and not isinstance(param, _Light):
        param.__class__ = _light(type(param))


class _Light:
    """Marks a parameter class made by ``_light``."""


_MADE: dict[type, type] = {}


def _light(base: type) -> type:
    """``base`` (TyperOption, TyperArgument) whose ``process_value`` tries ``converted`` before Typer's own."""
    if base not in _MADE:

        def process_value(self: Any, ctx: Any, value: Any) -> Any:
            found = converted(self, value)
            if found is UNSURE or (self.required and self.value_is_missing(found)):
                return base.process_value(self, ctx, value)  # type: ignore[attr-defined]
            return found if self.callback is None else self.callback(ctx, self, found)

        _MADE[base] = type(f"Light{base.__name__}", (base, _Light), {"process_value": process_value})
    return _MADE[base]
