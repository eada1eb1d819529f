"""Write the tiny random checkpoints the docs use, models/gpt2-tiny, models/llama-tiny and models/t5-tiny, offline.

Usage, from the repository's root, in the test environment the README sets up (transformers and torch)::

    python scripts/tiny_models.py [FOLDER]    # FOLDER defaults to models

They are the test suite's own checkpoints, built by its own code, so the docs' outputs are the ones the tests
see; nothing is downloaded (the tokenizers are trained on three short sentences, the weights drawn from a
seeded generator, every run writes the same files):

- ``gpt2-tiny``: a GPT-2 of 3 layers, 4 heads and d_model 32, with a byte-level BPE tokenizer
  (``build_gpt2`` in tests/models/checkpoints.py);
- ``llama-tiny``: a Llama of 3 layers, 4 query heads sharing 2 K/V heads of d_k 16, hidden size 32, biases,
  llama3-scaled RoPE, its weights sharded, with a SentencePiece-style tokenizer (``VARIANTS["llama"]`` built
  by tests/models/decoders.py);
- ``t5-tiny``: a T5 encoder-decoder of 2 encoder and 3 decoder layers, 3 heads of d_k 8, d_model 20, relative
  position buckets, with a Unigram tokenizer (``SEQ2SEQ["t5"]`` built by tests/models/encoder_decoders.py).

It prints the folder of each checkpoint it wrote. Without torch or transformers it says so and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository, whose tests/ holds the builders
SET_UP = 'python -m pip install -e ".[dev]" -c constraints.txt'


def build(folder: Path) -> list[Path]:
    """Write ``folder/gpt2-tiny``, ``folder/llama-tiny`` and ``folder/t5-tiny``; their paths."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bars on stderr
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.models.checkpoints import build_gpt2
    from tests.models.decoders import VARIANTS
    from tests.models.decoders import build as build_decoder
    from tests.models.encoder_decoders import SEQ2SEQ, build_seq2seq

    gpt2, llama, t5 = folder / "gpt2-tiny", folder / "llama-tiny", folder / "t5-tiny"
    build_gpt2(gpt2)
    llama.mkdir(parents=True, exist_ok=True)
    build_decoder(llama, VARIANTS["llama"])
    t5.mkdir(parents=True, exist_ok=True)
    build_seq2seq(t5, SEQ2SEQ["t5"])
    return [gpt2, llama, t5]


def main(argv: Sequence[str] | None = None) -> int:
    """Build the checkpoints in the folder given (``models`` by default) and print where; 2 without torch."""
    parser = argparse.ArgumentParser(description="Write the tiny random GPT-2, Llama and T5 checkpoints the docs use.")
    parser.add_argument("folder", nargs="?", type=Path, default=Path("models"), help="where (default: models)")
    options = parser.parse_args(argv)
    for package in ("torch", "transformers"):
        try:
            __import__(package)
        except ImportError:
            print(f"tiny_models.py: {package} is not installed; the test environment has it: {SET_UP}", file=sys.stderr)
            return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the network
    for path in build(options.folder):
        print(path.as_posix())
    return 0


if __name__ == "__main__":
    sys.exit(main())
