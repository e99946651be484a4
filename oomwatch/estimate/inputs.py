"""What a model is built from: a run report (``oomwatch run --report``, a probe), or rows read from the
agent's history. Values in (parsed JSON, rows), a ``Recorded`` out; files are opened by the command."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oomwatch.engine.progress import Count, Progress, assemble
from oomwatch.estimate.model import JobPoint, Point, Trace, traces_from_rows


class EstimateInputError(ValueError):
    """A document or history that holds no samples to model."""


@dataclass(frozen=True)
class Recorded:
    traces: list[Trace]
    job: list[JobPoint]
    causes: tuple[str, ...]  # cause ids the run's diagnosis named, most likely first
    source: str  # what it came from, in words
    ended: str | None = None  # how the run ended, when known ("exit 0", "killed by SIGKILL", "stopped")
    limit: int | None = None  # the job cgroup's limit during the run, when it had one
    progress: Progress | None = None  # the training loop's step counter its output showed, when it had one

    @property
    def started(self) -> float:
        """The time of the run's first sample."""
        return min((p.time for t in self.traces for p in t.points), default=0.0)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_report(doc: Mapping[str, Any], source: str) -> Recorded:
    """A run report's samples (``samples.processes``, ``samples.cgroup``) and its diagnosis's causes."""
    samples = doc.get("samples")
    if not isinstance(samples, Mapping) or not isinstance(samples.get("processes"), list):
        raise EstimateInputError(
            f"{source} has no samples: write it with this oomwatch's `run --report` (older reports lack them)"
        )
    traces = []
    for proc in samples["processes"]:
        if not isinstance(proc, Mapping) or not isinstance(proc.get("pid"), int):
            continue
        trace = Trace(
            proc["pid"], str(proc.get("role") or "unknown"), _int(proc.get("rank")), str(proc.get("comm") or "")
        )
        for pt in proc.get("points") or ():
            if isinstance(pt, list) and len(pt) >= 6 and isinstance(pt[0], (int, float)):
                rchar = _int(pt[6]) if len(pt) >= 7 else None
                top = _int(pt[7]) if len(pt) >= 8 else None  # reports before the 20 ms readings lack it
                uss, pss, rss, anon, shmem = (_int(v) for v in pt[1:6])
                trace.points.append(Point(float(pt[0]), uss, pss, rss, anon, shmem, rchar, top))
        if trace.points:
            traces.append(trace)
    if not traces:
        raise EstimateInputError(f"{source} holds no process samples (the run ended before the first sample?)")
    job: list[JobPoint] = []
    limit = None
    cgroup = samples.get("cgroup")
    if isinstance(cgroup, Mapping):
        for pt in cgroup.get("points") or ():
            if isinstance(pt, list) and len(pt) >= 6 and isinstance(pt[0], (int, float)):
                top = _int(pt[6]) if len(pt) >= 7 else None
                job.append(JobPoint(float(pt[0]), _int(pt[1]), _int(pt[2]), _int(pt[3]), _int(pt[4]), top))
                limit = _int(pt[5]) or limit
    found = doc.get("diagnosis")
    diagnosis: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    causes = tuple(str(c["id"]) for c in diagnosis.get("causes") or () if isinstance(c, Mapping) and "id" in c)
    rc = doc.get("returncode")
    ended = None
    if isinstance(rc, int):
        ended = f"exit {rc}" if rc >= 0 else f"killed by signal {-rc}"
    return Recorded(traces, job, causes, source, ended, limit, _progress(doc.get("progress")))


def _progress(raw: Any) -> Progress | None:
    """A run report's ``progress`` (the step counter: ``points`` of [time, steps done]), when it holds one."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("points"), list):
        return None
    points = sorted(
        (float(pt[0]), int(pt[1]))
        for pt in raw["points"]
        if isinstance(pt, list) and len(pt) == 2 and isinstance(pt[0], (int, float)) and _int(pt[1]) is not None
    )
    if not points:
        return None
    return Progress(tuple(points), _int(raw.get("total")), str(raw.get("rule") or ""), _int(raw.get("restarts")) or 0)


def from_history(
    rows: Iterable[Any], cgroup_rows: Iterable[Any], source: str, step_rows: Iterable[Any] = ()
) -> Recorded:
    """The agent's history rows of one job (``history.schema.ProcessRow``), of its cgroup (``CgroupRow``) and of
    its step counters (``StepRow``: what its output showed, read by the agent as it ran)."""
    fields = ("time", "pid", "role", "rank", "comm", "uss", "pss", "rss", "anon", "shmem", "rchar", "anon_peak")
    traces = traces_from_rows({f: getattr(r, f, None) for f in fields} for r in rows)
    if not traces:
        raise EstimateInputError(f"{source}: no samples of this job")
    job = [
        JobPoint(float(c.time), c.usage, c.anon, c.shmem, c.file, getattr(c, "unreclaimable_peak", None))
        for c in cgroup_rows
    ]
    steps = assemble(Count(float(r.time), r.rule, r.name, r.total, int(r.step)) for r in step_rows)
    return Recorded(traces, job, (), source, progress=steps)
