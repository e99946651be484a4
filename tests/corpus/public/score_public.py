"""Score `oomwatch diagnose` against the public corpus labels (dev aid, not a pytest test).

Run from the repository root:  python tests/corpus/public/score_public.py [-v]
Prints verdict / class / victim-pid agreement; -v lists every disagreement.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import yaml

CLASS = {"host_oom": "host", "cgroup_oom": "host", "userspace_oom_kill": "host",
         "swap_thrash": "host", "sigkill_unexplained": "host", "python_memory_error": "host",
         "cuda_oom": "gpu", "shm_exhausted": "shm", "other_crash": "not_memory",
         "no_oom_evidence": "not_memory"}


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    verbose = "-v" in sys.argv
    n = v_ok = c_ok = pid_n = pid_ok = 0
    for d in sorted(glob.glob(os.path.join(here, "*", ""))):
        lab = yaml.safe_load(open(os.path.join(d, "label.yaml"), encoding="utf-8"))
        proc = subprocess.run([sys.executable, "-m", "oomwatch", "diagnose", "--format", "json",
                               os.path.join(d, "input.log")], capture_output=True, text=True)
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            out = {"verdict": "ERROR", "victims": []}
        got = out.get("verdict")
        pids = [v.get("pid") for v in out.get("victims") or []]
        n += 1
        v_ok += got == lab["verdict"]
        c_ok += CLASS.get(got) == lab["class"]
        want_pid = (lab.get("victim") or {}).get("pid")
        if want_pid is not None:
            pid_n += 1
            pid_ok += bool(pids) and pids[-1] == want_pid
        if verbose and (got != lab["verdict"] or (want_pid is not None and (not pids or pids[-1] != want_pid))):
            print(f"{os.path.basename(d.rstrip(os.sep))}: want {lab['verdict']} pid={want_pid}  got {got} pids={pids}")
    print(f"verdict {v_ok}/{n}  class {c_ok}/{n}  victim pid (last victim) {pid_ok}/{pid_n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
