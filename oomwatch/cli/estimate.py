"""``oomwatch estimate``: how much host memory the job needs at another scale, and with each fix."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from oomwatch.engine.sizes import parse_size
from oomwatch.exitcodes import Exit

FORMATS = ("text", "json", "markdown")


def _size(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    value = parse_size(text, "b")
    if value is None or value <= 0:
        raise click.BadParameter(f"{text!r} is not a size (e.g. 500G, 1500M)", param_hint=what)
    return value


def _seconds(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    body, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1.0)
    try:
        value = float(body) * unit
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 90s, 5m, 2h)", param_hint=what) from None
    if not value > 0:
        raise click.BadParameter("must be more than 0", param_hint=what)
    return value


def _fail(message: str) -> NoReturn:
    click.echo(f"oomwatch: {message}", err=True)
    sys.exit(Exit.USAGE)


@click.command("estimate", context_settings={"ignore_unknown_options": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--report",
    "report",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A run recorded with `oomwatch run --report FILE` (or a probe's --save).",
)
@click.option(
    "--job",
    metavar="JOB",
    help="A job the agent recorded: its samples are read from the agent's history (see --state-dir).",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/var/lib/oomwatch"),
    show_default=True,
    help="With --job: the agent's state directory (history.db is in it).",
)
@click.option(
    "--probe",
    metavar="DURATION",
    help="Run COMMAND (after --) under oomwatch run for this long (90s, 5m), then stop it and estimate "
    "from what it used; a command that ends sooner is measured whole. Its output is shown on stderr.",
)
@click.option(
    "--tty/--no-tty",
    "terminal",
    default=None,
    help="With --probe: give the command a terminal for its output, or pipes (default: a terminal where "
    "stderr is one). Bars that draw only on a terminal (Lightning's rich bar) then show each step.",
)
@click.option(
    "--save",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --probe: also write the probe's run report here, to estimate from again later.",
)
@click.option("--ranks", type=click.IntRange(min=1), help="Ranks of the full job (default: as measured).")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    help="DataLoader workers per rank, alive at once: a loader's num_workers (a validation loader that runs "
    "after the training one adds none). Default: as measured.",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Nodes the ranks are spread over (the estimate is per node).",
)
@click.option(
    "--limit",
    metavar="SIZE",
    help="The node's or job's memory limit (500G, 1500M): does it fit? "
    "(fits; may not fit: its interval reaches the limit; does NOT fit; cannot tell: it still grew "
    "where the samples end and no training step was counted)",
)
@click.option(
    "--duration",
    metavar="DURATION",
    help="How long the full run is (2h): memory still growing at the end of the measured run is extended to it.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    help="How many training steps the full run takes: its length at the rate the measured run's steps ran at, "
    "read from its output (a progress bar, or lines such as 'step 120 loss 2.31'; with --job, as the agent read "
    "them from the job's output files while it ran). The time to the limit is then also a step.",
)
@click.option(
    "--fix",
    "fixes",
    multiple=True,
    metavar="CAUSE",
    help="Also say what this cause's fix would need (keep_in_memory_duplication, checkpoint_load_duplication, "
    "per_rank_copy, cow_refcount_defeat, unbounded_cache, manager_cache, pin_memory_prefetch). The causes the "
    "run's diagnosis named are always included; a run that did not fail: the mechanisms its samples show.",
)
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
def estimate_cmd(
    command: tuple[str, ...], report: Path | None, job: str | None, state_dir: Path, probe: str | None,
    terminal: bool | None, save: Path | None, ranks: int | None,
    workers: int | None, nodes: int, limit: str | None, duration: str | None, steps: int | None,
    fixes: tuple[str, ...], fmt: str,
) -> None:  # fmt: skip
    """Estimate the host memory a job needs at full scale, and with each fix.

    From a recorded run (--report, written by `oomwatch run --report`) or a short
    probe (--probe 90s -- COMMAND...), oomwatch models each role of the job: what a
    launcher, a rank, a DataLoader worker and a manager hold privately (USS), what
    each loaded and how it grows; and what the node holds once (pages the processes
    share, the page cache their files fill). It then projects the model to --ranks,
    --workers and --nodes: the memory one node needs that cannot be reclaimed (what
    decides an OOM kill), with an interval, the share by role, and whether it fits
    --limit; and what the fixes of the mechanisms the run showed would make of it
    (memory-mapped data instead of keep_in_memory=True copies, numpy storage instead
    of Python objects, a bounded cache).

    It assumes each rank and worker at the larger scale does what one did here (the
    same data, batch and model); more data or longer sequences are not seen, and it
    says so. Measure at a scale that already shows the mechanism: 2 ranks show a
    per-rank copy, 1 worker shows copy-on-write growth.

    \b
    Examples:
      $ oomwatch run --report r.json -- torchrun --nproc-per-node 2 train.py
      $ oomwatch estimate --report r.json --ranks 8 --workers 6 --limit 500G
      $ oomwatch estimate --probe 90s --ranks 4 --limit 1500M -- torchrun --nproc-per-node 2 train.py
      $ oomwatch estimate --report r.json --steps 20000 --limit 500G   # a run that grows
    """
    from oomwatch.estimate.inputs import EstimateInputError, from_report

    if sum(x is not None for x in (report, job, probe)) != 1:
        _fail(
            "give a recorded run (--report FILE, or --job JOB from the agent's history) or a probe "
            "(--probe 90s -- COMMAND...), one of them"
        )
    if probe is None and command:
        _fail(f"a command ({command[0]}) is only run with --probe")
    if save is not None and probe is None:
        _fail("--save goes with --probe")
    if terminal is not None and probe is None:
        _fail(f"--{'' if terminal else 'no-'}tty goes with --probe")
    if steps is not None and duration is not None:
        _fail("give the full run's length once: --duration or --steps")
    limit_bytes = _size(limit, "--limit")
    seconds = _seconds(duration, "--duration")
    try:
        if job is not None:
            recorded = _from_history(state_dir, job)
        elif report is not None:
            recorded = from_report(_read_report(report), str(report))
        else:
            probed = _probe(command, _seconds(probe, "--probe") or 0.0, save, terminal)
            recorded = from_report(probed, f"a {probe} probe")
    except EstimateInputError as exc:
        _fail(str(exc))
    click.echo(_answer(recorded, ranks, workers, nodes, limit_bytes, seconds, steps, fixes, fmt), nl=False)


def _read_report(path: Path) -> dict[str, Any]:
    from oomwatch.engine.readlimit import read_text_limited

    try:
        doc = json.loads(read_text_limited(path, 256 << 20))
    except (OSError, ValueError) as exc:
        _fail(f"cannot read {path}: {exc}")
    if not isinstance(doc, dict):
        _fail(f"{path} is not a run report (not a JSON object)")
    return doc


def _from_history(state_dir: Path, job: str) -> Any:
    from oomwatch.agent.history.reader import open_readonly
    from oomwatch.errors import InputError
    from oomwatch.estimate.inputs import from_history

    try:
        store = open_readonly(state_dir / "history.db")
    except InputError as exc:
        _fail(str(exc))
    try:
        rows = store.processes(job=job)
        # the job's own memory cgroup: the one every sampled process of it was in, holding no other job
        cgroups = [c for c in store.cgroups() if c.jobs == job]
        by_path: dict[str, list[Any]] = {}
        for c in cgroups:
            by_path.setdefault(c.path, []).append(c)
        own = next(iter(by_path.values())) if len(by_path) == 1 else []
        steps = store.steps(job=job)  # its step counter, as the agent read it from the job's output
        return from_history(rows, own, f"job {job} in {state_dir / 'history.db'}", steps)
    except InputError as exc:
        _fail(str(exc))
    finally:
        store.close()


def _probe(command: tuple[str, ...], seconds: float, save: Path | None, terminal: bool | None) -> dict[str, Any]:
    from oomwatch.agent.run import run_command
    from oomwatch.render.run_report import run_report
    from oomwatch.sharedfile import write_for_people

    if not command:
        _fail("--probe needs the command to run, after --")
    logging.getLogger("oomwatch.agent").setLevel(logging.ERROR)
    try:
        # the command's own output goes to stderr: stdout holds the estimate alone (JSON a program reads)
        result = run_command(command, stop_after=seconds, stdout=sys.stderr.buffer, terminal=terminal)
    except FileNotFoundError as exc:
        click.echo(f"oomwatch: {exc}", err=True)
        sys.exit(127)
    text = run_report(result, command)
    if save is not None:
        write_for_people(save, text)
    doc: dict[str, Any] = json.loads(text)
    return doc


def _answer(recorded: Any, ranks: int | None, workers: int | None, nodes: int, limit: int | None,
            seconds: float | None, steps: int | None, fixes: tuple[str, ...], fmt: str) -> str:  # fmt: skip
    from oomwatch.estimate.fixes import FIXES, fixed_models, seen_mechanisms
    from oomwatch.estimate.model import build
    from oomwatch.estimate.project import Scale, WhatIf, project
    from oomwatch.estimate.steps import clock
    from oomwatch.render import estimate as render
    from oomwatch.render.layout import output_width

    unknown = [f for f in fixes if f not in FIXES]
    if unknown:
        _fail(f"--fix {unknown[0]}: no fix modelled for it (one of: {', '.join(FIXES)})")
    ticks = clock(recorded.progress, recorded.started)
    model = build(recorded.traces, recorded.job, ticks)
    if steps is not None:
        shown = recorded.progress
        if ticks is None and shown is not None and len(shown.points) >= 2:
            (t0, n0), (t1, n1) = shown.points[0], shown.points[-1]
            _fail(
                f"--steps: {recorded.source} shows its step counter only from step {n0} to {n1} in {t1 - t0:.1f} s, "
                "too few or too close together to time (3 readings over 1 s at least): measure longer, or give the "
                "full run's length with --duration"
            )
        if ticks is None:
            _fail(
                f"--steps: {recorded.source} shows no training step counter that rose (a progress bar, or lines "
                "such as 'step 120 loss 2.31', in the run's output; the agent reads a job's from its output files, "
                "not from a terminal): give the full run's length with --duration"
            )
        seconds = ticks.seconds_at(steps)
    scale = Scale(
        ranks=ranks or model.ranks,
        workers=workers if workers is not None else round(model.workers_per_rank),
        nodes=nodes,
        seconds=seconds,
        steps=steps,
    )
    projection = project(model, scale, limit, ticks)
    what_ifs = [
        WhatIf(cause, change, project(fixed, scale, limit, ticks), assumption)
        for cause, change, fixed, assumption in fixed_models(
            model, (*(recorded.causes or seen_mechanisms(model)), *fixes)
        )
    ]
    if fmt == "json":
        return render.render_json(model, projection, what_ifs, recorded.source, ticks)
    if fmt == "markdown":
        return render.render_markdown(model, projection, what_ifs, recorded.source, ticks)
    return render.render_text(model, projection, what_ifs, recorded.source, output_width(sys.stdout), ticks)
