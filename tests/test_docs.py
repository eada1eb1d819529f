"""Every attnx command in README.md and docs/*.md runs and does what the text says (tests/docs_examples.py)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import docs_examples as docs
from tests.runner import run_attnx

EXAMPLES, MISTAKES = docs.parse_files(docs.documents())


@pytest.fixture(scope="session")
def pages(tmp_path_factory: pytest.TempPathFactory) -> docs.Pages:
    """Each document's folder, made as a fresh clone's on first use, where its commands run in order."""
    return docs.Pages(tmp_path_factory.mktemp("docs"))


@pytest.fixture
def docs_folder(tmp_path: Path) -> Path:
    """A folder as a fresh clone's (configs/, scripts/), for the harness's own tests."""
    return docs.clone_folder(tmp_path / "clone")


class TestDocumentedCommands:
    """What the README and docs show is what attnx does."""

    @pytest.mark.parametrize("example", [pytest.param(e, id=e.name) for e in EXAMPLES])
    def test_command(self, example: docs.Example, pages: docs.Pages) -> None:
        """The command, run on its page after every command above it, exits as the text says and prints the lines
        shown under it."""
        if re.search(r"\bjq\b", example.command) and shutil.which("jq") is None:
            pytest.skip("jq is not installed (apt-get install jq); .ci/run installs it")
        result = pages.check(example)
        if result.failure is not None:
            pytest.fail(result.failure, pytrace=False)

    @pytest.mark.parametrize("path", docs.documents(), ids=lambda p: p.relative_to(docs.ROOT).as_posix())
    def test_no_command_outside_a_console_block(self, path: Path) -> None:
        """Each attnx command shown is a `$ attnx ...` line of a console block, where it is run; no pipeline is said
        to exit with attnx's failing status."""
        mistakes = [str(m) for m in MISTAKES if m.path == path]
        if mistakes:
            pytest.fail("\n".join(mistakes), pytrace=False)

    def test_the_docs_hold_examples(self) -> None:
        """The scan finds the README and its examples, so that a broken scan cannot pass silently."""
        assert (docs.ROOT / "README.md") in docs.documents()
        assert sum(e.path.name == "README.md" for e in EXAMPLES) >= 5


