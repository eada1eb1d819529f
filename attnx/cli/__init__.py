"""The attnx command line: a Typer app whose commands live one per module."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Annotated

import typer

from attnx import __version__
from attnx.cli import bench as bench_cmd
from attnx.cli import check as check_cmd
from attnx.cli import diff as diff_cmd
from attnx.cli import engines as engines_cmd
from attnx.cli import heads as heads_cmd
from attnx.cli import model as model_cmd
from attnx.cli import run as run_cmd
from attnx.cli import trace as trace_cmd
from attnx.cli.common import DEBUG

EPILOG = (
    "Exit codes: 0 success · 1 differences beyond tolerance or a runtime failure · 2 bad usage or input · "
    "130 interrupted."
)

app = typer.Typer(
    name="attnx",
    help="Compute multi-head attention and show every step of it.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attnx {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the full traceback of an unexpected error (or ATTNX_DEBUG=1).")
    ] = False,
) -> None:
    """Compute multi-head attention and show every step of it."""
    if debug:
        DEBUG["on"] = True


app.command("run", epilog=EPILOG)(run_cmd.run)
app.command("trace", epilog=EPILOG)(trace_cmd.trace)
app.command("check", epilog=EPILOG)(check_cmd.check)
app.command("diff", epilog=EPILOG)(diff_cmd.diff)
app.command("heads", epilog=EPILOG)(heads_cmd.heads)
app.command("model", epilog=EPILOG)(model_cmd.model)
app.command("engines", epilog=EPILOG)(engines_cmd.engines)
app.command("bench", epilog=EPILOG)(bench_cmd.bench)


def main() -> None:
    """Console-script entry point.

    Click's usage errors (an unknown option, a value outside its choices) become one line on stderr
    and exit 2, as attnx's own errors do, instead of a framed box.
    """
    exceptions = _click_exceptions()
    try:
        code = app(prog_name="attnx", standalone_mode=False)
    except exceptions.NoArgsIsHelpError as exc:  # bare `attnx`: the help, as click shows it
        exc.show(file=sys.stdout)
        raise SystemExit(exc.exit_code) from None
    except exceptions.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "attnx"
        sys.stderr.write(f"attnx: error: {exc.format_message()} (see '{command} -h')\n")
        raise SystemExit(2) from None
    except typer.Abort:  # end of input at a prompt
        sys.stderr.write("attnx: interrupted\n")
        raise SystemExit(130) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def _click_exceptions() -> ModuleType:
    """The exceptions module of the click that Typer runs on: its own copy from Typer 0.26, else click."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older Typer, on the click package
        from click import exceptions
    return exceptions
