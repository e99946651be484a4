"""Read a file's text with a bound on its size (no YAML here: importing this costs nothing)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class OversizedFile(ValueError):
    """A file larger than the caller allows."""


def read_text_limited(path: Path, limit: int) -> str:
    """The file's text (UTF-8, strict), read no further than ``limit`` bytes.

    OSError when it cannot be read (a directory, a FIFO or device, no permission), UnicodeDecodeError for bytes that are
    not UTF-8, OversizedFile when it holds more than ``limit`` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO would block the open itself
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "it is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OversizedFile(f"larger than {_size(limit)}")
    return data.decode("utf-8")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"
