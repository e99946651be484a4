"""``python -m scenarios list`` / ``python -m scenarios run NAME [--fixed] [--limit 1500M] [--out DIR]
[--nproc N] [--workers W]``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path

from scenarios.catalog import ALL, get


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1 << 20):.0f} MiB"


def _cmd_list() -> int:
    width = max(len(n) for n in ALL)
    for scn in ALL.values():
        launch = f"torchrun x{scn.nproc}" if scn.nproc else f"{scn.ranks} ranks" if scn.ranks else "python"
        print(f"{scn.name:<{width}}  limit {scn.limit:>6}  {launch:<11}  {scn.title}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from scenarios.cgroup import v1_memory_parent
    from scenarios.runner import run_scenario

    try:
        scn = get(args.name)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    if os.geteuid() != 0 or v1_memory_parent() is None:
        print("error: needs root and a writable cgroup v1 memory controller", file=sys.stderr)
        return 2
    try:
        scn.scaled(nproc=args.nproc, workers=args.workers)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.gettempdir()) / "oomwatch-scenarios" / (scn.name + ("-fixed" if args.fixed else ""))
    meta = run_scenario(
        scn,
        fixed=args.fixed,
        out=out,
        limit=args.limit,
        cache_dir=args.cache_dir,
        timeout=args.timeout,
        scrub_paths=args.scrub_paths,
        notes=args.note,
        nproc=args.nproc,
        workers=args.workers,
    )
    variant = "fixed" if args.fixed else "broken"
    print(f"{scn.name} ({variant}) under {meta['limit']}: exit code {meta['exit_code']} signal {meta['exit_signal']}")
    print(
        f"  {meta['duration_s']} s; cgroup peak {_mib(meta['memory_max_usage_in_bytes'])}; "
        f"oom_kill {meta['memory_oom_control_oom_kill']}; killed by the kernel: {meta['killed_by_kernel']}"
    )
    print(f"  peak anonymous + shmem (sampled): {_mib(meta['peak_anon_shmem_bytes'])}")
    for v in meta["oom_kills"]:
        print(f"  killed pid {v['killed_pid']} ({v['killed_comm']}, {v['role_hint']}) anon-rss {v['anon_rss_kb']} kB")
    for p in meta["processes"]:
        print(
            f"  pid {p['pid']:>7} {p['comm']:<15} {p['role']:<18} peak USS {_mib(p['peak_uss_bytes']):>9}"
            f"  RSS {_mib(p['peak_rss_bytes']):>9}"
        )
    print(f"  capture: {out}")
    if args.check:
        ok = meta["killed_by_kernel"] != args.fixed and (not args.fixed or meta["exit_code"] == 0)
        if not ok:
            print("check FAILED: " + ("the fixed run did not survive" if args.fixed else "nothing was killed"))
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (2 on bad arguments or no cgroup v1 as root)."""
    p = argparse.ArgumentParser(prog="python -m scenarios", description="Real reproductions of host-memory failures.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the scenarios, their default limits and launchers")
    r = sub.add_parser("run", help="run one scenario in a fresh memory cgroup and capture it")
    r.add_argument("name")
    r.add_argument("--fixed", action="store_true", help="run the fixed variant")
    r.add_argument("--limit", help="memory.limit_in_bytes (e.g. 1500M); default: the scenario's")
    r.add_argument("--out", type=Path, help="capture folder (default: $TMPDIR/oomwatch-scenarios/NAME[-fixed])")
    r.add_argument("--cache-dir", type=Path, help="prepared data (default: ~/.cache/oomwatch-scenarios)")
    r.add_argument("--timeout", type=float, help="seconds before the run is killed")
    r.add_argument("--scrub-paths", action="store_true", help="rewrite checkout/venv paths (for fixtures)")
    r.add_argument("--note", action="append", help="a paragraph to add to HOW.md (repeatable)")
    r.add_argument("--nproc", type=int, help="ranks for a torchrun scenario (default: the scenario's)")
    r.add_argument("--workers", type=int, help="--num-workers W for a workload that takes it")
    r.add_argument("--check", action="store_true", help="exit 1 unless broken is killed / fixed survives")
    args = p.parse_args(argv)
    if args.command == "list":
        return _cmd_list()
    # SIGTERM/SIGHUP -> SystemExit, so that the cgroup is still removed
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    return _cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
