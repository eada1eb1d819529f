"""`attnx explore`: the interactive explorer, full screen in the terminal (Textual, the `explore` extra)."""

from __future__ import annotations

import io
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console

from attnx.cli.errors import ExitCode, fail, guarded
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, TextFlags, grouped
from attnx.cli.inputs import load_input, open_with_text, refuse
from attnx.cli.options import ConfigArg, NoColorOpt
from attnx.cli.output import colour_allowed
from attnx.environment import current
from attnx.errors import AttnxError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.explore import Explorer
    from attnx.core.spec import AttentionSpec
    from attnx.tui.app import ExploreApp

INSTALL = "python -m pip install 'attnx[explore]'"


@guarded
@grouped
def explore(
    config: ConfigArg = None,
    *,
    inputs: InputFlags,
    checkpoint: TextFlags,
    backend: EngineFlags,
    no_color: NoColorOpt = False,
    caps: CapFlags,
) -> None:
    """Explore attention full screen: move over queries, heads and layers, and every panel follows.

    ← → queries · [ ] heads · { } a model's layers · v weights or scores · c causal · / find · e export · ? keys.
    With no CONFIG: the worked example. --model DIR --text "..." explores every layer of a local checkpoint.
    """
    try:
        from attnx.tui.app import ExploreApp
        from attnx.tui.terminal import watchdog
    except ImportError:
        raise UsageError(f"attnx explore needs Textual, which is not installed: {INSTALL}") from None
    if not on_terminal():
        raise UsageError("attnx explore draws on a terminal; in scripts and pipes use run, trace or heads")
    state = explorer(config, inputs, ModelFlags(model=checkpoint.model, text=checkpoint.text), backend, caps)
    app = ExploreApp(state, colour=colour_allowed(no_color))
    app.error_console = Console(file=io.StringIO(), stderr=True)  # Textual's traceback: one line below instead
    done = threading.Event()
    threading.Thread(target=watchdog, args=(done,), name="attnx-watchdog", daemon=True).start()
    try:
        app.run()
    finally:
        done.set()
        state.close()
    ended(app)


def ended(app: ExploreApp) -> None:
    """How the app ended, as the command line says it: a failure inside it (exit 1, one line; the traceback
    with --debug; an AttnxError its own line and exit code), a terminal gone or a termination signal (128 + the
    signal's number, as for any command)."""
    from attnx.console import Terminated
    from attnx.tui.terminal import HANG_UP, terminal_gone

    failure = app.failure
    if failure is not None and terminal_gone():  # the terminal went away: what failed, failed writing to it
        raise Terminated(signal.SIGHUP)
    if isinstance(failure, AttnxError):
        raise failure  # `guarded` says it as anywhere else
    if failure is not None:
        env = current()
        if env.debug:
            env.stderr.write(app.error_console.file.getvalue())  # type: ignore[attr-defined]  # the StringIO above
        fail(f"attnx explore stopped: {type(failure).__name__}: {failure}", ExitCode.FAILURE)
    code = app.return_code or 0
    if code == HANG_UP or code - 128 in (signal.SIGHUP, signal.SIGTERM):
        raise Terminated(code - 128)


def on_terminal() -> bool:
    """Whether the environment's stdin and stdout are both a terminal, where a full-screen app can draw and read
    keys; a terminal that already hung up ends the command as its SIGHUP does (exit 129), not as a pipe would
    (exit 2)."""
    env = current()
    if env.stdin_isatty and env.stdout_isatty:
        return True
    from attnx.console import Terminated
    from attnx.tui.terminal import terminal_gone

    if terminal_gone(env.stdin) or terminal_gone(env.stdout):
        raise Terminated(signal.SIGHUP)
    return False


def explorer(
    config: str | None, inputs: InputFlags, checkpoint: ModelFlags, backend: EngineFlags, caps: CapFlags
) -> Explorer:
    """The explorer's state for an input (one layer) or for every layer of ``--model`` on ``--text``."""
    from attnx.analysis.explore import Explorer

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
    refuse(inputs.given(), "changes an input; --model explores the model as it is")
    refuse(checkpoint.pointed(), "points at one layer; the explorer walks the layers of the model's first stack")
    model, words = open_with_text(config, checkpoint, backend, caps)
    specs: list[AttentionSpec] = []
    try:  # a bad text or checkpoint is refused, and the checkpoint let go, before the screen opens
        forward = model.run(words, on=backend.placement(), layer=model.layers - 1)
        specs.append(forward.spec())
    except BaseException:
        model.close()
        raise

    def spec_of(layer: int) -> AttentionSpec:
        while len(specs) <= layer:
            forward.step(spec=specs[-1])
            specs.append(forward.spec())
        return specs[layer]

    return spec_of, model.layers, f"{model.checkpoint.name} ({model.architecture.name})", model.close
