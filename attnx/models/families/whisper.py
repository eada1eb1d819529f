"""Whisper: an encoder over log-mel features of 30 s of audio and a decoder over text, as transformers computes them.

The encoder: conv1 (kernel 3, padding 1) → GELU → conv2 (kernel 3, stride 2, padding 1) → GELU turns the features
``[mel, 3000]`` into ``[1500, d_model]``, plus ``embed_positions`` (sinusoids, stored in the file); then pre-LN layers
(h += self_attn(LN(h)); h += fc2(GELU(fc1(LN(h))))) and a final ``layer_norm``. The decoder: token embeddings plus
learned positions; pre-LN layers of causal self-attention, cross-attention over the encoder's output
(``encoder_attn``) and the MLP; a final ``layer_norm``; the LM head ``proj_out`` tied to the token embeddings unless
the file holds its own. q is scaled by head_dim^-0.5 before q·k (the same math as attnx's 1/√d_k); k_proj has no
bias. ``scale_embedding`` is read by transformers and never applied: attnx does the same.

The decoder's prompt (``prompt_ids``) is what transformers' ``generate`` puts first, from generation_config.json:
``decoder_start_token_id`` (``<|startoftranscript|>``), the language, the task and ``<|notimestamps|>``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from attnx.core.spec import AttentionSpec, Linear
from attnx.engines.arrays import Array, arrays_of, host
from attnx.errors import ModelError
from attnx.models.architecture import Stacked, WeightRef, weights_and_biases
from attnx.models.audio import HOP, LENGTH, N_FFT, RATE, SECONDS, AudioInput, audio_input
from attnx.models.checkpoint import Checkpoint
from attnx.models.nn import dense, layer_norm
from attnx.models.stacks import AttentionKind, InputKind, Site, Stack
from attnx.models.tokenize import Encoded
from attnx.models.vision import ImageInput

ENCODER, DECODER = "encoder", "decoder"
PROJ_OUT = "proj_out.weight"
EPS = 1e-5  # torch's LayerNorm default: Whisper's config has no key for it
GENERATION, PREPROCESSOR = "generation_config.json", "preprocessor_config.json"
TASKS = ("transcribe", "translate")
# What preprocessor_config.json may say, each with the only value attnx computes (besides ``feature_size``).
EXTRACTOR = {"sampling_rate": RATE, "n_fft": N_FFT, "hop_length": HOP, "chunk_length": SECONDS, "n_samples": LENGTH,
             "nb_max_frames": LENGTH // HOP, "padding_value": 0.0, "dither": 0.0, "do_normalize": False}  # fmt: skip


def token_of(value: Any, where: str, vocab: int) -> int:
    """A token id read from a generation config: a whole number within the vocabulary; else a ModelError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
        raise ModelError(f"{where} must be a token id from 0 to {vocab - 1}, got {value!r}")
    return value


