"""`attnx model` on a GGUF file: the architecture, the quantization (tensors, values and bytes per ggml type, bits per
weight, file size), the tokenizer and what attnx does not read, in the table and in the JSON's ``gguf`` object; the
same from a folder holding the file, from split files and from ``ollama:NAME:TAG``; ``gguf`` null for safetensors.

The tiny Llama is written here with the gguf package's own writer and quantizer (no torch, as for the tiny GPT-2
checkpoint folder: the tests stay fast), its metadata and tokenizer as llama.cpp's converter writes them
(``tests/models/ggufs.py``); each tensor's type is chosen here, so the counts, bytes and bits per weight the tests
expect come from what was written, not from attnx.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from attnx.limits import size_text
from tests.cli.test_model import invoke
from tests.models.checkpoints import gpt2_tokenizer
from tests.models.ggufs import ORIGINALS, rope_factors, tokenizer_metadata, write_metadata

gguf = pytest.importorskip("gguf")

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FF, LAYERS = 32, 4, 2, 16, 64, 2
LLAMA3 = ORIGINALS["llama3"]  # Llama 3's rope scaling: llama.cpp stores it as the tensor rope_freqs.weight
PLAIN_ROPE = {"rope_type": "default", "rope_theta": 10000.0}
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"


@dataclasses.dataclass(frozen=True)
class Written:
    """A GGUF file written here: its path, and each tensor's ggml type and element count."""

    path: Path
    types: dict[str, str]
    elements: dict[str, int]

    def expected_types(self) -> list[dict[str, Any]]:
        """Tensors, values and bytes per type, most values first (bytes from each type's block size)."""
        tensors, values, size = Counter[str](), Counter[str](), Counter[str]()
        for name, kind in self.types.items():
            block, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[kind]]
            tensors[kind] += 1
            values[kind] += self.elements[name]
            size[kind] += self.elements[name] // block * block_bytes
        return [{"type": kind, "tensors": tensors[kind], "elements": values[kind], "size_bytes": size[kind]}
                for kind, _ in values.most_common()]  # fmt: skip

    def bits_per_weight(self) -> float:
        """8 × the bytes of every tensor ÷ their values."""
        types = self.expected_types()
        return 8 * sum(t["size_bytes"] for t in types) / sum(t["elements"] for t in types)


def tensors(vocab: int, llama3: bool) -> dict[str, tuple[np.ndarray, str]]:
    """A 2-layer Llama's tensors under GGUF names with the type each is stored as: 2-D weights Q4_1 (W_v F16), the
    embeddings and output layer Q8_0, norms F32, and Llama 3's rope_freqs (F32) where ``llama3``."""
    rng = np.random.default_rng(0)

    def random(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.2, shape).astype(np.float32)

    made = {"token_embd.weight": (random(vocab, HIDDEN), "Q8_0"), "output.weight": (random(vocab, HIDDEN), "Q8_0"),
            "output_norm.weight": (1 + random(HIDDEN), "F32")}  # fmt: skip
    for n in range(LAYERS):
        made |= {
            f"blk.{n}.attn_norm.weight": (1 + random(HIDDEN), "F32"),
            f"blk.{n}.attn_q.weight": (random(HEADS * HEAD_DIM, HIDDEN), "Q4_1"),
            f"blk.{n}.attn_k.weight": (random(KV_HEADS * HEAD_DIM, HIDDEN), "Q4_1"),
            f"blk.{n}.attn_v.weight": (random(KV_HEADS * HEAD_DIM, HIDDEN), "F16"),
            f"blk.{n}.attn_output.weight": (random(HIDDEN, HEADS * HEAD_DIM), "Q4_1"),
            f"blk.{n}.ffn_norm.weight": (1 + random(HIDDEN), "F32"),
            f"blk.{n}.ffn_gate.weight": (random(FF, HIDDEN), "Q4_1"),
            f"blk.{n}.ffn_up.weight": (random(FF, HIDDEN), "Q4_1"),
            f"blk.{n}.ffn_down.weight": (random(HIDDEN, FF), "Q4_1"),
        }
    if llama3:
        made |= {name: (values, "F32") for name, values in rope_factors(config(llama3))}
    return made


def config(llama3: bool) -> SimpleNamespace:
    """The transformers config the metadata is written from (as ``write_metadata`` reads one)."""
    rope = LLAMA3.config["rope_parameters"] if llama3 else PLAIN_ROPE
    return SimpleNamespace(
        num_hidden_layers=LAYERS, max_position_embeddings=LLAMA3.config["max_position_embeddings"],
        hidden_size=HIDDEN, intermediate_size=FF, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, rms_norm_eps=1e-5, rope_parameters=rope,
    )  # fmt: skip


