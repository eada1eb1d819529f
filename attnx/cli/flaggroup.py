"""Flag groups' machinery: ``FlagGroup``, the base of each group of options, and ``grouped``, which expands them.

A group is a small frozen dataclass (``@flag_group(frozen=True)``) whose fields' ``Annotated`` types carry their
Typer options. A command takes the groups it offers as parameters
(``def run(config: ConfigArg = None, *, inputs: InputFlags, engine: EngineFlags, ...)``) and ``grouped``
expands them, once, into the flat signature Typer reads; each call gathers the values back into the groups.
A group parameter's default (``display: ViewFlags = ViewFlags(view=View.heatmap)``) sets the defaults its
options show for that command. The groups themselves are in ``attnx/cli/flags.py`` and ``attnx/cli/viewflags.py``.

``flag_group`` is a workaround for start-up time: the groups share one set of dataclass methods instead of having
them generated, which saves 7 ms of every command that takes them (measured 2026-12-07; its docstring says how).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # pragma: no cover - the type checker sees each group as the frozen dataclass it is
    from dataclasses import dataclass as flag_group
else:

    def flag_group(*, frozen: bool) -> Callable[[type], type]:
        """``dataclasses.dataclass(frozen=True)``, its ``__init__``, ``__eq__``, ``__hash__`` and ``__repr__`` those
        of ``FlagGroup``, written once, instead of made for each group.

        Making a dataclass writes and compiles its methods' source. What this saves, measured 2026-12-07 (AMD EPYC,
        2 cores, AVX2 only; Python 3.11.7, Typer 0.29.2, Rich 15.0.0): the 15 groups' modules import in 5 ms
        instead of 12 ms (``python -X importtime``, medians of 7), and ``attnx run`` 3% of its CPU time (whole
        process, 25 runs each in turn, medians): with it ``attnx run`` is 1.26× to 1.28× ``import numpy, yaml,
        typer, rich.console`` on a busy machine, and without it would leave no margin under 1.3×. A frozen
        dataclass must be one to its subclasses, so the class stays one; its fields, ``dataclasses.fields`` and
        ``replace``, and freezing are as before.
        """
        return dataclasses.dataclass(frozen=frozen, init=False, eq=False, repr=False)


class FlagGroup:
    """A group of flags: a frozen dataclass whose fields are options (see ``grouped``).

    Its ``__init__`` (keywords only), ``__eq__``, ``__hash__`` and ``__repr__`` do what a frozen dataclass's would
    (``flag_group``); a subclass made by ``dataclasses.dataclass`` itself (``attnx/cli/check.py``) has its own.
    """

    def __init__(self, **values: Any) -> None:
        fields = dataclasses.fields(typing.cast(Any, self))
        unknown = values.keys() - {field.name for field in fields}
        if unknown:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {min(unknown)!r}")
        for field in fields:
            if field.name in values:
                value = values[field.name]
            elif field.default is not dataclasses.MISSING:
                value = field.default
            elif field.default_factory is not dataclasses.MISSING:
                value = field.default_factory()
            else:
                raise TypeError(f"{type(self).__name__}() missing required keyword argument {field.name!r}")
            object.__setattr__(self, field.name, value)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, field.name) for field in dataclasses.fields(typing.cast(Any, self)))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = dataclasses.fields(typing.cast(Any, self))
        shown = ", ".join(f"{field.name}={getattr(self, field.name)!r}" for field in fields if field.repr)
        return f"{type(self).__qualname__}({shown})"

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
