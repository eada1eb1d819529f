"""Real models: a local Hugging Face checkpoint run by attnx's own forward pass, one layer handed out as a spec.

The engines know nothing about models. ``attnx.workflows.load_model_spec`` tokenizes a text, runs the model's
layers before the one asked for (each layer's attention through ``attnx.engines.compute`` on the
selected engine, the rest in NumPy) and returns that layer's attention as an ordinary
``AttentionSpec``: its input x, W_q, W_k, W_v, W_o and biases, its mask and its token labels.
Layers and heads are counted from 0, here and on the command line (``--layer 0`` is the first layer),
as in transformers' ``outputs.attentions[0]`` and TransformerLens' ``L0H3``.

Every input cap applies: config.json and tokenizer.json are bounded in bytes (and config.json in
depth) before they are parsed, each tensor is checked against the caps before it is read, and
once the text is tokenized, the arrays the forward pass will build (the tokens, the residual
stream, the MLP's hidden layer and each computed layer's ``[head, query, key]`` scores) are
checked before the first layer runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from attnx.core.spec import Origin
from attnx.core.tensors import PROJECTED, TensorName
from attnx.engines.arrays import Array, host
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import LimitError, ModelError
from attnx.limits import Limits
from attnx.models.architecture import Architecture, ModelInfo
from attnx.models.audio import AudioInput
from attnx.models.checkpoint import TOKENIZER, Checkpoint
from attnx.models.families import FAMILIES
from attnx.models.stacks import InputKind, Memory, Site, Stack
from attnx.models.tokenize import Encoded, TextTokenizer
from attnx.models.vision import ImageInput

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec

__all__ = [
    "ARCHITECTURES",
    "ForwardPass",
    "Model",
    "ModelInfo",
    "Progress",
    "describe",
    "open_model",
]

# Each family by its model_type: the registry of attnx/models/families/__init__.py.
ARCHITECTURES: dict[str, type[Architecture]] = {family.name: family for family in FAMILIES}
SUPPORTED = ", ".join(ARCHITECTURES)

# The facts of ModelInfo that the architecture holds under the same name.
ARCHITECTURE_FACTS = (
    "family", "design", "layers", "heads", "kv_heads", "head_dim", "d_model", "d_ff", "vocab_size", "max_length",
    "causal", "rotary", "rotaries", "windows", "softcap", "qk_norm", "qk_norm_over", "gated", "mixture", "sinks",
    "task_heads", "stacks", "position_bias", "positions",
)  # fmt: skip

# The heads a forward pass drops: per attention, (layer, which), or per layer (its first attention) -> heads.
Drop = Mapping[int, tuple[int, ...]] | Mapping[tuple[int, int], tuple[int, ...]]

# Called after each layer the forward pass runs: (layers done, layers to run).
Progress = Callable[[int, int], None]


def architecture_of(checkpoint: Checkpoint) -> type[Architecture]:
    """The family of a checkpoint from config.json's ``model_type`` (else its ``architectures``). Where both are
    given, every class ``architectures`` names must be one of that family's: one that is not is a ModelError."""
    where = checkpoint.config_path
    model_type, named = checkpoint.config.get("model_type"), checkpoint.texts("architectures")
    if model_type is None:
        model_type = next((f.name for f in FAMILIES for name in named if f.names(name)), None)
    if not isinstance(model_type, str) or model_type not in ARCHITECTURES:
        raise ModelError(f"{where}: model_type {model_type!r} is not supported; attnx runs {SUPPORTED}")
    family = ARCHITECTURES[model_type]
    other = next((name for name in named if not family.names(name)), None)
    if other is not None:
        stem = family.stems[0]
        raise ModelError(
            f"{where}: architectures names {other}, not a {model_type} class ({stem}ForCausalLM, {stem}Model, …): "
            "model_type and architectures disagree, and attnx does not guess which is right"
        )
    return family


