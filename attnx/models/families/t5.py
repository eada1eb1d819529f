"""T5, Flan-T5, T5 v1.1 and mT5: an encoder and a decoder whose attention scores carry a learned relative position bias.

Per layer of either stack, x = RMSNorm(h) (no mean, no bias), h += attention(x); the decoder's layers then
h += cross-attention(RMSNorm(h)) over the encoder's output; then h += FF(RMSNorm(h)), where FF is ReLU (T5) or
gated GELU (v1.1, Flan-T5, mT5: ``feed_forward_proj``). Scores are not scaled by 1/√d (the scale is folded into the
initialisation): s = q·k + b, where b[h, i, j] is layer 0's ``relative_attention_bias`` at the bucket of the distance
j − i (bidirectional buckets in the encoder, the past only in the decoder), shared by every layer of the stack; the
cross-attention has no bias. Each stack ends in a final RMSNorm; the LM head reads the decoder's output times
d_model^-0.5 where the config does not say otherwise (``scale_decoder_outputs``, else ``tie_word_embeddings``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

import numpy as np

from attnx.core.spec import AttentionSpec, Linear
from attnx.engines.arrays import Array, arrays_of, host
from attnx.errors import ModelError
from attnx.models.architecture import Stacked, WeightRef
from attnx.models.decoder import rms_norm
from attnx.models.nn import dense
from attnx.models.stacks import AttentionKind, Site, Stack
from attnx.models.tokenize import Encoded

ENCODER, DECODER = "encoder", "decoder"
LM_HEAD = "lm_head.weight"
# What ``feed_forward_proj`` may say: gated or not, and the activation (transformers reads ``gated-gelu`` as the tanh
# approximation, for backward compatibility; any other name is its own).
FEED_FORWARDS = {"relu": (False, "relu"), "gelu": (False, "gelu"), "gated-gelu": (True, "gelu_new"),
                 "gated-silu": (True, "silu"), "gated-relu": (True, "relu"), "gated-gelu_new": (True, "gelu_new"),
                 "silu": (False, "silu"), "gelu_new": (False, "gelu_new")}  # fmt: skip


def relative_buckets(relative: np.ndarray, *, bidirectional: bool, buckets: int, max_distance: int) -> np.ndarray:
    """The bucket of each relative position (key − query): exact for small distances, logarithmic up to
    ``max_distance``, past it the last; with ``bidirectional`` half the buckets for keys after the query, else keys
    after it share bucket 0. Computed in float32 and truncated, as transformers' ``_relative_position_bucket``."""
    found = np.zeros(relative.shape, dtype=np.int64)
    if bidirectional:
        buckets //= 2
        found += (relative > 0).astype(np.int64) * buckets
        distance = np.abs(relative)
    else:
        distance = -np.minimum(relative, 0)
    exact = buckets // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) where the distance is small: not used
        ratio = np.log(distance.astype(np.float32) / np.float32(exact)) / np.float32(math.log(max_distance / exact))
        spread = (ratio * np.float32(buckets - exact)).astype(np.float32)
        large = exact + np.where(distance < exact, 0, spread).astype(np.int64)
    found += np.where(distance < exact, distance, np.minimum(large, buckets - 1))
    return found


