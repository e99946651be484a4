"""``oomwatch diagnose LOG --history DB``: what the agent recorded, merged into a log diagnosis.

The logs name the victim (a kernel report, a launcher line); the history says what that process
was (its role and rank, seen live) and what grew in its job in the minutes before it vanished. PIDs
are reused: the victim's *last* recorded stretch is used, and the notes say which time range.
"""

from __future__ import annotations

import time
from typing import Any

from oomwatch.agent.analyze.job import analyze, this_run
from oomwatch.agent.history.reader import HistoryReader
from oomwatch.engine.model import LiveEvidence
from oomwatch.engine.roles import role_phrase

WINDOW = 300.0  # seconds of the job's history before the victim's last sample


def from_history(
    store: HistoryReader, victim_pids: list[int]
) -> tuple[dict[int, tuple[str, int | None]], LiveEvidence, str]:
    """(pid → (role, rank) seen live, the analyzers' facts and evidence, a note saying what was used)."""
    for pid in victim_pids:
        rows = store.processes(pid=pid)
        if not rows:
            continue
        last = rows[-1]
        until = last.time
        since = until - WINDOW
        job_rows: list[Any] = store.processes(job=last.job, since=since, until=until + 1) if last.job else rows
        job_rows = this_run(job_rows, pid)
        known: dict[int, tuple[str, int | None]] = {}
        for r in job_rows:
            known[r.pid] = (r.role, r.rank)
        start = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
        span = f"{start}–{time.strftime('%H:%M:%S', time.localtime(until))}"
        who = role_phrase(last.role, last.rank)
        of_job = f" of job {last.job}" if last.job else ""
        note = (
            f"history: pid {pid} was {who}{of_job}; its job's samples {span} were analyzed "
            "(a reused pid would show another process: check the times against the log's)"
        )  # fmt: skip
        node = store.node(since=since, until=until + 1)
        cgroups = [c for c in store.cgroups(since=since, until=until + 1) if last.job and last.job in c.jobs.split(",")]
        steps = store.steps(job=last.job, since=since, until=until + 1) if last.job else []
        return known, analyze(job_rows, pid, node=node, cgroups=cgroups, steps=steps), note
    return {}, LiveEvidence(), "history: none of the victims' pids is in the history"
