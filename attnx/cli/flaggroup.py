"""Flag groups' machinery: ``FlagGroup``, the base of each group of options, and ``grouped``, which expands them.

A group is a small frozen dataclass (``@dataclasses.dataclass(frozen=True)``) whose fields' ``Annotated`` types
carry their Typer options. A command takes the groups it offers as parameters
(``def run(config: ConfigArg = None, *, inputs: InputFlags, engine: EngineFlags, ...)``) and ``grouped``
expands them, once, into the flat signature Typer reads; each call gathers the values back into the groups.
A group parameter's default (``display: ViewFlags = ViewFlags(view=View.heatmap)``) sets the defaults its
options show for that command. The groups themselves are in ``attnx/cli/flags.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])


class FlagGroup:
    """A group of flags: the base of each frozen dataclass whose fields are options (see ``grouped``)."""

    def given(self) -> dict[str, object]:
        """Each flag of the group as typed on the command line (``-H/--heads``, ``--seed``) -> its value (None or
        False when not given), for messages that name the first one given."""
        fields = dataclasses.fields(typing.cast(Any, self))  # every group is a dataclass
        return {_flag_of(type(self), field.name): getattr(self, field.name) for field in fields}


@functools.cache
def _hints(group: type) -> dict[str, Any]:
    """The resolved ``Annotated`` types of a group's fields (read once per group)."""
    return typing.get_type_hints(group, include_extras=True)


def _flag_of(group: type, name: str) -> str:
    """How a field of ``group`` is typed on the command line, short form first: ``-H/--heads``, ``--seed``."""
    for extra in getattr(_hints(group)[name], "__metadata__", ()):
        if isinstance(extra, typer.models.OptionInfo):
            decls = [d for d in (extra.default, *(extra.param_decls or ())) if isinstance(d, str) and d.startswith("-")]
            return "/".join(sorted(decls, key=len))
    return "--" + name.replace("_", "-")


def _is_group(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, FlagGroup) and dataclasses.is_dataclass(annotation)


def grouped(command: F) -> F:
    """``command`` with each FlagGroup parameter expanded into its options (the signature Typer reads).

    The options keep the group's field order; two groups that declare the same option name are an error
    when the command is defined, not when it runs.
    """
    hints = typing.get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for parameter in inspect.signature(command).parameters.values():
        annotation = hints[parameter.name]
        if not _is_group(annotation):
            parameters.append(parameter.replace(annotation=annotation, kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        base = None if parameter.default is inspect.Parameter.empty else parameter.default
        names = [field.name for field in dataclasses.fields(annotation)]
        groups[parameter.name] = (annotation, names)
        for field in dataclasses.fields(annotation):
            default = getattr(base, field.name) if base is not None else field.default
            parameters.append(
                inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                  annotation=_hints(annotation)[field.name])
            )  # fmt: skip
    seen = [parameter.name for parameter in parameters]
    twice = sorted({name for name in seen if seen.count(name) > 1})
    if twice:
        raise TypeError(f"{command.__name__}: options declared twice: {', '.join(twice)}")

    @functools.wraps(command)
    def expanded(**values: Any) -> Any:
        for name, (group, fields) in groups.items():
            values[name] = group(**{field: values.pop(field) for field in fields})
        return command(**values)

    expanded.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    expanded.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return typing.cast(F, expanded)
