"""`oomwatch diagnose LOG...`: read logs, say what killed the job and what to change."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from oomwatch.cli.common import FORMATS
from oomwatch.errors import OomwatchError, RulesError
from oomwatch.exitcodes import Exit, for_verdict, gravest
from oomwatch.sources import display_name, input_size, read_chunks
from oomwatch.textsafe import escape_controls

if TYPE_CHECKING:
    from oomwatch.engine.api import Engine
    from oomwatch.engine.diagnosis import Diagnosis
    from oomwatch.engine.model import Program
    from oomwatch.engine.scanner import ScanResult

PROGRESS_MIN_BYTES = 50 << 20


@contextmanager
def _progress(path: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr for big inputs when stderr is a terminal."""
    size = input_size(path)
    if size is None or size < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    with click.progressbar(length=size, label=display_name(path), file=sys.stderr) as bar:
        yield bar.update


@click.command("diagnose")
@click.argument("logs", nargs=-1, required=True, metavar="LOG...")
@click.option(
    "--format", "-f", "fmt",
    type=click.Choice(FORMATS), default="text", show_default=True,
    help="text for a person, json for machines (schema oomwatch.diagnosis/v1), markdown for an issue.",
)  # fmt: skip
@click.option(
    "--rules", "rules_dirs", multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A directory of extra rules (same layout as the built-in rules/); a rule with the "
    "same id or name replaces the built-in one. Repeatable.",
)  # fmt: skip
@click.option(
    "--history", "history_db", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="The agent's history.db: the victims' roles as seen live, and what grew in their job before the "
    "kill, are merged into the diagnosis.",
)  # fmt: skip
@click.option(
    "--script", "scripts", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The training script that ran (repeatable): read, never run, with the modules it imports from its "
    "folder, for the calls behind each cause (keep_in_memory=True, torch.load without mmap...). Without it, "
    "a script the logs name (`train.py FAILED`, a traceback's file) is read when it is here.",
)  # fmt: skip
@click.option(
    "--command", "command", default=None, metavar="CMD",
    help="The command line that ran the job, as one string (`--command 'torchrun --nproc-per-node 8 train.py "
    "--epochs 3'`): its script is read like --script, and its flags decide what the script's options were.",
)  # fmt: skip
@click.option("--no-code", is_flag=True, help="Read no script at all, neither given nor named by the logs.")
@click.option(
    "--each", is_flag=True,
    help="Diagnose every LOG on its own (text: a section per input; json: a list of Diagnoses), instead of "
    "reading them together as one failure. The exit code is the gravest of them.",
)  # fmt: skip
@click.option("--backend", type=click.Choice(["hyperscan", "re2", "re"]), default=None, hidden=True)
def diagnose_cmd(
    logs: tuple[str, ...],
    fmt: str,
    rules_dirs: tuple[Path, ...],
    history_db: Path | None,
    scripts: tuple[Path, ...],
    command: str | None,
    no_code: bool,
    each: bool,
    backend: str | None,
) -> None:
    """Read logs and say whether the job died of memory, which kind, who died, and why.

    LOG is a training or launcher log, a dmesg / journalctl -k / kern.log capture, or
    kubectl / slurm / docker output; `-` reads standard input; gzip is detected (the first
    256 MiB decompressed are read, and a note says when there was more; a gzip cut
    short gives what it held, and a note says so). Give
    several at once (e.g. the launcher's output and the node's dmesg, or the logs of every
    rank and node of a job): they are read together, and a pid named by the launcher is
    linked to the kernel's victim. An input that shares no pid, host, job or time with the
    others and names failures of its own is set aside (the output says which and why);
    --each diagnoses every input on its own. A whole dmesg with older kills of other jobs
    is fine: the diagnosis is about the job's kill, the others are listed apart.

    The training script tells causes apart that logs cannot (keep_in_memory=True,
    torch.load without mmap, a cache filled in __getitem__): give it with --script or
    --command, or let diagnose read the one the logs name (`train.py FAILED`, a
    traceback's file) when it is here. It is parsed, never run, and stays local.

    \b
    Exit codes: 0 no memory failure found, 3 memory failure found, 4 failure that is
    not memory (crash, scheduler kill), 2 bad arguments or unreadable input,
    5 invalid rules, 1 internal error.

    \b
    Example:
      $ oomwatch diagnose torchrun.log dmesg.txt
      HOST OUT OF MEMORY (kernel OOM killer) [host_oom, confirmed]
      ...
      $ kubectl describe pod trainer-0 | oomwatch diagnose --format markdown -
      $ oomwatch diagnose train.log dmesg.txt --command 'torchrun --nproc-per-node 4 train.py'
    """
    from oomwatch.engine.api import Engine
    from oomwatch.render.diagnosis import render, render_each
    from oomwatch.render.layout import output_width
    from oomwatch.rulecache import cache_store, load_rules_cached

    try:
        engine = Engine.load(rules_dirs, backend=backend, loader=load_rules_cached, store=cache_store())
        scans: list[ScanResult] = []
        if sum(1 for p in logs if p == "-") > 1:
            raise OomwatchError("`-` (standard input) can be given only once")
        for path in logs:
            with _progress(path) as update:
                notes: list[str] = []
                scan = engine.scan(display_name(path), read_chunks(path, notes=notes), progress=update)
                scan.notes.extend(notes)
                scans.append(scan)
    except OomwatchError as exc:  # it names the input: a file a job named may hold escapes
        click.echo(f"oomwatch: {escape_controls(str(exc))}", err=True)
        sys.exit(Exit.RULES_INVALID if isinstance(exc, RulesError) else Exit.USAGE)
    try:
        argv = shlex.split(command) if command else []
    except ValueError as exc:
        click.echo(f"oomwatch: --command: {exc}", err=True)
        sys.exit(Exit.USAGE)
    program = None if no_code else _program(scripts, argv, logs, scans)
    if each:
        results = [_one(engine, [scan], history_db, program) for scan in scans]
        click.echo(render_each(results, fmt, output_width(sys.stdout)), nl=False)
        sys.exit(gravest(r.verdict for r in results))
    grouping = engine.group(scans)
    result = _one(engine, [scans[i] for i in grouping.kept], history_db, program)
    if grouping.aside:
        aside = tuple((scans[i].file, why) for i, why in grouping.aside)
        result = dataclasses.replace(result, set_aside=aside)
    click.echo(render(fmt, result, output_width(sys.stdout)), nl=False)
    sys.exit(for_verdict(result.verdict))


