"""GGUF files as untrusted input: truncated, malformed, lying about their shapes, of an unknown architecture or
tensor type, or holding what attnx does not read, each refused in one line naming the file; and Ollama's store."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import LimitError, ModelError
from attnx.limits import Limits
from attnx.models import describe, open_model
from tests.models.ggufs import VARIANTS, GgufReference, built, random_model, write_gguf
from tests.runner import run_attnx

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> GgufReference:
    """The tiny Llama GGUF."""
    return built("llama", tmp_path_factory)


def copy_with(source: Path, target: Path, data: bytes | None = None) -> Path:
    """``source``'s bytes (or ``data``) written to ``target``."""
    target.write_bytes(source.read_bytes() if data is None else data)
    return target


def patched(path: Path, key: str, form: str, *values: object, tensor: bool = False) -> Path:
    """Overwrite, in place, the value after metadata key ``key`` (after its type), or with ``tensor`` the ggml type
    of tensor ``key`` (after its dimensions), with ``values`` packed as ``form``."""
    data = bytearray(path.read_bytes())
    name = key.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    if tensor:
        at += 4 + 8 * struct.unpack_from("<I", data, at)[0]
    else:
        at += 4
        if form.endswith("s"):  # a string value: skip its length
            at += 8
    struct.pack_into(form, data, at, *values)
    path.write_bytes(bytes(data))
    return path


def tokenized(path: Path, match: str) -> None:
    """Tokenizing a text with ``path``'s tokenizer is refused with one line matching ``match``."""
    with open_model(path) as model, pytest.raises(ModelError, match=match) as caught:
        model.encode("the cat")
    assert "\n" not in str(caught.value)


def refused(path: Path | str, match: str, error: type[Exception] = ModelError) -> str:
    """The one-line message opening ``path`` is refused with."""
    with pytest.raises(error, match=match) as caught:
        describe(path)
    message = str(caught.value)
    assert "\n" not in message
    return message


class TestMalformed:
    """Bytes that are not a whole GGUF file are refused when it is opened, never read past."""

    @pytest.mark.parametrize("cut", [0, 3, 20, 100, 1000, -1])
    def test_truncated(self, llama: GgufReference, tmp_path: Path, cut: int) -> None:
        """Cut anywhere (the magic, the counts, the metadata, the tensor data): one line naming the file."""
        data = llama.path.read_bytes()
        path = copy_with(llama.path, tmp_path / "cut.gguf", data[: cut if cut >= 0 else len(data) - 7])
        message = refused(path, r"(truncated|not a GGUF file)")
        assert message.startswith(str(path))

    def test_every_cut_of_the_header(self, llama: GgufReference, tmp_path: Path) -> None:
        """A cut at every 211th byte of the header is a ModelError, never another exception."""
        data = llama.path.read_bytes()
        for cut in range(0, 12_000, 211):
            path = copy_with(llama.path, tmp_path / "cut.gguf", data[:cut])
            with pytest.raises(ModelError):
                describe(path)

    def test_not_gguf(self, tmp_path: Path) -> None:
        """Another file named .gguf, or an empty one."""
        refused(copy_with(Path(__file__), tmp_path / "text.gguf"), r"text.gguf: not a GGUF file \(it does not start")
        refused(copy_with(Path(__file__), tmp_path / "empty.gguf", b""), r"empty.gguf: not a GGUF file")
        refused(tmp_path / "absent.gguf", r"absent.gguf: no such file$")

    @pytest.mark.parametrize(("version", "words"), [(1, r"version 1 is not supported"), (3 << 24, r"big-endian")])
    def test_version(self, llama: GgufReference, tmp_path: Path, version: int, words: str) -> None:
        """GGUF v1 (32-bit counts) and big-endian files are refused."""
        data = bytearray(llama.path.read_bytes())
        struct.pack_into("<I", data, 4, version)
        refused(copy_with(llama.path, tmp_path / "v.gguf", bytes(data)), words)

    def test_counts_that_lie(self, llama: GgufReference, tmp_path: Path) -> None:
        """A tensor count, or an array length, far past the file's size is refused before anything is allocated."""
        data = bytearray(llama.path.read_bytes())
        struct.pack_into("<Q", data, 8, 1 << 60)
        refused(copy_with(llama.path, tmp_path / "count.gguf", bytes(data)), "truncated")
        path = copy_with(llama.path, tmp_path / "tokens.gguf")
        patched(path, "tokenizer.ggml.tokens", "<IQ", 8, 1 << 50)  # array of strings: type, then count
        refused(path, r"truncated: metadata key 'tokenizer.ggml.tokens'")

    def test_weight_cap(self, llama: GgufReference) -> None:
        """A weight read whole is held to --max-weight-bytes from its shape, before it is dequantized."""
        words = r"tensor 'model.layers.0.self_attn.q_proj.weight': a weight of 64 × 32 .* exceeds the weight cap"
        with (
            open_model(llama.path, limits=Limits(max_weight_bytes=4096)) as model,
            pytest.raises(LimitError, match=words),
        ):
            model.run("the cat").spec()

    def test_header_over_the_cap(self, llama: GgufReference) -> None:
        """A header larger than --max-bytes is refused by the cap (the vocabulary is in the header)."""
        with pytest.raises(LimitError, match=r"a header of more than 4 KiB exceeds the input size cap"):
            open_model(llama.path, limits=Limits(max_bytes=4096))


