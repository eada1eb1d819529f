"""Commands on a checkpoint: attnx model, run/trace/heads on a layer, the model view, usage errors and limits."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from attnx.analysis.heads import head_stats
from attnx.cli.inputs import LayerProgress, parse_layer
from attnx.errors import UsageError
from attnx.models import open_model
from attnx.workflows import layer_results
from tests.models.checkpoints import TEXT, Reference
from tests.runner import Outcome, run_attnx


def invoke(*args: str | Path, code: int = 0, stdin: bytes = b"", env: dict[str, str] | None = None) -> Outcome:
    """`attnx ARGS` at 140 columns without colour, which must exit with ``code``."""
    result = run_attnx(*map(str, args), stdin=stdin, env={"COLUMNS": "140", "NO_COLOR": "1", **(env or {})})
    assert result.code == code, result.stderr
    return result


def model_args(reference: Reference, layer: str = "1") -> list[str]:
    return ["--model", str(reference.path), "--text", TEXT, "--layer", layer]


class TestModelCommand:
    def test_table(self, bert: Reference) -> None:
        """attnx model prints the family, layers, heads, sizes and what the tokenizer file would do."""
        out = invoke("model", bert.path).stdout
        assert "BERT (post-LayerNorm encoder)" in out and "bert (BertForMaskedLM)" in out
        assert "4 × d_k 8" in out and "16 tokens (special tokens included)" in out
        assert "tokenizer.json pads every input to 24 tokens and truncates inputs to 6 tokens; attnx never" in out

    def test_json(self, gpt2: Reference) -> None:
        """--format json carries the same facts under documented keys."""
        data = json.loads(invoke("model", gpt2.path, "-f", "json").stdout)
        assert next(iter(data)) == "format_version"
        assert {k: data[k] for k in ("architecture", "layers", "heads", "d_model", "d_k", "max_length", "causal")} == {
            "architecture": "gpt2", "layers": 3, "heads": 4, "d_model": 32, "d_k": 8, "max_length": 16, "causal": True,
        }  # fmt: skip
        assert data["tokenizer"] == {"kind": "BPE", "vocab_size": data["vocab_size"], "stored_settings": []}


class TestCommandsOnAModel:
    def test_run_json_weights_match_transformers(self, bert: Reference) -> None:
        """attnx run --model ... --layer 1: the weights of layer 1 (the second) equal transformers' attentions[1]."""
        data = json.loads(invoke("run", *model_args(bert), "-f", "json", "--dtype", "float32").stdout)
        assert data["tokens"] == ["[CLS]", *TEXT.split(), "[SEP]"]
        assert np.abs(np.array(data["weights"]) - bert.attentions[1]).max() <= 1e-5
        assert data["parameters"] == 4 * (32 * 32 + 32)

    def test_trace_a_token(self, gpt2: Reference) -> None:
        """attnx trace on a GPT-2 layer: causal, so the traced token sees only itself and earlier keys."""
        data = json.loads(invoke("trace", *model_args(gpt2, "2"), "--query", "3", "-f", "json").stdout)
        assert data["query"] == 3 and data["n_heads"] == 4
        weights = [[key["weight"] for key in head["keys"]] for head in data["heads"]]
        np.testing.assert_allclose(weights, gpt2.attentions[2][:, 3, :], atol=1e-5)
        assert [key["masked"] for key in data["heads"][0]["keys"]] == [False] * 4 + [True] * 6

    def test_heads_one_layer(self, bert: Reference) -> None:
        """attnx heads --model ... --layer 0 labels the first layer's heads as head_stats does on its weights."""
        data = json.loads(invoke("heads", *model_args(bert, "0"), "-f", "json").stdout)
        with open_model(bert.path) as model:
            expected = head_stats(next(layer_results(model, TEXT)))
        assert [h["label"] for h in data["heads"]] == [s.label for s in expected]
        assert [h["mean_entropy"] for h in data["heads"]] == pytest.approx([s.mean_entropy for s in expected])

    def test_diff_sweep_and_ablation(self, bert: Reference) -> None:
        """diff sweeps heads on a model layer; run --drop-head 2 (from 0, as in the JSON) ablates one of its heads."""
        data = json.loads(invoke("diff", *model_args(bert), "--heads", "2,4", "-f", "json").stdout)
        assert [c["label"] for c in data["configs"]] == ["H=2", "H=4"] and data["compared"] == "projected"
        run = json.loads(invoke("run", *model_args(bert), "--drop-head", "2", "-f", "json").stdout)
        assert run["ablation"]["dropped_heads"] == [2] and run["ablation"]["shift_overall"] > 0

    def test_check_passes(self, gpt2: Reference) -> None:
        """attnx check --model: every engine and dtype agrees on the layer (exit 0)."""
        data = json.loads(invoke("check", *model_args(gpt2), "-f", "json").stdout)
        assert data["passed"] and {row["tensor"] for row in data["rows"]} >= {"weights", "projected"}


