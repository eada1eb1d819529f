"""The engine fixture: every engine test runs on each engine that can be imported here."""

from __future__ import annotations

import importlib.util

import pytest

TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(
    params=[
        "numpy",
        pytest.param("torch", marks=pytest.mark.skipif(not TORCH, reason="torch is not installed")),
    ]
)
def engine(request: pytest.FixtureRequest) -> str:
    return request.param
