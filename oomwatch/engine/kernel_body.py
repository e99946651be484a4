"""Per-line parsers for the body of the Linux kernel's OOM-killer report (pure, no I/O).

What a report says besides its kill (engine.kernel_lines has the header, kill, summary and reaper
lines and says each format): a memory cgroup's usage and stats, Mem-Info, the trigger's cpuset, and
the task table, with the rows and header of a table a paste cut. Each `parse_*` function takes one
line of message text and returns what it says, or None when the line is not of that kind; odd
input never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oomwatch.engine.kernel_lines import PAGE_SIZE, known_size, scaled, to_int
from oomwatch.engine.model import TaskRow

# --- memory cgroup ---------------------------------------------------------------------

_USAGE = re.compile(r"^memory: usage (?P<u>\d+)kB, limit (?P<l>\d+)kB(?:, failcnt (?P<f>\d+))?")


@dataclass(frozen=True)
class MemcgUsage:
    usage_bytes: int | None
    limit_bytes: int | None
    failcnt: int | None


def parse_memcg_usage(text: str) -> MemcgUsage | None:
    """`memory: usage 980kB, limit 980kB, failcnt 4152239` (not memory+swap/kmem/swap; a paste may cut
    the failcnt)."""
    m = _USAGE.match(text)
    if m is None:
        return None
    return MemcgUsage(scaled(m.group("u"), 1024), scaled(m.group("l"), 1024), to_int(m.group("f")))


_STATS = re.compile(r"^Memory cgroup stats for (?P<path>.*?):(?P<rest>(?:\s+\w+:\d+[kK]B)*)\s*$")
_STATS_KB = re.compile(r"(?P<key>\w+):(?P<v>\d+)[kK]B")


def parse_stats_header(text: str) -> tuple[str, dict[str, int]] | None:
    """`Memory cgroup stats for /a: cache:0KB rss:980KB ...` (v1, values in bytes) or the
    bare `Memory cgroup stats for /a:` that precedes memory.stat lines (empty dict)."""
    if not text.startswith("Memory cgroup stats for "):
        return None
    m = _STATS.match(text)
    if m is None:
        return None
    stats: dict[str, int] = {}
    for f in _STATS_KB.finditer(m.group("rest")):
        value = scaled(f.group("v"), 1024)
        if value is not None:
            stats[f.group("key")] = value
    return m.group("path"), stats


_STAT_LINE = re.compile(r"^(?P<key>[a-z_][a-z0-9_]*) (?P<v>\d+)$")


def parse_stat_line(text: str) -> tuple[str, int] | None:
    """One memory.stat line, `anon 31154200576` (bytes for sizes, counts for events)."""
    m = _STAT_LINE.match(text)
    if m is None:
        return None
    value = to_int(m.group("v"))
    return None if value is None else (m.group("key"), value)


# --- Mem-Info ----------------------------------------------------------------------------

_MEMINFO = re.compile(r"^(?:(?P<ram>\d+) pages RAM|Free swap\s*=\s*(?P<free>\d+)kB|Total swap\s*=\s*(?P<total>\d+)kB)")


def parse_meminfo(text: str) -> tuple[str, int] | None:
    """("mem_total_bytes" | "free_swap_bytes" | "total_swap_bytes", bytes)."""
    m = _MEMINFO.match(text)
    if m is None:
        return None
    if m.group("ram") is not None:
        value, key = scaled(m.group("ram"), PAGE_SIZE), "mem_total_bytes"
    elif m.group("free") is not None:
        value, key = scaled(m.group("free"), 1024), "free_swap_bytes"
    else:
        value, key = scaled(m.group("total"), 1024), "total_swap_bytes"
    return None if value is None else (key, value)


# --- the trigger's cpuset ------------------------------------------------------------------

_CPUSET = re.compile(r"^\S.*? cpuset=(?P<cpuset>\S*) mems_allowed=")
# a container's own cgroup, as the cpuset line names it: docker (`docker-<id>.scope`, `/docker/<id>`,
# a bare 64-hex id), Kubernetes (`/kubepods/...`, `cri-containerd-<id>.scope`, `crio-<id>.scope`),
# podman (`libpod-<id>.scope`), LXC (`/lxc/NAME`)
_CONTAINER = re.compile(
    r"(?:^|/)(?:(?:docker|cri-containerd|crio|libpod)-[0-9a-f]{12,64}\.scope|docker/[0-9a-f]{12,64}|[0-9a-f]{64})$"
    r"|(?:^|/)kubepods(?:[./-]|$)|^/lxc(?:\.payload)?/"
)


def parse_cpuset(text: str) -> str | None:
    """The cgroup of `NAME cpuset=X mems_allowed=N` (the second line of a report before 5.x)."""
    m = _CPUSET.match(text)
    return m.group("cpuset") if m is not None else None


def is_container_cgroup(path: str | None) -> bool:
    """True when a cgroup path is a container's (docker, Kubernetes, podman, LXC)."""
    return bool(path) and _CONTAINER.search(path or "") is not None


# --- task table --------------------------------------------------------------------------

_TABLE_HEADER = re.compile(r"^\[\s*pid\s*\]\s+(?P<cols>.*\S)\s*$", re.IGNORECASE)
_ROW = re.compile(r"^\[\s*(?P<pid>\d+)\]\s*(?P<rest>.*)$")
# Columns counted in pages; the rest are counts, bytes (pgtables_bytes) or scores.
_PAGE_COLUMNS = {"total_vm", "rss", "rss_anon", "rss_file", "rss_shmem", "swapents"}


