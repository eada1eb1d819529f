"""A decoder's rope settings as config.json holds them, flat or nested by layer type, one mapping per layer type.

Two forms exist. Older configs keep ``rope_theta`` (and ``partial_rotary_factor``) at the top level with a
``rope_scaling`` object; transformers 5 writes one ``rope_parameters`` object holding them all, or, where layers
differ (Gemma 3), one per layer type: ``{"full_attention": {...}, "sliding_attention": {...}}``. Gemma 3's older
configs give the sliding layers their own base instead (``rope_local_base_freq``). ``rope_mappings`` reads
either form into one mapping per layer type; ``Rotary.from_config`` (attnx/core/positions.py) makes each a
``Rotary`` and refuses a rope type or key it does not know.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from attnx.errors import ModelError
from attnx.models.checkpoint import Checkpoint

FULL, SLIDING = "full_attention", "sliding_attention"
LAYER_TYPES = (FULL, SLIDING)  # the layer types attnx runs (``layer_types`` in config.json)


def rope_source(checkpoint: Checkpoint) -> dict[str, Any]:
    """The rope object of config.json: ``rope_scaling`` where it is set (transformers reads it first), else
    ``rope_parameters`` (empty: neither). Both set and different is a ModelError: attnx does not pick one."""
    scaling, parameters = checkpoint.mapping("rope_scaling"), checkpoint.mapping("rope_parameters")
    if scaling and parameters and scaling != parameters:
        raise ModelError(
            f"{checkpoint.config_path}: rope_scaling and rope_parameters are both set and differ; keep one"
        )
    return dict(scaling or parameters or {})


def rope_mappings(
    checkpoint: Checkpoint, types: Collection[str], local: tuple[str, float] | None = None
) -> dict[str, Mapping[str, Any]]:
    """The rope mapping of each layer type in ``types``, as ``Rotary.from_config`` reads it.

    A nested object (its keys are layer types) must hold one for each of ``types``. A flat one serves every
    type, except, where the family names ``local`` (a config key and its default, Gemma 3's
    ``rope_local_base_freq`` and 10 000), the sliding layers, which turn by that base, unscaled, as
    transformers reads such configs.
    """
    where = checkpoint.config_path
    source = rope_source(checkpoint)
    if not any(key in LAYER_TYPES for key in source):
        mappings: dict[str, Mapping[str, Any]] = dict.fromkeys(types, source)
        if local is not None and SLIDING in types:
            key, default = local
            mappings[SLIDING] = {"rope_type": "default", "rope_theta": checkpoint.number(key, default, low=1)}
        return mappings
    odd = sorted(key for key in source if key not in LAYER_TYPES)
    if odd:
        raise ModelError(f"{where}: rope_parameters mixes layer types with {odd[0]!r}; expected one object per type")
    missing = sorted(set(types) - set(source))
    if missing:
        raise ModelError(f"{where}: rope_parameters has no entry for the {missing[0]} layers")
    for kind in types:
        if not isinstance(source[kind], dict):
            raise ModelError(f"{where}: rope_parameters {kind} must be an object, got {source[kind]!r:.60}")
    return {kind: source[kind] for kind in types}
