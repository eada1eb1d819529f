"""What --model commands share: options checked, the text (or stdin), a progress bar, a layer's spec, the model view."""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from attnx.errors import InputError, ModelError, UsageError
from attnx.limits import Limits

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from attnx.analysis.detect import Detection, TextRecord
    from attnx.analysis.effects import Ablations
    from attnx.analysis.measures import Rollout
    from attnx.analysis.model_view import ModelView
    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec
    from attnx.io.schema import Overrides
    from attnx.models import Model
    from attnx.models.tokenize import Encoded

ALL = "all"
STDIN = "-"


def parse_layer(value: str | None, *, allow_all: bool = False) -> int | None:
    """``--layer``: ``"3"`` -> 3 (layers count from 0, as heads do); ``"all"`` -> None; default layer 0."""
    if value is None:
        return 0
    if value.strip().lower() == ALL:
        if not allow_all:
            raise UsageError("--layer all is for `attnx heads` (the model view); give one layer, counted from 0")
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise UsageError(f"--layer takes a layer number counted from 0{' or all' if allow_all else ''}, not {value!r}")
    return number


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


def progress_for(description: str, quiet: bool, unit: str = "layers") -> LayerProgress:
    """A LayerProgress on stderr when stderr is a terminal and not --quiet; otherwise one that shows nothing."""
    console = None
    if not quiet and sys.stderr.isatty():
        from attnx.text import console as inert_console

        console = inert_console(stderr=True)
    return LayerProgress(description, console, unit=unit)


def model_spec(
    config: str | None,
    overrides: Overrides,
    *,
    model: str | None,
    text: str | None,
    layer: str | None,
    engine: str = "numpy",
    dtype: str | None = None,
    device: str = "auto",
    quiet: bool = False,
    config_name: str = "CONFIG",
    limits: Limits | None = None,
) -> AttentionSpec:
    """The spec of one layer of ``--model`` on ``--text`` (``--layer``, from 0), with the command line's overrides.

    ``limits`` (default: ``Limits.from_env()``) hold for the text, the checkpoint's files and every
    array the forward pass builds, checked before the first layer runs.
    """
    from attnx.models import load_model_spec

    limits = limits or Limits.from_env()
    path, given = check_model_options(config, model=model, text=text, config_name=config_name)
    random = {"--seed": overrides.seed, "--tokens": overrides.tokens, "--d-model": overrides.d_model}
    refuse(random, "describes random inputs; with --model the input is the model's layer")
    index = parse_layer(layer)
    assert index is not None  # parse_layer without allow_all never returns None
    words = read_text(given, limits)  # stdin is read once every option is known to be right
    with progress_for(f"running layers before {index}", quiet) as progress:
        return load_model_spec(path, words, index, engine=engine, dtype=dtype, device=device, overrides=overrides,
                               progress=progress, limits=limits)  # fmt: skip


def open_with_text(
    config: str | None,
    *,
    model: str | None,
    text: str | None,
    engine: str,
    dtype: str | None,
    device: str,
    limits: Limits | None,
) -> tuple[str, str, Model]:
    """``--model``'s folder, ``--text`` (read from stdin for ``-``) and the checkpoint opened in the engine's
    dtype under ``limits``, once the options fit together; the caller closes the model."""
    from attnx.engines import resolve_dtype
    from attnx.models import open_model

    limits = limits or Limits.from_env()
    path, given = check_model_options(config, model=model, text=text)
    words = read_text(given, limits)
    return path, words, open_model(path, resolve_dtype(engine, device, dtype), limits)


@contextlib.contextmanager
def every_layer(
    config: str | None,
    *,
    model: str | None,
    text: str | None,
    engine: str,
    dtype: str | None,
    device: str,
    quiet: bool,
    limits: Limits | None,
    needs: tuple[str, ...],
) -> Iterator[tuple[str, str, Iterator[AttentionResult]]]:
    """The model's folder, family and each layer's result on ``--text`` in turn (``needs`` computed), with a
    progress bar; the checkpoint is open while they are read."""
    from attnx.models import layer_results

    path, words, opened = open_with_text(config, model=model, text=text, engine=engine, dtype=dtype, device=device,
                                         limits=limits)  # fmt: skip
    with opened, progress_for("layers", quiet) as progress:
        results = layer_results(opened, words, engine=engine, device=device, needs=needs, progress=progress)
        yield path, opened.architecture.name, iter(results)


