"""``/proc/PID/cmdline``: argv, NUL-separated, with a trailing NUL; empty for kernel threads and
zombies (Documentation/filesystems/proc.rst, man 5 proc).

Sample (``tr '\\0' ' '``)::

    /usr/bin/python3 -c import time; time.sleep(60)
"""

from __future__ import annotations

from oomwatch.paths import HostPaths
from oomwatch.procfs import process_files


def parse_cmdline(data: bytes) -> list[str]:
    if not data:
        return []
    if data.endswith(b"\0"):
        data = data[:-1]
    return [arg.decode("utf-8", errors="surrogateescape") for arg in data.split(b"\0")]


def read_cmdline(paths: HostPaths, pid: int) -> list[str]:
    with process_files(pid):
        data = (paths.proc / str(pid) / "cmdline").read_bytes()
    return parse_cmdline(data)
