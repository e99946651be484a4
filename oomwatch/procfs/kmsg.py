"""``/dev/kmsg``: the kernel's log, one record per read (Documentation/ABI/testing/dev-kmsg).

Sample record::

    6,1234,5678901234,-;Out of memory: Killed process 4242 (python) total-vm:...

Reading is non-blocking here: :meth:`KmsgReader.read_available` returns what the ring buffer holds
now. A record overwritten before we read it makes ``read`` fail with ``EPIPE`` once; reading goes on
with the oldest record still there (the lost ones are counted).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

RECORD_MAX = 8192  # a record never exceeds this (the kernel's CONSOLE_EXT_LOG_MAX)


@dataclass(frozen=True)
class KmsgRecord:
    """One record: ``prefix,seq,usec,flags[,...];text`` plus optional dictionary lines."""

    prefix: int  # syslog prefix: facility * 8 + level
    seq: int
    usec: int  # monotonic time in microseconds, as dmesg shows it
    flags: str
    text: str  # the message as /dev/kmsg escapes it (non-printable bytes as \xNN)
    raw: bytes = field(repr=False)  # the record exactly as read, without the final newline

    @property
    def level(self) -> int:
        """The syslog level (0 emerg .. 7 debug)."""
        return self.prefix & 7

    def dmesg_line(self) -> str:
        """The record as plain ``dmesg`` prints it: ``[ seconds.micros] text``."""
        return f"[{self.usec // 1_000_000:5d}.{self.usec % 1_000_000:06d}] {unescape(self.text)}"


def unescape(text: str) -> str:
    """Undo /dev/kmsg's ``\\xNN`` escapes of non-printable bytes."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("\\x", i) and i + 4 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 4], 16)))
                i += 4
                continue
            except ValueError:
                pass
        out.append(text[i])
        i += 1
    return "".join(out)


def parse_kmsg_record(data: bytes) -> KmsgRecord | None:
    """One record as read from ``/dev/kmsg`` (or a line of a saved kmsg capture), or None."""
    head, sep, body = data.partition(b";")
    if not sep:
        return None
    fields = head.split(b",")
    if len(fields) < 3:
        return None
    try:
        prefix, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    flags = fields[3].decode("ascii", "replace") if len(fields) > 3 else ""
    text = body.split(b"\n", 1)[0].decode("utf-8", "replace")
    return KmsgRecord(prefix, seq, usec, flags, text, data.rstrip(b"\n"))


class KmsgReader:
    """A non-blocking reader; raises OSError (e.g. PermissionError) on open when kmsg is not readable."""

    def __init__(self, path: Path = Path("/dev/kmsg")) -> None:
        self.path = path
        self.lost = 0  # records overwritten before we could read them
        self._fd: int | None = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("KmsgReader is closed")
        return self._fd

    def seek_end(self) -> None:
        """Skip what is in the buffer now: the next read returns only newer records."""
        if self._fd is not None:
            os.lseek(self._fd, 0, os.SEEK_END)

    def read_available(self, after: int = -1) -> list[KmsgRecord]:
        """Every record available now with a sequence number above ``after``."""
        out: list[KmsgRecord] = []
        if self._fd is None:
            return out
        while True:
            try:
                data = os.read(self._fd, RECORD_MAX)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.lost += 1
                    continue
                raise
            if not data:
                break
            rec = parse_kmsg_record(data)
            if rec is not None and rec.seq > after:
                out.append(rec)
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> KmsgReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def kmsg_records(after: int = -1, path: Path = Path("/dev/kmsg")) -> list[KmsgRecord]:
    """Every record now in the ring buffer with a sequence number above ``after``."""
    with KmsgReader(path) as reader:
        return reader.read_available(after)
