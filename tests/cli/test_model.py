from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from attnx.analysis.heads import head_stats
from attnx.cli import app
from attnx.cli.model_input import LayerProgress, parse_layer
from attnx.errors import UsageError
from attnx.models import layer_results, open_model
from tests.models.checkpoints import TEXT, Reference


def invoke(runner: CliRunner, *args: str, code: int = 0):
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "140", "NO_COLOR": "1"})
    assert result.exit_code == code, result.output
    return result


def model_args(reference: Reference, layer: str = "2") -> list[str]:
    return ["--model", str(reference.path), "--text", TEXT, "--layer", layer]


class TestModelCommand:
    def test_table(self, runner: CliRunner, bert: Reference) -> None:
        """attnx model prints the family, layers, heads, sizes and what the tokenizer file would do."""
        out = invoke(runner, "model", bert.path).stdout
        assert "BERT (post-LayerNorm encoder)" in out and "bert (BertForMaskedLM)" in out
        assert "4 × d_k 8" in out and "16 tokens (special tokens included)" in out
        assert "tokenizer.json pads every input to 24 tokens and truncates inputs to 6 tokens; attnx never" in out

    def test_json(self, runner: CliRunner, gpt2: Reference) -> None:
        """--format json carries the same facts under documented keys."""
        data = json.loads(invoke(runner, "model", gpt2.path, "-f", "json").stdout)
        assert next(iter(data)) == "format_version"
        assert {k: data[k] for k in ("architecture", "layers", "heads", "d_model", "d_k", "max_length", "causal")} == {
            "architecture": "gpt2", "layers": 3, "heads": 4, "d_model": 32, "d_k": 8, "max_length": 16, "causal": True,
        }  # fmt: skip
        assert data["tokenizer"] == {"kind": "BPE", "vocab_size": data["vocab_size"], "stored_settings": []}


class TestCommandsOnAModel:
    def test_run_json_weights_match_transformers(self, runner: CliRunner, bert: Reference) -> None:
        """attnx run --model ... --layer 2: the weights of layer 2 equal transformers' (float32 within 1e-5)."""
        data = json.loads(invoke(runner, "run", *model_args(bert), "-f", "json", "--dtype", "float32").stdout)
        assert data["tokens"] == ["[CLS]", *TEXT.split(), "[SEP]"]
        assert np.abs(np.array(data["weights"]) - bert.attentions[1]).max() <= 1e-5
        assert data["parameters"] == 4 * (32 * 32 + 32)

    def test_trace_a_token(self, runner: CliRunner, gpt2: Reference) -> None:
        """attnx trace on a GPT-2 layer: causal, so the traced token sees only itself and earlier keys."""
        data = json.loads(invoke(runner, "trace", *model_args(gpt2, "3"), "--query", "3", "-f", "json").stdout)
        assert data["query"] == 3 and data["n_heads"] == 4
        weights = [[key["weight"] for key in head["keys"]] for head in data["heads"]]
        np.testing.assert_allclose(weights, gpt2.attentions[2][:, 3, :], atol=1e-5)
        assert [key["masked"] for key in data["heads"][0]["keys"]] == [False] * 4 + [True] * 6

    def test_heads_one_layer(self, runner: CliRunner, bert: Reference) -> None:
        """attnx heads --model ... --layer 1 labels that layer's heads as head_stats does on its weights."""
        data = json.loads(invoke(runner, "heads", *model_args(bert, "1"), "-f", "json").stdout)
        with open_model(bert.path) as model:
            expected = head_stats(next(layer_results(model, TEXT)))
        assert [h["label"] for h in data["heads"]] == [s.label for s in expected]
        assert [h["mean_entropy"] for h in data["heads"]] == pytest.approx([s.mean_entropy for s in expected])

    def test_diff_sweep_and_ablation(self, runner: CliRunner, bert: Reference) -> None:
        """diff sweeps heads on a model layer; run --drop-head ablates one of its heads."""
        data = json.loads(invoke(runner, "diff", *model_args(bert), "--heads", "2,4", "-f", "json").stdout)
        assert [c["label"] for c in data["configs"]] == ["H=2", "H=4"] and data["compared"] == "projected"
        run = json.loads(invoke(runner, "run", *model_args(bert), "--drop-head", "3", "-f", "json").stdout)
        assert run["ablation"]["dropped_heads"] == [2] and run["ablation"]["shift_overall"] > 0

    def test_check_passes(self, runner: CliRunner, gpt2: Reference) -> None:
        """attnx check --model: every engine and dtype agrees on the layer (exit 0)."""
        data = json.loads(invoke(runner, "check", *model_args(gpt2), "-f", "json").stdout)
        assert data["passed"] and {row["tensor"] for row in data["rows"]} >= {"weights", "projected"}