def model_view(
    config: str | None,
    *,
    model: str | None,
    text: str | None,
    engine: str = "numpy",
    dtype: str | None = None,
    device: str = "auto",
    quiet: bool = False,
    input_flags: Mapping[str, object] | None = None,
    limits: Limits | None = None,
) -> ModelView:
    """Every layer's heads of ``--model`` on ``--text``: labels and entropy, each layer computed once.

    ``input_flags`` (flag -> value) are the input options of the command: any one given is refused,
    since they change one layer's input and the model view shows the model as it is. ``limits``
    (default: ``Limits.from_env()``) hold as for ``model_spec``, for every layer.
    """
    from attnx.analysis.model_view import model_view as build

    refuse(input_flags or {}, "changes one layer's input; --layer all shows the model as it is: give --layer N")
    needs = ("weights", "scaled", "mask")
    with every_layer(config, model=model, text=text, engine=engine, dtype=dtype, device=device, quiet=quiet,
                     limits=limits, needs=needs) as (path, family, results):  # fmt: skip
        return build(results, model=path, architecture=family)


def model_rollout(
    *,
    model: str | None,
    text: str | None,
    engine: str = "numpy",
    dtype: str | None = None,
    device: str = "auto",
    quiet: bool = False,
    limits: Limits | None = None,
) -> Rollout:
    """Attention rollout of ``--model`` on ``--text`` through every layer, each layer's head average used once."""
    from attnx.analysis.measures import rollout

    with every_layer(None, model=model, text=text, engine=engine, dtype=dtype, device=device, quiet=quiet,
                     limits=limits, needs=("average_weights",)) as (_, _, results):  # fmt: skip
        first = next(results)  # a model has a layer
        averages = (result.average_weights for result in itertools.chain([first], results))
        return rollout((average for average in averages if average is not None), first.tokens)


def model_ablations(
    *,
    model: str | None,
    text: str | None,
    heads: list[str] | None,
    layer: int | None = None,
    engine: str = "numpy",
    dtype: str | None = None,
    device: str = "auto",
    quiet: bool = False,
    limits: Limits | None = None,
) -> Ablations:
    """The effect on ``--model``'s outputs for ``--text`` of dropping the ``--head`` values together, or of
    each head alone (of ``--layer`` only, when given) when none is given."""
    from attnx.analysis.effects import ablations, parse_heads

    _, words, opened = open_with_text(None, model=model, text=text, engine=engine, dtype=dtype, device=device,
                                      limits=limits)  # fmt: skip
    with opened:
        sets = [parse_heads(heads, opened.layers, opened.architecture.heads)] if heads else None
        if layer is not None:
            if heads:
                raise UsageError("--layer picks the heads to drop one by one; --head names them: give one or the other")
            opened.check_layer(layer)
        encoded = opened.encode(words)
        with progress_for("ablating", quiet, unit="ablations") as progress:
            return ablations(opened, encoded, sets, layers=None if layer is None else [layer], engine=engine,
                             device=device, progress=progress)  # fmt: skip


def model_detection(
    *,
    model: str | None,
    texts: str | None,
    samples: int,
    length: int,
    seed: int,
    engine: str = "numpy",
    dtype: str | None = None,
    device: str = "auto",
    quiet: bool = False,
    limits: Limits | None = None,
) -> tuple[Detection, list[TextRecord]]:
    """Head detection on ``--model`` over the texts of ``--texts`` or, without it, over ``samples`` random
    sequences of ``length`` tokens repeated (seeded by ``seed``); with each sequence's own record."""
    import numpy as np

    from attnx.analysis.detect import detect_heads
    from attnx.engines import resolve_dtype
    from attnx.io.texts import read_texts
    from attnx.models import open_model

    if model is None:
        raise UsageError(f"{'--texts' if texts is not None else 'attnx detect'} runs a checkpoint: give --model DIR")
    limits = limits or Limits.from_env()
    lines = read_texts(texts, limits) if texts is not None else None
    with open_model(model, resolve_dtype(engine, device, dtype), limits) as opened:
        arch = opened.architecture

        def encoded_texts(lines: list[str]) -> Iterator[Encoded]:
            for index, line in enumerate(lines):
                try:
                    yield opened.encode(line)
                except ModelError as exc:
                    raise ModelError(f"{texts}, text {index} (from 0): {exc}") from None

        def repeated(rng: np.random.Generator) -> Iterator[Encoded]:
            for _ in range(samples):
                encoded = opened.tokenizer.repeated(length, vocab_size=arch.vocab_size, rng=rng)
                if len(encoded.ids) > arch.max_length:
                    n, most = len(encoded.ids), arch.max_length
                    raise UsageError(f"--length {length}: repeated, with special tokens, that is {n} tokens; "
                                     f"the model reads at most {most}")  # fmt: skip
                yield encoded

        if lines is not None:
            sequences, count = encoded_texts(lines), len(lines)
            source = "the texts on stdin" if texts == STDIN else f"the texts of {texts}"
        else:
            sequences, count = repeated(np.random.default_rng(seed)), samples
            source = f"random sequences of {length} tokens, each repeated"
        with progress_for("detecting", quiet, unit="texts" if lines is not None else "sequences") as progress:
            found, records = detect_heads(opened, sequences, count=count, source=source, engine=engine,
                                          device=device, progress=progress)  # fmt: skip
    return found, records
