"""Per-line parsers for the Linux kernel's OOM-killer report (pure, no I/O).

The lines that say what happened: the header, the trigger, the selection, the kill, the summary,
the reaper, the group kill, cgroup v1's `Task in`; the lines of the report's body (memory cgroup
usage and stats, Mem-Info, the cpuset, the task table) are engine.kernel_body's.

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

from oomwatch.engine.sizes import MAX_SIZE  # a size above 1 EiB (or below 0) in a kernel line is never reported

__all__ = [
    "MAX_SIZE",
    "PAGE_SIZE",
    "Header",
    "KillLine",
    "Reaper",
    "Selection",
    "Summary",
    "constraint_from_message",
    "known_size",
    "scaled",
    "is_report_shaped",
    "kill_cut_before_pid",
    "parse_cpu_pid",
    "parse_header",
    "parse_kill",
    "parse_memcg_task_in",
    "parse_oom_group",
    "parse_reaper",
    "parse_selection",
    "parse_summary",
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


def known_size(value: int | None) -> int | None:
    """A size in bytes as reported, or None when no machine could have it."""
    return value if value is not None and 0 <= value <= MAX_SIZE else None


def scaled(text: str | None, factor: int) -> int | None:
    value = to_int(text)
    return None if value is None else known_size(value * factor)


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
        total_vm_bytes=scaled(sizes.get("total-vm") or sizes.get("vsz"), 1024),
        anon_rss_bytes=scaled(sizes.get("anon-rss"), 1024),
        file_rss_bytes=scaled(sizes.get("file-rss"), 1024),
        shmem_rss_bytes=scaled(sizes.get("shmem-rss"), 1024),
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


# --- pasted text ---------------------------------------------------------------------------

_QUOTE = re.compile(r"^(?:>[ \t]?)+")


def unquote(text: str) -> str:
    """The text without the `> ` quote marks of an e-mail or a GitHub reply (`> > ` when nested):
    no line of the kernel's starts with `>`."""
    m = _QUOTE.match(text) if text[:1] == ">" else None
    return text[m.end() :] if m is not None else text


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
