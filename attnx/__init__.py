"""attnx: compute multi-head attention and show every step of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "AttentionResult",
    "AttentionSpec",
    "AttnxError",
    "InputOverrides",
    "SettingOverrides",
    "__version__",
    "compute",
    "load_spec",
    "open_model",
    "reference",
]

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.overrides import SettingOverrides
    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec
    from attnx.engines import compute
    from attnx.errors import AttnxError
    from attnx.io import InputOverrides, load_spec
    from attnx.models import open_model
    from attnx.testing import reference

# The public names are resolved on first use so that `import attnx` (and `attnx --help`) stays
# cheap: NumPy is imported only by the modules that compute.
_LAZY = {
    "AttentionResult": "attnx.core.result",
    "AttentionSpec": "attnx.core.spec",
    "AttnxError": "attnx.errors",
    "compute": "attnx.engines",
    "load_spec": "attnx.io",
    "InputOverrides": "attnx.io",
    "SettingOverrides": "attnx.core.overrides",
    "open_model": "attnx.models",
    "reference": "attnx.testing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'attnx' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