class Model:
    """An open checkpoint: its family and config, its weights (read lazily) and its tokenizer.

    ``dtype`` is the forward pass's working dtype (bfloat16 and float16 on the torch engine alone: NumPy's arrays
    on the host are float32 then); ``limits`` the caps its files and the arrays of a forward pass are held to
    (default: ``Limits.from_env()``).
    """

    def __init__(self, path: str | Path, dtype: str = "float64", limits: Limits | None = None) -> None:
        from attnx.models.gguf import GgufCheckpoint, open_checkpoint
        from attnx.models.spm_tokenizer import read_pieces, sentencepiece_files

        self.limits = limits or Limits.from_env()
        self.checkpoint: Checkpoint = open_checkpoint(path, self.limits)  # a folder, a GGUF file, ollama:NAME
        self._tokenizer: TextTokenizer | None = None
        self._build_tokenizer: Callable[[], TextTokenizer] | None = None  # a GGUF file's: built when first needed
        try:
            self.architecture = architecture_of(self.checkpoint)(self.checkpoint, dtype)
            ckpt = self.checkpoint
            if isinstance(ckpt, GgufCheckpoint):
                self._build_tokenizer = lambda: TextTokenizer(ckpt.gguf, self.limits, built=ckpt.tokenizer())
            elif not (ckpt.path / TOKENIZER).is_file() and self.stacks[0].reads is InputKind.IMAGE:
                pass  # a vision model's folder: no tokenizer (``tokenizer`` says so where text is asked of it)
            elif not (ckpt.path / TOKENIZER).is_file() and sentencepiece_files(ckpt.path):
                built = read_pieces(ckpt.path, self.limits)  # Marian's or T5's SentencePiece files
                self._tokenizer = TextTokenizer(built.path, self.limits, built=built)
            else:
                self._tokenizer = TextTokenizer(ckpt.file(TOKENIZER), self.limits)
        except BaseException:
            self.checkpoint.close()
            raise

    @property
    def tokenizer(self) -> TextTokenizer:
        """The checkpoint's tokenizer: a folder's tokenizer.json is read when the model opens, a GGUF file's
        tokenizer built from its metadata the first time a text is tokenized (describing the file needs none)."""
        if self._tokenizer is None:
            build, self._build_tokenizer = self._build_tokenizer, None
            if build is None:  # a vision model's folder has none (a folder's that failed to read raised at opening)
                raise ModelError(f"{self.checkpoint.name}: a {self.architecture.name} model reads "
                                 f"{self.stack.reads.value}s and has no tokenizer: it reads no text")  # fmt: skip
            self._tokenizer = build()
        return self._tokenizer

    def tokenizer_facts(self) -> tuple[str, int, tuple[str, ...]]:
        """The tokenizer's kind, vocabulary size (added tokens included) and the padding and truncation its file
        asks for; a GGUF file's from its metadata, without building the tokenizer."""
        from attnx.models.gguf import GgufCheckpoint

        if self._tokenizer is None and isinstance(self.checkpoint, GgufCheckpoint):
            return (*self.checkpoint.tokenizer_facts(), ())
        if self._tokenizer is None and self._build_tokenizer is None:  # a vision model's folder
            return "none", 0, ()
        return self.tokenizer.kind, self.tokenizer.vocab_size, self.tokenizer.stored

    @property
    def stacks(self) -> tuple[Stack, ...]:
        """The model's named stacks of layers (attnx/models/stacks.py)."""
        return self.architecture.stacks

    @property
    def stack(self) -> Stack:
        """The stack the attention commands address: a model's only one (every family attnx reads has one)."""
        return self.stacks[0]

    def encoder_decoder(self, why: str) -> tuple[Stack, Stack]:
        """The encoder and the decoder whose cross-attention reads it; a model without one is a ModelError saying
        ``why`` one is needed."""
        decoder = next((s for s in self.stacks if any(not a.is_self for a in s.attentions)), None)
        if decoder is None:
            raise ModelError(f"{self.checkpoint.name}: a {self.architecture.name} model has no cross-attention: {why}")
        keys = next(a.keys for a in decoder.attentions if not a.is_self)
        (encoder,) = (s for s in self.stacks if s.name == keys)
        return encoder, decoder

    @property
    def predicts(self) -> bool:
        """Whether ``stack``'s output feeds the LM head (next-token logits): a decoder-only model's, where it has one;
        never an encoder-decoder's encoder, whose output the decoder reads."""
        return self.architecture.has_lm_head and self.stack is self.stacks[-1]

    @property
    def layers(self) -> int:
        """Number of layers of ``stack``."""
        return self.stack.layers

    def source(self, layer: int, at: Site | None = None) -> str:
        """How specs of layer ``layer`` (from 0) name themselves: ``"DIR (bert), layer 3 of 6"``; in a model of several
        stacks, with the stack and the attention ``at`` names: ``"DIR (t5), decoder layer 1 of 2, cross-attention"``."""
        where = f"{self.checkpoint.name} ({self.architecture.name})"
        if at is None or len(self.stacks) == 1:
            return f"{where}, layer {layer} of {self.layers}"
        return f"{where}, {at.stack.name} layer {layer} of {at.stack.layers}, {at.attention.kind.label}"

    def check_layer(self, layer: int, stack: Stack | None = None) -> int:
        """Layer ``layer`` of ``stack`` (the model's ``stack`` unless given) counted from 0 (-1: the last, as in
        Python); one out of range is a ModelError that gives the range."""
        from attnx.core.counting import from_end, span

        stack = stack or self.stack
        resolved = from_end(layer, stack.layers)
        if resolved is None:
            whose = "the model" if len(self.stacks) == 1 else f"its {stack.name}"
            raise ModelError(f"{self.checkpoint.name}: layer {layer} does not exist: {whose} has layers "
                             f"{span(stack.layers)}")  # fmt: skip
        return resolved

    def check_sizes(self, n: int, *, heads: int | None = None, layer: int = 0) -> None:
        """Refuse, before anything runs, a text of ``n`` tokens whose forward pass up to ``layer`` would build
        an array over the caps: the tokens (``max_dimension``), the ``[head, query, key]`` scores of a layer
        (``heads``: the model's unless given), the residual stream and, past the first layer, the MLP's hidden
        layer (``max_elements``, and ``max_dimension`` per axis).
        """
        arch, limits = self.architecture, self.limits
        if n > limits.max_dimension:
            raise LimitError(f"{self.checkpoint.name}: {limits.exceeded('max_dimension', f'a text of {n:,} tokens')}")
        arrays = [("the scores", (heads or arch.heads, n, n)), ("the residual stream", (n, arch.d_model))]
        if layer > 0:
            arrays.append(("the MLP's hidden layer", (n, arch.d_ff)))
        for what, shape in arrays:
            problem = limits.shape_problem(shape)
            if problem:
                raise LimitError(f"{self.checkpoint.name}: {what}: {problem}")

    def encode(self, text: str) -> Encoded:
        """``text`` as the model's tokens (special tokens included; never padded or truncated)."""
        arch = self.architecture
        return self.tokenizer.encode(text, max_length=arch.max_length, vocab_size=arch.vocab_size)

    def encode_target(self, target: str, *, language: str | None = None, task: str | None = None) -> Encoded:
        """A target text as the decoder of an encoder-decoder reads it under teacher forcing: its start token, then the
        target's tokens but the last (transformers' shift right of the labels; mBART starts from the target's language
        code); a model that says its own prompt (Whisper: start, ``language``, ``task``, no timestamps) reads the
        prompt, then the text's tokens."""
        arch = self.architecture
        if arch.decoder_start is None:
            raise ModelError(f"{self.checkpoint.name}: a {arch.name} model has no decoder to read a target")
        prompt = arch.prompt(language=language, task=task)
        if prompt is not None:
            return self.tokenizer.after(prompt, target, max_length=arch.max_length, vocab_size=arch.vocab_size)
        if language is not None or task is not None:
            raise ModelError(f"{self.checkpoint.name}: a {arch.name} model takes no language or task")
        vocab = getattr(arch, "target_vocab", arch.vocab_size)  # a decoder's own vocabulary, where it has one
        encoded = self.tokenizer.encode(target, max_length=arch.max_length, vocab_size=vocab, target=True)
        start = arch.start_of(encoded)
        if start is None:  # a family whose decoder starts from nothing it can name
            raise ModelError(f"{self.checkpoint.name}: a {arch.name} model has no decoder start for this target")
        return self.tokenizer.shifted(encoded, start)

    def decoder_prompt(self, *, language: str | None = None, task: str | None = None) -> list[int]:
        """The tokens a decoder of an encoder-decoder starts from when it writes: its start token, or the prompt the
        model says (Whisper's)."""
        arch = self.architecture
        if arch.decoder_start is None:
            raise ModelError(f"{self.checkpoint.name}: a {arch.name} model has no decoder to write with")
        prompt = arch.prompt(language=language, task=task)
        return list(prompt) if prompt is not None else [arch.decoder_start]

    def encode_audio(self, samples: np.ndarray) -> AudioInput:
        """Mono 16 kHz samples (``attnx.io.audio.read_wav``) as the input of the model's stack that reads audio; its
        ``warnings`` say what was done (audio past the window cut)."""
        return self.architecture.audio(samples)

    def encode_image(self, pixels: np.ndarray) -> ImageInput:
        """Preprocessed pixels ``[channel, height, width]`` (as the checkpoint's preprocessor_config.json makes them)
        as the input of the model's stack that reads images: its patch grid and the name of every position."""
        return self.architecture.image(pixels)

    def run(
        self,
        text: str | Encoded | AudioInput | ImageInput,
        *,
        on: Placement = NUMPY,
        heads: int | None = None,
        layer: int = 0,
        stack: Stack | None = None,
        memory: Memory | None = None,
    ) -> ForwardPass:
        """A forward pass of ``text`` (or tokens already encoded) ``on`` an engine and device through ``stack`` (the
        model's ``stack`` unless given; ``memory``: the encoder's output a decoder's cross-attention reads), about to
        enter layer 0, once ``check_sizes`` has passed it for the layers up to ``layer`` (the last whose attention
        will be computed, with ``heads`` heads)."""
        stack = stack or self.stack
        encoded = self.encode(text) if isinstance(text, str) else text
        if encoded.kind is not stack.reads:
            raise ModelError(f"{self.checkpoint.name}: its {stack.name} reads {stack.reads.value}, "
                             f"not {encoded.kind.value}")  # fmt: skip
        if memory is None and any(not attention.is_self for attention in stack.attentions):
            raise ModelError(f"{self.checkpoint.name}: its {stack.name} attends to another stack's output: give it")
        self.check_sizes(len(encoded.tokens), heads=heads, layer=layer)
        return ForwardPass(self, encoded, on=on, stack=stack, memory=memory)

    def info(self) -> ModelInfo:
        """What the checkpoint holds (read from config.json and the weights' header only; a GGUF file's from its
        header: its metadata and how each tensor is stored)."""
        from attnx.models.gguf import GgufCheckpoint

        arch, ckpt = self.architecture, self.checkpoint
        tokenizer, vocab_size, stored = self.tokenizer_facts()
        shapes = ckpt.shapes()
        learned = {name: shape for name, (shape, _) in shapes.items() if not arch.is_buffer(name)}
        return ModelInfo(
            path=ckpt.name,
            architecture=arch.name,
            model_type=ckpt.text("model_type", arch.name),
            architectures=ckpt.texts("architectures"),
            activation=arch.activation_name,
            parameters=sum(math.prod(shape) for shape in learned.values()),
            dtypes=tuple(sorted({dtype for name, (_, dtype) in shapes.items() if name in learned})),
            size_bytes=sum(path.stat().st_size for path in ckpt.weight_files()),
            weight_files=len(ckpt.weight_files()),
            tokenizer=tokenizer,
            tokenizer_vocab_size=vocab_size,
            tokenizer_settings=stored,
            tied_embeddings=arch.tied,
            gguf=ckpt.summary() if isinstance(ckpt, GgufCheckpoint) else None,
            **{name: getattr(arch, name) for name in ARCHITECTURE_FACTS},
        )

    def close(self) -> None:
        """Let go of the weights file."""
        self.checkpoint.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_model(path: str | Path, dtype: str = "float64", limits: Limits | None = None) -> Model:
    """Open the checkpoint folder ``path`` (config.json, model.safetensors, tokenizer.json) under ``limits``."""
    return Model(path, dtype, limits)


