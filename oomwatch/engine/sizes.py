"""Parse the sizes logs print ("980kB", "15.78 GiB", "2.0G", "12345 MiB") into bytes."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
}  # fmt: skip
MAX_SIZE = 1 << 60  # bytes: a size above 1 EiB is garbage (no machine has it), never reported
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | None, default_unit: str = "") -> int | None:
    """Bytes for a size text; None when it is not a size. Units are binary (as kernels and
    torch print them: kB means KiB)."""
    if text is None:
        return None
    m = _SIZE.match(text.replace(",", ""))
    if m is None:
        return None
    unit = (m.group(2) or default_unit).lower()
    if unit.endswith("i") and unit + "b" in _UNITS:
        unit += "b"
    factor = _UNITS.get(unit)
    if factor is None:
        return None
    value = float(m.group(1)) * factor  # never raises: 310 nines are inf
    return int(round(value)) if value <= MAX_SIZE else None  # a size no machine has is none


def human(n: int | None) -> str:
    """A size for people: 1.5 GiB. None is shown as a dash."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
