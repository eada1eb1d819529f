"""Encoder-decoders of BART's design (BART, mBART, Marian): two stacks of LayerNorm layers with biases everywhere.

Each stack embeds its tokens (times √d_model where ``scale_embedding``) plus positions (learned, offset by 2, in
BART and mBART; sinusoidal in Marian), then a LayerNorm where the family has one (``layernorm_embedding``). An
encoder layer is h = LN(h + attention(h)); h = LN(h + fc2(act(fc1(h)))) (post-LN: BART, Marian), or
h += attention(LN(h)); h += fc2(act(fc1(LN(h)))) with a final LayerNorm after the last layer (pre-LN: mBART). A decoder
layer runs a causal self-attention, then a cross-attention over the encoder's output, then the MLP, each wrapped the
same way. Scores are q·k/√d_k, with biases on q, k, v and the output; the logits are the decoder's output times the
output table, plus ``final_logits_bias``. A checkpoint of the decoder alone (``BartForCausalLM``) is one causal stack
whose cross-attentions never run, as transformers runs it without an encoder.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Iterator
from typing import ClassVar

import numpy as np

from attnx.core.spec import AttentionSpec, Linear
from attnx.engines.arrays import Array, arrays_of, host
from attnx.errors import ModelError
from attnx.models.architecture import Stacked, WeightRef, weights_and_biases
from attnx.models.audio import AudioInput
from attnx.models.nn import dense, layer_norm
from attnx.models.stacks import Attention, AttentionKind, InputKind, Site, Stack
from attnx.models.tokenize import Encoded
from attnx.models.vision import ImageInput

ENCODER, DECODER = "encoder", "decoder"
LM_HEAD, LOGITS_BIAS = "lm_head.weight", "final_logits_bias"
EPS = 1e-5  # torch's nn.LayerNorm default: these families' configs have no eps
OFFSET = 2  # BartLearnedPositionalEmbedding's: position p reads row p + 2


def sinusoids(positions: np.ndarray, width: int) -> np.ndarray:
    """Marian's sinusoidal positions ``[position, width]``: pos / 10000^(2(j//2)/width), sines of the even j in the
    first half (one more column where ``width`` is odd) and cosines of the odd j in the second, rounded to float32 as
    transformers' ``MarianSinusoidalPositionalEmbedding.create_weight`` does."""
    j = np.arange(width)
    angles = positions[:, None] / np.power(10000, 2 * (j // 2) / width)[None, :]  # (N, width)
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1).astype(np.float32)


class Seq2Seq(Stacked):
    """BART's encoder-decoder (``BartForConditionalGeneration``, ``BartModel``, their task classes): a subclass says
    where its norms are, how it embeds positions and what older configs' keys must say for it."""

    prefixes = ("model.", "")
    probe = "decoder.layers.0.self_attn.q_proj.weight"  # every class of these families holds a decoder
    causal = False
    layer_stem = "encoder.layers."  # the first stack's (``check_layers``)
    outside = (LM_HEAD, LOGITS_BIAS)  # beside the model: the LM head and the logits' bias
    activation_name = "gelu"
    pre_norm: ClassVar[bool] = False  # LayerNorm before each attention and MLP (mBART), else after the residual add
    final_norms: ClassVar[bool] = False  # a LayerNorm after each stack's last layer (``encoder.layer_norm``)
    embedding_norm: ClassVar[bool] = True  # a LayerNorm after the embeddings (``layernorm_embedding``)
    sinusoidal: ClassVar[bool] = False  # sinusoidal positions (Marian), else learned ones offset by 2
    own_vocabularies: ClassVar[bool] = False  # whether ``share_encoder_decoder_embeddings`` may part the stacks' tables
    scales: ClassVar[bool] = False  # ``scale_embedding``'s default
    pad_default: ClassVar[int | None] = 1  # ``pad_token_id``'s default (None: config.json must give it)
    # Keys of older releases' configs, each with the value that says what the family computes (transformers 5 reads
    # none of them): one that says otherwise describes another model, which attnx does not run.
    settled: ClassVar[dict[str, object]] = {
        "normalize_before": False, "add_final_layer_norm": False, "normalize_embedding": True,
        "add_bias_logits": False, "static_position_embeddings": False, "quantization_config": None,
    }  # fmt: skip

    def read_config(self) -> None:
        """The sizes of both stacks (or of the decoder alone), the activation, the embeddings' scale and the tokens
        the decoder starts from; a key that would change the math and is not read is refused."""
        ckpt = self.checkpoint
        for key, value in self.settled.items():
            if key in ckpt.config and ckpt.config[key] != value:
                raise ModelError(f"{ckpt.config_key(key)} {ckpt.config[key]!r:.40} is not what {self.family} "
                                 f"computes ({value!r}); attnx does not run that variant")  # fmt: skip
        self.alone = alone = self.held_layers("encoder.layers.") == 0  # a decoder alone (BartForCausalLM)
        first = DECODER if alone else ENCODER
        keys = {"layers": (f"{first}_layers",), "heads": (f"{first}_attention_heads",), "d_model": ("d_model",),
                "d_ff": (f"{first}_ffn_dim",)}  # fmt: skip
        self.read_sizes(keys, mlp_ratio=None, max_length=1024)
        self.decoder_layers = self.layers if alone else ckpt.integer("decoder_layers")
        held = self.held_layers("decoder.layers.")
        if self.decoder_layers > held:
            raise ModelError(f"{ckpt.config_key('decoder_layers')} claims {self.decoder_layers:,} layers, but "
                             f"{ckpt.weights_path} holds {held} (decoder.layers.N.…)")  # fmt: skip
        self.stack_heads = {first: self.heads, DECODER: ckpt.integer("decoder_attention_heads")}
        self.stack_ff = {first: self.d_ff, DECODER: ckpt.integer("decoder_ffn_dim")}
        self.act = self.activation("activation_function", "gelu", aliases={"swish": "silu"})
        self.tie = ckpt.flag("tie_word_embeddings", True)
        self.shared = not self.own_vocabularies or ckpt.flag("share_encoder_decoder_embeddings", True)
        self.target_vocab = (
            self.vocab_size if self.shared else ckpt.integer("decoder_vocab_size", default=self.vocab_size)
        )
        self.positions = "sinusoidal embeddings" if self.sinusoidal else "learned embeddings (offset 2)"
        self.scale = math.sqrt(self.d_model) if ckpt.flag("scale_embedding", self.scales) else 1.0
        self.pad = self.token_id("pad_token_id", self.pad_default)
        self._start = self.token_id("decoder_start_token_id", self.pad)

    def token_id(self, key: str, default: int | None) -> int:
        """A token id from config.json (``default`` where absent): a whole number within the decoder's vocabulary."""
        value = self.checkpoint.config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.target_vocab:
            raise ModelError(f"{self.checkpoint.config_key(key)} must be a token id from 0 to {self.target_vocab - 1}, "
                             f"got {value!r}")  # fmt: skip
        return value

    def check_layers(self, keys: tuple[str, ...]) -> None:
        """Refuse more layers than the weights hold in the first stack (the encoder's, or a decoder alone's)."""
        ckpt, stem = self.checkpoint, f"{DECODER if self.alone else ENCODER}.layers."
        held = self.held_layers(stem)
        if self.layers > held:
            raise ModelError(f"{ckpt.config_key(keys[0])} claims {self.layers:,} layers, but {ckpt.weights_path} "
                             f"holds {held} ({ckpt.prefix}{stem}N.…)")  # fmt: skip

    def allowed(self, name: str) -> bool:
        """``shared`` is read only where a stack's own table is missing (tied); a decoder alone never runs its
        cross-attentions (transformers runs them only over an encoder's output)."""
        bare = name.removeprefix(self.checkpoint.prefix)
        cross = fnmatch.fnmatchcase(bare, "decoder.layers.*.encoder_attn*")
        return bare == "shared.weight" or (self.alone and cross) or super().allowed(name)

    def check_heads(self) -> None:
        """d_model must split into each stack's heads."""
        for stack, heads in self.stack_heads.items():
            if heads < 1 or self.d_model % heads:
                raise ModelError(f"{self.checkpoint.config_key(f'{stack}_attention_heads')}: hidden size "
                                 f"{self.d_model} is not divisible by {heads} heads")  # fmt: skip

    @property
    def decoder_start(self) -> int | None:
        """``decoder_start_token_id`` (BART: ``</s>``; Marian: the pad token); None for a decoder alone."""
        return None if self.alone else self._start

    @functools.cached_property
    def stacks(self) -> tuple[Stack, ...]:
        """The encoder (self-attention over the source) and the decoder (causal self-attention, then cross-attention
        over the encoder's output); a decoder alone: one causal stack."""
        if self.alone:
            return (Stack(DECODER, self.layers, InputKind.TEXT, (Attention.over(DECODER, causal=True),)),)
        return Stack.encoder_decoder(self.layers, self.decoder_layers, decoder_heads=self.stack_heads[DECODER])

    # Which tensors hold the token tables: each stack's own where the file holds it, else the one it is tied to.

    def table(self, stack: str) -> str:
        """The tensor (under the prefix) of ``stack``'s token embeddings: its ``embed_tokens`` where held (or where
        nothing ties it), else the first held of the tables it is tied to, as transformers ties them."""
        own = f"{stack}.embed_tokens.weight"
        if not self.tie or not self.shared or self.checkpoint.has(own):  # Marian's own vocabularies: nothing ties them
            return own
        tied = ("shared.weight", f"{ENCODER}.embed_tokens.weight", f"{DECODER}.embed_tokens.weight")
        return next((name for name in tied if self.checkpoint.has(name)), own)

    def vocab_of(self, stack: str) -> int:
        """The size of ``stack``'s vocabulary."""
        return self.target_vocab if stack == DECODER else self.vocab_size

    @property
    def tied(self) -> bool | None:
        """Whether the LM head reuses the decoder's token table (no ``lm_head.weight`` of its own); None without an
        LM head."""
        return not self.checkpoint.has(LM_HEAD, prefixed=False) if self.has_lm_head else None

    @property
    def has_lm_head(self) -> bool:
        """A file holding ``lm_head.weight`` or ``final_logits_bias`` (``…ForConditionalGeneration``,
        ``MarianMTModel``), or a decoder alone (its head tied to its table), predicts tokens."""
        ckpt = self.checkpoint
        return self.alone or ckpt.has(LM_HEAD, prefixed=False) or ckpt.has(LOGITS_BIAS, prefixed=False)

    def claimed_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """Each stack's token table (its vocabulary), learned positions (the maximum length) and its layer 0's query
        and first MLP weights (d_model, the stack's feed-forward width)."""
        for stack in self.stacks:
            yield self.table(stack.name), (self.vocab_of(stack.name), self.d_model)
            if not self.sinusoidal:
                yield f"{stack.name}.embed_positions.weight", (self.max_length + OFFSET, self.d_model)
            yield f"{stack.name}.layers.0.self_attn.q_proj.weight", (self.d_model, self.d_model)
            yield f"{stack.name}.layers.0.fc1.weight", (self.stack_ff[stack.name], self.d_model)

    def tensor_names(self) -> Iterator[str]:
        """The token tables, and per stack its positions, embedding norm, layers and final norm."""
        yield from (self.table(stack.name) for stack in self.stacks)
        for stack in self.stacks:
            s = stack.name
            if not self.sinusoidal or self.checkpoint.has(f"{s}.embed_positions.weight"):
                yield f"{s}.embed_positions.weight"
            if self.embedding_norm:
                yield from weights_and_biases(f"{s}.layernorm_embedding")
            if self.final_norms:
                yield from weights_and_biases(f"{s}.layer_norm")
            for layer in range(stack.layers):
                p = f"{s}.layers.{layer}."
                for attention in stack.attentions:
                    module = self.module(attention.kind)
                    yield from weights_and_biases(*(f"{p}{module}.{n}" for n in ("q_proj", "k_proj", "v_proj",
                                                                                   "out_proj")))  # fmt: skip
                    yield from weights_and_biases(f"{p}{module}_layer_norm")
                yield from weights_and_biases(f"{p}fc1", f"{p}fc2", f"{p}final_layer_norm")

    def is_buffer(self, name: str) -> bool:
        """``final_logits_bias`` is a buffer (zeros but where a conversion stored values), read but not learned."""
        return name == LOGITS_BIAS or super().is_buffer(name)

    @staticmethod
    def module(kind: AttentionKind) -> str:
        """The module of an attention of ``kind`` in a layer: ``encoder_attn`` for the cross-attention."""
        return "encoder_attn" if kind is AttentionKind.CROSS else "self_attn"

    # The forward pass.

    def norm(self, x: Array, name: str) -> Array:
        """LayerNorm ``name`` of ``x``."""
        d = (self.d_model,)
        return layer_norm(x, self.weight(f"{name}.weight", shape=d), self.weight(f"{name}.bias", shape=d), EPS)

    def linear(self, name: str, width: int, reads: int) -> Linear:
        """The torch Linear ``name`` with its bias as attnx's input-major W."""
        weight = self.weight(f"{name}.weight", shape=(width, reads))
        return Linear.of(weight.T, self.weight(f"{name}.bias", shape=(width,)))

    def position_rows(self, stack: str, count: int) -> np.ndarray:
        """The position embeddings of positions 0..count-1 of ``stack``, ``[token, d_model]``: learned rows 2.., or
        Marian's sinusoids (the file's table where it holds one, as transformers loads it)."""
        name = f"{stack}.embed_positions.weight"
        if self.sinusoidal and not self.checkpoint.has(name):
            return sinusoids(np.arange(count, dtype=np.float64), self.d_model).astype(self.dtype)
        rows = np.arange(count) + (0 if self.sinusoidal else OFFSET)
        width = self.max_length + (0 if self.sinusoidal else OFFSET)
        return self.checkpoint.rows(name, rows, (width, self.d_model)).astype(self.dtype)

    def stack_embed(self, stack: Stack, encoded: Encoded | AudioInput | ImageInput) -> np.ndarray:
        """The tokens' rows of the stack's table times the scale, plus positions, then the embeddings' LayerNorm."""
        if not isinstance(encoded, Encoded):
            return super().stack_embed(stack, encoded)  # refused: these models read text
        s = stack.name
        words = self.checkpoint.rows(self.table(s), encoded.ids, (self.vocab_of(s), self.d_model)).astype(self.dtype)
        h = words * self.dtype.type(self.scale) + self.position_rows(s, len(encoded.ids))
        return np.asarray(self.norm(h, f"{s}.layernorm_embedding")) if self.embedding_norm else h

    def embed(self, encoded: Encoded) -> np.ndarray:
        """The first stack's embeddings."""
        return self.stack_embed(self.stacks[0], encoded)

    def site_spec(self, at: Site, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """The attention ``at`` names on the stream (its LayerNorm first, pre-LN): self-attention (causal in the
        decoder), or the cross-attention over the encoder's output; 1/√d_k, biases on q, k, v and the output."""
        kind, s = at.attention.kind, at.stack.name
        p = f"{s}.layers.{at.layer}.{self.module(kind)}"
        x = host(self.norm(stream, p + "_layer_norm") if self.pre_norm else stream)
        d = self.d_model
        w_q, w_k, w_v, w_o = self.checkpoint.remember(("projections", p), lambda: tuple(
            self.linear(f"{p}.{n}", d, d) for n in ("q_proj", "k_proj", "v_proj", "out_proj")))  # fmt: skip
        keys, x_kv = tokens, None
        if kind is AttentionKind.CROSS:
            if at.memory is None:
                raise ModelError(f"{self.checkpoint.name}: the decoder's cross-attention needs the encoder's output")
            keys, x_kv = at.memory.tokens, at.memory.stream.astype(x.dtype, copy=False)
        return AttentionSpec.build(
            heads=self.stack_heads[s], tokens=tokens, key_tokens=keys, source=source, x=x, x_kv=x_kv, w_q=w_q,
            w_k=w_k, w_v=w_v, w_o=w_o, causal=at.attention.kind.causal,
        )  # fmt: skip

    def site_after(self, at: Site, stream: Array, projected: np.ndarray) -> Array:
        """The residual add of the attention's output (and its LayerNorm, post-LN); after the layer's last attention,
        the MLP the same way."""
        s, p = at.stack.name, f"{at.stack.name}.layers.{at.layer}."
        h = stream + arrays_of(stream).like(projected)
        if not self.pre_norm:
            h = self.norm(h, f"{p}{self.module(at.attention.kind)}_layer_norm")
        if not at.last:
            return h
        x = self.norm(h, p + "final_layer_norm") if self.pre_norm else h
        d, f = self.d_model, self.stack_ff[s]
        inner = self.act(
            dense(x, self.weight(p + "fc1.weight", shape=(f, d)).T, self.weight(p + "fc1.bias", shape=(f,)))
        )
        out = dense(inner, self.weight(p + "fc2.weight", shape=(d, f)).T, self.weight(p + "fc2.bias", shape=(d,)))
        h = h + out
        return h if self.pre_norm else self.norm(h, p + "final_layer_norm")

    def stack_final(self, stack: Stack, stream: Array) -> Array:
        """The stack's final LayerNorm (mBART), else the stream itself."""
        return self.norm(stream, f"{stack.name}.layer_norm") if self.final_norms else stream

    def output_tensor(self) -> WeightRef:
        """``lm_head.weight`` where the file holds one, else the decoder's token table (tied)."""
        shape = (self.target_vocab, self.d_model)
        if self.checkpoint.has(LM_HEAD, prefixed=False) or not self.tie:
            return WeightRef(LM_HEAD, (), shape, False)
        return WeightRef(self.table(DECODER), (), shape, True)

    def logits(self, hidden: Array) -> np.ndarray:
        """The decoder's logits over its vocabulary ``[token, target vocab]``, ``final_logits_bias`` added."""
        logits = np.empty((hidden.shape[0], self.target_vocab), dtype=self.dtype)
        for columns, block in self.logit_blocks(hidden):
            logits[:, columns] = block
        return logits

    def logit_blocks(self, hidden: Array) -> Iterator[tuple[slice, np.ndarray]]:
        """``Architecture.logit_blocks`` with each block's columns of ``final_logits_bias`` added (where held)."""
        bias = None
        if self.checkpoint.has(LOGITS_BIAS, prefixed=False):
            bias = self.weight(LOGITS_BIAS, shape=(1, self.target_vocab), prefixed=False)[0]
        for columns, block in super().logit_blocks(hidden):
            yield columns, block if bias is None else block + bias[columns].astype(block.dtype, copy=False)