class TestWhatTheDocsTell:
    """The set-up the docs show keeps a reader's clone as it was: its install editable, its `git status` clean,
    and the download commands those of the tools installed."""

    def test_what_the_commands_make_is_ignored(self, pages: docs.Pages) -> None:
        """Every file the pages' commands make, run in a clone's root as written (models/, kernel/, run.json,
        bomb.yaml, ...), is ignored by the repository's .gitignore."""
        git = shutil.which("git")
        if git is None or not (docs.ROOT / ".git").exists():
            pytest.skip("not a git clone")
        for example in EXAMPLES:
            pages.check(example)
        made = sorted(pages.made())
        assert {"models/", "kernel/", "run.json", "bomb.yaml"} <= set(made)
        ignored = subprocess.run([git, "-C", str(docs.ROOT), "check-ignore", "--no-index", "--stdin"],
                                 input="\n".join(made), capture_output=True, text=True, check=False)  # fmt: skip
        assert sorted(set(made) - set(ignored.stdout.splitlines())) == []

    def test_extras_keep_the_install_editable(self) -> None:
        """The set-up installs attnx editable (``pip install -e ".[dev]"``); every extra installed after it, in the
        docs and in attnx's own hints, keeps ``-e``: without it pip replaces the install with a copy."""
        places = [*docs.documents(), docs.ROOT / "DEVELOPERS.md", *sorted((docs.ROOT / "attnx").rglob("*.py"))]
        plain = re.compile(r"pip install (?!-e )[\"']?\.\[")
        found = [f"{path.name}:{n}" for path in places
                 for n, line in enumerate(path.read_text("utf-8").splitlines(), 1) if plain.search(line)]  # fmt: skip
        assert found == []
        assert 'pip install -e ".[models]"' in (docs.ROOT / "docs" / "models.md").read_text("utf-8")

    def test_downloads_use_hf(self) -> None:
        """huggingface_hub 1.0 and later ships ``hf``, not ``huggingface-cli``: no command shown runs the old one."""
        texts = {path.name: path.read_text("utf-8") for path in [*docs.documents(), docs.ROOT / "DEVELOPERS.md"]}
        old = re.compile(r"^\s*(\$ )?huggingface-cli |`huggingface-cli [a-z]", re.M)
        assert [name for name, text in texts.items() if old.search(text)] == []
        assert "hf download gpt2 " in texts["models.md"]

    def test_downloads_parse_as_meant(self) -> None:
        """Each ``hf download`` line of docs/models.md, read by the installed hf's own parser: files named, or
        --include patterns and no file (hf ignores --include once a file is named)."""
        pytest.importorskip("huggingface_hub.cli.hf")
        import shlex

        from huggingface_hub.cli.hf import app

        download = app.get_command(None, "download").materialize()  # hf loads its commands on first use
        lines = [line for line in (docs.ROOT / "docs" / "models.md").read_text("utf-8").splitlines()
                 if line.startswith("hf download ")]  # fmt: skip
        parsed = [download.make_context("download", shlex.split(line)[2:]).params for line in lines]
        assert [(p["repo_id"], p["filenames"], p["include"], p["local_dir"]) for p in parsed] == [
            ("gpt2", ("config.json", "model.safetensors", "tokenizer.json"), (), "models/gpt2"),
            ("Qwen/Qwen2.5-0.5B", (), ("*.json", "*.safetensors"), "models/qwen2.5-0.5b"),
        ]


PYTHON_PAGE = docs.ROOT / "docs" / "python.md"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```\n\n```text\n(.*?)```", re.S)


def python_blocks() -> list[tuple[int, str, str]]:
    """The Python API page's examples: each block's line (1-based), its code and the text it prints."""
    text = PYTHON_PAGE.read_text("utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in PYTHON_BLOCK.finditer(text)]


class TestPythonExamples:
    """The Python API page's examples run as written and print what the page shows."""

    @pytest.mark.parametrize("number", range(len(python_blocks())))
    def test_block(self, number: int, pages: docs.Pages, monkeypatch: pytest.MonkeyPatch) -> None:
        """Python block ``number`` prints the text block under it, run in the page's folder after the page's
        commands above it."""
        line, code, expected = python_blocks()[number]
        monkeypatch.chdir(pages.prepare(PYTHON_PAGE, line))
        printed = io.StringIO()
        monkeypatch.setattr(sys, "stdout", printed)
        exec(compile(code, f"{PYTHON_PAGE}:{line}", "exec"), {})
        assert printed.getvalue() == expected

    def test_the_page_holds_examples(self) -> None:
        """The page has its two examples, so that a broken pattern cannot pass silently."""
        assert len(python_blocks()) == 2


MARKDOWN = """\
# Title

Run `attnx run -H 1` or ``attnx trace -t cat`` in prose; `attnx` alone and `pip install attnx` are not commands.

```console
$ attnx run --show summary
line one
...
last line

$ COLUMNS=100 attnx run --heads 3  # exits 2
attnx: error: something
$ attnx diff \\
    --heads 1,2