class TestLayerFromTheEnd:
    """--layer -1 is the last layer and -L the first, as in Python and TransformerLens, on every command that takes
    a layer of a model; what they print names the layer counted from 0."""

    def test_run_names_the_layer_from_0(self, gpt2: Reference) -> None:
        """run --layer -1 is layer 2 of 3: the same weights, and the header says layer 2."""
        last = json.loads(invoke("run", *model_args(gpt2, "-1"), "-f", "json").stdout)
        np.testing.assert_allclose(last["weights"], gpt2.attentions[2], atol=1e-5)
        out = invoke("run", *model_args(gpt2, "-1"), "--show", "weights").stdout
        assert out.startswith(f"{gpt2.path} (gpt2), layer 2 of 3 · ") and "layer -1" not in out

    def test_trace_and_check(self, gpt2: Reference) -> None:
        """trace --layer -3 is the first layer; check --layer -1 checks the last."""
        data = json.loads(invoke("trace", *model_args(gpt2, "-3"), "--query", "3", "-f", "json").stdout)
        weights = [[key["weight"] for key in head["keys"]] for head in data["heads"]]
        np.testing.assert_allclose(weights, gpt2.attentions[0][:, 3, :], atol=1e-5)
        check = invoke("check", *model_args(gpt2, "-1")).stdout
        assert check.startswith(f"{gpt2.path} (gpt2), layer 2 of 3 · against numpy")

    def test_heads_and_diff(self, gpt2: Reference) -> None:
        """heads and diff on --layer -2 print what they print on --layer 1."""
        for command in (["heads", "-f", "json"], ["diff", "--heads", "2,4", "-f", "json"]):
            assert invoke(*command, *model_args(gpt2, "-2")).stdout == invoke(*command, *model_args(gpt2, "1")).stdout

    def test_ablate(self, gpt2: Reference) -> None:
        """ablate --layer -1 drops the last layer's heads one by one, named L2H0..L2H3."""
        data = json.loads(invoke("ablate", *model_args(gpt2, "-1"), "-f", "json").stdout)
        assert [a["labels"] for a in data["ablations"]] == [["L2H0"], ["L2H1"], ["L2H2"], ["L2H3"]]


