"""`attnx explore`: the interactive explorer, full screen in the terminal (Textual, the `explore` extra)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from attnx.cli.errors import guarded
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, load_input
from attnx.cli.options import (
    CausalOpt,
    ConfigArg,
    Device,
    DeviceOpt,
    DModelOpt,
    DtypeOpt,
    Engine,
    EngineOpt,
    HeadsOpt,
    KvHeadsOpt,
    LayoutOpt,
    MaxBytesOpt,
    MaxDepthOpt,
    MaxDimensionOpt,
    MaxElementsOpt,
    MaxYamlBytesOpt,
    ModelOpt,
    NoColorOpt,
    RopePairsOpt,
    RopeThetaOpt,
    ScaleOpt,
    SeedOpt,
    SoftcapOpt,
    TextOpt,
    TokensOpt,
    WindowOpt,
)
from attnx.cli.output import colour_allowed
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.spec import AttentionSpec
    from attnx.tui.state import Explorer

INSTALL = "python -m pip install 'attnx[explore]'"


@guarded
def explore(
    config: ConfigArg = None,
    heads: HeadsOpt = None,
    seed: SeedOpt = None,
    tokens: TokensOpt = None,
    d_model: DModelOpt = None,
    kv_heads: KvHeadsOpt = None,
    scale: ScaleOpt = None,
    layout: LayoutOpt = None,
    rope_theta: RopeThetaOpt = None,
    rope_pairs: RopePairsOpt = None,
    window: WindowOpt = None,
    softcap: SoftcapOpt = None,
    causal: CausalOpt = False,
    model: ModelOpt = None,
    text: TextOpt = None,
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    no_color: NoColorOpt = False,
    max_bytes: MaxBytesOpt = None,
    max_yaml_bytes: MaxYamlBytesOpt = None,
    max_depth: MaxDepthOpt = None,
    max_dimension: MaxDimensionOpt = None,
    max_elements: MaxElementsOpt = None,
) -> None:
    """Explore attention full screen: move over queries, heads and layers, and every panel follows.

    ← → queries · [ ] heads · { } a model's layers · v weights or scores · c causal · / find · e export · ? keys.
    With no CONFIG: the worked example. --model DIR --text "..." explores every layer of a local checkpoint.
    """
    inputs = InputFlags.pick(locals())
    backend = EngineFlags.pick(locals())
    caps = CapFlags.pick(locals())
    try:
        from attnx.tui.app import ExploreApp
    except ImportError:
        raise UsageError(f"attnx explore needs Textual, which is not installed: {INSTALL}") from None
    if not on_terminal():
        raise UsageError("attnx explore draws on a terminal; in scripts and pipes use run, trace or heads")
    state = explorer(config, inputs, ModelFlags(model=model, text=text), backend, caps)
    try:
        ExploreApp(state, colour=colour_allowed(no_color)).run()
    finally:
        state.close()


def on_terminal() -> bool:
    """Whether stdin and stdout are both a terminal, where a full-screen app can draw and read keys."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def explorer(
    config: str | None, inputs: InputFlags, checkpoint: ModelFlags, backend: EngineFlags, caps: CapFlags
) -> Explorer:
    """The explorer's state for an input (one layer) or for every layer of ``--model`` on ``--text``."""
    from attnx.tui.state import Explorer

    options = backend.options()
    if not checkpoint.wanted:
        spec = load_input(config, inputs, checkpoint, caps, backend)
        return Explorer(lambda _layer: spec, 1, spec.source, options)
    spec_of, layers, source, close = model_layers(config, inputs, checkpoint, backend, caps)
    return Explorer(spec_of, layers, source, options, close=close)


def model_layers(
    config: str | None, inputs: InputFlags, checkpoint: ModelFlags, backend: EngineFlags, caps: CapFlags
) -> tuple[Callable[[int], AttentionSpec], int, str, Callable[[], None]]:
    """Each layer's spec of ``--model`` on ``--text``, made as the forward pass reaches it and kept; the layer
    count, the source's name, and what lets go of the checkpoint."""
    from attnx.cli.model_input import open_with_text, refuse

    refuse(inputs.given(), "changes an input; --model explores the model as it is")
    options = backend.options()
    path, words, opened = open_with_text(config, model=checkpoint.model, text=checkpoint.text, limits=caps.limits(),
                                         **options)  # fmt: skip
    specs: list[AttentionSpec] = []
    try:  # a bad text or checkpoint is refused, and the checkpoint let go, before the screen opens
        forward = opened.run(words, engine=options["engine"], device=options["device"], layer=opened.layers - 1)
        specs.append(forward.spec())
    except BaseException:
        opened.close()
        raise

    def spec_of(layer: int) -> AttentionSpec:
        while len(specs) <= layer:
            forward.step(spec=specs[-1])
            specs.append(forward.spec())
        return specs[layer]

    return spec_of, opened.layers, f"{path} ({opened.architecture.name})", opened.close
