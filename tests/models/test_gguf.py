"""GGUF files against transformers reading the same files: every layer's weights and hidden state, and the tokens;
each change llama.cpp's converter makes undone (and shown to matter); split files, folders, and the summary."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.limits import Limits
from attnx.models import describe, open_model
from attnx.models.gguf_file import GgufModel, readable_types
from tests.models.checkpoints import TEXT
from tests.models.ggufs import (
    ORIGINALS,
    TEXTS,
    VARIANTS,
    GgufReference,
    built,
    original_run,
    random_model,
    transformers_tokens,
    write_gguf,
)
from tests.models.test_decoders import assert_close

pytest.importorskip("gguf")


def gguf_tokens(path: Path) -> list[str]:
    """The file's ``tokenizer.ggml.tokens``, as the gguf package reads them."""
    from gguf.gguf_reader import GGUFReader

    return list(GGUFReader(path).fields["tokenizer.ggml.tokens"].contents())


def forward(path: Path, dtype: str = "float32") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """attnx's weights ``[head, query, key]`` for every layer and the hidden state each layer outputs (the last one
    through the final norm, as transformers' last hidden state is)."""
    weights, hidden = [], []
    with open_model(path, dtype) as model:
        run = model.run(TEXT, layer=model.layers - 1)
        for _ in range(model.layers):
            weights.append(run.step({"weights"}).weights)
            hidden.append(run.stream())
        hidden[-1] = model.architecture.final(hidden[-1])
    return weights, hidden


@pytest.fixture(scope="session", params=list(VARIANTS))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> GgufReference:
    """Each tiny GGUF model in turn."""
    return built(request.param, tmp_path_factory)


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> GgufReference:
    """The tiny Llama: W_q and W_k permuted by the converter, Q8_0 and F16 weights, untied."""
    return built("llama", tmp_path_factory)


