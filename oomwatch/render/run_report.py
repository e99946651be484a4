"""``oomwatch run --report FILE``: the run as one JSON document (the command, redacted; how it ended; the
diagnosis; the kernel's lines; each process seen with its peaks; and the samples of every process and of the
job's memory cgroup over the run, the input of ``oomwatch estimate``), for a machine or a later reader."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from oomwatch.agent.recorder import RunResult, exit_status
from oomwatch.redact import redact_argv
from oomwatch.render.diagnosis import RENDERERS

PROGRESS_POINTS = 500  # a step counter's points kept in the report, evenly


def _progress(result: RunResult) -> dict[str, object] | None:
    """The training loop's step counter, as its output showed it: (time, steps done) points, thinned evenly."""
    p = result.progress
    if p is None:
        return None
    points = list(p.points)
    if len(points) > PROGRESS_POINTS:
        keep = {round(i * (len(points) - 1) / (PROGRESS_POINTS - 1)) for i in range(PROGRESS_POINTS)}
        points = [pt for i, pt in enumerate(points) if i in keep]
    rate = p.rate()
    return {"rule": p.rule, "total": p.total, "restarts": p.restarts,
            "steps_per_second": None if rate is None else round(rate, 4),
            "points": [[round(t, 3), n] for t, n in points]}  # fmt: skip


def run_report(result: RunResult, command: Sequence[str]) -> str:
    """The report of the run of ``command`` (secrets-shaped arguments redacted), as JSON text."""
    doc = {
        "command": redact_argv(command),
        "returncode": result.returncode,
        "exit_status": exit_status(result.returncode),
        "duration_seconds": round(result.duration, 3),
        # oomwatch's own process: inside the job's cgroup it is in the kernel's task table too, no part of the job
        "oomwatch_pid": os.getpid(),
        "diagnosis": json.loads(RENDERERS["json"](result.diagnosis)) if result.diagnosis else None,
        "kernel_lines": result.kernel_lines,
        "processes": [
            {
                "pid": pid,
                "role": s.last.role,
                "rank": s.last.rank,
                "comm": s.last.comm,
                "gone": s.gone,
                "peak": s.peak,
                "first_uss_bytes": s.first_uss,
                "last_uss_bytes": s.last.uss,
            }
            for pid, s in sorted(result.recorder.seen.items())
        ],
        "notes": result.notes,
        "progress": _progress(result),
    }
    text = json.dumps(doc, indent=2)
    # the samples, compact (thousands of points): still one JSON document
    samples = json.dumps(result.recorder.samples(), separators=(",", ":"))
    return f'{text[:-2]},\n  "samples": {samples}\n}}\n'
