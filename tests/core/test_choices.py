"""The plain vocabularies of attnx.core.choices: the modules that act on each name have exactly its names."""

from __future__ import annotations

import pytest

from attnx.core.choices import DTYPES, ENGINE_NAMES, HALF, KERNEL_DTYPES, LAYOUTS, PAIRINGS, SCALE_MODES


class TestAgreement:
    def test_engine_names_are_the_engines(self) -> None:
        """``ENGINE_NAMES`` holds the keys of ``ENGINES``, in its order, and each engine answers to its name."""
        from attnx.engines import ENGINES

        assert tuple(ENGINES) == ENGINE_NAMES
        assert all(entry.name == name for name, entry in ENGINES.items())

    def test_dtypes_are_the_engines_dtypes(self) -> None:
        """The NumPy engine computes in the first two of ``DTYPES`` (the default first), not in the half types."""
        from attnx.engines import load_engine

        assert load_engine("numpy").dtypes("cpu") == DTYPES[:2] == tuple(d for d in DTYPES if d not in HALF)

    def test_torch_computes_in_every_dtype(self) -> None:
        """The torch engine on a CPU offers ``DTYPES`` as they are, in their order."""
        pytest.importorskip("torch")
        from attnx.engines import load_engine

        assert load_engine("torch").dtypes("cpu") == DTYPES

    def test_kernel_dtypes_are_the_dtypes_by_precision(self) -> None:
        """A kernel is checked in any dtype an engine computes in, ordered by the tolerance each one gets."""
        from attnx.analysis.tolerance import EPSILON, loosest

        assert set(KERNEL_DTYPES) == set(DTYPES) == set(EPSILON)
        assert [EPSILON[d] for d in KERNEL_DTYPES] == sorted(EPSILON.values())
        assert loosest(*KERNEL_DTYPES) == KERNEL_DTYPES[-1]

    def test_settings_read_the_same_tuples(self) -> None:
        """The settings and the rotary positions check their values against these very tuples."""
        from attnx.core import positions, settings, spec

        assert settings.LAYOUTS is spec.LAYOUTS is LAYOUTS
        assert settings.SCALE_MODES is spec.SCALE_MODES is SCALE_MODES
        assert positions.PAIRINGS is PAIRINGS
