"""Open inputs (files, `-` for stdin, gzip by content) and read them as bounded chunks.

The only I/O of `diagnose`; everything after this is pure. A missing or unreadable file is
an InputError with a one-line message.
"""

from __future__ import annotations

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
_GZIP_PIECE = 64 << 10  # compressed bytes inflated at once: damage loses at most what one piece held


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
    input at most ``max_gzip`` decompressed bytes are read; when there was more, ``notes`` says so. A
    gzip input cut short or damaged gives what it held before the damage, and ``notes`` says so."""
    raw = _open(path)
    try:
        head = raw.read(2) if hasattr(raw, "read") else b""
        if head == GZIP_MAGIC:
            yield from _gunzip(path, head, raw, chunk_size, notes, max_gzip)
            return
        if head:
            yield head
        while True:
            try:
                data = raw.read(chunk_size)
            except OSError as exc:
                raise InputError(f"{display_name(path)}: cannot read: {_reason(exc)}") from exc
            if not data:
                return
            yield data
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


def _gunzip(
    path: str, head: bytes, raw: BinaryIO, chunk_size: int, notes: list[str] | None, max_gzip: int
) -> Iterator[bytes]:
    """The decompressed bytes of a gzip stream (members one after another), at most ``max_gzip`` of
    them, never more than ``chunk_size`` at once (a small member may hold GBs)."""
    budget = max_gzip
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending, started = head, True  # started: bytes of the current member were given to `inflate`
    started_any = False  # some bytes came out
    while True:
        if not pending:
            try:
                pending = raw.read(_GZIP_PIECE)
            except OSError as exc:
                raise InputError(f"{display_name(path)}: cannot read: {_reason(exc)}") from exc
            if not pending:
                if started and not inflate.eof:
                    _note(notes, f"this gzip input ends before its end ({_read(max_gzip - budget)}): only "
                          "what it held was diagnosed")  # fmt: skip
                return
            started = True
        try:
            data = inflate.decompress(pending, min(chunk_size, budget + 1))
        except zlib.error as exc:
            if budget == max_gzip and not started_any:
                raise InputError(f"{display_name(path)}: cannot read: {_reason(exc)}") from exc  # no gzip at all
            _note(notes, f"this gzip input is damaged after {_read(max_gzip - budget)} ({exc}): only what "
                  "was read before the damage was diagnosed")  # fmt: skip
            return
        pending = inflate.unconsumed_tail
        if inflate.eof:  # the end of one member; another may follow
            pending, started = inflate.unused_data, False
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            if pending and not pending.startswith(GZIP_MAGIC):
                pending = b""  # trailing garbage (zero padding of a tape or a copy) is no member
            started = bool(pending)
        started_any = started_any or bool(data)
        if len(data) > budget:
            _note(notes, f"only the first {human(max_gzip)} of this gzip input were read (it holds more when "
                  "decompressed): decompress it and pass the part around the failure")  # fmt: skip
            if budget:
                yield data[:budget]
            return
        budget -= len(data)
        if data:
            yield data


def _read(n: int) -> str:
    return f"{human(n)} decompressed"


def _note(notes: list[str] | None, text: str) -> None:
    if notes is not None:
        notes.append(text)


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
