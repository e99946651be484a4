"""Per-line parsers for the Linux kernel's OOM-killer report (pure, no I/O).

Each `parse_*` function takes one line of message text (log prefix already
stripped, surrounding whitespace removed) and returns a small record, or None
when the line is not of that kind. Nothing here raises on odd input: numbers
that are too long to be real are treated as absent.

Formats follow mm/oom_kill.c and mm/memcontrol.c from 2.6.32 to 6.x:

- header: `X invoked oom-killer: gfp_mask=0x201da, order=0, oom_adj=0` (2.6.32),
  `..., oom_adj=0, oom_score_adj=0` (2.6.36-3.x), `gfp_mask=0x24000c0(GFP_KERNEL),
  [nodemask=(null), ]order=0, oom_score_adj=0` (4.x-6.x)
- trigger pid: `CPU: 5 PID: 13536 Comm: x ...` (3.10+, `CPU: 3 UID: 0 PID: ...`
  on 6.11+), `Pid: 1234, comm: x ...` (2.6.x-3.9)
- selection: `<msg>: kill process N (x) score S or a child` (2.6.32),
  `<msg>: Kill process N (x) score S or sacrifice child` (2.6.33-5.x)
- kill: `[<msg>: ]Killed process N (x) vsz:..kB, anon-rss:..kB, file-rss:..kB`
  (2.6.32), `total-vm:..kB, anon-rss:..kB, file-rss:..kB[, shmem-rss:..kB]
  [, UID:.. pgtables:..kB oom_score_adj:..]` (2.6.33-6.x), and the RHEL 6 form
  `Killed process N, UID U, (x) total-vm:...`
- summary: `oom-kill:constraint=...,task_memcg=...,task=x,pid=N,uid=U` (4.19+; 5.0-5.1 say
  CONSTRAINT_NONE for a memory cgroup's OOM: its `oom_memcg=` tells)
- reaper: `oom_reaper: reaped process N (x), now anon-rss:0kB, ...` (4.6+)
- group kill: `Tasks in /a are going to be killed due to memory.oom.group set` (4.19+,
  mem_cgroup_print_oom_group), then one kill line per other task of that cgroup
- memcg: `Task in /a killed as a result of limit of /b` (cgroup v1, <4.19),
  `memory: usage NkB, limit NkB, failcnt N`, `Memory cgroup stats for /a: cache:0KB
  rss:980KB ...` (one line, v1) or `Memory cgroup stats for /a:` followed by
  `anon 31154200576` lines (memory.stat format, bytes)
- Mem-Info: `N pages RAM`, `Free swap  = NkB`, `Total swap = NkB`
- task table: `[ pid ]   uid  tgid total_vm      rss ... name` header (columns vary
  by version) and `[13536] 275858 13536  8389663  343 ... memorymonster` rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oomwatch.engine.model import TaskRow
from oomwatch.engine.sizes import MAX_SIZE  # a size above 1 EiB (or below 0) in a kernel line is never reported

__all__ = [
    "MAX_SIZE",
    "PAGE_SIZE",
    "Header",
    "KillLine",
    "MemcgUsage",
    "Reaper",
    "Selection",
    "Summary",
    "constraint_from_message",
    "TABLE_COLUMNS",
    "is_cut_table_header",
    "is_cut_task_row",
    "is_report_shaped",
    "kill_cut_before_pid",
    "parse_cpu_pid",
    "parse_header",
    "parse_kill",
    "parse_memcg_task_in",
    "parse_memcg_usage",
    "parse_oom_group",
    "parse_meminfo",
    "parse_reaper",
    "parse_selection",
    "parse_stat_line",
    "parse_stats_header",
    "parse_summary",
    "parse_table_header",
    "parse_task_row",
    "to_int",
    "unquote",
]

PAGE_SIZE = 4096  # the task table and Mem-Info count 4 KiB pages
_MAX_DIGITS = 24  # longer digit runs are garbage (and would be slow or refused by int())


def to_int(text: str | None) -> int | None:
    """A decimal integer (optionally negative), or None for anything else."""
    if text is None:
        return None
    digits = text[1:] if text[:1] == "-" else text
    if not digits or len(digits) > _MAX_DIGITS or not digits.isdigit() or not digits.isascii():
        return None
    return int(text)


def _size(value: int | None) -> int | None:
    """A size in bytes as reported, or None when no machine could have it."""
    return value if value is not None and 0 <= value <= MAX_SIZE else None


def _scaled(text: str | None, factor: int) -> int | None:
    value = to_int(text)
    return None if value is None else _size(value * factor)


# --- header -------------------------------------------------------------------------

_HEADER = re.compile(r"^(?P<comm>.*?) invoked oom-killer:(?: (?P<rest>.*))?$")  # the rest may be wrapped off
_GFP = re.compile(r"gfp_mask=(?P<gfp>0x[0-9a-fA-F]+(?:\([^)]*\))?)")
_ORDER = re.compile(r"\border=(?P<order>-?\d+)")


@dataclass(frozen=True)
class Header:
    comm: str
    gfp_mask: str | None  # "0x140dca(GFP_HIGHUSER_MOVABLE|__GFP_COMP)" or "0x201da"
    order: int | None


def parse_header(text: str) -> Header | None:
    m = _HEADER.match(text)
    if m is None:
        return None
    rest = m.group("rest") or ""
    gfp = _GFP.search(rest)
    order = _ORDER.search(rest)
    return Header(
        comm=m.group("comm"),
        gfp_mask=gfp.group("gfp") if gfp else None,
        order=to_int(order.group("order")) if order else None,
    )


_CPU_PID = re.compile(r"^(?:CPU: \d+ (?:UID: \d+ )?PID: (?P<a>\d+) Comm:(?: |$)|Pid: (?P<b>\d+), comm:(?: |$))")


def parse_cpu_pid(text: str) -> int | None:
    """The pid of the task that invoked the OOM killer, from dump_stack's first line."""
    m = _CPU_PID.match(text)
    if m is None:
        return None
    return to_int(m.group("a") or m.group("b"))


