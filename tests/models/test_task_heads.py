"""Fine-tuned checkpoints: what transformers' task classes save is read, the task head named and not read.

A task head (a classifier, a question-answering head, a pooler, a masked-LM head) sits after the last layer: it
changes no attention and no hidden state attnx shows. Every task class transformers has for a family attnx reads
opens, with its head named in ``task_heads`` and on `attnx model`'s "not read" line; one checkpoint per family runs
equal to transformers' base model layer by layer; a tensor that would change what attnx computes stays refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import ModelError
from attnx.models import describe, open_model
from attnx.models.families import FAMILIES
from attnx.render.model import info_rows
from tests.models.checkpoints import TEXT, bert_tokenizer, gpt2_tokenizer, reference
from tests.models.tasks import save_task, task_classes
from tests.models.test_decoders import assert_close, forward
from tests.models.test_families import add_tensor
from tests.runner import run_attnx

# The heads each kind of task class saves after the base model (BERT's pooled classes add the pooler).
KINDS = {
    "ForSequenceClassification": {"classification head"},
    "ForTokenClassification": {"classification head"},
    "ForMultipleChoice": {"classification head"},
    "ForQuestionAnswering": {"question-answering head"},
    "ForMaskedLM": {"masked-LM head"},
    "ForNextSentencePrediction": {"next-sentence head"},
    "ForPreTraining": {"masked-LM head", "next-sentence head"},
    "DoubleHeadsModel": {"multiple-choice head"},
    "ForCausalLM": set(),
    "ForConditionalGeneration": set(),  # T5: its LM head is read
    "ForAudioClassification": {"classification head"},  # Whisper's encoder alone, then a projector and a classifier
    "ForImageClassification": {"classification head"},  # ViT's (its pooler not saved)
    "LMHeadModel": set(),  # GPT2LMHeadModel (its tied output layer is wte); BertLMHeadModel's is cls.predictions
}
POOLED = {"BertForSequenceClassification", "BertForMultipleChoice", "BertForNextSentencePrediction",
          "BertForPreTraining"}  # fmt: skip


def expected_kinds(name: str) -> set[str]:
    """The heads ``name`` saves, by what follows its family's stem."""
    suffix = next(suffix for suffix in KINDS if name.endswith(suffix))
    kinds = KINDS[suffix] | ({"pooler"} if name in POOLED else set())
    return {"masked-LM head"} if name == "BertLMHeadModel" else kinds


_SAVED: dict[str, Path] = {}


def saved(name: str, model_type: str, factory: pytest.TempPathFactory) -> Path:
    """``name`` saved once per session."""
    if name not in _SAVED:
        _SAVED[name] = save_task(factory.mktemp(name), model_type, name)
    return _SAVED[name]


def classes_of(model_type: str) -> list[str]:
    """The task classes of family ``model_type``."""
    return [name for kind, name in task_classes() if kind == model_type]


def test_every_task_class_is_listed() -> None:
    """transformers' task classes for attnx's families: sequence and token classification, question answering,
    masked and causal LM, and BERT's and GPT-2's others, each family at least its causal or masked LM."""
    names = {name for _, name in task_classes()}
    assert len(names) >= 60 and {f.name for f in FAMILIES} == {kind for kind, _ in task_classes()}
    assert {"BertForSequenceClassification", "BertForTokenClassification", "BertForQuestionAnswering",
            "BertForMaskedLM", "BertForPreTraining", "BertLMHeadModel", "GPT2ForSequenceClassification",
            "GPT2DoubleHeadsModel", "LlamaForQuestionAnswering", "Qwen3MoeForTokenClassification",
            "Gemma3TextForSequenceClassification", "GptOssForSequenceClassification"} <= names  # fmt: skip
    assert "Gemma3ForConditionalGeneration" not in names  # multimodal: model_type gemma3, which attnx refuses


