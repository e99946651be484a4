"""Pure parsers and thin readers for /proc files (and ``/dev/kmsg``, the kernel's log), one module per
kernel file; imports nothing of oomwatch but ``oomwatch.paths``.

Each module has ``parse_x(text)`` (pure, never raises on garbage: unreadable numbers become None)
and ``read_x(paths, ...)`` (three lines of I/O). Readers of /proc/PID files raise
:class:`ProcessGone` when the process vanished; a vanished PID is normal, not an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class ProcessGone(Exception):
    """The process exited (or its PID is not visible) while we read its /proc files."""


@contextmanager
def process_files(pid: int) -> Iterator[None]:
    """Map the errors of a vanished process to :class:`ProcessGone`."""
    try:
        yield
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ProcessGone(pid) from exc


def pid_dir(proc: Path, pid: int | str) -> Path:
    return proc / str(pid)


def to_int(value: str) -> int | None:
    """An integer, or None for garbage (a truncated read, an unexpected token)."""
    try:
        return int(value)
    except ValueError:
        return None


def kb_lines(text: str) -> dict[str, int]:
    """``Key:   1234 kB`` lines (status, meminfo, smaps) as bytes; lines without a number are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        if not fields:
            continue
        number = to_int(fields[0])
        if number is None:
            continue
        unit = fields[1] if len(fields) > 1 else ""
        out[key.strip()] = number * 1024 if unit == "kB" else number
    return out


def flat_keyed(text: str | None) -> dict[str, int]:
    """``key value`` lines (/proc/vmstat, memory.stat, memory.events, memory.oom_control); lines that
    are not exactly a key and an integer are skipped."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) == 2:
            value = to_int(fields[1])
            if value is not None:
                out[fields[0]] = value
    return out
