"""SettingOverrides: settings that replace an input's own, applied the same way to files and to models."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from attnx.core.positions import Rotary
from attnx.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.spec import AttentionSpec

# Fields of a spec's rotary positions that an override may replace, by the override's name.
ROTARY_FIELDS = MappingProxyType({"rope_theta": "theta", "rope_pairs": "pairs"})


@dataclass(frozen=True)
class SettingOverrides:
    """Settings to replace, by ``AttentionSettings`` field name (``heads``, ``scale``, ``causal``, ``window``, ...),
    plus ``rope_theta`` and ``rope_pairs`` for the fields of the rotary positions (added where the input has none).

    ``heads`` re-splits the input (``AttentionSpec.with_heads``); ``kv_heads`` fewer than the input holds
    mean-pools its K/V heads (``AttentionSpec.with_kv_heads``); every other setting is checked by
    ``AttentionSettings`` as it is put in. A setting that is new needs no change here.
    """

    changes: Mapping[str, Any]

    def __init__(self, **changes: Any) -> None:
        object.__setattr__(self, "changes", MappingProxyType(dict(changes)))

    def get(self, name: str) -> Any:
        """The value given for setting ``name``, or None."""
        return self.changes.get(name)

    def apply(self, spec: AttentionSpec) -> AttentionSpec:
        """``spec`` with these settings in place of its own."""
        rest = dict(self.changes)
        heads, kv_heads = rest.pop("heads", None), rest.pop("kv_heads", None)
        if heads is not None and heads != spec.settings.heads:
            spec = spec.with_heads(heads)
        if kv_heads is not None and kv_heads != spec.settings.kv_heads:
            spec = spec.with_kv_heads(kv_heads)
        rotary = {ROTARY_FIELDS[name]: rest.pop(name) for name in list(rest) if name in ROTARY_FIELDS}
        if rotary:  # on the input's own rotary positions, if it has them
            try:
                rest["rotary"] = dataclasses.replace(spec.settings.rotary or Rotary(), **rotary)
            except ConfigError as exc:
                raise ConfigError(f"{spec.source}: {exc}") from None
        return spec.with_settings(**rest) if rest else spec