def prompt_ids(
    generation: Mapping[str, Any], vocab: int, *, language: str | None = None, task: str | None = None, where: str = ""
) -> list[int]:
    """The tokens the decoder starts from, as transformers' ``WhisperGenerationMixin._retrieve_init_tokens`` builds
    them from ``generation`` (generation_config.json) without timestamps: ``decoder_start_token_id``; with neither
    ``language`` nor ``task`` given, the tokens ``forced_decoder_ids`` forces at positions 1, 2, …; the ``language``
    (a code, ``en``, or its token, ``<|en|>``, looked up in ``lang_to_id``) in place of a forced one; the ``task``
    (``task_to_id``; ``transcribe`` where a language is given and no task is there); ``no_timestamps_token_id``.
    A multilingual model (``lang_to_id``) with no language named anywhere is a ModelError: transformers would detect
    the language by running the model, which attnx does not guess."""

    def entry(key: str, value: Any) -> int:
        return token_of(value, f"{where}{key}", vocab)

    init = [entry("decoder_start_token_id", generation.get("decoder_start_token_id"))]
    forced = generation.get("forced_decoder_ids")
    if language is None and task is None and forced:
        if not isinstance(forced, list) or not all(isinstance(p, list) and len(p) == 2 for p in forced):
            raise ModelError(f"{where}forced_decoder_ids must be a list of [position, token id] pairs")
        for position, (at, token) in enumerate(forced, start=1):
            if at != position:
                raise ModelError(f"{where}forced_decoder_ids must force positions 1, 2, … in order, got {forced!r}")
            init.append(-1 if token is None else entry("forced_decoder_ids", token))
    languages, tasks = (mapping_of(generation, key, where, vocab) for key in ("lang_to_id", "task_to_id"))
    if language is not None:
        code = language.strip().lower()
        name = code if code.startswith("<|") else f"<|{code}|>"
        if name not in languages:
            known = ", ".join(sorted(languages)[:8]) or "none"
            raise ModelError(f"{where}lang_to_id has no {name!r}: name a language it holds ({known}, …) as a code, en")
        init[1:2] = [languages[name]]
    elif languages and (len(init) < 2 or init[1] == -1):
        raise ModelError(f"{where.rstrip(': ') or 'the model'}: a multilingual Whisper needs a language (en): "
                         "transformers would detect it by running the model; attnx does not guess")  # fmt: skip
    if task is not None:
        if task not in TASKS or task not in tasks:
            raise ModelError(f"a Whisper task is transcribe or translate (as task_to_id holds it), not {task!r}")
        init.append(tasks[task])
    elif language is not None and tasks and not set(tasks.values()) & set(init):
        if "transcribe" not in tasks:
            raise ModelError(f"{where}task_to_id has no 'transcribe'")
        init.append(tasks["transcribe"])
    stop = generation.get("no_timestamps_token_id")
    if stop is not None and init[-1] != entry("no_timestamps_token_id", stop):
        init.append(stop)
    return [token for token in init if token != -1]


def mapping_of(generation: Mapping[str, Any], key: str, where: str, vocab: int) -> dict[str, int]:
    """A ``{name: token id}`` object of a generation config (empty where absent)."""
    value = generation.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(name, str) for name in value):
        raise ModelError(f"{where}{key} must be an object of token ids")
    return {name: token_of(token, f"{where}{key}[{name!r}]", vocab) for name, token in value.items()}


