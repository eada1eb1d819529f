"""Qwen 3: Qwen 2's decoder with QK-norm, an RMSNorm on each head's q and k before rotary positions."""

from __future__ import annotations

from attnx.models.decoder import Decoder
from attnx.models.gguf_form import GgufForm


class Qwen3(Decoder):
    """Qwen 3: ``q_norm`` and ``k_norm`` on each head (an explicit ``head_dim``, often ≠ hidden / heads); windows as
    Qwen 2's, from ``max_window_layers`` on when ``use_sliding_window``."""

    name = "qwen3"
    family = "Qwen 3"
    stems = ("Qwen3",)
    qk_norm_over = "head"
    sliding = "upper"
    window_default = 4096
    reads = frozenset({"sliding_window", "use_sliding_window"})
    gguf = GgufForm(("qwen3",))


FAMILIES = (Qwen3,)
