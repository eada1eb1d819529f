"""attnx: compute multi-head attention and show every step of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnx.lazy import lazily

__version__ = "0.1.0"

__all__ = [
    "AttentionResult",
    "AttentionSpec",
    "AttnxError",
    "InputOverrides",
    "Placement",
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
    from attnx.engines.placement import Placement
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
    "Placement": "attnx.engines.placement",
    "SettingOverrides": "attnx.core.overrides",
    "open_model": "attnx.models",
    "reference": "attnx.testing",
}


__getattr__ = lazily(__name__, _LAZY)
