"""The live commands: ``oomwatch agent``, ``oomwatch top``, ``oomwatch run`` (``incidents``: cli/incidents.py)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click

from oomwatch.errors import ConfigError
from oomwatch.exitcodes import Exit
from oomwatch.paths import HostPaths

_paths_options = [
    click.option("--proc", "proc_root", type=click.Path(file_okay=False, path_type=Path), default=Path("/proc"),
                 show_default=True, help="Where the host's /proc is (inside a container: the host's, bind-mounted)."),
    click.option("--sys", "sys_root", type=click.Path(file_okay=False, path_type=Path), default=Path("/sys"),
                 show_default=True, help="Where the host's /sys is; cgroups are read under SYS/fs/cgroup."),
]  # fmt: skip


def _with_paths(f):  # type: ignore[no-untyped-def]
    for option in reversed(_paths_options):
        f = option(f)
    return f


def _host_paths(proc_root: Path, sys_root: Path) -> HostPaths:
    return HostPaths(proc=proc_root, sys=sys_root, cgroup=sys_root / "fs" / "cgroup")


@click.command("agent")
@click.option(
    "--listen",
    default=None,
    metavar="ADDR:PORT",
    help="Where to serve /metrics [default: :9797, all interfaces]. e.g. 127.0.0.1:9797, [::1]:9797.",
)
@click.option(
    "--interval",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Seconds between samples [default: 1]; a job's first training steps, as its output shows them, bring "
    "samples of their own.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(readable=False, path_type=Path),  # checked when read: one line, at start and on SIGHUP
    default=None,
    help="A YAML file with listen, interval, pss_budget, top_n, top_workers, web_config, state_dir, kernel_log, "
    "read_code; flags win over it. Re-read on SIGHUP (state_dir and kernel_log: at the next start).",
)
@click.option(
    "--web-config",
    type=click.Path(readable=False, path_type=Path),  # checked when read, like --config
    default=None,
    help="TLS and basic auth for /metrics, in the Prometheus exporters' web config format "
    "(see deploy/web-config.example.yaml).",
)
@click.option(
    "--pss-budget",
    type=float,
    default=None,
    metavar="FRACTION",
    help="CPU spent reading smaps_rollup for PSS/USS, as a fraction of one core [default: 0.05].",
)
@click.option(
    "--top-n",
    type=int,
    default=None,
    help="Per-process series for this many processes outside training jobs, by RSS [default: 20].",
)
@click.option(
    "--top-workers",
    type=int,
    default=None,
    help="Per-process series for this many DataLoader workers (and managers, unknown processes) of each rank, "
    "by USS; the others are counted in their rank's oomwatch_role_* aggregates only [default: 1].",
)
@click.option(
    "--kernel-log", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Where to read the kernel's OOM reports when /dev/kmsg cannot be read: a file (/var/log/kern.log, a "
    "syslog file, `journalctl -k -f` output), or `journal` to run `journalctl -k -f` itself. Without it: "
    "/dev/kmsg, else the journal when it holds kernel messages, else the OOM-kill counters (unconfirmed).",
)  # fmt: skip
@click.option(
    "--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Where the history (history.db), the incidents (incidents/) and the kernel log position are kept "
    "[default: /var/lib/oomwatch].",
)  # fmt: skip
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)
@_with_paths
def agent_cmd(
    listen: str | None,
    interval: float | None,
    config_path: Path | None,
    web_config: Path | None,
    pss_budget: float | None,
    top_n: int | None,
    top_workers: int | None,
    state_dir: Path | None,
    kernel_log: Path | None,
    log_level: str,
    proc_root: Path,
    sys_root: Path,
) -> None:
    """Sample training jobs on this node and serve Prometheus metrics.

    Every interval it reads /proc/PID/status of every process (RSS, anon, file,
    shmem, swap), finds training jobs and their roles (launcher, rank, DataLoader
    worker, manager), reads smaps_rollup (PSS, USS) of job processes on a CPU
    budget, and the jobs' cgroups, the node's memory and PSI, and GPUs (NVML).
    It keeps a history of the jobs' memory in STATE_DIR/history.db and, when
    the kernel OOM-kills a process, writes an incident (who died, what grew,
    why, what to change) to STATE_DIR/incidents/ within a second.

    \b
    Signals: SIGTERM or SIGINT stop it cleanly; SIGHUP re-reads --config.
    Runs without root, and says what it then cannot read (other users' smaps
    and environ need CAP_SYS_PTRACE; see deploy/systemd/).

    \b
    Example:
      $ oomwatch agent --listen 127.0.0.1:9797 --interval 1
      $ curl -s 127.0.0.1:9797/metrics | grep oomwatch_process_uss_bytes
    """
    from oomwatch.agent.daemon import Agent
    from oomwatch.logfmt import EscapingFormatter

    handler = logging.StreamHandler()  # what processes named themselves or printed is escaped in the log
    handler.setFormatter(EscapingFormatter("oomwatch agent: %(levelname)s: %(message)s"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    flags = {"listen": listen, "interval": interval, "web_config": web_config, "pss_budget": pss_budget,
             "top_n": top_n, "top_workers": top_workers, "state_dir": state_dir, "kernel_log": kernel_log}  # fmt: skip
    try:
        agent = Agent(config_path, flags, _host_paths(proc_root, sys_root))
        agent.install_signals()
        agent.run()
    except ConfigError as exc:
        click.echo(f"oomwatch: {exc}", err=True)
        sys.exit(Exit.USAGE)


@click.command("top")
@click.option(
    "--interval",
    type=float,
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between refreshes (with --once: between the two samples taken).",
)
@click.option("--once", is_flag=True, help="Take two samples INTERVAL apart, print once, exit.")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: schema oomwatch.top/v1, one document per refresh.",
)
@click.option(
    "--pss-budget",
    type=float,
    default=0.25,
    show_default=True,
    metavar="FRACTION",
    help="CPU spent reading smaps_rollup (PSS/USS), as a fraction of one core.",
)
@_with_paths
def top_cmd(interval: float, once: bool, fmt: str, pss_budget: float, proc_root: Path, sys_root: Path) -> None:
    """Show training jobs live: job → rank → workers, with RSS, USS, PSS, swap and growth.

    USS (private memory) is what tells the causes apart: a DataLoader worker whose
    RSS is flat while its USS climbs is un-sharing its parent's pages (copy-on-write
    defeat); ranks with similar large USS each hold their own copy of the data.
    Growth per minute is measured over the last minute shown.

    \b
    Example:
      $ oomwatch top
      $ oomwatch top --once --format json | jq '.jobs[].processes[] | {pid, role, uss_bytes}'
    """
    from oomwatch.agent.sample.sampler import Sampler
    from oomwatch.agent.top import History
    from oomwatch.render.top import render_json, render_text

    if interval <= 0 or not 0 <= pss_budget <= 1:
        raise click.BadParameter("--interval must be > 0 and --pss-budget between 0 and 1")
    render = render_json if fmt == "json" else render_text
    sampler = Sampler(_host_paths(proc_root, sys_root), pss_budget=1.0 if once else pss_budget)
    history = History()
    logging.getLogger("oomwatch.agent").setLevel(logging.ERROR)  # notices are shown in the view instead
    live = not once and sys.stdout.isatty()
    try:
        history.add(sampler.tick())
        while True:
            time.sleep(interval)
            tick = sampler.tick()
            history.add(tick)
            out = render(tick, history, sampler.notices.all)
            if live:
                out = "\x1b[H\x1b[2J" + out
            click.echo(out, nl=False)
            if once:
                break
    except KeyboardInterrupt:
        pass
    finally:
        sampler.close()


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD...")
@click.option(
    "--interval",
    type=float,
    default=0.2,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between samples of the command's process tree (and a sample at each of its first training "
    "steps, as its step counter prints them: what it holds once warm, however fast it steps).",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["text", "json", "markdown"]),
    default="text",
    show_default=True,
    help="How to print the diagnosis when the command fails.",
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the diagnosis and the samples as JSON to this file: a new file is readable by you "
    "only (0600), an existing one keeps its mode. Secrets-shaped arguments are redacted in it.",
)
@click.option(
    "--no-capture",
    is_flag=True,
    help="Leave the command's stdout/stderr alone (no copy kept); its output is then not part of the "
    "diagnosis, and no step counter is read from it.",
)
@click.option(
    "--tty/--no-tty",
    "terminal",
    default=None,
    help="Give the command a terminal (a pseudo-terminal) for its stdout and stderr, or pipes. Default: a "
    "terminal where oomwatch's own stream is one, so the command behaves as it would unwrapped (live progress "
    "bars, Python's print line by line). --tty also when writing to a file: bars that draw only on a terminal "
    "(Lightning's rich bar) then show each step, which the step counter reads (their frames, with their "
    "escape codes, go to the file).",
)
@click.option(
    "--pss-budget",
    type=float,
    default=0.2,
    show_default=True,
    metavar="FRACTION",
    help="CPU spent reading smaps_rollup (USS/PSS) of the command's processes, fraction of a core.",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="Print nothing of oomwatch's own (the command's output still passes through): for wrappers and CI, "
    "with --report for the diagnosis.",
)
@click.option(
    "--no-code",
    is_flag=True,
    help="Do not read the script the command runs. By default it is read (never run, never sent "
    "anywhere), with the modules it imports from its folder, for the calls behind each cause "
    "(keep_in_memory=True, torch.load without mmap, a Manager().dict() cache...).",
)
def run_cmd(
    command: tuple[str, ...],
    interval: float,
    fmt: str,
    report: Path | None,
    no_capture: bool,
    terminal: bool | None,
    pss_budget: float,
    quiet: bool,
    no_code: bool,
) -> None:
    """Run a command, watch its memory, and say why it died if it does.

    Samples the whole process tree (ranks, DataLoader workers, managers) every
    INTERVAL, passes stdout/stderr through, and exits with the command's exit code
    (128+N when a signal N killed it, as a shell does). When the command fails, or
    the kernel OOM-killed one of its processes, prints the diagnosis to stderr:
    its output, the kernel's reports for its pids (from /dev/kmsg, when readable)
    and what the samples saw (peak RSS, anon, USS per process).

    The command line is shown with secrets-shaped arguments redacted
    (--api-key=<redacted>, --token <redacted>, HF_TOKEN=<redacted>, Authorization: <redacted>).

    \b
    Example:
      $ oomwatch run -- torchrun --nproc_per_node 8 train.py
      $ oomwatch run --report oom.json -- python train.py --epochs 3
    """
    from oomwatch.agent.recorder import exit_status
    from oomwatch.agent.run import run_command
    from oomwatch.render.layout import output_width
    from oomwatch.render.run import render_run
    from oomwatch.render.run_report import run_report
    from oomwatch.sharedfile import write_for_people

    if interval <= 0:
        raise click.BadParameter("--interval must be > 0")
    logging.getLogger("oomwatch.agent").setLevel(logging.ERROR)
    try:
        result = run_command(
            command,
            interval=interval,
            pss_budget=pss_budget,
            capture=not no_capture,
            read_code=not no_code,
            terminal=terminal,
        )
    except FileNotFoundError as exc:
        click.echo(f"oomwatch: {exc}", err=True)
        sys.exit(127)
    if not quiet:
        click.echo(render_run(result, command, fmt, interval, output_width(sys.stderr)), nl=False, err=True)
    if report is not None:
        write_for_people(report, run_report(result, command))
    sys.exit(exit_status(result.returncode))
