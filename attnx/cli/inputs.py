"""How commands read their input: a file, stdin, a seed or the worked example, or a layer of --model on --text."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from attnx.environment import current
from attnx.errors import ChoiceError, InputError, ModelError, UsageError
from attnx.limits import Limits

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, TextFlags
    from attnx.core.overrides import SettingOverrides
    from attnx.core.spec import AttentionSpec
    from attnx.engines.placement import Placement
    from attnx.io.schema import InputOverrides
    from attnx.models import Model
    from attnx.models.audio import AudioInput
    from attnx.models.stacks import Address, AttentionKind
    from attnx.models.tokenize import Encoded
    from attnx.models.vision import ImageInput

ALL = "all"
STDIN = "-"
PREPROCESSOR = "preprocessor_config.json"


def parse_layer(value: str | None, *, allow_all: bool = False) -> int | None:
    """``--layer``: ``"3"`` -> 3 (layers count from 0, as heads do; ``"-1"`` -> -1, the last, which the model
    resolves); ``"all"`` -> None where ``allow_all``; default layer 0."""
    if allow_all and value is not None and value.strip().lower() == ALL:
        return None
    return parse_one_layer(value, allow_all=allow_all)


def parse_one_layer(value: str | None, *, allow_all: bool = False) -> int:
    """``--layer`` naming one layer (``parse_layer``); ``"all"`` is refused (``allow_all``: the error names it)."""
    if value is None:
        return 0
    if value.strip().lower() == ALL:
        raise UsageError("--layer all is for `attnx heads` (the model view); give one layer, counted from 0")
    try:
        return int(value)
    except ValueError:
        raise UsageError(
            f"--layer takes a layer number counted from 0 (-1: the last){' or all' if allow_all else ''}, not {value!r}"
        ) from None


def read_text(text: str, limits: Limits) -> str:
    """The text to run: ``--text`` itself, or with ``-`` the text on stdin (its final line breaks dropped,
    as the shell's ``$(...)`` drops them), within ``max_bytes`` and valid UTF-8."""
    if text != STDIN:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:  # bytes of the command line that are not UTF-8 arrive as surrogates
            raise UsageError(f"--text is not UTF-8 text (character {exc.start} cannot be encoded)") from None
        limits.check_bytes(size, "--text")
        return text
    from attnx.io.documents import read_bytes

    raw, name = read_bytes(STDIN, limits)
    try:
        return raw.decode("utf-8-sig").rstrip("\r\n")  # a byte-order mark is dropped
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: the text is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None


def check_model_options(
    config: str | None, *, model: str | None, text: str | None, config_name: str = "CONFIG"
) -> tuple[str, str]:
    """The checkpoint folder and ``--text`` (``-``: stdin, not read yet), once --model's companions fit together."""
    if model is None:
        raise UsageError("--text and --layer go with --model DIR")
    if config is not None:
        raise UsageError(f"--model replaces {config_name}: give one or the other")
    if text is None:
        raise UsageError('--model needs the text to run: --text "..." (or --text - to read it from stdin)')
    return model, text


def require_checkpoint(model: str | None, what: str) -> str:
    """``--model``'s checkpoint, for ``what`` (a command, or a flag) that runs nothing else; a usage error without."""
    if model is None:
        raise UsageError(f"{what} runs a checkpoint: give --model DIR")
    return model


def refuse(flags: Mapping[str, object], why: str) -> None:
    """A usage error naming the first of ``flags`` (flag -> value) that was given, with ``why``."""
    given = [flag for flag, value in flags.items() if value not in (None, False)]
    if given:
        raise UsageError(f"{given[0]} {why}")


class LayerProgress:
    """A progress bar on stderr for the layers a forward pass runs (or other steps: ``unit`` names them).

    Shown only with a console (the caller passes one for a terminal) and only once the work has
    taken ``delay`` seconds: a small checkpoint and a short text finish before it would appear.
    """

    def __init__(self, description: str, console: Console | None, delay: float = 0.3, unit: str = "layers") -> None:
        self.description = description
        self.unit = unit
        self.console = console
        self.delay = delay
        self.started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int) -> None:
        """Layers ``done`` of ``total``."""
        if self.console is None:
            return
        if self._bar is None:
            if time.monotonic() - self.started < self.delay:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn(self.description), BarColumn(), MofNCompleteColumn(), TextColumn(self.unit),
                                 TimeElapsedColumn(), console=self.console, transient=True)  # fmt: skip
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=total)
        self._bar.update(self._task, completed=done, total=total)

    def close(self) -> None:
        """Take the bar off the screen."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> LayerProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_for(description: str, quiet: bool) -> LayerProgress:
    """A LayerProgress on stderr when stderr is a terminal and not --quiet; otherwise one that shows nothing."""
    console = None
    env = current()
    if not quiet and env.stderr_isatty:
        from attnx.text import console as inert_console

        console = inert_console(file=env.stderr, stderr=True, _environ=env.environ)
    return LayerProgress(description, console)


@contextlib.contextmanager
def flag_worded(template: str, kind: type[ChoiceError] = ChoiceError) -> Iterator[None]:
    """Inside it, a ChoiceError of ``kind`` (a value that names nothing, or more than one thing, the input holds)
    is worded with the flag that gave the value or can settle it: ``template`` holds the message's place, as
    ``"--head {}"``."""
    try:
        yield
    except kind as exc:
        raise UsageError(template.format(exc)) from None


def open_with_text(
    config: str | None, checkpoint: TextFlags, backend: EngineFlags, caps: CapFlags, *, config_name: str = "CONFIG"
) -> tuple[Model, str]:
    """``--model``'s checkpoint, opened in the engine's dtype under the caps, and ``--text`` (read from stdin
    for ``-``), once the options fit together; the caller closes the model."""
    limits = caps.limits()
    path, given = check_model_options(config, model=checkpoint.model, text=checkpoint.text, config_name=config_name)
    words = read_text(given, limits)  # stdin is read once every option is known to be right
    return open_checkpoint(path, backend, limits), words


def open_checkpoint(path: str, backend: EngineFlags, limits: Limits) -> Model:
    """The checkpoint folder ``path``, opened in the dtype the engine computes in, under ``limits``."""
    from attnx.models import open_model

    return open_model(path, backend.placement().resolved_dtype(), limits)


@dataclasses.dataclass(frozen=True)
class Session:
    """An opened checkpoint, the text it reads (or the audio it hears, the image it sees: ``sensed``), where it runs,
    and the work's progress bar."""

    model: Model
    text: str
    on: Placement
    progress: LayerProgress
    sensed: AudioInput | ImageInput | None = None

    def source(self) -> Encoded | AudioInput | ImageInput:
        """What the model's first stack reads: the audio heard or the image seen, else the text's tokens."""
        return self.sensed if self.sensed is not None else self.model.encode(self.text)


