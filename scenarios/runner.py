"""Run one scenario inside a fresh memory cgroup and capture what a user would have.

1. Build the scenario's data (if any) outside the cgroup, cached between runs.
2. Create a child of our own v1 memory cgroup with the limit; note the last ``/dev/kmsg``
   sequence number.
3. Start ``bash -c 'COMMAND'`` (as a user's shell would run the training command, so a
   SIGKILLed foreground process is reported as ``Killed``) with ``preexec_fn`` writing the
   child's pid into ``cgroup.procs``: the whole process tree (launcher, ranks, DataLoader
   workers, manager) is confined. stdout and stderr go to one file, interleaved.
4. While it runs, sample every process's USS/RSS from ``/proc/PID/smaps_rollup``.
5. Afterwards read the cgroup's counters, kill whatever is left in the cgroup (only our own
   processes are in it), remove the cgroup (always, also on errors and timeouts), and keep
   only the kernel's OOM reports for this cgroup from ``/dev/kmsg``.

Files written to the output folder: ``console.txt``, ``kmsg.txt`` (raw records of our
reports), ``dmesg.txt`` (the same rendered as ``[ sec.usec] text``), ``meta.json`` and
``HOW.md``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scenarios.catalog import Scenario
from scenarios.cgroup import (
    KmsgRecord,
    cgroup_path_of,
    enter,
    kill_cgroup_procs,
    kmsg_last_seq,
    kmsg_records,
    memory_cgroup,
    oom_kill_count,
    read_int,
)
from scenarios.kernel import OomReport, extract_reports
from scenarios.sampler import Sampler

__all__ = ["ROOT", "default_cache_dir", "path_rewrites", "prepare_data", "run_scenario", "scrub"]

ROOT = Path(__file__).resolve().parent.parent


def default_cache_dir() -> Path:
    """Where prepared data is cached: ``$OOMWATCH_SCENARIO_CACHE`` or ``~/.cache/oomwatch-scenarios``."""
    env = os.environ.get("OOMWATCH_SCENARIO_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "oomwatch-scenarios"


def prepare_data(scn: Scenario, cache_dir: Path) -> Path | None:
    """Build (or reuse) the scenario's data in ``cache_dir``, outside the cgroup."""
    if scn.prepare is None:
        return None
    target = cache_dir / scn.prepare.name
    cmd = [sys.executable, "-m", "scenarios.prepare", scn.prepare.kind, str(target), "--mb", str(scn.prepare.mb)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=sys.stderr)
    return target


def path_rewrites() -> list[tuple[str, str]]:
    """(local prefix, neutral prefix) pairs for fixtures: checkout, interpreter, home."""
    pairs = [(str(ROOT), "/home/user/oomwatch"), (sys.prefix, "/home/user/venv")]
    if sys.base_prefix != sys.prefix:
        pairs.append((sys.base_prefix, "/usr"))
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        pairs.append((home, "/home/user"))
    return sorted(pairs, key=lambda p: len(p[0]), reverse=True)


def scrub(data: bytes, rewrites: list[tuple[str, str]]) -> bytes:
    """Replace local absolute paths so a committed capture does not name this machine's."""
    for local, neutral in rewrites:
        data = data.replace(local.encode() + b"/", neutral.encode() + b"/")
        data = data.replace(local.encode() + b" ", neutral.encode() + b" ")
        data = data.replace(local.encode() + b"\n", neutral.encode() + b"\n")
    return data


def _env(scn: Scenario) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
    )
    env.pop("PYTHONPATH", None)
    env.update(scn.environment())
    return env


def _collect_reports(seq: int, cgroup_path: str, expected: int) -> tuple[list[KmsgRecord], list[OomReport]]:
    """Our cgroup's OOM reports from the ring buffer; waits a little for late records."""
    deadline = time.monotonic() + 3.0
    while True:
        records = kmsg_records(seq)
        reports = extract_reports(records, cgroup_path)
        complete = all(r.killed_pid is not None for r in reports)
        if (len(reports) >= expected and complete) or time.monotonic() > deadline:
            return records, reports
        time.sleep(0.2)


