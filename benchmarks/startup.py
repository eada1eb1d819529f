"""Start-up cost of attnx commands against bare imports, measured in one run (medians, interleaved).

Usage: python benchmarks/startup.py [--repeat 25] [--only run,help] [--against DIR]

Prints, for each command, the median wall time and the median CPU time (user + system of the child) and
their ratios to `python -c "import numpy, yaml, typer, rich.console"` (the floor a NumPy CLI pays). The
commands run in turn, round after round, so that load from other programs hits each alike; CPU time is
the steadier figure on a busy machine. ``--against DIR`` also times each command with the attnx package
of another copy of the source (DIR holds its ``attnx/``), both copies started the same way
(``python -c "from attnx.console import main; main()"`` from the copy's folder): a before/after in one run.

Measured on AMD EPYC (2 cores, AVX2 only, shared with other work), Python 3.11, Typer 0.29.2, Rich 15,
2026-11-26, 25 rounds, medians, CPU time (wall time in brackets), `--against` a copy with the CLI as it was
before the flag groups' methods were shared, the app's help listed summaries and Typer's help skipped Rich's
Markdown (attnx/cli/flags.py, attnx/cli/__init__.py, attnx/cli/richhelp.py):

    command            baseline          before               after
    attnx run          0.348 s (0.358)   1.34× (1.42×)        1.26× (1.30×)
    attnx --help                         0.338 s (0.392 s)    0.202 s (0.235 s)
    attnx run --help                     0.378 s (0.406 s)    0.288 s (0.321 s)

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
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The console script, as users run it (`python -m attnx` would add runpy's import to every command).
_SCRIPT = shutil.which("attnx", path=str(Path(sys.executable).parent)) or shutil.which("attnx")
ATTNX = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "attnx"]
# A copy of the source started as the console script starts this one (sys.path[0] is the working folder).
FROM_FOLDER = [sys.executable, "-c", "import sys; sys.argv[0] = 'attnx'; from attnx.console import main; main()"]

BASELINE = "baseline: import numpy, yaml, typer, rich.console"
COMMANDS = {
    "help": ["--help"],
    "version": ["--version"],
    "run": ["run"],
    "run-json": ["run", "--format", "json"],
    "run-help": ["run", "--help"],
    "trace": ["trace", "--token", "cat"],
}
LABELS = {
    "help": "attnx --help",
    "version": "attnx --version",
    "run": "attnx run (built-in example)",
    "run-json": "attnx run --format json",
    "run-help": "attnx run --help",
    "trace": "attnx trace --token cat",
}

# As a user runs it: with bytecode caches. Under PYTHONDONTWRITEBYTECODE every run would compile
# attnx from source while NumPy, Typer and Rich load their installed .pyc files: an unfair baseline.
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``command`` in ``cwd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def plan(only: list[str], against: Path | None) -> dict[str, tuple[list[str], Path]]:
    """Each label -> the command line and its working folder, the baseline first."""
    runs = {BASELINE: ([sys.executable, "-c", "import numpy, yaml, typer, rich.console"], ROOT)}
    for key in only:
        if against is None:
            runs[LABELS[key]] = ([*ATTNX, *COMMANDS[key]], ROOT)
        else:
            runs[f"{LABELS[key]}  [{against}]"] = ([*FROM_FOLDER, *COMMANDS[key]], against)
            runs[f"{LABELS[key]}  [this tree]"] = ([*FROM_FOLDER, *COMMANDS[key]], ROOT)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--only", default=",".join(COMMANDS), help=f"commands among {', '.join(COMMANDS)}")
    parser.add_argument("--against", type=Path, help="a folder holding another copy of the attnx package")
    args = parser.parse_args()
    runs = plan(args.only.split(","), args.against)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for command, cwd in runs.values():  # warm the file cache and write the bytecode caches
        timed(command, cwd)
    for _ in range(args.repeat):  # interleaved, so load on the machine hits every command alike
        for name, (command, cwd) in runs.items():
            samples[name].append(timed(command, cwd))
    walls = {name: statistics.median(wall for wall, _ in runs_) for name, runs_ in samples.items()}
    cpus = {name: statistics.median(cpu for _, cpu in runs_) for name, runs_ in samples.items()}
    print(f"{args.repeat} rounds, medians")
    print(f"{'command':<60} {'wall s':>7} {'×':>6} {'CPU s':>7} {'×':>6}")
    for name in runs:
        print(f"{name:<60} {walls[name]:>7.3f} {walls[name] / walls[BASELINE]:>6.2f} "
              f"{cpus[name]:>7.3f} {cpus[name] / cpus[BASELINE]:>6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
