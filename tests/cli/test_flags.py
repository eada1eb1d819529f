from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
from pathlib import Path

import numpy as np
import pytest
from rich.text import Text
from typer.testing import CliRunner

from attnx.cli import app
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, ViewFlags
from attnx.cli.options import Device, Layout, OutputFormat, View
from attnx.errors import UsageError
from tests.conftest import DECIMALS_4, OUTPUT

# The groups each command builds from its own options.
BUILDS = {
    "run": (InputFlags, ModelFlags, EngineFlags, ViewFlags, CapFlags),
    "trace": (InputFlags, ModelFlags, EngineFlags, CapFlags),
    "check": (InputFlags, ModelFlags, CapFlags),
    "diff": (InputFlags, ModelFlags, EngineFlags, ViewFlags, CapFlags),
    "heads": (InputFlags, ModelFlags, EngineFlags, ViewFlags, CapFlags),
    "model": (CapFlags,),
}


class TestCommandsDeclareTheirOptions:
    """Each command declares every option of the groups it builds, with the group's default."""

    @pytest.mark.parametrize("name", sorted(BUILDS))
    def test_group_fields_are_options(self, name: str) -> None:
        """The command's parameters include each field of each group it builds, defaulting as the group does."""
        parameters = inspect.signature(getattr(importlib.import_module(f"attnx.cli.{name}"), name)).parameters
        for group in BUILDS[name]:
            for field in dataclasses.fields(group):
                assert field.name in parameters, (name, group.__name__, field.name)
                assert parameters[field.name].default == field.default, (name, field.name)

    def test_flags_arrive_in_the_groups(self, runner: CliRunner) -> None:
        """Flags given on the command line change the input the command reads: -H 1 is one head."""
        result = runner.invoke(app, ["run", "-H", "1", "--layout", "interleaved", "-f", "json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert (data["heads"], data["layout"]) == (1, "interleaved")


class TestGroups:
    """What each group turns its flags into."""

    def test_input_overrides(self) -> None:
        """Tokens split on spaces, the scale is parsed, the layout and dropped heads pass through."""
        overrides = InputFlags(tokens="the  cat", scale="0.5", layout=Layout.interleaved).overrides([2])
        assert overrides.tokens == ("the", "cat") and overrides.scale == 0.5
        assert overrides.layout == "interleaved" and overrides.drop_heads == (2,)

    def test_drop_heads_pass_through_as_counted_from_0(self) -> None:
        """--drop-head 0 is head 0: the flags hand the loaders the numbers as typed, no shift."""
        assert InputFlags().overrides([0, 3]).drop_heads == (0, 3)
        assert InputFlags().overrides().drop_heads == ()

    def test_input_given_names_each_flag(self) -> None:
        """`given` maps the flags as typed to their values, for messages that name the first one given."""
        given = InputFlags(seed=3, causal=True).given()
        assert {flag for flag, value in given.items() if value not in (None, False)} == {"--seed", "--causal"}

    def test_engine_options_are_compute_arguments(self) -> None:
        """`options` are the strings `compute` takes; no --dtype stays None (the device's default)."""
        assert EngineFlags(device=Device.cpu).options() == {"engine": "numpy", "dtype": None, "device": "cpu"}

    def test_model_wanted_by_any_of_its_flags(self) -> None:
        """--model, --text or --layer alone selects the model input (the others are then asked for)."""
        assert not ModelFlags().wanted
        assert ModelFlags(layer="2").wanted and ModelFlags(text="hi").wanted

    def test_caps_flags_beat_variables(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A --max-* flag replaces ATTNX_MAX_*, which replaces the default."""
        monkeypatch.setenv("ATTNX_MAX_DIMENSION", "4")
        monkeypatch.setenv("ATTNX_MAX_DEPTH", "7")
        limits = CapFlags(max_dimension="1K").limits()
        assert (limits.max_dimension, limits.max_depth) == (1024, 7)

    def test_view_heatmap(self) -> None:
        """`heatmap` is True with --view heatmap only."""
        assert ViewFlags(view=View.heatmap).heatmap and not ViewFlags().heatmap

    def test_view_rows(self) -> None:
        """--rows is 40 by default, a number, or all (None); anything else is refused when the group is made."""
        assert ViewFlags().max_rows == 40 and ViewFlags(rows="7").max_rows == 7
        assert ViewFlags(rows="ALL").max_rows is None
        with pytest.raises(UsageError, match="--rows expects a whole number of at least 1 or 'all', got '0'"):
            ViewFlags(rows="0")

    def test_view_emit_writes_output(self, tmp_path: Path) -> None:
        """`emit` writes the chosen format to --output, not the table."""
        target = tmp_path / "result.json"
        ViewFlags(output=str(target)).emit(OutputFormat.json, {OutputFormat.json: lambda: '{"a": 1}\n'}, table)
        assert target.read_text() == '{"a": 1}\n'

    def test_view_emit_exports_the_table(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`emit` prints the table and saves it to --export; a .txt export is drawn without colour."""
        target = tmp_path / "table.txt"
        ViewFlags(export=str(target)).emit(OutputFormat.table, {}, table)
        assert target.read_text() == "colour False\n"
        assert capsys.readouterr().out == "colour False\n"


def table(colour: bool) -> Text:
    """A stand-in for a command's table: it says whether it was asked for colour."""
    return Text(f"colour {colour}")


class TestCommandsKeepTheirOptionOrder:
    """The groups stand where the options they replace stood, so `--help` lists them as before."""

    @pytest.mark.parametrize(
        ("command", "before", "after"),
        [("attnx.cli.run:run", "tensor", "max_bytes"), ("attnx.cli.heads:heads", "output_format", "max_bytes"),
         ("attnx.cli.diff:diff", "output_format", "max_bytes")],
    )  # fmt: skip
    def test_view_flags_in_place(self, command: str, before: str, after: str) -> None:
        """--output, --view, --rows, --export, --quiet, --no-color follow the format options and precede the caps."""
        module, name = command.split(":")
        names = list(inspect.signature(getattr(importlib.import_module(module), name)).parameters)
        start = names.index(before) + 1
        assert names[start : start + 7] == ["output", "view", "rows", "export", "quiet", "no_color", after]


class TestDropHead:
    """--drop-head N zeroes head N, counted from 0 as every table and the JSON count."""

    def test_drop_head_0_zeroes_the_first_head(self, runner: CliRunner) -> None:
        """On the worked example (H = 2, d_k = 2), --drop-head 0 zeroes output columns 0-1 and reports head 0."""
        result = runner.invoke(app, ["run", "--drop-head", "0", "-f", "json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["ablation"]["dropped_heads"] == [0]
        output = np.array(data["output"])
        assert np.all(output[:, :2] == 0.0)
        np.testing.assert_allclose(output[:, 2:], OUTPUT[:, 2:], atol=DECIMALS_4)  # head 1 as published

    def test_a_head_past_the_last_is_refused(self, runner: CliRunner) -> None:
        """--drop-head 2 with two heads (0 and 1) is exit 2 with one line."""
        result = runner.invoke(app, ["run", "--drop-head", "2"])
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr.startswith("attnx: error: ") and result.stderr.count("\n") == 1