$ python -m pip install -e ".[dev]" -c constraints.txt
$ attnx run -f json | jq .heads
2
```

```bash
attnx run
echo fine
```

   ```console
   $ attnx engines
   numpy
   ```

```console
attnx heads
$ attnx run
```
"""


class TestParsing:
    """The harness reads the contract off markdown: commands, expected lines, exit codes, mistakes."""

    def test_commands_in_order(self) -> None:
        """Inline spans and console commands are found in the order of the text, set-up commands left out."""
        examples, _ = docs.parse(MARKDOWN, "doc.md")
        assert [(e.line, e.command) for e in examples] == [
            (3, "attnx run -H 1"),
            (3, "attnx trace -t cat"),
            (6, "attnx run --show summary"),
            (11, "COLUMNS=100 attnx run --heads 3"),
            (13, "attnx diff     --heads 1,2"),
            (16, "attnx run -f json | jq .heads"),
            (26, "attnx engines"),
            (32, "attnx run"),
        ]

    def test_expected_lines_and_exit_codes(self) -> None:
        """Lines under a command are its expected output (trailing blank lines dropped); `# exits N` sets its status."""
        examples, _ = docs.parse(MARKDOWN, "doc.md")
        by_line = {e.line: e for e in examples}
        assert by_line[3].expected is None and by_line[3].exit_code == 0
        assert by_line[6].expected == ("line one", "...", "last line") and by_line[6].output_lines == (6, 9)
        assert by_line[11].expected == ("attnx: error: something",) and by_line[11].exit_code == 2
        assert by_line[13].expected == () and by_line[13].exit_code == 0
        assert by_line[16].expected == ("2",)
        assert by_line[26].expected == ("numpy",) and by_line[26].indent == 3

    def test_only_lines_without_an_ellipsis_are_updated(self) -> None:
        """--update rewrites expected lines that exist and hold no `...`."""
        examples, _ = docs.parse(MARKDOWN, "doc.md")
        assert [e.line for e in examples if e.updatable] == [11, 16, 26]

    def test_attnx_outside_a_console_block_is_a_mistake(self) -> None:
        """`attnx` lines in a bash block, or before a console block's first `$ `, are reported with their line."""
        _, mistakes = docs.parse(MARKDOWN, "doc.md")
        assert [(m.line, m.text) for m in mistakes] == [(21, "attnx run"), (31, "attnx heads")]
        assert str(mistakes[0]) == "doc.md:21: 'attnx run': write it as `$ attnx ...` in a console block"

    def test_a_dollar_line_outside_a_console_block_is_a_mistake(self) -> None:
        """`$ attnx` in a block that is not `console` is reported too."""
        _, mistakes = docs.parse("```sh\n$ attnx run\n```\n", "doc.md")
        assert [(m.line, m.text) for m in mistakes] == [(2, "$ attnx run")]

    def test_a_failing_status_on_a_pipeline_is_a_mistake(self) -> None:
        """`# exits 1` on `attnx ... | tail` is refused: a reader's shell shows tail's 0. A `||`, a quoted `|`, a
        pipeline said to exit 0 and attnx alone are fine."""
        text = (
            "```console\n$ attnx check --against k.npy | tail -3  # exits 1\n"
            "$ attnx run -f json | jq .heads  # exits 0\n"
            "$ attnx check --against k.npy -o report.txt  # exits 1\n"
            "$ attnx run --tokens 'a|b'  # exits 2\n"
            "$ attnx run --heads 3 || true  # exits 2\n```\n"
        )
        examples, mistakes = docs.parse(text, "doc.md")
        assert [e.exit_code for e in examples] == [1, 0, 1, 2, 2]
        assert [str(m) for m in mistakes] == [
            "doc.md:2: 'attnx check --against k.npy | tail -3': `# exits 1` on a pipeline: a reader's shell shows "
            "the status of its last command, not attnx's; run attnx alone (-o FILE) and show FILE in a command of "
            "its own"
        ]

    def test_an_unclosed_block_runs_to_the_end(self) -> None:
        """A console block without its closing fence ends with the text."""
        examples, _ = docs.parse("```console\n$ attnx run\nout\n", "doc.md")
        assert [(e.command, e.expected) for e in examples] == [("attnx run", ("out",))]


