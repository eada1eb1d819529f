"""Whisper's timestamps in NumPy against transformers': the median filter, dynamic time warping and the token times."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from attnx.analysis.timestamps import dynamic_time_warping, median_filter, token_frames, word_spans
from attnx.errors import ConfigError

torch = pytest.importorskip("torch")
whisper_generation = pytest.importorskip("transformers.models.whisper.generation_whisper")


class TestMedianFilter:
    @pytest.mark.parametrize("width", [1, 3, 7])
    @pytest.mark.parametrize("shape", [(2, 3, 4, 20), (1, 2, 7, 1500), (3, 5, 9), (3, 5, 3)])
    def test_as_transformers(self, shape: tuple[int, ...], width: int) -> None:
        """Value for value transformers' ``_median_filter`` (reflected ends; an axis too short left as it is)."""
        values = np.random.default_rng(sum(shape) + width).normal(size=shape).astype(np.float32)
        theirs = whisper_generation._median_filter(torch.tensor(values), width).numpy()
        np.testing.assert_array_equal(median_filter(values, width), theirs)

    def test_nan_sorts_last(self) -> None:
        """A NaN (a position no row moves on: 0 / 0) ranks above every number, as torch's sort ranks it."""
        values = np.array([[[1.0, np.nan, 3.0, 2.0, 5.0, np.nan, 0.0]]], dtype=np.float32)
        theirs = whisper_generation._median_filter(torch.tensor(values), 3).numpy()
        np.testing.assert_array_equal(median_filter(values, 3), theirs)

    @pytest.mark.parametrize("width", [0, 4, -3])
    def test_even_width_refused(self, width: int) -> None:
        with pytest.raises(ConfigError, match=f"must be an odd number, not {width}"):
            median_filter(np.zeros((2, 9)), width)


class TestDynamicTimeWarping:
    @pytest.mark.parametrize("shape", [(1, 1), (1, 6), (6, 1), (4, 9), (9, 4), (12, 175), (25, 400)])
    def test_as_transformers(self, shape: tuple[int, int]) -> None:
        """The same path as transformers' ``_dynamic_time_warping`` on random costs."""
        cost = np.random.default_rng(shape[0] * 1000 + shape[1]).normal(size=shape)
        ours, theirs = dynamic_time_warping(cost), whisper_generation._dynamic_time_warping(cost)
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(a, b)

    @pytest.mark.parametrize("seed", range(6))
    def test_ties_as_transformers(self, seed: int) -> None:
        """Costs of few values tie often: the same steps are taken (along time first, then along text)."""
        cost = np.random.default_rng(seed).integers(0, 3, size=(7, 11)).astype(np.float64)
        for a, b in zip(dynamic_time_warping(cost), whisper_generation._dynamic_time_warping(cost), strict=True):
            np.testing.assert_array_equal(a, b)
        flat = np.zeros((4, 6))
        for a, b in zip(dynamic_time_warping(flat), whisper_generation._dynamic_time_warping(flat), strict=True):
            np.testing.assert_array_equal(a, b)

    def test_walks_the_diagonal(self) -> None:
        """A cost cheapest on the diagonal, every other cell dear, gives the diagonal path."""
        text, time = dynamic_time_warping(1 - 2 * np.eye(5))
        assert text.tolist() == time.tolist() == [0, 1, 2, 3, 4]


def transformers_times(weights: np.ndarray, prompt: int, frames: int | None, width: int = 7) -> np.ndarray:
    """transformers' ``_extract_token_timestamps`` on cross-attention ``weights`` ``[layer, head, row, position]``,
    every head of every layer an alignment head, the sequence one longer than the rows."""
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    layers, heads, rows, _ = weights.shape
    cross = tuple(torch.tensor(weights[layer][None]) for layer in range(layers))
    sequences = torch.zeros((1, rows + 1), dtype=torch.long)
    out = GenerateEncoderDecoderOutput(sequences=sequences, cross_attentions=(cross,))
    owner: Any = SimpleNamespace(config=SimpleNamespace(decoder_layers=layers, median_filter_width=width))
    pairs = [(layer, head) for layer in range(layers) for head in range(heads)]
    extract = whisper_generation.WhisperGenerationMixin._extract_token_timestamps
    found = extract(owner, out, pairs, num_frames=frames, num_input_ids=prompt)
    return np.asarray(found[0].numpy(), dtype=np.float64)


def walking(rows: int, positions: int, seed: int) -> np.ndarray:
    """Softmax rows over ``positions`` whose peak walks forward as the row goes, with noise: 2 layers × 3 heads (no
    weight 0, which would make a position's spread over the rows 0 and its standardised values NaN)."""
    rng = np.random.default_rng(seed)
    centre = np.linspace(0, 160, rows)[None, None, :, None]
    logits = -(((np.arange(positions) - centre) / 20.0) ** 2) / 4 + rng.normal(0, 0.5, (2, 3, rows, positions))
    weights = np.exp(np.maximum(logits - logits.max(axis=-1, keepdims=True), -30))
    return (weights / weights.sum(axis=-1, keepdims=True)).astype(np.float32)


class TestTokenFrames:
    @pytest.mark.parametrize(("rows", "prompt", "frames"), [(12, 4, 350), (12, 4, None), (9, 3, 201), (5, 4, 100),
                                                            (4, 4, 100)])  # fmt: skip
    def test_as_transformers(self, rows: int, prompt: int, frames: int | None) -> None:
        """The tokens' start times equal transformers' (the prompt's 0, the last repeated; one row: 0 / 0 alike)."""
        weights = walking(rows, 1500, rows + prompt)
        ours = token_frames(weights.reshape(6, rows, 1500), prompt=prompt, frames=frames, width=7) * 0.02
        theirs = transformers_times(weights, prompt, frames)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
        if rows - prompt > 2:  # the times move: the test sees the path
            assert len(np.unique(ours)) > 3


class TestWords:
    def test_spans(self) -> None:
        """A word starts at a token that begins with a space, after a special token and at the first; punctuation
        stays with its word; special tokens are in none."""
        texts = ["<|en|>", "Hel", "lo", ",", " wor", "ld", ".", " (", "a", ")", "<|endoftext|>"]
        special = [True, *[False] * 9, True]
        assert word_spans(texts, special) == [(1, 2, 3), (4, 5, 6), (7, 8, 9)]
        assert word_spans(["<|a|>", "x", "<|b|>", "y"], [True, False, True, False]) == [(1,), (3,)]
