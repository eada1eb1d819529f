"""The attnx command line: a Typer app whose commands live one per module."""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
from collections.abc import Callable, MutableMapping, Sequence
from typing import Annotated, Any, cast

import typer
from typer.core import TyperCommand, TyperGroup

from attnx import __version__
from attnx.cli.coercion import lighten
from attnx.cli.errors import ExitCode
from attnx.cli.output import warn
from attnx.environment import Environment, current, using

EXIT_CODES = (
    "Exit codes: 0 success · 1 differences beyond tolerance or a runtime failure · 2 bad usage or input · "
    "130 interrupted."
)

# A checkpoint folder for the examples that need one (nothing in the repository is one): the tests run those
# examples on a tiny GPT-2 of their own in its place.
CHECKPOINT = "models/gpt2"
TRANSLATOR = "models/t5-small"  # an encoder-decoder, in the examples of `align`
# A kernel's output for the `check --against` example (nothing in the repository is one): the tests save a
# right one in its place.
KERNEL_OUTPUT = "out.npy"

# Each command's help ends with these, runnable as they are from the repository's root (tests/cli/test_help.py
# runs every one). Keep each under 78 characters: the help must stay legible at 80 columns.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "": (
        "attnx run",
        "attnx trace --token cat",
        "attnx heads configs/attention-patterns.yaml",
    ),
    "run": (
        "attnx run",
        "attnx run configs/causal-self-attention.yaml --show weights,output",
        'attnx run --seed 0 --tokens "the quick brown fox" -H 2 --drop-head 0',
    ),
    "trace": (
        "attnx trace --token cat",
        "attnx trace configs/causal-self-attention.yaml --query 3 --head 1",
        "attnx trace configs/random-quick-brown-fox.yaml -t fox --format json",
    ),
    "check": (
        "attnx check",
        "attnx check configs/gqa.yaml --format json",
        f"attnx check configs/gqa.yaml --against {KERNEL_OUTPUT} --kernel-dtype bfloat16",
    ),
    "diff": (
        "attnx diff --heads 1,2,4",
        "attnx diff configs/pitfall-wrong-scale.yaml --scale sqrt_dk,sqrt_d_model",
        "attnx diff configs/pitfall-interleaved.yaml --layout contiguous,interleaved",
    ),
    "heads": (
        "attnx heads configs/attention-patterns.yaml",
        "attnx heads configs/attention-patterns.yaml --view heatmap",
        'attnx heads --seed 0 --tokens "a b c a b c" -H 4 --format json',
    ),
    "model": (
        f"attnx model {CHECKPOINT}",
        f'attnx heads --model {CHECKPOINT} --text "The cat sat on the mat" --layer all',
        f'attnx run --model {CHECKPOINT} --text "The cat sat" --layer 1 --show weights',
    ),
    "rollout": (
        f'attnx rollout --model {CHECKPOINT} --text "The cat sat on the mat" -t mat',
        f'attnx rollout --model {CHECKPOINT} --text "The cat sat" --query 2 -f json',
    ),
    "align": (
        f'attnx align --model {TRANSLATOR} --text "The cat sat" --target "Le chat"',
        f'attnx align --model {TRANSLATOR} --text "A cat" --target "Un" -f json',
    ),
    "ablate": (
        f'attnx ablate --model {CHECKPOINT} --text "The cat sat on the mat"',
        f'attnx ablate --model {CHECKPOINT} --text "The cat sat" --head L0H1,L1H2',
        f"attnx ablate --model {TRANSLATOR} --text cat --target un --head cross:1.2",
    ),
    "detect": (
        f"attnx detect --model {CHECKPOINT} --length 6",
        f"attnx detect --model {CHECKPOINT} --samples 4 --length 6 -m sink -f json",
        f"attnx detect --model {CHECKPOINT} --texts configs/texts.txt -f jsonl",
    ),
    "explore": (
        "attnx explore",
        f'attnx explore --model {CHECKPOINT} --text "The cat sat on the mat"',
    ),
    "engines": (
        "attnx engines",
        "attnx engines --format json",
    ),
    "bench": (
        "attnx bench --lengths 128,256,512",
        "attnx bench --engines numpy --dtype float64 --path weights --lengths 64,128",
    ),
}
# What the examples of a command need that the repository does not hold, said above them.
NOTES = {
    "check": f"{KERNEL_OUTPUT} is what your kernel computed for the input: [N, H·d], or SDPA's [1, H, N, d]",
    "model": f"{CHECKPOINT} is a checkpoint folder you downloaded (config.json, model.safetensors, tokenizer.json) "
    "or a GGUF file",
    "rollout": f"{CHECKPOINT} is a checkpoint folder you downloaded, as for `attnx model`",
    "ablate": f"{CHECKPOINT} is a checkpoint folder you downloaded, as for `attnx model`; {TRANSLATOR} an "
    "encoder-decoder",
    "align": f"{TRANSLATOR} is an encoder-decoder checkpoint folder you downloaded (T5, Flan-T5, mT5)",
    "detect": f"{CHECKPOINT} is a checkpoint folder you downloaded, as for `attnx model`",
}


