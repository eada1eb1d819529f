"""attnx run on the flags and the example configs as users run them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.runner import run_attnx

CONFIGS = Path(__file__).parents[2] / "configs"


def run_json(*args: str) -> dict:
    """`attnx run ARGS --format json`, which must exit 0, parsed."""
    result = run_attnx("run", *args, "--format", "json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


class TestFlags:
    def test_causal(self) -> None:
        """--causal blocks later keys: the JSON mask is lower-triangular and the weights there are zero."""
        data = run_json("--causal")
        assert np.array_equal(data["mask"], np.tril(np.ones((5, 5), dtype=bool)))
        assert np.array(data["weights"])[:, 0, 1:].max() == 0.0
        assert data["fully_masked_rows"] == []

    def test_kv_heads(self) -> None:
        """A GQA config is reported as such; --kv-heads 1 on it mean-pools its two K/V heads into one (MQA)."""
        data = run_json(str(CONFIGS / "gqa.yaml"))
        assert (data["heads"], data["kv_heads"]) == (4, 2)
        mqa = run_json(str(CONFIGS / "gqa.yaml"), "--kv-heads", "1")
        assert (mqa["heads"], mqa["kv_heads"], mqa["d_k"]) == (4, 1, 2)

    @pytest.mark.parametrize(("scale", "multiplier"), [("sqrt_d_model", 0.5), ("none", 1.0), ("0.25", 0.25)])
    def test_scale(self, scale: str, multiplier: float) -> None:
        """--scale picks the multiplier: 1/sqrt(d_model) = 0.5 on the example, 1, or a number."""
        data = run_json("--scale", scale)
        assert data["scale"] == multiplier
        np.testing.assert_allclose(data["scaled"], np.array(data["scores"]) * multiplier, rtol=1e-15)

    def test_bad_scale(self) -> None:
        """--scale with a word that is not a mode is exit 2."""
        result = run_attnx("run", "--scale", "sqrt_d")
        assert result.code == 2
        assert "--scale takes sqrt_dk, sqrt_d_model, none or a finite number, not 'sqrt_d'" in result.stderr

    def test_layout(self) -> None:
        """--layout interleaved makes head 0 read columns 0 and 2; the title says so."""
        result = run_attnx("run", "--layout", "interleaved", "--show", "weights")
        assert result.code == 0, result.stderr
        assert "Head 0 · columns 0,2 · d_k = 2" in result.stdout
        assert run_json("--layout", "interleaved")["layout"] == "interleaved"

    def test_drop_head(self) -> None:
        """--drop-head 1 (heads count from 0) zeroes the second head's columns and reports the shift per token."""
        data = run_json("--drop-head", "1")
        output = np.array(data["output"])
        assert not output[:, 2:].any()
        shift = data["ablation"]
        assert shift["dropped_heads"] == [1] and shift["compared"] == "output"
        head2 = np.array(data["head_outputs"])[1]
        np.testing.assert_allclose(shift["shift_per_token"], np.linalg.norm(head2, axis=1), rtol=1e-14)
        np.testing.assert_allclose(shift["shift_overall"], np.linalg.norm(head2), rtol=1e-14)

    def test_drop_head_out_of_range(self) -> None:
        """Dropping head 2 of two (heads 0 and 1) is exit 2 with the valid range."""
        result = run_attnx("run", "--drop-head", "2")
        assert result.code == 2
        assert "cannot drop head 2: heads are numbered 0..1" in result.stderr


class TestRealConfigs:
    def test_projections_report_projected_and_parameters(self) -> None:
        """The projection example reports the projected output and 4·16 + 4·4 parameters."""
        data = run_json(str(CONFIGS / "projections-with-wo.yaml"))
        assert data["parameters"] == 4 * 16 + 4 * 4
        output, projected = np.array(data["output"]), np.array(data["projected"])
        w_o = np.array([[0.5, 0.5, 0, 0], [0.5, -0.5, 0, 0], [0, 0, 0.5, 0.5], [0, 0, 0.5, -0.5]])
        np.testing.assert_allclose(projected, output @ w_o + [0.01, 0.02, 0.03, 0.04], rtol=1e-14)
        table = run_attnx("run", str(CONFIGS / "projections-with-wo.yaml"), "-s", "projected").stdout
        assert "Projected output (output · W_o + b_o)" in table and "80 parameters" in table

    def test_cross_attention_labels_and_padding(self) -> None:
        """Cross-attention labels queries and keys separately; the padded key gets zero weight."""
        data = run_json(str(CONFIGS / "cross-attention.yaml"))
        assert data["tokens"] == ["le", "chat"] and data["key_tokens"] == ["the", "cat", "<eos>", "<pad>"]
        assert np.array(data["weights"]).shape == (2, 2, 4)
        assert np.array(data["weights"])[..., 3].max() == 0.0

    def test_fully_masked_row_warns_and_reports(self, tmp_path: Path) -> None:
        """A query with every key blocked gets zeros, its index in JSON, and one warning line on stderr."""
        path = tmp_path / "masked.yaml"
        path.write_text("q: [[1], [2]]\nk: [[1], [2]]\nv: [[1], [2]]\nmask: [[1, 1], [0, 0]]\n")
        result = run_attnx("run", str(path), "--format", "json")
        assert result.code == 0
        data = json.loads(result.stdout)
        assert data["fully_masked_rows"] == [1]
        assert data["weights"][0][1] == [0.0, 0.0] and data["output"][1] == [0.0]
        assert result.stderr == (
            "attnx: warning: 1 query (1) has every key blocked: weights and head outputs are zero there\n"
        )

    @pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
    def test_every_config_runs_on_both_engines(self, name: str) -> None:
        """Every shipped config runs, and the torch engine agrees with the NumPy engine."""
        pytest.importorskip("torch")
        a = run_json(str(CONFIGS / name))
        b = run_json(str(CONFIGS / name), "--engine", "torch")
        key = "projected" if "projected" in a else "output"
        np.testing.assert_allclose(b[key], a[key], rtol=1e-12, atol=1e-12)
