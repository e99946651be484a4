"""Open inputs (files, `-` for stdin, gzip by content) and read them as bounded chunks.

The only I/O of `diagnose`; everything after this is pure. A missing or unreadable file is
an InputError with a one-line message.
"""

from __future__ import annotations

import gzip
import os
import sys
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from oomwatch.engine.sizes import human
from oomwatch.errors import InputError

CHUNK = 8 << 20  # bytes per read: large enough for the prefilter to run at full speed
GZIP_MAGIC = b"\x1f\x8b"
# decompressed bytes read from one gzip input: a few MB of gzip can hold GBs of one repeated line, and
# no real log of a job's failure needs more than this to be diagnosed (the rest is skipped, and said)
MAX_GZIP_BYTES = 256 << 20


def display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def input_size(path: str) -> int | None:
    """Size on disk (None for stdin or pipes); used to decide whether to show progress."""
    if path == "-":
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size if os.path.isfile(path) else None


def read_chunks(
    path: str, chunk_size: int = CHUNK, notes: list[str] | None = None, max_gzip: int = MAX_GZIP_BYTES
) -> Iterator[bytes]:
    """Yield the input's bytes (decompressed when gzip) in chunks of at most chunk_size. Of a gzip
    input at most ``max_gzip`` decompressed bytes are read; when there was more, ``notes`` says so."""
    raw = _open(path)
    try:
        head = raw.read(2) if hasattr(raw, "read") else b""
        stream: BinaryIO
        budget: int | None = None
        if head == GZIP_MAGIC:
            stream = gzip.GzipFile(mode="rb", fileobj=_Prepend(head, raw))  # type: ignore[call-overload]
            head, budget = b"", max_gzip
        else:
            stream = raw
        if head:
            yield head
        while True:
            want = chunk_size if budget is None else min(chunk_size, budget + 1)
            try:
                data = stream.read(want)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputError(f"{display_name(path)}: cannot read: {_reason(exc)}") from exc
            if not data:
                return
            if budget is not None:
                if len(data) > budget:
                    if notes is not None:
                        notes.append(
                            f"only the first {human(max_gzip)} of this gzip input were read (it holds more "
                            "when decompressed): decompress it and pass the part around the failure"
                        )
                    if budget:
                        yield data[:budget]
                    return
                budget -= len(data)
            yield data
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


def _open(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not a log file")
    try:
        return open(path, "rb")  # noqa: SIM115 - closed by read_chunks
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file") from exc
    except PermissionError as exc:
        raise InputError(f"{path}: permission denied") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot open: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class _Prepend:
    """A read-only stream: bytes already read (the magic), then the rest of `raw`."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._head = head
        self._raw = raw

    def read(self, n: int = -1) -> bytes:
        if not self._head:
            return self._raw.read(n)
        if n is None or n < 0:
            out, self._head = self._head + self._raw.read(), b""
            return out
        out, self._head = self._head[:n], self._head[n:]
        return out if len(out) == n else out + self._raw.read(n - len(out))