@contextlib.contextmanager
def model_session(
    config: str | None,
    checkpoint: TextFlags,
    backend: EngineFlags,
    caps: CapFlags,
    task: str,
    *,
    quiet: bool,
    config_name: str = "CONFIG",
) -> Iterator[Session]:
    """``open_with_text`` with a progress bar for ``task`` (counted in layers); the checkpoint is closed and the bar
    taken off on leaving. With ``--audio`` or ``--image`` (``SourceFlags``), the model hears or sees it instead
    (``sensed_by``)."""
    if getattr(checkpoint, "audio", None) is not None or getattr(checkpoint, "image", None) is not None:
        with (
            sensed_by(config, checkpoint, backend, caps, quiet=quiet, config_name=config_name) as (model, sensed),
            progress_for(task, quiet) as progress,
        ):
            yield Session(model, "", backend.placement(), progress, sensed)
        return
    model, words = open_with_text(config, checkpoint, backend, caps, config_name=config_name)
    with model, progress_for(task, quiet) as progress:
        yield Session(model, words, backend.placement(), progress)


@contextlib.contextmanager
def sensed_by(
    config: str | None,
    checkpoint: TextFlags,
    backend: EngineFlags,
    caps: CapFlags,
    *,
    quiet: bool,
    config_name: str,
) -> Iterator[tuple[Model, AudioInput | ImageInput]]:
    """``open_sensed``, the model closed on leaving."""
    model, given = open_sensed(config, checkpoint, backend, caps, quiet=quiet, config_name=config_name)
    with model:
        yield model, given


