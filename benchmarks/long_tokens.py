"""Enormous tokens against ordinary ones: `attnx run -s weights` and `attnx trace`, timed in one run.

Usage: python benchmarks/long_tokens.py [--repeat 3]

Writes two-token inputs whose first token is 1 character, or 10,000,000 (`run -s weights`) and 2,000,000
(`trace --query 0`) characters long (the sizes issue 39 found taking over 10 s), and times each command as a whole
process, the short and the long input alternating. Prints the medians and the ratio long ÷ short: the token is cut
before anything measures it, so the ratio stays near 1 (what is left is reading the file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from processes import ATTNX, measure  # benchmarks/ is the script's folder, first on sys.path

CASES = {"run -s weights": (["run"], ["-s", "weights"], 10_000_000), "trace": (["trace"], ["--query", "0"], 2_000_000)}


def written(folder: Path, token: str, name: str) -> Path:
    """A two-token input whose query 0 is ``token``."""
    path = folder / name
    qkv = {"q": [[1.0, 0.0], [0.0, 1.0]], "k": [[1.0, 0.0], [0.0, 1.0]], "v": [[1.0, 2.0], [3.0, 4.0]]}
    path.write_text(json.dumps({**qkv, "tokens": [token, "b"]}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"} | {"COLUMNS": "100"}
    print(f"median of {args.repeat}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="attnx-long-tokens-") as scratch:
        for label, (command, options, size) in CASES.items():
            files = {"short": written(Path(scratch), "x", "short.json"),
                     "long": written(Path(scratch), "A" + "x" * size + "Z", "long.json")}  # fmt: skip
            times: dict[str, list[float]] = {kind: [] for kind in files}
            for _ in range(args.repeat):
                for kind, path in files.items():
                    times[kind].append(measure([*ATTNX, *command, str(path), *options], env)[0])
            short, long = (statistics.median(times[kind]) for kind in ("short", "long"))
            print(f"{label:16} 1 character {short:6.2f} s · {size:,} characters {long:6.2f} s · {long / short:.2f}×")


if __name__ == "__main__":
    sys.exit(main())
