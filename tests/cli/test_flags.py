"""Flag groups: how grouped expands them into a command's options and gathers them back, and each group's rules."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import typing
from pathlib import Path

import numpy as np
import pytest
from rich.text import Text

from attnx.cli import COMMANDS, function
from attnx.cli.flaggroup import _is_group, grouped
from attnx.cli.flags import CapFlags, EngineFlags, HeadFlags, InputFlags, ModelFlags, SettingFlags
from attnx.cli.options import Device, Engine, Layout, OutputFormat, View
from attnx.cli.viewflags import ViewFlags
from attnx.errors import UsageError
from tests.conftest import DECIMALS_4, OUTPUT
from tests.runner import run_attnx


class TestGrouped:
    """`grouped` expands each flag group a command takes into the options Typer reads, and gathers them back."""

    @pytest.mark.parametrize("name", sorted(COMMANDS))
    def test_every_option_is_declared_once(self, name: str) -> None:
        """A command's expanded signature names each option once; its groups' fields are all among them."""
        command = function(name)
        expanded = inspect.signature(command).parameters
        groups = [hint for hint in typing.get_type_hints(command.__wrapped__).values() if _is_group(hint)]
        for group in groups:
            for field in dataclasses.fields(group):
                assert field.name in expanded, (name, group.__name__, field.name)

    def test_a_group_default_sets_its_options_defaults(self) -> None:
        """rollout takes ViewFlags(view=heatmap): its --view defaults to heatmap, run's to table."""
        assert inspect.signature(function("rollout")).parameters["view"].default is View.heatmap
        assert inspect.signature(function("run")).parameters["view"].default is View.table

    def test_an_option_declared_twice_is_refused(self) -> None:
        """Two groups that both declare --heads cannot be taken by one command."""

        def twice(*, inputs: InputFlags, heads: HeadFlags) -> None:
            pass

        with pytest.raises(TypeError, match="options declared twice: heads, kv_heads, layout, scale"):
            grouped(twice)

    def test_values_arrive_in_the_groups(self) -> None:
        """The expanded command is called with flat options and hands the function its groups."""
        seen: list[object] = []

        def command(config: str | None = None, *, engine: EngineFlags, caps: CapFlags) -> None:
            seen.extend([config, engine, caps])

        grouped(command)(config="x.yaml", engine=Engine.torch, device=Device.cpu, dtype=None, max_bytes="1K",
                         max_yaml_bytes=None, max_depth=None, max_dimension=None, max_elements=None,
                         max_weight_bytes=None)  # fmt: skip
        assert seen == ["x.yaml", EngineFlags(engine=Engine.torch, device=Device.cpu), CapFlags(max_bytes="1K")]

    def test_flags_arrive_in_the_groups(self) -> None:
        """Flags given on the command line change the input the command reads: -H 1 is one head."""
        result = run_attnx("run", "-H", "1", "--layout", "interleaved", "-f", "json")
        assert result.code == 0, result.stderr
        data = json.loads(result.stdout)
        assert (data["heads"], data["layout"]) == (1, "interleaved")


class TestGroups:
    """What each group turns its flags into."""

    def test_input_overrides(self) -> None:
        """Tokens split on spaces, the scale is parsed, the layout and dropped heads pass through."""
        described, settings = InputFlags(tokens="the  cat", scale="0.5", layout=Layout.interleaved).overrides([2])
        assert described.tokens == ("the", "cat") and settings.get("scale") == 0.5
        assert settings.get("layout") == "interleaved" and settings.get("dropped_heads") == (2,)

    def test_drop_heads_pass_through_as_counted_from_0(self) -> None:
        """--drop-head 0 is head 0: the flags hand the settings the numbers as typed, no shift."""
        assert InputFlags().overrides([0, 3])[1].get("dropped_heads") == (0, 3)
        assert InputFlags().overrides()[1].changes == {}

    def test_setting_flags_are_named_as_the_settings(self) -> None:
        """Each setting flag's field is an AttentionSettings field or a field of its rotary positions."""
        from attnx.core.overrides import ROTARY_FIELDS
        from attnx.core.settings import AttentionSettings

        names = {field.name for field in dataclasses.fields(AttentionSettings)} | set(ROTARY_FIELDS)
        assert {field.name for field in dataclasses.fields(SettingFlags)} <= names

    def test_input_given_names_each_flag(self) -> None:
        """`given` maps the flags as typed to their values, for messages that name the first one given."""
        given = InputFlags(seed=3, causal=True).given()
        assert {flag for flag, value in given.items() if value not in (None, False)} == {"--seed", "--causal"}
        assert "-H/--heads" in given and "--heads" not in given

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

    def test_drop_head_0_zeroes_the_first_head(self) -> None:
        """On the worked example (H = 2, d_k = 2), --drop-head 0 zeroes output columns 0-1 and reports head 0."""
        result = run_attnx("run", "--drop-head", "0", "-f", "json")
        assert result.code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["ablation"]["dropped_heads"] == [0]
        output = np.array(data["output"])
        assert np.all(output[:, :2] == 0.0)
        np.testing.assert_allclose(output[:, 2:], OUTPUT[:, 2:], atol=DECIMALS_4)  # head 1 as published

    def test_minus_1_is_the_last_head(self) -> None:
        """--drop-head -1 on the worked example (H = 2) zeroes head 1 (columns 2-3) and reports it as head 1."""
        result = run_attnx("run", "--drop-head", "-1", "--drop-head", "1", "-f", "json")
        assert result.code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["ablation"]["dropped_heads"] == [1]
        output = np.array(data["output"])
        assert np.all(output[:, 2:] == 0.0)
        np.testing.assert_allclose(output[:, :2], OUTPUT[:, :2], atol=DECIMALS_4)  # head 0 as published

    def test_a_head_past_the_last_is_refused(self) -> None:
        """--drop-head 2 with two heads (0 and 1) is exit 2 with one line."""
        result = run_attnx("run", "--drop-head", "2")
        assert result.code == 2 and result.stdout == ""
        assert result.stderr.startswith("attnx: error: ") and result.stderr.count("\n") == 1
