"""Names a package resolves on first use (PEP 562), so that importing it loads none of the modules behind them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazily(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``modules`` imported from the module it maps to when
    first asked for; any other name is an AttributeError, as Python words it."""

    def attribute(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return attribute