def open_sensed(
    config: str | None,
    checkpoint: TextFlags,
    backend: EngineFlags,
    caps: CapFlags,
    *,
    quiet: bool,
    config_name: str = "CONFIG",
) -> tuple[Model, AudioInput | ImageInput]:
    """``--model``'s checkpoint, opened (the caller closes it), and ``--audio`` or ``--image`` (read within the caps
    before the model opens) as its encoder's input; what was done to the file said on stderr."""
    from attnx.cli.output import warn

    flag = "--audio" if getattr(checkpoint, "audio", None) is not None else "--image"
    verb = "hears" if flag == "--audio" else "sees"
    refuse({"--text": checkpoint.text}, f"is what a text model reads; with {flag} the model's encoder {verb} it")
    path = require_checkpoint(checkpoint.model, flag)
    if config is not None:
        raise UsageError(f"--model replaces {config_name}: give one or the other")
    limits = caps.limits()
    sense = read_sense(checkpoint, limits)
    model = open_checkpoint(path, backend, limits)
    try:
        given, notes = sense(model)
    except BaseException:
        model.close()
        raise
    for note in () if quiet else notes:
        warn(note)
    return model, given


def read_sense(
    checkpoint: TextFlags, limits: Limits
) -> Callable[[Model], tuple[AudioInput | ImageInput, tuple[str, ...]]]:
    """Read ``--audio`` (a WAV file) or ``--image`` (PNG, JPEG, WebP) within the caps, now; the function that makes
    it a model's input once the model is open (the image preprocessed as its preprocessor_config.json says), with
    the notes on what was done to it."""
    audio, image = getattr(checkpoint, "audio", None), getattr(checkpoint, "image", None)
    if audio is not None and image is not None:
        raise UsageError("--audio and --image are two inputs for two kinds of model: give one")
    if audio is not None:
        from attnx.io.audio import read_wav

        wav = read_wav(audio, limits)

        def heard(model: Model) -> tuple[AudioInput | ImageInput, tuple[str, ...]]:
            found = model.encode_audio(wav.samples)
            return found, (*wav.notes, *found.warnings)

        return heard
    from attnx.io.image import read_image

    raw = read_image(image or "", limits)

    def seen(model: Model) -> tuple[AudioInput | ImageInput, tuple[str, ...]]:
        from attnx.models.preprocess import preprocess

        optional = getattr(model.checkpoint, "optional_json", None)
        config = None if optional is None else optional(PREPROCESSOR)
        if config is None:
            raise ModelError(f"{model.checkpoint.name}: no {PREPROCESSOR}: attnx prepares an image as the checkpoint's "
                             "preprocessor config says")  # fmt: skip
        found = model.encode_image(preprocess(raw.image, config, f"{model.checkpoint.name}/{PREPROCESSOR}"))
        return dataclasses.replace(found, notes=raw.notes), raw.notes

    return seen


def load_input(
    config: str | None,
    inputs: InputFlags,
    checkpoint: ModelFlags,
    caps: CapFlags,
    backend: EngineFlags,
    *,
    drop_heads: list[int] | None = None,
    quiet: bool = False,
    queried: Callable[[Sequence[str]], object] | None = None,
) -> AttentionSpec:
    """The spec named by CONFIG (or ``--model``'s layer) with the settings the flags replace (see
    ``load_input_with``)."""
    described, settings = inputs.overrides(drop_heads)
    return load_input_with(config, described, settings, checkpoint, caps, backend, quiet=quiet, queried=queried)


def load_input_with(
    config: str | None,
    described: InputOverrides,
    settings: SettingOverrides,
    checkpoint: ModelFlags,
    caps: CapFlags,
    backend: EngineFlags,
    *,
    quiet: bool = False,
    config_name: str = "CONFIG",
    queried: Callable[[Sequence[str]], object] | None = None,
) -> AttentionSpec:
    """The spec named by CONFIG (``described`` by the flags of random inputs), or ``--model``'s layer, with
    ``settings`` in place of its own: one way for files and models alike.

    ``queried``, given the text's tokens (their labels) as soon as it is tokenized, refuses a query that is not
    among them (``--token``) by raising, before any layer runs.

    Layer ``--layer`` (from 0) of ``--model`` on ``--text`` is the layer as the model has it (``settings`` only
    say the head count it will be split into), the layers before it run on ``backend``; flags that describe
    random inputs are refused. The caps are read first, so a bad cap value is refused whatever the input; they
    hold for the text, the checkpoint's files and every array the forward pass builds (checked before the first
    layer runs), and travel with the spec: ``attnx.engines.compute`` checks what it builds against them.
    """
    if not checkpoint.wanted:
        from attnx.io import load_spec

        return settings.apply(load_spec(config, described, caps.limits()))
    random = {"--seed": described.seed, "--tokens": described.tokens, "--d-model": described.d_model}
    refuse(random, "describes random inputs; with --model the input is the model's layer")
    address = parse_address(checkpoint)
    with model_session(
        config, checkpoint, backend, caps, "running layers", quiet=quiet, config_name=config_name
    ) as run:
        source = run.source()  # the text's tokens, the audio heard or the image seen
        spec = pointed_spec(run.model, source, address, checkpoint, settings, run.on, run.progress, queried)
    return settings.apply(spec)  # one way for both


