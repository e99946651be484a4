"""Assemble kernel OOM-killer reports from log lines (pure, no I/O).

A kernel OOM report is many lines: a header (`X invoked oom-killer: ...`), a call
trace, Mem-Info or memory-cgroup usage, a task table, a summary
(`oom-kill:constraint=...`, 4.19+), the kill (`Killed process N (name) ...`) and
maybe an `oom_reaper:` line. Most of these lines carry none of `KERNEL_ANCHORS`.
With ``memory.oom.group`` set, the kill is followed by `Tasks in X are going to be killed
due to memory.oom.group set` and a kill line for every other task of X: one report, its
victim the first kill, the others `group_killed`.

Pasted reports are read too: `> ` quote marks, and a line wrapped onto the next one (an
e-mail's or a terminal's width: `... total-vm:14456kB, anon-` then `rss:10324kB, ...`) — a kill
or summary line, the task table's header or a row, a memory.stat path — is joined with its
continuation when that gives what it lacked (engine/kernel_wraps.py says how).

The caller (a fast scanner) feeds `KernelReportAssembler.feed` every line that
contains an anchor and, while `wants_more()` is True, every line after it. A
report stays open until a few lines after its kill line (`grace`), until
`max_idle` lines in a row did not look like part of it, or after `max_lines`
lines in all, so a cut-off report never makes the caller read the rest of a
large file. One report is open per (file, host): syslog from several hosts can
interleave. `finish()` closes everything and returns `OomReport`s in order of
their first line. Odd input never raises; unknown fields stay None.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from oomwatch.engine import kernel_lines as kl
from oomwatch.engine import kernel_wraps as kw
from oomwatch.engine.model import Evidence, KilledTask, Line, OomReport, TaskRow

__all__ = ["KERNEL_ANCHORS", "KernelReportAssembler", "assemble_kernel_reports", "has_anchor"]

KERNEL_ANCHORS: tuple[str, ...] = (
    "invoked oom-killer",
    "oom-kill:constraint=",
    "Killed process",
    "Kill process",
    "kill process",  # 2.6.32: "Out of memory: kill process N (x) score S or a child"
    "Memory cgroup out of memory",
    "Out of memory",
    "Out of Memory",  # 2.6.2x: "Out of Memory: Kill process ..."
    "No available memory",  # 2.6.2x mempolicy/cpuset kills
    "oom_reaper",
    "killed as a result of limit of",
    "Tasks state (memory values in pages)",  # the task table's title (>= 4.19)
    "tgid total_vm",  # the task table's header, every version
    "Memory cgroup stats for",  # printed only in a memory cgroup's OOM report
    "memory+swap: usage",
    "oom_kill_process",  # in the OOM killer's call trace (when the header was cut off)
    "due to memory.oom.group set",  # the group kill that follows a victim's kill (4.19+)
)
# call-trace functions on the path of a memory cgroup's OOM, never of the global one
_MEMCG_TRACE = (
    "mem_cgroup_out_of_memory",
    "mem_cgroup_oom",
    "try_charge_memcg",
    "mem_cgroup_try_charge",
    " try_charge+",
)

_MAX_TEXT = 4096  # printk lines are < 1 KiB; longer text is cut before matching
_RSYSLOG_NEWLINE = "#012"  # rsyslog escapes the newlines of multi-line records
_RECENT = 8  # closed reports per (file, host) kept for late reaper/kill lines
_REOPEN_WITHIN = 100  # a late kill line may still join a report closed this many lines ago
MAX_REPORTS = 200  # reports kept per input: the first few and the latest (a flood of headers is no 100k kills)
KEEP_FIRST = 20  # of those, the first reports of the input, always kept
MIN_BARE_ROWS = 3  # task-table rows, with no header or kill line, that make a report of their own

_Key = tuple[str, str | None]


def has_anchor(text: str) -> bool:
    """True if the text contains one of `KERNEL_ANCHORS`."""
    return any(a in text for a in KERNEL_ANCHORS)


@dataclass
class _Draft:
    """A report being assembled; mutable twin of `OomReport` plus parser state."""

    key: _Key
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
            self.victim_uid = _first(self.victim_uid, row.uid)
            self.oom_score_adj = _first(self.oom_score_adj, row.oom_score_adj)
            self.total_vm_bytes = _first(self.total_vm_bytes, row.total_vm_bytes)
            self.anon_rss_bytes = _first(self.anon_rss_bytes, row.anon_rss_bytes)
            self.file_rss_bytes = _first(self.file_rss_bytes, row.file_rss_bytes)
            self.shmem_rss_bytes = _first(self.shmem_rss_bytes, row.shmem_rss_bytes)
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
class _Wrapped:
    """A line that the next line may continue: its report, kind, text (joined so far)."""

    draft: _Draft
    kind: str  # "kill", "summary", "header" (the task table's), "row" (of it), "stats" (memory.stat's path)
    text: str
    line_no: int  # the line that was continued last
    joins: int = 0
    first_no: int = 0  # the line it began on (a task row's number)


def _first(a: int | None, b: int | None) -> int | None:
    return a if a is not None else b


def _killed_task(kill: kl.KillLine, line_no: int) -> KilledTask:
    return KilledTask(kill.pid or 0, kill.comm, kill.anon_rss_bytes, kill.file_rss_bytes, kill.shmem_rss_bytes, line_no)


class KernelReportAssembler:
    """Turns the lines of kernel OOM-killer reports into `OomReport`s.

    `grace`: same-host lines a report stays open after its kill line (for a
    following `Killed process` / `oom_reaper` line). `max_idle`: lines in a row
    that do not look like report lines before a report is closed. `max_lines`:
    lines a report may span at most (task tables of big hosts are long).
    """

    def __init__(
        self, grace: int = 5, max_idle: int = 300, max_lines: int = 50_000, max_reports: int = MAX_REPORTS
    ) -> None:
        self._grace = grace
        self._max_idle = max_idle
        self._max_lines = max_lines
        self._max_reports = max(max_reports, KEEP_FIRST + 1)
        self.dropped = 0  # reports not kept (more than max_reports in one input): the oldest after the first
        self._open: dict[_Key, _Draft] = {}
        self._recent: dict[_Key, deque[_Draft]] = {}
        self._all: list[_Draft] = []
        # per file: the last kill or summary line (or a cut header, row, stats line), which the very
        # next line of the file may continue (a paste wrapped it)
        self._wrapped: dict[str, _Wrapped] = {}

    # --- public API ----------------------------------------------------------------

    def feed(self, line: Line) -> None:
        """Take one line (prefix already stripped)."""
        key: _Key = (line.file, line.host)
        text = kl.unquote(line.text[:_MAX_TEXT].strip())
        wrapped = self._wrapped.pop(line.file, None)
        if wrapped is not None and wrapped.line_no + 1 == line.no:
            draft = self._continues(wrapped, line, text)
            if draft is not None:
                draft.last_line = max(draft.last_line, line.no)
                if wrapped.kind in ("kill", "summary"):  # the rest of an evidence line
                    draft.add_evidence(line)
                self._tick(draft.key, draft)
                return
        segments = text.split(_RSYSLOG_NEWLINE) if _RSYSLOG_NEWLINE in text else [text]
        hit: _Draft | None = None
        for segment in segments:
            try:
                hit = self._handle(line, kl.unquote(segment.strip()), key) or hit
            except (ValueError, IndexError, OverflowError):  # pragma: no cover - defensive
                continue
        if hit is not None:
            hit.last_line = max(hit.last_line, line.no)
        self._tick(key, hit)

    def wants_more(self) -> bool:
        """True while a report is open and the following lines may belong to it."""
        return bool(self._open)

    def finish(self) -> list[OomReport]:
        """Close every open report; all reports in order of their first line."""
        for key in list(self._open):
            self._close(key)
        return [d.build() for d in sorted(self._all, key=lambda d: d.seq) if d.is_report()]

    # --- report lifecycle ----------------------------------------------------------

    def _start(self, line: Line, key: _Key) -> _Draft:
        if key in self._open:
            self._close(key)
        seq = self._all[-1].seq + 1 if self._all else 0
        draft = _Draft(key, seq, line.no, line.no, line.time)
        self._all.append(draft)
        if len(self._all) > self._max_reports:
            open_now = {id(d) for d in self._open.values()}
            at = next((i for i in range(KEEP_FIRST, len(self._all) - 1) if id(self._all[i]) not in open_now), None)
            if at is not None:
                del self._all[at]
                self.dropped += 1
        self._open[key] = draft
        return draft

    def _close(self, key: _Key) -> None:
        draft = self._open.pop(key, None)
        if draft is not None:
            self._recent.setdefault(key, deque(maxlen=_RECENT)).append(draft)

    def _reopen(self, line: Line, key: _Key, pid: int | None, need: str) -> _Draft | None:
        """The report closed just before `line` that a late kill/selection line belongs to."""
        recent = self._recent.get(key)
        if not recent or key in self._open:
            return None
        draft = recent[-1]
        if draft.has_killed or getattr(draft, need) or line.no - draft.last_line > _REOPEN_WITHIN:
            return None
        if pid is not None and pid not in (draft.victim_pid, draft.selected_pid):
            return None
        recent.pop()
        self._open[key] = draft
        return draft

    def _tick(self, key: _Key, hit: _Draft | None) -> None:
        for k, draft in list(self._open.items()):
            draft.lines += 1
            draft.idle = 0 if draft is hit else draft.idle + 1
            if k == key and draft.grace_left is not None:
                draft.grace_left -= 1
            if (
                (draft.grace_left is not None and draft.grace_left <= 0)
                or draft.idle >= self._max_idle
                or draft.lines >= self._max_lines
            ):
                self._close(k)

    def _killed(self, draft: _Draft) -> None:
        draft.grace_left = self._grace + 1  # this line's tick takes one

    # --- per line ------------------------------------------------------------------

    def _handle(self, line: Line, s: str, key: _Key) -> _Draft | None:
        if not s:
            return None
        cur = self._open.get(key)
        if cur is not None and cur.in_stats:
            stat = kl.parse_stat_line(s)
            if stat is not None:
                cur.memcg_stat.setdefault(stat[0], stat[1])
                return cur
            cur.in_stats = False

        if "invoked oom-killer" in s:
            header = kl.parse_header(s)
            if header is not None:
                draft = self._start(line, key)
                draft.has_header = True
                draft.trigger_name = header.comm
                draft.gfp_mask = header.gfp_mask
                draft.order = header.order
                draft.add_evidence(line)
                return draft
        if "oom-kill:" in s:
            summary = kl.parse_summary(s)
            if summary is not None:
                draft = self._on_summary(line, key, summary)
                self._wrapped[line.file] = _Wrapped(draft, "summary", s, line.no)
                return draft
        if "Killed process" in s:
            kill = kl.parse_kill(s)
            if kill is not None:
                draft = self._on_kill(line, key, kill)
                self._wrapped[line.file] = _Wrapped(draft, "kill", s, line.no)
                return draft
        if kl.kill_cut_before_pid(s):  # "...: Killed" / "...: Killed process", its pid on the next line
            draft = cur if cur is not None and not cur.has_killed else self._start(line, key)
            draft.add_evidence(line)
            self._wrapped[line.file] = _Wrapped(draft, "kill", s, line.no)
            return draft
        if "memory.oom.group" in s:
            group = kl.parse_oom_group(s)
            if group is not None:
                return self._on_oom_group(line, key, group)
        if "ill process" in s:
            selection = kl.parse_selection(s)
            if selection is not None:
                return self._on_selection(line, key, selection)
        if s.startswith("oom_reaper:"):
            reaper = kl.parse_reaper(s)
            if reaper is not None:
                return self._on_reaper(line, key, reaper)
        if "killed as a result of limit of" in s:
            task_in = kl.parse_memcg_task_in(s)
            if task_in is not None:
                if cur is None or cur.has_killed or cur.has_summary:
                    cur = self._start(line, key)
                cur.task_memcg, cur.oom_memcg = task_in
                cur.set_constraint("memcg", 2)
                cur.add_evidence(line)
                return cur
        if cur is None:
            # a task table or its title with nothing before it (the rest of the report was cut):
            # only the OOM killer prints it, so it is a report of its own
            if s.startswith("Tasks state (memory values in pages)") or (
                s.startswith("[") and kl.parse_table_header(s) is not None
            ):
                cur = self._start(line, key)
                cur.add_evidence(line)
            elif s.startswith(("Memory cgroup stats for ", "memory+swap: usage ", "memory: usage ")):
                cur = self._start(line, key)  # a memory cgroup's OOM report, its start cut off
                cur.set_constraint("memcg", 1)
            elif "oom_kill_process" in s or s.startswith("Out of memory and no killable processes"):
                cur = self._start(line, key)  # the OOM killer's call trace, its header cut off
                cur.add_evidence(line)
            elif s[:1] == "[" and (columns := kl.bare_row_columns(s)) is not None:
                cur = self._start(line, key)  # rows of the task table alone: a report if enough follow
                cur.columns, cur.rows_only = columns, True
                cur.add_evidence(line)
            else:
                return None
        return self._on_body(line, s, cur)

    def _on_summary(self, line: Line, key: _Key, summary: kl.Summary) -> _Draft:
        cur = self._open.get(key)
        if cur is None or cur.has_summary or cur.has_killed:
            cur = self._start(line, key)
        cur.has_summary = True
        cur.set_constraint(summary.constraint, 3)
        cur.oom_memcg = summary.oom_memcg or cur.oom_memcg
        cur.task_memcg = summary.task_memcg or cur.task_memcg
        cur.victim_pid = summary.pid
        cur.victim_name = summary.task
        cur.victim_uid = summary.uid
        cur.add_evidence(line)
        self._killed(cur)
        return cur

    def _on_selection(self, line: Line, key: _Key, sel: kl.Selection) -> _Draft:
        cur = self._open.get(key)
        if cur is not None and (cur.has_selection or cur.has_killed):
            cur = None
        if cur is None:
            cur = self._reopen(line, key, None, "has_selection") or self._start(line, key)
        cur.has_selection = True
        cur.selected_pid = sel.pid
        cur.selected_name = sel.comm
        cur.set_constraint(kl.constraint_from_message(sel.message), 1)
        cur.add_evidence(line)
        self._killed(cur)
        return cur

    def _on_kill(self, line: Line, key: _Key, kill: kl.KillLine) -> _Draft:
        cur = self._open.get(key)
        if cur is not None and cur.has_killed:
            if kill.pid == cur.victim_pid:  # the same kill said twice
                cur.add_evidence(line)
                return cur
            if cur.oom_group is not None and kill.pid is not None:  # killed with the victim
                if all(t.pid != kill.pid for t in cur.group_killed):
                    cur.group_killed.append(_killed_task(kill, line.no))
                self._killed(cur)
                return cur
            cur = None
        if cur is None:
            cur = self._reopen(line, key, kill.pid, "has_killed") or self._start(line, key)
        same_task = kill.pid == cur.victim_pid  # the summary named the same task
        cur.has_killed = True
        cur.victim_pid = kill.pid
        cur.victim_name = kill.comm if kill.comm is not None or not same_task else cur.victim_name
        cur.victim_uid = _first(kill.uid, cur.victim_uid if same_task else None)
        cur.total_vm_bytes = kill.total_vm_bytes
        cur.anon_rss_bytes = kill.anon_rss_bytes
        cur.file_rss_bytes = kill.file_rss_bytes
        cur.shmem_rss_bytes = kill.shmem_rss_bytes
        cur.oom_score_adj = kill.oom_score_adj
        cur.set_constraint(kl.constraint_from_message(kill.message), 1)
        cur.add_evidence(line)
        self._killed(cur)
        return cur

    def _on_oom_group(self, line: Line, key: _Key, cgroup: str) -> _Draft:
        """`Tasks in X are going to be killed due to memory.oom.group set`: the kill lines that
        follow are the group's, killed with the victim named just before."""
        cur = self._open.get(key)
        recent = self._recent.get(key)
        if cur is None and recent:  # closed a moment ago (reaper lines came between)
            last = recent[-1]
            if last.has_killed and last.oom_group is None and line.no - last.last_line <= _REOPEN_WITHIN:
                self._open[key] = cur = recent.pop()
        if cur is None or cur.oom_group is not None:
            # a report of its own: the victim's line is not in the input, the group's first kill stands for it
            cur = self._start(line, key)
        cur.oom_group = cgroup
        cur.add_evidence(line)
        self._killed(cur)
        return cur

    def _continues(self, wrapped: _Wrapped, line: Line, text: str) -> _Draft | None:
        """The report whose line ``text`` continues (a paste wrapped it: an e-mail's or a terminal's
        width), with what it adds taken; None when ``text`` is a line of its own (a kernel line, a task
        row) or adds nothing."""
        draft, first = wrapped.draft, wrapped.text
        if not text or has_anchor(text) or text[:1] == "[" or wrapped.joins >= kw.MAX_JOINS:
            return None
        if wrapped.kind == "row":
            return self._continues_row(wrapped, line, text)
        if wrapped.kind == "header":
            return self._continues_header(wrapped, line, text)
        if wrapped.kind == "stats":
            stats = kw.rejoin_stats(first, text)
            if stats is None:
                return None
            draft.stats_seen = True
            draft.memcg_stat.update(stats[1])
            draft.in_stats = not stats[1]
            return draft
        joined = kw.join_kill_text(first, text)
        again = _Wrapped(draft, wrapped.kind, joined, line.no, wrapped.joins + 1)
        if wrapped.kind == "summary":
            was, summary = kl.parse_summary(first), kl.parse_summary(joined)
            if summary is None or was is None or was.pid is not None:
                return None
            if summary.pid is None:  # a long line folded more than once: its middle has no spaces
                if " " in text:
                    return None
                self._wrapped[line.file] = again
                return draft
            draft.task_memcg = summary.task_memcg or draft.task_memcg
            draft.oom_memcg = summary.oom_memcg or draft.oom_memcg
            if summary.constraint is not None:  # the whole line may say more (oom_memcg=) than its start
                draft.constraint, draft.constraint_rank = summary.constraint, 3
            if draft.victim_pid is None:
                draft.victim_pid, draft.victim_name, draft.victim_uid = summary.pid, summary.task, summary.uid
            return draft
        before, after = kl.parse_kill(first), kl.parse_kill(joined)
        if after is None:
            return None
        if before is None:  # the line broke before the pid: now it is a kill line
            self._open.setdefault(draft.key, draft)
            self._wrapped[line.file] = again
            return self._on_kill(line, draft.key, after)
        if after.pid != before.pid or kw.known_fields(after) <= kw.known_fields(before):
            return None
        if draft.group_killed and draft.group_killed[-1].pid == after.pid:
            draft.group_killed[-1] = _killed_task(after, draft.group_killed[-1].line)
        elif draft.victim_pid == after.pid:
            draft.victim_name = after.comm if after.comm is not None else draft.victim_name
            draft.victim_uid = _first(after.uid, draft.victim_uid)
            draft.total_vm_bytes = _first(after.total_vm_bytes, draft.total_vm_bytes)
            draft.anon_rss_bytes = _first(after.anon_rss_bytes, draft.anon_rss_bytes)
            draft.file_rss_bytes = _first(after.file_rss_bytes, draft.file_rss_bytes)
            draft.shmem_rss_bytes = _first(after.shmem_rss_bytes, draft.shmem_rss_bytes)
            draft.oom_score_adj = _first(after.oom_score_adj, draft.oom_score_adj)
        else:
            return None
        if draft.grace_left is not None:
            self._killed(draft)
        self._wrapped[line.file] = again
        return draft

    def _continues_header(self, wrapped: _Wrapped, line: Line, text: str) -> _Draft | None:
        columns, cut = kw.rejoin_header(wrapped.text, text)
        if columns is not None:
            wrapped.draft.columns = columns
        elif cut is not None:
            self._wrapped[line.file] = _Wrapped(wrapped.draft, "header", cut, line.no, wrapped.joins + 1)
        return wrapped.draft if columns is not None or cut is not None else None

    def _continues_row(self, wrapped: _Wrapped, line: Line, text: str) -> _Draft | None:
        draft = wrapped.draft
        if draft.columns is None:
            return None
        row, cut = kw.rejoin_row(wrapped.text, text, draft.columns, wrapped.first_no)
        if row is not None:
            draft.tasks.append(row)
        elif cut is not None:
            self._wrapped[line.file] = _Wrapped(draft, "row", cut, line.no, wrapped.joins + 1, wrapped.first_no)
        return draft if row is not None or cut is not None else None

    def _on_reaper(self, line: Line, key: _Key, reaper: kl.Reaper) -> _Draft | None:
        candidates: list[_Draft] = []
        if key in self._open:
            candidates.append(self._open[key])
        candidates.extend(reversed(self._recent.get(key, ())))
        for draft in candidates:
            if draft.oom_group is not None and any(t.pid == reaper.pid for t in draft.group_killed):
                if draft is self._open.get(key):
                    self._killed(draft)  # the group's kills may go on after the reaper's lines
                    return draft
                return None
            if draft.victim_pid is not None and draft.victim_pid == reaper.pid:
                draft.reaped = draft.reaped or reaper.reaped
                draft.add_evidence(line)
                draft.last_line = max(draft.last_line, line.no)
                return draft if draft is self._open.get(key) else None
        # the kill line was cut or grep'd away: the reaper reaps only the OOM killer's victim, so the
        # latest report without one (whose selected process, if it names one, is this pid) was its kill
        late = candidates[0] if candidates else None
        if (
            late is not None and late.victim_pid is None and reaper.pid is not None and late.oom_group is None
            and late.selected_pid in (None, reaper.pid)
        ):  # fmt: skip
            late.victim_pid, late.victim_name = reaper.pid, late.victim_name or reaper.comm
            late.reaped = reaper.reaped
            late.add_evidence(line)
            late.last_line = max(late.last_line, line.no)
            return late if late is self._open.get(key) else None
        return None

    def _on_body(self, line: Line, s: str, cur: _Draft) -> _Draft | None:
        """A line inside an open report: trace, Mem-Info, memcg info, task table."""
        if cur.columns is not None and s[:1] == "[":
            row = kl.parse_task_row(s, cur.columns, line.no)
            if row is not None:
                cur.tasks.append(row)
                return cur
            if kl.is_cut_task_row(s, cur.columns):  # its last columns on the next line (a paste wrapped it)
                self._wrapped[line.file] = _Wrapped(cur, "row", s, line.no, 0, line.no)
                return cur
        if s[:1] == "[":
            columns = kl.parse_table_header(s)
            if columns is not None:
                cur.columns = columns
                return cur
            if kl.is_cut_table_header(s):  # its last columns on the next line (a paste wrapped it)
                self._wrapped[line.file] = _Wrapped(cur, "header", s, line.no)
                return cur
        if cur.has_header and cur.trigger_pid is None and not cur.has_killed:
            pid = kl.parse_cpu_pid(s)
            if pid is not None:
                cur.trigger_pid = pid
                return cur
        if cur.trigger_cpuset is None and " cpuset=" in s:
            cpuset = kl.parse_cpuset(s)
            if cpuset is not None:
                cur.trigger_cpuset = cpuset
                return cur
        if any(fn in s for fn in _MEMCG_TRACE):
            cur.set_constraint("memcg", 1)  # only a memory cgroup's OOM path calls these
            return cur
        if "moom_callback" in s:
            cur.manual = True
            if s.startswith("Workqueue:"):
                cur.add_evidence(line)
            return cur
        if s.startswith("memory: usage") and cur.memcg_usage_bytes is None:
            usage = kl.parse_memcg_usage(s)
            if usage is not None:
                cur.memcg_usage_bytes = usage.usage_bytes
                cur.memcg_limit_bytes = usage.limit_bytes
                cur.memcg_failcnt = usage.failcnt
                cur.add_evidence(line)
                return cur
        if s.startswith("Memory cgroup stats for"):
            stats = kl.parse_stats_header(s)
            if stats is not None and not cur.stats_seen:
                cur.stats_seen = True
                cur.memcg_stat.update(stats[1])
                cur.in_stats = not stats[1]
            elif stats is None and not cur.stats_seen:  # a long path cut by a paste, its `:` on the next line
                self._wrapped[line.file] = _Wrapped(cur, "stats", s, line.no)
            return cur
        meminfo = kl.parse_meminfo(s)
        if meminfo is not None:
            setattr(cur, meminfo[0], meminfo[1])
            return cur
        if "no killable processes" in s:
            cur.add_evidence(line)
            return cur
        return cur if kl.is_report_shaped(s) else None


def assemble_kernel_reports(lines: Iterable[Line]) -> list[OomReport]:
    """Run an assembler over `lines` the way the scanner does: feed a line when it
    holds an anchor or while the assembler wants more."""
    assembler = KernelReportAssembler()
    for line in lines:
        if assembler.wants_more() or has_anchor(line.text) or kl.is_table_line(kl.unquote(line.text.strip())):
            assembler.feed(line)
    return assembler.finish()