class TestModelView:
    def test_json_grid(self, gpt2: Reference) -> None:
        """heads --layer all -f json: layers × heads, each with the label and entropy of that layer's weights."""
        data = json.loads(invoke("heads", *model_args(gpt2, "all"), "-f", "json").stdout)
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

    def test_table_grid(self, bert: Reference) -> None:
        """The table is a grid: one row per layer (L0..L2), one column per head (H0..H3), and the legend."""
        out = invoke("heads", *model_args(bert, "all")).stdout
        assert "3 layers × 4 heads" in out and "Model view" in out
        assert [line.split()[0] for line in out.splitlines() if line.startswith("L")] == ["L0", "L1", "L2"]
        header = next(line for line in out.splitlines() if "H0" in line)
        assert header.split() == ["H0", "H1", "H2", "H3"] and "prev = previous-token" in out

    def test_grid_fits_80_columns_with_12_heads(self) -> None:
        """Twelve heads of five-letter labels fit in 80 columns."""
        from attnx.analysis.model_view import ModelView
        from attnx.render.model import model_view_table

        stats = (type("S", (), {"label": "focused", "scores": {"uniform": 0.25}, "counts": {}})(),) * 12
        view = ModelView("m", "bert", ("a",), (stats,) * 2, 12, 32, 0.1, "sqrt_dk", "numpy", "cpu", "float64")
        console = Console(file=io.StringIO(), width=80, color_system=None)
        console.print(model_view_table(view, colour=False))
        grid = [line for line in console.file.getvalue().splitlines() if line.startswith("L0")]
        assert grid == ["L0 " + " ".join(["focus"] * 12)]


class TestModelViewColours:
    def test_every_style_reads_on_dark_and_light_terminals(self, bert: Reference) -> None:
        """Every style the model view and `attnx model` draw passes the contrast rules: labels, captions, and the
        entropy cells from 0 (dark purple, white numbers) to 1 (their backgrounds are all tested in test_heatmap)."""
        from attnx.analysis.model_view import ModelView
        from attnx.models import describe
        from attnx.render.colours import WHITE, contrast, rgb_of, style_problem
        from attnx.render.model import CODES, info_view, model_view_table

        labels = [*CODES, None]
        stats = tuple(
            type(
                "S",
                (),
                {"label": labels[h % len(labels)], "scores": {"uniform": h / 11 if h < 12 else None}, "counts": {}},
            )()
            for h in range(13)
        )  # entropy 0, 1/11, ..., 1 and one head without a value
        view = ModelView("m", "gpt2", ("the", " cat"), (stats,) * 2, 13, 8, 0.35, "sqrt_dk", "numpy", "cpu", "float64")
        console = Console(file=io.StringIO(), width=140, force_terminal=True, color_system="truecolor")
        drawn = [
            seg.style
            for renderable in (model_view_table(view), info_view(describe(bert.path)))
            for line in console.render_lines(renderable, console.options, pad=False)
            for seg in line
            if seg.style is not None and (seg.text.strip() or seg.style.bgcolor is not None)
        ]
        assert len(drawn) > 2 * 13 and [style_problem(style) for style in drawn] == [None] * len(drawn)
        zero = next(style for style in drawn if style.bgcolor is not None)  # L0 H0: entropy 0.00
        assert rgb_of(zero.color) == WHITE and contrast(WHITE, rgb_of(zero.bgcolor)) > 15


