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
continuation when that gives what it lacked (engine/kernel_wraps.py says how). What each line
adds to its report is engine/kernel_draft.py's; here is which report a line belongs to, and when.

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

from oomwatch.engine import kernel_body as kb
from oomwatch.engine import kernel_lines as kl
from oomwatch.engine import kernel_wraps as kw
from oomwatch.engine.kernel_draft import Draft, Key, Wrapped, continue_line, killed_task, read_body
from oomwatch.engine.model import Line, OomReport

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
_MAX_TEXT = 4096  # printk lines are < 1 KiB; longer text is cut before matching
_RSYSLOG_NEWLINE = "#012"  # rsyslog escapes the newlines of multi-line records
_RECENT = 8  # closed reports per (file, host) kept for late reaper/kill lines
_REOPEN_WITHIN = 100  # a late kill line may still join a report closed this many lines ago
MAX_REPORTS = 200  # reports kept per input: the first few and the latest (a flood of headers is no 100k kills)
KEEP_FIRST = 20  # of those, the first reports of the input, always kept


def has_anchor(text: str) -> bool:
    """True if the text contains one of `KERNEL_ANCHORS`."""
    return any(a in text for a in KERNEL_ANCHORS)


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
        self._open: dict[Key, Draft] = {}
        self._recent: dict[Key, deque[Draft]] = {}
        self._all: list[Draft] = []
        # per file: the last kill or summary line (or a cut header, row, stats line), which the very
        # next line of the file may continue (a paste wrapped it)
        self._wrapped: dict[str, Wrapped] = {}

    # --- public API ----------------------------------------------------------------

    def feed(self, line: Line) -> None:
        """Take one line (prefix already stripped)."""
        key: Key = (line.file, line.host)
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
        hit: Draft | None = None
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

    def _start(self, line: Line, key: Key) -> Draft:
        if key in self._open:
            self._close(key)
        seq = self._all[-1].seq + 1 if self._all else 0
        draft = Draft(key, seq, line.no, line.no, line.time)
        self._all.append(draft)
        if len(self._all) > self._max_reports:
            open_now = {id(d) for d in self._open.values()}
            at = next((i for i in range(KEEP_FIRST, len(self._all) - 1) if id(self._all[i]) not in open_now), None)
            if at is not None:
                del self._all[at]
                self.dropped += 1
        self._open[key] = draft
        return draft

    def _close(self, key: Key) -> None:
        draft = self._open.pop(key, None)
        if draft is not None:
            self._recent.setdefault(key, deque(maxlen=_RECENT)).append(draft)

    def _reopen(self, line: Line, key: Key, pid: int | None, need: str) -> Draft | None:
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

    def _tick(self, key: Key, hit: Draft | None) -> None:
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

    def _killed(self, draft: Draft) -> None:
        draft.grace_left = self._grace + 1  # this line's tick takes one

    # --- per line ------------------------------------------------------------------

    def _handle(self, line: Line, s: str, key: Key) -> Draft | None:
        if not s:
            return None
        cur = self._open.get(key)
        if cur is not None and cur.in_stats:
            stat = kb.parse_stat_line(s)
            if stat is not None:
                cur.memcg_stat.setdefault(stat[0], stat[1])
                return cur
            cur.in_stats = False

        if "invoked oom-killer" in s:
            header = kl.parse_header(s)
            if header is not None:
                draft = self._start(line, key)
                draft.take_header(header)
                draft.add_evidence(line)
                return draft
        if "oom-kill:" in s:
            summary = kl.parse_summary(s)
            if summary is not None:
                draft = self._on_summary(line, key, summary)
                self._wrapped[line.file] = Wrapped(draft, "summary", s, line.no)
                return draft
        if "Killed process" in s:
            kill = kl.parse_kill(s)
            if kill is not None:
                draft = self._on_kill(line, key, kill)
                self._wrapped[line.file] = Wrapped(draft, "kill", s, line.no)
                return draft
        if kl.kill_cut_before_pid(s):  # "...: Killed" / "...: Killed process", its pid on the next line
            draft = cur if cur is not None and not cur.has_killed else self._start(line, key)
            draft.add_evidence(line)
            self._wrapped[line.file] = Wrapped(draft, "kill", s, line.no)
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
                return self._on_task_in(line, key, cur, task_in)
        if cur is None:
            cur = self._start_cut(line, s, key)
            if cur is None:
                return None
        hit, wrapped = read_body(line, s, cur)
        if wrapped is not None:
            self._wrapped[line.file] = wrapped
        return hit

    def _start_cut(self, line: Line, s: str, key: Key) -> Draft | None:
        """A report whose start was cut off, begun on a line only the OOM killer prints; else None."""
        if s.startswith("Tasks state (memory values in pages)") or (
            s.startswith("[") and kb.parse_table_header(s) is not None
        ):
            # a task table or its title with nothing before it: a report of its own
            cur = self._start(line, key)
            cur.add_evidence(line)
        elif s.startswith(("Memory cgroup stats for ", "memory+swap: usage ", "memory: usage ")):
            cur = self._start(line, key)  # a memory cgroup's OOM report, its start cut off
            cur.set_constraint("memcg", 1)
        elif "oom_kill_process" in s or s.startswith("Out of memory and no killable processes"):
            cur = self._start(line, key)  # the OOM killer's call trace, its header cut off
            cur.add_evidence(line)
        elif s[:1] == "[" and (columns := kb.bare_row_columns(s)) is not None:
            cur = self._start(line, key)  # rows of the task table alone: a report if enough follow
            cur.columns, cur.rows_only = columns, True
            cur.add_evidence(line)
        else:
            return None
        return cur

    def _on_task_in(self, line: Line, key: Key, cur: Draft | None, task_in: tuple[str, str]) -> Draft:
        """cgroup v1's `Task in X killed as a result of limit of Y`."""
        if cur is None or cur.has_killed or cur.has_summary:
            cur = self._start(line, key)
        cur.task_memcg, cur.oom_memcg = task_in
        cur.set_constraint("memcg", 2)
        cur.add_evidence(line)
        return cur

    def _on_summary(self, line: Line, key: Key, summary: kl.Summary) -> Draft:
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

    def _on_selection(self, line: Line, key: Key, sel: kl.Selection) -> Draft:
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

    def _on_kill(self, line: Line, key: Key, kill: kl.KillLine) -> Draft:
        cur = self._open.get(key)
        if cur is not None and cur.has_killed:
            if kill.pid == cur.victim_pid:  # the same kill said twice
                cur.add_evidence(line)
                return cur
            if cur.oom_group is not None and kill.pid is not None:  # killed with the victim
                if all(t.pid != kill.pid for t in cur.group_killed):
                    cur.group_killed.append(killed_task(kill, line.no))
                self._killed(cur)
                return cur
            cur = None
        if cur is None:
            cur = self._reopen(line, key, kill.pid, "has_killed") or self._start(line, key)
        cur.take_kill(kill)
        cur.add_evidence(line)
        self._killed(cur)
        return cur

    def _on_oom_group(self, line: Line, key: Key, cgroup: str) -> Draft:
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

    def _continues(self, wrapped: Wrapped, line: Line, text: str) -> Draft | None:
        """The report whose line ``text`` continues (a paste wrapped it: an e-mail's or a terminal's
        width), with what it adds taken; None when ``text`` is a line of its own (a kernel line, a task
        row) or adds nothing."""
        if not text or has_anchor(text) or text[:1] == "[" or wrapped.joins >= kw.MAX_JOINS:
            return None
        more = continue_line(wrapped, line.no, text)
        if more is None:
            return None
        if more.again is not None:
            self._wrapped[line.file] = more.again
        if more.kill is not None:  # the line broke before the pid: now it is a kill line
            self._open.setdefault(more.draft.key, more.draft)
            return self._on_kill(line, more.draft.key, more.kill)
        if more.killed:
            self._killed(more.draft)
        return more.draft

    def _on_reaper(self, line: Line, key: Key, reaper: kl.Reaper) -> Draft | None:
        candidates: list[Draft] = []
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


def assemble_kernel_reports(lines: Iterable[Line]) -> list[OomReport]:
    """Run an assembler over `lines` the way the scanner does: feed a line when it
    holds an anchor or while the assembler wants more."""
    assembler = KernelReportAssembler()
    for line in lines:
        if assembler.wants_more() or has_anchor(line.text) or kb.is_table_line(kl.unquote(line.text.strip())):
            assembler.feed(line)
    return assembler.finish()