def epilog(command: str) -> str:
    """A command's examples (indented, one per line; ``""``: the app's own), then the exit codes."""
    note = NOTES.get(command)
    lines = "\n".join(f"  {example}" for example in EXAMPLES[command])
    return f"Examples{f' ({note})' if note else ''}:\n{lines}\n\n{EXIT_CODES}"


# The commands, in the order the help lists them: each is the function of its name in attnx/cli/NAME.py, imported
# when the command is made (``Commands``).
COMMANDS = ("run", "trace", "check", "diff", "heads", "model", "rollout", "align", "ablate", "detect", "explore",
            "engines", "bench")  # fmt: skip


# What the app's help says of each command: the first paragraph of its function's docstring, as written there
# (tests/cli/test_help.py holds the two equal). Listing the commands from their modules would import all twelve:
# 0.06 s of a 0.34 s `attnx --help` (AMD EPYC, 2 cores).
SUMMARIES = {
    "run": "Compute multi-head attention and print raw scores, scaled scores, weights and outputs.",
    "trace": "Explain one query token step by step: per head, the dot products term by term, the softmax, the output.",
    "check": "Cross-check every engine/device/dtype against the float64 NumPy reference, or a kernel (--against).",
    "diff": "Compare: one input at several settings (--heads 1,2,4, --scale, --layout or --kv-heads), or A with B.",
    "heads": "Per head: entropy, max weight, top key and effective keys per query; scale diagnostics; a pattern label.",
    "model": "Describe a local checkpoint folder or GGUF file: family, layers, heads, d_model, vocabulary, max length.",
    "rollout": "Attention rollout: how much each token reaches a query through every layer, residual stream included.",
    "align": "Align a target with its source: for each target token, the source token the cross-attention weighs most.",
    "ablate": "Drop heads and measure the whole model: its last hidden state and, with an LM head, its next-token "
    "guesses.",
    "detect": "Find previous-token, duplicate-token and induction heads and sinks, over many sequences, with the "
    "counts.",
    "explore": "Explore attention full screen: move over queries, heads and layers, and every panel follows.",
    "engines": "List the engines, their versions, the devices present and the dtypes each supports.",
    "bench": "Time the engines on random Q/K/V over a range of sequence lengths (progress on stderr).",
}


def function(name: str) -> Callable[..., None]:
    """The function of command ``name`` (``run`` -> ``attnx.cli.run.run``), its module imported now."""
    module = importlib.import_module(f"attnx.cli.{name}")
    return cast("Callable[..., None]", getattr(module, name))


HELP_OPTIONS = ("-h", "--help")
SETTINGS: dict[str, Any] = {
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "context_settings": {"help_option_names": list(HELP_OPTIONS)},
}


