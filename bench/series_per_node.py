"""How many Prometheus series does one node's agent export for a training job of R ranks x W workers?

Starts R real python "ranks" (RANK / LOCAL_RANK and one TORCHELASTIC_RUN_ID in their environment, so
the agent sees one job), each forking W children named ``pt_data_worker`` (tests/agent/proctree.py),
runs the real ``oomwatch agent`` beside them, scrapes /metrics once every process has its per-process
series, and counts the series: in all, per family, and the share that grows with the job. Everything it
started is stopped by its pid.

    python bench/series_per_node.py                 # 8 ranks x 8 workers
    python bench/series_per_node.py --ranks 4 --workers 2 --json /tmp/series.json
    python bench/series_per_node.py --top-workers 0 --top-n 5   # the agent's flags
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROCTREE = ROOT / "tests" / "agent" / "proctree.py"


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--json", type=Path, help="also write the counts here")
    ap.add_argument("--top-workers", type=int, help="the agent's --top-workers (default: the agent's, 1)")
    ap.add_argument("--top-n", type=int, help="the agent's --top-n (default: the agent's, 20)")
    args = ap.parse_args()
    run_id = f"series-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ranks: list[subprocess.Popen[str]] = []
    state = tempfile.mkdtemp(prefix="oomwatch-series-")
    cmd = [
        sys.executable,
        "-m",
        "oomwatch",
        "agent",
        "--listen",
        "127.0.0.1:0",
        "--interval",
        "0.5",
        "--state-dir",
        state,
    ]
    for flag, value in (("--top-workers", args.top_workers), ("--top-n", args.top_n)):
        if value is not None:
            cmd += [flag, str(value)]
    agent = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for r in range(args.ranks):
            rank_env = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.ranks), TORCHELASTIC_RUN_ID=run_id)
            ranks.append(subprocess.Popen([sys.executable, str(PROCTREE), "16", str(args.workers)], env=rank_env,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))  # fmt: skip
        pids = set()
        for p in ranks:
            assert p.stdout is not None
            line = p.stdout.readline().split()
            assert line and line[0] == "ready", line
            pids.update(int(x) for x in line[1:])
        assert agent.stderr is not None
        url = ""
        while not url:
            m = re.search(r"metrics on (\S+/metrics)", agent.stderr.readline())
            url = m.group(1) if m else ""
        expected = args.ranks * (1 + args.workers)
        deadline = time.monotonic() + 120
        text = ""
        while time.monotonic() < deadline:
            text = scrape(url)
            # every process of the job counted with its USS (smaps read once for each, on the agent's
            # budget): the ranks per process, the workers in their ranks' aggregates
            ranks_seen = re.findall(
                rf'^oomwatch_process_uss_bytes\{{[^}}]*role="rank"[^}}]*training_job="{run_id}"', text, re.M
            )
            workers = re.findall(rf'^oomwatch_role_processes\{{[^}}]*training_job="{run_id}"\}} (\S+)', text, re.M)
            with_uss = re.findall(rf'^oomwatch_role_uss_bytes\{{[^}}]*stat="sum",training_job="{run_id}"', text, re.M)
            if (
                len(ranks_seen) >= args.ranks
                and sum(float(n) for n in workers) >= args.ranks * args.workers
                and len(with_uss) >= (args.ranks if args.workers else 0)
            ):
                break
            time.sleep(1.0)
        series = [line for line in text.splitlines() if line and not line.startswith("#")]
        families = Counter(line.split("{", 1)[0].split(" ", 1)[0] for line in series)
        job = [line for line in series if f'training_job="{run_id}"' in line]
        out = {
            "ranks": args.ranks,
            "workers_per_rank": args.workers,
            "job_processes": expected,
            "series": len(series),
            "series_of_the_job": len(job),
            "series_per_job_process": round(len(job) / expected, 2),
            "series_outside_the_job": len(series) - len(job),
            "processes_outside_jobs_exported": len(
                {
                    m
                    for m in re.findall(
                        r'^oomwatch_process_resident_bytes\{[^}]*pid="(\d+)"[^}]*training_job=""', text, re.M
                    )
                }
            ),
            "bytes": len(text.encode()),
            "families": dict(sorted(families.items())),
        }
        print(f"{args.ranks} ranks x {args.workers} workers ({expected} job processes): {out['series']} series "
              f"({out['series_of_the_job']} of the job, {out['series_per_job_process']} per job process; "
              f"{out['series_outside_the_job']} others, of which {out['processes_outside_jobs_exported']} processes "
              f"outside jobs (top_n) x 10), {out['bytes']} bytes per scrape")  # fmt: skip
        for name, n in sorted(families.items(), key=lambda kv: -kv[1])[:12]:
            print(f"  {n:6d}  {name}")
        if args.json:
            args.json.write_text(json.dumps(out, indent=2) + "\n")
    finally:
        for p in ranks:
            if p.stdin:
                p.stdin.close()
        for p in ranks:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        agent.terminate()
        agent.wait(timeout=20)
        if agent.stderr:
            agent.stderr.close()


if __name__ == "__main__":
    main()