def pointed_spec(
    model: Model,
    source: Encoded | AudioInput | ImageInput,
    address: Address,
    checkpoint: ModelFlags,
    settings: SettingOverrides,
    on: Placement,
    progress: LayerProgress,
    queried: Callable[[Sequence[str]], object] | None,
) -> AttentionSpec:
    """The attention ``address`` points at in ``model`` as a spec, the encoder reading ``source``: a decoder's reads
    ``--target`` (in ``--language`` where the model asks one), after the encoder."""
    from attnx.workflows import site_spec
    from attnx.workflows.layers import decoder_input

    pointed = " ".join(f"{flag} {value}" for flag, value in (("--layer", checkpoint.layer),
                       ("--attention", checkpoint.attention)) if value is not None)  # fmt: skip
    with flag_worded(f"{pointed}: {{}}"):
        stack, _ = address.resolve(model.stacks)
    index = model.check_layer(address.layer, stack)  # -1: the last layer
    decoder = any(not attention.is_self for attention in stack.attentions)  # its keys: the encoder's output
    if checkpoint.target is not None and checkpoint.generate is not None:
        raise UsageError("--generate writes the target the decoder reads; --target gives it: give one or the other")
    if decoder and checkpoint.target is None and checkpoint.generate is None:
        raise UsageError(f"--layer {checkpoint.layer}: the {stack.name} reads a target text: give --target T, or "
                         "--generate N to let it write one")  # fmt: skip
    refuse({"--generate": checkpoint.generate if not decoder else None}, "writes what a decoder reads: it goes with "
           "a decoder's layer (--layer dec:L)")  # fmt: skip
    if not decoder and checkpoint.target is not None:
        raise UsageError("--target is for an encoder-decoder's decoder; the model reads --text alone"
                         if len(model.stacks) == 1 else f"--target is for a decoder's layers (--layer dec:L); "
                         f"the {stack.name} reads --text")  # fmt: skip
    refuse({"--language": checkpoint.language if not decoder else None}, "is the language a decoder writes in: "
           "it goes with --target")  # fmt: skip
    progress.description = f"running the layers before {stack.name} layer {index}"
    if checkpoint.generate is not None:
        progress.description = "writing"
    target, written = decoder_input(model, source, checkpoint.target, checkpoint.generate, checkpoint.language, on)
    if queried is not None:
        queried((target or source).tokens)
    spec = site_spec(model, source, address, target=target, on=on, heads=settings.get("heads"), progress=progress)
    if written and spec.origin is not None:  # the rows the model wrote, said in the header and the JSON
        origin = dataclasses.replace(spec.origin, written=tuple(written))
        source_line = f"{spec.source}, queries {written.start}-{written.stop - 1} written by the model (marked *)"
        spec = dataclasses.replace(spec, source=source_line, origin=origin)
    return spec


def parse_address(checkpoint: ModelFlags) -> Address:
    """``--layer`` (``3``, ``-1``, ``dec:2``) and ``--attention`` as where in the model to look."""
    from attnx.models.stacks import Address

    given = checkpoint.layer
    layer = given if given is not None and ":" in given else str(parse_one_layer(given))  # a number, as always
    with flag_worded("--layer: {}"):
        address = Address.parse(layer)
    with flag_worded("--attention: {}"):
        kind = Address.parse("0", checkpoint.attention).kind
    return dataclasses.replace(address, kind=kind)


def attention_kind(attention: str | None) -> AttentionKind | None:
    """``--attention`` as an attention kind (None: not given: the model's first stack)."""
    from attnx.models.stacks import Address

    if attention is None:
        return None
    with flag_worded("--attention: {}"):
        return Address.parse("0", attention).kind


def reads_target(model: Model, kind: AttentionKind, attention: str) -> bool:
    """Whether the stack holding ``kind`` is a decoder reading a target; a model without ``kind`` is a UsageError
    naming what it has."""
    from attnx.errors import ModelError
    from attnx.workflows.layers import stack_holding

    try:
        stack = stack_holding(model, kind)
    except ModelError as exc:
        raise UsageError(f"--attention {attention}: {exc}") from None
    return any(not held.is_self for held in stack.attentions)
