"""Shared test set-up: the worked example's published numbers and the checkpoint fixtures.

Tests run attnx as a user does with tests/runner.py (``run_attnx``), the one CLI harness.
"""

from __future__ import annotations

import compileall
import os
import re
import sys
from pathlib import Path

# Bytecode caches are written even where PYTHONDONTWRITEBYTECODE is set, and attnx is compiled first: the
# suite's subprocesses (a fresh `python -m attnx`, the docs' shell examples) then start as an installed attnx
# does, from compiled modules, instead of compiling every module again; pytest keeps its rewritten test modules.
sys.dont_write_bytecode = False
compileall.compile_dir(Path(__file__).parent.parent / "attnx", quiet=1)  # before any subprocess imports it
if os.environ.get("PYTEST_XDIST_WORKER"):
    # One BLAS and OpenMP thread per worker: the workers already fill the cores, and BLAS threads that spin
    # while they wait for a core they share would slow every worker down.
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# Tiny BERT, GPT-2 and decoder checkpoints (and the engine fixture) for tests/models and tests/cli.
pytest_plugins = (
    "tests.models.checkpoints",
    "tests.models.decoders",
    "tests.models.encoder_decoders",
    "tests.models.whisper_checkpoints",
    "tests.models.vision_checkpoints",
)

# The worked example of the founding tutorial ("The cat sat on mat", H = 2), as printed there
# to four decimals. These are the textbook's numbers, not numbers attnx produced.
TOKENS = ("The", "cat", "sat", "on", "mat")
HEAD1_WEIGHTS = np.array(
    [
        [0.1237, 0.2509, 0.2509, 0.1237, 0.2509],
        [0.3664, 0.0891, 0.3664, 0.0891, 0.0891],
        [0.1811, 0.1811, 0.3673, 0.0893, 0.1811],
        [0.2000, 0.2000, 0.2000, 0.2000, 0.2000],
        [0.1237, 0.2509, 0.2509, 0.1237, 0.2509],
    ]
)
HEAD2_WEIGHTS = np.array(
    [
        [0.1337, 0.2711, 0.1337, 0.2711, 0.1904],
        [0.2711, 0.1337, 0.1337, 0.2711, 0.1904],
        [0.1337, 0.2711, 0.1337, 0.2711, 0.1904],
        [0.1811, 0.1811, 0.0893, 0.3673, 0.1811],
        [0.2711, 0.1337, 0.1337, 0.2711, 0.1904],
    ]
)
AVERAGE_WEIGHTS = np.array(
    [
        [0.1287, 0.2610, 0.1923, 0.1974, 0.2206],
        [0.3188, 0.1114, 0.2500, 0.1801, 0.1397],
        [0.1574, 0.2261, 0.2505, 0.1802, 0.1858],
        [0.1906, 0.1906, 0.1447, 0.2837, 0.1906],
        [0.1974, 0.1923, 0.1923, 0.1974, 0.2206],
    ]
)
OUTPUT = np.array(
    [
        [0.2491, 0.3763, 0.2289, 0.3663],
        [0.4109, 0.1336, 0.2289, 0.3663],
        [0.2717, 0.2717, 0.2289, 0.3663],
        [0.3000, 0.3000, 0.1799, 0.4579],
        [0.2491, 0.3763, 0.2289, 0.3663],
    ]
)
# With a single head (d_k = 4), the row of "cat": 0.4026 to "The", 0.0898 to itself, 0.2442 to "sat".
SINGLE_HEAD_CAT = {"The": 0.4026, "cat": 0.0898, "sat": 0.2442}

# The step-by-step traces of "The" (row 0) and "cat" (row 1) in the same tutorial. Per head: the query's
# slice, then per key (token, dot product term by term, dot product, scaled score, weight), then the
# head output. The tutorial writes the dot products to one decimal.
TRACES = {
    "The": (
        (
            [1.0, 0.0],
            [
                ("The", "1.0×0.0 + 0.0×1.0", 0.0, 0.0000, 0.1237),
                ("cat", "1.0×1.0 + 0.0×0.0", 1.0, 0.7071, 0.2509),
                ("sat", "1.0×1.0 + 0.0×1.0", 1.0, 0.7071, 0.2509),
                ("on", "1.0×0.0 + 0.0×0.0", 0.0, 0.0000, 0.1237),
                ("mat", "1.0×1.0 + 0.0×0.0", 1.0, 0.7071, 0.2509),
            ],
            [0.2491, 0.3763],
        ),
        (
            [1.0, 0.0],
            [
                ("The", "1.0×0.0 + 0.0×1.0", 0.0, 0.0000, 0.1337),
                ("cat", "1.0×1.0 + 0.0×0.0", 1.0, 0.7071, 0.2711),
                ("sat", "1.0×0.0 + 0.0×0.0", 0.0, 0.0000, 0.1337),
                ("on", "1.0×1.0 + 0.0×1.0", 1.0, 0.7071, 0.2711),
                ("mat", "1.0×0.5 + 0.0×0.5", 0.5, 0.3536, 0.1904),
            ],
            [0.2289, 0.3663],
        ),
    ),
    "cat": (
        (
            [0.0, 2.0],
            [
                ("The", "0.0×0.0 + 2.0×1.0", 2.0, 1.4142, 0.3664),
                ("cat", "0.0×1.0 + 2.0×0.0", 0.0, 0.0000, 0.0891),
                ("sat", "0.0×1.0 + 2.0×1.0", 2.0, 1.4142, 0.3664),
                ("on", "0.0×0.0 + 2.0×0.0", 0.0, 0.0000, 0.0891),
                ("mat", "0.0×1.0 + 2.0×0.0", 0.0, 0.0000, 0.0891),
            ],
            [0.4109, 0.1336],
        ),
        (
            [0.0, 1.0],
            [
                ("The", "0.0×0.0 + 1.0×1.0", 1.0, 0.7071, 0.2711),
                ("cat", "0.0×1.0 + 1.0×0.0", 0.0, 0.0000, 0.1337),
                ("sat", "0.0×0.0 + 1.0×0.0", 0.0, 0.0000, 0.1337),
                ("on", "0.0×1.0 + 1.0×1.0", 1.0, 0.7071, 0.2711),
                ("mat", "0.0×0.5 + 1.0×0.5", 0.5, 0.3536, 0.1904),
            ],
            [0.2289, 0.3663],
        ),
    ),
}


def trace_terms(short: str) -> str:
    """The tutorial's dot product terms (``0.0×0.0 + 2.0×1.0``) as a trace writes them, at its 4 decimals."""
    return re.sub(r"\d+\.\d+", lambda number: f"{float(number[0]):.4f}", short)


# Four decimals as printed: a value is right when it rounds to the printed figure.
DECIMALS_4 = 0.5e-4 + 1e-12


# The longest test files first (their usual seconds in brackets, 2 cores): with a whole file per worker (--dist
# loadfile) the suite ends when its last file does, and these, collected last by name, kept one worker busy for
# 20-30 s after the other had finished. Sorted stably: the order within each file, which the docs need, stays.
LONGEST_FIRST = (
    "tests/test_docs.py",  # [19]
    "tests/models/test_gguf_smollm2.py",  # [17]
    "tests/tui/test_explore.py",  # [15]
    "tests/cli/test_help.py",  # [10]
    "tests/tui/test_snapshots.py",  # [9]
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run ``LONGEST_FIRST``'s files before the rest."""
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONGEST_FIRST)))