class TestCommandForms:
    """Plain attnx commands run in-process; anything with shell syntax goes to bash."""

    @pytest.mark.parametrize(
        ("command", "form"),
        [
            ("attnx run", ({}, ["run"])),
            ('attnx run --tokens "a b c" -H 1', ({}, ["run", "--tokens", "a b c", "-H", "1"])),
            (
                "COLUMNS=100 NO_COLOR=1 attnx diff --heads 1,2",
                ({"COLUMNS": "100", "NO_COLOR": "1"}, ["diff", "--heads", "1,2"]),
            ),
            ("attnx trace -t '|'", ({}, ["trace", "-t", "|"])),
            ("attnx run -f json | jq .heads", None),
            ("attnx run > out.txt", None),
            ("attnx run && attnx trace", None),
            ("attnx run; attnx trace", None),
            ('attnx run --tokens "$(cat words)"', None),
            ("attnx run configs/*.yaml", None),
            ("echo x | attnx run -", None),
            ("python -c 'print(1)'", None),
            ("FOO=1", None),
            ('attnx run --tokens "unclosed', None),
        ],
    )
    def test_in_process_form(self, command: str, form: tuple[dict[str, str], list[str]] | None) -> None:
        """The environment and arguments of a plain command, or None for one the shell must run."""
        assert docs.in_process_form(command) == form

    @pytest.mark.parametrize(
        ("command", "parts"),
        [
            ("attnx run -f json | jq -c '.a | .b'", ("attnx run -f json", "jq -c '.a | .b'")),
            ("COLUMNS=9 attnx run | head -1", ("COLUMNS=9 attnx run", "head -1")),
            ('attnx run --tokens "a | b" | wc -l', ('attnx run --tokens "a | b"', "wc -l")),
            ("attnx trace -t '|'", None),
            ("echo x | attnx run -", None),
            ("attnx run > out.txt | cat", None),
            ("attnx run || echo failed", None),
        ],
    )
    def test_split_pipe(self, command: str, parts: tuple[str, str] | None) -> None:
        """``attnx ARGS | REST`` splits at the first unquoted pipe when the attnx part runs in-process."""
        assert docs.split_pipe(command) == parts

    def test_a_pipe_runs_as_bash_runs_it(self, docs_folder: Path) -> None:
        """The in-process attnx piped into bash gives bash's lines and pipefail's exit status."""
        example = docs.parse("```console\n$ attnx run --show weights | grep -c cat\n5\n```\n")[0][0]
        assert docs.run(example, docs_folder) == (0, ("5",))  # the source line; per head, its header and the row of cat
        failing = docs.parse("```console\n$ attnx run --heads 3 | cat\n```\n")[0][0]
        code, lines = docs.run(failing, docs_folder)
        assert code == 2 and lines[-1].startswith("attnx: error:")


class TestMatching:
    """Expected lines match actual ones exactly, `...` standing for any run of lines."""

    @pytest.mark.parametrize(
        ("expected", "actual", "matches"),
        [
            (["a", "b"], ["a", "b"], True),
            (["a", "b"], ["a", "c"], False),
            (["a"], ["a", "b"], False),
            (["a", "...", "d"], ["a", "b", "c", "d"], True),
            (["a", "...", "d"], ["a", "d"], True),
            (["a", "...", "d"], ["a", "b"], False),
            (["..."], [], True),
            (["...", "x", "..."], ["a", "x", "b"], True),
            (["...", "x", "..."], ["a", "b"], False),
            ([], [], True),
        ],
    )
    def test_lines_match(self, expected: list[str], actual: list[str], matches: bool) -> None:
        """`...` matches zero or more lines; every other line must be equal."""
        assert docs.lines_match(expected, actual) is matches

    def test_output_lines(self) -> None:
        """Stdout comes before stderr; trailing spaces and trailing blank lines are dropped."""
        assert docs.output_lines("a  \nb\n\n", "err \n\n") == ("a", "b", "", "err")

    def test_verdict_shows_a_unified_diff(self) -> None:
        """A mismatch names the example and shows a unified diff; a wrong exit status is said first."""
        example = docs.Example(Path("README.md"), 7, "attnx run", 0, ("a", "b"))
        assert docs.verdict(example, 0, ("a", "b")) is None
        failure = docs.verdict(example, 2, ("a", "c"))
        assert failure is not None
        assert failure.splitlines()[:2] == ["README.md:7: $ attnx run", "exit status 2, the text says 0"]
        assert "-b\n+c" in failure and "--- expected (the text)" in failure