# --- selection, kill, summary, reaper --------------------------------------------------


def constraint_from_message(message: str | None) -> str | None:
    """The constraint implied by the message before `: Kill process` / `: Killed process`."""
    if not message:
        return None
    if "Memory cgroup out of memory" in message:
        return "memcg"
    if "MPOL_BIND" in message:
        return "mempolicy"
    if "cpuset" in message:
        return "cpuset"
    if "Out of memory" in message or "Out of Memory" in message:
        return "global"
    return None


_SELECT = re.compile(r"^(?P<msg>.*?): [Kk]ill process (?P<pid>\d+) \((?P<comm>.*)\) (?:with )?score (?P<score>-?\d+)")


@dataclass(frozen=True)
class Selection:
    message: str
    pid: int | None
    comm: str


def parse_selection(text: str) -> Selection | None:
    """`Out of memory: Kill process 1532 (x) score 919 or sacrifice child` and kin."""
    m = _SELECT.match(text)
    if m is None:
        return None
    return Selection(m.group("msg"), to_int(m.group("pid")), m.group("comm"))


_CUT_KILL = re.compile(r"(?:Out of memory|Memory cgroup out of memory)(?: \([^)]*\))?: ?(?P<tail>[A-Za-z ]*)$")


def kill_cut_before_pid(text: str) -> bool:
    """A kill line broken before its pid when pasted: `Memory cgroup out of memory: Killed` or
    `...: Killed process` at the end of the line (the rest on the next line)."""
    m = _CUT_KILL.search(text)
    if m is None:
        return False
    tail = m.group("tail").strip()
    return bool(tail) and "Killed process".startswith(tail)


_KILLED = re.compile(
    r"^(?:(?P<msg>.*?): )?Killed process (?P<pid>\d+)(?::#\d+)?(?:, UID (?P<uid>\d+),)?"
    r"(?: \((?P<comm>.*)\)(?P<rest>.*)| \(?[^)]*)?$"  # the line may be cut inside the name
)
# sizes; some pastes group thousands with commas ("anon-rss:153,700,88kB") or wrap before "kB"
_KB_FIELD = re.compile(r"(?P<key>total-vm|vsz|anon-rss|file-rss|shmem-rss|pgtables):(?P<v>\d[\d,]*)\s*k\s*B")
_UID_FIELD = re.compile(r"\bUID:(?P<v>\d+)")
_ADJ_FIELD = re.compile(r"\boom_score_adj:(?P<v>-?\d+)")


@dataclass(frozen=True)
class KillLine:
    message: str | None
    pid: int | None
    comm: str | None  # None when the line was cut before the name ended
    uid: int | None
    total_vm_bytes: int | None
    anon_rss_bytes: int | None
    file_rss_bytes: int | None
    shmem_rss_bytes: int | None
    oom_score_adj: int | None


