"""A model under the caps: its files, the arrays of its forward pass, its tensors and weights."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import LimitError
from attnx.limits import Limits, size_text
from attnx.models import describe, open_model
from attnx.workflows import layer_results, load_model_spec
from tests.models.checkpoints import TEXT, Reference

# TEXT is 12 tokens for the tiny BERT ([CLS], ten words, [SEP]); both tiny models have 4 heads, d_model 32.
N = 12


def copy_of(reference: Reference, tmp_path: Path) -> Path:
    return Path(shutil.copytree(reference.path, tmp_path / reference.path.name))


class TestFiles:
    def test_config_over_max_bytes(self, bert: Reference) -> None:
        """config.json larger than max_bytes is refused before it is parsed, naming the cap and its flag."""
        size = (bert.path / "config.json").stat().st_size
        with pytest.raises(LimitError) as caught:
            describe(bert.path, Limits(max_bytes=size - 1))
        assert str(caught.value) == (
            f"{bert.path / 'config.json'}: {size} bytes exceeds the input size cap of {size - 1} bytes; "
            "raise it with --max-bytes or ATTNX_MAX_BYTES"
        )

    def test_tokenizer_over_max_bytes(self, gpt2: Reference) -> None:
        """tokenizer.json larger than max_bytes is never handed to the native parser."""
        size = (gpt2.path / "tokenizer.json").stat().st_size
        assert size > (gpt2.path / "config.json").stat().st_size
        with pytest.raises(LimitError) as caught:
            describe(gpt2.path, Limits(max_bytes=size - 1))
        assert str(caught.value).startswith(
            f"{gpt2.path / 'tokenizer.json'}: {size_text(size)} exceeds the input size cap of {size_text(size - 1)};"
        )

    def test_config_deeper_than_max_depth(self, bert: Reference, tmp_path: Path) -> None:
        """config.json nested deeper than max_depth is refused at the bracket that goes too deep."""
        path = copy_of(bert, tmp_path)
        config = json.loads((path / "config.json").read_text())
        config["extra"] = [[[[1]]]]  # levels 2 to 5
        (path / "config.json").write_text(json.dumps(config))
        describe(path, Limits(max_depth=5))
        with pytest.raises(LimitError, match=r"config\.json:1:\d+: level 5 of nesting exceeds the depth cap of 4"):
            describe(path, Limits(max_depth=4))

    def test_config_integer_too_long(self, bert: Reference, tmp_path: Path) -> None:
        """An integer of 5000 digits in config.json is one clear error, not a crash."""
        path = copy_of(bert, tmp_path)
        text = (
            (path / "config.json").read_text().replace('"num_hidden_layers": 3', '"num_hidden_layers": ' + "9" * 5000)
        )
        (path / "config.json").write_text(text)
        from attnx.errors import ModelError

        with pytest.raises(ModelError, match=r"config\.json: not valid JSON: Exceeds the limit"):
            describe(path)


class TestArraysOfTheForwardPass:
    def test_tokens_over_max_dimension(self, bert: Reference) -> None:
        """A text of more tokens than max_dimension is refused after tokenizing, before any layer runs."""
        with pytest.raises(LimitError) as caught:
            load_model_spec(bert.path, TEXT, 0, limits=Limits(max_dimension=N - 1))
        assert str(caught.value) == (
            f"{bert.path}: a text of {N} tokens exceeds the dimension cap of {N - 1:,} per axis; "
            "raise it with --max-dimension or ATTNX_MAX_DIMENSION"
        )

    def test_scores_over_max_elements(self, bert: Reference) -> None:
        """The layer's [head, query, key] scores (4 × 12 × 12 = 576) over max_elements are refused by name."""
        load_model_spec(bert.path, TEXT, 0, limits=Limits(max_elements=1024))
        with pytest.raises(LimitError) as caught:
            load_model_spec(bert.path, TEXT, 0, limits=Limits(max_elements=575))
        assert str(caught.value) == (
            f"{bert.path}: the scores: an array of 4 × 12 × 12 (576 elements) exceeds the element cap of "
            "575 elements per array; raise it with --max-elements or ATTNX_MAX_ELEMENTS"
        )

    def test_scores_count_the_heads_asked_for(self, bert: Reference) -> None:
        """-H 8 on the layer makes its scores 8 × 12 × 12: that is what is checked, before the layer is built."""
        with pytest.raises(LimitError, match=r"the scores: an array of 8 × 12 × 12 \(1,152 elements\)"):
            load_model_spec(bert.path, TEXT, 0, heads=8, limits=Limits(max_elements=1100))

    def test_residual_stream_axis_over_max_dimension(self, bert: Reference) -> None:
        """d_model 32 is an axis of the residual stream: over max_dimension 16 it is refused."""
        with pytest.raises(LimitError, match=r"the residual stream: an axis of 32 exceeds the dimension cap of 16"):
            load_model_spec(bert.path, TEXT, 0, limits=Limits(max_dimension=16))

    def test_mlp_counts_only_past_the_first_layer(self, bert: Reference) -> None:
        """The MLP's hidden layer (12 × 64 = 768) is built only when a layer before the one asked for runs."""
        with open_model(bert.path, limits=Limits(max_elements=700)) as model:
            model.check_sizes(N, layer=0)
            with pytest.raises(LimitError, match=r"the MLP's hidden layer: an array of 12 × 64 \(768 elements\)"):
                model.check_sizes(N, layer=1)

    def test_model_view_checks_every_layer_before_the_first_runs(self, bert: Reference) -> None:
        """layer_results refuses before computing anything when a later layer's arrays would be over the caps."""
        heard: list[tuple[int, int]] = []
        with (
            open_model(bert.path, limits=Limits(max_elements=700)) as model,
            pytest.raises(LimitError, match="the MLP's hidden layer"),
        ):
            list(layer_results(model, TEXT, progress=lambda done, total: heard.append((done, total))))
        assert heard == []

    def test_the_layer_spec_is_checked_like_any_input(self, gpt2: Reference) -> None:
        """A layer's spec meets the same check as a file's: its scores refused under a cap they pass."""
        spec = load_model_spec(gpt2.path, TEXT, 1, limits=Limits())
        heads, n = spec.settings.heads, spec.n_queries
        Limits(max_elements=heads * n * n).check_problem(spec, matrices=True)
        with pytest.raises(LimitError, match="the scores"):
            Limits(max_elements=heads * n * n - 1).check_problem(spec, matrices=True)


