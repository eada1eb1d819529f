"""Whisper's token and word timestamps: its decoder read over the audio, the alignment heads' weights warped onto time.

``timestamps`` takes a ``Model`` (``attnx.open_model``; the caller closes it), the audio its encoder hears
(``model.encode_audio``) and the decoder's sequence (the prompt, then the text: a target followed by the end
token, or what greedy decoding wrote), and returns ``attnx.analysis.timestamps.Timestamps``: each token's start as
transformers' ``generate(..., return_token_timestamps=True)`` gives it on the same weights and audio, and the words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from attnx.core.tensors import WEIGHTS
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ModelError
from attnx.models.audio import HOP, RATE, AudioInput
from attnx.models.stacks import AttentionKind

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.timestamps import Timestamps
    from attnx.models import Model, Progress
    from attnx.models.families.whisper import Whisper
    from attnx.models.tokenize import Encoded


def whisper_of(model: Model) -> Whisper:
    """The model's Whisper architecture with its decoder; another model is a ModelError (word timestamps are
    Whisper's: its decoder writes what its encoder hears)."""
    from attnx.models.families.whisper import Whisper

    model.encoder_decoder("word timestamps need a speech encoder-decoder (Whisper)")
    arch = model.architecture
    if not isinstance(arch, Whisper):
        raise ModelError(f"{model.checkpoint.name}: word timestamps are Whisper's: a {arch.name} model hears no audio")
    return arch


def audio_frames(audio: AudioInput) -> int:
    """The log-mel frames the audio itself fills (not its padding): one a hop begun, as the feature extractor's
    attention mask counts them (``ceil(samples / 160)``)."""
    return math.ceil(round(audio.seconds * RATE) / HOP)


def sequence_of(model: Model, target: str, *, language: str | None = None) -> tuple[Encoded, int]:
    """The sequence whose times ``--target`` asks: the prompt, the target's tokens and the end token, as
    transformers' ``generate`` returns it had it written the target; and the prompt's length."""
    read = model.encode_target(target, language=language)
    prompt = len(model.decoder_prompt(language=language))
    ends = whisper_of(model).generation.get("eos_token_id", model.checkpoint.config.get("eos_token_id"))
    end = ends[0] if isinstance(ends, list) and ends else ends
    if not isinstance(end, int) or isinstance(end, bool):
        raise ModelError(f"{model.checkpoint.name}: generation_config.json and config.json name no eos_token_id "
                         "to end the target")  # fmt: skip
    return model.tokenizer.of_ids([*(int(i) for i in read.ids), end], prompt), prompt


def timestamps(
    model: Model,
    audio: AudioInput,
    sequence: Encoded,
    prompt: int,
    *,
    written: Sequence[int] = (),
    on: Placement = NUMPY,
    progress: Progress | None = None,
) -> Timestamps:
    """The times of ``sequence`` (``prompt`` tokens first) in ``audio``: the decoder reads every token of it but the
    last (as transformers' ``generate`` has read them when it writes the last), after the encoder heard the audio;
    the cross-attention weights of the alignment heads (generation_config.json's ``alignment_heads``) go through
    ``attnx.analysis.timestamps.token_frames``. ``written``: the indices of the tokens the model wrote, said in the
    result. A model that is not a Whisper with its decoder, or that names no alignment heads, is a ModelError."""
    from attnx.analysis import timestamps as timing
    from attnx.workflows.layers import layer_results

    arch = whisper_of(model)
    if not isinstance(audio, AudioInput):
        raise ModelError(f"{model.checkpoint.name}: word timestamps are times in audio: give the audio it hears")
    heads, width = arch.alignment_heads(), arch.median_filter_width
    if len(sequence.ids) <= prompt:
        raise ModelError(f"{model.checkpoint.name}: the sequence holds no token after the prompt to time")
    reads = model.tokenizer.of_ids([int(i) for i in sequence.ids[:-1]], prompt)
    last = max(layer for layer, _ in heads)
    kept: dict[int, np.ndarray] = {}
    results = layer_results(model, audio, on=on, needs=(WEIGHTS,), progress=progress, kind=AttentionKind.CROSS,
                            target=reads)  # fmt: skip
    for layer, result in enumerate(results):
        if result.weights is not None:
            kept[layer] = np.asarray(result.weights)
        if layer == last:
            break
    weights = np.stack([kept[layer][head] for layer, head in heads])  # (alignment head, row, position)
    positions = min(audio_frames(audio) // 2, weights.shape[-1])
    frames = timing.token_frames(weights, prompt=prompt, frames=audio_frames(audio), width=width)
    special = model.tokenizer.special_ids
    flags = [index < prompt or int(i) in special for index, i in enumerate(sequence.ids)]
    tokens = timing.token_times(frames, [int(i) for i in sequence.ids], sequence.tokens, flags, timing.PRECISION)
    texts = [model.tokenizer.decode([int(i)]) for i in sequence.ids]

    def decode(span: Sequence[int]) -> str:
        return model.tokenizer.decode([int(sequence.ids[index]) for index in span])

    return timing.Timestamps(heads, positions, width, timing.PRECISION, tokens, timing.words(tokens, texts, decode),
                             tuple(written))  # fmt: skip
