"""run's CSV, streamed: chunks of rows made column by column, the same text a row-by-row writer makes."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from attnx.engines import compute
from attnx.errors import UsageError
from attnx.render import formats
from tests.specs import loaded


@pytest.fixture
def result():  # type: ignore[no-untyped-def]
    spec = loaded(seed=3, tokens=("a", "b", "c"), d_model=4, heads=2)
    return compute(spec)


def row_by_row(result, names):  # type: ignore[no-untyped-def]
    """The rows as a plain writer makes them, one index at a time (the reference for the chunked writer)."""
    tensors = formats.pick(result, names)
    axes = [a for a in formats.COLUMN_ORDER if any(a in formats.TENSOR_AXES[n] for n in tensors)]
    labels = [a for a in ("query", "key") if a in axes]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["tensor", *axes, *(f"{a}_token" for a in labels), "value"])
    words = {"query": result.tokens, "key": result.key_tokens}
    for name, array in tensors.items():
        own = formats.TENSOR_AXES[name]
        for index in np.ndindex(array.shape):
            at = dict(zip(own, index, strict=True))
            cells = [at.get(a, "") for a in axes] + [words[a][at[a]] if a in at else "" for a in labels]
            value = float(array[index])
            writer.writerow([name, *cells, repr(value) if np.isfinite(value) else ""])
    return buffer.getvalue()


class TestStreamedCsv:
    """The chunked writer."""

    def test_same_text_in_small_chunks(self, result, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
        """With 7 rows a chunk, every tensor comes in several chunks; joined, they are the row-by-row text."""
        monkeypatch.setattr(formats, "CSV_ROWS", 7)
        chunks = list(formats.to_csv(result))
        assert chunks[0].startswith("tensor,head,kv_head,query,key,dim,query_token,key_token,value\n")
        assert len(chunks) > 20 and "".join(chunks) == row_by_row(result, None)

    def test_non_finite_values_are_empty_cells(self, result) -> None:  # type: ignore[no-untyped-def]
        """A NaN is an empty cell, as before."""
        result.weights.flags.writeable = True
        result.weights[0, 0, 1] = np.nan
        text = "".join(formats.to_csv(result, ["weights"]))
        assert "weights,0,0,1,a,b,\n" in text and text == row_by_row(result, ["weights"])

    def test_a_wrong_name_is_refused_before_any_chunk(self, result) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(UsageError, match="projected"):
            formats.to_csv(result, ["projected"])