def run_scenario(
    scn: Scenario,
    *,
    fixed: bool,
    out: Path,
    limit: str | None = None,
    cache_dir: Path | None = None,
    timeout: float | None = None,
    scrub_paths: bool = False,
    interval: float = 0.2,
    notes: list[str] | None = None,
    wrap: list[str] | None = None,
    nproc: int | None = None,
    workers: int | None = None,
    stat_interval: float | None = None,
) -> dict[str, Any]:
    """Run ``scn`` (broken or fixed) under a memory limit and write its capture to ``out``.
    ``wrap``: a command the scenario runs under (``oomwatch run -q --report R --``), outside the
    cgroup: the shell it starts enters the cgroup, then runs the scenario's command as without it.

    ``nproc``: another rank count (torchrun's, or the launcher's of ``Scenario.ranks``); ``workers``:
    ``--num-workers`` for a workload that takes it (``Scenario.scaled``; ValueError otherwise).
    ``stat_interval``: also read ``memory.stat`` this often (for ``peak_anon_shmem_bytes`` only).

    Returns the contents of ``meta.json``.
    """
    from scenarios.cgroup import parse_size

    default_nproc = scn.nproc or scn.ranks
    scn = scn.scaled(nproc=nproc, workers=workers)

    limit_text = limit or scn.limit
    limit_bytes = parse_size(limit_text)
    timeout = timeout or scn.timeout
    out.mkdir(parents=True, exist_ok=True)
    data = prepare_data(scn, cache_dir or default_cache_dir())
    command = scn.command(fixed, data)
    started = _dt.datetime.now(_dt.timezone.utc)
    seq = kmsg_last_seq()
    timed_out = False
    console_path = out / "console.txt"
    # a name that says nothing of the mechanism: the kernel prints the cgroup's path in its report
    with memory_cgroup(limit_bytes, name="oomwatch-scenario") as cg:
        cgroup_path = cgroup_path_of(cg)
        sampler = Sampler(cg, interval=interval, stat_interval=stat_interval)
        t0 = time.monotonic()
        shell = ["bash", "-c", f"{command}\nexit $?"]
        if wrap:  # the wrapper stays outside the cgroup: only what it runs is confined
            join = f"echo $$ > {shlex.quote(str(cg / 'cgroup.procs'))} && exec {shlex.join(shell)}"
            argv, enter_first = [*wrap, "bash", "-c", join], None
        else:
            argv, enter_first = shell, lambda: enter(cg)
        with open(console_path, "wb") as console:
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=_env(scn),
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                preexec_fn=enter_first,  # noqa: PLW1509 - the child must be in the cgroup before exec
                start_new_session=True,
            )
            sampler.start()
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_cgroup_procs(cg)
                rc = proc.wait()
        duration = time.monotonic() - t0
        time.sleep(0.3)  # late kernel records (oom_reaper) and exiting children
        sampler.sample_once()
        sampler.stop()
        peak = read_int(cg / "memory.max_usage_in_bytes")
        memsw_peak = read_int(cg / "memory.memsw.max_usage_in_bytes")
        failcnt = read_int(cg / "memory.failcnt")
        oom_kills = oom_kill_count(cg)
        leftover = kill_cgroup_procs(cg)
    records, reports = _collect_reports(seq, cgroup_path, oom_kills or 0)
    kept = sorted({r.seq: r for rep in reports for r in rep.records}.values(), key=lambda r: r.seq)

    procs = sorted(sampler.procs.values(), key=lambda p: p.first_seen_s)
    roles = {p.pid: p.role for p in procs}
    victims = []
    for rep in reports:
        summary = rep.summary()
        summary["role_hint"] = roles.get(rep.killed_pid or -1)
        victims.append(summary)
    meta: dict[str, Any] = {
        "schema": "oomwatch.scenario/v1",
        "name": scn.name,
        "fixed": fixed,
        "title": scn.title,
        "mechanism": scn.mechanism,
        "fix": scn.fix,
        "expected_victim_role": None if fixed else scn.victim_role,
        "command": command,
        "date_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "cgroup_version": 1,
        "cgroup_path": cgroup_path,
        "limit": limit_text,
        "limit_bytes": limit_bytes,
        "exit_code": rc if rc >= 0 else None,
        "exit_signal": signal.Signals(-rc).name if rc < 0 else None,
        "timed_out": timed_out,
        "duration_s": round(duration, 2),
        "killed_by_kernel": any(r.killed_pid is not None for r in reports),
        "oom_kills": victims,
        "memory_max_usage_in_bytes": peak,
        "memory_memsw_max_usage_in_bytes": memsw_peak,
        "memory_failcnt": failcnt,
        "memory_oom_control_oom_kill": oom_kills,
        "leftover_pids_killed": leftover,
        "kmsg_baseline_seq": seq,
        "kmsg_records_after_baseline": len(records),
        "sample_interval_s": interval,
        "processes": [p.to_json() for p in procs],
        "usage_timeline": sampler.usage,
        # beside the usage peak (page cache included, reclaimed before a kill): the largest
        # anonymous + shmem the cgroup held in a sample, which cannot be reclaimed without swap
        "peak_anon_shmem_bytes": sampler.peak_anon_shmem,
        "peak_anon_shmem_at_s": sampler.peak_anon_shmem_at,
        "peak_anon_shmem_interval_s": sampler.stat_interval or interval,
        "memory_timeline": sampler.memory,
        "scale": {
            "nproc": scn.nproc or scn.ranks or None,
            "nproc_default": default_nproc or None,
            "num_workers": workers,  # None: the scenario's own arguments
        },
    }
    rewrites = path_rewrites() if scrub_paths else []
    if rewrites:
        console_path.write_bytes(scrub(console_path.read_bytes(), rewrites))
    (out / "kmsg.txt").write_bytes(b"".join(r.raw + b"\n" for r in kept))
    (out / "dmesg.txt").write_text("".join(r.dmesg_line() + "\n" for r in kept))
    meta_text = json.dumps(meta, indent=1) + "\n"
    (out / "meta.json").write_bytes(scrub(meta_text.encode(), rewrites))
    how = how_md(meta, [*scn.notes, *(notes or [])])
    (out / "HOW.md").write_bytes(scrub(how.encode(), rewrites))
    return meta


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1 << 20):.0f} MiB"


