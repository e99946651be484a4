"""OOM incidents: when the kernel kills a process, write ``incidents/<time>-<job>-<pid>.json`` (the
Diagnosis of the kernel's report, with the roles the agent saw live, plus the victim's job's recent
history) and a text rendering beside it, log one summary line, count it for the metrics.

The kernel's report is diagnosed by the same engine as ``oomwatch diagnose`` (imported on the first
kill only: the agent does not carry the rules in memory until it needs them).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomwatch.agent.analyze.job import analyze, programs, this_run
from oomwatch.agent.atomic import write_atomic
from oomwatch.agent.incidents.joboutput import JobOutput, OutputFile, job_outputs, locate_outputs
from oomwatch.agent.incidents.killid import agent_kill_id, boot_id, kernel_kill_id, line_kill_id
from oomwatch.agent.model import ProcessSample, Tick
from oomwatch.agent.sample import jobcode
from oomwatch.engine.model import Evidence, Observed, Program, Victim
from oomwatch.engine.roles import PYTHON_PREFIXES, role_phrase
from oomwatch.engine.sizes import human
from oomwatch.kmsg import KmsgRecord
from oomwatch.render.layout import NOT_A_TERMINAL, table, wrap
from oomwatch.textsafe import escape_controls, escape_lines

if TYPE_CHECKING:
    from oomwatch.agent.history.store import HistoryStore

log = logging.getLogger("oomwatch.agent")

INCIDENT_SCHEMA = "oomwatch.incident/v1"
RECENT_KEPT = 100  # incidents kept for oomwatch_incident_timestamp_seconds...
RECENT_SECONDS = 3600.0  # ...for an hour: also those written before a restart, read back from disk
NO_REMEDY = "Cause not determined: the incident lists the candidates and what to collect (oomwatch incidents show)."
WINDOW = 300.0  # seconds of history put into an incident, and of gone processes remembered
SOLO_POINTS = 600  # samples kept of each large Python process of no job
LONER_RSS = 64 << 20  # a Python process of no job this large has its output and code located too
MAX_NEIGHBOURS = 64  # processes looked at for the reader of a job's pipe (each of its log writers)
ANCESTORS = 4  # generations above a log writer where its pipe's reader may be
TICKS_KEPT = 32  # ticks' node and cgroups kept: memory as it was in the seconds before a kill (agent.sigkills)
RETRY_SECONDS = 5.0  # how often an incident that could not be written is tried again
DIAGNOSE_SECONDS = 20.0  # an incident's diagnosis abandoned after this (the kill written with what is known)
PENDING_REMEDY = "The incident is being written (oomwatch incidents show, in a moment)."
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
_KILLED_COMM = re.compile(r"Killed process \d+ \(([^)\n]{0,64})\)")
_MEMCG = ("Memory cgroup out of memory", "CONSTRAINT_MEMCG", "memory: usage ")


def incident_dir(state_dir: Path) -> Path:
    return state_dir / "incidents"


class Incidents:
    def __init__(
        self,
        state_dir: Path,
        history: HistoryStore | None = None,
        window: float = WINDOW,
        proc: Path = Path("/proc"),
        read_code: bool = True,
    ) -> None:
        self.proc = proc
        self.dir = incident_dir(state_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # kills are still counted; their files are written when the disk allows
            log.error("cannot create %s (%s): incidents are counted and written when it can be", self.dir, exc)
        self.boot = boot_id(proc)
        self.history = history
        self.window = window
        self.lock = threading.Lock()  # on_kill runs in the kmsg thread, observe in the sampler's
        self.seen: dict[int, tuple[float, ProcessSample]] = {}  # pid -> (last seen, last sample)
        # (job, role, rank, comm, verdict, cause) -> incidents
        self.counts: dict[tuple[str, str, str, str, str, str], int] = {}
        # the latest incidents, newest last: (time, job, role, rank, comm, verdict, cause, remedy, id)
        self.recent: deque[tuple[float, str, str, str, str, str, str, str, str]] = deque(maxlen=RECENT_KEPT)
        # kill id -> the id of its incident, written or being written: each kill is written once
        self._kills: dict[str, str] = {}
        self._load_recent(state_dir)
        self._unwritten: deque[_Unwritten] = deque()  # incidents the disk refused: tried again
        self._retry_at = 0.0
        self.write_errors = 0  # failed attempts to write an incident file (oomwatch_incident_write_errors_total)
        self.diagnose_seconds = DIAGNOSE_SECONDS
        self.last_time: float | None = None
        self.last_tick: Tick | None = None
        self.ticks: deque[Tick] = deque(maxlen=TICKS_KEPT)  # the latest ticks without processes, newest last
        self._reported: dict[int, float] = {}  # pid -> when an incident for it was started (recent ones)
        # job -> where its output goes and what code it runs, found while it runs
        self._located: dict[str, _Located] = {}
        self._solo: dict[int, deque[dict[str, Any]]] = {}  # large Python processes of no job: their samples
        self.read_code = read_code  # read the job's script for the code rules (the config's read_code)
        self._engine: tuple[Any, Any] | None = None
        self._engine_lock = threading.Lock()  # loading it takes ~0.7 s: never under the samples' lock

    def _load_recent(self, state_dir: Path) -> None:
        """The last hour's incidents from disk: an agent restarted after a kill still exports them."""
        since = time.time() - RECENT_SECONDS
        for doc in list_incidents(state_dir):
            if isinstance(doc.get("kill_id"), str):
                self._kills[doc["kill_id"]] = str(doc.get("id"))
            try:
                if float(doc["time"]) < since:
                    continue
                v, diagnosis = doc["victim"], doc["diagnosis"]
                cause, remedy = alert_cause(diagnosis)
                rank = "" if v.get("rank") is None else str(v["rank"])
                self.recent.append((float(doc["time"]), v.get("job") or "", v.get("role") or "unknown", rank,
                                    v.get("comm") or "", diagnosis.get("verdict") or "", cause, remedy,
                                    str(doc["id"])))  # fmt: skip
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # a file of another shape: listed by `oomwatch incidents`, not exported
        # list_incidents is sorted by file name, which starts with the UTC time: oldest first

    def observe(self, tick: Tick) -> None:
        """Remember every job process's latest sample, and gone ones for ``window`` seconds: the
        victim is gone by the time its report is read."""
        loners = _loners(tick)
        with self.lock:
            for p in tick.processes:
                if not (p.in_job or p.pid in loners):
                    continue
                prev = self.seen.get(p.pid)
                if prev is not None and (p.state == "Z" or (p.rss is None and prev[1].rss is not None)):
                    # a zombie's, or an exiting process's (its memory released, its cgroup the root's), has no
                    # memory and no cgroup any more: the last live sample stays
                    continue
                if prev is not None and prev[1].in_job and p.job in (None, f"tree-{p.pid}") and p.job != prev[1].job:
                    # a process keeps the job it was seen in: a worker orphaned by its rank's kill makes a
                    # "job" of its own in the next sample, or none (a large orphan is then a loner, and
                    # would count as a program of its own sharing the limit), but it was that rank's
                    p = dataclasses.replace(p, job=prev[1].job, role=prev[1].role, rank=prev[1].rank)
                self.seen[p.pid] = (tick.time, p)
            for pid, p in loners.items():  # the history keeps jobs' processes only: theirs is kept here
                self._solo.setdefault(pid, deque(maxlen=SOLO_POINTS)).append({**asdict(p), "time": tick.time})
            for pid in [pid for pid, rows in self._solo.items() if tick.time - rows[-1]["time"] > self.window]:
                del self._solo[pid]
            stale = [pid for pid, (t, _) in self.seen.items() if tick.time - t > self.window]
            for pid in stale:
                del self.seen[pid]
            for pid in [pid for pid, t in self._reported.items() if tick.time - t > self.window]:
                del self._reported[pid]
            self.last_tick = tick
            # their node and cgroups (what memory_short reads): the processes would be 10 MB at 1000 of them
            self.ticks.append(dataclasses.replace(tick, processes=()))
            for job in [j for j, loc in self._located.items() if tick.time - loc.time > self.window]:
                del self._located[job]  # a job gone for a while (kept until then: its kill is handled later)
            known = dict(self._located)
        located = {}
        jobs = {**tick.jobs(), **{solo_job(pid): [p] for pid, p in loners.items()}}
        for job, members in jobs.items():
            # where the job's output goes and what it runs, found while it runs (a few descriptors and
            # links of its launcher and ranks, again only when those processes change)
            ordered = _log_writers(members)
            writers = frozenset(ordered)
            before = known.get(job)
            if before is not None and before.writers == writers:
                located[job] = _Located(writers, before.files, before.code, tick.time)
                continue
            code = jobcode.locate_code(ordered, self.proc) if self.read_code else None
            near, up = _neighbours(tick, ordered)
            located[job] = _Located(writers, locate_outputs(ordered, self.proc, near, up), code, tick.time)
        with self.lock:
            self._located.update(located)

    def ticks_since(self, since: float) -> list[Tick]:
        """The ticks kept from wall-clock time ``since`` on, newest first (their node and cgroups only)."""
        with self.lock:
            return [t for t in reversed(self.ticks) if t.time >= since]

    def last_sample(self, pid: int) -> ProcessSample | None:
        """The latest sample of a job process seen in the last ``window`` seconds (also a gone one)."""
        with self.lock:
            seen = self.seen.get(pid)
        return seen[1] if seen is not None else None

    def reported(self, pid: int) -> bool:
        """Whether an incident for ``pid`` was started recently (from the kernel's report or the counters)."""
        with self.lock:
            return pid in self._reported

    def _report(self, pid: int) -> None:
        with self.lock:
            self._reported[pid] = time.time()

    def _load_engine(self) -> tuple[Any, Any]:
        if self._engine is None:
            from oomwatch.engine.api import Engine
            from oomwatch.engine.rules.loader import load_rules
            from oomwatch.render.diagnosis import RENDERERS

            # Python's re as the prefilter: a kernel report is ~100 lines, and Hyperscan's database
            # would add ~29 MB to the agent (measured) for no gain at that size.
            self._engine = (Engine(load_rules(()), backend="re"), RENDERERS)
        return self._engine

    def warm(self) -> None:
        """Load the engine now (in a thread of the caller's choosing), so that the first incident is
        written within a second of the kill; ~0.7 s and ~6 MB (measured, with the re prefilter)."""
        with self._engine_lock:
            self._load_engine()

    def on_kill_records(self, pid: int, records: list[KmsgRecord], boot: str | None = None) -> Path | None:
        """An incident from /dev/kmsg records (their clock gives the kill-to-incident latency)."""
        last = records[-1] if records else None
        kill = next((r for r in records if "Killed process" in r.text), last)
        kill_id = kernel_kill_id(self.boot if boot is None else boot, kill.usec, pid) if kill is not None else None
        return self.on_kill(
            pid,
            [r.dmesg_line() for r in records],
            last.seq if last else None,
            last.usec / 1e6 if last else None,
            kill_id=kill_id,
        )

    def on_kill(
        self,
        pid: int,
        lines: list[str],
        seq: int | None = None,
        kernel_time: float | None = None,
        kill_id: str | None = None,
    ) -> Path | None:
        """Write the incident for one kill from its report's lines. ``kernel_time``: the kill line's
        time on the kernel's monotonic clock, when known; ``kill_id``: what makes it this kill (see
        agent.killid; by default the hash of its kill line). Returns the JSON file's path, or None
        while the disk refuses it (it is counted already, and written later: see :meth:`flush`). A
        kill written before (also before a restart) is not written again: its path is returned."""
        self._report(pid)
        kill_id = kill_id or line_kill_id(lines, pid)
        now = time.time()
        with self.lock:
            victim = self.seen.get(pid, (None, None))[1]
        job = victim.job if victim is not None else None
        said = _KILLED_COMM.search("\n".join(line for line in lines if "Killed process" in line))
        comm = victim.comm if victim is not None else (said.group(1) if said else "")
        memcg = any(marker in line for line in lines for marker in _MEMCG)
        pending = self._claim(kill_id, now, pid, victim, job, comm, "cgroup_oom" if memcg else "host_oom")
        if isinstance(pending, Path):
            return pending
        source = "kernel log (/dev/kmsg)" if seq is not None else "kernel log"

        def diagnose() -> tuple[Any, Any, dict[str, Any], list[JobOutput]]:
            with self._engine_lock:
                engine, renderers = self._load_engine()
            scan = engine.scan(source, "\n".join(lines).encode("utf-8", "replace") + b"\n")
            solo = victim is not None and job is None
            diagnosis, history, outputs = self._diagnose(engine, now, job, pid, [scan], solo=solo)
            return diagnosis, renderers, history, outputs

        return self._incident(pending, victim, job, diagnose, lines, seq, kernel_time)

    def _claim(
        self,
        kill_id: str,
        now: float,
        pid: int,
        victim: ProcessSample | None,
        job: str | None,
        comm: str,
        verdict: str,
    ) -> _Pending | Path:
        """Take a kill on: counted and exported at once (its verdict from its kind, its cause not yet
        known) before anything is diagnosed or written; a kill taken on before gives its file's path."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        ident = f"{stamp}-{_SLUG.sub('_', job or 'node')[:60]}-{pid}"
        role = victim.role if victim is not None else "unknown"
        rank = "" if victim is None or victim.rank is None else str(victim.rank)
        key = (job or "", role, rank, comm, verdict, "unknown")
        with self.lock:
            known = self._kills.get(kill_id)
            if known is not None:
                log.info("pid %d: the incident of this kill (%s) is %s already; not written again", pid, kill_id, known)
                return self.dir / f"{known}.json"
            taken = set(self._kills.values())
            base, n = ident, 1
            while ident in taken or (self.dir / f"{ident}.json").exists():
                n += 1  # another kill of this pid (or job) in the same second: a file of its own
                ident = f"{base}-{n}"
            self._kills[kill_id] = ident
            self.counts[key] = self.counts.get(key, 0) + 1
            self.recent.append((now, *key, PENDING_REMEDY, ident))
            self.last_time = now
        return _Pending(kill_id, ident, now, pid, key)

    def _settle(self, pending: _Pending, key: tuple[str, str, str, str, str, str], remedy: str) -> None:
        """The kill's labels, now that it is diagnosed: its count moves from the provisional ones."""
        with self.lock:
            left = self.counts.get(pending.key, 0) - 1
            if left > 0:
                self.counts[pending.key] = left
            else:
                self.counts.pop(pending.key, None)
            self.counts[key] = self.counts.get(key, 0) + 1
            entries = list(self.recent)
            self.recent.clear()
            self.recent.extend(
                (pending.time, *key, remedy, pending.ident) if e[-1] == pending.ident else e for e in entries
            )

    def _incident(
        self,
        pending: _Pending,
        victim: ProcessSample | None,
        job: str | None,
        diagnose: Any,
        lines: list[str],
        seq: int | None,
        kernel_time: float | None,
    ) -> Path | None:
        """Diagnose (``diagnose()`` gives the diagnosis, the renderers, the history and the job output
        read) and write one taken-on kill. A diagnosis that fails still writes the incident, with the
        kernel's lines and what the agent saw, and says why."""
        outcome: list[Any] = []
        done = threading.Event()

        def work() -> None:
            try:
                outcome.append(diagnose())
            except Exception as exc:  # the kill is the record; its diagnosis is a bonus
                log.exception("pid %d: diagnosing the incident failed; writing what is known", pending.pid)
                outcome.append(exc)
            finally:
                done.set()

        # in a thread of its own, with a time budget: a report (or a job's output) that takes too long
        # is abandoned, and the kill written with what is known; the next kill is not kept waiting
        threading.Thread(target=work, name=f"oomwatch-diagnose-{pending.pid}", daemon=True).start()
        if not done.wait(self.diagnose_seconds):
            log.error("pid %d: the diagnosis took longer than %gs: abandoned, writing what is known",
                      pending.pid, self.diagnose_seconds)  # fmt: skip
            late = TimeoutError(f"the diagnosis took longer than {self.diagnose_seconds:g}s and was abandoned")
            return self._write_undiagnosed(pending, victim, job, lines, seq, kernel_time, late)
        if isinstance(outcome[0], Exception):
            return self._write_undiagnosed(pending, victim, job, lines, seq, kernel_time, outcome[0])
        diagnosis, renderers, history, outputs = outcome[0]
        return self._write(pending, victim, job, diagnosis, renderers, history, lines, seq, kernel_time,
                           _what_was_read(outputs))  # fmt: skip

    def _diagnose(
        self,
        engine: Any,
        now: float,
        job: str | None,
        pid: int,
        scans: list[Any],
        observed: Any = None,
        solo: bool = False,
    ) -> tuple[Any, dict[str, Any], list[JobOutput]]:
        """The one diagnosis of an incident: ``scans`` (the kernel's report, if any) with the job's
        output, the roles seen live, the history's analyzers and what the agent ``observed``.
        ``solo``: the victim was a Python process of no job (a single-process trainer, maybe): its own
        output and code are read, and its role is left to the kernel's report."""
        with self.lock:
            known = {p: (s.role, s.rank) for p, (_, s) in self.seen.items() if s.in_job}
        where = solo_job(pid) if solo else job
        outputs = self._job_outputs(where, pid)
        scans = scans + [engine.scan(f"job output {o.path}", o.data) for o in outputs]
        history, rows = self._history(job, pid, now)
        live = analyze(rows.processes, pid, node=rows.node, cgroups=rows.cgroups)
        live = dataclasses.replace(live, programs=programs(self._cgroup_mates(pid), by_job=True))
        program = self._job_code(where)
        diagnosis = engine.diagnose(scans, known=known, live=live, observed=observed, program=program)
        return diagnosis, history, outputs

    def _cgroup_mates(self, pid: int) -> list[ProcessSample]:
        """The processes seen lately in the victim's memory cgroup (jobs' and large Python ones)."""
        with self.lock:
            last, victim = self.seen.get(pid, (0.0, None))
            if victim is None or victim.cgroup is None:
                return []
            # alive with it: a program that ended earlier (a preparation step) did not share the limit
            return [s for t, s in self.seen.values() if s.cgroup == victim.cgroup and t >= last - 1.0]

    def _job_outputs(self, job: str | None, victim: int) -> list[JobOutput]:
        """The job's stdout/stderr files, read through its other processes seen lately, launchers and
        ranks first (their output is the job's log)."""
        if job is None:
            return []
        with self.lock:
            members = [s for _, s in self.seen.values() if s.job == job and s.pid != victim]
            known = self._located[job].files if job in self._located else []
            tick = self.last_tick
        writers = _log_writers(members)
        near, up = _neighbours(tick, writers) if tick is not None else ({}, {})
        return job_outputs(writers, self.proc, known, near, up)

    def _job_code(self, job: str | None) -> Program | None:
        """The code the job runs, as located while it ran, read now."""
        if job is None or not self.read_code:
            return None
        with self.lock:
            ref = self._located[job].code if job in self._located else None
        return jobcode.read_code(ref)

    def _write(
        self,
        pending: _Pending,
        victim: ProcessSample | None,
        job: str | None,
        diagnosis: Any,
        renderers: Any,
        history: dict[str, Any],
        lines: list[str],
        seq: int | None,
        kernel_time: float | None,
        job_output: list[dict[str, Any]] | None = None,
    ) -> Path | None:
        diag_json = json.loads(renderers["json"](diagnosis))
        verdict = diag_json.get("verdict", "")
        comm = victim.comm if victim is not None else (diagnosis.victims[0].name if diagnosis.victims else "") or ""
        named = diagnosis.victims[0] if diagnosis.victims else None
        doc = self._document(pending, victim, job, comm, named, seq, kernel_time)
        doc.update(
            {
                "diagnosis": diag_json,
                # what the live analyzers measured in the history (the history.* facts the cause rules read)
                "analysis": {k: v for k, v in sorted(diagnosis.facts.items()) if k.startswith("history.")},
                "history": history,
                "kernel_lines": lines,
                # the job's stdout/stderr files read into the diagnosis (start and end; see agent.joboutput)
                "job_output": job_output or [],
            }
        )
        cause, remedy = alert_cause(diag_json)
        role = "unknown" if victim is None else victim.role
        rank = "" if victim is None or victim.rank is None else str(victim.rank)
        self._settle(pending, (job or "", role, rank, comm, verdict, cause), remedy)
        path = self._store(pending, doc, render_incident_text(doc, renderers["text"](diagnosis)))
        said_role = role_phrase(victim.role, victim.rank) if victim else ""
        log.warning(
            "%s: pid %d (%s%s%s) [%s]: %s -> %s",
            "OOM kill" if verdict in OOM_VERDICTS else "killed",
            pending.pid,
            comm,
            f", {said_role}" if said_role else "",
            f", job {job}" if job else "",
            verdict,
            diag_json.get("summary", "")[:300],
            path or "not written yet",
        )
        return path

    def _document(
        self,
        pending: _Pending,
        victim: ProcessSample | None,
        job: str | None,
        comm: str,
        named: Victim | None,
        seq: int | None,
        kernel_time: float | None,
    ) -> dict[str, Any]:
        return {
            "schema": INCIDENT_SCHEMA,
            "id": pending.ident,
            "kill_id": pending.kill_id,
            "time": pending.time,
            "kmsg_seq": seq,
            # kmsg timestamps are the kernel's monotonic clock: how long after the kill line this was written
            "latency_seconds": round(time.monotonic() - kernel_time, 3) if kernel_time is not None else None,
            "victim": {
                "pid": pending.pid,
                "comm": comm,
                "job": job,
                # seen live; else what the kernel's report and the names say
                "role": victim.role if victim is not None else (named.role if named else None),
                "rank": victim.rank if victim is not None else (named.rank if named else None),
                "last_sample": asdict(victim) if victim is not None else None,
            },
        }

    def _write_undiagnosed(
        self,
        pending: _Pending,
        victim: ProcessSample | None,
        job: str | None,
        lines: list[str],
        seq: int | None,
        kernel_time: float | None,
        error: BaseException,
    ) -> Path | None:
        """The incident of a kill whose diagnosis failed: the kill, its lines, the victim's last sample."""
        comm, verdict = pending.key[3], pending.key[4]
        doc = self._document(pending, victim, job, comm, None, seq, kernel_time)
        why = str(error) or type(error).__name__
        summary = f"pid {pending.pid} ({comm or 'unknown'}) was killed; no diagnosis: {why}"[:300]
        doc.update(
            {
                "diagnosis": {"verdict": verdict, "confirmed": False, "summary": summary, "causes": [],
                              "cause_determined": False, "error": f"{type(error).__name__}: {error}"[:500]},
                "analysis": {},
                "history": {"source": "not read (the diagnosis failed)", "processes": [], "cgroups": [], "node": []},
                "kernel_lines": lines,
                "job_output": [],
            }
        )  # fmt: skip
        self._settle(pending, pending.key, NO_REMEDY)
        said = "\n".join(wrap(escape_controls(summary), NOT_A_TERMINAL, rest="  "))
        return self._store(pending, doc, render_incident_text(doc, said + "\n"))

    def _store(self, pending: _Pending, doc: dict[str, Any], text: str) -> Path | None:
        """Write the incident's files; when the disk refuses (full, read-only, permission), keep them to
        try again (see :meth:`flush`) and say so."""
        item = _Unwritten(pending.ident, json.dumps(doc, indent=2) + "\n", text)
        try:
            return self._put(item)
        except OSError as exc:
            with self.lock:
                self.write_errors += 1
                self._unwritten.append(item)
                self._retry_at = time.monotonic() + RETRY_SECONDS
                waiting = len(self._unwritten)
            log.error("cannot write the incident %s in %s (%s): %d waiting, trying again every %gs",
                      pending.ident, self.dir, exc.strerror or exc, waiting, RETRY_SECONDS)  # fmt: skip
            return None

    def _put(self, item: _Unwritten) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{item.ident}.json"
        write_atomic(self.dir / f"{item.ident}.txt", item.text)
        write_atomic(path, item.json)  # last: an incident is on disk once its JSON is (its kill_id is in it)
        return path

    def flush(self, force: bool = False) -> list[Path]:
        """Try again to write the incidents the disk refused (every RETRY_SECONDS, or now with
        ``force``); returns the paths written. Called on each tick."""
        with self.lock:
            if not self._unwritten or (not force and time.monotonic() < self._retry_at):
                return []
            waiting = list(self._unwritten)
        written: list[Path] = []
        for item in waiting:
            try:
                written.append(self._put(item))
            except OSError as exc:
                with self.lock:
                    self.write_errors += 1
                    self._retry_at = time.monotonic() + RETRY_SECONDS
                log.debug("incident %s still not written: %s", item.ident, exc)
                break
            with self.lock:
                self._unwritten.remove(item)
            log.warning("incident %s written (it could not be when the kill was seen)", item.ident)
        return written

    @property
    def unwritten(self) -> int:
        """Incidents counted but not yet on disk."""
        with self.lock:
            return len(self._unwritten)

    def durable(self) -> bool:
        """Whether every kill taken on is on disk: a watcher saves its position only then (a restart
        reads again what is not, and the kill ids keep what is from being written twice)."""
        return self.unwritten == 0

    def on_counted_kill(self, victim: ProcessSample, cgroup: str | None, count: int) -> Path | None:
        """An unconfirmed incident from the OOM-kill counters (see :class:`CounterKills`)."""
        self._report(victim.pid)
        observed = Observed(
            facts={"agent.counted_kills": count, "agent.kernel_log": False},
            victims=(
                _sampled_victim(
                    victim,
                    cgroup,
                    f"OOM-kill count of {_where(cgroup)} rose by {count}; pid {victim.pid} vanished in the same sample",
                ),
            ),  # fmt: skip
            values={"where": _where(cgroup), "kills": str(count), "job": str(victim.job), "pid": str(victim.pid)},
            notes=("from the agent's OOM-kill counters and samples, without the kernel's report",),
        )
        return self._agent_incident(victim, observed, "counter", "cgroup_oom")

    def on_sigkill(
        self,
        victims: list[ProcessSample],
        short: str | None,
        died: str,
        notes: tuple[str, ...],
        kernel_time: float | None,
        kernel_log: bool,
    ) -> Path | None:
        """An incident for training processes killed by SIGKILL with no OOM report for them (see
        :mod:`oomwatch.agent.incidents.sigkills`): the first of ``victims`` is the one named; ``short`` says
        what showed memory short just before (None: it was not); ``died`` how the first one died.
        rules/verdicts.yaml decides the verdict from these."""
        first = victims[0]
        others = ""
        if len(victims) > 1:
            rest = ", ".join(f"{v.pid} ({v.comm}, {role_phrase(v.role, v.rank)})" for v in victims[1:6])
            more = f" and {len(victims) - 6} more" if len(victims) > 6 else ""
            n = len(victims) - 1
            others = f" With it, {n} other process{'es' if n > 1 else ''} of its cgroup died of SIGKILL: {rest}{more}."
        observed = Observed(
            facts={"agent.sigkilled": len(victims), "agent.memory_short": short is not None,
                   "agent.kernel_log": kernel_log},
            victims=(_sampled_victim(first, first.cgroup, died),),
            values={"short": short or "", "others": others, "job": str(first.job), "pid": str(first.pid)},
            notes=notes,
        )  # fmt: skip
        verdict = "userspace_oom_kill" if short is not None else "sigkill_unexplained"
        return self._agent_incident(first, observed, "exit", verdict, kernel_time=kernel_time)

    def _agent_incident(
        self, victim: ProcessSample, observed: Observed, kind: str, verdict: str, kernel_time: float | None = None
    ) -> Path | None:
        """An incident with no kernel report to scan: what the agent observed, the job's output, the
        roles seen live and the history, diagnosed by the engine like any other. ``kind`` and
        ``verdict``: what saw it (exit, counter) and what it is counted as until it is diagnosed."""
        now = time.time()
        kill_id = agent_kill_id(kind, self.boot, victim.pid)
        pending = self._claim(kill_id, now, victim.pid, victim, victim.job, victim.comm, verdict)
        if isinstance(pending, Path):
            return pending

        def diagnose() -> tuple[Any, Any, dict[str, Any], list[JobOutput]]:
            with self._engine_lock:
                engine, renderers = self._load_engine()
            diagnosis, history, outputs = self._diagnose(engine, now, victim.job, victim.pid, [], observed)
            return diagnosis, renderers, history, outputs

        return self._incident(pending, victim, victim.job, diagnose, [], None, kernel_time)

    def _history(self, job: str | None, pid: int, now: float) -> tuple[dict[str, Any], _Rows]:
        """(the history put into the incident, the rows for the analyzers)."""
        with self.lock:
            solo = list(self._solo.get(pid, ())) if job is None else []
        if solo:
            source = f"the agent's last {len(solo)} samples of this process (of no job: not in the history store)"
            return {"source": source, "processes": solo, "cgroups": [], "node": []}, _Rows(solo)
        if self.history is None:
            with self.lock:
                last = [asdict(s) for _, s in self.seen.values() if job is not None and s.job == job]
            return {"source": "last samples (no history store)", "processes": last, "cgroups": [], "node": []}, _Rows()
        since = now - self.window
        try:
            procs = (
                self.history.processes(job=job, since=since) if job else self.history.processes(pid=pid, since=since)
            )
            cgroups = self.history.cgroups(since=since)
            node = self.history.node(since=since)
        except Exception as exc:  # the history is evidence, not a requirement
            log.error("reading the history for the incident failed: %s", exc)
            return {"source": f"history unreadable: {exc}", "processes": [], "cgroups": [], "node": []}, _Rows()
        # only the victim's job's cgroups (a victim of no known job: none, rather than every cgroup)
        cgroups = [c for c in cgroups if job and job in (c.jobs or "").split(",")]
        procs = this_run(procs, pid)
        doc = {
            "source": f"history, last {self.window:g} s",
            "processes": [asdict(r) for r in procs],
            "cgroups": [asdict(c) for c in cgroups],
            "node": [asdict(n) for n in node],
        }
        return doc, _Rows(list(procs), list(node), cgroups)


