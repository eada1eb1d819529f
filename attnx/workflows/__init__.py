"""What a person asks of an opened model: a layer's attention, the model view, rollout, ablations, detection, the diff.

Each function takes a ``Model`` (``attnx.open_model``; the caller closes it) and returns the analysis value the
CLI renders, so the same questions run from Python::

    with attnx.open_model("models/minilm") as model:
        view = workflows.model_view(model, "The cat sat on the mat")

``progress(done, total)`` is called as the work goes; ``on`` is where the work runs (``attnx.Placement``). The
workflows sit above ``attnx.models`` (which they drive) and ``attnx.analysis`` (whose values they build); the CLI
and the Python API call them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnx.lazy import lazily

__all__ = [
    "ablate",
    "alignment",
    "check_heads",
    "compare_models",
    "detect",
    "detect_decoder",
    "layer_attention",
    "layer_results",
    "layer_spec",
    "load_model_spec",
    "model_view",
    "rollout",
    "site_spec",
    "timestamps",
]

if TYPE_CHECKING:  # pragma: no cover
    from attnx.workflows.detection import detect, detect_decoder
    from attnx.workflows.effects import ablate, check_heads
    from attnx.workflows.layers import (
        alignment,
        layer_attention,
        layer_results,
        layer_spec,
        load_model_spec,
        model_view,
        rollout,
        site_spec,
    )
    from attnx.workflows.model_diff import compare_models
    from attnx.workflows.timing import timestamps

# Each name is imported from its module on first use, so that a command loads only the workflow it runs (no
# module is named as a function here: a loaded module would hide the function of its name).
_LAZY = {
    "ablate": "attnx.workflows.effects",
    "check_heads": "attnx.workflows.effects",
    "compare_models": "attnx.workflows.model_diff",
    "detect": "attnx.workflows.detection",
    "detect_decoder": "attnx.workflows.detection",
    "alignment": "attnx.workflows.layers",
    "layer_attention": "attnx.workflows.layers",
    "layer_results": "attnx.workflows.layers",
    "layer_spec": "attnx.workflows.layers",
    "load_model_spec": "attnx.workflows.layers",
    "model_view": "attnx.workflows.layers",
    "rollout": "attnx.workflows.layers",
    "site_spec": "attnx.workflows.layers",
    "timestamps": "attnx.workflows.timing",
}


__getattr__ = lazily(__name__, _LAZY)