class TestRunning:
    """Examples run in the prepared folder, with the documented environment, in-process or in bash."""

    def test_in_process_and_bash_agree(self, docs_folder: Path) -> None:
        """The same command gives the same lines in-process and through bash (80 columns, no colour)."""
        plain = docs.Example(Path("doc.md"), 1, "attnx run configs/gqa.yaml --show weights", 0, ())
        shell = docs.Example(Path("doc.md"), 2, "attnx run configs/gqa.yaml --show weights | cat", 0, ())
        inside, through_bash = docs.run(plain, docs_folder), docs.run(shell, docs_folder)
        assert inside == through_bash and inside[0] == 0 and "\x1b[" not in "".join(inside[1])
        assert max(len(line) for line in inside[1]) <= 80

    def test_a_page_starts_as_a_fresh_clone(self, tmp_path: Path) -> None:
        """A page's folder holds only configs/ (a copy) and scripts/ (the repository's), as a clone's root does."""
        folder = docs.Pages(tmp_path).folder(docs.ROOT / "README.md")
        assert sorted(path.name for path in folder.iterdir()) == ["configs", "scripts"]
        copied = sorted(path.name for path in (folder / "configs").iterdir())
        assert copied == sorted(path.name for path in (docs.ROOT / "configs").iterdir())
        assert (folder / "scripts" / "tiny_models.py").is_file()

    def test_the_readme_makes_its_kernel_files(self, pages: docs.Pages) -> None:
        """The README's own commands make kernel/: float32 inputs, a right kernel's output, a wrongly scaled one."""
        import attnx

        readme = docs.ROOT / "README.md"
        examples = docs.parse(readme.read_text("utf-8"), readme)[0]
        first = next(e for e in examples if e.command.startswith("attnx check kernel/qkv.npz --against"))
        folder = pages.prepare(readme, first.line)
        right = np.load(folder / "kernel" / "output.npy")
        wrong = np.load(folder / "kernel" / "output-wrong-scale.npy")
        reference = attnx.compute(attnx.load_spec(str(folder / "kernel" / "qkv.npz"))).output
        assert right.shape == wrong.shape == (6, 16) and right.dtype == wrong.dtype == np.float32
        np.testing.assert_allclose(right, reference, atol=1e-6)
        assert not np.allclose(wrong, reference, atol=1e-3)

    def test_exit_comment_and_failure_output(self, docs_folder: Path) -> None:
        """`# exits 2` is checked, and a failing command's stderr line is compared like stdout."""
        text = "```console\n$ attnx run --heads 3  # exits 2\nattnx: error: wrong\n```\n"
        (example,), _ = docs.parse(text, "doc.md")
        result = docs.check(example, docs_folder)
        assert result.code == 2 and result.lines[0].startswith("attnx: error: ")
        assert (
            result.failure is not None
            and "exit status" not in result.failure
            and "-attnx: error: wrong" in result.failure
        )

    def test_environment_has_no_attnx_variables(self, docs_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """ATTNX_* and FORCE_COLOR from outside reach neither path; HF_HUB_OFFLINE and COLUMNS=80 are set."""
        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "1")
        monkeypatch.setenv("FORCE_COLOR", "1")
        code, lines = docs.run(docs.Example(Path("doc.md"), 1, "attnx run", 0, ()), docs_folder)
        assert code == 0 and not any("\x1b[" in line for line in lines)
        shell = "env | grep -E '^(ATTNX_|FORCE_COLOR|HF_HUB_OFFLINE|COLUMNS)' | sort"
        assert docs.run(docs.Example(Path("doc.md"), 1, shell, 0, ()), docs_folder)[1] == (
            "COLUMNS=80",
            "HF_HUB_OFFLINE=1",
        )


