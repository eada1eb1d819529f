"""Flag groups of what a command reads and computes with: the input, its settings, a checkpoint, engine, caps.

Each group is a frozen dataclass whose fields are Typer options (``attnx/cli/flaggroup.py``). The groups that say
where a result goes and how it looks are in ``attnx/cli/viewflags.py``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnx.cli.flaggroup import FlagGroup, flag_group, grouped
from attnx.cli.options import (
    MODEL_HELP,
    ArrayLayoutOpt,
    Device,
    Dtype,
    Engine,
    Layout,
    RopePairs,
    cap_option,
    parse_scale,
)
from attnx.environment import current
from attnx.errors import ConfigError, UsageError
from attnx.limits import CAPS, Limits

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.overrides import SettingOverrides
    from attnx.engines.placement import Placement
    from attnx.io import InputOverrides

__all__ = [
    "CapFlags",
    "CheckpointFlags",
    "CompareFlags",
    "EngineFlags",
    "HeadFlags",
    "InputFlags",
    "ModelFlags",
    "ModelPairFlags",
    "PickFlags",
    "RandomFlags",
    "SettingFlags",
    "TextFlags",
    "grouped",  # where attnx/cli/explore.py takes it
]


@flag_group(frozen=True)
class RandomFlags(FlagGroup):
    """--seed, --tokens, --d-model: random Q, K and V in place of an input."""

    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Draw Q, K, V from a standard normal with this seed.")
    ] = None
    tokens: Annotated[
        str | None, typer.Option("--tokens", help='Token labels separated by spaces, e.g. "the quick brown fox".')
    ] = None
    d_model: Annotated[
        int | None, typer.Option("--d-model", min=1, help="Width of the random Q, K, V (with --seed; default 8).")
    ] = None

    def input_overrides(self, heads: int | None = None, kv_heads: int | None = None) -> InputOverrides:
        """What these flags say the input is, split into ``heads`` of which ``kv_heads`` K/V heads (for random
        inputs: how many they draw)."""
        from attnx.io import InputOverrides

        tokens = tuple(self.tokens.split()) if self.tokens is not None else None
        return InputOverrides(seed=self.seed, tokens=tokens, d_model=self.d_model, heads=heads, kv_heads=kv_heads)


@flag_group(frozen=True)
class SettingFlags(FlagGroup):
    """--causal, --window, --softcap, --rope-theta, --rope-pairs: attention settings any input can take.

    Each field is named as the setting it replaces (``AttentionSettings``); ``rope_theta`` and ``rope_pairs``
    replace the fields of its rotary positions.
    """

    causal: Annotated[
        bool, typer.Option("--causal", help="Add a causal mask: each query sees itself and earlier keys.")
    ] = False
    window: Annotated[
        int | None,
        typer.Option("--window", min=1, metavar="W",
                     help="Sliding window: each query sees itself and the W - 1 keys before it (causal)."),
    ] = None  # fmt: skip
    softcap: Annotated[
        float | None,
        typer.Option("--softcap", metavar="C",
                     help="Soft-cap the scaled scores: C·tanh(s/C) before the mask (Gemma 2 uses 50)."),
    ] = None  # fmt: skip
    rope_theta: Annotated[
        float | None,
        typer.Option("--rope-theta", metavar="THETA",
                     help="Turn Q and K by rotary positions (RoPE) with this base, e.g. 10000."),
    ] = None  # fmt: skip
    rope_pairs: Annotated[
        RopePairs | None,
        typer.Option("--rope-pairs",
                     help="RoPE column pairs: half (i, i + d/2, Hugging Face) or interleaved (2i, 2i + 1)."),
    ] = None  # fmt: skip

    def changes(self) -> dict[str, Any]:
        """The settings given (name -> value), as ``SettingOverrides`` takes them."""
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(SettingFlags)}
        values["causal"] = self.causal or None  # absent: the input's own mask stays
        if self.rope_pairs is not None:
            values["rope_pairs"] = self.rope_pairs.value
        return {name: value for name, value in values.items() if value is not None}


@flag_group(frozen=True)
class HeadFlags(FlagGroup):
    """-H, --kv-heads, --scale, --layout: how the heads split the input and scale their scores."""

    heads: Annotated[
        int | None, typer.Option("--heads", "-H", min=1, help="Number of heads (overrides the input).")
    ] = None
    kv_heads: Annotated[
        int | None,
        typer.Option("--kv-heads", min=1, help="K/V heads for GQA/MQA (divides --heads); fewer than the input "
                     "has are mean-pooled within each group."),
    ] = None  # fmt: skip
    scale: Annotated[
        str | None, typer.Option("--scale", help="Score multiplier: sqrt_dk (1/√d_k), sqrt_d_model, none, or a number.")
    ] = None
    layout: Annotated[
        Layout | None,
        typer.Option("--layout", help="Head columns: contiguous blocks, or interleaved (column j → head j mod H)."),
    ] = None

    def changes(self) -> dict[str, Any]:
        """The head settings given (name -> value); --scale is checked here."""
        values = {
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "scale": parse_scale(self.scale) if self.scale is not None else None,
            "layout": self.layout.value if self.layout is not None else None,
        }
        return {name: value for name, value in values.items() if value is not None}


@flag_group(frozen=True)
class InputFlags(SettingFlags, RandomFlags, HeadFlags):
    """Everything that replaces the input's keys: the head, random-input and setting flags together."""

    def overrides(self, drop_heads: list[int] | None = None) -> tuple[InputOverrides, SettingOverrides]:
        """What describes the input (random Q, K, V), and the settings that replace its own (``--drop-head``
        included); ``--kv-heads`` is both where it says how many K/V heads random inputs draw."""
        from attnx.core.overrides import SettingOverrides

        changes = HeadFlags.changes(self) | SettingFlags.changes(self)
        if drop_heads:
            changes["dropped_heads"] = tuple(drop_heads)
        return self.input_overrides(self.heads, self.kv_heads), SettingOverrides(**changes)


