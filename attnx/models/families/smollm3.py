"""SmolLM3: Llama's decoder with layers without positions (NoPE) among the rotary ones."""

from __future__ import annotations

import functools

from attnx.core.positions import Rotary
from attnx.errors import ModelError
from attnx.models.decoder import Decoder
from attnx.models.rope import FULL, SLIDING


class SmolLM3(Decoder):
    """SmolLM3: a Llama whose layers turn q and k by position only where ``no_rope_layers`` says 1 (absent: every
    ``no_rope_layer_interval``-th layer, 4, has none); RoPE θ 2·10⁶ by default; embeddings tied unless config.json
    says otherwise. Windows as transformers' masks give them: ``sliding_window`` on the sliding layers of
    ``layer_types`` (absent: the NoPE layers, under ``use_sliding_window``)."""

    name = "smollm3"
    family = "SmolLM3"
    stems = ("SmolLM3",)
    default_theta = 2_000_000.0
    ties_by_default = True
    reads = frozenset({"no_rope_layers", "sliding_window", "use_sliding_window"})

    @functools.cached_property
    def turned(self) -> tuple[bool, ...]:
        """Whether each layer turns q and k by position: ``no_rope_layers`` (1 or 0 for each layer, at least as many
        entries as layers), else all but every ``no_rope_layer_interval``-th layer."""
        ckpt = self.checkpoint
        listed = ckpt.config.get("no_rope_layers")
        if listed is None:
            interval = ckpt.integer("no_rope_layer_interval", default=4)
            return tuple((layer + 1) % interval != 0 for layer in range(self.layers))
        if (
            not isinstance(listed, list)
            or len(listed) < self.layers
            or any(flag not in (0, 1) for flag in listed[: self.layers])  # only the layers': a list may run on
        ):
            raise ModelError(
                f"{ckpt.config_path}: no_rope_layers must list 1 (RoPE) or 0 (none) for each of the {self.layers} "
                f"layers, got {listed!r:.60}"
            )
        return tuple(bool(flag) for flag in listed[: self.layers])

    def window_size(self) -> int | None:
        """``sliding_window`` (absent or null: none): transformers' masks give it to each sliding layer."""
        if self.checkpoint.config.get("sliding_window") is None:
            return None
        return self.checkpoint.integer("sliding_window")

    def layer_types(self) -> tuple[str, ...]:
        """``layer_types`` where config.json lists them (a sliding one needs a window), else the NoPE layers slide
        where ``use_sliding_window`` and a window are set, as transformers derives them."""
        listed, window = self.listed_types(), self.window_size()
        if listed is None:
            slides = window is not None and self.checkpoint.flag("use_sliding_window", False)
            return tuple(SLIDING if slides and not turns else FULL for turns in self.turned)
        if SLIDING in listed and window is None:
            raise ModelError(f"{self.checkpoint.config_path}: layer_types has sliding layers, but no sliding_window")
        return listed

    def rotary_of(self, layer: int) -> Rotary | None:
        """Its layer type's rotary positions, or none where ``no_rope_layers`` says 0."""
        return super().rotary_of(layer) if self.turned[layer] else None


FAMILIES = (SmolLM3,)