class ForwardPass:
    """One text going through a stack of a model (``stack``: the model's ``stack`` unless given) layer by layer.

    ``layer`` is the layer the residual stream is about to enter, ``which`` the attention of that layer it is about to
    enter (0 where a layer has one; a decoder of an encoder-decoder has its self-attention, 0, then its
    cross-attention over ``memory``, 1). ``spec()`` is that attention as a spec; ``step(needs)`` computes it on the
    engine (``needs`` as for ``compute``, ``projected`` always added) and moves on. The rest of a layer (residuals,
    LayerNorms, MLP) runs only when the next spec is asked for, so the last layer's MLP never runs unless the
    stack's output is asked for (``finish``).

    ``drop`` maps an attention, ``(layer, which)``, to the heads (from 0) whose output it zeroes before W_o: an
    ablation, as transformers' ``head_mask`` did (0 on a head's weights after the softmax). A key that is a layer
    alone names the layer's first attention (its only one but in a decoder of an encoder-decoder, where it is the
    causal self-attention: the cross-attention is ``(layer, 1)``). ``branch`` copies the pass where it stands, so an
    ablation from layer l on reuses the layers before it.

    The residual stream stays where the pass runs (``on``, in the model's working dtype; ``arrays``: NumPy's, or
    torch tensors on the torch engine's device), so norms, MLPs and residual adds run there too; a layer's weights
    are moved there as it needs them. What a pass hands out (``stream``, ``finish``, specs, results) is NumPy's.
    """

    def __init__(
        self,
        model: Model,
        encoded: Encoded | AudioInput | ImageInput,
        *,
        on: Placement = NUMPY,
        drop: Drop | None = None,
        stack: Stack | None = None,
        memory: Memory | None = None,
    ) -> None:
        self.model = model
        self.stack = stack or model.stack
        self.memory = memory
        self.tokens = encoded.tokens
        self.special_keys = tuple(i for i, flag in enumerate(encoded.special) if flag)  # [CLS], <s>, …
        self.on = on.using(model.architecture.working)
        self.drop = attention_drops(drop)
        self.layer, self.which = 0, 0
        self.arrays = self.on.arrays()
        self._stream: Array = self.arrays.like(model.architecture.stack_embed(self.stack, encoded))  # (N, d_model)
        self._pending: np.ndarray | None = None  # the projected output of the attention ``_passed`` names
        self._passed = self.site()

    def branch(self, drop: Drop | None = None) -> ForwardPass:
        """A copy of this pass where it stands, going on with ``drop`` (layers before ``layer`` have run)."""
        copy = object.__new__(ForwardPass)
        copy.__dict__.update(self.__dict__)
        copy.drop = attention_drops(drop)
        return copy

    def dropped(self) -> tuple[int, ...]:
        """The heads dropped at the attention the stream is about to enter (none: ``()``)."""
        return self.drop.get((self.layer, self.which), ())

    def owing(self) -> tuple[Site, Array, np.ndarray] | None:
        """While the rest of the last attention (residuals, norms, and after a layer's last attention its MLP) has
        not run: where that attention is, the stream entering it (the engine's array) and its projected output; else
        None. ``attnx.models.lockstep`` runs it for many passes at once."""
        return None if self._pending is None else (self._passed, self._stream, self._pending)

    def settle(self, stream: Array) -> None:
        """Take ``stream`` as the one leaving the layer ``owing`` names, its rest run elsewhere."""
        self._stream, self._pending = stream, None

    def stream(self) -> np.ndarray:
        """The residual stream entering the current layer, ``[token, d_model]``: once every layer has run,
        the one leaving the last layer (before any final norm)."""
        return host(self.current())

    def current(self) -> Array:
        """``stream``, as the engine holds it (a torch tensor on the torch engine)."""
        if self._pending is not None:
            self._stream = self.model.architecture.site_after(self._passed, self._stream, self._pending)
            self._pending = None
        return self._stream

    def site(self) -> Site:
        """Where the stream is about to enter: the stack, the layer and which of its attentions."""
        return Site(self.stack, self.layer, self.which, self.memory)

    def spec(self) -> AttentionSpec:
        """The attention the stream is about to enter (its dropped heads set, if any)."""
        stream = self.current()
        self.model.check_layer(self.layer, self.stack)
        at = self.site()
        source = self.model.source(self.layer, at)
        spec = self.model.architecture.site_spec(at, stream, self.tokens, source)
        origin = Origin(self.model.checkpoint.name, at.stack.name, self.layer, at.attention.kind.value)
        spec = dataclasses.replace(spec, special_keys=self.special_keys, limits=self.model.limits, origin=origin)
        dropped = self.dropped()
        return spec.with_settings(dropped_heads=tuple(dropped)) if dropped else spec

    def step(self, needs: Collection[TensorName] = (), spec: AttentionSpec | None = None) -> AttentionResult:
        """Compute the current layer's attention on the engine (also ``needs``) and move to the next layer;
        ``spec``: the layer's spec, when the caller already made it with ``spec()``."""
        spec = spec or self.spec()
        result = self.on.compute(spec, needs={PROJECTED, *needs})
        self.take(result.projected)
        return result

    def finish(self) -> np.ndarray:
        """Run the layers left and return the model's last hidden state ``[token, d_model]`` (final norm applied)."""
        while self.layer < self.stack.layers:
            self.step()
        return host(self.model.architecture.stack_final(self.stack, self.current()))

    def take(self, projected: np.ndarray | None) -> None:
        """``step`` with the current attention's projected output computed elsewhere (``attnx.models.lockstep``
        computes many passes' together): move to the next attention (the next layer's first) with it."""
        self._pending, self._passed = projected, self.site()
        self.which += 1
        if self.which == len(self.stack.attentions):
            self.layer, self.which = self.layer + 1, 0


def attention_drops(drop: Drop | None) -> dict[tuple[int, int], tuple[int, ...]]:
    """``ForwardPass``'s ``drop`` keyed by attention, ``(layer, which)``: a key that is a layer alone is ``(layer, 0)``,
    the layer's first attention."""
    found: dict[tuple[int, int], tuple[int, ...]] = {}
    for key, heads in (drop or {}).items():
        at = (key, 0) if isinstance(key, int) else (int(key[0]), int(key[1]))
        found[at] = (*found.get(at, ()), *heads)
    return found


def describe(path: str | Path, limits: Limits | None = None) -> ModelInfo:
    """What the checkpoint folder ``path`` holds: family, layers, heads, sizes, vocabulary, maximum length."""
    with open_model(path, limits=limits) as model:
        return model.info()
