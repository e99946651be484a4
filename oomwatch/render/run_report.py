"""``oomwatch run --report FILE``: the run as one JSON document (the command, redacted; how it ended; the
diagnosis; the kernel's lines; each process seen with its peaks; and the samples of every process and of the
job's memory cgroup over the run, the input of ``oomwatch estimate``), for a machine or a later reader."""

from __future__ import annotations

import json
from collections.abc import Sequence

from oomwatch.agent.recorder import RunResult, exit_status
from oomwatch.redact import redact_argv
from oomwatch.render.diagnosis import RENDERERS


def run_report(result: RunResult, command: Sequence[str]) -> str:
    """The report of the run of ``command`` (secrets-shaped arguments redacted), as JSON text."""
    doc = {
        "command": redact_argv(command),
        "returncode": result.returncode,
        "exit_status": exit_status(result.returncode),
        "duration_seconds": round(result.duration, 3),
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
    }
    text = json.dumps(doc, indent=2)
    # the samples, compact (thousands of points): still one JSON document
    samples = json.dumps(result.recorder.samples(), separators=(",", ":"))
    return f'{text[:-2]},\n  "samples": {samples}\n}}\n'