class T5(Stacked):
    """T5's encoder-decoder (``T5ForConditionalGeneration``, ``T5Model``): two stacks, the decoder's layers holding a
    causal self-attention and a cross-attention over the encoder's output."""

    name = "t5"
    family = "T5"
    design = "pre-RMSNorm encoder-decoder, relative position bias"
    prefixes = ("", "transformer.")
    probe = "shared.weight"
    causal = False
    stems = ("T5",)
    unused = (
        "encoder.embed_tokens.weight",
        "decoder.embed_tokens.weight",  # tied copies of ``shared``
        "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",
    )  # transformers ignores it
    layer_stem = "encoder.block."
    outside = (LM_HEAD,)  # an untied LM head (T5 v1.1's), beside the model's tensors
    activation_name = "relu"

    def read_config(self) -> None:
        """The sizes of both stacks, the relative buckets, the feed-forward, the norms' eps and the LM head's scale."""
        ckpt = self.checkpoint
        keys = {"layers": ("num_layers",), "heads": ("num_heads",), "head_dim": ("d_kv",), "d_model": ("d_model",),
                "d_ff": ("d_ff",), "max_length": ("n_positions",)}  # fmt: skip
        self.read_sizes(keys, mlp_ratio=None, max_length=512)
        self.decoder_layers = ckpt.integer("num_decoder_layers", default=self.layers)
        self.check_decoder_layers()
        self.buckets = ckpt.integer("relative_attention_num_buckets", default=32)
        self.max_distance = ckpt.integer("relative_attention_max_distance", default=128)
        if self.buckets < 4:
            raise ModelError(f"{ckpt.config_key('relative_attention_num_buckets')} must be at least 4")
        self.eps = ckpt.number("layer_norm_epsilon", 1e-6, low=0, high=1)
        proj = ckpt.text("feed_forward_proj", "relu")
        if proj not in FEED_FORWARDS:
            raise ModelError(f"{ckpt.config_key('feed_forward_proj')} {proj!r} is not supported; supported: "
                             f"{', '.join(FEED_FORWARDS)}")  # fmt: skip
        self.gated, act = FEED_FORWARDS[proj]
        self.act = self.activation("feed_forward_proj", act, aliases={proj: act})
        tied = ckpt.flag("tie_word_embeddings", True)
        self.scale_output = ckpt.flag("scale_decoder_outputs", tied)
        self._start = self.token_id("decoder_start_token_id", self.token_id("pad_token_id", 0))
        self.inner = self.heads * self.head_dim
        self.position_bias = (f"a learned bias on the scores: {self.buckets} relative buckets up to "
                              f"{self.max_distance} apart (layer 0's, shared)")  # fmt: skip

    def token_id(self, key: str, default: int) -> int:
        """A token id from config.json (``default`` where absent): a whole number within the vocabulary."""
        value = self.checkpoint.config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size:
            raise ModelError(f"{self.checkpoint.config_key(key)} must be a token id from 0 to {self.vocab_size - 1}, "
                             f"got {value!r}")  # fmt: skip
        return value

    def check_decoder_layers(self) -> None:
        """Refuse more decoder layers than the weights hold, as ``check_layers`` does for the encoder's; weights
        without a decoder are T5's encoder alone (``T5EncoderModel``, ``T5ForTokenClassification``)."""
        ckpt, count = self.checkpoint, self.held_layers("decoder.block.")
        if count == 0:
            self.decoder_layers = 0
        elif self.decoder_layers > count:
            raise ModelError(f"{ckpt.config_key('num_decoder_layers')} claims {self.decoder_layers:,} layers, but "
                             f"{ckpt.weights_path} holds {count} (decoder.block.N.…)")  # fmt: skip

    @property
    def decoder_start(self) -> int | None:
        """``decoder_start_token_id`` (T5: the pad token, 0); None for an encoder alone."""
        return self._start if self.decoder_layers else None

    def check_heads(self) -> None:
        """T5's heads are ``d_kv`` wide whatever d_model is (T5-11B: 128 heads × 128 over a width of 1024)."""

    @functools.cached_property
    def stacks(self) -> tuple[Stack, ...]:
        """The encoder (self-attention over the source) and, but in an encoder alone, the decoder (causal
        self-attention, then cross-attention over the encoder's output)."""
        return Stack.encoder_decoder(self.layers, self.decoder_layers)

    @property
    def tied(self) -> bool | None:
        """Whether the LM head reuses ``shared`` (no ``lm_head.weight`` of its own); None for an encoder alone."""
        return not self.checkpoint.has(LM_HEAD, prefixed=False) if self.decoder_layers else None

    def tensor_names(self) -> Iterator[str]:
        """``shared``, each stack's blocks, relative bias (layer 0's) and final norm."""
        yield self.probe
        ff = ("wi_0", "wi_1", "wo") if self.gated else ("wi", "wo")
        for stack in self.stacks:
            yield f"{stack.name}.final_layer_norm.weight"
            yield f"{stack.name}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
            for layer in range(stack.layers):
                p = f"{stack.name}.block.{layer}.layer."
                for which, attention in enumerate(stack.attentions):
                    module = "EncDecAttention" if attention.kind is AttentionKind.CROSS else "SelfAttention"
                    yield f"{p}{which}.layer_norm.weight"
                    yield from (f"{p}{which}.{module}.{name}.weight" for name in "qkvo")
                last = len(stack.attentions)
                yield f"{p}{last}.layer_norm.weight"
                yield from (f"{p}{last}.DenseReluDense.{name}.weight" for name in ff)

    # The forward pass.

    def embed(self, encoded: Encoded) -> np.ndarray:
        """The token embeddings of ``shared``, ``[token, d_model]`` (no positions: they enter as the score bias)."""
        return self.checkpoint.rows(self.probe, encoded.ids, (self.vocab_size, self.d_model)).astype(self.dtype)

    def norm(self, x: Array, name: str) -> Array:
        """T5's RMSNorm ``name`` (no mean, no bias)."""
        return rms_norm(x, self.weight(f"{name}.weight", shape=(self.d_model,)), self.eps)

    def relative_bias(self, stack: Stack, queries: int, keys: int) -> np.ndarray:
        """``stack``'s relative position bias ``[head, query, key]``: layer 0's table at each pair's bucket."""
        table = self.weight(f"{stack.name}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                            shape=(self.buckets, self.heads))  # fmt: skip
        relative = np.arange(keys)[None, :] - np.arange(queries)[:, None]  # (N, M): key − query
        found = relative_buckets(relative, bidirectional=stack.name == ENCODER, buckets=self.buckets,
                                 max_distance=self.max_distance)  # fmt: skip
        return np.ascontiguousarray(table[found].transpose(2, 0, 1))  # (N, M, H) -> (H, N, M)

    def linear(self, name: str, width: int, reads: int) -> Linear:
        """The torch Linear ``name`` (no bias) as attnx's input-major W."""
        return Linear.of(self.weight(f"{name}.weight", shape=(width, reads)).T)

    def site_spec(self, at: Site, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """The attention ``at`` names on RMSNorm of the stream: self-attention with the stack's position bias (causal
        in the decoder), or the cross-attention over the encoder's output; scale 1."""
        p = f"{at.stack.name}.block.{at.layer}.layer.{at.which}."
        cross = at.attention.kind is AttentionKind.CROSS
        module = p + ("EncDecAttention." if cross else "SelfAttention.")
        x = host(self.norm(stream, p + "layer_norm"))
        w_q, w_k, w_v, w_o = self.checkpoint.remember(("projections", module), lambda: self.projections(module))
        if cross:
            if at.memory is None:
                raise ModelError(f"{self.checkpoint.name}: the decoder's cross-attention needs the encoder's output")
            return AttentionSpec.build(
                heads=self.heads, tokens=tokens, key_tokens=at.memory.tokens, source=source, x=x,
                x_kv=at.memory.stream.astype(x.dtype, copy=False), w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, scale=1.0,
            )  # fmt: skip
        n = len(tokens)
        bias = self.checkpoint.remember(("position_bias", at.stack.name, n), lambda: self.relative_bias(at.stack, n, n))
        return AttentionSpec.build(
            heads=self.heads, tokens=tokens, key_tokens=tokens, source=source, x=x, w_q=w_q, w_k=w_k, w_v=w_v,
            w_o=w_o, scale=1.0, causal=at.attention.kind.causal, score_bias=bias.astype(x.dtype, copy=False),
        )  # fmt: skip

    def projections(self, module: str) -> tuple[Linear, Linear, Linear, Linear]:
        """The attention ``module``'s W_q, W_k, W_v and W_o (torch Linears without bias, as attnx's W)."""
        w_q, w_k, w_v = (self.linear(module + name, self.inner, self.d_model) for name in "qkv")
        return w_q, w_k, w_v, self.linear(module + "o", self.d_model, self.inner)

    def site_after(self, at: Site, stream: Array, projected: np.ndarray) -> Array:
        """The attention's output added to the stream; after the layer's last attention, the feed-forward of the
        RMSNorm of the stream added too."""
        h = stream + arrays_of(stream).like(projected)
        if not at.last:
            return h
        p = f"{at.stack.name}.block.{at.layer}.layer.{len(at.stack.attentions)}."
        return h + self.feed_forward(self.norm(h, p + "layer_norm"), p + "DenseReluDense.")

    def feed_forward(self, x: Array, p: str) -> Array:
        """ReLU (or another activation) between two Linears, or its gated form: act(wi_0 x) · wi_1 x."""
        d, f = self.d_model, self.d_ff
        if self.gated:
            inner = self.act(dense(x, self.weight(p + "wi_0.weight", shape=(f, d)).T, None))
            inner = inner * dense(x, self.weight(p + "wi_1.weight", shape=(f, d)).T, None)
        else:
            inner = self.act(dense(x, self.weight(p + "wi.weight", shape=(f, d)).T, None))  # (N, d_ff)
        return dense(inner, self.weight(p + "wo.weight", shape=(d, f)).T, None)

    def stack_final(self, stack: Stack, stream: Array) -> Array:
        """The stack's final RMSNorm."""
        return self.norm(stream, f"{stack.name}.final_layer_norm")

    @property
    def has_lm_head(self) -> bool:
        """T5's decoder predicts through ``lm_head`` or ``shared``; an encoder alone predicts nothing."""
        return self.decoder_layers > 0

    def output_tensor(self) -> WeightRef:
        """``lm_head.weight`` where the file holds one, else ``shared``."""
        shape = (self.vocab_size, self.d_model)
        return WeightRef(self.probe, (), shape, True) if self.tied else WeightRef(LM_HEAD, (), shape, False)

    def shape_logits(self, logits: Array) -> Array:
        """The decoder's output times d_model^-0.5 before the head, where the config scales it."""
        return logits * (self.d_model**-0.5) if self.scale_output else logits


class MT5(T5):
    """mT5: T5 v1.1's design over a multilingual vocabulary (``MT5ForConditionalGeneration``); transformers never scales
    its decoder's output before the LM head, whatever the config says."""

    name = "mt5"
    family = "mT5"
    stems = ("MT5",)

    def read_config(self) -> None:
        """T5's, the LM head reading the decoder's output as it is."""
        super().read_config()
        self.scale_output = False


FAMILIES = (T5, MT5)
