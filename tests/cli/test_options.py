"""The command line's vocabulary: each closed choice made from its registry, offered so by `--help` and listed so
by docs/commands.md."""

from __future__ import annotations

import inspect
import re
import typing
from enum import Enum
from pathlib import Path

import pytest
import typer

from attnx.analysis.array_layouts import ARRAY_LAYOUTS
from attnx.cli import COMMANDS, function
from attnx.cli.detect import GRID_MEASURE, Measure
from attnx.cli.options import (
    ArrayLayout,
    Device,
    Dtype,
    Engine,
    KernelDtype,
    Layout,
    OutputFormat,
    RecordFormat,
    ReportFormat,
    RopePairs,
    RowFormat,
    View,
    choices,
)
from attnx.core.choices import DTYPES, ENGINE_NAMES, KERNEL_DTYPES, LAYOUTS, PAIRINGS, SCALE_MODES
from attnx.core.measures import CROSS, DETECT, markdown_table
from tests.runner import run_attnx

DOC = Path(__file__).parents[2] / "docs" / "commands.md"

# Each choice made from a registry, and the names it must offer, in order (detect's default measure first).
FROM_REGISTRIES: dict[type[Enum], tuple[str, ...]] = {
    Engine: ENGINE_NAMES,
    Dtype: DTYPES,
    KernelDtype: KERNEL_DTYPES,
    Layout: LAYOUTS,
    RopePairs: PAIRINGS,
    Measure: tuple(dict.fromkeys((GRID_MEASURE, *DETECT.measures, *CROSS.measures))),
}
# The command line's own choices, written out where they are declared: what it writes and how it draws, the devices
# (``auto`` and torch's, whose module imports torch) and the layouts of a bare array (checked below).
OWN = {OutputFormat, RowFormat, ReportFormat, RecordFormat, View, Device, ArrayLayout}


def choice_options() -> dict[tuple[str, str], type[Enum]]:
    """(command, long option) -> the Enum it takes, for every option of every command whose values are a closed
    choice (read from the signature Typer reads)."""
    found = {}
    for command in COMMANDS:
        for parameter in inspect.signature(function(command)).parameters.values():
            base, *extras = typing.get_args(parameter.annotation)
            info = next((extra for extra in extras if isinstance(extra, typer.models.OptionInfo)), None)
            chosen = [arg for arg in (base, *typing.get_args(base)) if isinstance(arg, type) and issubclass(arg, Enum)]
            if info is not None and chosen:
                flags = [d for d in (info.default, *(info.param_decls or ())) if isinstance(d, str)]
                found[command, next(flag for flag in flags if flag.startswith("--"))] = chosen[0]
    return found


def help_choices(command: str, option: str) -> list[str]:
    """The values ``attnx COMMAND --help`` offers for ``option``, as a user reads them (``One of: numpy, torch.``)."""
    shown = run_attnx(command, "--help", env={"COLUMNS": "400", "NO_COLOR": "1"}).stdout
    found = re.search(rf"(?<![\w-]){option}\s[^\n]*?One of: ([\w, -]+)\.", shown)
    assert found, f"attnx {command} --help offers no choices for {option}"
    return found[1].split(", ")


def docs_row(option: str) -> str:
    """The 'meaning' cell of the row of docs/commands.md's table of options that names ``option``."""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and len(cells) >= 3 and re.search(rf"`[^`]*(?<![\w-]){option}\b[^`]*`", cells[0]):
            return cells[1]
    raise AssertionError(f"docs/commands.md has no option row for {option}")


def quoted(text: str) -> list[str]:
    """The code spans of ``text``, in order (``"`a` or `b`"`` -> ``["a", "b"]``)."""
    return re.findall(r"`([^`]+)`", text)