def parse_kill(text: str) -> KillLine | None:
    """`[msg: ]Killed process N (comm) total-vm:..kB, anon-rss:..kB, ...` (every version)."""
    m = _KILLED.match(text)
    if m is None:
        return None
    rest = m.group("rest") or ""
    sizes = {f.group("key"): f.group("v").replace(",", "") for f in _KB_FIELD.finditer(rest)}
    uid = _UID_FIELD.search(rest)
    adj = _ADJ_FIELD.search(rest)
    return KillLine(
        message=m.group("msg"),
        pid=to_int(m.group("pid")),
        comm=m.group("comm"),
        uid=to_int(m.group("uid") or (uid.group("v") if uid else None)),
        total_vm_bytes=_scaled(sizes.get("total-vm") or sizes.get("vsz"), 1024),
        anon_rss_bytes=_scaled(sizes.get("anon-rss"), 1024),
        file_rss_bytes=_scaled(sizes.get("file-rss"), 1024),
        shmem_rss_bytes=_scaled(sizes.get("shmem-rss"), 1024),
        oom_score_adj=to_int(adj.group("v")) if adj else None,
    )


_SUMMARY = re.compile(r"oom-kill:constraint=(?P<constraint>\w*)(?P<body>.*)$")
_TASK_MEMCG_CUT = re.compile(r",task_memcg=(?P<v>[^,]*)")
# the line ends with the task's pid (and uid); found from the end, the task name is what precedes it
_PID_END = re.compile(r",pid=(?P<pid>\d+)(?:,uid=(?P<uid>\d+))?\s*$")
_CONSTRAINTS = {
    "CONSTRAINT_NONE": "global",
    "CONSTRAINT_MEMCG": "memcg",
    "CONSTRAINT_CPUSET": "cpuset",
    "CONSTRAINT_MEMORY_POLICY": "mempolicy",
}


@dataclass(frozen=True)
class Summary:
    constraint: str | None
    oom_memcg: str | None
    task_memcg: str | None
    task: str | None
    pid: int | None
    uid: int | None


def parse_summary(text: str) -> Summary | None:
    """The one-line `oom-kill:constraint=...` summary (4.19+)."""
    m = _SUMMARY.search(text)
    if m is None:
        return None
    body = m.group("body")
    task_memcg = _between(body, ",task_memcg=", ",task=")
    if task_memcg is None:
        cut = _TASK_MEMCG_CUT.search(body)
        task_memcg = cut.group("v") if cut else None
    tail = _PID_END.search(body)
    head = body[: tail.start()] if tail else ""
    at = head.find(",task=")
    task = head[at + len(",task=") :] if at >= 0 else None
    oom_memcg = _between(body, ",oom_memcg=", ",task_memcg=")
    constraint = _CONSTRAINTS.get(m.group("constraint"))
    if constraint == "global" and oom_memcg is not None:
        # only a memory cgroup's OOM prints oom_memcg= (a global one `,global_oom`); 5.0 and 5.1 printed
        # CONSTRAINT_NONE for it (oc->constraint not yet set: fixed by 432b1de0de02, 5.2)
        constraint = "memcg"
    return Summary(
        constraint=constraint,
        oom_memcg=oom_memcg,
        task_memcg=task_memcg,
        task=task,
        pid=to_int(tail.group("pid")) if tail and task is not None else None,
        uid=to_int(tail.group("uid")) if tail and task is not None else None,
    )


def _between(text: str, start: str, end: str) -> str | None:
    """The text after the first ``start`` up to the first ``end`` that follows it (str.find: linear
    where a lazy pattern tried every ``start`` against every ``end``)."""
    at = text.find(start)
    if at < 0:
        return None
    stop = text.find(end, at + len(start))
    return None if stop < 0 else text[at + len(start) : stop]


_REAPED = re.compile(r"^oom_reaper: reaped process (?P<pid>\d+) \((?P<comm>.*)\), now ")
_UNABLE = re.compile(r"^oom_reaper: unable to reap pid:(?P<pid>\d+) \((?P<comm>.*)\)")


@dataclass(frozen=True)
class Reaper:
    pid: int | None
    comm: str
    reaped: bool  # False for "unable to reap"