class TestModelView:
    def test_json_grid(self, runner: CliRunner, gpt2: Reference) -> None:
        """heads --layer all -f json: layers × heads, each with the label and entropy of that layer's weights."""
        data = json.loads(invoke(runner, "heads", *model_args(gpt2, "all"), "-f", "json").stdout)
        assert (data["n_layers"], data["n_heads"], data["architecture"]) == (3, 4, "gpt2")
        with open_model(gpt2.path) as model:
            expected = [head_stats(result) for result in layer_results(model, TEXT)]
        for layer, stats in zip(data["layers"], expected, strict=True):
            assert [h["head"] for h in layer["heads"]] == [0, 1, 2, 3]
            assert [h["label"] for h in layer["heads"]] == [s.label for s in stats]
            assert [h["mean_normalized_entropy"] for h in layer["heads"]] == pytest.approx(
                [s.scores["uniform"] for s in stats]
            )
            assert "queries" not in layer["heads"][0]

    def test_table_grid(self, runner: CliRunner, bert: Reference) -> None:
        """The table is a grid: one row per layer (L1..L3), one column per head (H1..H4), and the legend."""
        out = invoke(runner, "heads", *model_args(bert, "all")).stdout
        assert "3 layers × 4 heads" in out and "Model view" in out
        assert [line.split()[0] for line in out.splitlines() if line.startswith("L")] == ["L1", "L2", "L3"]
        assert "H1" in out and "H4" in out and "prev = previous-token" in out

    def test_grid_fits_80_columns_with_12_heads(self) -> None:
        """Twelve heads of five-letter labels fit in 80 columns."""
        from attnx.analysis.model_view import ModelView
        from attnx.render.model import model_view_table

        stats = (type("S", (), {"label": "first-token", "scores": {"uniform": 0.25}})(),) * 12
        view = ModelView("m", "bert", ("a",), (stats,) * 2, 12, 32, 0.1, "sqrt_dk", "numpy", "cpu", "float64")
        console = Console(file=io.StringIO(), width=80, color_system=None)
        console.print(model_view_table(view, colour=False))
        grid = [line for line in console.file.getvalue().splitlines() if line.startswith("L1")]
        assert grid == ["L1 " + " ".join(["first"] * 12)]


class TestUsageErrors:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["run", "configs/gqa.yaml", "--model", "{path}", "--text", "a"], "--model replaces CONFIG"),
            (["run", "--text", "the cat"], "--text and --layer go with --model DIR"),
            (["run", "--model", "{path}"], "--model needs the text to run"),
            (["run", "--model", "{path}", "--text", "a", "--seed", "3"], "--seed describes random inputs"),
            (
                ["run", "--model", "{path}", "--text", "a", "--layer", "0"],
                "--layer takes a layer number counted from 1",
            ),
            (["trace", "--model", "{path}", "--text", "a", "--layer", "all"], "--layer all is for `attnx heads`"),
            (["run", "--model", "{path}", "--text", "a", "--layer", "9"], "layer 9 does not exist: the model has 3"),
            (
                ["heads", "--model", "{path}", "--text", "a", "--layer", "all", "-H", "2"],
                "-H/--heads changes one layer's input",
            ),
            (["heads", "--model", "{path}", "--text", "a", "--layer", "all", "--view", "heatmap"], "grid of labels"),
            (["diff", "a.yaml", "b.yaml", "--model", "{path}", "--text", "a"], "--model replaces A and B"),
            (["run", "--model", "{path}", "--text", " ".join(["cat"] * 20)], "the text is 22 tokens long"),
        ],
    )
    def test_exit_2_with_one_line(self, runner: CliRunner, bert: Reference, args: list[str], message: str) -> None:
        """Each misuse ends with exit 2 and one line on stderr saying what is wrong."""
        result = invoke(runner, *[a.format(path=bert.path) for a in args], code=2)
        assert result.stderr.count("\n") == 1 and message in result.stderr

    def test_missing_file_names_it(self, runner: CliRunner, bert: Reference, tmp_path: Path) -> None:
        """A checkpoint without tokenizer.json: exit 2 and the path of the missing file."""
        path = Path(shutil.copytree(bert.path, tmp_path / "ckpt"))
        (path / "tokenizer.json").unlink()
        result = invoke(runner, "model", path, code=2)
        assert (
            result.stderr == f"attnx: error: {path / 'tokenizer.json'}: missing (a checkpoint folder holds "
            "config.json, model.safetensors, tokenizer.json)\n"
        )

    def test_unsupported_architecture(self, runner: CliRunner, bert: Reference, tmp_path: Path) -> None:
        """An unsupported model_type: exit 2 naming what attnx runs."""
        path = Path(shutil.copytree(bert.path, tmp_path / "ckpt"))
        (path / "config.json").write_text(json.dumps({"model_type": "t5"}))
        result = invoke(runner, "heads", "--model", path, "--text", "a", code=2)
        assert "model_type 't5' is not supported; attnx runs the BERT family" in result.stderr


class TestLayerOption:
    def test_parse_layer(self) -> None:
        """--layer counts from 1 (default 1); all only where allowed."""
        assert (parse_layer(None), parse_layer("1"), parse_layer("6"), parse_layer("all", allow_all=True)) == (
            0,
            0,
            5,
            None,
        )
        with pytest.raises(UsageError):
            parse_layer("all")
        with pytest.raises(UsageError):
            parse_layer("x")


class TestProgress:
    def test_bar_after_the_delay(self) -> None:
        """With a terminal console the bar shows layers done of total once the delay has passed."""
        console = Console(file=io.StringIO(), force_terminal=True, width=80)
        with LayerProgress("layers", console, delay=0.0) as progress:
            progress(1, 6)
            progress(2, 6)
        assert "2/6" in console.file.getvalue()

    def test_nothing_before_the_delay_or_without_console(self) -> None:
        """Quick work (or no terminal) shows no bar at all."""
        console = Console(file=io.StringIO(), force_terminal=True, width=80)
        with LayerProgress("layers", console, delay=60.0) as progress:
            progress(1, 6)
        LayerProgress("layers", None, delay=0.0)(1, 6)
        assert console.file.getvalue() == ""
