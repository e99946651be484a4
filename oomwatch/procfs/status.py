"""``/proc/PID/status``: human-readable process state (Documentation/filesystems/proc.rst, table 1-2).

Sample::

    Name:	python3
    VmRSS:	   34040 kB

Sizes are in bytes here. Keys missing on old kernels (RssAnon etc. before 4.5) are None.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from oomwatch.paths import HostPaths
from oomwatch.procfs import kb_lines, process_files, to_int


class Status(NamedTuple):  # a NamedTuple: the agent builds one per process per tick
    name: str | None
    ppid: int | None
    rss_anon: int | None
    rss_file: int | None
    rss_shmem: int | None
    vm_rss: int | None
    vm_hwm: int | None
    vm_swap: int | None
    state: str | None = None  # "R", "S", "Z" (zombie: no memory lines at all), ...


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
    state = None
    for line in text.splitlines():
        if line.startswith("State:"):
            fields = line[6:].split()
            state = fields[0] if fields else None
            break
    return Status(
        name=_name(text),
        ppid=ppid,
        state=state,
        rss_anon=kb.get("RssAnon"),
        rss_file=kb.get("RssFile"),
        rss_shmem=kb.get("RssShmem"),
        vm_rss=kb.get("VmRSS"),
        vm_hwm=kb.get("VmHWM"),
        vm_swap=kb.get("VmSwap"),
    )


# The lines the sampler needs, as the kernel prints them (fs/proc/array.c, task_mem(); Linux 4.5+):
# VmHWM..RssShmem are consecutive. Three searches in C beat a Python loop over the lines.
_HEAD = re.compile(rb"\nState:\t(\S)[^\n]*\n(?:[^\n]*\n)*?PPid:\t(\d+)\n")
_BLOCK = re.compile(
    rb"\nVmHWM:\s+(\d+) kB\nVmRSS:\s+(\d+) kB\nRssAnon:\s+(\d+) kB\nRssFile:\s+(\d+) kB\nRssShmem:\s+(\d+) kB\n"
)
_SWAP = re.compile(rb"\nVmSwap:\s+(\d+) kB")


def parse_status_bytes(data: bytes) -> Status:
    """The same as :func:`parse_status`, on the raw bytes of one read, about twice as fast for a
    process with memory (the agent reads status for every process every tick). Zombies, kernel
    threads and kernels before 4.5 (no RssAnon) take the general parser."""
    head = _HEAD.search(data)
    block = _BLOCK.search(data)
    swap = _SWAP.search(data, block.end() - 1) if block is not None else None
    if head is None or block is None or swap is None or not data.startswith(b"Name:"):
        return parse_status(data.decode("utf-8", "replace"))
    end = data.find(b"\n")
    hwm, rss, anon, file, shmem = block.groups()
    return Status(
        name=data[5:end].lstrip(b"\t").decode("utf-8", "replace"),
        ppid=int(head[2]),
        rss_anon=int(anon) << 10,
        rss_file=int(file) << 10,
        rss_shmem=int(shmem) << 10,
        vm_rss=int(rss) << 10,
        vm_hwm=int(hwm) << 10,
        vm_swap=int(swap[1]) << 10,
        state=head[1].decode("ascii", "replace"),
    )


def read_status(paths: HostPaths, pid: int) -> Status:
    with process_files(pid):
        text = (paths.proc / str(pid) / "status").read_text(errors="replace")
    return parse_status(text)
