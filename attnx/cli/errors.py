"""Exit codes, and the one place where errors become them: one line on stderr, a documented code."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import NoReturn, ParamSpec, TypeVar

import typer

from attnx.environment import current
from attnx.errors import AttnxError, OutputError

P = ParamSpec("P")
R = TypeVar("R")


class ExitCode(IntEnum):
    """What attnx's exit status means (docs/commands.md, "Exit codes")."""

    OK = 0
    FAILURE = 1  # a comparison beyond tolerance, or a runtime or I/O failure
    USAGE = 2  # bad usage or bad input
    INTERRUPTED = 130


# Error kinds that are not the user's input: the run itself failed (an unwritable target, a full disk).
# Every other AttnxError is bad usage or bad input.
RUNTIME_ERRORS: tuple[type[AttnxError], ...] = (OutputError,)


def exit_code_of(error: AttnxError) -> ExitCode:
    """The exit code an error of this kind leaves with."""
    return ExitCode.FAILURE if isinstance(error, RUNTIME_ERRORS) else ExitCode.USAGE


def cause_chain(error: BaseException) -> list[str]:
    """``error`` and what caused it, outermost first, one ``Type: message`` each."""
    chain: list[str] = []
    seen: BaseException | None = error
    while seen is not None and len(chain) < 20:
        chain.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return chain


def fail(message: str, code: ExitCode = ExitCode.USAGE, causes: Sequence[str] = ()) -> NoReturn:
    """Print one line on stderr (line breaks inside ``message`` become spaces, control characters escapes, a
    long message clipped: ``attnx.text.message_line``), then one line per cause (``--debug``), and leave
    with ``code``."""
    from attnx.text import message_line

    lines = [f"attnx: error: {message}", *(f"attnx: caused by {cause}" for cause in causes)]
    current().stderr.write("".join(message_line(line) + "\n" for line in lines))
    raise typer.Exit(int(code))


def guarded(func: Callable[P, R]) -> Callable[P, R]:
    """Run a command, turning domain errors into one line on stderr and a documented exit code.

    With ``--debug`` (or ATTNX_DEBUG=1: the ``debug`` of the environment in force) a domain error's cause chain
    follows its line, and an unexpected error shows its traceback.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from attnx.io.output import reading_scope

        try:
            with reading_scope():  # the files the command reads are never written over
                return func(*args, **kwargs)
        except AttnxError as exc:
            fail(str(exc), exit_code_of(exc), cause_chain(exc)[1:] if current().debug else ())
        except KeyboardInterrupt:
            fail("interrupted", ExitCode.INTERRUPTED)
        except BrokenPipeError:
            # The reader went away (`attnx ... | head -1`): stop quietly, and keep Python's exit-time
            # flush of stdout from failing again.
            from attnx.streams import quiet_stdout

            quiet_stdout()
            raise typer.Exit(ExitCode.OK) from None
        except typer.Exit:
            raise
        except Exception as exc:
            if current().debug:
                raise
            fail(f"unexpected {type(exc).__name__}: {exc} (re-run with --debug for the traceback)", ExitCode.FAILURE)

    return wrapper
