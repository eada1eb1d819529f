"""What a model family supplies to the forward pass: its sizes, embeddings, attention layers and the rest."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from attnx.core.positions import Rotary
from attnx.core.spec import AttentionSpec
from attnx.engines.arrays import Array, arrays_of, host_dtype
from attnx.errors import ModelError
from attnx.models.audio import AudioInput
from attnx.models.checkpoint import Checkpoint, Shape
from attnx.models.gguf_form import GgufForm
from attnx.models.nn import ACTIVATIONS
from attnx.models.stacks import Attention, Site, Stack
from attnx.models.tokenize import Encoded
from attnx.models.vision import ImageInput

if TYPE_CHECKING:  # pragma: no cover
    from attnx.models.gguf_summary import GgufSummary


@dataclass(frozen=True)
class Mixture:
    """A routed MLP: ``experts`` experts ``width`` wide, the ``top_k`` a token's router chooses, whether their
    weights are ``renormalised`` to sum 1, a shared expert's width (None: none), and the layers whose MLP is
    dense instead (``dense_layers``, from 0)."""

    experts: int
    top_k: int
    width: int
    renormalised: bool
    shared_width: int | None = None
    dense_layers: tuple[int, ...] = ()

    def describe(self) -> str:
        """``4 experts × 48, top-2 renormalised, shared expert × 40, dense MLP on layer 1``."""
        words = f"{self.experts} experts × {self.width}, top-{self.top_k} "
        words += "renormalised" if self.renormalised else "not renormalised"
        if self.shared_width is not None:
            words += f", shared expert × {self.shared_width}"
        dense = ", ".join(map(str, self.dense_layers))
        return words + (f", dense MLP on layer{'s' if len(self.dense_layers) > 1 else ''} {dense}" if dense else "")


@dataclass(frozen=True)
class TaskHead:
    """A task head a checkpoint holds after the last layer (``kind``: ``classification head``), which attnx does not
    read: its tensors, as stored. It reads the last hidden state and writes nothing back, so it changes no attention
    and no hidden state attnx shows."""

    kind: str
    tensors: tuple[str, ...]

    def describe(self) -> str:
        """``classification head: 2 tensors (classifier.*)``."""
        stem: list[str] = []  # the dotted parts every tensor's name starts with
        for column in zip(*(name.split(".")[:-1] for name in self.tensors), strict=False):
            if len(set(column)) > 1:
                break
            stem.append(column[0])
        where = ".".join(stem) + ".*" if stem and len(self.tensors) > 1 else self.tensors[0]
        count = len(self.tensors)
        return f"{self.kind}: {count} tensor{'s' if count != 1 else ''} ({where})"


# What transformers' task classes (``BertForSequenceClassification``, ``LlamaForQuestionAnswering``, …) put after the
# base model, as fnmatch patterns on a tensor's name without the model's prefix, each with what it is. Each reads the
# last hidden state and feeds nothing back. ``lm_head.*`` counts only where the family reads no language-model head.
TASK_HEADS = (
    ("classifier.*", "classification head"),
    ("pre_classifier.*", "classification head"),
    ("classification_head.*", "classification head"),
    ("projector.*", "classification head"),  # WhisperForAudioClassification's, before its classifier
    ("score.*", "classification head"),
    ("qa_outputs.*", "question-answering head"),
    ("pooler.*", "pooler"),
    ("cls.predictions.*", "masked-LM head"),
    ("cls.seq_relationship.*", "next-sentence head"),
    ("multiple_choice_head.*", "multiple-choice head"),
    ("lm_head.*", "language-model head"),
)
LM_HEADS = "lm_head.*"


@dataclass(frozen=True)
class ModelInfo:
    """What a checkpoint holds: its family, sizes and weights (``parameters`` counts learned values).

    ``kv_heads`` is the number of K/V heads (fewer than ``heads``: grouped-query attention), ``head_dim``
    each head's width; ``rotary`` the rotary positions (None: learned or no positions; where layers differ, the
    first layer's that has any) and ``rotaries`` each layer's (empty for a family without them); ``windows`` each
    layer's sliding window (None: the whole past); ``softcap`` the scores' soft cap; ``qk_norm`` whether
    q and k are normalised, ``qk_norm_over`` where (``head``: each head's; ``projection``: the whole projections);
    ``tied_embeddings`` whether the output layer reuses the input embeddings (None: an encoder); ``gated`` whether
    the MLP is gated; ``mixture`` its routed experts (None: a dense MLP); ``sinks`` whether each head has a learned
    sink; ``weight_files`` how many files hold the weights; ``gguf`` how a GGUF file stores them (its quantization,
    tokenizer and what attnx does not read; None: a safetensors checkpoint); ``task_heads`` the task heads the file
    holds after the last layer, which attnx does not read (a classifier, a pooler); ``stacks`` its stacks of layers
    (attnx/models/stacks.py); ``position_bias`` how positions enter the scores as a learned bias (T5's relative
    buckets; None: they do not); ``positions`` a family's own words for its positions where rotary positions do not
    say them (Marian's sinusoids, Whisper's; None: a learned table, or rotary).
    """

    path: str
    architecture: str
    family: str
    design: str
    model_type: str
    architectures: tuple[str, ...]
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    d_model: int
    d_ff: int
    vocab_size: int
    max_length: int
    activation: str
    causal: bool
    parameters: int
    dtypes: tuple[str, ...]
    size_bytes: int
    tokenizer: str
    tokenizer_vocab_size: int
    tokenizer_settings: tuple[str, ...]
    rotary: Rotary | None = None
    rotaries: tuple[Rotary | None, ...] = ()
    windows: tuple[int | None, ...] = ()
    softcap: float | None = None
    qk_norm: bool = False
    qk_norm_over: str = "none"
    tied_embeddings: bool | None = None
    gated: bool = False
    mixture: Mixture | None = None
    sinks: bool = False
    weight_files: int = 1
    gguf: GgufSummary | None = None
    task_heads: tuple[TaskHead, ...] = ()
    stacks: tuple[Stack, ...] = ()
    position_bias: str | None = None
    positions: str | None = None


# Where config.json usually keeps each size (Hugging Face's names); a family names others in ``read_sizes``.
SIZE_KEYS = {
    "layers": ("num_hidden_layers",),
    "heads": ("num_attention_heads",),
    "d_model": ("hidden_size",),
    "d_ff": ("intermediate_size",),
    "vocab_size": ("vocab_size",),
    "max_length": ("max_position_embeddings",),
}

# What follows a family's stem in transformers' class names: LlamaForCausalLM, LlamaModel, GPT2LMHeadModel.
CLASS_SUFFIX = r"(?:Model|LMHeadModel|DoubleHeadsModel|PreTrainedModel|For[A-Z]\w*)"


def weights_and_biases(*names: str) -> Iterator[str]:
    """``name.weight`` and ``name.bias`` of each of ``names`` (torch's Linear and LayerNorm)."""
    for name in names:
        yield f"{name}.weight"
        yield f"{name}.bias"


@dataclass(frozen=True)
class WeightRef:
    """Which checkpoint tensor a ``weight`` call reads: its arguments."""

    name: str
    alternatives: tuple[str, ...]
    shape: Shape
    prefixed: bool


class Architecture:
    """One model family: its tensor names, and the forward pass around attention, in NumPy.

    A subclass names its weights' prefixes and a tensor that proves the family (``probe``), the stems of
    transformers' class names for it (``stems``: ``Llama`` for LlamaForCausalLM and LlamaModel), reads its sizes
    from config.json (``read_sizes``: ``layers``, ``heads``, ``kv_heads``, ``head_dim``, ``d_model``, ``d_ff``,
    ``vocab_size``, ``max_length``), and supplies ``embed``, ``attention_spec`` (the spec of one layer, built
    from the residual stream entering it) and ``after_attention`` (the rest of that layer, given the
    attention's projected output). Weights are read from the checkpoint when a layer needs them, never before.

    Never silently wrong: ``tensor_names`` lists every tensor the family may read (under the prefix; ``outside``
    those beside it, such as ``lm_head.weight``), and a checkpoint holding any other is refused when it is
    opened, unless it is a buffer (``is_buffer``), matches one of ``unused``, the family's allow-list of
    tensors legitimately left unused (a tied copy of the embeddings), or is a task head after the last layer
    (``TASK_HEADS``: a classifier, a pooler), which ``task_heads`` names.

    Never built on a claim: every count config.json claims is checked against the weights before anything is built
    per item: the layers against the layers the weights hold (``layer_stem``), as soon as they are read
    (``read_sizes``); the vocabulary, the width and the heads (and a family's experts) against the shapes of the
    tensors ``claimed_shapes`` names, before ``tensor_names`` lists a tensor per layer or per expert.
    """

    name: str
    family: str
    design: str
    prefixes: ClassVar[tuple[str, ...]]
    probe: ClassVar[str]
    causal: ClassVar[bool]
    stems: ClassVar[tuple[str, ...]]
    outside: ClassVar[tuple[str, ...]] = ()  # tensors read beside the prefix (a task model's head)
    unused: ClassVar[tuple[str, ...]] = ()  # fnmatch patterns, on the name as stored or under the prefix
    layer_stem: ClassVar[str]  # where layer N's tensors are, under the prefix: ``layers.`` for ``layers.N.…``
    task_heads: tuple[TaskHead, ...] = ()  # the task heads the checkpoint holds, not read (``check_tensors``)
    position_bias: str | None = None  # how positions enter the scores as a learned bias (None: they do not)
    positions: str | None = None  # the family's words for its positions (None: a learned table, or rotary)

    activation_name: str
    rotary: Rotary | None = None
    rotaries: tuple[Rotary | None, ...] = ()
    windows: tuple[int | None, ...] = ()
    softcap: float | None = None
    qk_norm: bool = False
    qk_norm_over: ClassVar[str] = "none"  # where QK-norm applies (a decoder's hook): none, head or projection
    gated: bool = False
    mixture: Mixture | None = None  # the routed MLP's experts (None: dense)
    sinks: ClassVar[bool] = False  # whether each head has a learned sink logit
    prompted: ClassVar[bool] = False  # its generation config's forced_decoder_ids are its decoder's prompt (Whisper)
    gguf: ClassVar[GgufForm | None] = None  # how it reads a GGUF file (attnx/models/gguf_form.py); None: it does not

    @functools.cached_property
    def stacks(self) -> tuple[Stack, ...]:
        """The model's named stacks of layers (attnx/models/stacks.py): by default one, a ``decoder`` or an
        ``encoder`` as the family is causal or not, each layer holding one self-attention over a text."""
        return (Stack.single(self.layers, causal=self.causal),)

    def attention(self, layer: int) -> Attention:
        """What layer ``layer``'s attention is: its kind and where its queries and keys come from."""
        return self.stacks[0].attentions[0]

    @property
    def tied(self) -> bool | None:
        """Whether a decoder's output layer reuses the input embeddings (``tie_word_embeddings``); None for
        encoders, whose checkpoints need not have an output layer."""
        return self.checkpoint.flag("tie_word_embeddings", True) if self.causal else None

    def __init__(self, checkpoint: Checkpoint, dtype: str = "float64") -> None:
        self.checkpoint = checkpoint
        self.working = dtype  # what the engine computes in (bfloat16 too), and where NumPy works on the host:
        self.dtype = np.dtype(host_dtype(dtype))
        self._output: np.ndarray | None = None  # the LM head's table, kept once read whole (``logits``)
        checkpoint.use_prefix(self.prefixes, self.probe, self.family)
        self.read_config()
        self.check_heads()
        self.check_counts()
        self.check_tensors()

    @classmethod
    def names(cls, class_name: str) -> bool:
        """True when ``class_name`` (an entry of config.json's ``architectures``) is one of this family's classes:
        a stem followed by ``Model``, ``LMHeadModel`` or ``For…`` (``Qwen2MoeForCausalLM`` is not a ``Qwen2``)."""
        return any(re.fullmatch(re.escape(stem) + CLASS_SUFFIX, class_name) for stem in cls.stems)

    def tensor_names(self) -> Iterable[str]:
        """Every tensor the family may read, under the prefix (optional ones included: a bias where it is held)."""
        raise NotImplementedError

    def check_tensors(self) -> None:
        """Refuse a checkpoint that holds a tensor the family would not read (a ModelError naming it): attnx would
        run the model without it. Buffers and the family's ``unused`` patterns are let through, and task heads after
        the last layer are kept in ``task_heads``."""
        ckpt = self.checkpoint
        read = {ckpt.prefix + name for name in self.tensor_names()} | set(self.outside)
        held = ckpt.keys()
        rest = sorted(name for name in held - read if not self.is_buffer(name) and not self.allowed(name))
        heads: dict[str, list[str]] = {}
        for name in rest:
            kind = self.task_head(name)
            if kind is not None:
                heads.setdefault(kind, []).append(name)
        self.task_heads = tuple(TaskHead(kind, tuple(names)) for kind, names in heads.items())
        left = [name for name in rest if self.task_head(name) is None]
        if left:
            kinds = sorted({re.sub(r"\.\d+\.", ".*.", name) for name in left[1:]})
            more = (
                f", nor {len(left) - 1} more ({', '.join(kinds[:3])}{', …' if len(kinds) > 3 else ''})" if kinds else ""
            )
            raise ModelError(
                f"{ckpt.file_of(left[0])}: tensor {left[0]!r} is not used by {self.name} ({self.family}){more}: attnx "
                f"would run the model without it, so {ckpt.config_name} and the weights disagree"
            )

    def task_head(self, name: str) -> str | None:
        """What task head tensor ``name`` (as stored) belongs to (``TASK_HEADS``), or None: ``lm_head.*`` only where
        the family reads no language-model head."""
        bare = name.removeprefix(self.checkpoint.prefix)
        for pattern, kind in TASK_HEADS:
            if any(fnmatch.fnmatchcase(n, pattern) for n in (name, bare)):
                return None if pattern == LM_HEADS and self.has_lm_head else kind
        return None

    def claimed_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """The tensors (under the prefix) whose shapes prove the counts config.json claims, each with the shape it
        implies: by default the token embeddings, ``[vocab_size, d_model]``; a family adds its heads' and experts'."""
        yield self.probe, (self.vocab_size, self.d_model)

    def check_counts(self) -> None:
        """Refuse counts config.json claims that the weights do not hold (``claimed_shapes``), from the tensors'
        headers, before anything is built per head, per expert or per token of the vocabulary."""
        for name, shape in self.claimed_shapes():
            self.checkpoint.claim(name, shape)

    def check_layers(self, keys: tuple[str, ...]) -> None:
        """Refuse more layers than the weights hold (counted as the distinct N of ``{prefix}{layer_stem}N.…``), before
        anything is built per layer: ``keys`` are where config.json may give the count."""
        ckpt, start = self.checkpoint, self.checkpoint.prefix + self.layer_stem
        held = self.held_layers(self.layer_stem)
        if self.layers > held:
            key = next((key for key in keys if key in ckpt.config), keys[0])
            raise ModelError(f"{ckpt.config_key(key)} claims {self.layers:,} layers, but {ckpt.weights_path} holds "
                             f"{held} ({start}N.…)")  # fmt: skip

    def held_layers(self, stem: str) -> int:
        """How many layers the weights hold under ``stem`` (the distinct N of ``{prefix}{stem}N.…``)."""
        start, held = self.checkpoint.prefix + stem, self.checkpoint.keys()
        found = {name[len(start) :].partition(".")[0] for name in held if name.startswith(start)}
        return sum(1 for n in found if n.isdigit() and len(n) < 20)

    def allowed(self, name: str) -> bool:
        """True when tensor ``name`` (as stored) is on the family's allow-list of tensors left unused."""
        bare = name.removeprefix(self.checkpoint.prefix)
        return any(fnmatch.fnmatchcase(n, pattern) for pattern in self.unused for n in (name, bare))

    def check_heads(self) -> None:
        """hidden_size must split into the heads (``head_dim`` wide each); ModelError where it cannot."""
        if self.d_model % self.heads:
            where = self.checkpoint.config_path
            raise ModelError(f"{where}: hidden size {self.d_model} is not divisible by {self.heads} heads")

    def read_config(self) -> None:
        """Set the sizes from config.json (ModelError for what this family cannot run)."""
        raise NotImplementedError

    def read_sizes(self, keys: Mapping[str, tuple[str, ...]], *, mlp_ratio: int | None, max_length: int) -> None:
        """The sizes from config.json, each under the first of its ``keys`` present (Hugging Face's usual name
        where ``keys`` gives none): layers, heads, K/V heads and head width (read only where ``keys`` names them,
        else one K/V head per head, hidden_size / heads wide), d_model, d_ff (absent: ``mlp_ratio`` × d_model,
        or missing when ``mlp_ratio`` is None), vocabulary and maximum length (absent: ``max_length``). The layers
        are checked against the weights at once (``check_layers``)."""
        ckpt, keys = self.checkpoint, {**SIZE_KEYS, **keys}
        self.layers = ckpt.integer(*keys["layers"])
        self.check_layers(keys["layers"])
        self.heads = ckpt.integer(*keys["heads"])
        self.kv_heads = ckpt.integer(*keys.get("kv_heads", ()), default=self.heads)
        self.d_model = ckpt.integer(*keys["d_model"])
        widths = keys.get("head_dim", ())
        if self.heads > self.d_model and not any(key in ckpt.config for key in widths):  # each head 0 wide
            key = next((key for key in keys["heads"] if key in ckpt.config), keys["heads"][0])
            raise ModelError(f"{ckpt.config_key(key)} claims {self.heads:,} heads, more than the {self.d_model:,} "
                             "columns of the hidden state they split")  # fmt: skip
        self.head_dim = ckpt.integer(*widths, default=self.d_model // self.heads)
        self.d_ff = ckpt.integer(*keys["d_ff"], default=None if mlp_ratio is None else mlp_ratio * self.d_model)
        self.vocab_size = ckpt.integer(*keys["vocab_size"])
        self.max_length = ckpt.integer(*keys["max_length"], default=max_length)

    def activation(
        self, key: str, default: str, *, aliases: Mapping[str, str] | None = None
    ) -> Callable[[Array], Array]:
        """The activation named by config key ``key`` (read through ``aliases``, where a family takes a name as
        another: Gemma's ``gelu`` is the tanh approximation); one attnx does not know is a ModelError."""
        name = self.checkpoint.text(key, default)
        name = (aliases or {}).get(name, name)
        self.activation_name = name
        if name not in ACTIVATIONS:
            raise ModelError(
                f"{self.checkpoint.config_path}: {key} {name!r} is not supported; supported: {', '.join(ACTIVATIONS)}"
            )
        return ACTIVATIONS[name]

    def weight(self, name: str, *alternatives: str, shape: Shape = None, prefixed: bool = True) -> np.ndarray:
        """A tensor of the checkpoint in the working dtype, its shape checked against ``shape`` first."""
        key = ("weight", name, alternatives, prefixed, self.dtype.name)
        return self.checkpoint.remember(key, lambda: self.checkpoint.tensor(
            name, *alternatives, shape=shape, prefixed=prefixed).astype(self.dtype, copy=False))  # fmt: skip

    def embed(self, encoded: Encoded) -> np.ndarray:
        """The residual stream entering layer 0, ``[token, d_model]``."""
        raise NotImplementedError

    def attention_spec(self, layer: int, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """Layer ``layer``'s attention on the residual stream ``stream`` entering it (an array of the engine the pass
        runs on: ``attnx.engines.arrays``), as a spec (its arrays NumPy's)."""
        raise NotImplementedError

    def after_attention(self, layer: int, stream: Array, projected: np.ndarray) -> Array:
        """The residual stream leaving layer ``layer``, from the one entering it and its attention's output (a NumPy
        array, moved where ``stream`` lives: ``arrays_of(stream).like``), on the engine ``stream`` lives on."""
        raise NotImplementedError

    def final(self, stream: Array) -> Array:
        """The model's last hidden state from the residual stream leaving its last layer (transformers'
        ``last_hidden_state``): a final norm where the family has one, else the stream itself."""
        return stream

    # A model of several stacks, or of layers holding several attentions, answers these four; a model of one stack
    # with one attention a layer (every family until encoder-decoders) answers them with the four above.

    @property
    def decoder_start(self) -> int | None:
        """The token a decoder of an encoder-decoder starts from (None: the model has no such decoder)."""
        return None

    def start_of(self, target: Encoded) -> int | None:
        """The token the decoder starts from when it reads ``target`` (a text's tokens) under teacher forcing: by
        default ``decoder_start``; mBART's is the target's last token, its language code."""
        return self.decoder_start

    def stack_embed(self, stack: Stack, encoded: Encoded | AudioInput | ImageInput) -> np.ndarray:
        """The residual stream entering layer 0 of ``stack``, ``[token, d_model]``, from a text (or, in a model with
        a stack that reads audio, from audio: ``attnx.models.audio``)."""
        if not isinstance(encoded, Encoded):
            raise ModelError(f"{self.checkpoint.name}: a {self.name} model reads text, not {encoded.kind.value}")
        return self.embed(encoded)

    def audio(self, samples: np.ndarray) -> AudioInput:
        """Mono samples as the input of the stack that reads audio (a family with one says how)."""
        raise ModelError(f"{self.checkpoint.name}: a {self.name} model reads text, not audio")

    def image(self, pixels: np.ndarray) -> ImageInput:
        """Preprocessed pixels ``[channel, height, width]`` as the input of the stack that reads images (a vision
        family says how: its leading tokens, its patch size)."""
        raise ModelError(f"{self.checkpoint.name}: a {self.name} model reads text, not images")

    def prompt(self, *, language: str | None = None, task: str | None = None) -> list[int] | None:
        """The tokens a decoder reads before a target's own (Whisper's); None: the target shifted right behind
        ``decoder_start`` (T5's)."""
        return None

    def site_spec(self, at: Site, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """The attention ``at`` names (a stack, a layer, which attention of the layer) on the stream entering it, as a
        spec; ``at.memory``: the output of the stack its keys come from, for a cross-attention."""
        return self.attention_spec(at.layer, stream, tokens, source)

    def site_after(self, at: Site, stream: Array, projected: np.ndarray) -> Array:
        """The stream leaving the attention ``at`` names (and, after a layer's last attention, the rest of the
        layer), from the stream entering it and the attention's projected output."""
        return self.after_attention(at.layer, stream, projected)

    def stack_final(self, stack: Stack, stream: Array) -> Array:
        """``stack``'s output from the stream leaving its last layer."""
        return self.final(stream)

    @property
    def has_lm_head(self) -> bool:
        """Whether the checkpoint can turn a hidden state into next-token logits (``logits``)."""
        return False

    def logits(self, hidden: Array) -> np.ndarray:
        """Next-token logits ``[token, vocab]`` from the last hidden state (only where ``has_lm_head``), put together
        from ``logit_blocks``."""
        logits: np.ndarray | None = None
        for columns, block in self.logit_blocks(hidden):
            if logits is None:
                logits = np.empty((block.shape[0], self.vocab_size), dtype=block.dtype)
            logits[:, columns] = block
        return logits if logits is not None else np.empty((hidden.shape[0], 0), dtype=self.dtype)

    def logit_blocks(self, hidden: Array) -> Iterator[tuple[slice, np.ndarray]]:
        """The logits of ``hidden`` ``[row, d_model]`` a block of vocabulary columns at a time, each block within the
        element cap: ``shape_logits(hidden @ W.T)``, the output table W (vocab × d_model: 525M elements for an 8B
        model) read once, in chunks of rows within the cap. A table within the element cap is read whole once
        and kept (an ablation sweep asks for logits per batch). Computed where ``hidden`` lives (a torch tensor: on
        its device, each chunk of the table moved there), each block handed back as a NumPy array."""
        xp = arrays_of(hidden)
        per_block = self.checkpoint.limits.rows_per_chunk(hidden.shape[0])  # vocabulary columns per block
        for index, table in self.output_chunks():
            for at in range(0, len(table), per_block):
                part = table[at : at + per_block]
                block = xp.host(self.shape_logits(hidden @ xp.like(part).T))
                yield slice(index.start + at, index.start + at + len(part)), block

    def output_chunks(self) -> Iterator[tuple[slice, np.ndarray]]:
        """The output table's rows in the working dtype, in chunks within the element cap (``output_tensor``)."""
        if self._output is not None:
            yield slice(0, len(self._output)), self._output
            return
        ref, ckpt = self.output_tensor(), self.checkpoint
        (vocab, _), chunks = ckpt.row_chunks(ref.name, *ref.alternatives, shape=ref.shape, prefixed=ref.prefixed)
        for index, rows in chunks:  # one chunk held at a time
            block = rows.astype(self.dtype, copy=False)
            if index.start == 0 and index.stop == vocab:  # the whole table fit one chunk: keep it
                self._output = block
            yield index, block

    def shape_logits(self, logits: Array) -> Array:
        """Hook: what a family does to ``hidden @ W.T`` (a soft cap, a scale); by default nothing."""
        return logits

    def output_tensor(self) -> WeightRef:
        """Which checkpoint tensor holds the language-model head's ``[vocab, d_model]`` weights (a family with
        one says where); ``logits`` reads it."""
        raise ModelError(f"{self.checkpoint.name}: the checkpoint has no language-model head")

    def is_buffer(self, name: str) -> bool:
        """True for stored tensors that are not learned (position ids, causal-mask buffers)."""
        return name.endswith("position_ids")


class Stacked(Architecture):
    """A family of several stacks (an encoder-decoder), which answers the site hooks (``stack_embed``, ``site_spec``,
    ``site_after``, ``stack_final``); the one-stack methods are its first stack's, the one the attention commands
    address by default (the encoder)."""

    def attention_spec(self, layer: int, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """Layer ``layer`` of the first stack."""
        return self.site_spec(Site(self.stacks[0], layer), stream, tokens, source)

    def after_attention(self, layer: int, stream: Array, projected: np.ndarray) -> Array:
        """The rest of the first stack's layer ``layer``."""
        return self.site_after(Site(self.stacks[0], layer), stream, projected)

    def final(self, stream: Array) -> Array:
        """The first stack's output."""
        return self.stack_final(self.stacks[0], stream)
