"""The standard streams when their reader goes away: stdout sent nowhere, so that nothing fails writing to it again.

Used by the console script (``attnx.console``) and the CLI (``attnx.cli``) alike; it imports nothing of attnx.
"""

from __future__ import annotations

import os
import sys


def quiet_stdout() -> None:
    """The reader of stdout went away (`attnx ... | head -1`): send what is left nowhere, so that Python's
    exit-time flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
