"""Tests for the help of every command: its examples run, it fits 80 columns, and what it says is true."""

from __future__ import annotations

import inspect
import json
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from rich.cells import cell_len

from attnx.cli import CHECKPOINT, COMMANDS, EXAMPLES, KERNEL_OUTPUT, SUMMARIES, TRANSLATOR, click_command, function
from attnx.cli import command as command_of
from attnx.engines import compute
from attnx.io import load_spec
from tests.runner import run_attnx

ROOT = Path(__file__).parents[2]
CASES = [pytest.param(command, example, id=example) for command, examples in EXAMPLES.items() for example in examples]


def help_text(command: str, columns: int = 80) -> str:
    """`attnx [COMMAND] --help` as printed to a pipe that is ``columns`` wide."""
    result = run_attnx(*command.split(), "--help", env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert result.code == 0, result.stderr
    return result.stdout


def options(command: str) -> dict[str, typer.core.TyperOption]:
    """A command's options by their long name (`--format` -> its click parameter)."""
    params = command_of(command).params
    return {name: param for param in params for name in param.opts if name.startswith("--")}


def format_choices(command: str) -> list[str]:
    """The formats ``attnx COMMAND --help`` offers, read from the help as a user sees it (``One of: table, json.``)."""
    shown = run_attnx(command, "--help", env={"COLUMNS": "200"}).stdout
    found = re.search(r"--format\s+-f\s+FORMAT\s+[^│]*One of: ([a-z, ]+)\.", shown)
    assert found, shown
    return found[1].split(", ")


class TestExamples:
    """Each command's help ends with two or three examples that run as they are and exit 0."""

    def test_every_command_has_two_or_three(self) -> None:
        """The app and each of its commands have their examples, and every example names its command."""
        assert set(EXAMPLES) == {"", *COMMANDS}
        for command, examples in EXAMPLES.items():
            assert 2 <= len(examples) <= 3, command
            if command not in ("", "model"):  # the app's and model's show other commands
                assert {shlex.split(example)[1] for example in examples} == {command}

    def test_check_shows_a_kernel_check(self) -> None:
        """check's examples include the kernel check, with what its file is said above them."""
        assert [e for e in EXAMPLES["check"] if f"--against {KERNEL_OUTPUT}" in e]
        assert f"Examples ({KERNEL_OUTPUT} is what your kernel computed" in help_text("check")

    @pytest.mark.parametrize("command", ["", *COMMANDS])
    def test_help_ends_with_the_examples_then_the_exit_codes(self, command: str) -> None:
        """The help shows each example whole on its own line, after "Examples", and ends with the exit codes."""
        lines = [line.strip() for line in help_text(command).splitlines() if line.strip()]
        start = next(i for i, line in enumerate(lines) if line.startswith("Examples"))
        shown = [line for line in lines[start:] if line.startswith("attnx ")]
        assert shown == list(EXAMPLES[command])
        assert lines[-2:] == [
            "Exit codes: 0 success · 1 differences beyond tolerance or a runtime failure ·",
            "2 bad usage or input · 130 interrupted.",
        ]

    @pytest.mark.parametrize(("command", "example"), CASES)
    def test_example_runs(
        self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str,
        example: str,
    ) -> None:  # fmt: skip
        """From the repository's root, the example exits 0 and prints its result (a checkpoint: a tiny GPT-2's; a
        kernel's output: attnx's own)."""
        words = shlex.split(example)
        assert words[0] == "attnx"
        for placeholder, fixture in ((CHECKPOINT, "gpt2"), (TRANSLATOR, "t5")):
            if placeholder in words:
                path = str(request.getfixturevalue(fixture).path)
                words = [path if word == placeholder else word for word in words]
        if KERNEL_OUTPUT in words:  # a right kernel: attnx's own output for the input, in float32
            kernel = tmp_path / KERNEL_OUTPUT
            np.save(kernel, compute(load_spec(str(ROOT / words[2])), dtype="float32").output)
            words = [str(kernel) if word == KERNEL_OUTPUT else word for word in words]
        opened: list[Any] = []
        if command == "explore":  # a full-screen app: the example must reach it with its state, on a terminal
            monkeypatch.setattr("attnx.cli.explore.on_terminal", lambda: True)
            monkeypatch.setattr("attnx.tui.app.ExploreApp.run", lambda app: opened.append(app.state))
        result = run_attnx(*words[1:], env={"COLUMNS": "100"}, cwd=ROOT)
        assert result.code == 0, result.stderr
        if command == "explore":
            (state,) = opened
            assert state.tokens
            return
        assert result.stdout.strip()
        if "--format json" in example:
            assert json.loads(result.stdout)["format_version"]


class TestSummaries:
    """The app's help lists each command by its summary, kept beside the commands so that it imports none of them."""

    def test_each_summary_is_its_docstrings_first_paragraph(self) -> None:
        """Every command has a summary, and it is the first paragraph of its function's docstring, word for word."""
        firsts = {name: (inspect.getdoc(function(name)) or "").split("\n\n")[0] for name in COMMANDS}
        assert firsts == SUMMARIES

    def test_the_help_lists_them(self) -> None:
        """`attnx --help` shows each command beside its summary, in the order of COMMANDS."""
        shown = " ".join(help_text("", columns=300).split())
        listed = [f"│ {name} {SUMMARIES[name]} │" for name in COMMANDS]
        assert [entry for entry in listed if " ".join(entry.split()) not in shown] == []
        places = [shown.index(f"│ {name} ") for name in COMMANDS]
        assert places == sorted(places)


class TestLegibleAt80Columns:
    """Help piped to an 80-column reader keeps every line within 80 cells."""

    @pytest.mark.parametrize("command", ["", *COMMANDS])
    def test_no_line_over_80(self, command: str) -> None:
        """No line of the help is wider than 80 cells."""
        text = help_text(command)
        widest = max(text.splitlines(), key=cell_len)
        assert cell_len(widest) <= 80, widest

    @pytest.mark.parametrize("command", COMMANDS)
    def test_descriptions_keep_their_room(self, command: str) -> None:
        """At 80 columns every panel's descriptions start by cell 42 (they started at 53, squeezed into 25 cells
        behind ``<float64|float32|bfloat16|float16>``): a choice shows its name, a number N."""
        panels: dict[str, int] = {}
        panel = ""
        for line in help_text(command).splitlines():
            if line.startswith("╭─"):
                panel = line
            indented = re.match(r"│( {4,})\S", line)
            if indented and panel:  # a description's second line, or a [default: ...] under it
                panels[panel] = max(panels.get(panel, 0), len(indented[1]) + 1)
        assert panels and all(start <= 42 for start in panels.values()), panels

    @pytest.mark.parametrize("command", COMMANDS)
    def test_choices_are_named_and_listed(self, command: str) -> None:
        """A choice shows its name as its metavar (``--dtype DTYPE``) and its choices in its description."""
        for name, option in options(command).items():
            choices = getattr(option.type_descriptor.annotation, "__members__", None)
            if choices is not None:
                assert option.metavar == name.split("-")[-1].upper(), name
                assert option.help.endswith(f"One of: {', '.join(m.value for m in choices.values())}."), name
        assert "<float64|" not in help_text(command) and "<int range>" not in help_text(command)

    @pytest.mark.parametrize("command", ["", *COMMANDS])
    def test_description_lines_are_whole_sentences(self, command: str) -> None:
        """Typer keeps a description's line breaks as written: each must end a sentence, never split one."""
        text = help_text(command, columns=300)
        description = text.split("Usage:", 1)[1].split("╭", 1)[0].splitlines()[1:]
        lines = [line.strip() for line in description if line.strip()]
        assert lines, text
        broken = [line for line in lines if not line.endswith((".", ":", ")"))]
        assert broken == []


def source_texts(command: str) -> list[str]:
    """The help texts of ``attnx [COMMAND]`` as the source writes them: its description, epilog and options'."""
    made = command_of(command) if command else click_command()
    texts = [made.help, made.epilog, *(getattr(param, "help", None) for param in made.params)]
    return [re.sub(r"\\(\[)", r"\1", text) for text in texts if text]  # as written: escapes undone


class TestHelpShowsTheSource:
    """The help shows what the source says: Rich markup does not swallow brackets, flags show no type."""

    @pytest.mark.parametrize("command", ["", *COMMANDS])
    def test_brackets_and_flags(self, command: str) -> None:
        """Each ``[...]`` of a help text (``nd [query, H·d]``) is in the help as printed; a flag takes no value, so
        --version, --causal and --help show no ``<bool>``."""
        printed = help_text(command, columns=300)
        shown = " ".join(printed.split())
        bracketed = [found for text in source_texts(command) for found in re.findall(r"\[[^\]]*\]", text)]
        assert [text for text in bracketed if " ".join(text.split()) not in shown] == []
        assert "<bool>" not in printed and re.search(r"--help\s+-h\s+Show this message and exit\.", printed)

    def test_the_layout_shapes_of_array_layout(self) -> None:
        """check's --array-layout names each layout's axes (Rich markup swallowed them as tags)."""
        shown = " ".join(help_text("check", columns=300).split())
        assert "nd [query, H·d], hnd [head, query, d], nhd [query, head, d], hnm [head, query, key] weights" in shown


class TestHelpTellsTheTruth:
    """What the help offers works, its defaults are the real ones, and it counts from 0."""

    @pytest.mark.parametrize(
        ("command", "formats"),
        [
            ("run", ["table", "json", "jsonl", "csv", "npy", "npz"]),
            ("trace", ["table", "json", "jsonl", "csv"]),
            ("check", ["table", "json", "jsonl", "csv"]),
            ("engines", ["table", "json", "jsonl", "csv"]),
            ("diff", ["table", "json"]),
            ("heads", ["table", "json"]),
            ("model", ["table", "json"]),
            ("bench", ["table", "json"]),
            ("detect", ["table", "json", "jsonl"]),
        ],
    )
    def test_format_lists_only_what_the_command_writes(self, command: str, formats: list[str]) -> None:
        """Each command's --format offers exactly the formats it can write."""
        assert format_choices(command) == formats

    @pytest.mark.parametrize(
        "args",
        [
            ["run"], ["trace", "-t", "cat"], ["check"], ["engines"], ["diff", "--heads", "1,2"], ["heads"],
            ["bench", "--lengths", "8", "-H", "1", "--d-model", "4", "--repeat", "1", "--engines", "numpy"],
        ],
    )  # fmt: skip
    def test_every_offered_format_works(self, tmp_path: Path, args: list[str]) -> None:
        """Every format a command's help offers is written, exit 0 (binary ones to --output)."""
        for choice in format_choices(args[0]):
            target = tmp_path / f"out.{choice}"
            one_tensor = ["--tensor", "output"] if choice == "npy" else []  # npy holds one array
            result = run_attnx(*args, "--format", choice, *one_tensor, "--output", str(target))
            assert result.code == 0, (choice, result.stderr)
            assert target.stat().st_size > 0

    def test_bench_dtype_default_is_float32(self) -> None:
        """bench's help states float32, the dtype it times when --dtype is not given."""
        assert options("bench")["--dtype"].default == "float32"
        assert "[default: float32]" in help_text("bench", columns=200)
        result = run_attnx("bench", "--lengths", "8", "-H", "1", "--d-model", "4", "--repeat", "1", "--engines", "numpy",
                           "--format", "json")  # fmt: skip
        assert result.code == 0, result.stderr
        assert json.loads(result.stdout)["settings"]["dtype"] == "float32"

    @pytest.mark.parametrize("command", ["run", "trace", "check", "diff", "heads"])
    def test_layer_counts_from_0_and_names_no_missing_flag(self, command: str) -> None:
        """--layer's help says layers count from 0, -1 the last (default 0), and names no flag the command lacks."""
        option = options(command)["--layer"]
        assert "counted from 0, -1 the last (default 0)" in option.help
        named = set(re.findall(r"--[a-z][a-z-]*", option.help))
        assert named <= set(options(command)), named - set(options(command))

    @pytest.mark.parametrize("command", COMMANDS)
    def test_options_name_only_flags_the_command_takes(self, command: str) -> None:
        """Each option's help names only flags of its own command (detect's --model spoke of --text, which
        detect does not take)."""
        taken = set(options(command))
        named = {(name, flag) for name, option in options(command).items()
                 for flag in re.findall(r"--[a-z][a-z-]*", option.help or "")}  # fmt: skip
        assert {(name, flag) for name, flag in named if flag not in taken} == set()

    def test_detect_model_names_texts(self) -> None:
        """detect's --model says what it reads: random sequences or --texts; its help has no --text."""
        shown = " ".join(help_text("detect", columns=300).split())
        assert "ollama:NAME[:TAG]: find its heads over random sequences or --texts." in shown
        assert re.search(r"--text\b(?!s)", shown) is None

    @pytest.mark.parametrize("command", ["run", "trace", "check", "heads"])
    def test_config_names_every_input_format(self, command: str) -> None:
        """CONFIG's help names YAML, JSON, .npz and - for stdin."""
        (config,) = (p for p in command_of(command).params if p.name == "config")
        assert "YAML, JSON or .npz" in config.help and "- for stdin" in config.help

    @pytest.mark.parametrize("command", ["", *COMMANDS])
    def test_nothing_counts_from_1(self, command: str) -> None:
        """No help says 1-based, counted from 1, or ranges like 1..H: everything counts from 0."""
        text = " ".join(help_text(command, columns=300).split())
        for stale in ("1-based", "from 1", "1..", "(default 1)"):
            assert stale not in text, stale

    def test_drop_head_counts_from_0(self) -> None:
        """--drop-head's help says heads count from 0, -1 the last; one past either end is refused."""
        option = options("run")["--drop-head"]
        assert option.help == "Zero head N (counted from 0, -1 the last) before concatenation; repeatable."
        result = run_attnx("run", "--drop-head", "-3")
        assert (result.code, result.stdout) == (2, "") and "heads are numbered 0..1 (or -2..-1)" in result.stderr
