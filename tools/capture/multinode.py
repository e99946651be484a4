#!/usr/bin/env python3
"""Capture a 2-"node" torchrun job whose rank on node 1 is OOM-killed (see README.md here).

    sudo python3 tools/capture/multinode.py --out tests/fixtures/captured/multinode_torchrun_rank_oom

Two torchrun launchers (`--nnodes 2 --node_rank 0|1 --nproc_per_node 2`, static rendezvous on
127.0.0.1, gloo) run at the same time, each with its own log file (stdout+stderr) and its own
hostname: each is started by `unshare --uts` and sets `hostname node-0` / `node-1` in its new UTS
namespace, so the ChildFailedError tables carry different hosts as they would on two machines.
Node 1's launcher and its ranks run in a child memory cgroup (v1) with a limit; global rank 3
(node 1, local rank 1) keeps 32 MiB per step until the kernel kills it. The kernel's reports for
that cgroup are read from /dev/kmsg and rendered by `dmesg -T` (kernel_oom.py's selection).
Always removes the cgroup. Stdlib only; run from the repository root.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernel_oom import (  # noqa: E402 - sibling module of this tool
    _WRAPPER,
    _cleanup_cgroup,
    _read_oom_kill,
    _write,
    extract_reports,
    last_seq,
    parent_cgroup,
    read_kmsg,
    render_dmesg,
)

W = "tools/capture/workloads"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launcher(node_rank: int, port: int, steps: int) -> list[str]:
    """The command of one node: a new UTS namespace named node-N, then torchrun."""
    torchrun = shlex.join(
        [
            "torchrun",
            "--nnodes",
            "2",
            "--node_rank",
            str(node_rank),
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            f"{W}/ddp_train.py",
            "--mode",
            "oom",
            "--bad-rank",
            "3",
            "--steps",
            str(steps),
        ]
    )
    return ["unshare", "--uts", "sh", "-c", f"hostname node-{node_rank} && exec {torchrun}"]


def _hide_paths(path: str) -> None:
    """Tracebacks print this checkout's and this Python's paths: the same rewrite as the other
    captures (tests/fixtures/captured/README.md), so no path of the capturing machine is stored."""
    with open(path, "rb") as f:
        data = f.read()
    repo = os.getcwd().encode()
    data = data.replace(repo + b"/", b"/home/user/oomwatch/").replace(sys.prefix.encode() + b"/", b"/home/user/venv/")
    _write(path, data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="fixture folder to write")
    p.add_argument("--limit", default="900M", help="memory.limit_in_bytes of node 1")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--timeout", type=float, default=90, help="seconds before both sessions are SIGKILLed")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    port = _free_port()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}  # the made-up hostnames do not resolve
    parent_path, parent_dir = parent_cgroup()
    name = f"oomwatch-capture-{os.getpid()}"
    cg_path = parent_path.rstrip("/") + "/" + name
    cgdir = os.path.join(parent_dir, name)
    started = _dt.datetime.now(_dt.timezone.utc)
    baseline = last_seq()
    procs: list[subprocess.Popen[bytes]] = []
    rcs: list[int | None] = []
    os.mkdir(cgdir)
    try:
        _write(os.path.join(cgdir, "memory.limit_in_bytes"), args.limit)
        t0 = time.monotonic()
        for node in (0, 1):
            cmd = _launcher(node, port, args.steps)
            if node == 1:
                cmd = [sys.executable, "-c", _WRAPPER, os.path.join(cgdir, "cgroup.procs"), *cmd]
            with open(os.path.join(args.out, f"node-{node}.log"), "wb") as log:
                procs.append(
                    subprocess.Popen(
                        cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                        start_new_session=True,
                    )
                )  # fmt: skip
        deadline = t0 + args.timeout
        for proc in procs:
            try:
                rcs.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # our own session, started above
                rcs.append(proc.wait())
        elapsed = time.monotonic() - t0
        time.sleep(1.0)  # let oom_reaper / late messages arrive
        oom_kills = _read_oom_kill(os.path.join(cgdir, "memory.oom_control"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        _cleanup_cgroup(cgdir)
    for node in (0, 1):
        _hide_paths(os.path.join(args.out, f"node-{node}.log"))
    records = [r for r in read_kmsg() if r.seq > baseline]
    reports = extract_reports(records, cg_path)
    seqs = {s for rep in reports for s in rep.seqs}
    selected = [r for r in records if r.seq in seqs]
    files = ["node-0.log", "node-1.log"]
    if selected:
        text = render_dmesg(selected)["dmesg-T.txt"]
        _write(os.path.join(args.out, "node-1.dmesg-T.txt"), text)
        files.append("node-1.dmesg-T.txt")
    facts = {
        "date_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "uname_r": platform.release(),
        "cgroup_path": cg_path,
        "limit": args.limit,
        "commands": [shlex.join(_launcher(n, port, args.steps)) for n in (0, 1)],
        "exit_status": rcs,
        "elapsed_s": round(elapsed, 2),
        "memory_oom_control_oom_kill": oom_kills,
        "oom_reports": [rep.summary for rep in reports],
        "files": files,
    }
    _write(os.path.join(args.out, "capture.json"), json.dumps(facts, indent=2) + "\n")
    print(json.dumps(facts, indent=2))
    return 0 if reports else 1


if __name__ == "__main__":
    raise SystemExit(main())
