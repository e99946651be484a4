"""One kernel OOM report being assembled (pure): its draft, and what each line adds to it.

engine.kernel_report's assembler decides which report a line belongs to and when a report opens
and closes; here is what a line of the report's body (call trace, Mem-Info, memory cgroup usage and
stats, the task table) fills in, and what the line after one a paste wrapped adds (a kill or summary
line, the task table's header or a row, a memory.stat path, put back together by engine.kernel_wraps).
A draft becomes an `OomReport` with `Draft.build`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from oomwatch.engine import kernel_body as kb
from oomwatch.engine import kernel_lines as kl
from oomwatch.engine import kernel_wraps as kw
from oomwatch.engine.model import Evidence, KilledTask, Line, OomReport, TaskRow

# call-trace functions on the path of a memory cgroup's OOM, never of the global one
_MEMCG_TRACE = (
    "mem_cgroup_out_of_memory",
    "mem_cgroup_oom",
    "try_charge_memcg",
    "mem_cgroup_try_charge",
    " try_charge+",
)
Key = tuple[str, str | None]  # a report's input: (file, host)
MIN_BARE_ROWS = 3  # task-table rows, with no header or kill line, that make a report of their own


@dataclass
class Draft:
    """A report being assembled; mutable twin of `OomReport` plus parser state."""

    key: Key
    seq: int
    first_line: int
    last_line: int
    time: str | None
    trigger_name: str | None = None
    trigger_pid: int | None = None
    gfp_mask: str | None = None
    order: int | None = None
    trigger_cpuset: str | None = None
    constraint: str | None = None
    constraint_rank: int = 0  # 1 kill message, 2 cgroup v1 "Task in", 3 summary line
    selected_pid: int | None = None
    selected_name: str | None = None
    victim_pid: int | None = None
    victim_name: str | None = None
    victim_uid: int | None = None
    total_vm_bytes: int | None = None
    anon_rss_bytes: int | None = None
    file_rss_bytes: int | None = None
    shmem_rss_bytes: int | None = None
    oom_score_adj: int | None = None
    oom_memcg: str | None = None
    task_memcg: str | None = None
    memcg_usage_bytes: int | None = None
    memcg_limit_bytes: int | None = None
    memcg_failcnt: int | None = None
    memcg_stat: dict[str, int] = field(default_factory=dict)
    mem_total_bytes: int | None = None
    free_swap_bytes: int | None = None
    total_swap_bytes: int | None = None
    manual: bool = False
    reaped: bool = False
    oom_group: str | None = None
    group_killed: list[KilledTask] = field(default_factory=list)
    tasks: list[TaskRow] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    # parser state
    has_header: bool = False
    has_summary: bool = False
    has_selection: bool = False
    has_killed: bool = False
    columns: tuple[str, ...] | None = None
    rows_only: bool = False  # begun on a task-table row with no header before it (its columns guessed)
    stats_seen: bool = False
    in_stats: bool = False
    grace_left: int | None = None  # same-host lines left once the kill was seen
    idle: int = 0  # lines in a row not attributed to this report
    lines: int = 0  # lines fed while open

    def set_constraint(self, value: str | None, rank: int) -> None:
        if value is not None and rank > self.constraint_rank:
            self.constraint, self.constraint_rank = value, rank

    def take_header(self, header: kl.Header) -> None:
        """The trigger as the header (`X invoked oom-killer: gfp_mask=..., order=...`) says it."""
        self.has_header = True
        self.trigger_name = header.comm
        self.gfp_mask = header.gfp_mask
        self.order = header.order

    def take_kill(self, kill: kl.KillLine) -> None:
        """The victim as the kill line says it (what a summary line of the same task said stays where
        the kill line says nothing)."""
        same_task = kill.pid == self.victim_pid  # the summary named the same task
        self.has_killed = True
        self.victim_pid = kill.pid
        self.victim_name = kill.comm if kill.comm is not None or not same_task else self.victim_name
        self.victim_uid = first(kill.uid, self.victim_uid if same_task else None)
        self.total_vm_bytes = kill.total_vm_bytes
        self.anon_rss_bytes = kill.anon_rss_bytes
        self.file_rss_bytes = kill.file_rss_bytes
        self.shmem_rss_bytes = kill.shmem_rss_bytes
        self.oom_score_adj = kill.oom_score_adj
        self.set_constraint(kl.constraint_from_message(kill.message), 1)

    def add_evidence(self, line: Line) -> None:
        ev = Evidence(line.file, line.no, line.text)
        if not self.evidence or self.evidence[-1] != ev:
            self.evidence.append(ev)

    def is_report(self) -> bool:
        """False for a few row-shaped lines that nothing else of a report came with."""
        if not self.rows_only or len(self.tasks) >= MIN_BARE_ROWS:
            return True
        return self.has_header or self.has_summary or self.has_selection or self.has_killed

    def build(self) -> OomReport:
        row = next((t for t in self.tasks if t.pid == self.victim_pid), None)
        if row is not None:  # fill what the kill line did not say from the task table
            self.victim_name = self.victim_name if self.victim_name is not None else row.name
            self.victim_uid = first(self.victim_uid, row.uid)
            self.oom_score_adj = first(self.oom_score_adj, row.oom_score_adj)
            self.total_vm_bytes = first(self.total_vm_bytes, row.total_vm_bytes)
            self.anon_rss_bytes = first(self.anon_rss_bytes, row.anon_rss_bytes)
            self.file_rss_bytes = first(self.file_rss_bytes, row.file_rss_bytes)
            self.shmem_rss_bytes = first(self.shmem_rss_bytes, row.shmem_rss_bytes)
        values = {f.name: getattr(self, f.name) for f in fields(OomReport) if hasattr(self, f.name)}
        values.update(
            file=self.key[0],
            host=self.key[1],
            manual=self.manual or self.order == -1,
            memcg_stat=dict(self.memcg_stat),
            group_killed=tuple(self.group_killed),
            tasks=tuple(self.tasks),
            evidence=tuple(self.evidence),
        )
        return OomReport(**values)


@dataclass
class Wrapped:
    """A line that the next line may continue: its report, kind, text (joined so far)."""

    draft: Draft
    kind: str  # "kill", "summary", "header" (the task table's), "row" (of it), "stats" (memory.stat's path)
    text: str
    line_no: int  # the line that was continued last
    joins: int = 0
    first_no: int = 0  # the line it began on (a task row's number)


def first(a: int | None, b: int | None) -> int | None:
    return a if a is not None else b


def killed_task(kill: kl.KillLine, line_no: int) -> KilledTask:
    return KilledTask(kill.pid or 0, kill.comm, kill.anon_rss_bytes, kill.file_rss_bytes, kill.shmem_rss_bytes, line_no)


def read_body(line: Line, s: str, cur: Draft) -> tuple[Draft | None, Wrapped | None]:
    """A line inside an open report (trace, Mem-Info, memcg info, task table): the report when the line
    is one of it, and the line when the next one may continue it (a paste wrapped it), else None."""
    if cur.columns is not None and s[:1] == "[":
        row = kb.parse_task_row(s, cur.columns, line.no)
        if row is not None:
            cur.tasks.append(row)
            return cur, None
        if kb.is_cut_task_row(s, cur.columns):  # its last columns on the next line (a paste wrapped it)
            return cur, Wrapped(cur, "row", s, line.no, 0, line.no)
    if s[:1] == "[":
        columns = kb.parse_table_header(s)
        if columns is not None:
            cur.columns = columns
            return cur, None
        if kb.is_cut_table_header(s):  # its last columns on the next line (a paste wrapped it)
            return cur, Wrapped(cur, "header", s, line.no)
    if cur.has_header and cur.trigger_pid is None and not cur.has_killed:
        pid = kl.parse_cpu_pid(s)
        if pid is not None:
            cur.trigger_pid = pid
            return cur, None
    if cur.trigger_cpuset is None and " cpuset=" in s:
        cpuset = kb.parse_cpuset(s)
        if cpuset is not None:
            cur.trigger_cpuset = cpuset
            return cur, None
    if any(fn in s for fn in _MEMCG_TRACE):
        cur.set_constraint("memcg", 1)  # only a memory cgroup's OOM path calls these
        return cur, None
    if "moom_callback" in s:
        cur.manual = True
        if s.startswith("Workqueue:"):
            cur.add_evidence(line)
        return cur, None
    if s.startswith("memory: usage") and cur.memcg_usage_bytes is None:
        usage = kb.parse_memcg_usage(s)
        if usage is not None:
            cur.memcg_usage_bytes = usage.usage_bytes
            cur.memcg_limit_bytes = usage.limit_bytes
            cur.memcg_failcnt = usage.failcnt
            cur.add_evidence(line)
            return cur, None
    if s.startswith("Memory cgroup stats for"):
        stats = kb.parse_stats_header(s)
        if stats is not None and not cur.stats_seen:
            cur.stats_seen = True
            cur.memcg_stat.update(stats[1])
            cur.in_stats = not stats[1]
        elif stats is None and not cur.stats_seen:  # a long path cut by a paste, its `:` on the next line
            return cur, Wrapped(cur, "stats", s, line.no)
        return cur, None
    meminfo = kb.parse_meminfo(s)
    if meminfo is not None:
        setattr(cur, meminfo[0], meminfo[1])
        return cur, None
    if "no killable processes" in s:
        cur.add_evidence(line)
        return cur, None
    return (cur if kl.is_report_shaped(s) else None), None


@dataclass(frozen=True)
class Continued:
    """What the line after a wrapped one adds to its report."""

    draft: Draft
    again: Wrapped | None = None  # the line joined so far, which the next line may continue in turn
    kill: kl.KillLine | None = None  # the join made a kill line of it (it broke before the pid): take it as one
    killed: bool = False  # it said more of a kill: the report stays open its grace again


def continue_line(wrapped: Wrapped, line_no: int, text: str) -> Continued | None:
    """What ``text`` (line ``line_no``) adds to the report of the line it continues (a paste wrapped it:
    an e-mail's or a terminal's width); None when it adds nothing."""
    draft, first_text = wrapped.draft, wrapped.text
    if wrapped.kind == "row":
        return _continue_row(wrapped, line_no, text)
    if wrapped.kind == "header":
        return _continue_header(wrapped, line_no, text)
    if wrapped.kind == "stats":
        stats = kw.rejoin_stats(first_text, text)
        if stats is None:
            return None
        draft.stats_seen = True
        draft.memcg_stat.update(stats[1])
        draft.in_stats = not stats[1]
        return Continued(draft)
    joined = kw.join_kill_text(first_text, text)
    again = Wrapped(draft, wrapped.kind, joined, line_no, wrapped.joins + 1)
    if wrapped.kind == "summary":
        return _continue_summary(draft, first_text, joined, text, again)
    before, after = kl.parse_kill(first_text), kl.parse_kill(joined)
    if after is None:
        return None
    if before is None:  # the line broke before the pid: now it is a kill line
        return Continued(draft, again, kill=after)
    if after.pid != before.pid or kw.known_fields(after) <= kw.known_fields(before):
        return None
    if draft.group_killed and draft.group_killed[-1].pid == after.pid:
        draft.group_killed[-1] = killed_task(after, draft.group_killed[-1].line)
    elif draft.victim_pid == after.pid:
        draft.victim_name = after.comm if after.comm is not None else draft.victim_name
        draft.victim_uid = first(after.uid, draft.victim_uid)
        draft.total_vm_bytes = first(after.total_vm_bytes, draft.total_vm_bytes)
        draft.anon_rss_bytes = first(after.anon_rss_bytes, draft.anon_rss_bytes)
        draft.file_rss_bytes = first(after.file_rss_bytes, draft.file_rss_bytes)
        draft.shmem_rss_bytes = first(after.shmem_rss_bytes, draft.shmem_rss_bytes)
        draft.oom_score_adj = first(after.oom_score_adj, draft.oom_score_adj)
    else:
        return None
    return Continued(draft, again, killed=draft.grace_left is not None)


def _continue_summary(draft: Draft, first_text: str, joined: str, text: str, again: Wrapped) -> Continued | None:
    was, summary = kl.parse_summary(first_text), kl.parse_summary(joined)
    if summary is None or was is None or was.pid is not None:
        return None
    if summary.pid is None:  # a long line folded more than once: its middle has no spaces
        if " " in text:
            return None
        return Continued(draft, again)
    draft.task_memcg = summary.task_memcg or draft.task_memcg
    draft.oom_memcg = summary.oom_memcg or draft.oom_memcg
    if summary.constraint is not None:  # the whole line may say more (oom_memcg=) than its start
        draft.constraint, draft.constraint_rank = summary.constraint, 3
    if draft.victim_pid is None:
        draft.victim_pid, draft.victim_name, draft.victim_uid = summary.pid, summary.task, summary.uid
    return Continued(draft)


def _continue_header(wrapped: Wrapped, line_no: int, text: str) -> Continued | None:
    columns, cut = kw.rejoin_header(wrapped.text, text)
    if columns is not None:
        wrapped.draft.columns = columns
        return Continued(wrapped.draft)
    if cut is not None:
        return Continued(wrapped.draft, Wrapped(wrapped.draft, "header", cut, line_no, wrapped.joins + 1))
    return None


def _continue_row(wrapped: Wrapped, line_no: int, text: str) -> Continued | None:
    draft = wrapped.draft
    if draft.columns is None:
        return None
    row, cut = kw.rejoin_row(wrapped.text, text, draft.columns, wrapped.first_no)
    if row is not None:
        draft.tasks.append(row)
        return Continued(draft)
    if cut is not None:
        return Continued(draft, Wrapped(draft, "row", cut, line_no, wrapped.joins + 1, wrapped.first_no))
    return None
