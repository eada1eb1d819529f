"""Start-up cost of attnx commands against bare imports, measured in one run (medians, interleaved).

Usage: python benchmarks/startup.py [--repeat 15]

Prints the median wall time of each command and its ratio to
`python -c "import numpy, yaml, typer, rich.console"` (the floor a NumPy CLI pays).

Measured on AMD EPYC (2 cores, AVX-512), Python 3.11, 15 runs each, 2026-11-23:

    Typer    baseline   attnx --help   attnx run        attnx run -f json   attnx trace
    0.28.0   0.141 s    0.153 (1.09×)  0.173 s (1.23×)  0.149 s (1.06×)     0.204 s (1.45×)
    0.29.2   0.163 s    0.159 (0.98×)  0.283 s (1.73×)  0.257 s (1.57×)     0.331 s (2.03×)

From 0.29 Typer converts every parameter of the command that runs through a pydantic TypeAdapter
(even a default of None): importing pydantic and building the first adapter cost about 0.1 s.
`--help` and `--version` build none.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The console script, as users run it (`python -m attnx` would add runpy's import to every command).
_SCRIPT = shutil.which("attnx", path=str(Path(sys.executable).parent)) or shutil.which("attnx")
ATTNX = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "attnx"]

COMMANDS = {
    "baseline: import numpy, yaml, typer, rich.console": [
        sys.executable, "-c", "import numpy, yaml, typer, rich.console",
    ],
    "attnx --help": [*ATTNX, "--help"],
    "attnx --version": [*ATTNX, "--version"],
    "attnx run (built-in example)": [*ATTNX, "run"],
    "attnx run --format json": [*ATTNX, "run", "--format", "json"],
    "attnx trace --token cat": [*ATTNX, "trace", "--token", "cat"],
}  # fmt: skip


# As a user runs it: with bytecode caches. Under PYTHONDONTWRITEBYTECODE every run would compile
# attnx from source while NumPy, Typer and Rich load their installed .pyc files: an unfair baseline.
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():  # warm the file cache and write the bytecode caches
        wall(command)
    for _ in range(args.repeat):  # interleaved, so load on the machine hits every command alike
        for name, command in COMMANDS.items():
            times[name].append(wall(command))
    base = statistics.median(next(iter(times.values())))
    print(f"{'command':<52} {'median s':>9} {'× baseline':>11}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:<52} {median:>9.3f} {median / base:>11.2f}")


if __name__ == "__main__":
    main()
