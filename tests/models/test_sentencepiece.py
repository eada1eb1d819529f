"""Tokenizers shipped as SentencePiece models: Marian's source.spm, target.spm and vocab.json, T5's spiece.model."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from attnx.core.tensors import WEIGHTS
from attnx.errors import ModelError
from attnx.models import open_model
from attnx.models.stacks import AttentionKind
from attnx.workflows import layer_results
from tests.models.checkpoints import SENTENCES, TEXT
from tests.models.encoder_decoders import TARGET, Seq2SeqReference, run_seq2seq
from tests.models.test_decoders import assert_close

spm = pytest.importorskip("sentencepiece")
CODED = ">>fr<< the cat sat"  # a Marian source led by a target-language code


def train(folder: Path, name: str, texts: list[str], size: int) -> Path:
    """A SentencePiece unigram model of about ``size`` pieces over ``texts`` (pad 0, eos 1, unk 2), as ``name``."""
    corpus = folder / f"{name}.txt"
    corpus.write_text("\n".join(texts * 3), "utf-8")
    prefix = folder / name
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(prefix), vocab_size=size, model_type="unigram",
                                   hard_vocab_limit=False, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   minloglevel=2)  # fmt: skip
    corpus.unlink()
    Path(f"{prefix}.vocab").unlink()
    return Path(f"{prefix}.model").rename(folder / name)


@pytest.fixture(scope="module")
def opus(marian: Seq2SeqReference, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Marian as the Hub holds opus-mt models: source.spm and target.spm (two SentencePiece models) and
    vocab.json (Marian's ids of their pieces, a language code among them), no tokenizer.json."""
    folder = Path(shutil.copytree(marian.path, tmp_path_factory.mktemp("opus") / "marian"))
    (folder / "tokenizer.json").unlink()
    size = json.loads((folder / "config.json").read_text())["vocab_size"]
    source = train(folder, "source.spm", [*SENTENCES, TEXT], 30)
    target = train(folder, "target.spm", [TARGET, *SENTENCES[::-1]], 28)
    vocab = {"</s>": 0, "<unk>": 1, "<pad>": 2, ">>fr<<": 3}
    for model in (source, target):
        processor = spm.SentencePieceProcessor(model_file=str(model))
        for i in range(3, processor.get_piece_size()):
            if len(vocab) < size:  # a piece past the model's rows is <unk>, as one missing from vocab.json
                vocab.setdefault(processor.id_to_piece(i), len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab), "utf-8")
    return folder


def marian_tokenizer(folder: Path) -> object:
    """transformers' MarianTokenizer over the folder's files: the reference."""
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():  # "Recommended: pip install sacremoses", which its encoding never uses
        warnings.simplefilter("ignore")
        return transformers.MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"),
                                            str(folder / "vocab.json"))  # fmt: skip


class TestMarian:
    @pytest.mark.parametrize("text", [TEXT, CODED, "an unseen wörd, qz!"])
    def test_source_as_transformers(self, opus: Path, text: str) -> None:
        """The source's ids are MarianTokenizer's: source.spm's pieces through vocab.json, a leading language code
        kept whole, an unknown piece <unk>, </s> last."""
        theirs = marian_tokenizer(opus)(text).input_ids  # type: ignore[operator]
        with open_model(opus) as model:
            encoded = model.encode(text)
        assert encoded.ids.tolist() == theirs and encoded.special[-1] and encoded.pieces[-1] == "</s>"

    def test_target_as_transformers(self, opus: Path) -> None:
        """The target is cut by target.spm: the decoder reads the pad token, then MarianTokenizer's labels shifted."""
        labels = marian_tokenizer(opus)(text_target=TARGET).input_ids  # type: ignore[operator]
        with open_model(opus) as model:
            shifted = model.encode_target(TARGET)
            source = model.encode(TEXT)
        assert shifted.ids.tolist() == [2, *labels[:-1]]
        assert source.ids.tolist() != marian_tokenizer(opus)(text_target=TEXT).input_ids  # type: ignore[operator]

    def test_cross_attention_as_transformers(self, opus: Path) -> None:
        """Every layer's cross-attention on the SentencePiece tokens is transformers' on MarianTokenizer's ids."""
        tokenizer = marian_tokenizer(opus)
        source, labels = tokenizer(TEXT).input_ids, tokenizer(text_target=TARGET).input_ids  # type: ignore[operator]
        theirs = run_seq2seq(opus, source, [2, *labels[:-1]], "float64")[0]["cross"]
        with open_model(opus) as model:
            found = [r.weights for r in layer_results(model, TEXT, needs=(WEIGHTS,), kind=AttentionKind.CROSS,
                                                       target=TARGET)]  # fmt: skip
        for mine, their in zip(found, theirs, strict=True):
            assert mine is not None
            assert_close(mine, their, "float64")

    def test_described(self, opus: Path) -> None:
        """`attnx model` names the tokenizer's files and counts vocab.json's pieces."""
        with open_model(opus) as model:
            info = model.info()
        size = len(json.loads((opus / "vocab.json").read_text()))
        assert (info.tokenizer, info.tokenizer_vocab_size) == ("SentencePiece (source.spm, target.spm)", size)

    def test_without_the_package(self, opus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without sentencepiece installed, one line says how to install it."""
        monkeypatch.setitem(sys.modules, "sentencepiece", None)
        with pytest.raises(ModelError, match="needs the sentencepiece package: python -m pip install sentencepiece"):
            open_model(opus)

    @pytest.mark.parametrize(("name", "content", "message"), [
        ("source.spm", b"\x00not a model", "source.spm: not a readable SentencePiece model"),
        ("vocab.json", b"[1, 2]", "vocab.json: expected a JSON object"),
        ("vocab.json", b'{"</s>": 0, "<unk>": -1}', "every piece's id must be a whole number"),
        ("vocab.json", b'{"a": 0}', "the vocabulary has no </s> or <unk>"),
    ])  # fmt: skip
    def test_bad_files(self, opus: Path, tmp_path: Path, name: str, content: bytes, message: str) -> None:
        """A corrupt model or vocabulary is one ModelError line naming the file."""
        folder = Path(shutil.copytree(opus, tmp_path / "bad"))
        (folder / name).write_bytes(content)
        with pytest.raises(ModelError, match=message):
            open_model(folder)


class TestT5:
    def test_spiece_model(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """A T5 folder with spiece.model alone: its pieces' own ids, </s> last, the sentinels counting down from the
        top (``extra_ids`` of tokenizer_config.json), and the model runs on them."""
        folder = Path(shutil.copytree(t5.path, tmp_path / "t5"))
        (folder / "tokenizer.json").unlink()
        model_file = train(folder, "spiece.model", [*SENTENCES, TEXT, TARGET], 30)
        (folder / "tokenizer_config.json").write_text(json.dumps({"extra_ids": 2}))
        processor = spm.SentencePieceProcessor(model_file=str(model_file))
        expected = [processor.piece_to_id(piece) for piece in processor.encode(TEXT, out_type=str)] + [1]
        size = processor.get_piece_size()
        with open_model(folder) as model:
            encoded = model.encode(TEXT)
            sentinels = model.tokenizer.pieces(np.array([size, size + 1]))
            result = model.run(encoded).step({WEIGHTS})
        assert encoded.ids.tolist() == expected and sentinels == ("<extra_id_1>", "<extra_id_0>")
        assert result.weights is not None and result.weights.shape[1] == len(expected)