def alert_cause(diagnosis: dict[str, Any]) -> tuple[str, str]:
    """(cause id, one-line remedy) an alert carries: the top cause when it is determined, else
    ``unknown`` and a remedy that says so (never a fix the evidence does not support)."""
    top = (diagnosis.get("causes") or [{}])[0]
    if not diagnosis.get("cause_determined", True) or not top.get("id") or top.get("id") == "unknown":
        return "unknown", NO_REMEDY
    return str(top["id"]), str(top.get("remedy") or NO_REMEDY)


def solo_job(pid: int) -> str:
    """The key under which a Python process of no job keeps its output files and code."""
    return f"solo-{pid}"


def _loners(tick: Tick) -> dict[int, ProcessSample]:
    """Python processes of no job, started by no Python process, that hold LONER_RSS or more: a
    single-process trainer is one (nothing in it says so: no RANK, no workers)."""
    comms = {p.pid: p.comm for p in tick.processes}
    return {
        p.pid: p for p in tick.processes
        if not p.in_job and (p.rss or 0) >= LONER_RSS and _pythonish(p.comm) and not _pythonish(comms.get(p.ppid, ""))
    }  # fmt: skip


def _pythonish(comm: str) -> bool:
    return comm.lower().startswith(PYTHON_PREFIXES)