def write_llama(path: Path, *, llama3: bool = True, chat: bool = True, split: int = 0) -> Written:
    """A tiny Llama GGUF at ``path`` (``split``: at most that many tensors per file), as llama.cpp writes one."""
    writer = gguf.GGUFWriter(path, "llama", split_max_tensors=split)
    writer.add_name("tiny llama [q4]")  # brackets: a name is not Rich markup
    write_metadata(writer, SimpleNamespace(config=config(llama3)), LLAMA3)
    vocab = tokenizer_metadata(writer, "metaspace", "default")
    writer.add_vocab_size(vocab)
    if chat:
        writer.add_chat_template(TEMPLATE)
    made = tensors(vocab, llama3)
    for name, (values, kind) in made.items():
        ggml = gguf.GGMLQuantizationType[kind]
        data = gguf.quants.quantize(values, ggml)
        writer.add_tensor(name, data, raw_dtype=ggml if data.dtype == np.uint8 else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Written(path, {name: kind for name, (_, kind) in made.items()}, {n: v.size for n, (v, _) in made.items()})


def write_gpt2(folder: Path) -> Path:
    """A one-layer GPT-2 checkpoint folder (config.json, model.safetensors, tokenizer.json), written without torch."""
    from safetensors.numpy import save_file

    tokenizer, rng, d = gpt2_tokenizer(), np.random.default_rng(0), HIDDEN
    vocab = tokenizer.get_vocab_size()

    def random(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.2, shape).astype(np.float32)

    made = {"wte.weight": random(vocab, d), "wpe.weight": random(16, d), "ln_f.weight": 1 + random(d),
            "ln_f.bias": random(d), "h.0.ln_1.weight": 1 + random(d), "h.0.ln_1.bias": random(d),
            "h.0.ln_2.weight": 1 + random(d), "h.0.ln_2.bias": random(d)}  # fmt: skip
    for name, (rows, columns) in {"attn.c_attn": (d, 3 * d), "attn.c_proj": (d, d), "mlp.c_fc": (d, 4 * d),
                                  "mlp.c_proj": (4 * d, d)}.items():  # fmt: skip
        made[f"h.0.{name}.weight"], made[f"h.0.{name}.bias"] = random(rows, columns), random(columns)
    save_file(made, folder / "model.safetensors", metadata={"format": "pt"})
    settings = {"model_type": "gpt2", "n_embd": d, "n_layer": 1, "n_head": 4, "n_positions": 16, "vocab_size": vocab}
    (folder / "config.json").write_text(json.dumps(settings))
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """The tiny Llama: Q4_1, Q8_0, F16 and F32 tensors, Llama 3's rope_freqs and a chat template."""
    return write_llama(tmp_path_factory.mktemp("gguf-model") / "tiny.Q4_1.gguf")


def rows(out: str) -> dict[str, str]:
    """The table's rows by name (a value wrapped over lines joined again; padding stripped)."""
    lines = out.splitlines()[1:]
    column = len(lines[0]) - len(lines[0].removeprefix("family").lstrip())  # where the values start
    found: dict[str, str] = {}
    name = ""
    for line in lines:
        if line[:column].strip():
            name = line[:column].strip()
            found[name] = line[column:].strip()
        else:
            found[name] += " " + line[column:].strip()
    return found


class TestTable:
    def test_gguf_facts(self, tiny: Written) -> None:
        """The architecture from the metadata, the file and its quantization per type, the tokenizer and what attnx
        does not read, instead of the safetensors facts."""
        out = invoke("model", tiny.path).stdout
        facts, size = rows(out), tiny.path.stat().st_size
        assert out.splitlines()[0] == str(tiny.path) and "safetensors" not in out
        assert facts["model_type"] == "llama (general.architecture llama)" and facts["name"] == "tiny llama [q4]"
        assert facts["layers"] == "2" and facts["heads"] == "4 × d_k 16, 2 K/V heads (grouped-query: groups of 2)"
        assert facts["positions"].startswith("RoPE θ 500000") and "llama3 ×8" in facts["positions"]
        assert facts["max length"] == "131072 tokens (special tokens included)"
        assert facts["weights"] == f"tiny.Q4_1.gguf (GGUF v3), {size_text(size, decimal=True)}"
        assert facts["quantization"] == f"{tiny.bits_per_weight():.2f} bits per weight over {len(tiny.types)} tensors"
        for kind in tiny.expected_types():
            plural = "s" if kind["tensors"] > 1 else ""
            assert facts[kind["type"]] == (f"{kind['tensors']} tensor{plural} · {kind['elements']:,} values · "
                                           f"{size_text(kind['size_bytes'], decimal=True)}")  # fmt: skip
        assert {kind["type"] for kind in tiny.expected_types()} == {"Q4_1", "Q8_0", "F16", "F32"}
        assert facts["tokenizer"].endswith("tokens (GGUF llama, pre-tokenizer default)")
        assert facts["not read"] == "the chat template: attnx tokenizes a text as given"
        assert facts["not a weight"] == "rope_freqs.weight: read as the rope scaling (Llama 3's factors)"

    def test_nothing_left_unread(self, tmp_path: Path) -> None:
        """Without a chat template or settings stored as tensors there is no 'not read' row."""
        plain = write_llama(tmp_path / "plain.gguf", llama3=False, chat=False)
        facts = rows(invoke("model", plain.path).stdout)
        assert "not read" not in facts and "not a weight" not in facts
        assert facts["positions"] == "RoPE θ 10000 (half pairs)"
        assert facts["quantization"].startswith(f"{plain.bits_per_weight():.2f} bits per weight over 21 tensors")

    def test_80_columns(self, tiny: Written) -> None:
        """At 80 columns every line fits and each of the quantization's and of what is not read is one line."""
        out = invoke("model", tiny.path, env={"COLUMNS": "80"}).stdout
        lines = out.splitlines()
        assert all(len(line.rstrip()) <= 80 for line in lines)
        start = next(n for n, line in enumerate(lines) if line.startswith("weights"))
        names = [line.split("  ")[0] or "" for line in lines[start:]]
        assert names == ["weights", "quantization", "", "", "", "", "tokenizer", "not read", "not a weight"]


class TestJson:
    def test_gguf_object(self, tiny: Written) -> None:
        """--format json: the ``gguf`` object holds the files, bytes, each type's tensors, values and bytes, the
        bits per weight, the tokenizer and what attnx reads as something other than a weight."""
        data = json.loads(invoke("model", tiny.path, "-f", "json").stdout)
        size, elements = tiny.path.stat().st_size, sum(tiny.elements.values())
        assert data["format_version"] == "1.9" and data["path"] == str(tiny.path)
        assert data["size_bytes"] == size and data["weight_files"] == 1
        assert data["dtypes"] == ["F16", "F32", "Q4_1", "Q8_0"]
        assert data["parameters"] == elements - tiny.elements["rope_freqs.weight"]  # a setting, not a weight
        assert data["gguf"] == {
            "files": [str(tiny.path)], "version": 3, "architecture": "llama", "name": "tiny llama [q4]",
            "size_bytes": size, "tensors": 22, "elements": elements, "types": tiny.expected_types(),
            "bits_per_weight": pytest.approx(tiny.bits_per_weight(), rel=1e-12),
            "tokenizer": {"model": "llama", "pre": "default"}, "chat_template": True,
            "unread": [{"tensor": "rope_freqs.weight", "read_as": "the rope scaling (Llama 3's factors)"}],
        }  # fmt: skip
        counts = {t["type"]: t["tensors"] for t in data["gguf"]["types"]}
        assert counts == {"Q4_1": 12, "Q8_0": 2, "F16": 2, "F32": 6}

    def test_safetensors_has_none(self, tmp_path: Path) -> None:
        """A safetensors checkpoint's ``gguf`` is null, and its table keeps the safetensors facts."""
        folder = write_gpt2(tmp_path)
        assert json.loads(invoke("model", folder, "-f", "json").stdout)["gguf"] is None
        out = invoke("model", folder).stdout
        assert "model.safetensors" in rows(out)["weights"] and "quantization" not in out


class TestWhereTheFileIs:
    def test_folder(self, tiny: Written, tmp_path: Path) -> None:
        """A folder holding the file describes the file."""
        shutil.copy(tiny.path, tmp_path / tiny.path.name)
        data = json.loads(invoke("model", tmp_path, "-f", "json").stdout)
        assert data["path"] == data["gguf"]["files"][0] == str(tmp_path / tiny.path.name)
        assert data["gguf"]["types"] == tiny.expected_types()

    def test_split_files(self, tmp_path: Path) -> None:
        """A model split into three files: all three listed, their bytes summed, the types over every part."""
        split = write_llama(tmp_path / "tiny.gguf", split=9)
        parts = sorted(tmp_path.glob("tiny-*.gguf"))
        assert len(parts) == 3
        data = json.loads(invoke("model", parts[0], "-f", "json").stdout)["gguf"]
        assert data["files"] == [str(part) for part in parts] and data["types"] == split.expected_types()
        assert data["size_bytes"] == sum(part.stat().st_size for part in parts) and data["tensors"] == 22
        weights = rows(invoke("model", parts[0]).stdout)["weights"]
        assert weights == f"{parts[0].name} and 2 more (GGUF v3), {size_text(data['size_bytes'], decimal=True)}"

    def test_ollama(self, tiny: Written, tmp_path: Path) -> None:
        """ollama:NAME:TAG: the blob its manifest names, described as the file itself."""
        blob = tiny.path.read_bytes()
        digest = hashlib.sha256(blob).hexdigest()
        (tmp_path / "blobs").mkdir()
        (tmp_path / "blobs" / f"sha256-{digest}").write_bytes(blob)
        manifest = tmp_path / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "q4"
        manifest.parent.mkdir(parents=True)
        layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(blob)}
        manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
        env = {"OLLAMA_MODELS": str(tmp_path)}
        data = json.loads(invoke("model", "ollama:tiny:q4", "-f", "json", env=env).stdout)
        blob_path = tmp_path / "blobs" / f"sha256-{digest}"
        assert data["path"] == "ollama:tiny:q4" and data["gguf"]["files"] == [str(blob_path)]
        assert data["gguf"]["types"] == tiny.expected_types() and data["gguf"]["size_bytes"] == len(blob)
        out = invoke("model", "ollama:tiny:q4", env=env).stdout
        assert out.splitlines()[0] == "ollama:tiny:q4" and rows(out)["weights"].startswith(f"sha256-{digest}")
