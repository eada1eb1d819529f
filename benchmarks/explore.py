"""`attnx explore` on a real terminal (a pseudo-terminal): start-up against `attnx run`, and each key's redraw.

Usage: python benchmarks/explore.py [--repeat 5] [--size 120x40] [--tokens 1024] [--baseline DIR]

For the worked example and for a random causal input of ``--tokens`` tokens (d_model 128, 8 heads), in fresh
processes on a pseudo-terminal of ``--size``:

- start-up: ``attnx run`` until it exits, and ``attnx explore`` until its first screen is drawn (the end of the
  frame that draws the heatmaps: the status line, the token strip, the head's heatmap and the query's row in
  every head); the ratio explore ÷ run; ``settled`` until the screen is still (the trace drawn);
- keys: in one explore session, a key is pressed (→, ], v, ←, …), once the screen has settled after the last;
  ``answer`` is the time until the first frame after the key is written (the status line, token strip and
  heatmaps follow at once); ``settled`` until the screen is still, the trace drawn ``TRACE_DELAY`` after
  the cursor rests.

Each figure is a median over ``--repeat`` sessions (keys: over every press of every session); ``worst`` is
the largest. Frames are told apart by the silence between them (``FRAME_GAP``).

``--baseline DIR`` times a second source tree (a copy of the repository from before a change: its ``attnx``
package is put first on ``PYTHONPATH``) in the same run, its sessions alternating with this tree's, and prints
the ratios this tree ÷ baseline: on a shared machine only figures taken side by side compare.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import select
import shutil
import statistics
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

_SCRIPT = shutil.which("attnx", path=str(Path(sys.executable).parent)) or shutil.which("attnx")
ATTNX = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "attnx"]
# As a user runs it: with bytecode caches, on a colour terminal.
ENV = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "NO_COLOR")}
ENV |= {"TERM": "xterm-256color", "COLORTERM": "truecolor"}
FRAME_GAP = 0.012  # s of silence that ends a frame
SETTLED = 0.4  # s of silence after which the screen is still (well past the trace's delay)
DRAWN = b"in every head"  # the title of the last heatmap on the screen: once written, the first screen is drawn
KEYS = {"→": b"\x1b[C", "←": b"\x1b[D", "]": b"]", "[": b"[", "v": b"v"}
SESSION = ["→"] * 6 + ["]"] * 3 + ["v", "→", "v", "←", "v", "v", "["] + ["←"] * 4


def _controlled_by_stdin() -> None:
    """In the child: a session of its own whose controlling terminal is its stdin, as a terminal's shell gives."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A command running on a pseudo-terminal of ``size`` (columns, rows), its output read as it comes."""

    def __init__(self, command: list[str], size: tuple[int, int], env: dict[str, str] = ENV) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        self.start = time.perf_counter()
        self.process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=env,
                                        preexec_fn=_controlled_by_stdin)  # fmt: skip
        os.close(slave)

    def read_until_quiet(self, quiet: float, first_byte_by: float = 30.0) -> list[float]:
        """The times bytes arrived until ``quiet`` seconds passed without any (waiting up to ``first_byte_by``
        for the first)."""
        arrivals: list[float] = []
        while True:
            wait = quiet if arrivals else first_byte_by
            ready, _, _ = select.select([self.master], [], [], wait)
            if not ready:
                return arrivals
            try:
                chunk = os.read(self.master, 1 << 16)
            except OSError:  # the process closed the terminal
                return arrivals
            if not chunk:
                return arrivals
            arrivals.append(time.perf_counter())

    def read_until(self, marker: bytes) -> float:
        """Read until ``marker`` has been written; when the bytes that completed it arrived."""
        seen = b""
        while True:
            ready, _, _ = select.select([self.master], [], [], 30.0)
            if not ready:
                raise TimeoutError(f"{marker!r} not drawn in 30 s")
            seen = seen[-len(marker) :] + os.read(self.master, 1 << 16)
            if marker in seen:
                return time.perf_counter()

    def press(self, key: bytes) -> float:
        """Write ``key``; the time it was written."""
        os.write(self.master, key)
        return time.perf_counter()

    def close(self) -> None:
        """Quit (q), then make sure the process is gone."""
        try:
            os.write(self.master, b"q")
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
        os.close(self.master)


def first_frame_end(arrivals: list[float]) -> float:
    """When the first frame of ``arrivals`` ended: its last byte before a ``FRAME_GAP`` of silence."""
    end = arrivals[0]
    for t in arrivals[1:]:
        if t - end > FRAME_GAP:
            break
        end = t
    return end