def _where(cgroup: str | None) -> str:
    return f"cgroup {cgroup}" if cgroup else "the node"


def _sampled_victim(p: ProcessSample, cgroup: str | None, said: str) -> Victim:
    """A victim as the agent sampled it last; its evidence is the agent's own line ``said``."""
    line = f"pid {p.pid} ({p.comm}, {role_phrase(p.role, p.rank)}): {said}"
    return Victim(
        p.pid, p.comm, p.role, p.rank, p.anon, p.file, p.shmem, cgroup, (Evidence("agent", 1, line),), "agent"
    )


def _log_writers(members: list[ProcessSample]) -> list[int]:
    """The processes whose stdout/stderr is the job's log: its launchers and ranks; without those, the
    first few of the rest, parents before workers (workers come and go each epoch)."""
    order = {"launcher": 0, "rank": 1, "unknown": 2}
    ranked = sorted(members, key=lambda s: (order.get(s.role, 3), s.rank or 0, s.pid))
    leading = [s.pid for s in ranked if s.role in ("launcher", "rank")]
    return leading or [s.pid for s in ranked[:4]]


def _what_was_read(outputs: list[JobOutput]) -> list[dict[str, Any]]:
    """The incident's record of the job output files read."""
    return [{"path": o.path, "pid": o.pid, "size": o.size, "read_bytes": len(o.data)} for o in outputs]


