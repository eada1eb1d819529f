"""`attnx explore`: the interactive explorer, full screen in the terminal (Textual, the `explore` extra)."""

from __future__ import annotations

import functools
import io
import signal
import threading
from typing import TYPE_CHECKING

from rich.console import Console

from attnx.cli.errors import ExitCode, fail, guarded
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, grouped
from attnx.cli.inputs import (
    flag_worded,
    load_input,
    open_sensed,
    open_with_text,
    parse_address,
    refuse,
)
from attnx.cli.options import ConfigArg, NoColorOpt
from attnx.cli.output import colour_allowed
from attnx.environment import current
from attnx.errors import AttnxError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.explore import Explorer
    from attnx.engines.placement import Placement
    from attnx.models import Model
    from attnx.models.audio import AudioInput
    from attnx.models.stacks import Address
    from attnx.models.tokenize import Encoded
    from attnx.models.vision import ImageInput
    from attnx.tui.app import ExploreApp

INSTALL = "python -m pip install 'attnx[explore]'"


@guarded
@grouped
def explore(
    config: ConfigArg = None,
    *,
    inputs: InputFlags,
    checkpoint: ModelFlags,
    backend: EngineFlags,
    no_color: NoColorOpt = False,
    caps: CapFlags,
) -> None:
    """Explore attention full screen: move over queries, heads and layers, and every panel follows.

    ← → queries · [ ] heads · { } a model's layers · v weights or scores · c causal · / find · e export · ? keys.
    With no CONFIG: the worked example. --model DIR --text "..." explores every layer of a local checkpoint.
    Of an encoder-decoder, with --target T (or --generate N): k moves between its three kinds of attention.
    --layer and --attention say where the cursor starts (--layer dec:1 --attention cross).
    """
    try:
        from attnx.tui.app import ExploreApp
        from attnx.tui.terminal import watchdog
    except ImportError:
        raise UsageError(f"attnx explore needs Textual, which is not installed: {INSTALL}") from None
    if not on_terminal():
        raise UsageError("attnx explore draws on a terminal; in scripts and pipes use run, trace or heads")
    state = explorer(config, inputs, checkpoint, backend, caps)
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
    """The explorer's state for an input (one layer) or for every layer of ``--model`` on ``--text`` (an
    encoder-decoder's three kinds of attention, the decoder's reading ``--target`` or what ``--generate`` wrote)."""
    from attnx.analysis.explore import Explorer

    options = backend.options()
    if not checkpoint.wanted:
        spec = load_input(config, inputs, checkpoint, caps, backend)
        return Explorer(lambda _layer: spec, 1, spec.source, options)
    refuse(inputs.given(), "changes an input; --model explores the model as it is")
    address = parse_address(checkpoint)
    model, source = opened(config, checkpoint, backend, caps)
    try:  # a bad text, target or checkpoint is refused, and the checkpoint let go, before the screen opens
        return model_explorer(model, source, address_of(checkpoint), checkpoint, backend.placement(), options,
                              address)  # fmt: skip
    except BaseException:
        model.close()
        raise


def opened(
    config: str | None, checkpoint: ModelFlags, backend: EngineFlags, caps: CapFlags
) -> tuple[Model, Encoded | AudioInput | ImageInput]:
    """``--model``'s checkpoint and what its (first) stack reads: ``--text``'s tokens, or the audio of ``--audio`` or
    the image of ``--image`` (read within the caps before the model opens; what was done to it, said on stderr)."""
    if checkpoint.audio is None and checkpoint.image is None:
        model, words = open_with_text(config, checkpoint, backend, caps)
        try:
            return model, model.encode(words)
        except BaseException:
            model.close()
            raise
    return open_sensed(config, checkpoint, backend, caps, quiet=False)


def address_of(checkpoint: ModelFlags) -> str:
    """``--layer dec:1 --attention cross`` as the user gave them, to word what they point at."""
    given = (("--layer", checkpoint.layer), ("--attention", checkpoint.attention))
    return " ".join(f"{flag} {value}" for flag, value in given if value is not None)


def model_explorer(
    model: Model,
    source: Encoded | AudioInput | ImageInput,
    pointed: str,
    checkpoint: ModelFlags,
    on: Placement,
    options: dict[str, object],
    address: Address,
) -> Explorer:
    """The explorer of ``model`` on ``source`` (a text's tokens, or audio), the cursor where ``address`` points
    (``pointed``: as the flags said it); of an encoder-decoder, its three kinds of attention."""
    from attnx.analysis.explore import Explorer
    from attnx.workflows.sites import Sites, kinds

    with flag_worded(f"{pointed}: {{}}"):
        stack, which = address.resolve(model.stacks)
    layer = model.check_layer(address.layer, stack)  # -1: the last layer
    decoder = any(not attention.is_self for attention in stack.attentions)
    name = f"{model.checkpoint.name} ({model.architecture.name})"
    target, written = read_target(model, source, checkpoint, on, decoder=decoder)
    sites = Sites(model, source, target, on=on)
    if len(model.stacks) == 1 and len(stack.attentions) == 1:  # one kind of attention: the explorer as ever
        first = functools.partial(sites.spec, stack, 0)
        first(layer)  # the layers up to the cursor's run now
        return Explorer(first, stack.layers, name, dict(options), layer=layer, close=model.close)
    found = kinds(sites, "the decoder reads a target text: give --target T, or --generate N to let it write one")
    wanted = (stack.name, stack.attentions[which].kind.label)
    start = next(i for i, kind in enumerate(found) if (kind.stack, kind.attention) == wanted)
    found[start].spec_of(layer)  # the layers up to the cursor's run now (a decoder's: after the encoder's)
    if written:
        name += f", target tokens {written.start}-{written.stop - 1} written by the model"
    return Explorer.over(found, name, dict(options), kind=start, layer=layer, close=model.close)


def read_target(
    model: Model, source: Encoded | AudioInput | ImageInput, checkpoint: ModelFlags, on: Placement, *, decoder: bool
) -> tuple[Encoded | None, range]:
    """The tokens the decoder of an encoder-decoder reads: ``--target`` (teacher-forced) or what it writes itself
    with ``--generate N`` (greedy), with the positions it wrote; None where neither is given (the explorer then
    stays in the encoder), which a cursor starting in the decoder (``decoder``) refuses."""
    if checkpoint.target is not None and checkpoint.generate is not None:
        raise UsageError("--generate writes the target the decoder reads; --target gives it: give one or the other")
    if checkpoint.target is None and checkpoint.generate is None:
        refuse({"--language": checkpoint.language}, "is the language a decoder writes in: it goes with --target")
        if decoder:
            raise UsageError(f"{address_of(checkpoint)}: the decoder reads a target text: give --target T, or "
                             "--generate N to let it write one")  # fmt: skip
        return None, range(0)
    if not any(not attention.is_self for stack in model.stacks for attention in stack.attentions):
        given = "--target" if checkpoint.target is not None else "--generate"
        raise UsageError(f"{given} is for an encoder-decoder's decoder; the model reads --text alone")
    from attnx.workflows.layers import decoder_input

    return decoder_input(model, source, checkpoint.target, checkpoint.generate, checkpoint.language, on)
