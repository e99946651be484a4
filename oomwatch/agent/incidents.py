"""OOM incidents: when the kernel kills a process, write ``incidents/<time>-<job>-<pid>.json`` (the
Diagnosis of the kernel's report, with the roles the agent saw live, plus the victim's job's recent
history) and a text rendering beside it, log one summary line, count it for the metrics.

The kernel's report is diagnosed by the same engine as ``oomwatch diagnose`` (imported on the first
kill only: the agent does not carry the rules in memory until it needs them).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomwatch.agent.analyze import analyze
from oomwatch.agent.model import ProcessSample, Tick
from oomwatch.engine.sizes import human
from oomwatch.kmsg import KmsgRecord

if TYPE_CHECKING:
    from oomwatch.agent.history import HistoryStore

log = logging.getLogger("oomwatch.agent")

INCIDENT_SCHEMA = "oomwatch.incident/v1"
WINDOW = 300.0  # seconds of history put into an incident, and of gone processes remembered
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def incident_dir(state_dir: Path) -> Path:
    return state_dir / "incidents"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Incidents:
    def __init__(self, state_dir: Path, history: HistoryStore | None = None, window: float = WINDOW) -> None:
        self.dir = incident_dir(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.history = history
        self.window = window
        self.lock = threading.Lock()  # on_kill runs in the kmsg thread, observe in the sampler's
        self.seen: dict[int, tuple[float, ProcessSample]] = {}  # pid -> (last seen, last sample)
        self.counts: dict[tuple[str, str, str, str, str], int] = {}  # (job, role, rank, comm, verdict)
        self.last_time: float | None = None
        self._engine: tuple[Any, Any, Any, Any] | None = None

    def observe(self, tick: Tick) -> None:
        """Remember every job process's latest sample, and gone ones for ``window`` seconds: the
        victim is gone by the time its report is read."""
        with self.lock:
            for p in tick.processes:
                if p.in_job:
                    self.seen[p.pid] = (tick.time, p)
            stale = [pid for pid, (t, _) in self.seen.items() if tick.time - t > self.window]
            for pid in stale:
                del self.seen[pid]

    def _load_engine(self) -> tuple[Any, Any, Any, Any]:
        if self._engine is None:
            from oomwatch.engine.diagnose import diagnose
            from oomwatch.engine.loader import load_rules
            from oomwatch.engine.scanner import Scanner
            from oomwatch.report import RENDERERS

            rules = load_rules(())
            # Python's re as the prefilter: a kernel report is ~100 lines, and Hyperscan's database
            # would add ~29 MB to the agent (measured) for no gain at that size.
            self._engine = (rules, Scanner(rules, backend="re"), diagnose, RENDERERS)
        return self._engine

    def warm(self) -> None:
        """Load the engine now (in a thread of the caller's choosing), so that the first incident is
        written within a second of the kill; ~0.7 s and ~9 MB (measured)."""
        with self.lock:
            self._load_engine()

    def on_kill_records(self, pid: int, records: list[KmsgRecord]) -> Path:
        """An incident from /dev/kmsg records (their clock gives the kill-to-incident latency)."""
        last = records[-1] if records else None
        return self.on_kill(
            pid, [r.dmesg_line() for r in records], last.seq if last else None, last.usec / 1e6 if last else None
        )

    def on_kill(self, pid: int, lines: list[str], seq: int | None = None, kernel_time: float | None = None) -> Path:
        """Write the incident for one kill from its report's lines; returns the JSON file's path.
        ``kernel_time``: the kill line's time on the kernel's monotonic clock, when known."""
        now = time.time()
        with self.lock:
            rules, scanner, diagnose, renderers = self._load_engine()
        source = "kernel log (/dev/kmsg)" if seq is not None else "kernel log"
        scan = scanner.scan(source, ["\n".join(lines).encode("utf-8", "replace") + b"\n"])
        with self.lock:
            known = {p: (s.role, s.rank) for p, (_, s) in self.seen.items()}
            victim = self.seen.get(pid, (None, None))[1]
        job = victim.job if victim is not None else None
        history, rows = self._history(job, pid, now)
        live = analyze(rows, pid)
        diagnosis = diagnose([scan], rules, known=known, live=live)
        diag_json = json.loads(renderers["json"](diagnosis))
        verdict = diag_json.get("verdict", "")
        comm = victim.comm if victim is not None else (diagnosis.victims[0].name if diagnosis.victims else "") or ""
        named = diagnosis.victims[0] if diagnosis.victims else None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        ident = f"{stamp}-{_SLUG.sub('_', job or 'node')[:60]}-{pid}"
        doc = {
            "schema": INCIDENT_SCHEMA,
            "id": ident,
            "time": now,
            "kmsg_seq": seq,
            # kmsg timestamps are the kernel's monotonic clock: how long after the kill line this was written
            "latency_seconds": round(time.monotonic() - kernel_time, 3) if kernel_time is not None else None,
            "victim": {
                "pid": pid,
                "comm": comm,
                "job": job,
                # seen live; else what the kernel's report and the names say
                "role": victim.role if victim is not None else (named.role if named else None),
                "rank": victim.rank if victim is not None else (named.rank if named else None),
                "last_sample": asdict(victim) if victim is not None else None,
            },
            "diagnosis": diag_json,
            "history": history,
            "kernel_lines": lines,
        }
        path = self.dir / f"{ident}.json"
        _atomic_write(path, json.dumps(doc, indent=2) + "\n")
        _atomic_write(self.dir / f"{ident}.txt", render_incident_text(doc, renderers["text"](diagnosis)))
        with self.lock:
            key = (
                job or "",
                victim.role if victim is not None else "unknown",
                "" if victim is None or victim.rank is None else str(victim.rank),
                comm,
                verdict,
            )
            self.counts[key] = self.counts.get(key, 0) + 1
            self.last_time = now
        role = (
            f"{victim.role}" + (f" rank {victim.rank}" if victim and victim.rank is not None else "") if victim else ""
        )
        log.warning(
            "OOM kill: pid %d (%s%s%s) [%s]: %s -> %s",
            pid,
            comm,
            f", {role}" if role else "",
            f", job {job}" if job else "",
            verdict,
            diag_json.get("summary", "")[:300],
            path,
        )
        return path

    def _history(self, job: str | None, pid: int, now: float) -> tuple[dict[str, Any], list[Any]]:
        """(the history put into the incident, the process rows for the analyzers)."""
        if self.history is None:
            with self.lock:
                last = [asdict(s) for _, s in self.seen.values() if job is not None and s.job == job]
            return {"source": "last samples (no history store)", "processes": last, "cgroups": []}, []
        since = now - self.window
        try:
            procs = (
                self.history.processes(job=job, since=since) if job else self.history.processes(pid=pid, since=since)
            )
            cgroups = self.history.cgroups(since=since)
        except Exception as exc:  # the history is evidence, not a requirement
            log.error("reading the history for the incident failed: %s", exc)
            return {"source": f"history unreadable: {exc}", "processes": [], "cgroups": []}, []
        # only the victim's job's cgroups (a victim of no known job: none, rather than every cgroup)
        cgroups = [c for c in cgroups if job and job in (c.jobs or "").split(",")]
        doc = {
            "source": f"history, last {self.window:g} s",
            "processes": [asdict(r) for r in procs],
            "cgroups": [asdict(c) for c in cgroups],
        }
        return doc, list(procs)


def render_incident_text(doc: dict[str, Any], diagnosis_text: str) -> str:
    v = doc["victim"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["time"]))
    who = f"pid {v['pid']} ({v['comm']}" + (f", {v['role']}" if v.get("role") else "")
    who += (f" rank {v['rank']}" if v.get("rank") is not None else "") + ")"
    out = [
        f"oomwatch incident {doc['id']}",
        f"{when}: the kernel killed {who}" + (f" of job {v['job']}" if v["job"] else ""),
    ]
    out += ["", diagnosis_text.rstrip("\n"), ""]
    out.append(_history_table(doc["history"]))
    return "\n".join(out).rstrip("\n") + "\n"


def _history_table(history: dict[str, Any]) -> str:
    rows = history.get("processes") or []
    if not rows:
        return f"History: none ({history.get('source', '')})."
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_pid.setdefault(r["pid"], []).append(r)
    lines = [f"History ({history.get('source', '')}): first → peak → last"]
    lines.append(f"  {'PID':>8}  {'ROLE':<18} {'RANK':>4}  {'ANON':<36} {'USS':<36}")
    for pid, rs in sorted(by_pid.items()):
        rs.sort(key=lambda r: r.get("time") or 0)
        last = rs[-1]

        def span(key: str, rs: list[dict[str, Any]] = rs) -> str:
            vals: list[int] = [r[key] for r in rs if r.get(key) is not None]
            if not vals:
                return "-"
            return f"{human(vals[0])} → {human(max(vals))} → {human(vals[-1])}"

        rank = "-" if last.get("rank") is None else str(last["rank"])
        lines.append(f"  {pid:>8}  {str(last.get('role')):<18} {rank:>4}  {span('anon'):<36} {span('uss'):<36}")
    return "\n".join(lines)


def list_incidents(state_dir: Path) -> list[dict[str, Any]]:
    """The incidents on disk, oldest first; unreadable files are skipped."""
    out = []
    for path in sorted(incident_dir(state_dir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("schema") == INCIDENT_SCHEMA:
            out.append(doc)
    return out