class TestPages:
    """Each page runs in its own folder, in order; a `python` command runs once per session, in a bare clone."""

    @staticmethod
    def write(folder: Path, name: str, commands: str) -> Path:
        """A markdown page ``name`` in ``folder`` whose one console block holds ``commands``."""
        folder.mkdir(exist_ok=True)
        page = folder / name
        page.write_text(f"# {name}\n\n```console\n{commands}```\n", "utf-8")
        return page

    def test_a_python_command_runs_once_and_each_page_gets_its_files(self, tmp_path: Path) -> None:
        """Two pages show the same `python` command: it ran once (one timestamp), and both pages hold its files."""
        made = (
            "python -c \"import pathlib, time; pathlib.Path('made').mkdir(); "
            "pathlib.Path('made/at.txt').write_text(str(time.time_ns())); print('made')\""
        )
        commands = f"$ {made}\nmade\n$ cat made/at.txt\n"
        pages = docs.Pages(tmp_path / "scratch")
        results = []
        for name in ("one.md", "two.md"):
            page = self.write(tmp_path / "docs", name, commands)
            results += [pages.check(example) for example in docs.parse(page.read_text(), page)[0]]
        assert [result.failure for result in results] == [None] * 4
        assert results[0].lines == results[2].lines == ("made",)
        assert results[1].lines == results[3].lines and results[1].lines[0].isdigit()
        assert pages.folder(tmp_path / "docs" / "one.md") != pages.folder(tmp_path / "docs" / "two.md")

    def test_a_python_command_sees_only_the_clone(self, tmp_path: Path) -> None:
        """A file the page made before is not there for a `python` command; configs/ is."""
        page = self.write(
            tmp_path,
            "page.md",
            "$ echo mine > mine.txt\n$ cat mine.txt\nmine\n"
            "$ python -c \"open('mine.txt')\"  # exits 1\n...\n"
            "$ python -c \"print(open('configs/gqa.yaml').read()[:1])\"\n#\n",
        )
        pages = docs.Pages(tmp_path / "scratch")
        assert [pages.check(example).failure for example in docs.parse(page.read_text(), page)[0]] == [None] * 4

    def test_an_example_runs_after_the_ones_above_it(self, tmp_path: Path) -> None:
        """Checking the last example of a page first runs every one above it, once, in the text's order."""
        page = self.write(tmp_path, "page.md", "$ echo a >> log\n$ echo b >> log\n$ cat log\na\nb\n")
        examples = docs.parse(page.read_text(), page)[0]
        pages = docs.Pages(tmp_path / "scratch")
        assert pages.check(examples[2]).failure is None
        assert [pages.check(example).failure for example in examples] == [None] * 3


class TestUpdate:
    """--update rewrites expected output in place and says what changed."""

    def test_rewrites_only_what_it_may(self, docs_folder: Path, tmp_path: Path) -> None:
        """Stale lines are replaced (the fence's indent kept); `...` blocks and bare commands stay as written."""
        doc = tmp_path / "doc.md"
        doc.write_text(
            "  ```console\n  $ attnx --version\n  attnx 0.0.0\n\n  $ attnx --version\n  ...\n  $ attnx --version\n  ```\n"
        )
        examples, _ = docs.parse(doc.read_text(), doc)
        results = [docs.check(e, docs_folder) for e in examples]
        version = results[0].lines[0]
        assert version.startswith("attnx ") and version != "attnx 0.0.0"
        changes = docs.update(results)
        assert len(changes) == 1 and f"-attnx 0.0.0\n+{version}" in changes[0]
        assert doc.read_text() == (
            f"  ```console\n  $ attnx --version\n  {version}\n\n  $ attnx --version\n  ...\n  $ attnx --version\n  ```\n"
        )
        assert docs.update([docs.check(e, docs_folder) for e in docs.parse(doc.read_text(), doc)[0]]) == []