@flag_group(frozen=True)
class PickFlags(FlagGroup):
    """--head: one head of the input, shown (or traced) alone."""

    head: Annotated[
        int | None,
        typer.Option("--head", metavar="N", help="Only head N, counted from 0 as in the tables, -1 the last. "
                     "Default: every head."),
    ] = None  # fmt: skip

    def heads_of(self, n_heads: int) -> tuple[int, ...] | None:
        """The heads to show of ``n_heads``, counted from 0 (None: every head); one out of range is a usage
        error that gives the range."""
        if self.head is None:
            return None
        from attnx.analysis.trace import resolve_head

        return resolve_head(self.head, n_heads)


@flag_group(frozen=True)
class CompareFlags(FlagGroup):
    """--tensor, --array-layout, --rtol, --atol: what a comparison reads and how close is close enough."""

    tensor: Annotated[
        list[str] | None,
        typer.Option("--tensor", metavar="NAME", help="Compare only this tensor (repeatable; named as the JSON "
                     "keys). Default: every tensor both sides hold."),
    ] = None  # fmt: skip
    array_layout: ArrayLayoutOpt = None
    rtol: Annotated[
        float | None,
        typer.Option("--rtol", help="Relative tolerance, a finite number ≥ 0 (default: 1e-7 float64, 1.3e-6 float32)."),
    ] = None
    atol: Annotated[
        float | None,
        typer.Option("--atol", help="Absolute tolerance, a finite number ≥ 0 (default: 1e-7 float64, 1e-5 × max(1, "
                     "max|ref|) float32)."),
    ] = None  # fmt: skip

    def __post_init__(self) -> None:
        from attnx.analysis.tolerance import check_tolerances

        try:  # refused before any input is read, as for every flag
            check_tolerances(self.rtol, self.atol, ("--rtol", "--atol"))
        except ConfigError as exc:
            raise UsageError(str(exc)) from None


@flag_group(frozen=True)
class CheckpointFlags(FlagGroup):
    """--model: a local checkpoint (``detect``'s: it reads random sequences, or its own --texts)."""

    model: Annotated[
        str | None,
        typer.Option("--model", metavar="PATH", help=MODEL_HELP + ": find its heads over random sequences or --texts."),
    ] = None


@flag_group(frozen=True)
class TextFlags(CheckpointFlags):
    """--model, --text: a local checkpoint and the text it reads."""

    model: Annotated[
        str | None, typer.Option("--model", metavar="PATH", help=MODEL_HELP + ": run every layer of it on --text.")
    ] = None
    text: Annotated[
        str | None, typer.Option("--text", help="With --model: the text the model reads, or - for stdin.")
    ] = None

    @property
    def wanted(self) -> bool:
        """True when any of the model's flags is given (the input then comes from the model)."""
        return any(value is not None for value in dataclasses.asdict(self).values())


AttentionOpt = Annotated[
    str | None,
    typer.Option("--attention", metavar="KIND", help="With --model: which attention of the layer: self, "
                 "causal-self or cross (a decoder's, over the source). Default: the layer's first."),
]  # fmt: skip
TargetOpt = Annotated[
    str | None,
    typer.Option("--target", metavar="T", help="With --model of an encoder-decoder: the text the decoder reads "
                 "(teacher forcing), for its layers (--layer dec:L)."),
]  # fmt: skip


LanguageOpt = Annotated[
    str | None,
    typer.Option("--language", metavar="LANG", help="With --target, for a model that asks one (a multilingual "
                 "Whisper): the language the decoder writes in (en, fr, ...)."),
]  # fmt: skip
AudioOpt = Annotated[
    str | None,
    typer.Option("--audio", metavar="FILE", help="With --model of a speech model (Whisper), in place of --text: "
                 "the WAV file its encoder hears (PCM or float, 16 kHz)."),
]  # fmt: skip


ImageOpt = Annotated[
    str | None,
    typer.Option("--image", metavar="FILE", help="With --model of a vision encoder (ViT), in place of --text: the "
                 "image it sees (PNG, JPEG, WebP), prepared as its preprocessor_config.json says."),
]  # fmt: skip


