"""Reading a media file's bytes (a WAV, an image) whole, within the byte cap, before anything parses them."""

from __future__ import annotations

import os
from pathlib import Path

from attnx.errors import InputError
from attnx.io.output import note_read
from attnx.limits import Limits
from attnx.text import inert


def read_capped(path: str | Path, limits: Limits, error: type[InputError]) -> tuple[bytes, str]:
    """The bytes of the file ``path`` and its name as messages show it (escaped); its size is checked against
    ``max_bytes`` before a byte is read, and again after (a file that grew meanwhile). A file that cannot be read is
    one ``error`` line."""
    name = inert(str(path))
    try:
        with open(path, "rb") as file:
            limits.check_bytes(os.fstat(file.fileno()).st_size, name)
            raw = file.read(limits.max_bytes + 1)
    except OSError as exc:
        raise error(f"{name}: cannot be read: {exc.strerror or exc}") from None
    limits.check_bytes(len(raw), name)
    note_read(path)
    return raw, name
