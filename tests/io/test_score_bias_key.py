"""The ``score_bias`` input key: nested lists H × N × M (or a 3-D array), numbers checked as any matrix's."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.errors import ConfigError, LimitError
from attnx.io.documents import Document, parse_document
from attnx.io.schema import spec_from_document
from attnx.limits import Limits

BASE = "heads: 2\nq: [[1, 0], [0, 1]]\nk: [[1, 0], [0, 1], [1, 1]]\nv: [[1, 2], [3, 4], [5, 6]]\n"


def read(bias: str) -> np.ndarray | None:
    """The spec's bias from ``BASE`` with ``score_bias: {bias}`` (2 heads, 2 queries, 3 keys)."""
    return spec_from_document(parse_document(f"{BASE}score_bias: {bias}\n", "in.yaml")).score_bias


def error_of(bias: str) -> str:
    """The ConfigError that ``score_bias: {bias}`` gives."""
    with pytest.raises(ConfigError) as info:
        read(bias)
    return str(info.value)


class TestScoreBiasKey:
    """Reading, and refusing, a bias."""

    def test_nested_lists(self) -> None:
        """Two heads of 2 × 3 become a read-only float array of 2 × 2 × 3, values as written."""
        bias = read("[[[0, -1, -2], [1, 0, -1]], [[0, 0.5, 1e0], [2, 1, 0]]]")
        assert bias is not None and bias.shape == (2, 2, 3) and not bias.flags.writeable
        assert bias[0, 0].tolist() == [0.0, -1.0, -2.0] and bias[1, 0, 2] == 1.0

    def test_absent_is_none(self) -> None:
        """Without the key the spec has no bias."""
        assert spec_from_document(parse_document(BASE, "in.yaml")).score_bias is None

    @pytest.mark.parametrize(
        ("bias", "message"),
        [
            (
                "[[[0, 0, 0], [0, 0, 0]]]",
                "expected one matrix per head, 2 × 2 × 3 (heads × queries × keys), got 1 heads",
            ),
            ("1", "expected one matrix per head, 2 × 2 × 3 (heads × queries × keys), got int 1"),
            ("[[[0, 0], [0, 0]], [[0, 0], [0, 0]]]", "score_bias[0]: expected 2 × 3 (queries × keys), got 2 × 2"),
            ("[[[0, 0, .inf], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]]", "expected a finite number"),
            ("[[[0, 0, '1'], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]]", "a number in quotes is text"),
        ],
    )
    def test_refused(self, bias: str, message: str) -> None:
        """A wrong count of heads, a wrong matrix, or a cell that is no finite number is a ConfigError."""
        assert message in error_of(bias)

    def test_array_input(self) -> None:
        """From a binary input, a 3-D array of the right shape is read; another shape is refused."""
        data = {"heads": 2, "q": np.eye(2), "k": np.ones((3, 2)), "v": np.ones((3, 2))}
        bias = np.arange(12.0).reshape(2, 2, 3)
        spec = spec_from_document(Document({**data, "score_bias": bias}, "in.npz", limits=Limits()))
        np.testing.assert_array_equal(spec.score_bias, bias)
        with pytest.raises(ConfigError, match=r"expected an array of 2 × 2 × 3 .*got shape \(2, 3, 2\)"):
            spec_from_document(Document({**data, "score_bias": bias.reshape(2, 3, 2)}, "in.npz", limits=Limits()))

    def test_element_cap(self) -> None:
        """A bias over the element cap is refused before it is built."""
        doc = parse_document(f"{BASE}score_bias: [[[0, 0, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]]\n", "in.yaml")
        small = Document(doc.data, "in.yaml", limits=Limits(max_elements=10))
        with pytest.raises(LimitError, match="element cap"):
            spec_from_document(small)
