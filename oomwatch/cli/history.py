"""``oomwatch history``: what the agent recorded, per process of the training jobs or per cgroup."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from oomwatch.agent.history.reader import HistoryReader, open_readonly
from oomwatch.agent.history.schema import CgroupRow, ProcessRow, StepRow
from oomwatch.errors import InputError
from oomwatch.exitcodes import Exit
from oomwatch.render.history import cgroup_text, history_csv, history_json, process_text, step_text

DEFAULT_STATE_DIR = Path("/var/lib/oomwatch")
HISTORY_FILE = "history.db"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: float, option: str = "--since") -> float:
    """Epoch seconds for ``10m``/``2h``/``1d`` ago, ``now``, or an ISO time (local unless it
    names its zone). Raises ValueError with a message for people."""
    m = _DURATION.match(text)
    if m:
        return now - float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]
    if text.strip().lower() == "now":
        return now
    iso = text.strip()
    if iso.endswith(("Z", "z")):
        iso = iso[:-1] + "+00:00"  # Python 3.10's fromisoformat does not read Z
    try:
        return datetime.fromisoformat(iso).timestamp()  # naive: local time
    except ValueError:
        pass
    raise ValueError(
        f"{option} {text!r}: give a duration ago (30s, 10m, 2h, 1d) "
        "or an ISO time (2024-05-01T09:30, 2024-05-01T07:30Z)"
    )


@click.command("history")
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help=f"The agent's state directory; the history is {HISTORY_FILE} in it.",
)
@click.option("--job", default=None, metavar="JOB", help="Only this training job (its run id, Slurm job or pod uid).")
@click.option("--pid", type=int, default=None, help="Only this process.")
@click.option(
    "--since",
    default=None,
    metavar="WHEN",
    help="From this time on: a duration ago (30s, 10m, 2h, 1d) or an ISO time (local, unless it ends in Z or +HH:MM).",
)
@click.option("--until", default=None, metavar="WHEN", help="Up to this time; same forms as --since.")
@click.option("--cgroups", is_flag=True, help="The jobs' cgroups instead of their processes.")
@click.option(
    "--steps", is_flag=True,
    help="The job's step counters (a progress bar, 'step N loss' lines) as the agent read them from its output "
    "files, instead of its processes; with --job.",
)  # fmt: skip
@click.option(
    "--format", "fmt", type=click.Choice(["text", "csv", "json"]), default="text", show_default=True,
    help="text: a table for people; csv: a header and raw bytes; json: schema oomwatch.history/v1.",
)  # fmt: skip
def history_cmd(
    state_dir: Path,
    job: str | None,
    pid: int | None,
    since: str | None,
    until: str | None,
    cgroups: bool,
    steps: bool,
    fmt: str,
) -> None:
    """Show what the agent recorded about training jobs' memory, after the fact.

    The agent keeps every tick of the last 15 minutes, then the peak of
    each size per 10 s, for a day (bounded to 512 MiB). Reading is safe
    while the agent writes. Rows marked * in the table are 10 s peaks.

    \b
    Examples:
      $ oomwatch history --job 4821 --since 2h
      $ oomwatch history --pid 31337 --since 2024-05-01T09:00 --until 2024-05-01T09:30
      $ oomwatch history --cgroups --since 10m --format json
      $ oomwatch history --job 4821 --steps        # how its training steps went
      $ oomwatch history --since 1d --format csv > history.csv
    """
    now = time.time()
    try:
        if cgroups and pid is not None:
            raise ValueError("--pid does not apply to --cgroups (a cgroup has no pid; use --job)")
        if steps and (cgroups or pid is not None):
            raise ValueError("--steps shows a job's step counters: give --job, not --cgroups or --pid")
        if steps and job is None:
            raise ValueError("--steps needs --job (the step counters are a job's)")
        start = parse_when(since, now, "--since") if since is not None else None
        end = parse_when(until, now, "--until") if until is not None else None
    except ValueError as exc:
        _fail(str(exc))
    path = state_dir / HISTORY_FILE
    try:
        store = open_readonly(path)
    except InputError as exc:
        _fail(str(exc))
    try:
        _show(store, job, pid, start, end, cgroups, steps, fmt)
    except InputError as exc:
        _fail(str(exc))
    finally:
        store.close()


def _show(
    store: HistoryReader, job: str | None, pid: int | None, start: float | None, end: float | None, cgroups: bool,
    steps: bool, fmt: str,
) -> None:  # fmt: skip
    step = float(store.get_meta("coarse_step") or 10.0)
    if steps and job is not None:
        step_rows = store.steps(job=job, since=start, until=end)
        _emit(fmt, "steps", "step counter", step_rows, StepRow, lambda: step_text(step_rows, step))
        return
    if cgroups:
        cg_rows = store.cgroups(since=start, until=end)
        if job is not None:
            cg_rows = [r for r in cg_rows if job in r.jobs.split(",")]
        _emit(fmt, "cgroups", "cgroup", cg_rows, CgroupRow, lambda: cgroup_text(cg_rows, step))
        return
    rows = store.processes(job=job, pid=pid, since=start, until=end)
    _emit(fmt, "processes", "process", rows, ProcessRow, lambda: process_text(rows, step))


def _emit(fmt: str, key: str, kind: str, rows: Sequence[Any], row_type: type[Any], text: Callable[[], str]) -> None:
    """Rows of one kind as json (under ``key``), csv or text; text says so when there are none."""
    if fmt == "json":
        click.echo(history_json(key, rows))
    elif fmt == "csv":
        click.echo(history_csv(rows, row_type), nl=False)
    elif rows:
        click.echo(text(), nl=False)
    else:
        click.echo(f"oomwatch: no {kind} samples recorded for this selection", err=True)


def _fail(message: str) -> NoReturn:
    click.echo(f"oomwatch: {message}", err=True)
    sys.exit(Exit.USAGE)
