"""``/proc/PID/statm``: memory sizes in pages (Documentation/filesystems/proc.rst, "statm").

Sample (size resident shared text lib data dt)::

    9263 8510 1660 1 0 7141 0
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.paths import HostPaths
from oomwatch.procfs import process_files, to_int

PAGE_SIZE = 4096  # os.sysconf("SC_PAGE_SIZE") on x86_64; pass the real one for other hosts


@dataclass(frozen=True)
class Statm:
    size: int | None
    resident: int | None
    shared: int | None
    text: int | None
    data: int | None


def parse_statm(text: str, page_size: int = PAGE_SIZE) -> Statm:
    fields = text.split()
    pages = [to_int(f) for f in fields[:7]] + [None] * (7 - len(fields[:7]))

    def b(i: int) -> int | None:
        v = pages[i]
        return None if v is None else v * page_size

    # lib (index 4) and dt (6) are always 0 since Linux 2.6
    return Statm(size=b(0), resident=b(1), shared=b(2), text=b(3), data=b(5))


def read_statm(paths: HostPaths, pid: int, page_size: int = PAGE_SIZE) -> Statm:
    with process_files(pid):
        text = (paths.proc / str(pid) / "statm").read_text()
    return parse_statm(text, page_size)
