"""Two checkpoints head by head: the JS divergence, where a head moved, the layers' outputs, next-token KL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.analysis.model_diff import js_divergence
from attnx.errors import ModelError
from attnx.models import open_model
from attnx.workflows import compare_models
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[DecoderReference, Path]:
    """The tiny Qwen 3 and a copy whose layer 1 W_q moved in head 2's rows only (d_k 12)."""
    from safetensors.numpy import load_file, save_file

    base = built("qwen3", tmp_path_factory)
    moved = Path(shutil.copytree(base.path, tmp_path_factory.mktemp("moved") / "qwen3"))
    tensors = load_file(moved / "model.safetensors")
    name = "model.layers.1.self_attn.q_proj.weight"
    tensors[name] = tensors[name].copy()
    tensors[name][24:36] += np.random.default_rng(0).normal(size=(12, 32)).astype(np.float32) * 0.5
    save_file(tensors, moved / "model.safetensors", metadata={"format": "pt"})
    return base, moved


class TestDivergence:
    def test_bounds(self) -> None:
        """0 bits for equal rows, 1 for disjoint ones, and symmetric in between."""
        p, q = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]), np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
        assert js_divergence(p, q).tolist() == [0.0, 1.0]
        r, s = np.array([0.2, 0.3, 0.5]), np.array([0.4, 0.4, 0.2])
        m = (r + s) / 2
        expected = 0.5 * (r * np.log2(r / m)).sum() + 0.5 * (s * np.log2(s / m)).sum()
        assert js_divergence(r, s) == pytest.approx(expected, rel=1e-14) == js_divergence(s, r)


class TestCompare:
    def test_itself(self, pair: tuple[DecoderReference, Path]) -> None:
        """A checkpoint against itself moves nothing."""
        with open_model(pair[0].path) as a, open_model(pair[0].path) as b:
            comparison = compare_models(a, b, TEXT)
        assert not comparison.grid().any() and comparison.kl is not None and not comparison.kl.any()
        assert all(layer.output_overall == 0 for layer in comparison.layers)

    def test_the_moved_head_ranks_first(self, pair: tuple[DecoderReference, Path]) -> None:
        """Layer 0 does not move; in layer 1 only head 2 does (its own W_q rows), and it ranks first; the layers
        after move, and so do the next-token distributions."""
        with open_model(pair[0].path) as a, open_model(pair[1]) as b:
            comparison = compare_models(a, b, TEXT)
        grid = comparison.grid()
        assert not grid[0].any() and comparison.layers[0].output_overall == 0
        assert grid[1, 2] > 0.01 and grid[1, [0, 1, 3]].tolist() == [0, 0, 0]
        worst = comparison.worst(1)[0]
        assert (worst.layer, worst.head) == (1, 2) and worst.js_max >= worst.js_mean
        assert comparison.layers[1].output_overall > 0 and comparison.kl is not None and comparison.kl.max() > 0

    def test_refused(self, pair: tuple[DecoderReference, Path], tmp_path_factory: pytest.TempPathFactory) -> None:
        """Another architecture is a ModelError naming both."""
        llama = built("llama", tmp_path_factory)
        with (
            open_model(pair[0].path) as a,
            open_model(llama.path) as b,
            pytest.raises(ModelError, match=r"^the models differ in architecture: A is qwen3, B is llama$"),
        ):
            compare_models(a, b, TEXT)


class TestQuantization:
    def test_q4_against_q8(self, tmp_path: Path) -> None:
        """One random Qwen 2 written as GGUF twice, Q8_0 and Q4_0: every head moves (Q4_0 moves each weight), more
        than the float16 copy does, and the grid's scale says its power of ten."""
        import dataclasses

        from tests.models.ggufs import VARIANTS, random_model, write_gguf

        variant = VARIANTS["qwen2"]
        model = random_model(variant)
        files = {kind: write_gguf(tmp_path / f"{kind}.gguf", model, dataclasses.replace(variant, quant=kind))
                 for kind in ("Q8_0", "Q4_0", "F16")}  # fmt: skip
        shifts = {}
        for kind in ("Q4_0", "F16"):
            with open_model(files["Q8_0"]) as a, open_model(files[kind]) as b:
                shifts[kind] = compare_models(a, b, TEXT)
        assert shifts["Q4_0"].grid().min() > 0 and shifts["Q4_0"].grid().mean() > 10 * shifts["F16"].grid().mean()
        shown = invoke("diff", "--model", files["Q8_0"], "--model", files["Q4_0"], "--text", TEXT).stdout
        assert "Mean JS divergence per layer and head" in shown and "qwen2" in shown

    @pytest.mark.parametrize(("top", "factor", "unit"), [(0.0003, 1e4, " ×10⁻⁴"), (0.05, 1.0, ""), (0.0, 1.0, "")])
    def test_unit(self, top: float, factor: float, unit: str) -> None:
        """Divergences under 0.01 bits are shown in a power of ten that gives them leading digits."""
        from attnx.render.model_diff import unit_of

        assert unit_of(top) == (factor, unit)


