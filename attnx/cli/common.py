"""What every command shares: option types, consoles, and turning errors into exit codes."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Annotated, NoReturn, ParamSpec, TypeVar

import typer

from attnx.errors import AttnxError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from attnx.spec import AttentionSpec

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

P = ParamSpec("P")
R = TypeVar("R")


class OutputFormat(str, Enum):
    """What a command writes on stdout."""

    table = "table"
    json = "json"


class Dtype(str, Enum):
    """Floating-point types an engine can compute in."""

    float64 = "float64"
    float32 = "float32"


class Engine(str, Enum):
    """Engines that compute attention."""

    numpy = "numpy"


ConfigArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[CONFIG|-]",
        help="Input file (YAML or JSON), or - for stdin. Default: the built-in worked example.",
        show_default=False,
    ),
]
HeadsOpt = Annotated[
    int | None, typer.Option("--heads", "-H", min=1, help="Number of heads (overrides the input).", show_default=False)
]
SeedOpt = Annotated[
    int | None,
    typer.Option("--seed", min=0, help="Draw Q, K, V from a standard normal with this seed.", show_default=False),
]
TokensOpt = Annotated[
    str | None,
    typer.Option("--tokens", help='Token labels separated by spaces, e.g. "the quick brown fox".', show_default=False),
]
DModelOpt = Annotated[
    int | None,
    typer.Option("--d-model", min=1, help="Width of the random Q, K, V (with --seed; default 8).", show_default=False),
]
EngineOpt = Annotated[Engine, typer.Option("--engine", "-e", help="Engine that computes.")]
DtypeOpt = Annotated[Dtype, typer.Option("--dtype", help="Floating-point type of the computation.")]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format on stdout.")]
PrecisionOpt = Annotated[int, typer.Option("--precision", "-p", min=0, max=12, help="Decimals shown in tables.")]
NoColorOpt = Annotated[bool, typer.Option("--no-color", help="No colour or styles, even on a terminal.")]


def load_input(
    config: str | None,
    *,
    heads: int | None = None,
    seed: int | None = None,
    tokens: str | None = None,
    d_model: int | None = None,
) -> AttentionSpec:
    """The spec named by the shared input options (CONFIG and the flags that override it)."""
    from attnx.io import Overrides, load_spec

    overrides = Overrides(
        heads=heads, seed=seed, tokens=tuple(tokens.split()) if tokens is not None else None, d_model=d_model
    )
    return load_spec(config, overrides)


def colour_allowed(no_color: bool) -> bool:
    """False when --no-color, NO_COLOR (any value) or TERM=dumb asks for plain text."""
    return not (no_color or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb")


def stdout_console(no_color: bool = False) -> Console:
    """A console on the current stdout (ANSI only on a terminal; width from COLUMNS when piped)."""
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, color_system="auto" if colour_allowed(no_color) else None)


def write_stdout(text: str) -> None:
    """Machine output goes straight to stdout, never through Rich (no wrapping, no markup)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print one line on stderr and leave with ``code``."""
    sys.stderr.write(f"attnx: error: {message}\n")
    raise typer.Exit(code)


def guarded(func: Callable[P, R]) -> Callable[P, R]:
    """Run a command, turning domain errors into one line on stderr and a documented exit code."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except AttnxError as exc:
            fail(str(exc), EXIT_USAGE)
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)

    return wrapper
