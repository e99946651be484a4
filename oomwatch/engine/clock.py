"""Timestamps of log prefixes as numbers that can be compared (pure).

A prefix's time (engine.prefix) is text in one of many formats, read by engine.stamps. Two times
can be compared only on the same clock: wall time with a date (dmesg -T, ISO 8601), wall time
without a year (BSD syslog, journalctl short), or seconds since boot (a dmesg bracket).
:func:`moment` says which clock and where on it; times of different clocks are never compared.
Wall times without a zone are taken as they are written: two logs of one node agree; a zone given
(``+01:00``, ``Z``) is honoured.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from oomwatch.engine.stamps import Stamp, is_boot_time, parse_message_time, parse_prefix_time

__all__ = ["Moment", "apart", "common", "moment", "moment_in"]

Moment = tuple[str, float]  # (clock, seconds on it): "wall", "wall-noyear" or "uptime"

# the zone an ISO 8601 / RFC 3339 time ends with (engine.stamps reads times as printed, without it)
_ZONE = re.compile(r"\d\d:\d\d(?:[.,]\d+)?\s*(?:Z|([+-])(\d\d):?(\d\d))$", re.IGNORECASE)
_NOYEAR = 2000  # a leap year: "Feb 29" without a year stays a date


def moment(text: str | None) -> Moment | None:
    """``text`` (a prefix's time, engine.stamps reads it) as (clock, seconds), or None when it is
    no time this module knows.

    >>> moment("Sun Nov 29 22:46:23 2026")[0], moment("1234.5"), moment("Jan  5 15:19:27")[0]
    ('wall', ('uptime', 1234.5), 'wall-noyear')
    >>> moment("2026-11-29T22:46:23Z") == moment("Sun Nov 29 22:46:23 2026")
    True
    >>> moment("2026-11-29T23:46:23+01:00") == moment("2026-11-29T22:46:23Z")
    True
    """
    if not text:
        return None
    text = text.strip()
    if is_boot_time(text):
        return ("uptime", float(text))
    st = parse_prefix_time(text)
    if st is None:
        return None
    zone = _ZONE.search(text) if st.year is not None else None
    offset = 0
    if zone is not None and zone.group(1):
        offset = (-1 if zone.group(1) == "-" else 1) * (int(zone.group(2)) * 3600 + int(zone.group(3)) * 60)
    return _on_clock(st, offset)


def _on_clock(st: Stamp, offset: int = 0) -> Moment | None:
    """A stamp as seconds: UTC when ``offset`` (seconds east) is its zone's, as written when 0."""
    try:
        day = datetime(st.year if st.year is not None else _NOYEAR, st.month, st.day, tzinfo=timezone.utc)
    except ValueError:
        return None
    seconds = day.timestamp() + st.seconds + (st.frac or 0.0) - offset
    return ("wall" if st.year is not None else "wall-noyear", seconds)


def moment_in(text: str) -> Moment | None:
    """The time a message's own text begins with (glog, Python logging: engine.stamps), or None.

    >>> moment_in("E1129 22:46:23.557000 12689 torch/distributed/elastic/api.py:1] failed")[0]
    'wall-noyear'
    >>> moment_in("2026-11-29 22:46:23,557 INFO step 3") == moment("2026-11-29T22:46:23.557")
    True
    """
    st = parse_message_time(text)
    return _on_clock(st) if st is not None else None


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
