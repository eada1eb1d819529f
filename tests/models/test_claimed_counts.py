"""Counts a config.json or a GGUF header claims are checked against the file before anything is built per item.

A hostile or corrupt config that claims far more layers, heads, experts, layer types or vocabulary than its weights
hold is refused in one line, exit 2, naming the key or the tensor that disagrees, with little work: the peak of
Python's allocations while it is refused stays small (it grew with each claimed layer or expert before).
"""

from __future__ import annotations

import dataclasses
import shutil
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from attnx.errors import ModelError
from attnx.models import describe
from tests.models.checkpoints import TEXT
from tests.models.tasks import save_task
from tests.models.test_checkpoint import edit_config
from tests.runner import run_attnx

PEAK = 16 * 1024**2  # bytes Python may allocate while a claim is refused (10^5 layers took far more)
LAYERS = 100_000

_SAVED: dict[str, Path] = {}


def saved(name: str, model_type: str, factory: pytest.TempPathFactory) -> Path:
    """``name`` (a causal or masked LM of ``model_type``) saved once per session."""
    if name not in _SAVED:
        _SAVED[name] = save_task(factory.mktemp(name), model_type, name)
    return _SAVED[name]


@contextmanager
def bounded() -> Iterator[None]:
    """Fail when Python's allocations peak above ``PEAK`` within."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK, f"peak of {peak:,} bytes"


def refused(path: Path, match: str) -> str:
    """The one-line ModelError opening ``path`` raises (matching ``match``), within ``PEAK``."""
    with bounded(), pytest.raises(ModelError, match=match) as caught:
        describe(path)
    assert "\n" not in str(caught.value)
    return str(caught.value)


SAFETENSORS = [
    ("LlamaForCausalLM", "llama", {"num_hidden_layers": LAYERS},
     r"config.json: num_hidden_layers claims 100,000 layers, but .*model.safetensors holds 3 \(model\.layers\.N\.…\)"),
    ("Gemma3ForCausalLM", "gemma3_text", {"num_hidden_layers": LAYERS, "layer_types": None},
     r"num_hidden_layers claims 100,000 layers, but .* holds 3"),
    ("BertForMaskedLM", "bert", {"num_hidden_layers": LAYERS},
     r"num_hidden_layers claims 100,000 layers, but .* holds 2 \(bert\.encoder\.layer\.N\.…\)"),
    ("GPT2LMHeadModel", "gpt2", {"n_layer": LAYERS}, r"config.json: n_layer claims 100,000 layers, but .* holds 2"),
    ("GPTNeoXForCausalLM", "gpt_neox", {"num_hidden_layers": LAYERS}, r"holds 3 \(gpt_neox\.layers\.N\.…\)"),
    ("LlamaForCausalLM", "llama", {"num_attention_heads": 10**6},
     r"tensor 'model.layers.0.self_attn.q_proj.weight' has shape \(64, 32\), where config.json implies "
     r"\(16000000, 32\)"),
    ("LlamaForCausalLM", "llama", {"num_key_value_heads": 10**6}, "4 attention heads cannot be shared among 1000000"),
    ("Phi3ForCausalLM", "phi3", {"num_attention_heads": 10**6, "head_dim": 8},
     r"'model.layers.0.self_attn.qkv_proj.weight' has shape \(64, 32\), where config.json implies \(8000032, 32\)"),
    ("BertForMaskedLM", "bert", {"num_attention_heads": 10**6}, "claims 1,000,000 heads, more than the 32 columns"),
    ("GPTNeoXForCausalLM", "gpt_neox", {"num_attention_heads": 10**6},
     r"config.json: num_attention_heads claims 1,000,000 heads, more than the 32 columns of the hidden state"),
    ("MixtralForCausalLM", "mixtral", {"num_local_experts": LAYERS},
     r"'model.layers.0.block_sparse_moe.gate.weight' has shape \(4, 32\), where config.json implies \(100000, 32\)"),
    ("Qwen2MoeForCausalLM", "qwen2_moe", {"num_experts": LAYERS}, r"'model.layers.0.mlp.gate.weight' has shape \(4, "),
    ("Qwen3MoeForCausalLM", "qwen3_moe", {"num_experts": LAYERS}, r"'model.layers.1.mlp.gate.weight' has shape \(4, "),
    ("GptOssForCausalLM", "gpt_oss", {"num_local_experts": LAYERS},
     r"'model.layers.0.mlp.router.weight' has shape \(4, 32\), where config.json implies \(100000, 32\)"),
    ("LlamaForCausalLM", "llama", {"vocab_size": 10**9},
     r"'model.embed_tokens.weight' has shape \(\d+, 32\), where config.json implies \(1000000000, 32\)"),
    ("BertForMaskedLM", "bert", {"vocab_size": 10**9}, r"'bert.embeddings.word_embeddings.weight' has shape \(19, "),
    ("GPT2LMHeadModel", "gpt2", {"vocab_size": 10**9}, r"'transformer.wte.weight' has shape \(\d+, 32\), where"),
    ("LlamaForCausalLM", "llama", {"hidden_size": 10**9}, r"'model.embed_tokens.weight' has shape \(\d+, 32\)"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "model_type", "changes", "message"), SAFETENSORS)
def test_safetensors(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, name: str, model_type: str, changes: dict, message: str
) -> None:
    """Each count config.json claims beyond its weights: one line naming the key or the tensor, little work."""
    path = Path(shutil.copytree(saved(name, model_type, tmp_path_factory), tmp_path / name))
    edit_config(path, **changes)
    refused(path, message)


def test_a_million_layer_types(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """A layer_types list of a million entries for 3 layers is refused by its length; the depth check before parsing
    does not walk its million strings (too few brackets to nest deeper than the cap)."""
    path = Path(shutil.copytree(saved("LlamaForCausalLM", "llama", tmp_path_factory), tmp_path / "llama"))
    edit_config(path, layer_types=["full_attention"] * 10**6)
    with pytest.raises(ModelError, match=r"config.json: layer_types must list one type per layer \(3\)"):
        describe(path)


def test_depth_check_counts_brackets_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """``too_deep`` answers from the bracket count alone when there are too few brackets to be too deep."""
    from attnx.io import jsontext

    class Unscanned:
        def finditer(self, text: str) -> object:
            raise AssertionError("scanned token by token")

    text = '{"layer_types": [' + ", ".join(['"full_attention"'] * 1000) + "]}"
    monkeypatch.setattr(jsontext, "_TOKEN", Unscanned())
    assert jsontext.too_deep(text, 32) is None


@pytest.mark.parametrize("command", [["model"], ["run", "--text", TEXT, "--model"],
                                     ["heads", "--layer", "all", "--text", TEXT, "--model"]])  # fmt: skip
def test_commands(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, command: list[str]) -> None:
    """`attnx model`, `run` and `heads --layer all` on a config claiming 100,000 layers: exit 2, one line."""
    path = Path(shutil.copytree(saved("LlamaForCausalLM", "llama", tmp_path_factory), tmp_path / "llama"))
    edit_config(path, num_hidden_layers=LAYERS)
    with bounded():
        out = run_attnx(*command, str(path))
    assert out.code == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert "num_hidden_layers claims 100,000 layers, but" in out.stderr


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny GGUF files of four architectures (2 blocks each), written as llama.cpp's converter writes them."""
    pytest.importorskip("gguf")
    from tests.models.ggufs import VARIANTS, random_model, write_gguf

    folder = tmp_path_factory.mktemp("gguf-counts")
    files = {name: write_gguf(folder / f"{name}.gguf", random_model(VARIANTS[name]), VARIANTS[name])
             for name in ("llama", "qwen2moe", "gemma3", "gpt2")}  # fmt: skip
    gguf = pytest.importorskip("gguf")
    many = dataclasses.replace(VARIANTS["gemma3"], keys={"attention.sliding_window_pattern": (
        [True] * 10**5, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)})  # fmt: skip
    files["gemma3-types"] = write_gguf(folder / "gemma3-types.gguf", random_model(many), many)
    return files


