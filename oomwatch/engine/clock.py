"""Timestamps of log prefixes as numbers that can be compared (pure).

A prefix's time (engine.prefix) is text in one of many formats. Two times can be compared only on the
same clock: wall time with a date (dmesg -T, ISO 8601), wall time without a year (BSD syslog,
journalctl short), or seconds since boot (a dmesg bracket). :func:`moment` says which clock and
where on it; times of different clocks are never compared. Wall times without a zone are taken
as they are written: two logs of one node agree; a zone given (``+01:00``, ``Z``) is honoured.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from oomwatch.engine.stamps import parse_message_time

__all__ = ["Moment", "apart", "common", "moment", "moment_in"]

Moment = tuple[str, float]  # (clock, seconds on it): "wall", "wall-noyear" or "uptime"

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun",
                                        "jul", "aug", "sep", "oct", "nov", "dec"), 1)}  # fmt: skip
_ISO = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?\s*(Z|[+-]\d\d:?\d\d)?$", re.IGNORECASE
)
_CTIME = re.compile(  # dmesg -T (weekday, year), syslog and journalctl short (neither)
    r"(?:[A-Za-z]{3}\s+)?([A-Za-z]{3})\s+(\d{1,2})\s+(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(?:\s+(\d{4}))?$"
)
_UPTIME = re.compile(r"\d{1,10}\.\d{1,9}$")
_NOYEAR = 2000


def moment(text: str | None) -> Moment | None:
    """``text`` as (clock, seconds), or None when it is no time this module knows.

    >>> moment("Sun Nov 29 22:46:23 2026")[0], moment("1234.5"), moment("Jan  5 15:19:27")[0]
    ('wall', ('uptime', 1234.5), 'wall-noyear')
    >>> moment("2026-11-29T22:46:23Z") == moment("Sun Nov 29 22:46:23 2026")
    True
    """
    if not text:
        return None
    text = text.strip()
    if _UPTIME.match(text):
        return ("uptime", float(text))
    m = _ISO.match(text)
    if m:
        return _wall(m)
    m = _CTIME.match(text)
    if m:
        month = _MONTHS.get(m.group(1).lower())
        if month is None:
            return None
        year = int(m.group(7)) if m.group(7) else _NOYEAR  # a leap year: "Feb 29" stays a date
        try:
            t = datetime(year, month, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
        except ValueError:
            return None
        seconds = t.replace(tzinfo=timezone.utc).timestamp() + _fraction(m.group(6))
        return ("wall" if m.group(7) else "wall-noyear", seconds)
    return None


def _wall(m: re.Match[str]) -> Moment | None:
    try:
        year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
        t = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    except ValueError:
        return None
    zone = m.group(8)
    if zone and zone.upper() != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        t -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return ("wall", t.timestamp() + _fraction(m.group(7)))


def _fraction(digits: str | None) -> float:
    return float("0." + digits) if digits else 0.0


def moment_in(text: str) -> Moment | None:
    """The time a message's own text begins with (glog, Python logging: engine.stamps), or None.

    >>> moment_in("E1129 22:46:23.557000 12689 torch/distributed/elastic/api.py:1] failed")[0]
    'wall-noyear'
    >>> moment_in("2026-11-29 22:46:23,557 INFO step 3") == moment("2026-11-29T22:46:23.557")
    True
    """
    st = parse_message_time(text)
    if st is None:
        return None
    try:
        day = datetime(st.year if st.year is not None else _NOYEAR, st.month, st.day, tzinfo=timezone.utc)
    except ValueError:
        return None
    seconds = day.timestamp() + st.seconds + (st.frac or 0.0)
    return ("wall" if st.year is not None else "wall-noyear", seconds)


def common(moments: list[Moment]) -> list[float] | None:
    """The moments as seconds on one clock, or None when they are not all on one. Wall times with a
    year and without compare on month, day and time; seconds since boot only with each other."""
    clocks = {m[0] for m in moments}
    if len(clocks) == 1:
        return [m[1] for m in moments]
    if "uptime" in clocks:
        return None
    return [_noyear(m) for m in moments]


def apart(a: Moment | None, b: Moment | None) -> float | None:
    """Seconds between two moments, or None when they are not on one clock."""
    if a is None or b is None:
        return None
    on = common([a, b])
    return abs(on[0] - on[1]) if on is not None else None


def _noyear(m: Moment) -> float:
    if m[0] == "wall-noyear":
        return m[1]
    t = datetime.fromtimestamp(m[1], tz=timezone.utc)
    try:
        return t.replace(year=_NOYEAR).timestamp()
    except ValueError:
        return m[1]
