"""Gemma 3: Gemma 2's decoder with QK-norm, rotary positions per layer type and five sliding layers to one full."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from attnx.core.positions import Rotary
from attnx.errors import ModelError
from attnx.models.families.gemma import GEMMA2_LAYER, Gemma2, windowed
from attnx.models.gguf_form import REPLACED, GgufForm, Metadata, Read
from attnx.models.rope import FULL, LAYER_TYPES, SLIDING

LOCAL_BASE = ("rope_local_base_freq", 10000.0)  # the sliding layers' rope base in a flat config, and its default
GEMMA3_LARGE = 62  # the layers of Gemma 3 27B, whose scores llama.cpp scales by hidden / heads
GEMMA3_PATTERN = 6  # llama.cpp's Gemma 3: five sliding layers, then a full one


def gemma3_gguf(meta: Metadata, tensors: Mapping[str, Any], read: Read) -> tuple[dict[str, Any], dict[str, str]]:
    """A GGUF file's ``gemma3.*`` metadata: ``windowed``, the final cap where set, the layer types, and the rope by
    layer type (``rope.freq_base``, 10⁶, scaled, on the full layers; ``rope.freq_base_swa``, 10⁴, on the sliding)."""
    config, final = windowed(meta, "gemma3_text", tensors, GEMMA3_LARGE)
    config["final_logit_softcapping"] = final
    config["layer_types"] = gemma3_layers(meta, config["num_hidden_layers"])
    full = {"rope_type": "default", "rope_theta": meta.number("rope.freq_base") or 1_000_000.0}
    full.update(config.pop("rope_scaling", None) or {})  # llama.cpp scales the full layers only
    local = {"rope_type": "default", "rope_theta": meta.number("rope.freq_base_swa", "rope_local_base_freq") or 10000.0}
    config["rope_parameters"] = {FULL: full, SLIDING: local}
    del config["rope_theta"]
    return {key: value for key, value in config.items() if value is not None}, {}


def gemma3_layers(meta: Metadata, layers: int) -> list[str]:
    """Gemma 3's layer types: ``attention.sliding_window_pattern`` (a period, or one true per sliding layer), else
    llama.cpp's period of 6."""
    pattern = meta.get("attention.sliding_window_pattern", (int, list), "a whole number or a list", "layer_types")
    if isinstance(pattern, list):
        if len(pattern) != layers or not all(isinstance(flag, bool) for flag in pattern):
            raise ModelError(f"{meta.path}: {meta.key('attention.sliding_window_pattern')} must hold true or false "
                             f"for each of the {layers} layers")  # fmt: skip
        return [SLIDING if flag else FULL for flag in pattern]
    period = GEMMA3_PATTERN if pattern is None else pattern
    if isinstance(period, bool) or period < 1:
        raise ModelError(f"{meta.path}: {meta.key('attention.sliding_window_pattern')} must be positive")
    return [FULL if (layer + 1) % period == 0 else SLIDING for layer in range(layers)]


class Gemma3(Gemma2):
    """Gemma 3 (``gemma3_text``): as Gemma 2, plus ``q_norm`` and ``k_norm`` (RMSNorm by (1 + w)) on each head before
    RoPE, and RoPE by layer type: the sliding layers by ``rope_local_base_freq`` (10 000), the full ones by
    ``rope_theta`` (10⁶) with their own scaling. As transformers' Gemma 3: ``layer_types`` from
    ``sliding_window_pattern`` where absent, ``query_pre_attn_scalar`` 256 by default, no cap on the scores (a set
    ``attn_logit_softcapping`` is refused: transformers ignores it), the logits capped where
    ``final_logit_softcapping`` says."""

    name = "gemma3_text"
    family = "Gemma 3"
    stems = ("Gemma3", "Gemma3Text")
    qk_norm_over = "head"
    default_theta = 1_000_000.0
    local_rope = LOCAL_BASE
    reads = (Gemma2.reads - {"attn_logit_softcapping"}) | {LOCAL_BASE[0], "sliding_window_pattern"}
    gguf = GgufForm(("gemma3",), gemma3_gguf, layer=GEMMA2_LAYER, shifted_norms=True, spaces=REPLACED)

    absent: ClassVar[dict[str, float | None]] = {  # Gemma3TextConfig's values where config.json has no key
        "query_pre_attn_scalar": 256.0, "attn_logit_softcapping": None, "final_logit_softcapping": None,
    }  # fmt: skip

    def read_config(self) -> None:
        """Gemma 2's settings with Gemma 3's default scale, 256^-½; sliding layers need a window."""
        super().read_config()
        self.scale = self.checkpoint.number("query_pre_attn_scalar", 256.0, low=0) ** -0.5
        if SLIDING in self.types and self.window_size() is None:
            raise ModelError(
                f"{self.checkpoint.config_path}: sliding_window is null, but layer_types has sliding layers"
            )

    def layer_types(self) -> tuple[str, ...]:
        """``layer_types`` where config.json lists them, else every ``sliding_window_pattern``-th layer full and the
        others sliding (6 by default: five sliding, one full), as transformers derives them."""
        listed = self.listed_types()
        if listed is not None:
            return listed
        pattern = self.checkpoint.integer("sliding_window_pattern", default=6)
        return tuple(FULL if (layer + 1) % pattern == 0 else SLIDING for layer in range(self.layers))

    def read_rotaries(self) -> dict[str, Rotary]:
        """The decoder's reading (flat keys or ``rope_parameters`` by layer type), as transformers' Gemma 3 config
        reads them: a flat ``rope_parameters`` is refused (transformers ignores it), and a nested sliding entry
        without ``rope_theta`` turns by ``rope_local_base_freq`` (transformers fills it from there)."""
        ckpt = self.checkpoint
        parameters = ckpt.mapping("rope_parameters") or {}
        nested = any(key in LAYER_TYPES for key in parameters)
        if parameters and not nested:
            raise ModelError(
                f"{ckpt.config_path}: rope_parameters must be keyed by layer type ({FULL}, {SLIDING}) for "
                f"{self.name}: transformers ignores a flat one (or give rope_theta, rope_scaling, {LOCAL_BASE[0]})"
            )
        rotaries = super().read_rotaries()
        sliding = parameters.get(SLIDING)
        if nested and SLIDING in rotaries and isinstance(sliding, dict) and "rope_theta" not in sliding:
            base = ckpt.number(LOCAL_BASE[0], LOCAL_BASE[1], low=1)
            rotaries[SLIDING] = dataclasses.replace(rotaries[SLIDING], theta=base)
        return rotaries


FAMILIES = (Gemma3,)