class TestAgreement:
    """Each architecture equals transformers reading the same GGUF file, layer by layer, and tokenizes as it does."""

    def test_weights_and_hidden_states(self, tiny: GgufReference) -> None:
        """Every layer's weights (every head) and output hidden state, in float32 within 1e-5."""
        weights, hidden = forward(tiny.path)
        assert len(weights) == len(tiny.attentions) == 2
        for ours, theirs in zip(weights, tiny.attentions, strict=True):
            assert_close(ours, theirs, "float32")
        for ours, theirs in zip(hidden, tiny.hidden, strict=True):
            assert_close(ours, theirs, "float32")

    def test_described_without_its_tokenizer(self, tiny: GgufReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """Describing a file builds no tokenizer and decodes none of its tokens, yet gives the kind and vocabulary
        size the built tokenizer has."""
        from attnx.models import gguf_tokenizer
        from attnx.models.gguf_file import Strings

        def refused(*args: object) -> None:
            raise AssertionError("the tokenizer was built, or its tokens decoded, to describe the file")

        with monkeypatch.context() as patched:
            patched.setattr(gguf_tokenizer, "build_tokenizer", refused)
            patched.setattr(Strings, "items", refused)
            info = describe(tiny.path)
        with open_model(tiny.path) as model:
            assert model._tokenizer is None  # opening builds none either
            assert (info.tokenizer, info.tokenizer_vocab_size) == (model.tokenizer.kind, model.tokenizer.vocab_size)
            assert model.info().tokenizer_vocab_size == info.tokenizer_vocab_size  # once built, the same
        assert info.tokenizer == "BPE" and info.tokenizer_vocab_size == len(gguf_tokens(tiny.path))

    def test_tokens(self, tiny: GgufReference) -> None:
        """Texts with spaces, digits, accents, emoji and CJK give transformers' GGUF tokenizer's ids, special tokens
        (a Llama's BOS) included."""
        with open_model(tiny.path) as model:
            ours = [model.encode(text).ids.tolist() for text in TEXTS]
        assert ours == transformers_tokens(tiny.path, TEXTS)
        assert ours[0] == tiny.ids

    @pytest.mark.parametrize("name", list(ORIGINALS))
    def test_against_the_original(self, name: str, tmp_path: Path) -> None:
        """What transformers' GGUF reader drops (rope scaling: Llama 3's, stored as per-pair divisors in rope_freqs,
        linear, yarn; Mixtral's experts) or cannot read (Gemma): float32 files checked against the model they were
        written from, its family and rope scaling read from the metadata."""
        variant = ORIGINALS[name]
        original = random_model(variant)
        path = write_gguf(tmp_path / f"{name}.gguf", original, variant)
        with open_model(path) as model:
            ids = model.encode(TEXT).ids.tolist()
            family, rotary = model.architecture.name, model.architecture.rotary
        attentions, hidden = original_run(original, ids)
        weights, ours = forward(path)
        for mine, theirs in [*zip(weights, attentions, strict=True), *zip(ours, hidden, strict=True)]:
            assert_close(mine, theirs, "float32")
        assert family == variant.family and rotary is not None
        kind = variant.config.get("rope_parameters", {}).get("rope_type")
        assert (rotary.scaling.kind if rotary.scaling else None) == kind
        inverse = original.model.rotary_emb.inv_freq.numpy()
        np.testing.assert_allclose(rotary.frequencies(inverse.size * 2), inverse, rtol=1e-6)


class TestConverterUndone:
    """What llama.cpp's converter does to the tensors is undone, and each undoing matters."""

    def test_the_trap(self, llama: GgufReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """W_q and W_k read as stored (interleaved pairs) with rotate-half RoPE: every layer's weights are wrong."""
        monkeypatch.setattr("attnx.models.gguf.unpermute", lambda rows, heads: rows)
        weights, _ = forward(llama.path)
        assert np.abs(weights[0] - llama.attentions[0]).max() > 1e-2

    def test_gemma_norms(self, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
        """Gemma's norms are stored as 1 + w: read as w, the hidden states are wrong."""
        gemma3 = built("gemma3", tmp_path_factory)
        monkeypatch.setattr("attnx.models.gguf.SHIFTED", "none")
        _, hidden = forward(gemma3.path)
        assert np.abs(hidden[0] - gemma3.hidden[0]).max() > 1e-2

    def test_embeddings_read_by_rows(self, llama: GgufReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """The token embedding table is never dequantized whole: only the text's tokens' rows are read."""
        from attnx.models.gguf_file import GgufModel

        reads: list[tuple[str, int]] = []
        original = GgufModel.rows
        monkeypatch.setattr(GgufModel, "rows", lambda self, info, start, stop: reads.append((info.name, stop - start))
                            or original(self, info, start, stop))  # fmt: skip
        with open_model(llama.path) as model:
            model.run(TEXT).spec()
            table = model.checkpoint.model.tensors["token_embd.weight"].rows
        rows = [count for name, count in reads if name == "token_embd.weight"]
        assert rows and max(rows) == 1 and len(rows) == len(set(llama.ids)) < table


class TestTypes:
    """Every ggml type the gguf package dequantizes is read, by rows, as the package dequantizes the whole tensor."""

    @pytest.mark.parametrize("name", readable_types())
    def test_rows(self, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Rows 1 and 2, and all 4 rows, of a 4 × 256 tensor of random blocks (of every type, K-quants and IQ types
        included), read in chunks of one row (the rows are dequantized a chunk at a time)."""
        import attnx.models.gguf_file

        monkeypatch.setattr(attnx.models.gguf_file, "CHUNK", 256)
        import gguf

        kind = gguf.GGMLQuantizationType[name]
        block, size = gguf.GGML_QUANT_SIZES[kind]
        raw = np.random.default_rng(0).integers(0, 256, (4, 256 // block * size), dtype=np.uint8)
        writer = gguf.GGUFWriter(tmp_path / "t.gguf", "llama")
        writer.add_tensor("t", raw, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        model = GgufModel(tmp_path / "t.gguf", Limits())
        with np.errstate(all="ignore"):  # random bytes make some scales NaN
            whole = gguf.quants.dequantize(raw, kind)
        np.testing.assert_array_equal(model.rows(model.tensors["t"], 1, 3), whole[1:3])
        np.testing.assert_array_equal(model.rows(model.tensors["t"], 0, 4), whole)


class TestFiles:
    """Split files, a folder holding a model, and what the file holds."""

    def test_split_files(self, llama: GgufReference, tmp_path: Path) -> None:
        """A model split into NAME-0000k-of-0000n.gguf files reads as one, from the first or from the folder; a
        missing part is named."""

        first = write_gguf(tmp_path / "tiny.gguf", random_model(VARIANTS["llama"]), VARIANTS["llama"], split=9)
        parts = sorted(tmp_path.glob("*.gguf"))
        assert len(parts) > 2 and parts[0].name == f"tiny-00001-of-{len(parts):05d}.gguf"
        assert first.name == "tiny.gguf" and not first.exists()
        whole, _ = forward(llama.path)
        for target in (parts[0], tmp_path):
            split, _ = forward(target)
            for ours, theirs in zip(split, whole, strict=True):
                np.testing.assert_array_equal(ours, theirs)
        parts[-1].unlink()
        with pytest.raises(Exception, match=rf"{parts[-1].name}: missing: the model is split into {len(parts)} files"):
            describe(parts[0])

    def test_folder(self, llama: GgufReference, tmp_path: Path) -> None:
        """A folder holding one model's GGUF file opens it; one holding two models' is refused, naming them."""
        shutil.copy(llama.path, tmp_path / "a.gguf")
        assert describe(tmp_path).layers == 2
        shutil.copy(llama.path, tmp_path / "b.gguf")
        with pytest.raises(Exception, match=r"holds the GGUF files of 2 models \(a.gguf, b.gguf\); give --model one"):
            describe(tmp_path)

    def test_summary(self, llama: GgufReference) -> None:
        """The summary counts tensors and values per ggml type and the bits per weight, from the header."""
        from attnx.models.gguf import GgufCheckpoint, gguf_summary

        with GgufCheckpoint(llama.path) as checkpoint:
            summary = checkpoint.summary()
        assert gguf_summary(llama.path.parent) == summary
        types = {kind.name: kind.tensors for kind in summary.types}
        assert summary.architecture == "llama" and summary.name == "tiny llama" and summary.tokenizer == "llama"
        assert types == {"Q8_0": 14, "F32": 5, "F16": 2} and summary.tensors == 21 and summary.files == 1
        assert 8 < summary.bits_per_weight < 16 and summary.size_bytes == llama.path.stat().st_size
        info = describe(llama.path)
        assert info.dtypes == ("F16", "F32", "Q8_0") and info.parameters == summary.parameters


class TestRebuiltMerges:
    """The merges a SentencePiece vocabulary implies, found by hashing in NumPy, are transformers' own."""

    @staticmethod
    def vocabulary(seed: int, size: int = 3000) -> dict[str, int]:
        """Pieces made of two earlier ones, as BPE makes them, over an alphabet with ▁, NUL, accents and emoji."""
        rng = np.random.default_rng(seed)
        pieces = ["▁", "\0", "a", "b", "c", "é", "猫", "😀", "<0x0A>"]
        while len(pieces) < size:
            left, right = (pieces[int(len(pieces) * rng.random() ** 2)] for _ in range(2))
            if left + right not in pieces and len(left + right) <= 12:
                pieces.append(left + right)
        return {piece: index for index, piece in enumerate(pieces)}

    @pytest.mark.parametrize("ties", [False, True])
    def test_equal_transformers(self, ties: bool) -> None:
        """Every split of every token, in transformers' order: by score, then the parts' lengths, then the tokens'
        order (scores tied in sevens, or Gemma's order)."""
        generate = pytest.importorskip("transformers.convert_slow_tokenizer").generate_merges
        from attnx.models.gguf_tokenizer import rebuilt_merges

        vocab = self.vocabulary(0)
        scores = {token: float(-(index // 7) if ties else -index) for token, index in vocab.items()}
        merges = rebuilt_merges(vocab, scores)
        assert merges == generate(vocab, scores) and len(merges) > len(vocab)
        if not ties:  # Gemma's: the vocabulary's order, a token's score minus its id
            assert rebuilt_merges(vocab) == merges

    def test_collisions_are_checked(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A split whose hashes collide with a token's is checked against the vocabulary, never made a merge."""
        generate = pytest.importorskip("transformers.convert_slow_tokenizer").generate_merges
        from attnx.models import gguf_tokenizer

        vocab = self.vocabulary(1, 500)
        scores = {token: float(-index) for token, index in vocab.items()}
        monkeypatch.setattr(gguf_tokenizer, "_among", lambda values, known: np.ones(values.shape, dtype=bool))
        assert gguf_tokenizer.rebuilt_merges(vocab, scores) == generate(vocab, scores)
