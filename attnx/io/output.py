"""Writing output files atomically: a temp file in the same folder, fsync, then os.replace."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from attnx.errors import OutputError


def _mode_for(target: Path) -> int:
    """The replaced file's permissions, or what a new file gets under the current umask."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` all at once.

    Readers see the old file or the new one, never a truncated one; an interruption (Ctrl-C, an
    error) leaves the old file as it was and removes the temp file. Only a hard kill between the
    write and the rename can leave a ``.NAME.*.tmp`` file behind, and even then the old file is intact.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise OutputError(f"{target}: is a directory, expected a file to write")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"{target}: cannot write: {exc.strerror or exc}") from exc
    try:
        os.chmod(tmp, _mode_for(target))  # mkstemp makes 0600; a written file gets the usual mode
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"{target}: cannot write: {exc.strerror or exc}") from exc
        raise
