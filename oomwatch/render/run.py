"""``oomwatch run``'s own output on stderr: how the command ended, and when it failed the diagnosis and
the memory of its processes as the samples saw them, then the run's notes."""

from __future__ import annotations

from collections.abc import Sequence

from oomwatch.agent.recorder import Recorder, RunResult, exit_status
from oomwatch.engine.sizes import human
from oomwatch.redact import redact_argv
from oomwatch.render.diagnosis import render
from oomwatch.render.layout import NOT_A_TERMINAL, table, wrap
from oomwatch.textsafe import escape_controls


def render_run(result: RunResult, command: Sequence[str], fmt: str, interval: float, width: int) -> str:
    """What ``oomwatch run`` prints on stderr when the command ends (in ``width`` columns; the
    diagnosis in ``fmt``); the command line is shown with secrets-shaped arguments redacted."""
    status = exit_status(result.returncode)
    how = f"was killed by signal {-result.returncode}" if result.returncode < 0 else f"exited with {status}"
    shown = redact_argv(command)
    head = "\n".join(wrap(escape_controls(f"oomwatch run: {shown[0]} {how} after {result.duration:.1f}s"), width,
                          rest="  ", quoted=True))  # fmt: skip
    if result.diagnosis is None:
        out = head + "\n"
    else:
        out = f"\n{head}\n\n" + render(fmt, result.diagnosis, width) + "\n"
        out += render_samples(result.recorder, interval, width)
    for note in result.notes:
        out += "\n".join(wrap(escape_controls(note), width, "note: ", "  ")) + "\n"
    return out


SAMPLES_HEADER = ("PID", "ROLE", "RANK", "COMM", "RSS", "ANON", "USS", "USS GROWTH", "END")


def render_samples(rec: Recorder, interval: float, width: int = NOT_A_TERMINAL) -> str:
    """The processes of the run, parents first, with what the samples saw, in ``width`` columns."""
    if not rec.seen:
        return ""
    title = f"Memory of the command's processes, each at its peak (sampled every {interval:g}s by oomwatch run):"
    lines = wrap(title, width)
    order = sorted(rec.seen.values(), key=lambda s: (s.first_time, s.first.pid))
    rows = []
    for s in order[:60]:
        p = s.last
        growth = "-"
        if s.first_uss is not None and p.uss is not None:
            growth = ("+" if p.uss >= s.first_uss else "-") + human(abs(p.uss - s.first_uss))
        rows.append([str(p.pid), p.role, "-" if p.rank is None else str(p.rank), escape_controls(p.comm),
                     human(s.peak.get("rss")), human(s.peak.get("anon")), human(s.peak.get("uss")), growth,
                     "gone" if s.gone else "alive"])  # fmt: skip
    lines.extend(table(SAMPLES_HEADER, rows, width, right=(0, 2, 4, 5, 6, 7)))
    if len(order) > 60:
        lines.append(f"  ... and {len(order) - 60} more")
    tick = rec.last_tick
    if rec.peak_gpu is not None:
        used, total = rec.peak_gpu
        lines.append(f"GPU memory at its highest: {human(used)} of {human(total)} ({used / total:.0%}).")
    elif tick is not None and not tick.gpus:
        lines.append("GPU memory: not sampled (no NVML on this host).")
    return "\n".join(lines) + "\n"
