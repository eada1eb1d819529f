"""Writing output files safely: atomically for files, directly for devices and pipes, never over an input.

A regular file (new or existing) is written to a temp file in the same folder, fsynced, then renamed over
the target, so readers see the old file or the new one, never half of one. A symlink is written through:
the file it points to is replaced and the link stays. A character device, FIFO or socket (``/dev/null``, a
named pipe) is written to directly: replacing it would destroy it. A path ending in ``/`` names a folder,
not a file. A target that is one of the files this command read (same device and inode) is refused.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from attnx.errors import OutputError, UsageError

# The (device, inode) of every file the running command has read; None outside a command.
_READ: ContextVar[set[tuple[int, int]] | None] = ContextVar("attnx_files_read", default=None)


@contextlib.contextmanager
def reading_scope() -> Iterator[None]:
    """Within this, every input file noted with ``note_read`` is protected from being written over."""
    token = _READ.set(set())
    try:
        yield
    finally:
        _READ.reset(token)


def note_read(path: str | Path) -> None:
    """Remember that ``path`` is an input of the running command (nothing outside a ``reading_scope``)."""
    read = _READ.get()
    if read is None:
        return
    with contextlib.suppress(OSError, ValueError):
        info = os.stat(path)
        read.add((info.st_dev, info.st_ino))


def _mode_for(target: Path) -> int:
    """The replaced file's permissions, or what a new file gets under the current umask."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _resolve(path: str | Path) -> tuple[Path, os.stat_result | None]:
    """The file to write for ``path`` (a symlink's target) and its status (None when it does not exist)."""
    text = os.fspath(path)
    if text.endswith(("/", os.sep)):
        raise UsageError(f"{text}: ends in '/', which names a folder; give a file name to write")
    target = Path(os.path.realpath(text)) if os.path.islink(text) else Path(text)
    try:
        info: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise OutputError(f"{text}: cannot write: {exc.strerror or exc}") from exc
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise OutputError(f"{text}: is a directory, expected a file to write")
    read = _READ.get()
    if info is not None and read is not None and (info.st_dev, info.st_ino) in read:
        raise UsageError(f"{text}: is an input of this command; write the output to another file")
    return target, info


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path``: replacing a regular file all at once, or straight into a device or pipe.

    Readers see the old file or the new one, never a truncated one; an interruption (Ctrl-C, SIGTERM, an
    error) leaves the old file as it was and removes the temp file. Only a hard kill between the write and
    the rename can leave a ``.attnx-*.tmp`` file behind, and even then the old file is intact. Temp names
    are short, so a target name of the file system's longest still works.
    """
    target, info = _resolve(path)
    if info is not None and not stat.S_ISREG(info.st_mode):  # /dev/null, a FIFO: write into it, never replace
        try:
            with open(target, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
        return
    folder = target.parent if str(target.parent) else Path(".")
    # 12 random hex digits, as secrets.token_hex(6) gives them (importing secrets costs 5 ms of start-up: hmac,
    # hashlib, OpenSSL)
    tmp = folder / f".attnx-{os.urandom(6).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    try:
        os.chmod(tmp, _mode_for(target))  # made 0600; a written file gets the usual mode
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
        raise
