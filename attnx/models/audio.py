"""Whisper's input: 16 kHz samples as log-mel features, computed as transformers' ``WhisperFeatureExtractor`` does.

The samples (float32) are padded with zeros or cut to the window (30 s: 480,000 samples); the window is padded by
200 samples at each end by reflection and cut into frames of ``N_FFT`` = 400 samples every ``HOP`` = 160 (3001
frames); each frame, times a periodic Hann window, goes through a real FFT (float64, its result kept as complex64, as
the extractor stores it); the power |X|² (float64) goes through ``bins`` Slaney-normalised triangular mel filters
on the Slaney mel scale (0 to 8 kHz), is floored at 1e-10, its log10 rounded to float32; the last frame is dropped
(3000 left); every value is raised to at least the largest minus 8, then (x + 4) / 4. ``AudioInput`` is such
features as the input of a stack that reads audio, its positions labelled by time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from attnx.models.stacks import InputKind

RATE = 16000
N_FFT = 400
HOP = 160
SECONDS = 30
LENGTH = SECONDS * RATE  # 480,000 samples in the window
FLOOR = 1e-10


def hertz_to_mel(hertz: np.ndarray) -> np.ndarray:
    """The Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above (27 mels per factor 6.4)."""
    hertz = np.asarray(hertz, dtype=np.float64)
    high = 15.0 + np.log(np.maximum(hertz, 1e-300) / 1000.0) * (27.0 / math.log(6.4))
    return np.where(hertz >= 1000.0, high, 3.0 * hertz / 200.0)


def mel_to_hertz(mels: np.ndarray) -> np.ndarray:
    """The inverse of ``hertz_to_mel``."""
    mels = np.asarray(mels, dtype=np.float64)
    return np.where(mels >= 15.0, 1000.0 * np.exp((math.log(6.4) / 27.0) * (mels - 15.0)), 200.0 * mels / 3.0)


def mel_filters(bins: int, *, n_fft: int = N_FFT, rate: int = RATE) -> np.ndarray:
    """``bins`` triangular filters over the ``n_fft // 2 + 1`` FFT bins ``[frequency, mel]`` (float64): filter j rises
    from corner j to corner j + 1 and falls to corner j + 2, the ``bins + 2`` corners evenly spaced in mels from 0 Hz
    to ``rate / 2``; each divided by half its width in Hz (Slaney's area normalisation)."""
    corners = mel_to_hertz(np.linspace(hertz_to_mel(np.float64(0.0)), hertz_to_mel(np.float64(rate / 2)), bins + 2))
    frequencies = np.linspace(0, rate // 2, n_fft // 2 + 1)  # each FFT bin's frequency in Hz
    lo, mid, hi = corners[:-2], corners[1:-1], corners[2:]
    rising = (frequencies[:, None] - lo) / (mid - lo)  # (bins_fft, bins)
    falling = (hi - frequencies[:, None]) / (hi - mid)
    return np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (hi - lo))


def hann(length: int) -> np.ndarray:
    """The periodic Hann window of ``length`` samples: 0.5 − 0.5·cos(2πn / length)."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / length)


def fit(samples: np.ndarray, length: int = LENGTH, rate: int = RATE) -> tuple[np.ndarray, str | None]:
    """``samples`` cut to ``length`` where longer, with a warning that says so (None: nothing was cut); shorter ones
    are padded by ``log_mel``."""
    if len(samples) <= length:
        return samples, None
    warning = (f"the audio lasts {len(samples) / rate:.2f} s; Whisper reads {length / rate:g} s: the rest is cut, as "
               "transformers' feature extractor cuts it")  # fmt: skip
    return samples[:length], warning


def log_mel(samples: np.ndarray, bins: int, *, length: int = LENGTH) -> np.ndarray:
    """The log-mel features ``[mel, frame]`` (float32, ``(bins, length / HOP)``: (80, 3000)) of mono samples at 16 kHz,
    padded with zeros or cut to ``length`` (see the module's docstring)."""
    wave = np.zeros(length, dtype=np.float32)
    kept = np.asarray(samples, dtype=np.float32)[:length]
    wave[: len(kept)] = kept
    padded = np.pad(wave, N_FFT // 2, mode="reflect").astype(np.float64)  # (length + N_FFT,)
    frames = sliding_window_view(padded, N_FFT)[::HOP]  # (length / HOP + 1, N_FFT)
    spectrum = np.fft.rfft(frames * hann(N_FFT), axis=1).astype(np.complex64)  # (frames, N_FFT / 2 + 1)
    power = np.abs(spectrum.astype(np.complex128)) ** 2
    mel = np.maximum(FLOOR, mel_filters(bins).T @ power.T)  # (bins, frames)
    logs = np.log10(mel).astype(np.float32)[:, :-1]  # (bins, length / HOP)
    logs = np.maximum(logs, logs.max() - np.float32(8.0))
    return (logs + np.float32(4.0)) / np.float32(4.0)


def time_label(position: int, step: float) -> str:
    """A position of the encoder as the time it starts at: ``0.02s``."""
    return f"{position * step:.2f}s"


@dataclass(frozen=True, eq=False)
class AudioInput:
    """Audio as a stack reads it: the log-mel ``features`` ``[mel, frame]`` (float32), the labels of the stack's
    positions (``tokens``: the time each starts at, ``0.00s``, ``0.02s``, …), how long the audio was before padding
    (``seconds``) and ``warnings`` about it (audio cut to the window)."""

    features: np.ndarray
    tokens: tuple[str, ...]
    seconds: float
    warnings: tuple[str, ...] = ()
    kind: InputKind = InputKind.AUDIO

    @property
    def special(self) -> tuple[bool, ...]:
        """No position of audio is a special token."""
        return (False,) * len(self.tokens)

    @property
    def positions(self) -> range:
        """The stack's positions, 0..N-1: the rows of its position table."""
        return range(len(self.tokens))


def audio_input(samples: np.ndarray, bins: int, positions: int, *, rate: int = RATE) -> AudioInput:
    """Mono samples at ``rate`` Hz as the input of an encoder of ``positions`` positions over the window (Whisper's
    1500, each 2 frames: 20 ms): cut to the window with a warning where longer, features of ``bins`` mel bins."""
    kept, warning = fit(samples, LENGTH, rate)
    step = LENGTH / rate / positions
    tokens = tuple(time_label(i, step) for i in range(positions))
    return AudioInput(log_mel(kept, bins), tokens, len(kept) / rate, () if warning is None else (warning,))
