"""One wording of where an element sits, for `check --against`, `diff` and attnx.testing alike."""

from __future__ import annotations

import pytest

from attnx.analysis.diff import side_from_result
from attnx.engines import compute
from attnx.io import load_spec
from attnx.render.check import locate_in
from attnx.render.diff_sides import located
from attnx.render.location import locate

RESULT = compute(load_spec())  # The cat sat on mat, 2 heads of d_k 2


@pytest.mark.parametrize(
    ("name", "index", "words"),
    [
        ("weights", (1, 3, 0), "head 1 · query 3 'on' · key 0 'The'"),
        ("q", (0, 1, 1), "head 0 · query 1 'cat' · d 1"),
        ("k", (0, 2, 1), "K/V head 0 · key 2 'sat' · d 1"),
        ("head_outputs", (1, 4, 0), "head 1 · query 4 'mat' · d 0"),
        ("average_weights", (2, 2), "query 2 'sat' · key 2 'sat'"),
        ("output", (1, 3), "query 1 'cat' · column 3 (head 1, d 1)"),
    ],
)
def test_check_and_diff_word_a_place_alike(name: str, index: tuple[int, ...], words: str) -> None:
    """check names a place as diff does; only check, which knows the heads' columns, adds them to a column."""
    assert locate_in(name, index, RESULT) == words  # type: ignore[arg-type]
    assert located(name, index, side_from_result(RESULT, "a.yaml")) == words.removesuffix(" (head 1, d 1)")  # type: ignore[arg-type]


def test_tokens_named_by_their_index_are_not_repeated() -> None:
    """attnx.testing labels queries 0, 1, ...: ``query 3``, not ``query 3 '3'``; a place past the labels is bare."""
    assert locate("weights", (0, 3, 1), ("0", "1", "2", "3"), ("0", "x")) == "head 0 · query 3 · key 1 'x'"
    assert locate("weights", (0, 5, 1), (), ()) == "head 0 · query 5 · key 1"