class TestUsageErrors:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["rollout"], "attnx rollout runs a checkpoint: give --model DIR"),
            (["rollout", "--text", "the cat", "-t", "cat"], "attnx rollout runs a checkpoint: give --model DIR"),
            (["ablate"], "attnx ablate runs a checkpoint: give --model DIR"),
            (["detect"], "attnx detect runs a checkpoint: give --model DIR"),
        ],
    )
    def test_a_checkpoint_command_without_one(self, args: list[str], message: str) -> None:
        """rollout, ablate and detect with no --model say that they run a checkpoint (rollout has no --layer)."""
        result = invoke(*args, code=2)
        assert result.stderr == f"attnx: error: {message}\n"

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["run", "configs/gqa.yaml", "--model", "{path}", "--text", "a"], "--model replaces CONFIG"),
            (["run", "--text", "the cat"], "--text and --layer go with --model DIR"),
            (["run", "--model", "{path}"], "--model needs the text to run"),
            (["run", "--model", "{path}", "--text", "a", "--seed", "3"], "--seed describes random inputs"),
            (
                ["run", "--model", "{path}", "--text", "a", "--layer", "x"],
                "--layer takes a layer number counted from 0 (-1: the last), not 'x'",
            ),
            (["trace", "--model", "{path}", "--text", "a", "--layer", "all"], "--layer all is for `attnx heads`"),
            (
                ["run", "--model", "{path}", "--text", "a", "--layer", "3"],
                "layer 3 does not exist: the model has layers 0..2 (or -3..-1)",
            ),
            (
                ["run", "--model", "{path}", "--text", "a", "--layer", "-4"],
                "layer -4 does not exist: the model has layers 0..2 (or -3..-1)",
            ),
            (
                ["ablate", "--model", "{path}", "--text", "a", "--layer", "-4"],
                "layer -4 does not exist: the model has layers 0..2 (or -3..-1)",
            ),
            (
                ["heads", "--model", "{path}", "--text", "a", "--layer", "all", "-H", "2"],
                "-H/--heads changes one layer's input",
            ),
            (["heads", "--model", "{path}", "--text", "a", "--layer", "all", "--view", "heatmap"], "grid of labels"),
            (["diff", "a.yaml", "b.yaml", "--model", "{path}", "--text", "a"], "--model replaces A and B"),
            (["run", "--model", "{path}", "--text", " ".join(["cat"] * 20)], "the text is 22 tokens long"),
        ],
    )
    def test_exit_2_with_one_line(self, bert: Reference, args: list[str], message: str) -> None:
        """Each misuse ends with exit 2 and one line on stderr saying what is wrong."""
        result = invoke(*[a.format(path=bert.path) for a in args], code=2)
        assert result.stderr.count("\n") == 1 and message in result.stderr

    def test_missing_file_names_it(self, bert: Reference, tmp_path: Path) -> None:
        """A checkpoint without tokenizer.json: exit 2 and the path of the missing file."""
        path = Path(shutil.copytree(bert.path, tmp_path / "ckpt"))
        (path / "tokenizer.json").unlink()
        result = invoke("model", path, code=2)
        assert (
            result.stderr == f"attnx: error: {path / 'tokenizer.json'}: missing (a checkpoint folder holds "
            "config.json, model.safetensors, tokenizer.json, or one model's .gguf file; a vision model's holds "
            "preprocessor_config.json in place of the tokenizer)\n"
        )

    def test_unsupported_architecture(self, bert: Reference, tmp_path: Path) -> None:
        """An unsupported model_type: exit 2 naming what attnx runs."""
        path = Path(shutil.copytree(bert.path, tmp_path / "ckpt"))
        (path / "config.json").write_text(json.dumps({"model_type": "xlnet"}))
        result = invoke("heads", "--model", path, "--text", "a", code=2)
        assert "model_type 'xlnet' is not supported; attnx runs bert, gpt2, llama, mistral" in result.stderr


# One command line per way a model layer becomes an input: each must hold every cap.
MODEL_COMMANDS = {
    "run": ["run", "--layer", "1"],
    "trace": ["trace", "--layer", "1", "--query", "0"],
    "check": ["check", "--layer", "1"],
    "heads": ["heads", "--layer", "1"],
    "model view": ["heads", "--layer", "all"],
    "diff sweep": ["diff", "--layer", "1", "--heads", "2,4"],
}


