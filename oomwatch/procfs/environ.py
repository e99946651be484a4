"""``/proc/PID/environ``: the initial environment, NUL-separated (Documentation/filesystems/proc.rst).

Sample (``tr '\\0' '\\n'``)::

    RANK=3
    LOCAL_RANK=3

Only the job-identity keys below are ever returned; every other value (tokens, passwords, paths)
is dropped while parsing and never stored or exported.
"""

from __future__ import annotations

from oomwatch.paths import HostPaths
from oomwatch.procfs import process_files

KEPT_KEYS = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"})


def parse_environ(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in data.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if not sep:
            continue
        name = key.decode("ascii", errors="replace")
        if name in KEPT_KEYS:
            out[name] = value.decode("utf-8", errors="replace")
    return out


def read_environ(paths: HostPaths, pid: int) -> dict[str, str]:
    with process_files(pid):
        data = (paths.proc / str(pid) / "environ").read_bytes()
    return parse_environ(data)