@dataclass(frozen=True)
class _Pending:
    """A kill taken on: what it is, the incident it gets, and the labels it is counted under so far."""

    kill_id: str
    ident: str
    time: float
    pid: int
    key: tuple[str, str, str, str, str, str]


@dataclass(frozen=True)
class _Unwritten:
    """An incident's files, rendered, that the disk refused."""

    ident: str
    json: str
    text: str


@dataclass(frozen=True)
class _Located:
    """A job's output files and code, found through ``writers`` (its launchers and ranks) at ``time``."""

    writers: frozenset[int]
    files: list[OutputFile]
    code: jobcode.CodeRef | None
    time: float


def _neighbours(tick: Tick, pids: list[int]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Who may read a pipe each of ``pids`` writes: its ancestors (up to ANCESTORS) and their children
    — a sibling (`python train.py | tee log`), an uncle (`torchrun ... | tee log`: the ranks inherit the
    launcher's pipe), slurmstepd or a container shim above; at most MAX_NEIGHBOURS each. Returned
    with each pid's ancestors."""
    parents = {p.pid: p.ppid for p in tick.processes}
    up: dict[int, list[int]] = {}
    for pid in pids:
        chain: list[int] = []
        at = pid
        while at in parents and len(chain) < ANCESTORS and parents[at] not in chain:
            at = parents[at]
            chain.append(at)
        up[pid] = chain
    wanted = {a for chain in up.values() for a in chain}
    children: dict[int, list[int]] = {a: [] for a in wanted}
    for p in tick.processes:
        kids = children.get(p.ppid)
        if kids is not None and len(kids) < MAX_NEIGHBOURS:
            kids.append(p.pid)
    out = {}
    for pid, chain in up.items():
        near = list(chain)
        for a in chain:
            near.extend(c for c in children[a] if c not in near)
        out[pid] = near[:MAX_NEIGHBOURS]
    return out, up


@dataclass
class _Rows:
    """History rows for the analyzers."""

    processes: list[Any] = field(default_factory=list)
    node: list[Any] = field(default_factory=list)
    cgroups: list[Any] = field(default_factory=list)


OOM_VERDICTS = frozenset({"host_oom", "cgroup_oom"})


def is_oom_kill(doc: dict[str, Any]) -> bool:
    """Whether an incident is the kernel's OOM kill (else a SIGKILL from elsewhere, see agent.sigkills)."""
    return (doc.get("diagnosis") or {}).get("verdict") in OOM_VERDICTS


def render_incident_text(doc: dict[str, Any], diagnosis_text: str, width: int = NOT_A_TERMINAL) -> str:
    """The incident for a person: who was killed when, ``diagnosis_text`` (rendered in ``width``
    columns) and the job's history, every line at most ``width`` columns."""
    v = doc["victim"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["time"]))
    who = f"pid {v['pid']} ({v['comm']}" + (f", {role_phrase(v['role'], v.get('rank'))}" if v.get("role") else "") + ")"
    of_job = f" of job {v['job']}" if v["job"] else ""
    if is_oom_kill(doc):
        said = f"{when}: the kernel killed {who}{of_job}"
    else:
        said = f"{when}: {who}{of_job} was killed by SIGKILL, not by the kernel's OOM killer"
    # comm, job, cgroups and quoted output are the processes' own: each line escaped before the lines
    # are joined (a job named "x\nFAKE" starts no line), and the diagnosis's lines once more
    out = [*wrap(escape_controls(f"oomwatch incident {doc['id']}"), width, quoted=True)]
    out += wrap(escape_controls(said), width, rest="  ")
    out += ["", escape_lines(diagnosis_text.rstrip("\n")), ""]
    out.append(_history_table(doc["history"], width))
    return "\n".join(out).rstrip("\n") + "\n"


def _history_table(history: dict[str, Any], width: int) -> str:
    rows = history.get("processes") or []
    if not rows:
        return "\n".join(wrap(escape_controls(f"History: none ({history.get('source', '')})."), width, rest="  "))
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_pid.setdefault(r["pid"], []).append(r)
    lines = wrap(escape_controls(f"History ({history.get('source', '')}): first → peak → last"), width, rest="  ")
    table_rows = []
    for pid, rs in sorted(by_pid.items()):
        rs.sort(key=lambda r: r.get("time") or 0)
        last = rs[-1]

        def span(key: str, rs: list[dict[str, Any]] = rs) -> str:
            vals: list[int] = [r[key] for r in rs if r.get(key) is not None]
            if not vals:
                return "-"
            return f"{human(vals[0])} → {human(max(vals))} → {human(vals[-1])}"

        rank = "-" if last.get("rank") is None else str(last["rank"])
        table_rows.append([str(pid), escape_controls(str(last.get("role"))), rank, span("anon"), span("uss")])
    lines.extend(table(("PID", "ROLE", "RANK", "ANON", "USS"), table_rows, width, right=(0, 2)))
    return "\n".join(escape_controls(line) for line in lines)


def list_incidents(state_dir: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """The incidents on disk, oldest first. Files that cannot be read or are not incidents of a usable
    shape are left out; ``skipped`` (when given) gets a line for each of ours that was."""
    out = []
    for path in sorted(incident_dir(state_dir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            if skipped is not None:
                skipped.append(f"{path.name}: unreadable ({type(exc).__name__})")
            continue
        if not isinstance(doc, dict) or doc.get("schema") != INCIDENT_SCHEMA:
            continue  # not ours
        problem = incident_problem(doc)
        if problem is None:
            out.append(doc)
        elif skipped is not None:
            skipped.append(f"{path.name}: {problem}")
    return out


def incident_problem(doc: dict[str, Any]) -> str | None:
    """What makes an incident document unusable (its id, time, victim, diagnosis), or None."""
    if not isinstance(doc.get("id"), str):
        return "no id"
    if not isinstance(doc.get("time"), int | float) or isinstance(doc.get("time"), bool):
        return "no time"
    victim, diagnosis = doc.get("victim"), doc.get("diagnosis")
    if not isinstance(victim, dict):
        return "no victim"
    if not isinstance(diagnosis, dict):
        return "no diagnosis"
    causes = diagnosis.get("causes", [])
    if not isinstance(causes, list) or not all(isinstance(c, dict) for c in causes):
        return "malformed causes"
    return None


PENDING_TICKS = 5  # samples to wait for a counted kill's victim to vanish


class CounterKills:
    """Kills seen only by the counters, for when no kernel report can be read (no /dev/kmsg, no log
    file): a job's cgroup's OOM-kill count rose (or the node's, as the job's limited cgroup vanished
    with it), and a training process of that job vanished then or within a few samples. Each becomes
    an unconfirmed incident: the counter says the kernel killed *someone* there; the vanishing says
    who most likely. Kills outside training jobs' cgroups are not guessed at."""

    def __init__(self, incidents: Incidents) -> None:
        self.incidents = incidents
        self._cgroup_kills: dict[str, int] = {}
        self._node_kills: int | None = None
        self._cgroup_jobs: dict[str, tuple[str, ...]] = {}  # limited cgroups of the last sample
        self._pending: list[list[Any]] = []  # [cgroup path, its jobs, kills not yet blamed, samples left]
        self._previous: dict[int, ProcessSample] = {}

    def observe(self, tick: Tick) -> list[Path | None]:
        """The incidents written for this tick's counted kills (None: counted, not on disk yet)."""
        alive = {p.pid for p in tick.processes}
        now_jobs = {p.pid: p for p in tick.processes if p.in_job}
        # vanished from the process table (not merely out of a job: a trainer whose workers died
        # is no longer a job's member, but it is alive)
        gone = [p for pid, p in self._previous.items() if pid not in alive]
        written: list[Path | None] = []
        blamed: set[int] = set()
        explained = 0
        present = {c.path for c in tick.cgroups}
        for c in tick.cgroups:
            before = self._cgroup_kills.get(c.path)
            if before is not None and c.oom_kills is not None and c.oom_kills > before:
                explained += c.oom_kills - before
                # the victim may still be exiting in this sample: wait for it a few samples
                self._pending.append([c.path, c.jobs, c.oom_kills - before, PENDING_TICKS])
        node = tick.node.oom_kills if tick.node is not None else None
        if node is not None and self._node_kills is not None and node - self._node_kills > explained:
            # kills the cgroups present do not explain: the node's, or a cgroup's that is gone already
            vanished = {job: path for path, jobs in self._cgroup_jobs.items() if path not in present for job in jobs}
            # only there: a lone node count cannot tell a kill of ours from one anywhere else on the node
            suspects = [p for p in gone if p.pid not in blamed and vanished.get(p.job or "") is not None]
            for p in suspects[: node - self._node_kills - explained]:
                blamed.add(p.pid)
                path = vanished[p.job or ""]
                written.append(self.incidents.on_counted_kill(p, path, node - self._node_kills - explained))
        for entry in self._pending:
            path, jobs, count, _ = entry
            for p in [p for p in gone if p.job in jobs and p.pid not in blamed][:count]:
                blamed.add(p.pid)
                entry[2] -= 1
                written.append(self.incidents.on_counted_kill(p, path, count))
            entry[3] -= 1
        self._pending = [e for e in self._pending if e[2] > 0 and e[3] > 0]
        if node is not None:
            self._node_kills = node
        self._cgroup_kills.update({c.path: c.oom_kills for c in tick.cgroups if c.oom_kills is not None})
        self._cgroup_jobs = {c.path: c.jobs for c in tick.cgroups if c.effective_limit}
        # keep the last sample of every job process (one that left its job is still a candidate)
        self._previous = {pid: p for pid, p in {**self._previous, **now_jobs}.items() if pid in alive}
        return written