class Command(TyperCommand):
    """A command, whose help is laid out by Typer without importing what attnx's help never uses (``richhelp``)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The command's help, as Typer lays it out."""
        from attnx.cli.richhelp import import_rich_utils

        import_rich_utils()
        super().format_help(ctx, formatter)


class Commands(TyperGroup):
    """The app's commands, each made into a Click command from its function the first time it is asked for.

    Typer reads every command's signature when it makes the app (``typer.main.get_command``): 65 ms for twelve
    commands of a 0.55 s ``attnx run`` (cProfile, Typer 0.29.2, AMD EPYC 2 cores). Made one at a time, a command
    pays for itself only; the app's help lists them by their ``SUMMARIES`` without making them.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command's name, in the order of ``COMMANDS``."""
        return list(COMMANDS)

    listing = False  # while the app's help is written: its list of commands needs their summaries alone

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The app's help, which lists each command by its summary without making it (nor importing its module)."""
        from attnx.cli.richhelp import import_rich_utils

        import_rich_utils()
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """Command ``cmd_name``, made now if it was not yet (None: no such command); while the app's help is
        written, a command not yet made stands in as its name and summary (the help lists nothing else)."""
        if self.listing and cmd_name not in self.commands and cmd_name in COMMANDS:
            from rich.markup import escape

            return TyperCommand(cmd_name, help=escape(SUMMARIES[cmd_name]))
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            single = typer.Typer(**SETTINGS)
            single.command(cmd_name, cls=Command, epilog=epilog(cmd_name))(function(cmd_name))
            made = typer.main.get_command(single)
            as_written(made)
            self.commands[cmd_name] = made
        return self.commands.get(cmd_name)