def parse_table_header(text: str) -> tuple[str, ...] | None:
    """The column names after `[ pid ]`, ending with `name`, e.g.
    ("uid", "tgid", "total_vm", "rss", "nr_ptes", "swapents", "oom_score_adj", "name")."""
    m = _TABLE_HEADER.match(text)
    if m is None:
        return None
    cols = tuple(c.lower() for c in m.group("cols").split())
    if len(cols) < 2 or cols[-1] != "name" or "uid" not in cols:
        return None
    return cols


def parse_task_row(text: str, columns: tuple[str, ...], line_no: int) -> TaskRow | None:
    """One task-table row, read by the header's column names; the name is the rest."""
    m = _ROW.match(text)
    if m is None:
        return None
    pid = to_int(m.group("pid"))
    n = len(columns) - 1
    parts = m.group("rest").split(None, n)
    if pid is None or len(parts) < n:
        return None
    values: dict[str, int | None] = {}
    for col, raw in zip(columns[:n], parts[:n], strict=False):
        value = to_int(raw)
        if value is None:
            return None
        if col in _PAGE_COLUMNS:
            values[col] = known_size(value * PAGE_SIZE)  # a negative count of pages is unreadable, not a size
        else:
            values[col] = known_size(value) if col.endswith("_bytes") else value
    return TaskRow(
        pid=pid,
        tgid=values.get("tgid"),
        uid=values.get("uid"),
        name=parts[n].rstrip("\r\n") if len(parts) > n else "",
        total_vm_bytes=values.get("total_vm"),
        rss_bytes=values.get("rss"),
        anon_rss_bytes=values.get("rss_anon"),
        file_rss_bytes=values.get("rss_file"),
        shmem_rss_bytes=values.get("rss_shmem"),
        swap_bytes=values.get("swapents"),
        oom_score_adj=values.get("oom_score_adj"),
        line=line_no,
        text=text.strip(),
    )


# A task-table row pasted without its header: `[   6762]  1000  6762   898879   127313 ...  0 firefox`.
# Only the OOM killer's dump_tasks prints this shape: the pid in brackets, then uid, tgid (the pid
# itself: it lists thread-group leaders) and the other columns, all numbers, the name last. The
# prefilter finds such lines by TASK_ROW_PATTERN (no literal anchor is in them).
TASK_ROW_PATTERN = rb"\[[ \t]*\d+\][ \t]+\d+[ \t]+\d+[ \t]+\d+[ \t]+\d+[ \t]+\d+[ \t]+-?\d+"
# the header with its padding re-spaced by a paste (`tgid    total_vm`: the literal anchor has one space)
TASK_HEADER_PATTERN = rb"\[[ \t]*pid[ \t]*\][ \t]+uid[ \t]+tgid[ \t]+total_vm"
_BARE_ROW = re.compile(r"^\[\s*(?P<pid>\d+)\]\s+(?P<nums>(?:-?\d+\s+){7,10})(?P<name>\D\S*(?:\s\S+)*)?\s*$")
# the columns by how many numbers follow the pid, as kernels print them: 7 (2.6.32 cpu/oom_adj,
# 3.x nr_ptes/swapents, 4.19-5.x pgtables_bytes/swapents), 8 (4.x nr_ptes nr_pmds swapents),
# 10 (6.x: rss_anon rss_file rss_shmem); columns whose meaning varies are left unnamed
_BARE_COLUMNS = {
    7: ("uid", "tgid", "total_vm", "rss", "-", "-", "oom_score_adj", "name"),
    8: ("uid", "tgid", "total_vm", "rss", "nr_ptes", "nr_pmds", "swapents", "oom_score_adj", "name"),
    10: (
        "uid", "tgid", "total_vm", "rss", "rss_anon", "rss_file", "rss_shmem", "pgtables_bytes", "swapents",
        "oom_score_adj", "name",
    ),
}  # fmt: skip


def is_table_line(text: str) -> bool:
    """A task table's header or a row of it, in a line that holds no kernel anchor."""
    return text[:1] == "[" and (bare_row_columns(text) is not None or parse_table_header(text) is not None)


def bare_row_columns(text: str) -> tuple[str, ...] | None:
    """The columns of a task-table row seen without its header, guessed from how many numbers it has,
    or None when it is not shaped like one (its tgid must be its pid)."""
    m = _BARE_ROW.match(text)
    if m is None:
        return None
    nums = m.group("nums").split()
    if len(nums) not in _BARE_COLUMNS or nums[1] != m.group("pid"):
        return None
    return _BARE_COLUMNS[len(nums)]


# every column name the task table's header has had (2.6.32 to 6.x), `name` last
TABLE_COLUMNS = frozenset({
    "uid", "tgid", "total_vm", "rss", "rss_anon", "rss_file", "rss_shmem", "cpu", "oom_adj", "nr_ptes",
    "nr_pmds", "pgtables_bytes", "swapents", "oom_score_adj", "name",
})  # fmt: skip
_HEADER_START = re.compile(r"^\[\s*pid\s*\]\s", re.IGNORECASE)


def is_cut_table_header(text: str) -> bool:
    """The task table's header cut before its last column (`name`), its rest on the next line."""
    return _HEADER_START.match(text) is not None and not text.rstrip().lower().endswith(" name")


def is_cut_task_row(text: str, columns: tuple[str, ...]) -> bool:
    """A task-table row that stops before its name: `[  12689]     0 12689   178844    56556` (the rest
    on the next line, when a paste wrapped it). Every column it has is a number."""
    m = _ROW.match(text)
    if m is None:
        return False
    parts = m.group("rest").split()
    return len(parts) < len(columns) - 1 and all(to_int(p) is not None for p in parts)
