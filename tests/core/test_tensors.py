"""The tensor registry: one list of names and axes, and everything that names a tensor agrees with it."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import numpy as np

from attnx.core import tensors
from attnx.core.result import INPUT_ARRAYS, AttentionResult
from attnx.core.tensors import (
    COMPUTED,
    EXPORTED,
    MATRICES,
    SECTIONS,
    TENSORS,
    TensorName,
    is_tensor_name,
    markdown_table,
    section_tensor,
)
from attnx.engines import compute
from attnx.render.tables import Section
from tests.specs import loaded

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "output-formats.md"
PACKAGE = ROOT / "attnx"

# The string literals outside attnx/core/tensors.py that spell a tensor's name but mean something else, by file.
# Everything else that names a tensor uses the registry's constants (``WEIGHTS``, ``OUTPUT``, ...).
NOT_TENSORS: dict[str, set[str]] = {
    # The input's Q, K and V (and its mask: 0/1 or "causal") before projection and head split, named as the input
    # document's keys and AttentionSpec.build's arguments, not the per-head tensors (nor the combined mask).
    "attnx/io/schema.py": {"q", "k", "v", "mask"},
    "attnx/core/inputs.py": {"q", "k", "v"},
    "attnx/core/spec.py": {"q", "k", "v"},
    # assert_attention_close's arguments q, k and v, named in its messages.
    "attnx/testing.py": {"q", "k", "v"},
    # `--show` section names, a vocabulary of their own (heads, average, ablation): the registry's ``section``.
    "attnx/render/tables.py": {"q", "k", "v", "scores", "scaled", "weights", "output", "projected"},
    # A trace's JSON keys and table headers (docs/output-formats.md, "attnx trace"): one query's vectors and
    # numbers, named by the trace format; a head's ``output`` is its row of head_outputs.
    "attnx/render/trace_data.py": {"q", "k", "v", "scaled", "output", "projected"},
    "attnx/render/trace.py": {"scaled"},
    # The explorer's views (the ``scores`` view draws the scaled scores) and its keys (q quits, v changes view, k the
    # kind of attention).
    "attnx/analysis/explore.py": {"weights", "scores"},
    "attnx/render/explore.py": {"weights", "scores", "q", "v", "k"},
    "attnx/tui/app.py": {"q", "v", "k"},
    # A head's measure scores (``scores`` in the heads and model-view JSON) and a checkpoint's weight files.
    "attnx/render/heads.py": {"scores"},
    "attnx/render/model.py": {"scores", "weights"},
    # The size suffix k (1K = 1024).
    "attnx/limits.py": {"k"},
    # GGUF's own names: the output layer's tensor (``output.weight``, in the Llama line's names and GPT-2's) and a
    # SentencePiece vocabulary's scores.
    "attnx/models/gguf_form.py": {"output"},
    "attnx/models/families/gpt2.py": {"output"},
    "attnx/models/gguf_tokenizer.py": {"scores"},
}


class TestRegistry:
    def test_result_fields_are_the_registry(self) -> None:
        """Every array field of AttentionResult is a registered tensor or an input it carries, and every tensor is a
        field."""
        arrays = {f.name for f in dataclasses.fields(AttentionResult) if "ndarray" in str(f.type)}
        assert INPUT_ARRAYS == ("score_bias",)
        assert arrays - set(INPUT_ARRAYS) == set(TENSORS)

    def test_matrices_are_the_n_by_m_tensors(self) -> None:
        """The arrays the engines build only on request are those with a query and a key axis."""
        assert {"scores", "scaled", "weights", "average_weights"} == MATRICES
        assert all({"query", "key"} <= set(TENSORS[name].axes) for name in MATRICES)

    def test_exported_order_keeps_format_1_0_first(self) -> None:
        """Machine formats list the tensors of format 1.0 first, the slices added in 1.1 after, then 1.5's sinks."""
        assert EXPORTED[-4:] == ("q", "k", "v", "sink_weights")
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
        """Every array a result with a mask, W_o, a dropped head and learned sinks holds has the rank its registry
        entry says."""
        spec = loaded(str(ROOT / "configs" / "projections-with-wo.yaml"), causal=True, drop_heads=(0,))
        result = compute(spec.with_settings(sink_logits=(0.5,) * spec.settings.heads))
        held = [name for name in TENSORS if getattr(result, name) is not None]
        assert set(held) == set(TENSORS)
        for name, tensor in TENSORS.items():
            array = getattr(result, name)
            if array is not None:
                assert np.ndim(array) == tensor.rank, name


class TestNames:
    def test_literal_type_is_the_registry(self) -> None:
        """TensorName lists the registry's tensors, in its order."""
        assert typing.get_args(TensorName) == tuple(TENSORS)

    def test_constants_hold_their_names(self) -> None:
        """Each tensor has its constant, named as the tensor in capitals (``HEAD_OUTPUTS`` is ``head_outputs``)."""
        assert {name: getattr(tensors, name.upper()) for name in TENSORS} == {name: name for name in TENSORS}

    def test_is_tensor_name(self) -> None:
        """A string read from a user is a tensor name only when the registry has it."""
        assert is_tensor_name("head_outputs") and not is_tensor_name("head_output")


def string_constants(tree: ast.Module) -> list[ast.Constant]:
    """Every string constant of ``tree`` but docstrings and the pieces of f-strings (text around values)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        elif isinstance(node, ast.JoinedStr):
            skipped |= {id(value) for value in node.values}
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
    ]


class TestNoTensorNameLiterals:
    def test_only_the_registry_spells_tensor_names(self) -> None:
        """No string literal in attnx/ outside core/tensors.py is a tensor's name, but those of NOT_TENSORS."""
        found = []
        for path in sorted(PACKAGE.rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where == "attnx/core/tensors.py":
                continue
            allowed = NOT_TENSORS.get(where, set())
            for node in string_constants(ast.parse(path.read_text(encoding="utf-8"))):
                if node.value in TENSORS and node.value not in allowed:
                    found.append(f"{where}:{node.lineno}: {node.value!r}")
        assert not found, "tensor names as string literals (use attnx.core.tensors' constants):\n" + "\n".join(found)

    def test_allowlist_is_still_needed(self) -> None:
        """Every literal NOT_TENSORS allows still occurs in its file, so the list does not outlive its reasons."""
        unused = []
        for where, allowed in NOT_TENSORS.items():
            held = {node.value for node in string_constants(ast.parse((ROOT / where).read_text(encoding="utf-8")))}
            unused += [f"{where}: {name!r}" for name in sorted(allowed - held)]
        assert not unused


class TestDocs:
    def test_output_formats_table_is_generated(self) -> None:
        """docs/output-formats.md holds exactly the registry's table between its markers."""
        text = DOC.read_text(encoding="utf-8")
        inside = text.split("<!-- tensors: begin -->\n", 1)[1].split("<!-- tensors: end -->", 1)[0]
        assert inside == markdown_table()