def parse_reaper(text: str) -> Reaper | None:
    m = _REAPED.match(text)
    if m is not None:
        return Reaper(to_int(m.group("pid")), m.group("comm"), True)
    m = _UNABLE.match(text)
    if m is not None:
        return Reaper(to_int(m.group("pid")), m.group("comm"), False)
    return None


# --- memory cgroup ---------------------------------------------------------------------

_OOM_GROUP = re.compile(r"^Tasks in (?P<cgroup>.*?) are going to be killed due to memory\.oom\.group set")


def parse_oom_group(text: str) -> str | None:
    """The cgroup of `Tasks in /a are going to be killed due to memory.oom.group set`: every task in
    it is killed with the victim just named (``memory.oom.group`` is 1, the default for the
    containers of Kubernetes >= 1.28 on cgroup v2)."""
    m = _OOM_GROUP.match(text)
    return m.group("cgroup").strip() if m is not None else None


_TASK_IN = re.compile(r"^Task in (?P<task>.*) killed as a result of limit of (?P<limit>.*)$")


def parse_memcg_task_in(text: str) -> tuple[str, str] | None:
    """(task_memcg, oom_memcg) from the cgroup v1 `Task in ... killed as a result ...` line."""
    m = _TASK_IN.match(text)
    if m is None:
        return None
    return m.group("task").strip(), m.group("limit").strip()


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
    return MemcgUsage(_scaled(m.group("u"), 1024), _scaled(m.group("l"), 1024), to_int(m.group("f")))


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
        value = _scaled(f.group("v"), 1024)
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
        value, key = _scaled(m.group("ram"), PAGE_SIZE), "mem_total_bytes"
    elif m.group("free") is not None:
        value, key = _scaled(m.group("free"), 1024), "free_swap_bytes"
    else:
        value, key = _scaled(m.group("total"), 1024), "total_swap_bytes"
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
            values[col] = _size(value * PAGE_SIZE)  # a negative count of pages is unreadable, not a size
        else:
            values[col] = _size(value) if col.endswith("_bytes") else value
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


# --- pasted text ---------------------------------------------------------------------------

_QUOTE = re.compile(r"^(?:>[ \t]?)+")


def unquote(text: str) -> str:
    """The text without the `> ` quote marks of an e-mail or a GitHub reply (`> > ` when nested):
    no line of the kernel's starts with `>`."""
    m = _QUOTE.match(text) if text[:1] == ">" else None
    return text[m.end() :] if m is not None else text


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


# --- shape ---------------------------------------------------------------------------------

_SHAPED = re.compile(
    r"""
      \+0x[0-9a-f]+/0x[0-9a-f]+                      # stack frame: func+0x1c/0x30
    | ^[0-9a-f]{8,16}(?:\s+[0-9a-f]{8,16})+$          # raw stack words (a space between: one way to split)
    | ^<(?:/?TASK|/?IRQ|/?NMI|EOI)>$
    | ^\[\s*(?:\d+|pid)\s*\]                          # task table
    | ^(?:Call\ [Tt]race:|Hardware\ name:|Workqueue:|Mem-Info:|Tasks\ state|Task\ in\b
        |memory:|memory\+swap:|kmem:|swap:|Memory\ cgroup|Free\ swap|Total\ swap|Swap\ cache
        |lowmem_reserve|Node\ \d|COMPACTION|Code:|R[A-Z0-9]{2}:|(?:pc|lr|sp|x\d{1,2})\ *:
        |CPU:\ |CPU\ +\d+:|Pid:\ |Modules\ linked|Unreclaimable|Name\ +Used|Free\ pages
        |Out\ of\ [Mm]emory|oom-kill:|oom_reaper:|Killed\ process|Kill\ process|Showing)
    | ^\S.*?\ cpuset=\S*\ mems_allowed=               # "sed cpuset=/ mems_allowed=0-1"
    | ^[a-z_]+:\s?\d+(?:kB)?(?:\s|$)                  # vmstat: active_anon:405991 ...
    | ^\d+\ (?:pages|total\ pagecache)
    | ^\S+\s+\d+KB\s+\d+KB$                           # unreclaimable slab table
    """,
    re.VERBOSE,
)


def is_report_shaped(text: str) -> bool:
    """True for lines that look like part of an OOM report (call trace, Mem-Info,
    memcg info, task table, ...), so that a report stays open across them."""
    return _SHAPED.search(text.strip()) is not None
