"""Two checkpoints of one architecture on one text, run side by side layer by layer and compared head by head.

``compare_models`` checks that they compare (one family, one shape, the same tokens), runs both, one layer of each
held at a time, and measures each layer as it goes; the values it returns (``ModelComparison``) and the measures
live in ``attnx.analysis.model_diff``.
"""

from __future__ import annotations

from collections.abc import Callable

from attnx.analysis.model_diff import LayerShift, ModelComparison, head_shifts, relative_shift
from attnx.core.tensors import WEIGHTS
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ModelError
from attnx.models import Model

# The sizes both sides must share, as ``Architecture`` names them.
SHARED = ("layers", "heads", "kv_heads", "head_dim", "d_model")


def check_comparable(a: Model, b: Model) -> None:
    """A ModelError naming the first difference when ``a`` and ``b`` are not one architecture of one shape."""
    first, second = a.architecture, b.architecture
    if first.name != second.name:
        raise ModelError(f"the models differ in architecture: A is {first.name}, B is {second.name}")
    for size in SHARED:
        if getattr(first, size) != getattr(second, size):
            raise ModelError(f"the models differ in {size}: A has {getattr(first, size)}, B {getattr(second, size)}")


def compare_models(
    a: Model,
    b: Model,
    text: str,
    *,
    on: Placement = NUMPY,
    progress: Callable[[int, int], None] | None = None,
) -> ModelComparison:
    """Run ``text`` through ``a`` and ``b`` side by side and measure every layer's shift (see the module)."""
    from attnx.analysis.effects import kl_divergence
    from attnx.workflows.effects import outputs

    check_comparable(a, b)
    first, second = a.encode(text), b.encode(text)
    if first.tokens != second.tokens or list(first.ids) != list(second.ids):
        at = next((i for i, pair in enumerate(zip(first.tokens, second.tokens, strict=False)) if pair[0] != pair[1]),
                  min(len(first.tokens), len(second.tokens)))  # fmt: skip
        raise ModelError(f"the tokenizers differ: A reads {len(first.tokens)} tokens, B {len(second.tokens)}; "
                         f"the first difference is at token {at}")  # fmt: skip
    runs = [model.run(encoded, on=on, layer=model.layers - 1)
            for model, encoded in ((a, first), (b, second))]  # fmt: skip
    layers = []
    for layer in range(a.layers):
        results = [run.step({WEIGHTS}) for run in runs]
        per_token, overall = relative_shift(runs[0].stream(), runs[1].stream())
        layers.append(LayerShift(layer, head_shifts(layer, *results), per_token, overall))
        if progress is not None:
            progress(layer + 1, a.layers)
    kl = None
    if a.predicts and b.predicts:
        (_, logp_a), (_, logp_b) = (outputs(run, lm_head=True) for run in runs)
        kl = None if logp_a is None or logp_b is None else kl_divergence(logp_a, logp_b)
    return ModelComparison(a.checkpoint.name, b.checkpoint.name, a.architecture.name, first.tokens, tuple(layers), kl)