class TestChoices:
    def test_choices_decorator_remakes_the_enum(self) -> None:
        """``choices`` gives the declared class one member per name, named and valued as the name, its docstring kept."""

        @choices(("a-b", "c"))
        class Letters(str, Enum):
            """Some letters."""

        assert [(member.name, member.value) for member in Letters] == [("a-b", "a-b"), ("c", "c")]
        assert Letters("c") is Letters.c and Letters.c == "c" and isinstance(Letters.c, Letters)
        assert Letters.__doc__ == "Some letters." and Letters.__qualname__.endswith("Letters")

    @pytest.mark.parametrize("choice", list(FROM_REGISTRIES), ids=lambda choice: choice.__name__)
    def test_each_choice_is_its_registry(self, choice: type[Enum]) -> None:
        """The members of each choice made from a registry are the registry's names, in its order."""
        assert [member.value for member in choice] == list(FROM_REGISTRIES[choice])

    def test_measures_are_detects(self) -> None:
        """detect's --measure offers exactly the measures `detect` scores heads by (a cross-attention's too), its
        default first; none given, the grid shows the rule's default."""
        assert sorted(member.value for member in Measure) == sorted({*DETECT.measures, *CROSS.measures})
        assert inspect.signature(function("detect")).parameters["measure"].default is None

    def test_own_choices_agree_where_a_registry_exists(self) -> None:
        """The layouts of a bare array are the reader's; the devices, ``auto`` and torch's (when torch is here)."""
        assert [member.value for member in ArrayLayout] == list(ARRAY_LAYOUTS)
        try:
            from attnx.engines.torch_engine import PREFERENCE
        except ImportError:
            PREFERENCE = ("cuda", "mps", "cpu")  # what the torch engine's module says, read where torch is installed
        assert sorted(member.value for member in Device) == sorted(("auto", *PREFERENCE))

    def test_every_choice_is_accounted_for(self) -> None:
        """Every closed choice an option takes is made from a registry or is one of the command line's own (so a
        new one is added to one of the two here, and checked)."""
        taken = set(choice_options().values())
        assert taken <= set(FROM_REGISTRIES) | OWN, taken - set(FROM_REGISTRIES) - OWN
        assert set(FROM_REGISTRIES) <= taken


class TestHelp:
    @pytest.mark.parametrize(
        ("command", "option"),
        [key for key, choice in choice_options().items() if choice in FROM_REGISTRIES],
        ids=lambda value: value,
    )
    def test_help_offers_the_registry(self, command: str, option: str) -> None:
        """`attnx COMMAND --help` offers, for each option made from a registry, the registry's names in its order."""
        assert help_choices(command, option) == list(FROM_REGISTRIES[choice_options()[command, option]])


class TestDocs:
    @pytest.mark.parametrize(
        ("option", "names"),
        [("--engine", ENGINE_NAMES), ("--dtype", DTYPES), ("--layout", LAYOUTS), ("--rope-pairs", PAIRINGS),
         ("--scale", SCALE_MODES), ("--device", tuple(member.value for member in Device))],
        ids=lambda value: value if isinstance(value, str) else "",
    )  # fmt: skip
    def test_options_table_lists_the_registry(self, option: str, names: tuple[str, ...]) -> None:
        """The table of options shared by the commands names each choice of ``option``, in the registry's order."""
        assert quoted(docs_row(option)) == list(names)

    def test_kernel_dtypes_and_array_layouts(self) -> None:
        """`check`'s section names every --kernel-dtype and every --array-layout, in the registries' order."""
        text = " ".join(DOC.read_text(encoding="utf-8").split())
        dtypes = re.search(r"`--kernel-dtype` \(([a-z0-9, ]+);", text)
        layouts = re.search(r"`--array-layout ([a-z|]+)`", text)
        assert dtypes and re.split(r", | or ", dtypes[1]) == list(KERNEL_DTYPES)
        assert layouts and layouts[1].split("|") == list(ARRAY_LAYOUTS)

    def test_bench_dtypes(self) -> None:
        """`bench`'s options name every dtype it times in."""
        text = " ".join(DOC.read_text(encoding="utf-8").split())
        found = re.search(r"`--dtype` \(([^)]*)\)", text)
        assert found and sorted(quoted(found[1])) == sorted(DTYPES)

    def test_detect_measures_table_lists_the_choices(self) -> None:
        """The measures tables of `detect` and of a cross-attention (generated from the registry,
        tests/core/test_measures.py) list exactly the measures --measure offers."""
        rows = markdown_table("detect").splitlines()[2:] + markdown_table("cross").splitlines()[2:]
        assert sorted({quoted(row.split(" | ")[0])[0] for row in rows}) == sorted(member.value for member in Measure)