def _one(engine: Engine, scans: list[ScanResult], history_db: Path | None, program: Program | None) -> Diagnosis:
    result = engine.diagnose(scans, program=program)
    if history_db is not None:
        result = _with_history(result, scans, engine, history_db, program)
    return result


def _program(
    scripts: tuple[Path, ...], argv: list[str], logs: tuple[str, ...], scans: list[ScanResult]
) -> Program | None:
    """The code that ran: the command's script and the scripts given, else those the logs name that
    exist here (relative to the current directory or to the log's folder)."""
    from oomwatch.scripts import is_file, read_program, script_of, scripts_named

    extra = list(scripts)
    if not extra and script_of(argv) == (None, None):
        texts = [line.text for s in scans for line in (*(s.before_failure or ()), *s.last_lines)]
        folders = [Path.cwd(), *(Path(p).parent for p in logs if p != "-")]
        for named in scripts_named(texts):
            found = next((f / named for f in folders if is_file(f / named)), None)
            if found is not None:
                extra.append(found)
    program = read_program(argv, Path.cwd(), extra)
    return program if program.files else None


def _with_history(
    result: Diagnosis, scans: list[ScanResult], engine: Engine, db: Path, program: Program | None = None
) -> Diagnosis:
    from oomwatch.agent.history.merge import from_history
    from oomwatch.agent.history.reader import open_readonly

    try:
        store = open_readonly(db)
    except OomwatchError as exc:
        click.echo(f"oomwatch: {exc}", err=True)
        sys.exit(Exit.USAGE)
    try:
        pids = [v.pid for v in result.victims if v.pid is not None]
        known, live, note = from_history(store, pids)
    except OomwatchError as exc:  # a damaged page: the log's diagnosis stands, and says why it has no history
        return dataclasses.replace(result, notes=(*result.notes, f"history not used: {exc}"))
    finally:
        store.close()
    merged = engine.diagnose(scans, known=known, live=live, program=program) if known else result
    return dataclasses.replace(merged, notes=(*merged.notes, note))