class TestOneUnit:
    def test_grid_and_table_share_the_power_of_ten(self) -> None:
        """Means up to 3.0e-4 and a largest of 2.0e-3 (a head's worst query): the grid and the table both show
        ×10⁻³, so one head reads 0.3048 in both (the grid showed ×10⁻⁴, 3.0481, above a table in ×10⁻³)."""
        from attnx.analysis.model_diff import HeadShift, LayerShift, ModelComparison
        from attnx.render.model_diff import comparison_view
        from tests.render.test_heads import plain

        heads = (HeadShift(0, 0, 3.0481e-4, 2.0e-3, 0.01, 1, 0), HeadShift(0, 1, 1.0e-5, 5.0e-5, 0.001, 1, 1))
        layer = LayerShift(0, heads, np.zeros(2), 0.0)
        shown = plain(comparison_view(ModelComparison("a", "b", "llama", ("x", "y"), (layer,), None), 4, colour=False))
        assert "Mean JS divergence per layer and head ×10⁻³ · 2 tokens" in shown
        assert "mean JS ×10⁻³" in shown and "×10⁻⁴" not in shown
        grid_row = next(line for line in shown.splitlines() if line.startswith("L0 "))
        assert "0.3048" in grid_row and "0.0100" in grid_row
        assert next(line for line in shown.splitlines() if line.lstrip().startswith("L0 H0")).split()[2:4] == [
            "0.3048",
            "2.0000",
        ]


class TestCommand:
    def test_table_and_json(self, pair: tuple[DecoderReference, Path]) -> None:
        """The grid, the worst heads (L1 H2 first) and the layers; the JSON holds the same numbers."""
        args = ["diff", "--model", str(pair[0].path), "--model", str(pair[1]), "--text", TEXT]
        shown = invoke(*args).stdout
        assert "Mean JS divergence per layer and head" in shown
        assert shown.split("Heads that moved most (of 12)")[1].split("\n")[3].split()[:2] == ["L1", "H2"]
        data = json.loads(invoke(*args, "-f", "json").stdout)
        assert data["mode"] == "models" and data["worst"][0] == {
            "layer": 1,
            "head": 2,
            "js_mean": data["layers"][1]["heads"][2]["js_mean"],
        }
        assert data["layers"][0]["output_shift"] == 0 and len(data["kl"]) == len(data["tokens"])

    def test_one_checkpoint_twice(self, pair: tuple[DecoderReference, Path], tmp_path: Path) -> None:
        """The same folder twice, or through a link, is exit 2 at once, saying so (it ran every layer of both to
        print zeros); a copy is another file, compared as one."""
        folder = pair[0].path
        (tmp_path / "link").symlink_to(folder)
        for other in (folder, tmp_path / "link", Path(f"{folder}/../{folder.name}")):
            refused = invoke("diff", "--model", str(folder), "--model", str(other), "--text", TEXT, code=2)
            assert refused.stdout == ""
            names = str(folder) if other == folder else f"{folder} and {other}"
            assert refused.stderr == (
                f"attnx: error: --model names one checkpoint twice ({names}: the same file): every difference would "
                "be 0; give two different checkpoints\n"
            )

    def test_usage(self, pair: tuple[DecoderReference, Path]) -> None:
        """--layer and sweeps do not apply to two checkpoints; three --model are refused; exit 2 each."""
        base = ["diff", "--model", str(pair[0].path), "--model", str(pair[1]), "--text", TEXT]
        assert "--layer does not apply to two checkpoints" in invoke(*base, "--layer", "1", code=2).stderr
        assert "--heads does not apply" in invoke(*base, "--heads", "1,2", code=2).stderr
        assert "--model is given 3 times" in invoke(*base, "--model", str(pair[1]), code=2).stderr