@pytest.mark.parametrize("model_type", [family.name for family in FAMILIES])
def test_task_classes_open(model_type: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each task class of the family opens; its heads are named by kind with every tensor the file holds beside the
    base model (and the pooler), and `attnx model` says it does not read them."""
    for name in classes_of(model_type):
        path = saved(name, model_type, tmp_path_factory)
        if name in REFUSED:
            with pytest.raises(ModelError, match=REFUSED[name]):
                describe(path)
            continue
        info = describe(path)
        assert info.architecture == model_type and info.architectures == (name,)
        assert {head.kind for head in info.task_heads} == expected_kinds(name), name
        with open_model(path) as model:
            prefix, outside = model.checkpoint.prefix, model.architecture.outside
            stored = model.checkpoint.keys()
            beside = {key for key in stored if not key.startswith(prefix) and key not in outside}
        unread = {tensor for head in info.task_heads for tensor in head.tensors}
        assert beside <= unread and (prefix or not beside), name
        rows = [value for key, value in info_rows(info) if key == "not read"]
        assert rows == [f"{head.describe()}, after the last layer" for head in info.task_heads]


# Encoder-decoders' task classes are compared with transformers, both stacks, in tests/models/test_t5.py,
# test_bart.py, test_marian.py and test_whisper.py; ViT's (an image model) in test_vit.py.
SEQ2SEQ = {"t5", "mt5", "bart", "mbart", "marian", "whisper", "vit"}
# Task classes attnx refuses, each with what its one line says.
REFUSED = {"WhisperForCausalLM": "a Whisper decoder without its encoder",
           "ViTForMaskedImageModeling": r"'decoder.0.bias' is not used by vit \(ViT\)"}  # fmt: skip


@pytest.mark.parametrize("model_type", [family.name for family in FAMILIES if family.name not in SEQ2SEQ])
def test_equal_to_transformers(model_type: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """One task checkpoint per family (a sequence classifier where the family has one) runs equal to transformers'
    base model of that class, every layer's weights and hidden state within 1e-5 in float32."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    names = classes_of(model_type)
    name = next((n for n in names if n.endswith("ForSequenceClassification")), names[0])
    path = saved(name, model_type, tmp_path_factory)
    tokenizer = bert_tokenizer() if model_type == "bert" else gpt2_tokenizer()
    loaded = getattr(transformers, name).from_pretrained(path, attn_implementation="eager", dtype=torch.float32,
                                                        experts_implementation="eager")  # fmt: skip
    theirs = reference(path, loaded.base_model, tokenizer.encode(TEXT).ids)
    weights, hidden = forward(path, "float32")
    assert len(weights) == len(theirs.attentions) >= 2
    for ours, expected in zip(weights, theirs.attentions, strict=True):
        assert_close(ours, expected, "float32")
    for ours, expected in zip(hidden[:-1], theirs.hidden[1:], strict=True):  # the stream entering layers 1, 2, …
        assert_close(ours, expected, "float32")


@pytest.fixture
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The BertForSequenceClassification checkpoint."""
    return saved("BertForSequenceClassification", "bert", tmp_path_factory)


class TestFineTunedBert:
    """The regression of issue 46: a BertForSequenceClassification checkpoint, as most fine-tuned BERTs are."""

    def test_model_names_what_it_does_not_read(self, path: Path) -> None:
        """`attnx model` exits 0 and names the pooler and the classifier, each with its tensor count."""
        out = run_attnx("model", str(path))
        assert out.code == 0 and out.stderr == ""
        lines = [" ".join(line.split()) for line in out.stdout.splitlines()]
        assert "not read pooler: 2 tensors (bert.pooler.dense.*), after the last layer" in lines
        assert "not read classification head: 2 tensors (classifier.*), after the last layer" in lines

    def test_json(self, path: Path) -> None:
        """`--format json` lists each head's kind and tensors (format 1.7)."""
        out = run_attnx("model", str(path), "--format", "json")
        data = json.loads(out.stdout)
        assert data["format_version"] == "1.9"
        assert data["task_heads"] == [
            {"kind": "pooler", "tensors": ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]},
            {"kind": "classification head", "tensors": ["classifier.bias", "classifier.weight"]},
        ]

    def test_run(self, path: Path) -> None:
        """`attnx run` reads a layer of it."""
        out = run_attnx("run", "--model", str(path), "--text", TEXT, "--layer", "1", "-f", "json")
        assert out.code == 0 and np.asarray(json.loads(out.stdout)["weights"]).shape == (4, 12, 12)


class TestStillRefused:
    """A tensor that would change what attnx computes stays refused, in a task checkpoint too: inside a layer, in the
    embeddings, a norm's, or an LM head's bias where the family reads its LM head."""

    @pytest.mark.parametrize(
        ("name", "model_type", "tensor", "like"),
        [
            ("BertForSequenceClassification", "bert", "bert.encoder.layer.1.classifier.weight", "classifier.weight"),
            ("BertForSequenceClassification", "bert", "bert.embeddings.score.weight", "classifier.weight"),
            ("BertForSequenceClassification", "bert", "bert.encoder.layer.0.attention.self.extra.bias",
             "classifier.bias"),
            ("LlamaForSequenceClassification", "llama", "model.norm.bias", "model.norm.weight"),
            ("LlamaForSequenceClassification", "llama", "model.layers.0.score.weight", "score.weight"),
            ("LlamaForCausalLM", "llama", "lm_head.bias", "model.norm.weight"),
            ("GPT2ForSequenceClassification", "gpt2", "transformer.h.0.qa_outputs.weight", "score.weight"),
        ],
    )  # fmt: skip
    def test_refused(
        self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, name: str, model_type: str, tensor: str,
        like: str,
    ) -> None:  # fmt: skip
        path = Path(shutil.copytree(saved(name, model_type, tmp_path_factory), tmp_path / name))
        add_tensor(path, tensor, like)
        with pytest.raises(ModelError, match=rf"tensor '{tensor}' is not used by {model_type} "):
            describe(path)

    def test_an_lm_head_where_none_is_read(self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        """BERT reads no language-model head: an ``lm_head`` after its last layer is named, not refused."""
        path = Path(shutil.copytree(saved("BertForSequenceClassification", "bert", tmp_path_factory), tmp_path / "b"))
        add_tensor(path, "lm_head.weight", "bert.embeddings.word_embeddings.weight")
        heads = {head.kind: head.tensors for head in describe(path).task_heads}
        assert heads["language-model head"] == ("lm_head.weight",)
