"""Marian against transformers: every layer of both stacks, each of the three attention kinds, and its positions."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.engines.placement import Placement
from attnx.errors import ModelError
from attnx.models import open_model
from attnx.models.seq2seq import sinusoids
from tests.models.checkpoints import TEXT
from tests.models.encoder_decoders import TARGET, Seq2SeqReference
from tests.models.test_bart import agree, rewrite
from tests.models.test_decoders import assert_close


class TestSinusoids:
    @pytest.mark.parametrize("width", [7, 8, 30])
    def test_as_transformers(self, width: int) -> None:
        """Sines in the first half (one more column at an odd width), cosines in the second, rounded to float32:
        transformers' ``create_weight`` exactly."""
        pytest.importorskip("torch")
        from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

        theirs = MarianSinusoidalPositionalEmbedding(50, width).create_weight().numpy()
        ours = sinusoids(np.arange(50, dtype=np.float64), width)
        np.testing.assert_array_equal(ours, theirs)
        assert ours[3, 0] == np.float32(np.sin(3.0)) and ours[3, (width + 1) // 2] == np.float32(np.cos(3.0))


class TestAgreement:
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_every_layer_every_kind(self, marian_like: Seq2SeqReference, dtype: str) -> None:
        """The encoder's self-attention, the decoder's causal self-attention and its cross-attention, each block's
        output, the encoder's output and the logits equal transformers' (1e-5 in float32, 1e-10 in float64), with one
        shared table and with the source's and the target's own."""
        agree(marian_like, dtype)

    def test_torch_engine(self, marian: Seq2SeqReference) -> None:
        """On the torch engine in float32 Marian agrees with transformers too."""
        pytest.importorskip("torch")
        agree(marian, "float32", Placement("torch"))

    def test_a_stored_position_table_is_read(self, marian: Seq2SeqReference, tmp_path: Path) -> None:
        """Where the file holds ``encoder.embed_positions.weight`` (older conversions), transformers loads it in place
        of the sinusoids, and so does attnx: the encoder's output equals transformers' on that file."""
        torch = pytest.importorskip("torch")
        import transformers
        from safetensors.numpy import load_file, save_file

        path = Path(shutil.copytree(marian.path, tmp_path / "m"))
        tensors = load_file(str(path / "model.safetensors"))
        table = np.random.default_rng(3).normal(size=(64, 30)).astype(np.float32)
        save_file({**tensors, "model.encoder.embed_positions.weight": table}, str(path / "model.safetensors"),
                  metadata={"format": "pt"})  # fmt: skip
        loaded = transformers.MarianMTModel.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
        with torch.no_grad():
            theirs = loaded.get_encoder()(torch.tensor([marian.source_ids])).last_hidden_state[0].numpy()
        with open_model(path, "float32") as model:
            ours = model.run(TEXT, stack=model.stacks[0]).finish()
        assert_close(ours, theirs, "float32")
        assert np.abs(ours - marian.memory["float32"]).max() > 0.1  # the table changed the output


class TestShape:
    def test_decoder_starts_from_pad(self, marian: Seq2SeqReference) -> None:
        """Marian's decoder reads the pad token (decoder_start_token_id, 2 here), then the target but its ``</s>``."""
        with open_model(marian.path) as model:
            shifted = model.encode_target(TARGET)
        assert shifted.ids.tolist() == marian.decoder_ids
        assert shifted.tokens[0] == "<pad>" and "</s>" not in shifted.tokens

    def test_own_tables(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """With ``share_encoder_decoder_embeddings`` false each stack reads its own table, the LM head its own."""
        from tests.models.encoder_decoders import built_seq2seq

        reference = built_seq2seq("marian-own-tables", tmp_path_factory)
        with open_model(reference.path) as model:
            arch = model.architecture
            assert (arch.table("encoder"), arch.table("decoder")) == ("encoder.embed_tokens.weight",
                                                                        "decoder.embed_tokens.weight")  # fmt: skip
            assert arch.output_tensor().name == "lm_head.weight" and model.info().tied_embeddings is False

    def test_no_pad_token(self, marian: Seq2SeqReference, tmp_path: Path) -> None:
        """Marian's pad token (its decoder's start) has no default: a config without one is refused."""
        path = rewrite(marian.path, tmp_path / "m", pad_token_id=None, decoder_start_token_id=None)
        with pytest.raises(ModelError, match="pad_token_id must be a token id"):
            open_model(path)


class TestSentencePieceFolder:
    def test_refused_in_one_line(self, marian: Seq2SeqReference, tmp_path: Path) -> None:
        """An opus-mt folder whose SentencePiece files are not models, or that lacks one of the three, is one line,
        exit 2, naming the file (tests/models/test_sentencepiece.py reads real ones)."""
        pytest.importorskip("sentencepiece")
        from tests.runner import run_attnx

        path = Path(shutil.copytree(marian.path, tmp_path / "opus"))
        (path / "tokenizer.json").unlink()
        for name in ("source.spm", "target.spm", "vocab.json"):
            (path / name).write_bytes(b"{}")
        out = run_attnx("model", str(path))
        assert out.code == 2 and out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
        assert "target.spm: not a readable SentencePiece model" in out.stderr
        (path / "vocab.json").unlink()
        out = run_attnx("model", str(path))
        assert out.code == 2 and len(out.stderr.strip().splitlines()) == 1
        assert "tokenizer.json: missing; Marian's SentencePiece files are source.spm, target.spm and vocab.json, " \
               "all three; or a tokenizer.json" in out.stderr  # fmt: skip


class TestDescribe:
    def test_positions_are_named(self, marian: Seq2SeqReference) -> None:
        """`attnx model` says Marian's positions are sinusoids (BART's: a learned table offset by 2)."""
        from tests.runner import run_attnx

        out = run_attnx("model", str(marian.path))
        lines = [" ".join(line.split()) for line in out.stdout.splitlines()]
        assert out.code == 0 and "positions sinusoidal embeddings" in lines