GGUF = [
    ("llama", "llama.block_count", LAYERS,
     r"llama.gguf: llama.block_count claims 100,000 layers, but the file holds 2 \(blk\.N\.…\)"),
    ("qwen2moe", "qwen2moe.block_count", LAYERS, "qwen2moe.block_count claims 100,000 layers, but the file holds 2"),
    ("gemma3", "gemma3.block_count", LAYERS, "gemma3.block_count claims 100,000 layers, but the file holds 2"),
    ("gpt2", "gpt2.block_count", LAYERS, "gpt2.block_count claims 100,000 layers, but the file holds 2"),
    ("llama", "llama.attention.head_count", 10**6,
     r"tensor 'model.layers.0.self_attn.q_proj.weight' has shape \(64, 32\), where its metadata implies "
     r"\(16000000, 32\)"),
    ("gpt2", "gpt2.attention.head_count", 10**6, "gpt2.attention.head_count .*claims 1,000,000 heads, more than the 32"),
    ("qwen2moe", "qwen2moe.expert_count", LAYERS,
     r"'model.layers.0.mlp.gate.weight' has shape \(4, 32\), where its metadata implies \(100000, 32\)"),
    ("llama", "llama.vocab_size", 10**9,
     r"'model.embed_tokens.weight' has shape \(\d+, 32\), where its metadata implies \(1000000000, 32\)"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "key", "value", "message"), GGUF)
def test_gguf(ggufs: dict[str, Path], tmp_path: Path, name: str, key: str, value: int, message: str) -> None:
    """Each count a GGUF header claims beyond its tensors: one line, little work."""
    from tests.models.test_gguf_hostile import patched

    path = patched(Path(shutil.copy(ggufs[name], tmp_path / f"{name}.gguf")), key, "<I", value)
    refused(path, message)


def test_gguf_layer_types(ggufs: dict[str, Path]) -> None:
    """Gemma 3's sliding-window pattern listing 100,000 layers of 2: refused by its length."""
    refused(ggufs["gemma3-types"], r"gemma3.attention.sliding_window_pattern must hold true or false for each of "
                                   r"the 2 layers")  # fmt: skip
