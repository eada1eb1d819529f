from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Annotated

import numpy as np
import pytest
import typer
from rich.text import Text
from typer.testing import CliRunner

from attnx.cli import app
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, ViewFlags, with_flags
from attnx.cli.options import Device, Dtype, Engine, Layout, OutputFormat, View
from attnx.errors import UsageError
from tests.conftest import DECIMALS_4, OUTPUT

ExtraOpt = Annotated[int, typer.Option("--extra")]


def captured() -> tuple[typer.Typer, dict[str, object]]:
    """A one-command app whose command records what it receives."""
    seen: dict[str, object] = {}

    @with_flags
    def command(inputs: InputFlags = InputFlags(), extra: ExtraOpt = 0, backend: EngineFlags = EngineFlags()) -> None:
        seen.update(inputs=inputs, extra=extra, backend=backend)

    app = typer.Typer()
    app.command()(command)
    return app, seen


class TestWithFlags:
    """A flag group is one parameter of the command and a row of options on the command line."""

    def test_signature_lists_the_fields_in_place(self) -> None:
        """Typer sees the group's fields where the group parameter stood, each with its default."""

        @with_flags
        def command(first: ExtraOpt = 0, backend: EngineFlags = EngineFlags(), last: ExtraOpt = 1) -> None:
            pass

        parameters = inspect.signature(command).parameters
        assert list(parameters) == ["first", "engine", "device", "dtype", "last"]
        assert parameters["engine"].default is Engine.numpy and parameters["dtype"].default is None

    def test_command_receives_one_object_per_group(self, runner: CliRunner) -> None:
        """Flags given on the command line arrive inside the groups, the rest keep their defaults."""
        app, seen = captured()
        result = runner.invoke(app, ["-H", "4", "--tokens", "a b", "--causal", "--layout", "interleaved",
                                     "--extra", "7", "--engine", "torch", "--dtype", "float32"])  # fmt: skip
        assert result.exit_code == 0, result.output
        assert seen["inputs"] == InputFlags(heads=4, tokens="a b", causal=True, layout=Layout.interleaved)
        assert seen["extra"] == 7
        assert seen["backend"] == EngineFlags(engine=Engine.torch, device=Device.auto, dtype=Dtype.float32)

    def test_a_name_used_twice_is_refused_at_import(self) -> None:
        """A command parameter named like a group's field would shadow it: a TypeError, not a silent loss."""
        with pytest.raises(TypeError, match="flag names used twice: dtype"):

            @with_flags
            def command(dtype: ExtraOpt = 0, backend: EngineFlags = EngineFlags()) -> None:
                pass


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
