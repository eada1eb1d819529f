"""Whisper's token and word timestamps from its alignment heads: median filter, dynamic time warping, word spans."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from attnx.errors import ConfigError

PRECISION = 0.02  # seconds between two of the encoder's positions: 30 s over 1500
DIAGONAL, UP, LEFT = 0, 1, 2  # the step into a cell of the warping path: from (i-1, j-1), (i-1, j) or (i, j-1)


def median_filter(values: np.ndarray, width: int) -> np.ndarray:
    """The running median of ``width`` (odd) values along the last axis, the ends padded by reflection (the edge value
    not repeated), in ``values``' dtype; an axis no longer than ``width // 2`` is returned as it is."""
    if width <= 0 or width % 2 != 1:
        raise ConfigError(f"the median filter's width must be an odd number, not {width}")
    half = width // 2
    if values.shape[-1] <= half:
        return values
    pad = [(0, 0)] * (values.ndim - 1) + [(half, half)]
    padded = np.pad(values, pad, mode="reflect")
    windows = sliding_window_view(padded, width, axis=-1)  # (..., n, width)
    return np.sort(windows, axis=-1)[..., half]  # NaN sorts last, as torch's sort puts it


def dynamic_time_warping(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through ``cost`` ``[text, time]`` from (0, 0) to its last cell, as its text and
    time indices in order. A cell's path total is kept in float32; where the steps in tie, the step along time
    wins, then the one along text (Whisper's choice, which ``transformers`` keeps)."""
    rows, columns = cost.shape
    total = np.full((rows + 1, columns + 1), np.inf, dtype=np.float32)
    total[0, 0] = 0.0
    step = np.full((rows + 1, columns + 1), LEFT, dtype=np.int8)
    matrix = np.asarray(cost, dtype=np.float64)
    for diagonal in range(2, rows + columns + 1):  # every cell of one anti-diagonal depends on the two before
        i = np.arange(max(1, diagonal - columns), min(rows, diagonal - 1) + 1)
        j = diagonal - i
        across, up, left = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
        take_across = (across < up) & (across < left)
        take_up = ~take_across & (up < across) & (up < left)
        best = np.where(take_across, across, np.where(take_up, up, left))
        total[i, j] = matrix[i - 1, j - 1] + best.astype(np.float64)
        step[i, j] = np.where(take_across, DIAGONAL, np.where(take_up, UP, LEFT))
    step[0, :], step[:, 0] = LEFT, UP
    text, time = [], []
    i, j = rows, columns
    while i > 0 or j > 0:
        text.append(i - 1)
        time.append(j - 1)
        move = step[i, j]
        i, j = (i - 1, j - 1) if move == DIAGONAL else (i - 1, j) if move == UP else (i, j - 1)
    return np.array(text[::-1], dtype=np.intp), np.array(time[::-1], dtype=np.intp)


def token_frames(weights: np.ndarray, *, prompt: int, frames: int | None, width: int) -> np.ndarray:
    """The encoder position each token starts at, from the alignment heads' cross-attention ``weights`` ``[head,
    row, position]`` (row r: the decoder reading token r): the positions cut to the audio's (``frames // 2``, its
    log-mel frames halved; None: all), the prompt's rows dropped; each position standardised over the rows (its
    mean off, over its population standard deviation), median-filtered along the positions (``width``), averaged
    over the heads; the path of dynamic time warping through the negated result; each row's first position on it.
    One value per row and one more (the token after the last row), as transformers' ``_extract_token_timestamps``
    gives them: the prompt's 0, the last repeated."""
    rows = weights.shape[1]
    found = np.zeros(rows + 1, dtype=np.intp)
    kept = weights if frames is None else weights[..., : frames // 2]
    kept = kept[:, prompt:, :]
    if kept.shape[1] == 0:
        return found
    with np.errstate(divide="ignore", invalid="ignore"):  # one row: every deviation is 0, as transformers divides
        mean = kept.mean(axis=-2, keepdims=True)
        spread = np.sqrt(((kept - mean) ** 2).mean(axis=-2, keepdims=True))
        standard = (kept - mean) / spread
    smoothed = median_filter(standard, width).mean(axis=0)  # (row, position)
    text, time = dynamic_time_warping(-smoothed.astype(np.float64))
    jumps = np.concatenate([[True], np.diff(text) != 0])
    starts = time[jumps]
    found[prompt:rows] = starts
    found[rows] = starts[-1]
    return found


@dataclass(frozen=True)
class TokenTime:
    """One token of the decoder's sequence (``index`` from 0, its ``id`` and ``token`` label), the time it ends at
    (transformers' token timestamp for it) and the time it starts at (the end of the token before; 0 for the first),
    in seconds; ``special``: the prompt's and the end tokens, which no word holds."""

    index: int
    id: int
    token: str
    start: float
    end: float
    special: bool


@dataclass(frozen=True)
class WordTime:
    """A word: its ``text``, its tokens (their indices in the sequence), the time its first token starts and the time
    its last token ends, in seconds."""

    text: str
    tokens: tuple[int, ...]
    start: float
    end: float


@dataclass(frozen=True)
class Timestamps:
    """Token and word timestamps: the alignment ``heads`` ([layer, head] pairs, from 0) whose weights gave them, the
    encoder positions read (``positions``: the audio's), the median filter's ``width`` and the seconds a position
    lasts (``precision``); ``tokens`` (the decoder's sequence, prompt first) and ``words``; ``written`` the indices
    of the tokens the model wrote (empty for a target it read)."""

    heads: tuple[tuple[int, int], ...]
    positions: int
    width: int
    precision: float
    tokens: tuple[TokenTime, ...]
    words: tuple[WordTime, ...]
    written: tuple[int, ...] = ()


def seconds(position: int, precision: float = PRECISION) -> float:
    """An encoder position's start time in seconds, rounded to the microsecond (0.06, not 0.06000000000000001)."""
    return round(position * precision, 6)


def token_times(
    frames: np.ndarray, ids: Sequence[int], labels: Sequence[str], special: Sequence[bool], precision: float
) -> tuple[TokenTime, ...]:
    """Each token with its end (``frames[i]``, in positions: transformers' token timestamp, the audio position the
    path reaches as the decoder reads the token) and its start (the token before's end; 0 for the first), as
    transformers' speech-recognition pipeline pairs them for word timestamps."""
    count = len(ids)
    end = [seconds(int(frames[i]), precision) for i in range(count)]
    start = [0.0, *end[:-1]]
    return tuple(TokenTime(i, int(ids[i]), labels[i], start[i], end[i], bool(special[i])) for i in range(count))


def word_spans(texts: Sequence[str], special: Sequence[bool]) -> list[tuple[int, ...]]:
    """The tokens of each word, by index: a word starts at the first token that is not special, at a token whose
    text begins with whitespace, and after a special token; special tokens belong to no word. Punctuation stays in
    the word it is written against (``sat.``; ``(the`` where the bracket carries the space)."""
    spans: list[list[int]] = []
    open_word = False
    for index, (text, is_special) in enumerate(zip(texts, special, strict=True)):
        if is_special:
            open_word = False
            continue
        if not open_word or text[:1].isspace():
            spans.append([])
            open_word = True
        spans[-1].append(index)
    return [tuple(span) for span in spans]


def words(
    tokens: Sequence[TokenTime], texts: Sequence[str], decode: Callable[[Sequence[int]], str]
) -> tuple[WordTime, ...]:
    """The words of ``tokens`` (``word_spans`` on each token's decoded text, ``texts``), each's text ``decode`` of
    its token indices, stripped; its start its first token's, its end its last token's."""
    spans = word_spans(texts, [token.special for token in tokens])
    return tuple(WordTime(decode(span).strip(), span, tokens[span[0]].start, tokens[span[-1]].end) for span in spans)
