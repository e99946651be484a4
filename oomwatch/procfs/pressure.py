"""Pressure stall information: ``/proc/pressure/memory`` and a cgroup's ``memory.pressure``
(Documentation/accounting/psi.rst).

Sample::

    some avg10=0.00 avg60=0.01 avg300=0.04 total=5377120
    full avg10=0.00 avg60=0.00 avg300=0.02 total=3843339

avg* are percentages, total is microseconds stalled. No PSI (kernel < 4.20, ``psi=0``) is normal:
readers return None for a missing file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from oomwatch.paths import HostPaths
from oomwatch.procfs import to_int


@dataclass(frozen=True)
class PressureLine:
    avg10: float | None
    avg60: float | None
    avg300: float | None
    total_us: int | None


@dataclass(frozen=True)
class Pressure:
    some: PressureLine | None
    full: PressureLine | None


def _float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _line(fields: list[str]) -> PressureLine:
    kv = dict(f.partition("=")[::2] for f in fields)
    total = kv.get("total")
    return PressureLine(
        avg10=_float(kv.get("avg10")),
        avg60=_float(kv.get("avg60")),
        avg300=_float(kv.get("avg300")),
        total_us=None if total is None else to_int(total),
    )


def parse_pressure(text: str) -> Pressure:
    lines: dict[str, PressureLine] = {}
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] in ("some", "full"):
            lines[fields[0]] = _line(fields[1:])
    return Pressure(some=lines.get("some"), full=lines.get("full"))


def read_pressure_file(path: Path) -> Pressure | None:
    try:
        text = path.read_text()
    except OSError:  # missing: no PSI on this kernel, or psi=0 (EOPNOTSUPP)
        return None
    return parse_pressure(text)


def read_memory_pressure(paths: HostPaths) -> Pressure | None:
    return read_pressure_file(paths.proc / "pressure" / "memory")
