"""``/proc/PID/status``: human-readable process state (Documentation/filesystems/proc.rst, table 1-2).

Sample::

    Name:	python3
    VmRSS:	   34040 kB

Sizes are in bytes here. Keys missing on old kernels (RssAnon etc. before 4.5) are None.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.paths import HostPaths
from oomwatch.procfs import kb_lines, process_files, to_int


@dataclass(frozen=True)
class Status:
    name: str | None
    ppid: int | None
    rss_anon: int | None
    rss_file: int | None
    rss_shmem: int | None
    vm_rss: int | None
    vm_hwm: int | None
    vm_swap: int | None


def _name(text: str) -> str | None:
    # The kernel escapes "\n" as "\\n" in Name:, so a name is always the rest of one line;
    # it may contain spaces and parentheses. Only strip the one tab after the colon.
    for line in text.splitlines():
        if line.startswith("Name:"):
            return line[5:].lstrip("\t")
    return None


def parse_status(text: str) -> Status:
    kb = kb_lines(text)
    ppid = None
    for line in text.splitlines():
        if line.startswith("PPid:"):
            ppid = to_int(line[5:].strip())
            break
    return Status(
        name=_name(text),
        ppid=ppid,
        rss_anon=kb.get("RssAnon"),
        rss_file=kb.get("RssFile"),
        rss_shmem=kb.get("RssShmem"),
        vm_rss=kb.get("VmRSS"),
        vm_hwm=kb.get("VmHWM"),
        vm_swap=kb.get("VmSwap"),
    )


def read_status(paths: HostPaths, pid: int) -> Status:
    with process_files(pid):
        text = (paths.proc / str(pid) / "status").read_text(errors="replace")
    return parse_status(text)