@flag_group(frozen=True)
class SourceFlags(TextFlags):
    """--model, --text, --audio or --image: a local checkpoint and what its (first) stack reads."""

    audio: AudioOpt = None
    image: ImageOpt = None


@flag_group(frozen=True)
class ModelFlags(SourceFlags):
    """--model, --text, --layer: one layer of a local checkpoint as the input."""

    model: Annotated[str | None, typer.Option("--model", metavar="PATH", help=MODEL_HELP + ": explore one of its "
                                              "layers (--layer) on --text.")] = None  # fmt: skip
    layer: Annotated[
        str | None,
        typer.Option("--layer", metavar="L", help="With --model: the layer, counted from 0, -1 the last (default 0); "
                     "of an encoder-decoder, STACK:L (enc:3, dec:-1)."),
    ] = None  # fmt: skip
    attention: AttentionOpt = None
    target: TargetOpt = None

    generate: Annotated[
        int | None,
        typer.Option("--generate", metavar="N", min=1, help="With --model of an encoder-decoder, in place "
                     "of --target: the decoder writes up to N tokens greedily (as transformers' generate with "
                     "do_sample=False, num_beams=1), then its layers read them."),
    ] = None  # fmt: skip
    language: LanguageOpt = None

    def pointed(self) -> dict[str, str | int | None]:
        """--attention, --target, --language and --audio (flag -> value): what only one layer's view reads."""
        return {"--attention": self.attention, "--target": self.target, "--generate": self.generate,
                "--language": self.language, "--audio": self.audio}  # fmt: skip


@flag_group(frozen=True)
class ModelPairFlags(FlagGroup):
    """--model once (sweep a layer of it) or twice (compare two checkpoints head by head), --text, --layer."""

    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            metavar="PATH",
            help=MODEL_HELP + ": explore one of its layers (--layer) on "
            "--text. Twice: compare two checkpoints head by head.",
        ),
    ] = None
    text: Annotated[
        str | None, typer.Option("--text", help="With --model: the text the model reads, or - for stdin.")
    ] = None
    layer: Annotated[
        str | None,
        typer.Option("--layer", metavar="L", help="With --model: the layer, counted from 0, -1 the last (default 0)."),
    ] = None
    attention: AttentionOpt = None
    target: TargetOpt = None
    audio: AudioOpt = None

    @property
    def pair(self) -> tuple[str, str] | None:
        """The two checkpoints when --model is given twice (None: fewer; more is a UsageError)."""
        models = self.model or []
        if len(models) > 2:
            raise UsageError(f"--model is given {len(models)} times: once to sweep a layer, twice to compare two")
        return (models[0], models[1]) if len(models) == 2 else None

    def single(self) -> ModelFlags:
        """The flags as one checkpoint's (--model given once, or not at all)."""
        return ModelFlags(model=self.model[0] if self.model else None, text=self.text, layer=self.layer,
                          attention=self.attention, target=self.target, audio=self.audio)  # fmt: skip


@flag_group(frozen=True)
class EngineFlags(FlagGroup):
    """--engine, --device, --dtype: what computes, where, in which floating-point type."""

    engine: Annotated[Engine, typer.Option("--engine", "-e", help="Engine that computes (torch is optional).")] = (
        Engine("numpy")
    )
    device: Annotated[Device, typer.Option("--device", help="Device: auto picks cuda, then mps, then cpu.")] = (
        Device.auto
    )
    dtype: Annotated[
        Dtype | None, typer.Option("--dtype", help="Floating-point type (default: float64; float32 on mps).")
    ] = None

    def options(self) -> dict[str, Any]:
        """``engine``, ``dtype`` and ``device`` as the strings ``attnx.engines.compute`` takes."""
        return {"engine": self.engine.value, "dtype": self.dtype and self.dtype.value, "device": self.device.value}

    def placement(self) -> Placement:
        """Where the work runs: the engine, device and dtype as one value (``attnx.Placement``)."""
        from attnx.engines.placement import Placement

        return Placement(**self.options())


@flag_group(frozen=True)
class CapFlags(FlagGroup):
    """--max-bytes, --max-yaml-bytes, --max-depth, --max-dimension, --max-elements, --max-weight-bytes: the caps."""

    max_bytes: Annotated[str | None, cap_option("max_bytes", "Most bytes one input may have")] = None
    max_yaml_bytes: Annotated[str | None, cap_option("max_yaml_bytes", "Most bytes of YAML text")] = None
    max_depth: Annotated[str | None, cap_option("max_depth", "Deepest nesting of a YAML or JSON input")] = None
    max_dimension: Annotated[str | None, cap_option("max_dimension", "Longest axis of any array")] = None
    max_elements: Annotated[str | None, cap_option("max_elements", "Most elements of any array, the scores too")] = None
    max_weight_bytes: Annotated[
        str | None, cap_option("max_weight_bytes", "Most bytes of one checkpoint weight read whole, as float64")
    ] = None

    def limits(self) -> Limits:
        """The caps: defaults, replaced by ``ATTNX_MAX_*`` (of the environment in force), replaced by these flags."""
        return Limits.from_env(current().environ, **{cap: getattr(self, cap) for cap in CAPS})
