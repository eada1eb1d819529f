"""Where results go: consoles, stdout and files, warnings on stderr."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from attnx.cli.options import BINARY_FORMATS, AnyFormat, OutputFormat
from attnx.environment import current
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console, RenderableType


def warn(message: str) -> None:
    """One warning line on stderr, made inert and clipped as error lines are."""
    from attnx.text import message_line

    current().stderr.write(f"attnx: warning: {message_line(message)}\n")


def warn_fully_masked(rows: tuple[int, ...], quiet: bool = False) -> None:
    """Say which queries had every key blocked (their weights and head outputs are zero)."""
    if rows and not quiet:
        shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
        one = len(rows) == 1
        warn(
            f"{len(rows)} quer{'y' if one else 'ies'} ({shown}) {'has' if one else 'have'} every key blocked: "
            "weights and head outputs are zero there"
        )


def colour_allowed(no_color: bool) -> bool:
    """False when --no-color, NO_COLOR (any value) or TERM=dumb asks for plain text."""
    return current().colour(no_color)


def stdout_console(no_color: bool = False) -> Console:
    """A console on the environment's stdout (ANSI only on a terminal; width from COLUMNS when piped)."""
    from attnx.text import console as inert_console

    env = current()
    color_system: Literal["auto"] | None = "auto" if env.colour(no_color) else None
    # emoji=False: attnx prints no :emoji: codes, and rich would import its 2 ms table of them
    return inert_console(file=env.stdout, color_system=color_system, _environ=env.environ)


def trimmed(text: str) -> str:
    """``text`` with the blanks after each line's last character dropped: Rich pads a table's title and last
    column to the table's width, which a pipe or a file only carries along."""
    return "\n".join(line.rstrip(" ") for line in text.split("\n"))


def show(console: Console, renderable: RenderableType) -> None:
    """Print ``renderable`` on ``console``: as drawn on a terminal; to a pipe, each line ``trimmed``."""
    if console.is_terminal or console.record:
        console.print(renderable)
        return
    with console.capture() as captured:
        console.print(renderable)
    console.file.write(trimmed(captured.get()))
    console.file.flush()


def write_stdout(text: str) -> None:
    """Machine output goes straight to stdout, never through Rich (no wrapping, no markup)."""
    stdout = current().stdout
    stdout.write(text)
    stdout.flush()


Producer = Callable[[], "str | bytes | RenderableType | Iterator[str]"]


def _stream(chunks: Iterator[str], output: str | None) -> None:
    """Text made chunk by chunk: to stdout as it comes, or to ``output`` (atomically) once whole."""
    if output is not None:
        from attnx.io.output import atomic_write

        atomic_write(output, "".join(chunks).encode("utf-8"))
        return
    stdout = current().stdout
    for chunk in chunks:
        stdout.write(chunk)
    stdout.flush()


def check_destination(output_format: OutputFormat, output: str | None) -> None:
    """Refuse binary output to a terminal before any work is done."""
    if output_format in BINARY_FORMATS and output is None and current().stdout_isatty:
        raise UsageError(
            f"--format {output_format.value} is binary; write it with --output FILE or redirect stdout to a file"
        )


def emit(
    output_format: AnyFormat,
    producers: Mapping[OutputFormat, Producer],
    *,
    output: str | None = None,
    no_color: bool = False,
) -> None:
    """Produce ``output_format`` with its producer and deliver it to stdout or, atomically, to ``output``.

    A format the command has no producer for is a usage error listing the ones it has.
    """
    output_format = OutputFormat(output_format.value)
    make = producers.get(output_format)
    if make is None:
        names = ", ".join(f.value for f in producers)
        raise UsageError(f"--format {output_format.value} is not available for this command; choose from {names}")
    check_destination(output_format, output)
    payload = make()
    if isinstance(payload, Iterator):  # streamed text (CSV): the first chunks leave before the rest is made
        _stream(payload, output)
        return
    if isinstance(payload, bytes):
        _deliver_bytes(payload, output)
    elif output_format is OutputFormat.table and output is None:
        show(stdout_console(no_color), payload)
    else:
        text = render_plain(payload) if output_format is OutputFormat.table else str(payload)
        if output is None:
            write_stdout(text)
        else:
            from attnx.io.output import atomic_write

            atomic_write(output, text.encode("utf-8"))


