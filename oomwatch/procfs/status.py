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


_FAST_KEYS = (
    (b"\nState:", "state"),
    (b"\nPPid:", "ppid"),
    (b"\nVmHWM:", "vm_hwm"),
    (b"\nVmRSS:", "vm_rss"),
    (b"\nRssAnon:", "rss_anon"),
    (b"\nRssFile:", "rss_file"),
    (b"\nRssShmem:", "rss_shmem"),
    (b"\nVmSwap:", "vm_swap"),
)


def parse_status_bytes(data: bytes) -> Status:
    """The same as :func:`parse_status`, on the raw bytes of one read, about twice as fast: it looks
    up only the lines the sampler needs (the agent reads status for every process every tick)."""
    values: dict[str, object] = {}
    for key, attr in _FAST_KEYS:
        i = data.find(key)
        if i < 0:
            values[attr] = None
            continue
        j = data.find(b"\n", i + 1)
        fields = data[i + len(key) : j if j >= 0 else len(data)].split()
        if attr == "state":
            values[attr] = fields[0].decode("ascii", "replace") if fields else None
            continue
        try:
            number = int(fields[0]) if fields else None
        except ValueError:
            number = None
        if number is not None and attr != "ppid":
            number *= 1024  # every size in status is in kB
        values[attr] = number
    name = None
    if data.startswith(b"Name:"):
        end = data.find(b"\n")
        name = data[5 : end if end >= 0 else len(data)].lstrip(b"\t").decode("utf-8", "replace")
    return Status(name=name, **values)  # type: ignore[arg-type]


def read_status(paths: HostPaths, pid: int) -> Status:
    with process_files(pid):
        text = (paths.proc / str(pid) / "status").read_text(errors="replace")
    return parse_status(text)