class TestInProcessRunner:
    """tests/runner.py runs attnx as the console script does and leaves the test process as it found it."""

    def test_binary_stdout(self) -> None:
        """--format npy reaches stdout as bytes that NumPy reads back."""
        outcome = run_attnx("run", "-f", "npy", "--tensor", "weights")
        assert outcome.code == 0 and outcome.stderr == ""
        assert np.load(io.BytesIO(outcome.stdout_bytes)).shape == (2, 5, 5)

    def test_stdin_bytes(self) -> None:
        """stdin is piped in as bytes."""
        outcome = run_attnx("run", "-", "-f", "json", stdin=b"heads: 1\nq: [[1.0]]\nk: [[1.0]]\nv: [[4.0]]\n")
        assert outcome.code == 0 and json.loads(outcome.stdout)["output"] == [[4.0]]

    def test_state_is_restored(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Environment, working folder, streams, argv and the environment in force are as before, though the run
        changed or read them."""
        from attnx.environment import ACTIVE

        monkeypatch.setenv("ATTNX_MAX_ELEMENTS", "1")
        before = (
            dict(os.environ),
            os.getcwd(),
            sys.stdout,
            sys.stderr,
            sys.stdin,
            list(sys.argv),
            ACTIVE.get(None),
        )
        outcome = run_attnx("--debug", "run", "-f", "json", cwd=tmp_path, env={"NO_COLOR": "1"})
        assert outcome.code == 0  # ATTNX_MAX_ELEMENTS=1 from outside did not reach the run
        after = (
            dict(os.environ),
            os.getcwd(),
            sys.stdout,
            sys.stderr,
            sys.stdin,
            list(sys.argv),
            ACTIVE.get(None),
        )
        assert after == before

    def test_environment_reaches_the_consoles(self) -> None:
        """COLUMNS sets the width, FORCE_COLOR colours, NO_COLOR wins, and an ATTNX_* given in env applies."""
        narrow = run_attnx("run", "-s", "output", env={"COLUMNS": "50"})
        assert max(len(line) for line in narrow.stdout.splitlines()) == 50
        assert "\x1b[" in run_attnx("run", env={"FORCE_COLOR": "1"}).stdout
        assert "\x1b[" not in run_attnx("run", env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
        capped = run_attnx("run", env={"ATTNX_MAX_ELEMENTS": "4"})
        assert capped.code == 2 and "ATTNX_MAX_ELEMENTS" in capped.stderr

    def test_an_escaping_exception_is_exit_1_with_a_traceback(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With --debug an unexpected error escapes main(): the runner prints its traceback and reports exit 1."""
        import attnx.engines

        def broken(*args, **kwargs):
            raise RuntimeError("boom")

        monkeypatch.setattr(attnx.engines, "compute", broken)
        outcome = run_attnx("--debug", "run")
        assert outcome.code == 1 and isinstance(outcome.exception, RuntimeError)
        assert (
            outcome.stderr.startswith("Traceback (most recent call last):") and "RuntimeError: boom" in outcome.stderr
        )

    def test_warnings_print_as_in_a_fresh_process(self) -> None:
        """A warning inside the run is a line on stderr, not the error pytest's filterwarnings makes it outside."""
        import warnings

        import attnx.engines

        real = attnx.engines.compute

        def warns(*args, **kwargs):
            warnings.warn("careful", UserWarning, stacklevel=1)
            return real(*args, **kwargs)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(attnx.engines, "compute", warns)
            outcome = run_attnx("run", "-f", "json")
        assert outcome.code == 0 and "UserWarning: careful" in outcome.stderr