class TestTensors:
    def test_embedding_table_counts_the_rows_read(self, gpt2: Reference) -> None:
        """The token embedding table (vocabulary × 32, over the cap whole) is read by rows: only those count."""
        vocabulary = describe(gpt2.path).vocab_size
        assert vocabulary * 32 > 5000
        spec = load_model_spec(gpt2.path, TEXT, 0, limits=Limits(max_elements=5000))
        assert spec.n_queries == len(gpt2.ids)


class TestWeights:
    """Weights are the model's sizes, not the text's: a weight read whole is counted by its bytes against the weight
    cap, a table is read by rows, and what a text controls (its rows, the logits) stays under the element cap."""

    def test_mlp_weight_over_max_elements_is_read_by_its_bytes(self, gpt2: Reference) -> None:
        """c_fc (32 × 128 = 4,096 elements) is read under an element cap of 4,000; 32 KiB as float64 is what counts."""
        load_model_spec(gpt2.path, TEXT, 1, limits=Limits(max_elements=4000))
        with pytest.raises(LimitError) as caught:
            load_model_spec(gpt2.path, TEXT, 1, limits=Limits(max_elements=4000, max_weight_bytes=4096 * 8 - 1))
        assert str(caught.value) == (
            f"{gpt2.path / 'model.safetensors'}: tensor 'transformer.h.0.mlp.c_fc.weight': a weight of 32 × 128 "
            "(4,096 elements, 32 KiB as float64) exceeds the weight cap of 32 KiB; raise it with --max-weight-bytes or ATTNX_MAX_WEIGHT_BYTES"
        )

    def test_lm_head_over_max_elements_gives_exact_logits_in_chunks(self, gpt2: Reference) -> None:
        """The tied output table (vocabulary × 32, over a cap of 4,000 whole) is read in three chunks of up to 125 rows: the
        logits equal one whole-table product, and ablate's next-token effects those under the default caps (to
        rounding: the logsumexp is gathered block by block)."""
        from safetensors.numpy import load_file

        from attnx.workflows.effects import ablations

        table = load_file(gpt2.path / "model.safetensors")["transformer.wte.weight"].astype(np.float64)
        assert table.size > 2 * 4000
        effects = []
        for limits in (Limits(max_elements=4000), Limits()):
            with open_model(gpt2.path, limits=limits) as model:
                encoded = model.encode(TEXT)
                hidden = model.run(encoded, layer=model.layers - 1).finish()
                np.testing.assert_array_equal(model.architecture.logits(hidden), hidden @ table.T)
                effects.append(ablations(model, encoded, [((0, 1),)]).effects[0])
        assert effects[0].kl is not None
        np.testing.assert_allclose(effects[0].kl, effects[1].kl, rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(effects[0].top_after, effects[1].top_after)

    @pytest.mark.parametrize(
        ("shape", "refusal"),
        [
            (
                (16384, 16384),
                "a weight of 16384 × 16384 (268,435,456 elements, 2 GiB as float64) exceeds the weight cap",
            ),
            ((2_000_000, 1), "an axis of 2,000,000 exceeds the dimension cap"),
        ],
    )
    def test_header_claiming_a_huge_weight_is_refused_unread(
        self, tmp_path: Path, shape: tuple[int, int], refusal: str
    ) -> None:
        """A header whose data is all there (a sparse file) but claims a huge weight is refused by the weight caps
        from the header; one whose data is missing is refused by safetensors when the file is opened."""
        from attnx.errors import ModelError
        from attnx.models.checkpoint import Checkpoint

        for name in ("config.json", "tokenizer.json"):
            (tmp_path / name).write_text("{}")
        size = 2 * shape[0] * shape[1]
        header = json.dumps({"w": {"dtype": "F16", "shape": list(shape), "data_offsets": [0, size]}}).encode()
        path = tmp_path / "model.safetensors"
        path.write_bytes(len(header).to_bytes(8, "little") + header)
        with Checkpoint(tmp_path) as checkpoint, pytest.raises(ModelError, match="not a readable safetensors file"):
            checkpoint.tensor("w")
        with path.open("r+b") as handle:
            handle.truncate(8 + len(header) + size)  # sparse: nothing is written
        with Checkpoint(tmp_path) as checkpoint, pytest.raises(LimitError, match=re.escape(f"tensor 'w': {refusal}")):
            checkpoint.tensor("w")

    def test_llama_3_8b_fits_the_default_caps(self) -> None:
        """Llama 3 8B's shapes (numbers, not a file): every weight read whole fits the weight cap (the largest, an
        MLP matrix, is 448 MiB as float64), the 128,256 × 4,096 tables are read in chunks of 4,096 rows within
        the element cap, and 128 tokens' logits fit it."""
        hidden, kv, mlp, vocab = 4096, 8 * 128, 14336, 128256
        limits = Limits()
        whole = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden), (mlp, hidden), (mlp, hidden)]
        for shape in [*whole, (hidden, mlp), (hidden,)]:
            assert limits.weight_problem(shape) is None
        assert size_text(mlp * hidden * 8) == "448 MiB"
        assert limits.weight_problem((vocab, hidden)) is not None  # never read whole: by rows or in chunks
        assert limits.rows_per_chunk(hidden) == 4096
        assert limits.shape_problem((limits.rows_per_chunk(hidden), hidden)) is None
        assert limits.shape_problem((128, vocab)) is None
