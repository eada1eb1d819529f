"""The fast path of command-line values (attnx/cli/coercion.py): what it converts equals what Typer would, and the rest
goes to Typer, whose messages stay."""

from __future__ import annotations

import subprocess
import sys
from enum import Enum
from typing import Any

import pytest

from attnx.cli import COMMANDS, command
from attnx.cli.coercion import UNSURE, converted, fast
from tests.runner import run_attnx

# Values as a command line gives them, plus typed defaults: plain ones the fast path takes, odd ones it leaves.
SAMPLES: tuple[Any, ...] = (
    None, "3", "0", "-1", "+2", "12", "13", "1e-3", "-0.5", ".5", "2.", "1E5", "x", "", " 3", "1_000", "0x10", "inf",
    "nan", "numpy", "NUMPY", "torch", "float32", "table", "heatmap", True, False, 3, 2.5, ("1", "2"), ("a",), (),
)  # fmt: skip


def processed(param: Any, value: Any, *, typers: bool = False) -> Any:
    """What ``process_value`` makes of ``value``: the fast path's, or Typer's own (``typers``); the exception's type
    when it refuses it."""
    group = command(param.command_name)
    context = group.context_class(group)
    method = type(param).__mro__[1].process_value if typers else type(param).process_value
    try:
        return method(param, context, value)
    except Exception as exc:
        return type(exc)


def every_parameter() -> list[Any]:
    """Every parameter of every command, each knowing its command's name."""
    found = []
    for name in COMMANDS:
        for param in command(name).params:
            param.command_name = name
            found.append(param)
    return found


class TestSameAsTyper:
    """Where the fast path answers, its answer is Typer's; elsewhere it steps aside."""

    def test_every_parameter_and_sample(self) -> None:
        """For each parameter of each command and each sample value, the fast path's answer is Typer's (a value of
        the same type, or the same refusal); it answers most values itself and steps aside for many."""
        answered = stepped_aside = 0
        for param in every_parameter():
            for value in SAMPLES:
                mine, theirs = processed(param, value), processed(param, value, typers=True)
                same = mine == theirs or (mine != mine and theirs != theirs)  # NaN is NaN here
                assert same and type(mine) is type(theirs), (param.name, value, mine, theirs)
                if converted(param, value) is UNSURE:
                    stepped_aside += 1
                else:
                    answered += 1
        assert answered > 1000 and stepped_aside > 1000, (answered, stepped_aside)

    @pytest.mark.parametrize(
        ("annotation", "low", "high", "value", "expected"),
        [
            (int, 1, None, "3", 3),
            (int, 1, None, "0", UNSURE),
            (int, 0, 12, "13", UNSURE),
            (int, None, None, "1_000", UNSURE),
            (float, 0.0, None, "1e-3", 0.001),
            (float, 0.0, None, "-1e-3", UNSURE),
            (float, None, None, "inf", UNSURE),
            (float, None, None, 2, 2.0),
            (str, None, None, "x", "x"),
            (bool, None, None, "yes", UNSURE),
        ],
    )
    def test_plain_values_only(self, annotation: type, low: Any, high: Any, value: Any, expected: Any) -> None:
        """Numbers written plainly within their bounds convert; out of bounds, underscores, inf and text go to Typer."""
        assert fast(annotation, low, high, value) == expected if expected is not UNSURE else True
        assert (fast(annotation, low, high, value) is UNSURE) is (expected is UNSURE)

    def test_enum_by_value(self) -> None:
        """An Enum takes a member's exact value; another case or an unknown name goes to Typer."""

        class Colour(Enum):
            red = "red"

        assert fast(Colour, None, None, "red") is Colour.red
        assert fast(Colour, None, None, Colour.red) is Colour.red
        assert fast(Colour, None, None, "RED") is UNSURE


class TestMessagesStayTypers:
    """A value the fast path leaves is refused in Typer's words, exit 2."""

    @pytest.mark.parametrize(
        ("args", "fragment"),
        [
            (("--heads", "x"), "Invalid value for '--heads' / '-H'"),
            (("--heads", "0"), "greater than or equal to 1"),
            (("--precision", "13"), "less than or equal to 12"),
            (("--engine", "NUMPY"), "'NUMPY' is not one of 'numpy', 'torch'"),
            (("--drop-head", "x"), "Invalid value for '--drop-head'"),
        ],
    )
    def test_refused_in_typers_words(self, args: tuple[str, ...], fragment: str) -> None:
        """Each refusal is one line naming the flag, exit 2."""
        outcome = run_attnx("run", *args)
        assert outcome.code == 2 and fragment in outcome.stderr and outcome.stderr.count("\n") == 1, outcome.stderr


class TestStartUp:
    """The fast path is what keeps pydantic out of a run."""

    def test_a_run_imports_no_pydantic_and_a_refusal_does(self) -> None:
        """A fresh `attnx run -H 2 -p 3 -e numpy` never imports pydantic; `attnx run -H x` does (Typer's message)."""
        probe = (
            "import sys\nfrom attnx.cli import main\nsys.argv = ['attnx', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nsys.stderr.write(str('pydantic' in sys.modules))\n"
        )
        seen = []
        for args in (["run", "-H", "2", "-p", "3", "-e", "numpy", "--drop-head", "1"], ["run", "-H", "x"]):
            proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, check=False)
            seen.append(proc.stderr.rsplit("\n", 1)[-1])
        assert seen == ["False", "True"]
