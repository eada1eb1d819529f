"""Greedy decoding of encoder-decoders: transformers' greedy tokens, each position run through each layer once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.errors import ModelError
from attnx.io.audio import read_wav
from attnx.models import open_model
from attnx.models.architecture import Architecture
from attnx.models.generate import greedy
from tests.models.checkpoints import TEXT
from tests.models.encoder_decoders import Seq2SeqReference, built_seq2seq
from tests.models.whisper_checkpoints import WhisperReference

STEPS = 10


def theirs(path: Path, source: list[int]) -> list[int]:
    """transformers' ``generate(do_sample=False, num_beams=1)`` (without its cache: transformers' T5 cache is sized by
    the encoder's layers and fails where the decoder has more)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float64)
    with torch.no_grad():
        out = model.generate(torch.tensor([source]), max_new_tokens=STEPS, do_sample=False, num_beams=1,
                             use_cache=False)  # fmt: skip
    return [int(i) for i in out[0]]


class TestGreedy:
    @pytest.mark.parametrize("name", ["t5-v1.1", "bart", "bart-untied", "mbart", "marian", "marian-own-tables"])
    def test_equals_transformers(self, name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
        """The tokens written equal transformers' greedy ones, the forced end token (BART, Marian) included."""
        reference = built_seq2seq(name, tmp_path_factory)
        with open_model(reference.path) as model:
            start = model.architecture.decoder_start
            assert start is not None
            found = greedy(model, TEXT, STEPS, prompt=[start])
        assert list(found.ids) == theirs(reference.path, reference.source_ids)
        assert found.prompt == 1 and len(found.written) >= 1

    def test_each_position_runs_each_layer_once(self, t5: Seq2SeqReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """After each attention, the rest of the layer runs on the new position's row alone: one row a call, one call
        per position and attention."""
        rows: list[int] = []

        with open_model(t5.path) as model:
            family = type(model.architecture)
            after = family.site_after

            def counted(self: Architecture, at: Any, stream: Any, projected: Any) -> Any:
                rows.append(len(stream))
                return after(self, at, stream, projected)

            monkeypatch.setattr(family, "site_after", counted)
            found = greedy(model, TEXT, STEPS, prompt=[0])
            encoder_layers, decoder = model.stacks[0].layers, model.stacks[1]
        decoder_calls = rows[encoder_layers:]  # the encoder ran first, every row at once
        assert set(decoder_calls) == {1}
        assert len(decoder_calls) == (len(found.ids) - 1) * decoder.layers * len(decoder.attentions)

    def test_keys_and_values_are_projected_once(self, t5: Seq2SeqReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """The KV cache: each decoder position's key and value are projected once at each self-attention, the
        encoder's output once at each cross-attention, and only the new row's query at each step."""
        from attnx.models import generate

        rows: list[int] = []
        project = generate.linear

        def counted(x: Any, w: Any) -> Any:
            rows.append(len(x))
            return project(x, w)

        monkeypatch.setattr(generate, "linear", counted)
        with open_model(t5.path) as model:
            found = greedy(model, TEXT, STEPS, prompt=[0])
            source = len(model.encode(TEXT).tokens)
            layers = model.stacks[1].layers
        steps = len(found.ids) - 1  # every position but the last entered the decoder
        queries, self_kv, cross_kv = steps * 2 * layers, 2 * steps * layers, 2 * layers  # calls
        assert len(rows) == queries + self_kv + cross_kv
        assert sorted(rows) == [1] * (queries + self_kv) + [source] * cross_kv

    def test_a_setting_it_does_not_apply_is_refused(self, t5: Seq2SeqReference, tmp_path: Path) -> None:
        """A generation config that changes greedy tokens in a way attnx does not apply is refused, naming the key."""
        path = Path(shutil.copytree(t5.path, tmp_path / "t5"))
        (path / "generation_config.json").write_text(json.dumps({"no_repeat_ngram_size": 3, "eos_token_id": 1}))
        with open_model(path) as model, pytest.raises(ModelError, match="sets no_repeat_ngram_size = 3"):
            greedy(model, TEXT, STEPS, prompt=[0])

    def test_a_decoder_only_model_is_refused(self, gpt2: Any) -> None:
        """Greedy decoding here reads a source: a model without cross-attention is a ModelError."""
        with open_model(gpt2.path) as model, pytest.raises(ModelError, match="for encoder-decoders"):
            greedy(model, TEXT, STEPS, prompt=[0])

    def test_stops_at_the_end_token(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """Decoding stops once the end token is written (marked ``ended``), or after the steps asked for."""
        reference = built_seq2seq("bart", tmp_path_factory)
        with open_model(reference.path) as model:
            found = greedy(model, TEXT, STEPS, prompt=[2])
        ends = found.ids[-1] == 2
        assert found.ended is ends and (ends or len(found.written) == STEPS)
        assert np.all(np.asarray(found.written[:-1]) != 2)


class TestSuppressed:
    def test_whisper_as_transformers(self, whisper: WhisperReference, tmp_path: Path) -> None:
        """A Whisper whose generation config forces its prompt (forced_decoder_ids), and then suppresses a token at
        the first step, or at every step, writes transformers' greedy tokens; each rule changes what it writes."""
        torch = pytest.importorskip("torch")
        transformers = pytest.importorskip("transformers")

        def written_by_transformers(path: Path) -> list[int]:  # the tokens after the prompt
            model = transformers.WhisperForConditionalGeneration.from_pretrained(path, dtype=torch.float64)
            with torch.no_grad():
                out = model.generate(torch.tensor(whisper.features[None], dtype=torch.float64), language="en",
                                     max_new_tokens=6, do_sample=False, num_beams=1)  # fmt: skip
            return [int(i) for i in out[0]]

        def written_by_attnx(path: Path) -> list[int]:
            with open_model(path) as model:
                heard = model.encode_audio(read_wav(str(whisper.wav), model.limits).samples)
                return list(greedy(model, heard, 6, prompt=model.decoder_prompt(language="en")).written)

        free = written_by_transformers(whisper.path)
        assert written_by_attnx(whisper.path) == free
        path = Path(shutil.copytree(whisper.path, tmp_path / "whisper"))
        generation = json.loads((path / "generation_config.json").read_text())
        for rule in ({"begin_suppress_tokens": [free[0]]}, {"suppress_tokens": [free[0]]}):
            (path / "generation_config.json").write_text(json.dumps(generation | rule))
            ruled = written_by_transformers(path)
            assert written_by_attnx(path) == ruled and ruled[0] != free[0]
            assert "suppress_tokens" not in rule or free[0] not in ruled