@pytest.fixture(scope="module")
def deep_bert(bert: Reference, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with a config.json nested five levels deep (an extra key holding [[[[1]]]])."""
    path = Path(shutil.copytree(bert.path, tmp_path_factory.mktemp("deep") / "bert"))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "extra": [[[[1]]]]}))
    return path


class TestLimitsOnModelInputs:
    @pytest.mark.parametrize("command", MODEL_COMMANDS)
    def test_max_elements_counts_the_scores(self, bert: Reference, command: str) -> None:
        """--max-elements 10: the layer's 4 × 12 × 12 scores are refused before any layer runs, exit 2, one line."""
        args = [*MODEL_COMMANDS[command], "--model", bert.path, "--text", TEXT, "--max-elements", "10"]
        result = invoke(*args, code=2)
        assert result.stderr == (
            f"attnx: error: {bert.path}: the scores: an array of 4 × 12 × 12 (576 elements) exceeds the element "
            "cap of 10 elements per array; raise it with --max-elements or ATTNX_MAX_ELEMENTS\n"
        )

    @pytest.mark.parametrize("command", MODEL_COMMANDS)
    def test_max_dimension_counts_the_tokens(self, bert: Reference, command: str) -> None:
        """--max-dimension 11: the text's 12 tokens are one axis too long."""
        args = [*MODEL_COMMANDS[command], "--model", bert.path, "--text", TEXT, "--max-dimension", "11"]
        result = invoke(*args, code=2)
        assert result.stderr == (
            f"attnx: error: {bert.path}: a text of 12 tokens exceeds the dimension cap of 11 per axis; "
            "raise it with --max-dimension or ATTNX_MAX_DIMENSION\n"
        )

    @pytest.mark.parametrize("command", [*MODEL_COMMANDS, "model"])
    def test_max_bytes_bounds_the_files(self, bert: Reference, command: str) -> None:
        """--max-bytes below config.json's size refuses it unparsed, on every command that reads a checkpoint."""
        size = (bert.path / "config.json").stat().st_size
        given = ["model", bert.path] if command == "model" else [*MODEL_COMMANDS[command], "--model", bert.path]
        args = [*given, "--text", TEXT] if command != "model" else given
        result = invoke(*args, "--max-bytes", str(size - 1), code=2)
        assert result.stderr == (
            f"attnx: error: {bert.path / 'config.json'}: {size} bytes exceeds the input size cap of {size - 1} "
            "bytes; raise it with --max-bytes or ATTNX_MAX_BYTES\n"
        )

    @pytest.mark.parametrize("command", [*MODEL_COMMANDS, "model"])
    def test_max_depth_bounds_config_json(self, deep_bert: Path, command: str) -> None:
        """--max-depth 4 refuses a config.json nested five deep, at the bracket that goes too deep."""
        given = ["model", deep_bert] if command == "model" else [*MODEL_COMMANDS[command], "--model", deep_bert]
        args = [*given, "--text", TEXT] if command != "model" else given
        result = invoke(*args, "--max-depth", "4", code=2)
        assert result.stderr.startswith(f"attnx: error: {deep_bert / 'config.json'}:1:")
        assert result.stderr.endswith(
            ": level 5 of nesting exceeds the depth cap of 4 levels; raise it with --max-depth or ATTNX_MAX_DEPTH\n"
        )
        invoke(*args, "--max-depth", "5", "-f", "json")

    def test_max_bytes_bounds_the_text(self, bert: Reference) -> None:
        """--text longer than --max-bytes is refused as any input is."""
        result = invoke("run", "--model", bert.path, "--text", TEXT, "--max-bytes", "10", code=2)
        assert result.stderr == (
            f"attnx: error: --text: {len(TEXT)} bytes exceeds the input size cap of 10 bytes; "
            "raise it with --max-bytes or ATTNX_MAX_BYTES\n"
        )

    def test_caps_from_the_environment(self, bert: Reference) -> None:
        """ATTNX_MAX_ELEMENTS holds for a model input as the flag does."""
        result = invoke("run", "--model", bert.path, "--text", TEXT, env={"ATTNX_MAX_ELEMENTS": "10"}, code=2)
        assert "the scores: an array of 4 × 12 × 12" in result.stderr

    def test_within_the_caps(self, bert: Reference) -> None:
        """Caps just large enough for every array of the run let it through (exit 0)."""
        caps = ["--max-elements", "2048", "--max-dimension", "64"]
        data = json.loads(invoke("run", *model_args(bert), *caps, "-f", "json").stdout)
        assert np.array(data["weights"]).shape == (4, 12, 12)


class TestTextFromStdin:
    def test_dash_reads_stdin(self, bert: Reference) -> None:
        """--text - reads the text from stdin, its final line break dropped: the same tokens and weights as --text."""
        given = json.loads(invoke("run", *model_args(bert), "-f", "json").stdout)
        args = ["run", "--model", str(bert.path), "--text", "-", "--layer", "1", "-f", "json"]
        piped = json.loads(invoke(*args, stdin=f"{TEXT}\n".encode()).stdout)
        assert piped["tokens"] == given["tokens"] and piped["weights"] == given["weights"]

    def test_model_view_reads_stdin(self, gpt2: Reference) -> None:
        """heads --layer all takes --text - too."""
        args = ["heads", "--model", str(gpt2.path), "--text", "-", "--layer", "all", "-f", "json"]
        assert json.loads(invoke(*args, stdin=b"the cat sat").stdout)["tokens"] == ["the", " cat", " sat"]

    def test_text_not_utf8_on_the_command_line(self, bert: Reference) -> None:
        """--text holding bytes that are not UTF-8 (a lone surrogate to Python) is exit 2 with one line."""
        result = invoke("run", "--model", bert.path, "--text", "the \udcff cat", code=2)
        assert result.stderr == "attnx: error: --text is not UTF-8 text (character 4 cannot be encoded)\n"

    def test_not_utf8(self, bert: Reference) -> None:
        """Bytes that are not UTF-8 on stdin: exit 2, one line with the offset."""
        result = invoke("run", "--model", bert.path, "--text", "-", stdin=b"the \xff cat", code=2)
        assert result.stderr == "attnx: error: <stdin>: the text is not UTF-8 (byte 0xff at offset 4)\n"

    def test_stdin_over_max_bytes(self, bert: Reference) -> None:
        """stdin is read no further than --max-bytes."""
        args = ["run", "--model", str(bert.path), "--text", "-", "--max-bytes", "10"]
        result = invoke(*args, stdin=TEXT.encode(), code=2)
        assert result.stderr == (
            "attnx: error: <stdin>: a stream longer than 10 bytes exceeds the input size cap of 10 bytes; "
            "raise it with --max-bytes or ATTNX_MAX_BYTES\n"
        )


class TestByteLevelTokens:
    def test_json_and_table_show_text(self, gpt2: Reference) -> None:
        """GPT-2's Ġcat and Ċ are ' cat' and a visible \\n in the JSON and the table; no Ġ is left anywhere."""
        args = ["run", "--model", gpt2.path, "--text", "the cat\nsat", "--layer", "0"]
        data = json.loads(invoke(*args, "-f", "json").stdout)
        assert data["tokens"] == ["the", " cat", "\\n", "sat"]
        table = invoke(*args, "--show", "weights").stdout
        rows = [line for line in table.splitlines() if line.startswith((" cat ", "\\n "))]
        assert len(rows) == 2 * 4 and "Ġ" not in table and "Ċ" not in table  # two rows in each head's table

    def test_trace_finds_a_byte_level_token_by_its_word(self, gpt2: Reference) -> None:
        """trace --token cat finds the token ' cat' (stored as Ġcat)."""
        args = ["trace", "--model", gpt2.path, "--text", "the cat", "--layer", "0", "--token", "cat", "-f", "json"]
        assert json.loads(invoke(*args).stdout)["query"] == 1


class TestLayerOption:
    def test_parse_layer(self) -> None:
        """--layer counts from 0 (default 0); all only where allowed."""
        assert (parse_layer(None), parse_layer("0"), parse_layer("5"), parse_layer("all", allow_all=True)) == (
            0,
            0,
            5,
            None,
        )
        with pytest.raises(UsageError):
            parse_layer("all")
        with pytest.raises(UsageError):
            parse_layer("x")
        assert parse_layer("-1") == -1  # the model resolves it: the last layer


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
