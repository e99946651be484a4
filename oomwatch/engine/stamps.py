"""Times as logs print them, made comparable. Pure.

A failure's time comes from its line's prefix (``Line.time``: ``dmesg -T``, ISO / RFC 3339, syslog,
``[seconds]`` since boot) or from the message itself: glog (torchrun's own lines), Python logging,
a ChildFailedError table's ``time`` row. One sample of each::

    Tue Dec 1 18:45:19 2026                        dmesg -T (English names), to the second
    2024-01-05T15:19:27.123456Z                    ISO / RFC 3339 (zone not applied)
    Jan 5 15:19:27                                 syslog / journalctl short (no year)
    5864.708505                                    dmesg: seconds since boot (not wall-clock)
    E1201 18:45:20.728000 12613 .../api.py:1002]   glog (no year)
    [2023-10-13 17:40:02,544] ...                  Python logging
    2026-12-01_18:45:04                            ChildFailedError `time` row

Times are compared as printed: no time zone is applied (a node's local time, UTC in containers),
and a time without a year takes the year the others give.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MONTHS = {
    m: i for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)
}
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T _](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_DMESG_T = re.compile(r"[A-Za-z]{3} ([A-Za-z]{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})$")
_BSD = re.compile(r"([A-Za-z]{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?$")
_BOOT = re.compile(r"\d+\.\d+$")
# glog, after torchrun's optional `[rankN]:` and `[`: E1201 18:45:20.728000
_GLOG = re.compile(r"^(?:\[(?:rank|default)\d+\]:)?\[?[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))? ")
# Python logging at the start of the message: 2024-01-05 15:19:27,123 / [2024-01-05 15:19:27,123]
_PYLOG = re.compile(r"^\[?(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")


@dataclass(frozen=True, order=True)
class Stamp:
    """A wall-clock time: ``year`` is None when the format has none; ``frac`` is the fraction of
    the second, None when the format stops at the second."""

    year: int | None
    month: int
    day: int
    seconds: int  # of the day
    frac: float | None
    shown: str  # HH:MM:SS as printed

    def key(self, year: int) -> tuple[int, int, int, int]:
        """To the second (formats differ in precision: ties are decided by the caller)."""
        return (self.year if self.year is not None else year, self.month, self.day, self.seconds)


def _stamp(year: int | None, month: int, day: int, h: str, m: str, s: str, frac: str | None) -> Stamp | None:
    if not (1 <= month <= 12 and 1 <= day <= 31 and int(h) < 24 and int(m) < 60 and int(s) < 61):
        return None
    seconds = int(h) * 3600 + int(m) * 60 + int(s)
    return Stamp(year, month, day, seconds, float("0." + frac) if frac else None, f"{h}:{m}:{s}")


def parse_prefix_time(text: str | None) -> Stamp | None:
    """A ``Line.time`` as the prefix stripper kept it; None for ``[seconds]`` since boot and
    for month names it does not know (other locales)."""
    if not text or _BOOT.match(text):
        return None
    m = _ISO.match(text)
    if m:
        return _stamp(int(m[1]), int(m[2]), int(m[3]), m[4], m[5], m[6], m[7])
    m = _DMESG_T.match(text)
    if m and m[1].lower() in _MONTHS:
        return _stamp(int(m[6]), _MONTHS[m[1].lower()], int(m[2]), m[3], m[4], m[5], None)
    m = _BSD.match(text)
    if m and m[1].lower() in _MONTHS:
        return _stamp(None, _MONTHS[m[1].lower()], int(m[2]), m[3], m[4], m[5], m[6])
    return None


def parse_message_time(text: str) -> Stamp | None:
    """A time the message itself begins with: glog or Python logging."""
    m = _GLOG.match(text)
    if m:
        return _stamp(None, int(m[1]), int(m[2]), m[3], m[4], m[5], m[6])
    m = _PYLOG.match(text)
    if m:
        return _stamp(int(m[1]), int(m[2]), int(m[3]), m[4], m[5], m[6], m[7])
    return None


def parse_field_time(text: str) -> Stamp | None:
    """A time captured by a rule (a ChildFailedError table's ``2026-12-01_18:45:04``)."""
    m = _ISO.fullmatch(text.strip())
    return _stamp(int(m[1]), int(m[2]), int(m[3]), m[4], m[5], m[6], m[7]) if m else None


def is_boot_time(text: str | None) -> bool:
    """``[seconds]`` since boot: a time, but not one that compares with wall-clock times."""
    return bool(text and _BOOT.match(text))