class TestLies:
    """Files whose metadata and tensors disagree, or hold what attnx does not run."""

    def test_shape_not_the_configs(self, llama: GgufReference, tmp_path: Path) -> None:
        """Four K/V heads claimed where the tensors hold two: the tensor and what the metadata implies are named."""
        path = patched(copy_with(llama.path, tmp_path / "kv.gguf"), "llama.attention.head_count_kv", "<I", 4)
        with open_model(path) as model, pytest.raises(ModelError) as caught:
            model.run("the cat").spec()
        assert str(caught.value) == (f"{path}: tensor 'model.layers.0.self_attn.k_proj.weight' has shape (32, 32), "
                                     "where its metadata implies (64, 32)")  # fmt: skip

    def test_unknown_architecture(self, llama: GgufReference, tmp_path: Path) -> None:
        """general.architecture names one attnx does not read: the ones it does are listed."""
        path = patched(copy_with(llama.path, tmp_path / "arch.gguf"), "general.architecture", "<5s", b"mamba")
        refused(path, r"general.architecture 'mamba' is not supported; attnx reads GGUF files of llama, qwen2, ")

    def test_unsupported_tensor_type(self, llama: GgufReference, tmp_path: Path) -> None:
        """A tensor stored as a type the gguf package cannot dequantize (I32) is refused, naming both."""
        path = patched(copy_with(llama.path, tmp_path / "i32.gguf"), "blk.0.attn_norm.weight", "<I", 26, tensor=True)
        refused(path, r"tensor 'blk.0.attn_norm.weight' is stored as I32, which the gguf package cannot dequantize")
        path = patched(path, "blk.0.attn_norm.weight", "<I", 99, tensor=True)
        refused(path, r"tensor 'blk.0.attn_norm.weight' is stored as ggml type 99, which the gguf package does not")

    @pytest.mark.parametrize(
        ("key", "value", "kind", "words"),
        [
            ("attention.clamp_kqv", 8.0, "FLOAT32", r"llama.attention.clamp_kqv is a setting attnx does not read"),
            ("attention.causal", False, "BOOL", r"llama.attention.causal is False; attnx runs causal decoders"),
            ("rope.scaling.type", "longrope", "STRING", r"rope.scaling.type 'longrope' is not supported"),
            ("attention.head_count", "4", "STRING", r"llama.attention.head_count must be a whole number, got '4'"),
        ],
    )
    def test_settings_it_does_not_run(self, tmp_path: Path, key: str, value: object, kind: str, words: str) -> None:
        """A llama.* setting attnx does not read (it could change the model), or one of the wrong type, is refused by
        name; so is one it reads but cannot run."""
        import gguf

        variant = dataclasses.replace(VARIANTS["llama"], keys={key: (value, gguf.GGUFValueType[kind])})
        path = write_gguf(tmp_path / "key.gguf", random_model(variant), variant)
        refused(path, words)

    def test_unread_tensor(self, tmp_path: Path) -> None:
        """A tensor no rule maps reaches the family's check of unread tensors under its GGUF name."""
        variant = VARIANTS["llama"]
        extra = {"blk.1.attn_extra.weight": np.ones((32, 32), dtype=np.float32)}
        path = write_gguf(tmp_path / "extra.gguf", random_model(variant), variant, extra=extra)
        message = refused(path, r"extra.gguf: tensor 'blk.1.attn_extra.weight' is not used by llama \(Llama\)")
        assert message.endswith("attnx would run the model without it, so its metadata and the weights disagree")
        assert "config.json" not in message  # a GGUF file has none

    def test_tokenizer_that_cannot_be_built(self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        """A merge naming a token the vocabulary lacks (Ġ respelled ǅ, outside the byte alphabet) is one line when a
        text is tokenized; describing the file builds no tokenizer, so it is described."""
        data = built("qwen3", tmp_path_factory).path.read_bytes()
        start = data.index(b"tokenizer.ggml.merges")
        at = data.index("Ġ".encode(), start)
        path = copy_with(Path(), tmp_path / "merge.gguf", data[:at] + "ǅ".encode() + data[at + 2 :])
        assert describe(path).tokenizer == "BPE"
        tokenized(path, r"merge.gguf: the tokenizer its metadata describes cannot be built: ")

    def test_token_not_utf8(self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        """A token whose bytes are not UTF-8 is one line naming the key and the byte, when a text is tokenized."""
        source = built("qwen3", tmp_path_factory).path
        data = source.read_bytes()
        at = data.index("Ġ".encode(), data.index(b"tokenizer.ggml.tokens"))
        path = copy_with(Path(), tmp_path / "bytes.gguf", data[:at] + b"\xff" + data[at + 1 :])
        assert describe(path).tokenizer_vocab_size == describe(source).tokenizer_vocab_size  # described all the same
        tokenized(path, rf"bytes.gguf: metadata key 'tokenizer.ggml.tokens' at byte {at:,} is not UTF-8")

    def test_cli_exit_code(self, llama: GgufReference, tmp_path: Path) -> None:
        """attnx model describes a GGUF file; a truncated one exits 2 with one line."""
        assert run_attnx("model", str(llama.path)).code == 0
        path = copy_with(llama.path, tmp_path / "cut.gguf", llama.path.read_bytes()[:500])
        outcome = run_attnx("model", str(path))
        assert outcome.code == 2 and "truncated" in outcome.stderr


class TestOllama:
    """ollama:NAME[:TAG] resolves Ollama's manifest to its model blob, offline, or says where it looked."""

    def store(self, root: Path, source: Path, name: str = "tiny", tag: str = "q8") -> Path:
        """An Ollama models folder holding ``source`` as library/NAME:TAG."""
        digest = "0123456789abcdef" * 4
        (root / "blobs").mkdir(parents=True)
        copy_with(source, root / "blobs" / f"sha256-{digest}")
        manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
        manifest.parent.mkdir(parents=True)
        layers = [{"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "f" * 64},
                  {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}]  # fmt: skip
        manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
        return manifest

    def test_resolved(self, llama: GgufReference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The manifest's model layer is read as the GGUF file; a missing tag says which file it looked for."""
        manifest = self.store(tmp_path / "models", llama.path)
        monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "models"))
        assert describe("ollama:tiny:q8").layers == 2
        missing = manifest.parent / "latest"
        refused("ollama:tiny", rf"ollama:tiny: no Ollama model: {missing} does not exist \(models folder")

    def test_bad_manifest(self, llama: GgufReference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A manifest without one model layer, or naming a path, is refused; so is a name that climbs folders."""
        manifest = self.store(tmp_path / "models", llama.path)
        monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "models"))
        manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                    "digest": "sha256:../../x"}]}))  # fmt: skip
        refused("ollama:tiny:q8", r"is not a sha256 digest")
        refused("ollama:../tiny", r"not an Ollama model name")
