"""End to end on the real kernel: a process grows past a cgroup v1 memory limit, the
kernel OOM-kills it, and `oomwatch diagnose` reads the shell's output together with the
kernel's own report from /dev/kmsg and names the right victim, with its exact anon-rss.

Needs root and a writable v1 memory controller; skips elsewhere, fails under CI=true."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.cgroup_util import cgroup_path_of, enter, kmsg_last_seq, memory_cgroup, read_kmsg
from tests.conftest import require_root_cgroup, run_oomwatch

HOG = "import time\nchunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n    time.sleep(0.005)\n"


def test_real_cgroup_oom_kill_is_diagnosed(tmp_path: Path) -> None:
    require_root_cgroup()
    hog = tmp_path / "hog.py"
    hog.write_text(HOG)
    seq = kmsg_last_seq()
    with memory_cgroup(96 << 20) as cg:
        done = subprocess.run(
            ["bash", "-c", f"{sys.executable} {hog}; echo exit status: $?"],
            preexec_fn=lambda: enter(cg),
            capture_output=True,
            timeout=120,
        )
        kernel_path = cgroup_path_of(cg)
    console = done.stdout + done.stderr
    assert b"Killed" in console and b"exit status: 137" in console, console
    ours: list[bytes] = []
    for _ in range(20):  # the report is in the ring buffer by the time bash returns; be patient anyway
        records = [rec for _, rec in read_kmsg(seq)]
        if any(kernel_path.encode() in r and b"oom-kill:" in r for r in records):
            ours = records
            break
        time.sleep(0.1)
    assert ours, "the kernel's OOM report for our cgroup did not appear in /dev/kmsg"
    (tmp_path / "console.txt").write_bytes(console)
    (tmp_path / "kmsg.txt").write_bytes(b"\n".join(ours) + b"\n")
    r = run_oomwatch("diagnose", "-f", "json", "console.txt", "kmsg.txt", cwd=tmp_path)
    out = json.loads(r.stdout)
    assert r.returncode == 3, r.stderr.decode()
    assert out["verdict"] == "cgroup_oom" and out["confirmed"] is True
    mine = [v for v in out["victims"] if v["cgroup"] and v["cgroup"].endswith(cg.name)]
    assert mine, out["victims"]
    victim = mine[0]
    # bash printed "bash: line 1: PID Killed ..." for the same pid the kernel killed
    assert f"{victim['pid']} Killed".encode() in console
    kill_line = next(r for r in ours if f"Killed process {victim['pid']} ".encode() in r)
    anon_kb = int(kill_line.split(b"anon-rss:")[1].split(b"kB")[0])
    assert victim["anon_rss_bytes"] == anon_kb * 1024
    assert 40 << 20 < victim["anon_rss_bytes"] <= 96 << 20
    files = {e["file"] for e in victim["evidence"]}
    assert "kmsg.txt" in files
