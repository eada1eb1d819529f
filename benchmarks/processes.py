"""What the whole-process benchmarks share: how to start attnx, and one child's wall time and peak RSS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_SCRIPT = shutil.which("attnx", path=str(Path(sys.executable).parent)) or shutil.which("attnx")
ATTNX = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "attnx"]


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB, the child's ``ru_maxrss`` from ``wait4``) of one child process."""
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: progress bars cannot fill it and block the child
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        if status != 0:
            stderr.seek(0)
            raise SystemExit(f"failed: {' '.join(command[:6])} ...\n{stderr.read().decode(errors='replace')}")
    return seconds, usage.ru_maxrss / 1024