def how_md(meta: dict[str, Any], notes: list[str] | None = None) -> str:
    """A note saying how the capture was produced (for fixtures), plus ``notes`` paragraphs."""
    variant = "fixed" if meta["fixed"] else "broken"
    flag = " --fixed" if meta["fixed"] else ""
    lines = [
        f"# {meta['name']} ({variant})",
        "",
        f"{meta['title'][0].upper()}{meta['title'][1:]}. {meta['mechanism']}",
        "",
        f"Fix: `{meta['fix']}`" if meta["fix"] else "",
        "",
        "Captured for real by the scenario runner (`scenarios/runner.py`), from the repository root:",
        "",
        "```",
        f"sudo python -m scenarios run {meta['name']}{flag} --limit {meta['limit']} --out DIR --scrub-paths",
        "```",
        "",
        f"* Date (UTC): {meta['date_utc']}; kernel `{meta['kernel']}` ({meta['machine']}), "
        f"{meta['cpus']} CPUs; Python {meta['python']}, torch 2.13.0 CPU wheel.",
        f"* A child of the runner's cgroup v1 memory cgroup, `{meta['cgroup_path']}`, with "
        f"`memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`) = {meta['limit']} "
        f"({meta['limit_bytes']} bytes); removed after the run.",
        "* Command, run as `bash -c 'COMMAND'` inside the cgroup (stdin /dev/null, stdout and "
        "stderr interleaved into `console.txt`):",
        "",
        "  ```",
        f"  {meta['command']}",
        "  ```",
        "",
        f"* Exit: code {meta['exit_code']}, signal {meta['exit_signal']}"
        + (", TIMED OUT" if meta["timed_out"] else "")
        + f"; ran {meta['duration_s']} s. Killed by the kernel: {'yes' if meta['killed_by_kernel'] else 'no'}.",
        f"* cgroup counters: `memory.max_usage_in_bytes` {meta['memory_max_usage_in_bytes']} "
        f"({_mib(meta['memory_max_usage_in_bytes'])}), `memory.failcnt` {meta['memory_failcnt']}, "
        f"`memory.oom_control` oom_kill {meta['memory_oom_control_oom_kill']}.",
        "",
    ]
    if meta["oom_kills"]:
        lines += [
            "| OOM kill | pid | comm | role (sampler) | anon-rss | file-rss | shmem-rss |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, v in enumerate(meta["oom_kills"], 1):
            lines.append(
                f"| {n} | {v['killed_pid']} | {v['killed_comm']} | {v['role_hint']} | {v['anon_rss_kb']} kB | "
                f"{v['file_rss_kb']} kB | {v['shmem_rss_kb']} kB |"
            )
        lines.append("")
    lines += [
        f"Per-process peaks, sampled every {meta['sample_interval_s']} s from `/proc/PID/smaps_rollup` "
        "(USS = Private_Clean + Private_Dirty):",
        "",
        "| pid | comm | role | peak USS | peak RSS | first → last USS |",
        "|---|---|---|---|---|---|",
    ]
    for p in meta["processes"]:
        lines.append(
            f"| {p['pid']} | {p['comm']} | {p['role']} | {_mib(p['peak_uss_bytes'])} | {_mib(p['peak_rss_bytes'])} | "
            f"{_mib(p['first_uss_bytes'])} → {_mib(p['last_uss_bytes'])} |"
        )
    lines += [
        "",
        "## Files",
        "",
        "* `console.txt` — the command's stdout and stderr as written (tqdm `\\r` runs kept); absolute paths "
        "of the checkout and the Python installation rewritten to `/home/user/oomwatch/` and `/home/user/venv/`.",
        "* `kmsg.txt` — the kernel's OOM-killer reports for this cgroup only, as read from `/dev/kmsg` "
        "(`prefix,seq,usec,flags;text`): each from `invoked oom-killer` through `Killed process` "
        "(and `oom_reaper`), selected by the cgroup path in `oom_memcg=`/`task_memcg=`. Empty when nothing was killed.",
        "* `dmesg.txt` — the same records rendered as plain `dmesg` prints them (`[ seconds.micros] text`).",
        "* `meta.json` — the facts above, machine-readable, with the cgroup usage timeline.",
        "",
    ]
    for note in notes or []:
        lines += [note, ""]
    return "\n".join(lines)