class Whisper(Stacked):
    """Whisper's encoder-decoder (``WhisperForConditionalGeneration``, ``WhisperModel``) and its encoder alone
    (``WhisperForAudioClassification``, its projector and classifier not read)."""

    name = "whisper"
    family = "Whisper"
    design = "pre-LN encoder-decoder over log-mel audio features"
    prefixes = ("model.", "")
    probe = "encoder.conv1.weight"
    causal = False
    stems = ("Whisper",)
    layer_stem = "encoder.layers."
    prompted = True
    outside = (PROJ_OUT,)
    activation_name = "gelu"

    def __init__(self, checkpoint: Checkpoint, dtype: str = "float64") -> None:
        held = checkpoint.keys()
        if not any(name.startswith(p + "encoder.") for name in held for p in self.prefixes):
            raise ModelError(f"{checkpoint.weights_path}: a Whisper decoder without its encoder (WhisperForCausalLM) "
                             "is not read: attnx runs Whisper from audio, through its encoder")  # fmt: skip
        super().__init__(checkpoint, dtype)

    def read_config(self) -> None:
        """The sizes of both stacks (their heads and MLP widths equal), the mel bins, the positions and the
        activation; the feature extractor's settings from preprocessor_config.json where the folder has one."""
        ckpt = self.checkpoint
        keys = {"layers": ("encoder_layers",), "heads": ("encoder_attention_heads",), "d_model": ("d_model",),
                "d_ff": ("encoder_ffn_dim",), "max_length": ("max_target_positions",)}  # fmt: skip
        self.read_sizes(keys, mlp_ratio=None, max_length=448)
        for key, same in (("decoder_attention_heads", self.heads), ("decoder_ffn_dim", self.d_ff)):
            if ckpt.integer(key, default=same) != same:
                raise ModelError(f"{ckpt.config_key(key)} differs from the encoder's; attnx reads Whisper models "
                                 "whose two stacks have the same heads and MLP width")  # fmt: skip
        self.bins = ckpt.integer("num_mel_bins", default=80)
        self.sources = ckpt.integer("max_source_positions", default=1500)
        self.positions = "encoder: sinusoids (stored); decoder: learned embeddings"
        self.decoder_layers = ckpt.integer("decoder_layers", default=self.layers)
        held = self.held_layers("decoder.layers.")
        if held == 0:
            self.decoder_layers = 0
        elif self.decoder_layers > held:
            raise ModelError(f"{ckpt.config_key('decoder_layers')} claims {self.decoder_layers:,} layers, but "
                             f"{ckpt.weights_path} holds {held} (decoder.layers.N.…)")  # fmt: skip
        self.act = self.activation("activation_function", "gelu")
        self._start = ckpt.config.get("decoder_start_token_id", 50257)

    @functools.cached_property
    def generation(self) -> dict[str, Any]:
        """generation_config.json (config.json's ``decoder_start_token_id`` where it has none; empty otherwise)."""
        found = self.checkpoint.optional_json(GENERATION) or {}
        return {"decoder_start_token_id": self._start, **found}

    @functools.cached_property
    def preprocessor(self) -> dict[str, Any]:
        """preprocessor_config.json, checked: what it says must be what attnx computes (``EXTRACTOR``), its
        ``feature_size`` the model's mel bins."""
        found = self.checkpoint.optional_json(PREPROCESSOR) or {}
        where = self.checkpoint.path / PREPROCESSOR
        for key, value in EXTRACTOR.items():
            if key in found and found[key] != value:
                raise ModelError(f"{where}: {key} {found[key]!r} is not what attnx computes ({value!r})")
        bins = found.get("feature_size", self.bins)
        if bins != self.bins:
            raise ModelError(f"{where}: feature_size {bins!r} differs from config.json's num_mel_bins {self.bins}")
        return found

    @property
    def decoder_start(self) -> int | None:
        """``decoder_start_token_id`` (``<|startoftranscript|>``); None for an encoder alone."""
        if not self.decoder_layers:
            return None
        return token_of(self._start, self.checkpoint.config_key("decoder_start_token_id"), self.vocab_size)

    def prompt(self, *, language: str | None = None, task: str | None = None) -> list[int] | None:
        """The decoder's prompt tokens (``prompt_ids`` on generation_config.json)."""
        if not self.decoder_layers:
            return None
        where = f"{self.checkpoint.path / GENERATION}: "
        return prompt_ids(self.generation, self.vocab_size, language=language, task=task, where=where)

    def alignment_heads(self) -> tuple[tuple[int, int], ...]:
        """The decoder's [layer, head] pairs (from 0) whose cross-attention times the words: generation_config.json's
        ``alignment_heads``, checked; a ModelError where it names none (word timestamps need them, as transformers'
        ``return_token_timestamps`` does)."""
        where = self.checkpoint.path / GENERATION
        found = self.generation.get("alignment_heads")
        if not self.decoder_layers:
            raise ModelError(f"{self.checkpoint.name}: an encoder alone has no decoder to time the words it writes")
        if found is None or found == []:
            raise ModelError(f"{where} names no alignment_heads: word timestamps need the [layer, head] pairs whose "
                             "cross-attention follows the audio (the Hub's Whisper folders list them)")  # fmt: skip
        pairs = found if isinstance(found, list) else None
        if pairs is None or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise ModelError(f"{where}: alignment_heads must be a list of [layer, head] pairs, got {found!r:.60}")
        for layer, head in pairs:
            for value, count, what in ((layer, self.decoder_layers, "decoder layer"), (head, self.heads, "head")):
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
                    raise ModelError(f"{where}: alignment_heads names {what} {value!r}; the model's {what}s are 0 to "
                                     f"{count - 1}")  # fmt: skip
        return tuple((layer, head) for layer, head in pairs)

    @property
    def median_filter_width(self) -> int:
        """The width of the median filter over the alignment heads' weights (config.json's ``median_filter_width``,
        7 by default): an odd number."""
        width = self.checkpoint.integer("median_filter_width", default=7)
        if width % 2 != 1:
            raise ModelError(f"{self.checkpoint.config_key('median_filter_width')} must be odd, not {width}")
        return width

    def audio(self, samples: np.ndarray) -> AudioInput:
        """Mono 16 kHz samples as the encoder's input: log-mel features of the 30-s window, longer audio cut with a
        warning (``attnx.models.audio``)."""
        self.preprocessor  # noqa: B018 - checked before any feature is computed
        if 2 * self.sources != LENGTH // HOP:
            key = self.checkpoint.config_key("max_source_positions")
            raise ModelError(f"{key} is {self.sources}; the features of 30 s fill {LENGTH // HOP // 2} "
                             "(transformers refuses any other length too)")  # fmt: skip
        return audio_input(samples, self.bins, self.sources)

    @functools.cached_property
    def stacks(self) -> tuple[Stack, ...]:
        """The encoder (self-attention over the audio) and, but in an encoder alone, the decoder (causal
        self-attention, then cross-attention over the encoder's output)."""
        return Stack.encoder_decoder(self.layers, self.decoder_layers, reads=InputKind.AUDIO)

    @property
    def tied(self) -> bool | None:
        """Whether the LM head reuses the decoder's token embeddings (no ``proj_out.weight`` of its own)."""
        return not self.checkpoint.has(PROJ_OUT, prefixed=False) if self.decoder_layers else None

    def claimed_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """The convolution's (width and mel bins), the positions' and the token embeddings' (vocabulary)."""
        yield self.probe, (self.d_model, self.bins, 3)
        yield "encoder.embed_positions.weight", (self.sources, self.d_model)
        if self.decoder_layers:
            yield "decoder.embed_tokens.weight", (self.vocab_size, self.d_model)
            yield "decoder.embed_positions.weight", (self.max_length, self.d_model)

    def tensor_names(self) -> Iterator[str]:
        """The convolutions, both position tables, the token embeddings, each stack's layers and final norm."""
        yield from weights_and_biases("encoder.conv1", "encoder.conv2")
        yield "encoder.embed_positions.weight"
        if self.decoder_layers:
            yield from ("decoder.embed_tokens.weight", "decoder.embed_positions.weight")
        for stack in self.stacks:
            yield from weights_and_biases(f"{stack.name}.layer_norm")
            for layer in range(stack.layers):
                p = f"{stack.name}.layers.{layer}."
                for attention in stack.attentions:
                    module = self.module(attention.kind)
                    yield from weights_and_biases(p + module + "_layer_norm")
                    yield from weights_and_biases(*(f"{p}{module}.{n}_proj" for n in (*"qv", "out")))
                    yield f"{p}{module}.k_proj.weight"
                yield from weights_and_biases(p + "final_layer_norm", p + "fc1", p + "fc2")

    @staticmethod
    def module(kind: AttentionKind) -> str:
        """Where an attention's weights are: ``encoder_attn`` for the cross-attention, else ``self_attn``."""
        return "encoder_attn" if kind is AttentionKind.CROSS else "self_attn"

    # The forward pass.

    def conv(self, x: np.ndarray, name: str, reads: int, stride: int) -> np.ndarray:
        """torch's Conv1d ``name`` (kernel 3, padding 1, ``stride``) on ``x`` ``[channel, frame]``, then GELU."""
        w = self.weight(f"{name}.weight", shape=(self.d_model, reads, 3))
        b = self.weight(f"{name}.bias", shape=(self.d_model,))
        padded = np.pad(x, ((0, 0), (1, 1)))  # (reads, T + 2)
        frames = (x.shape[1] - 1) // stride + 1
        cols = np.stack([padded[:, k : k + stride * (frames - 1) + 1 : stride] for k in range(3)], axis=1)
        cols = cols.reshape(reads * 3, frames)  # (reads · 3, frames): [channel, tap] as the weight's
        out = w.reshape(self.d_model, reads * 3) @ cols + b[:, None]  # (d_model, frames)
        return np.asarray(self.act(out))

    def stack_embed(self, stack: Stack, encoded: Encoded | AudioInput | ImageInput) -> np.ndarray:
        """The encoder's input: the convolutions on the features plus the sinusoid positions, ``[1500, d_model]``;
        the decoder's: token embeddings plus learned positions, ``[token, d_model]``."""
        if isinstance(encoded, AudioInput):
            frames = 2 * self.sources
            if encoded.features.shape != (self.bins, frames):
                raise ModelError(f"{self.checkpoint.name}: the encoder reads features of shape ({self.bins}, "
                                 f"{frames}), not {encoded.features.shape}")  # fmt: skip
            h = self.conv(encoded.features.astype(self.dtype), "encoder.conv1", self.bins, 1)  # (d_model, 3000)
            h = self.conv(h, "encoder.conv2", self.d_model, 2).T  # (1500, d_model)
            return h + self.weight("encoder.embed_positions.weight", shape=(self.sources, self.d_model))
        if not isinstance(encoded, Encoded):
            return super().stack_embed(stack, encoded)  # refused: the decoder reads text, the encoder audio
        n = len(encoded.ids)
        tokens = self.checkpoint.rows("decoder.embed_tokens.weight", encoded.ids, (self.vocab_size, self.d_model))
        positions = self.checkpoint.rows("decoder.embed_positions.weight", range(n), (self.max_length, self.d_model))
        return tokens.astype(self.dtype) + positions.astype(self.dtype)

    def norm(self, x: Array, name: str) -> Array:
        """The LayerNorm ``name``."""
        d = (self.d_model,)
        return layer_norm(x, self.weight(f"{name}.weight", shape=d), self.weight(f"{name}.bias", shape=d), EPS)

    def linear(self, name: str, *, bias: bool = True) -> Linear:
        """The torch Linear ``name`` (d_model → d_model) as attnx's input-major W."""
        d = self.d_model
        weight = self.weight(f"{name}.weight", shape=(d, d)).T
        return Linear.of(weight, self.weight(f"{name}.bias", shape=(d,)) if bias else None)

    def site_spec(self, at: Site, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """The attention ``at`` names on LayerNorm of the stream: the encoder's self-attention, the decoder's causal
        self-attention or its cross-attention over the encoder's output; scores scaled by 1/√d_k."""
        p = f"{at.stack.name}.layers.{at.layer}.{self.module(at.attention.kind)}"
        x = host(self.norm(stream, p + "_layer_norm"))
        w_q, w_k, w_v, w_o = self.checkpoint.remember(("projections", p), lambda: (
            self.linear(f"{p}.q_proj"), self.linear(f"{p}.k_proj", bias=False),  # k_proj has no bias
            self.linear(f"{p}.v_proj"), self.linear(f"{p}.out_proj")))  # fmt: skip
        if at.attention.kind is AttentionKind.CROSS:
            if at.memory is None:
                raise ModelError(f"{self.checkpoint.name}: the decoder's cross-attention needs the encoder's output")
            return AttentionSpec.build(
                heads=self.heads, tokens=tokens, key_tokens=at.memory.tokens, source=source, x=x,
                x_kv=at.memory.stream.astype(x.dtype, copy=False), w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o,
            )  # fmt: skip
        return AttentionSpec.build(heads=self.heads, tokens=tokens, key_tokens=tokens, source=source, x=x, w_q=w_q,
                                   w_k=w_k, w_v=w_v, w_o=w_o, causal=at.attention.kind.causal)  # fmt: skip

    def site_after(self, at: Site, stream: Array, projected: np.ndarray) -> Array:
        """The attention's output added to the stream; after the layer's last attention, the MLP of the LayerNorm of
        the stream added too: fc2(GELU(fc1(x)))."""
        h = stream + arrays_of(stream).like(projected)
        if not at.last:
            return h
        p, d, f = f"{at.stack.name}.layers.{at.layer}.", self.d_model, self.d_ff
        x = self.norm(h, p + "final_layer_norm")
        inner = self.act(dense(x, self.weight(p + "fc1.weight", shape=(f, d)).T, self.weight(p + "fc1.bias",
                                                                                              shape=(f,))))  # fmt: skip
        return h + dense(inner, self.weight(p + "fc2.weight", shape=(d, f)).T, self.weight(p + "fc2.bias", shape=(d,)))

    def stack_final(self, stack: Stack, stream: Array) -> Array:
        """The stack's final LayerNorm."""
        return self.norm(stream, f"{stack.name}.layer_norm")

    @property
    def has_lm_head(self) -> bool:
        """The decoder predicts through ``proj_out`` or its token embeddings; an encoder alone predicts nothing."""
        return self.decoder_layers > 0

    def output_tensor(self) -> WeightRef:
        """``proj_out.weight`` where the file holds one, else the decoder's token embeddings."""
        shape = (self.vocab_size, self.d_model)
        if self.tied:
            return WeightRef("decoder.embed_tokens.weight", (), shape, True)
        return WeightRef(PROJ_OUT, (), shape, False)


FAMILIES = (Whisper,)