app = typer.Typer(
    name="attnx",
    cls=Commands,
    help="Compute multi-head attention and show every step of it.",
    epilog=epilog(""),
    no_args_is_help=True,
    **SETTINGS,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attnx {__version__}", file=current().stdout)
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
        current().debug = True  # the run's environment, installed by ``main``


@functools.cache
def click_command() -> Any:
    """The Click group Typer makes of the app, made once per process (calling ``app()`` would make it again each
    time), its commands made as they are asked for (``Commands``). Its help texts are shown as written
    (``as_written``)."""
    command = typer.main.get_command(app)
    as_written(command)
    return command


def command(name: str) -> Any:
    """The Click command of command ``name`` (``run``, ``trace``, ...), made once per process."""
    group = click_command()
    return group.get_command(group.context_class(group), name)


def as_written(command: Any) -> None:
    """Make the help of ``command`` and of each of its commands show what the source says, and give their
    parameters (``--help`` included) the fast path of ``attnx.cli.coercion``.

    Typer reads every help text as Rich markup, where ``[query, H·d]`` is a tag and vanishes: each text's
    would-be tags are escaped. Typer shows a flag's type, ``<bool>``, where a flag takes no value: a flag
    (``--help`` included) shows no metavar.
    """
    from rich.markup import escape

    command.help = command.help and escape(command.help)
    command.epilog = command.epilog and escape(command.epilog)
    context = command.context_class(command, help_option_names=list(HELP_OPTIONS))
    for param in [*command.params, command.get_help_option(context)]:
        if param is None:
            continue
        param.help = getattr(param, "help", None) and escape(param.help)
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif getattr(param, "metavar", "") is None and getattr(param, "param_type_name", "") == "option":
            short_metavar(param)
        lighten(param)  # values converted without pydantic where they plainly fit (attnx/cli/coercion.py)
    for sub in getattr(command, "commands", {}).values():
        as_written(sub)


def short_metavar(param: Any) -> None:
    """Show a choice by its name, its choices in its help (``--dtype DTYPE`` ... ``One of: float64, float32, ...``),
    and a whole number as ``N``: Typer's ``<float64|float32|bfloat16|float16>`` and ``<int range>`` widen the
    column of values until, at 80 columns, the descriptions are squeezed into their last 25 cells. An option
    declared with a metavar keeps it; parameters of a Typer before 0.29 (no ``type_descriptor``) are left as
    they are."""
    from enum import Enum
    from typing import get_args, get_origin

    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        return
    annotation = descriptor.annotation
    if get_origin(annotation) is list:
        (annotation,) = get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        param.metavar = max(param.opts, key=len).split("-")[-1].upper()  # --kernel-dtype: DTYPE
        choices = f"One of: {', '.join(str(member.value) for member in annotation)}."
        param.help = f"{param.help} {choices}" if param.help else choices
    elif annotation is int:
        param.metavar = "N"


WIDTH_RANGE = (20, 1000)  # terminal widths attnx lays out for: narrower cannot show a table, wider floods


def _untrusted_width(environ: MutableMapping[str, str]) -> None:
    """Treat COLUMNS as untrusted input: a value that is no width (``abc``, ``0``) is dropped, so that the
    terminal's own width (or 80 when piped) is used; one outside 20-1000 is clamped. Either says so on stderr.
    """
    value = environ.get("COLUMNS")
    if value is None:
        return
    low, high = WIDTH_RANGE
    if not value.strip().isdigit() or int(value) == 0:
        del environ["COLUMNS"]
        warn(f"COLUMNS={value!r} is not a terminal width; using the terminal's own")
    elif not low <= int(value) <= high:
        environ["COLUMNS"] = str(min(max(int(value), low), high))
        warn(f"COLUMNS={value} is outside {low}-{high}; using {environ['COLUMNS']}")


def _show_warning(message: Warning | str, category: type[Warning], *rest: object, **options: object) -> None:
    """A warning from any library, written as attnx writes warnings: one inert line on stderr."""
    warn(f"{category.__name__}: {message}")


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> None:
    """Console-script entry point (through ``attnx.console``): run ``attnx ARGV`` (default: ``sys.argv[1:]``) in
    ``env`` (default: the process's, made now), which is in force for the whole run.

    Usage errors (an unknown option, a value outside its choices), which Typer raises as
    ``TyperException``, become one line on stderr and exit 2, as attnx's own errors do, instead
    of a framed box. Bare ``attnx`` prints the help and exits 2.
    """
    with using(env if env is not None else Environment.from_process()):
        _main(argv)


def _main(argv: Sequence[str] | None) -> None:
    """``main`` in the environment it installed."""
    env = current()
    _untrusted_width(env.environ)
    args = list(argv) if argv is not None else None
    try:
        with warnings.catch_warnings():  # every warning (NumPy's, a library's) as one attnx line
            warnings.showwarning = _show_warning
            code = click_command()(args, prog_name="attnx", standalone_mode=False)
    except BrokenPipeError:  # output piped into `head -1`: quiet, as every output is
        from attnx.streams import quiet_stdout

        quiet_stdout()
        raise SystemExit(ExitCode.OK) from None
    except SystemExit as exc:
        # Rich (Typer's help, attnx's tables) answers a broken pipe by sending stdout to /dev/null and exiting 1;
        # the reader leaving early (`attnx run --help | head -1`) is not a failure.
        if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):
            raise SystemExit(ExitCode.OK) from None
        raise
    except typer.TyperException as exc:
        context = getattr(exc, "ctx", None)
        if context is not None and not (sys.argv[1:] if argv is None else argv):  # bare `attnx`: the help, on stdout
            typer.echo(context.get_help(), file=env.stdout)
            raise SystemExit(ExitCode.USAGE) from None
        command = context.command_path if context is not None else "attnx"
        # Typer 0.29 words a bad choice through pydantic: "Value error, 'x' is not one of ..."
        from attnx.text import message_line

        message = exc.format_message().replace("Value error, ", "")
        env.stderr.write(f"attnx: error: {message_line(message)} (see '{command} -h')\n")
        raise SystemExit(ExitCode.USAGE) from None
    except typer.Abort:  # end of input at a prompt
        env.stderr.write("attnx: interrupted\n")
        raise SystemExit(ExitCode.INTERRUPTED) from None
    raise SystemExit(code if isinstance(code, int) else 0)
