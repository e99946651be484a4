"""``/proc/PID/stat``: one line of process status (Documentation/filesystems/proc.rst, table 1-4; man 5 proc).

Sample::

    8595 (python3) S 8590 8590 7894 0 -1 4194304 8089 6553 0 0 3 2 3 1 20 0 1 0 680069 ...

``comm`` sits between the first ``(`` and the LAST ``)``: it may itself hold ``) Z `` or spaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.paths import HostPaths
from oomwatch.procfs import process_files, to_int


@dataclass(frozen=True)
class Stat:
    pid: int | None
    comm: str | None
    state: str | None
    ppid: int | None
    starttime: int | None  # clock ticks after boot (field 22)


def parse_stat(text: str) -> Stat:
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        fields = text.split()
        return Stat(to_int(fields[0]) if fields else None, None, None, None, None)
    pid = to_int(text[:open_paren].strip())
    comm = text[open_paren + 1 : close_paren]
    rest = text[close_paren + 1 :].split()  # rest[0] is field 3 (state)

    def field(n: int) -> str | None:  # n: the 1-based field number in proc(5)
        i = n - 3
        return rest[i] if i < len(rest) else None

    ppid = field(4)
    start = field(22)
    return Stat(
        pid=pid,
        comm=comm,
        state=field(3),
        ppid=None if ppid is None else to_int(ppid),
        starttime=None if start is None else to_int(start),
    )


def read_stat(paths: HostPaths, pid: int) -> Stat:
    with process_files(pid):
        text = (paths.proc / str(pid) / "stat").read_text(errors="replace")
    return parse_stat(text)
