"""How a model family reads a GGUF file: the ``GgufForm`` it declares in its own module, with the Llama line's names.

A family that runs GGUF files sets ``gguf`` (``Architecture.gguf``) to a ``GgufForm``: the ``general.architecture``
names llama.cpp writes for it (``archs``), how their ``{arch}.*`` metadata becomes its config (``config``, a function
of its ``Metadata``; None: the Llama line's settings, ``gguf_config.decoder``), where each GGUF tensor
goes under the names it reads (``top``, ``layer``, ``experts``, ``within``) and what llama.cpp's converter did to them
(``unpermuted``, ``transposed``, ``shifted_norms``), and how its tokenizer marks spaces (``spaces``). ``GgufCheckpoint``
(attnx/models/gguf.py) hands every family's form, from the registry, to ``gguf_config.build_config``, which finds the
one answering to the file's architecture, and that family's form to ``gguf_names.map_tensors`` and ``gguf_tokenizer``;
none of them names an architecture.

This module holds the declaration and ``Metadata``, what a builder reads, and imports no family, so that every family
module can import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnx.errors import ModelError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

Read = Callable[[str], "np.ndarray"]  # a tensor of the file by its GGUF name, dequantized, float32

HARMLESS = frozenset({"rope.scaling.finetuned"})  # {arch}.* keys that change nothing attnx computes


@dataclass
class Metadata:
    """A GGUF file's ``{arch}.*`` keys, read with their types checked; ``origin`` maps each Hugging Face key set to
    the GGUF key it came from, ``read`` lists the GGUF keys read."""

    values: Mapping[str, Any]
    arch: str
    path: Path
    origin: dict[str, str] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)

    def key(self, suffix: str) -> str:
        """``llama.attention.head_count`` for ``attention.head_count``."""
        return f"{self.arch}.{suffix}"

    def get(self, suffix: str, kinds: tuple[type, ...], expected: str, hf: str | None = None) -> Any:
        """The value of ``{arch}.{suffix}`` (None: absent) when it is one of ``kinds``; ``hf``: the config key it
        becomes, remembered for messages."""
        key = self.key(suffix)
        self.read.add(key)
        if hf is not None:
            self.origin[hf] = key
        value = self.values.get(key)
        if value is None:
            return None
        if object not in kinds and ((isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds)):
            raise ModelError(f"{self.path}: {key} must be {expected}, got {value!r:.60}")
        return value

    def whole(self, suffix: str, hf: str | None = None) -> int | None:
        """A whole number (a per-layer list of one repeated number counts as it)."""
        value = self.get(suffix, (int, list), "a whole number", hf)
        if isinstance(value, list):
            if not value or any(isinstance(v, bool) or not isinstance(v, int) or v != value[0] for v in value):
                raise ModelError(f"{self.path}: {self.key(suffix)} differs between layers ({value!r:.60}); attnx "
                                 "runs layers of one shape")  # fmt: skip
            return int(value[0])
        return value

    def number(self, suffix: str, hf: str | None = None) -> float | None:
        """A real number."""
        value = self.get(suffix, (int, float), "a number", hf)
        if value is not None and not math.isfinite(value):
            raise ModelError(f"{self.path}: {self.key(suffix)} must be a finite number, got {value!r}")
        return None if value is None else float(value)

    def need(self, suffix: str, hf: str) -> int:
        """A whole number the model cannot do without."""
        value = self.whole(suffix, hf)
        if value is None:
            raise ModelError(f"{self.path}: {self.key(suffix)} is missing")
        return value

    def real(self, suffix: str, hf: str) -> float:
        """A real number the model cannot do without."""
        value = self.number(suffix, hf)
        if value is None:
            raise ModelError(f"{self.path}: {self.key(suffix)} is missing")
        return value

    def neutral(self, suffix: str, value: object, reason: str) -> None:
        """``{arch}.{suffix}`` must be absent or ``value``: anything else is refused with ``reason``."""
        found = self.get(suffix, (object,), "")
        if found is not None and found != value:
            raise ModelError(f"{self.path}: {self.key(suffix)} is {found!r:.40}; {reason}")

    def unread(self) -> None:
        """Refuse a ``{arch}.*`` key that was not read and is not ``HARMLESS``."""
        for key in sorted(self.values):
            if key.startswith(self.arch + ".") and key not in self.read and key[len(self.arch) + 1 :] not in HARMLESS:
                raise ModelError(f"{self.path}: {key} is a setting attnx does not read for {self.arch}, and it may "
                                 "change what the model computes")  # fmt: skip


# A family's reading of a file's metadata into its config: (metadata, tensors by GGUF name, read a tensor whole) ->
# (config dict, the GGUF tensors read into it -> what they were read as).
Builder = Callable[[Metadata, Mapping[str, Any], Read], tuple[dict[str, Any], dict[str, str]]]

# Where each GGUF tensor of a Llama-line decoder goes, under ``model.`` (layers under ``model.layers.N.``).
DECODER_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
DECODER_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_rot_embd": "self_attn.rotary_emb.inv_freq",
}  # fmt: skip
DECODER_WITHIN = "model.layers.{n}."
QK = frozenset({"attn_q", "attn_k"})  # the parts llama.cpp permutes for interleaved RoPE (Llama's W_q and W_k)
# How a SentencePiece vocabulary marks spaces: ▁ prepended to the first word by a pre-tokenizer; spaces replaced by ▁,
# none prepended, merges rebuilt by the tokens' order (Gemma); ▁ prepended and spaces replaced by a normalizer (Phi-3).
PREPENDED, REPLACED, NORMALIZED = "prepended", "replaced", "normalized"


def decoder_layer(**changes: str) -> dict[str, str]:
    """The Llama line's layer names with ``changes`` (GGUF part -> the family's name under the layer) over them."""
    return {**DECODER_LAYER, **changes}


@dataclass(frozen=True)
class GgufForm:
    """How a family reads a GGUF file (see the module's docstring).

    ``archs``: the ``general.architecture`` values it answers to (none: a family another's ``config`` produces, as
    Llama's produces Mixtral, named in that form's ``produces``); ``config``: the metadata's reading (None: the Llama
    line's, under the family's ``name``); ``top`` and ``layer``: GGUF part -> the family's tensor name (``layer``'s
    under ``within``, ``{n}`` the layer); ``experts``: stacked experts' parts -> each expert's name (``{e}``);
    ``unpermuted``: parts whose rows llama.cpp permuted within each head (W_q and W_k, by the query or K/V heads);
    ``transposed``: parts whose 2-D weights are stored transposed; ``shifted_norms``: norm weights stored as 1 + w;
    ``spaces``: how its SentencePiece vocabulary marks spaces (``PREPENDED``, ``REPLACED``, ``NORMALIZED``).
    """

    archs: tuple[str, ...] = ()
    config: Builder | None = None
    produces: tuple[str, ...] = ()
    top: Mapping[str, str] = field(default_factory=lambda: DECODER_TOP)
    layer: Mapping[str, str] = field(default_factory=lambda: DECODER_LAYER)
    experts: Mapping[str, str] = field(default_factory=dict)
    within: str = DECODER_WITHIN
    unpermuted: frozenset[str] = frozenset()
    transposed: frozenset[str] = frozenset()
    shifted_norms: bool = False
    spaces: str = PREPENDED

    def __post_init__(self) -> None:
        """A misspelt ``spaces`` fails when the family is defined."""
        if self.spaces not in (PREPENDED, REPLACED, NORMALIZED):
            raise TypeError(f"GgufForm.spaces must be {PREPENDED}, {REPLACED} or {NORMALIZED}, got {self.spaces!r}")