def run_time(arguments: list[str], size: tuple[int, int], env: dict[str, str] = ENV) -> float:
    """Seconds `attnx run` takes on a terminal of ``size``, printing its tables."""
    terminal = Terminal([*ATTNX, "run", *arguments], size, env)
    terminal.read_until_quiet(SETTLED)
    terminal.process.wait()
    elapsed = time.perf_counter() - terminal.start
    os.close(terminal.master)
    return elapsed


def explore_session(
    arguments: list[str], size: tuple[int, int], env: dict[str, str] = ENV
) -> tuple[float, list[float], list[float]]:
    """Start-up (to the end of the first screen), then each key's answer and settled times, in seconds."""
    terminal = Terminal([*ATTNX, "explore", *arguments], size, env)
    try:
        drawn = terminal.read_until(DRAWN)
        startup = first_frame_end([drawn, *terminal.read_until_quiet(FRAME_GAP, FRAME_GAP)]) - terminal.start
        terminal.read_until_quiet(SETTLED)
        answers, settled = [], []
        for key in SESSION:
            pressed = terminal.press(KEYS[key])
            arrivals = terminal.read_until_quiet(SETTLED)
            answers.append(first_frame_end(arrivals) - pressed)
            settled.append(arrivals[-1] - pressed)
        return startup, answers, settled
    finally:
        terminal.close()


class Figures:
    """One source tree's figures on one input: its runs, start-ups, and every key's answer and settled times."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.runs: list[float] = []
        self.startups: list[float] = []
        self.answers: list[float] = []
        self.settled: list[float] = []

    def session(self, arguments: list[str], size: tuple[int, int]) -> None:
        """One `attnx run` and one explore session."""
        self.runs.append(run_time(arguments, size, self.env))
        startup, answers, settled = explore_session(arguments, size, self.env)
        self.startups.append(startup)
        self.answers += answers
        self.settled += settled

    def medians(self) -> tuple[float, float, float, float]:
        """run s, explore s, key answer s, key settled s."""
        lists = (self.runs, self.startups, self.answers, self.settled)
        run, start, answer, settled = (statistics.median(values) for values in lists)
        return run, start, answer, settled

    def row(self, name: str) -> str:
        """The figures as a line of the table, under ``name``."""
        run, start, a, s = self.medians()
        return (f"{name:<38} {run:>7.3f} {start:>10.3f} {start / run:>6.2f} {a * 1e3:>6.1f} "
                f"({max(self.answers) * 1e3:>6.1f}) {s * 1e3:>6.1f} ({max(self.settled) * 1e3:>6.1f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", default="120x40", help="columns x rows")
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--baseline", type=Path, help="a source tree to time alongside, alternating")
    args = parser.parse_args()
    size = tuple(int(part) for part in args.size.split("x"))
    assert len(size) == 2
    long = ["--seed", "0", "--tokens", " ".join(f"t{i}" for i in range(args.tokens)), "--d-model", "128", "-H", "8",
            "--causal"]  # fmt: skip
    inputs = {"worked example": [], f"random, {args.tokens} tokens, causal": long}
    sides = {"": ENV}
    if args.baseline is not None:
        sides["baseline: "] = ENV | {"PYTHONPATH": str(args.baseline.resolve())}
    print(f"terminal {size[0]}x{size[1]}, {args.repeat} sessions each, medians (worst)")
    print(f"{'input':<38} {'run s':>7} {'explore s':>10} {'ratio':>6} {'key: answer ms':>16} {'settled ms':>15}")
    for name, arguments in inputs.items():
        figures = {side: Figures(env) for side, env in sides.items()}
        for figure in figures.values():
            run_time(arguments, size, figure.env)  # warm the file cache and the bytecode caches
        for _ in range(args.repeat):  # interleaved: the sides share the machine's moods
            for figure in figures.values():
                figure.session(arguments, size)
        for side, figure in figures.items():
            print(figure.row(f"{side}{name}"))
        if args.baseline is not None:
            now, before = figures[""].medians(), figures["baseline: "].medians()
            ratios = [a / b for a, b in zip(now, before, strict=True)]
            print(f"{'  this tree ÷ baseline':<38} {ratios[0]:>7.2f} {ratios[1]:>10.2f} {'':>6} {ratios[2]:>6.2f} "
                  f"{'':>9} {ratios[3]:>6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
