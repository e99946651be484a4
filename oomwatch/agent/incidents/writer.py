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
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomwatch.agent.analyze.job import analyze, programs
from oomwatch.agent.incidents.gather import WINDOW, Gatherer, solo_job
from oomwatch.agent.incidents.joboutput import JobOutput
from oomwatch.agent.incidents.ledger import NO_REMEDY, Ledger, Pending, alert_cause
from oomwatch.agent.incidents.listing import INCIDENT_SCHEMA
from oomwatch.agent.tick import ProcessSample
from oomwatch.agent.watch.killid import agent_kill_id, boot_id, kernel_kill_id, line_kill_id
from oomwatch.engine.model import Evidence, Observed, Victim
from oomwatch.engine.roles import role_phrase
from oomwatch.engine.verdicts import OOM_KILL_VERDICTS
from oomwatch.procfs.kmsg import KmsgRecord
from oomwatch.render.incident_text import render_incident_text, summary_text

if TYPE_CHECKING:
    from oomwatch.agent.history.store import HistoryStore

log = logging.getLogger("oomwatch.agent")

DIAGNOSE_SECONDS = 20.0  # an incident's diagnosis abandoned after this (the kill written with what is known)
_KILLED_COMM = re.compile(r"Killed process \d+ \(([^)\n]{0,64})\)")
_MEMCG = ("Memory cgroup out of memory", "CONSTRAINT_MEMCG", "memory: usage ")


class Incidents(Gatherer, Ledger):
    """One incident per kill: from the kernel's report (``on_kill``), a SIGKILL (``on_sigkill``) or the
    counters (``on_counted_kill``), diagnosed by the engine with what was gathered (see Gatherer),
    taken on and written once (see Ledger)."""

    def __init__(
        self,
        state_dir: Path,
        history: HistoryStore | None = None,
        window: float = WINDOW,
        proc: Path = Path("/proc"),
        read_code: bool = True,
    ) -> None:
        self.lock = threading.Lock()  # on_kill runs in the kmsg thread, observe in the sampler's
        Gatherer.__init__(self, proc, history, window, read_code)
        Ledger.__init__(self, state_dir)
        self.boot = boot_id(proc)
        self.diagnose_seconds = DIAGNOSE_SECONDS
        self._engine: tuple[Any, Any] | None = None
        self._engine_lock = threading.Lock()  # loading it takes ~0.7 s: never under the samples' lock

    def _load_engine(self) -> tuple[Any, Any]:
        if self._engine is None:
            from oomwatch.engine.api import Engine
            from oomwatch.engine.rules.loader import load_rules
            from oomwatch.render.diagnosis import RENDERERS

            # Python's re as the prefilter: a kernel report is ~100 lines, and Hyperscan's database
            # would add ~29 MB to the agent (measured) for no gain at that size.
            self._engine = (Engine(load_rules(()), backend="re"), RENDERERS)
        return self._engine

    def step_rules(self) -> Any:
        """The step counter rules once the engine is loaded (``warm``), else None: never waits for it."""
        engine = self._engine
        return engine[0].rules.steps if engine is not None else None

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
        verdict = "cgroup_oom" if memcg else "host_oom"
        pending = self._claim(kill_id, now, pid, victim, job, comm, verdict, report=True)
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

    def _incident(
        self,
        pending: Pending,
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
        live = analyze(rows.processes, pid, node=rows.node, cgroups=rows.cgroups, steps=rows.steps)
        live = dataclasses.replace(live, programs=programs(self._cgroup_mates(pid), by_job=True))
        program = self._job_code(where)
        diagnosis = engine.diagnose(scans, known=known, live=live, observed=observed, program=program)
        return diagnosis, history, outputs

    def _write(
        self,
        pending: Pending,
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
            "OOM kill" if verdict in OOM_KILL_VERDICTS else "killed",
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
        pending: Pending,
        victim: ProcessSample | None,
        job: str | None,
        comm: str,
        named: Victim | None,
        seq: int | None,
        kernel_time: float | None,
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
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
        if pending.replaces is not None:
            # the kernel's report came after the SIGKILL incident this file held: this is that kill
            doc["replaces"] = pending.replaces
        return doc

    def _write_undiagnosed(
        self,
        pending: Pending,
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
        return self._store(pending, doc, render_incident_text(doc, summary_text(summary)))

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
        kill_id = agent_kill_id(kind, self.boot, victim.pid, victim.start_time)
        sigkill = kind == "exit"
        pending = self._claim(kill_id, now, victim.pid, victim, victim.job, victim.comm, verdict, sigkill=sigkill)
        if isinstance(pending, Path):
            return pending

        def diagnose() -> tuple[Any, Any, dict[str, Any], list[JobOutput]]:
            with self._engine_lock:
                engine, renderers = self._load_engine()
            diagnosis, history, outputs = self._diagnose(engine, now, victim.job, victim.pid, [], observed)
            return diagnosis, renderers, history, outputs

        return self._incident(pending, victim, victim.job, diagnose, [], None, kernel_time)


def _where(cgroup: str | None) -> str:
    return f"cgroup {cgroup}" if cgroup else "the node"


def _sampled_victim(p: ProcessSample, cgroup: str | None, said: str) -> Victim:
    """A victim as the agent sampled it last; its evidence is the agent's own line ``said``."""
    line = f"pid {p.pid} ({p.comm}, {role_phrase(p.role, p.rank)}): {said}"
    return Victim(
        p.pid, p.comm, p.role, p.rank, p.anon, p.file, p.shmem, cgroup, (Evidence("agent", 1, line),), "agent"
    )


def _what_was_read(outputs: list[JobOutput]) -> list[dict[str, Any]]:
    """The incident's record of the job output files read."""
    return [{"path": o.path, "pid": o.pid, "size": o.size, "read_bytes": len(o.data)} for o in outputs]
