"""Fuzzing the loaders: whatever the bytes, only AttnxError escapes (and what loads also computes)."""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnx.engines import compute
from attnx.errors import AttnxError
from attnx.io import load_source
from attnx.io.arrays import parse_npz
from attnx.io.documents import parse_document
from attnx.io.schema import KEYS, spec_from_document
from attnx.limits import Limits

CONFIGS = sorted(Path(__file__).parents[2].joinpath("configs").glob("*.yaml"))
SEEDS = [path.read_text("utf-8") for path in CONFIGS]
SEEDS += [json.dumps(parse_document(text, "seed.yaml").data) for text in SEEDS]  # the same documents as JSON
SMALL = Limits(max_bytes=1 << 20, max_yaml_bytes=64 << 10, max_dimension=64, max_elements=4096)
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def only_attnx_errors(load: Callable[[], object]) -> None:
    """Run ``load``; an AttnxError is an answer, anything else fails the test. A spec that loads must compute."""
    try:
        loaded = load()
        if hasattr(loaded, "data"):  # a Document: go on to the spec
            loaded = spec_from_document(loaded)  # type: ignore[arg-type]
        compute(loaded)  # type: ignore[arg-type]
    except AttnxError:
        pass


# Values a hostile document may hold: every YAML/JSON scalar, extremes included, nested a little.
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1e308, -1e308, 1e-320, 3.5e38, 0.0, -0.0, "1e3", "causal", "on", "no", "", "\x1b[31m"])
    | st.text(max_size=8)
)
ROWS = st.lists(st.lists(st.floats(-1e6, 1e6) | SCALARS, max_size=5), max_size=5)
VALUES = st.recursive(SCALARS | ROWS, lambda inner: st.lists(inner, max_size=4), max_leaves=20)
DOCUMENTS = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), VALUES, max_size=8)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A valid document from configs/ (YAML or JSON) with a few characters deleted, replaced or inserted."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        insert = draw(st.text(max_size=3) | st.sampled_from(list("[]{}:,-&*!|>'\"\t\n#%@`")))
        text = text[:at] + insert + text[at + cut :]
    return text


class TestTextFuzz:
    """Broken text through the YAML and JSON parsers and the schema."""

    @FUZZ
    @given(text=st.text(max_size=200), name=st.sampled_from(["in.yaml", "in.json", "<stdin>"]))
    def test_any_text(self, text: str, name: str) -> None:
        """Arbitrary text, read as YAML or JSON, raises nothing but AttnxError."""
        only_attnx_errors(lambda: parse_document(text, name, SMALL))

    @FUZZ
    @given(text=mutated(), name=st.sampled_from(["in.yaml", "in.json"]))
    def test_mutated_configs(self, text: str, name: str) -> None:
        """The shipped configs with random edits raise nothing but AttnxError."""
        only_attnx_errors(lambda: parse_document(text, name, SMALL))

    @FUZZ
    @given(data=DOCUMENTS)
    def test_hostile_values_as_json(self, data: dict) -> None:
        """Any mapping of keys to hostile values, written as JSON (NaN and Infinity literals too)."""
        only_attnx_errors(lambda: parse_document(json.dumps(data), "in.json", SMALL))

    @FUZZ
    @given(data=DOCUMENTS)
    def test_hostile_values_as_yaml(self, data: dict) -> None:
        """The same mappings written as YAML."""
        only_attnx_errors(lambda: parse_document(yaml.safe_dump(data), "in.yaml", SMALL))


NPZ_ARRAYS = hnp.arrays(
    dtype=hnp.boolean_dtypes() | hnp.integer_dtypes() | hnp.floating_dtypes() | hnp.unicode_string_dtypes(),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


class TestBinaryFuzz:
    """Broken bytes through the file reader and the .npz reader."""

    @FUZZ
    @given(raw=st.binary(max_size=300), suffix=st.sampled_from([".yaml", ".json", ".npz", ".txt"]))
    def test_any_file(self, raw: bytes, suffix: str) -> None:
        """Arbitrary bytes in a file of any suffix raise nothing but AttnxError."""
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"input{suffix}"
            path.write_bytes(raw)
            only_attnx_errors(lambda: load_source(str(path), SMALL))

    @FUZZ
    @given(arrays=st.dictionaries(st.sampled_from(KEYS), NPZ_ARRAYS, max_size=6))
    def test_npz_of_any_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """An .npz of arrays of any dtype and shape under the input keys raises nothing but AttnxError."""
        only_attnx_errors(lambda: parse_npz(npz_bytes(arrays), "in.npz", SMALL))

    @FUZZ
    @given(data=st.data())
    def test_corrupted_npz(self, data: st.DataObject) -> None:
        """A valid .npz with bytes overwritten (headers, sizes, compressed data) raises nothing but AttnxError."""
        raw = bytearray(npz_bytes({"q": np.eye(3), "k": np.eye(3), "v": np.ones((3, 3))}))
        for _ in range(data.draw(st.integers(1, 6))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        only_attnx_errors(lambda: parse_npz(bytes(raw), "in.npz", SMALL))
