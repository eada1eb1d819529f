"""Closed vocabularies as plain names, importing nothing: what the command line offers at start-up reads them here.

Each tuple is the registry of its names: the modules that act on a name (the engines, the settings, the rotary
positions, the tolerances) import it from here, and the command line builds its choices from it
(``attnx.cli.options``), so a name added here is offered everywhere at once. The first name is the default where
there is one.
"""

from __future__ import annotations

# The engines of ``attnx.engines.ENGINES``, by the name ``compute`` and ``--engine`` take (a test compares them).
ENGINE_NAMES = ("numpy", "torch")
# The half types: an engine may compute in them (torch alone), NumPy has no arithmetic for them.
HALF = ("bfloat16", "float16")
# Every dtype an engine computes in, the default first: the torch engine's on a CPU or CUDA, the NumPy engine's first
# two, MPS's float32 and float16.
DTYPES = ("float64", "float32", *HALF)
# The dtypes a kernel's result is checked in, each with its tolerance: from the most precise to the least.
KERNEL_DTYPES = ("float64", "float32", "float16", "bfloat16")
# How heads own the columns of Q, K and V: blocks of d_k, or column j for head j mod H.
LAYOUTS = ("contiguous", "interleaved")
# What scores are multiplied by, when the scale is not a number: 1/√d_k, 1/√d_model, or 1.
SCALE_MODES = ("sqrt_dk", "sqrt_d_model", "none")
# Which columns of a head rotary positions turn together: (i, i + d/2), Hugging Face's, or (2i, 2i + 1).
PAIRINGS = ("half", "interleaved")
