"""ViT: a pre-LN encoder over an image's patches (``ViTModel``, ``ViTForImageClassification``), as transformers
computes it.

The embeddings: the patch embedding, a Conv2d whose kernel and stride are the patch size (each patch flattened
``[channel, row, column]`` times the flattened kernel, plus its bias), the CLS token put first, plus the learned
position embeddings (one per patch and the CLS: images of ``image_size`` only; transformers' interpolation of the
positions for other sizes is refused). Each layer: h += attention(layernorm_before(h)) (q, k, v with biases where
``qkv_bias``, scores scaled by 1/√d_k, the output dense); h += dense(act(dense(layernorm_after(h)))); the final
``layernorm``. The pooler and the classifier read the last hidden state and are not read.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

from attnx.core.spec import AttentionSpec, Linear
from attnx.engines.arrays import Array, arrays_of, host
from attnx.errors import ModelError
from attnx.models.architecture import Stacked, weights_and_biases
from attnx.models.audio import AudioInput
from attnx.models.nn import dense, layer_norm
from attnx.models.stacks import Attention, InputKind, Site, Stack
from attnx.models.tokenize import Encoded
from attnx.models.vision import ImageInput, image_input

PATCHES = "embeddings.patch_embeddings.projection"


class ViT(Stacked):
    """ViT's encoder: one stack of self-attention over the CLS token and the image's patches."""

    name = "vit"
    family = "ViT"
    design = "pre-LN encoder over image patches"
    prefixes = ("vit.", "")
    probe = PATCHES + ".weight"
    causal = False
    stems = ("ViT",)
    layer_stem = "encoder.layer."

    def read_config(self) -> None:
        """The sizes, the image (size, patch size, channels), the LayerNorm's eps, the activation and whether q, k
        and v have biases; ViT has no vocabulary (0) and reads as many positions as patches, plus the CLS."""
        ckpt = self.checkpoint
        self.layers = ckpt.integer("num_hidden_layers")
        self.check_layers(("num_hidden_layers",))
        self.heads = self.kv_heads = ckpt.integer("num_attention_heads")
        self.d_model = ckpt.integer("hidden_size")
        if self.heads > self.d_model:
            raise ModelError(f"{ckpt.config_key('num_attention_heads')} claims {self.heads:,} heads, more than the "
                             f"{self.d_model:,} columns of the hidden state they split")  # fmt: skip
        self.head_dim = self.d_model // self.heads
        self.d_ff = ckpt.integer("intermediate_size", default=4 * self.d_model)
        self.vocab_size = 0
        self.image_size = ckpt.integer("image_size", default=224)
        self.patch = ckpt.integer("patch_size", default=16)
        self.channels = ckpt.integer("num_channels", default=3)
        if not 0 < self.patch <= self.image_size:
            raise ModelError(f"{ckpt.config_key('patch_size')} {self.patch} does not fit the {self.image_size}-pixel "
                             "images")  # fmt: skip
        self.grid = self.image_size // self.patch
        self.max_length = self.grid * self.grid + 1
        self.eps = ckpt.number("layer_norm_eps", 1e-12, low=0, high=1)
        self.act = self.activation("hidden_act", "gelu")
        self.qkv_bias = ckpt.flag("qkv_bias", True)
        side = f"{self.image_size} × {self.image_size}"
        self.design = f"pre-LN encoder over {self.patch} × {self.patch}-pixel patches of {side}-pixel images"
        self.positions = f"learned embeddings: CLS and {self.grid} × {self.grid} patches"

    @functools.cached_property
    def stacks(self) -> tuple[Stack, ...]:
        """One ``encoder``, its self-attention over the image."""
        return (Stack("encoder", self.layers, InputKind.IMAGE, (Attention.over("encoder", causal=False),)),)

    def claimed_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """The patch embedding's (width, channels, patch size) and the positions' (patches + CLS, width)."""
        yield self.probe, (self.d_model, self.channels, self.patch, self.patch)
        yield "embeddings.position_embeddings", (1, self.max_length, self.d_model)
        if self.layers:
            yield "encoder.layer.0.intermediate.dense.weight", (self.d_ff, self.d_model)

    def tensor_names(self) -> Iterator[str]:
        """The CLS token, the positions, the patch embedding, each layer's and the final LayerNorm."""
        yield from ("embeddings.cls_token", "embeddings.position_embeddings")
        yield from weights_and_biases(PATCHES, "layernorm")
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."
            yield from weights_and_biases(*(p + "attention.attention." + name for name in ("query", "key", "value")))
            yield from weights_and_biases(p + "attention.output.dense", p + "intermediate.dense", p + "output.dense")
            yield from weights_and_biases(p + "layernorm_before", p + "layernorm_after")

    # The forward pass.

    def image(self, pixels: np.ndarray) -> ImageInput:
        """Preprocessed pixels ``[channel, height, width]``: the CLS token, then the patches row by row. An image of
        another size is refused (transformers would interpolate the positions only when asked to)."""
        want = (self.channels, self.image_size, self.image_size)
        if pixels.ndim != 3 or pixels.shape != want:
            raise ModelError(f"{self.checkpoint.name}: a {self.name} model reads pixels of shape {want} "
                             f"([channel, height, width]), not {pixels.shape}; interpolating its positions for "
                             "another size is not supported")  # fmt: skip
        return image_input(pixels, self.patch, ("CLS",))

    def stack_embed(self, stack: Stack, encoded: Encoded | AudioInput | ImageInput) -> np.ndarray:
        """CLS token and patch embeddings (the convolution as a matmul over flattened patches) plus the positions."""
        if not isinstance(encoded, ImageInput):
            raise ModelError(f"{self.checkpoint.name}: a {self.name} model reads images, not {encoded.kind.value}")
        self.image(encoded.pixels)  # its shape checked
        c, p, g, d = self.channels, self.patch, self.grid, self.d_model
        x = encoded.pixels.astype(self.dtype).reshape(c, g, p, g, p).transpose(1, 3, 0, 2, 4).reshape(g * g, c * p * p)
        kernel = self.weight(self.probe, shape=(d, c, p, p)).reshape(d, c * p * p)
        patches = x @ kernel.T + self.weight(PATCHES + ".bias", shape=(d,))
        cls = self.weight("embeddings.cls_token", shape=(1, 1, d)).reshape(1, d)
        positions = self.weight("embeddings.position_embeddings", shape=(1, self.max_length, d))[0]
        return np.concatenate([cls, patches]) + positions

    def norm(self, x: Array, name: str) -> Array:
        """The LayerNorm ``name``."""
        d = (self.d_model,)
        return layer_norm(x, self.weight(f"{name}.weight", shape=d), self.weight(f"{name}.bias", shape=d), self.eps)

    def linear(self, name: str, *, bias: bool = True) -> Linear:
        """The torch Linear ``name`` (d_model → d_model) as attnx's input-major W."""
        d = self.d_model
        weight = self.weight(f"{name}.weight", shape=(d, d)).T
        return Linear.of(weight, self.weight(f"{name}.bias", shape=(d,)) if bias else None)

    def site_spec(self, at: Site, stream: Array, tokens: tuple[str, ...], source: str) -> AttentionSpec:
        """Self-attention on layernorm_before of the stream: no mask, 1/√d_k, W_o the output dense."""
        p = f"encoder.layer.{at.layer}.attention."
        x = host(self.norm(stream, f"encoder.layer.{at.layer}.layernorm_before"))
        w_q, w_k, w_v, w_o = self.checkpoint.remember(("projections", p, self.dtype.name), lambda: (
            *(self.linear(p + "attention." + n, bias=self.qkv_bias) for n in ("query", "key", "value")),
            self.linear(p + "output.dense")))  # fmt: skip
        return AttentionSpec.build(heads=self.heads, tokens=tokens, key_tokens=tokens, source=source, x=x, w_q=w_q,
                                   w_k=w_k, w_v=w_v, w_o=w_o, causal=False)  # fmt: skip

    def site_after(self, at: Site, stream: Array, projected: np.ndarray) -> Array:
        """The attention's output added to the stream, then the MLP of layernorm_after of it added too."""
        p, d, f = f"encoder.layer.{at.layer}.", self.d_model, self.d_ff
        h = stream + arrays_of(stream).like(projected)
        x = self.norm(h, p + "layernorm_after")
        inner = self.act(dense(x, self.weight(p + "intermediate.dense.weight", shape=(f, d)).T,
                               self.weight(p + "intermediate.dense.bias", shape=(f,))))  # fmt: skip
        return h + dense(inner, self.weight(p + "output.dense.weight", shape=(d, f)).T,
                         self.weight(p + "output.dense.bias", shape=(d,)))  # fmt: skip

    def stack_final(self, stack: Stack, stream: Array) -> Array:
        """The final ``layernorm``."""
        return self.norm(stream, "layernorm")


FAMILIES = (ViT,)
