"""``/proc/PID/io``: the process's I/O counters (Documentation/filesystems/proc.rst, "3.3 /proc/<pid>/io").
Readable with the same rights as smaps_rollup (ptrace read access: root with CAP_SYS_PTRACE for
other users' processes).

Sample::

    rchar: 181190656
    wchar: 2048
    read_bytes: 79691776

``rchar`` counts the bytes the process had read(2) and its kin return, from files (page cache hits
included) and from pipes and sockets; memory-mapped files do not count. Its growth next to a
process's private memory tells data being read into memory (a dataset, a checkpoint) from memory
that grows on its own (a cache, a leak).
"""

from __future__ import annotations

from oomwatch.paths import HostPaths
from oomwatch.procfs import kb_lines, process_files


def parse_io(text: str) -> dict[str, int]:
    return kb_lines(text)  # `key: number` lines; none carries a unit


def read_rchar(paths: HostPaths, pid: int) -> int | None:
    """The process's rchar, or None when the file has none (raises ProcessGone, PermissionError)."""
    with process_files(pid):
        text = (paths.proc / str(pid) / "io").read_text()
    return parse_io(text).get("rchar")