def _deliver_bytes(data: bytes, output: str | None) -> None:
    """Binary output: to ``output`` atomically, or as bytes to stdout after the text already written there."""
    if output is not None:
        from attnx.io.output import atomic_write

        atomic_write(output, data)
        return
    stdout = current().stdout
    stdout.flush()
    stdout.buffer.write(data)
    stdout.buffer.flush()


def emit_view(
    output_format: AnyFormat,
    producers: Mapping[OutputFormat, Producer],
    view: Callable[[bool], RenderableType],
    *,
    output: str | None = None,
    export: str | None = None,
    no_color: bool = False,
) -> None:
    """``emit``, where the table is ``view(colour)`` and can be saved, exactly as printed, with ``export``.

    ``colour`` tells the view whether colours will be seen, so that it can fall back to shade
    characters: on stdout, when the console shows colour; in an SVG or HTML export, unless colour is
    turned off; never in a text file. The export goes through Rich's recording console and is
    written atomically; an extension other than .svg, .html or .txt is a usage error.
    """
    from pathlib import Path

    output_format = OutputFormat(output_format.value)
    suffix = Path(export).suffix.lower() if export is not None else None
    if export is not None and (output_format is not OutputFormat.table or output is not None):
        raise UsageError("--export saves the table view; leave out --format and --output")
    if suffix not in (None, ".svg", ".html", ".txt"):
        raise UsageError(f"--export writes .svg, .html or .txt files, not {export!r}")
    if output_format is not OutputFormat.table or output is not None:
        emit(output_format, {OutputFormat.table: lambda: view(False), **producers}, output=output, no_color=no_color)
        return
    console = stdout_console(no_color)
    shown = console.color_system is not None
    wanted = colour_allowed(no_color) and suffix != ".txt"  # what the export shows
    console.record = export is not None and wanted == shown and console.is_terminal  # piped: trimmed, not recorded
    show(console, view(shown))
    if export is not None:
        _export(console, view, export, wanted)


def _export(console: Console, view: Callable[[bool], RenderableType], export: str, colour: bool) -> None:
    """Save the view to ``export`` (.svg, .html or .txt), as ``console`` recorded it or, when it did not, drawn
    again in ``colour`` or none."""
    from pathlib import Path

    from attnx.io.output import atomic_write

    # Piped stdout shows shades where an SVG shows colours: the export then draws its own copy.
    recorder = console if console.record else _recording_console(console.width, colour)
    if recorder is not console:
        recorder.print(view(colour))
    saved = {".svg": lambda: recorder.export_svg(title="attnx"), ".html": recorder.export_html,
             ".txt": lambda: trimmed(recorder.export_text())}[Path(export).suffix.lower()]()  # fmt: skip
    atomic_write(export, saved.encode("utf-8"))


def _recording_console(width: int, colour: bool) -> Console:
    """A console that only records, ``width`` columns wide, in true colour or none."""
    from attnx.text import console as inert_console

    return inert_console(file=io.StringIO(), record=True, width=width, color_system="truecolor" if colour else None,
                   force_terminal=colour, highlight=False, emoji=False)  # fmt: skip


def render_plain(renderable: RenderableType) -> str:
    """A renderable as plain text (no ANSI), at the width of COLUMNS or 100, for files."""
    from attnx.text import console as inert_console

    width = current().columns or 100
    buffer = io.StringIO()
    console = inert_console(file=buffer, color_system=None, width=width)
    console.print(renderable)
    return trimmed(buffer.getvalue())
