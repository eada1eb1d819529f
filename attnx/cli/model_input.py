"""What commands share for --model: the options checked, a progress bar on stderr, a layer's spec, the model view."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from attnx.analysis.model_view import ModelView
    from attnx.io.schema import Overrides
    from attnx.spec import AttentionSpec

ALL = "all"


def parse_layer(value: str | None, *, allow_all: bool = False) -> int | None:
    """``--layer``: ``"3"`` -> 2 (layers count from 1 on the command line); ``"all"`` -> None; default layer 1."""
    if value is None:
        return 0
    if value.strip().lower() == ALL:
        if not allow_all:
            raise UsageError("--layer all is for `attnx heads` (the model view); give one layer, counted from 1")
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise UsageError(f"--layer takes a layer number counted from 1{' or all' if allow_all else ''}, not {value!r}")
    return number - 1


def check_model_options(
    config: str | None, *, model: str | None, text: str | None, config_name: str = "CONFIG"
) -> tuple[str, str]:
    """The checkpoint folder and the text, once --model's companions are known to fit together."""
    if model is None:
        raise UsageError("--text and --layer go with --model DIR")
    if config is not None:
        raise UsageError(f"--model replaces {config_name}: give one or the other")
    if text is None:
        raise UsageError('--model needs the text to run: --text "..."')
    return model, text


def refuse(flags: Mapping[str, object], why: str) -> None:
    """A usage error naming the first of ``flags`` (flag -> value) that was given, with ``why``."""
    given = [flag for flag, value in flags.items() if value not in (None, False)]
    if given:
        raise UsageError(f"{given[0]} {why}")


class LayerProgress:
    """A progress bar on stderr for the layers a forward pass runs.

    Shown only with a console (the caller passes one for a terminal) and only once the work has
    taken ``delay`` seconds: a small checkpoint and a short text finish before it would appear.
    """

    def __init__(self, description: str, console: Console | None, delay: float = 0.3) -> None:
        self.description = description
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

            self._bar = Progress(TextColumn(self.description), BarColumn(), MofNCompleteColumn(), TextColumn("layers"),
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
    if not quiet and sys.stderr.isatty():
        from rich.console import Console

        console = Console(stderr=True)
    return LayerProgress(description, console)


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
) -> AttentionSpec:
    """The spec of one layer of ``--model`` on ``--text`` (``--layer``, from 1), with the command line's overrides."""
    from attnx.models import load_model_spec

    path, words = check_model_options(config, model=model, text=text, config_name=config_name)
    random = {"--seed": overrides.seed, "--tokens": overrides.tokens, "--d-model": overrides.d_model}
    refuse(random, "describes random inputs; with --model the input is the model's layer")
    index = parse_layer(layer)
    assert index is not None  # parse_layer without allow_all never returns None
    with progress_for(f"running layers before {index + 1}", quiet) as progress:
        return load_model_spec(path, words, index, engine=engine, dtype=dtype, device=device, overrides=overrides,
                               progress=progress)  # fmt: skip


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
) -> ModelView:
    """Every layer's heads of ``--model`` on ``--text``: labels and entropy, each layer computed once.

    ``input_flags`` (flag -> value) are the input options of the command: any one given is refused,
    since they change one layer's input and the model view shows the model as it is.
    """
    from attnx.analysis.model_view import model_view as build
    from attnx.engines import resolve_dtype
    from attnx.models import layer_results, open_model

    path, words = check_model_options(config, model=model, text=text)
    refuse(input_flags or {}, "changes one layer's input; --layer all shows the model as it is: give --layer N")
    with open_model(path, resolve_dtype(engine, device, dtype)) as opened, progress_for("layers", quiet) as progress:
        results = layer_results(opened, words, engine=engine, device=device, progress=progress)
        return build(results, model=path, architecture=opened.architecture.name)
