"""Write a file a person asked for (``oomwatch run --report``, ``incidents show --html``): such files
quote jobs' output, process names and paths, and are made to be passed on by hand, so a new one is
readable by its owner only (0600). An existing file keeps its mode: ``chmod`` it first to share it
wider. A regular file is replaced atomically (a temporary file beside it, then a rename; through a
symbolic link, the file it points to); anything else (``/dev/stdout``, a pipe) is written as it is."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

NEW_FILE_MODE = 0o600


def write_for_people(path: Path, text: str) -> None:
    """Write ``text`` to ``path``: a new file 0600, an existing one with its mode kept."""
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    target = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) if st is not None else NEW_FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
