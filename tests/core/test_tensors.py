"""The tensor registry: one list of names and axes, and everything that names a tensor agrees with it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.tensors import COMPUTED, EXPORTED, MATRICES, SECTIONS, TENSORS, markdown_table, section_tensor
from attnx.engines import compute
from attnx.render.tables import Section
from tests.specs import loaded

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "output-formats.md"


class TestRegistry:
    def test_result_fields_are_the_registry(self) -> None:
        """Every array field of AttentionResult is a registered tensor, and every tensor is a field."""
        arrays = {f.name for f in dataclasses.fields(AttentionResult) if "ndarray" in str(f.type)}
        assert arrays == set(TENSORS)

    def test_matrices_are_the_n_by_m_tensors(self) -> None:
        """The arrays the engines build only on request are those with a query and a key axis."""
        assert {"scores", "scaled", "weights", "average_weights"} == MATRICES
        assert all({"query", "key"} <= set(TENSORS[name].axes) for name in MATRICES)

    def test_exported_order_keeps_format_1_0_first(self) -> None:
        """Machine formats list the tensors of format 1.0 first, the slices added in 1.1 after."""
        assert EXPORTED[-3:] == ("q", "k", "v")
        assert "intact_output" not in EXPORTED and "mask" in EXPORTED and "mask" not in COMPUTED

    def test_sections_name_their_tensors(self) -> None:
        """Each `--show` section prints one tensor, ablation aside, and the table renderer has one per section."""
        assert section_tensor("heads") == "head_outputs" and section_tensor("average") == "average_weights"
        assert section_tensor("ablation") is None
        assert tuple(s.value for s in Section) == SECTIONS

    def test_csv_axes_call_widths_dim(self) -> None:
        """CSV columns name d_k, d_model and d_out alike as dim."""
        assert TENSORS["output"].column_axes == ("query", "dim")
        assert TENSORS["k"].column_axes == ("kv_head", "key", "dim")

    def test_ranks_match_what_an_engine_returns(self) -> None:
        """Every array a result with a mask, W_o and a dropped head holds has the rank its registry entry says."""
        result = compute(loaded(str(ROOT / "configs" / "projections-with-wo.yaml"), causal=True, drop_heads=(0,)))
        held = [name for name in TENSORS if getattr(result, name) is not None]
        assert set(held) == set(TENSORS)
        for name, tensor in TENSORS.items():
            array = getattr(result, name)
            if array is not None:
                assert np.ndim(array) == tensor.rank, name


class TestDocs:
    def test_output_formats_table_is_generated(self) -> None:
        """docs/output-formats.md holds exactly the registry's table between its markers."""
        text = DOC.read_text(encoding="utf-8")
        inside = text.split("<!-- tensors: begin -->\n", 1)[1].split("<!-- tensors: end -->", 1)[0]
        assert inside == markdown_table()
