"""Word alignment from cross-attention weights: the mean over the chosen layers and heads, and its best source."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.analysis.alignment import align
from attnx.errors import ChoiceError

SOURCE, TARGET = ("the", "cat", "</s>"), ("<pad>", "le", "chat")


def cross() -> list[np.ndarray]:
    """Two layers of two heads over 3 target × 3 source tokens, rows summing to 1."""
    rng = np.random.default_rng(0)
    layers = rng.random((2, 2, 3, 3))
    return list(layers / layers.sum(axis=-1, keepdims=True))


class TestAlign:
    def test_mean_of_every_layer_and_head(self) -> None:
        """Without a choice, the weights are the mean over every layer and head, and each row still sums to 1."""
        weights = cross()
        found = align(weights, SOURCE, TARGET)
        np.testing.assert_allclose(found.weights, np.mean(weights, axis=(0, 1)), rtol=0, atol=1e-15)
        np.testing.assert_allclose(found.weights.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        assert found.layers == (0, 1) and found.heads == (0, 1)
        assert found.best.tolist() == np.argmax(np.mean(weights, axis=(0, 1)), axis=1).tolist()

    def test_chosen_layers_and_heads(self) -> None:
        """The last layer's second head alone is that head's weights; -1 counts from the end."""
        weights = cross()
        found = align(weights, SOURCE, TARGET, layers=[-1], heads=[1, 1])
        assert found.layers == (1,) and found.heads == (1,)
        np.testing.assert_array_equal(found.weights, weights[1][1])

    def test_a_peaked_row_is_found(self) -> None:
        """A head that puts all of a row's weight on one source token aligns it there."""
        weights = [np.full((1, 3, 3), 1 / 3)]
        weights[0][0, 2] = [0.0, 1.0, 0.0]
        assert align(weights, SOURCE, TARGET).best.tolist() == [0, 0, 1]

    @pytest.mark.parametrize(("layers", "heads", "message"), [([2], None, "layer 2 does not exist: there are layers"),
                                                             (None, [-3], "head -3 does not exist")])  # fmt: skip
    def test_out_of_range(self, layers: list[int] | None, heads: list[int] | None, message: str) -> None:
        """A layer or head the decoder lacks is a ChoiceError giving the range."""
        with pytest.raises(ChoiceError, match=message):
            align(cross(), SOURCE, TARGET, layers=layers, heads=heads)
