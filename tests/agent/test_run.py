"""`oomwatch run`: exit codes passed through, output passed through, and a real cgroup OOM kill of a
DataLoader-like worker diagnosed from the kernel's report plus the live samples."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from tests.cgroup_util import cgroup_path_of, memory_cgroup
from tests.conftest import require_root_cgroup, run_oomwatch

# A parent that moves itself into the cgroup, forks two workers named like torch's that grow until
# the kernel kills them, and exits 1 as a DataLoader would after losing its workers.
HOG = """
import os, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
print("started", flush=True)
kids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        open("/proc/self/comm", "w").write("pt_data_worker")
        hog = []
        while True:
            hog.append(bytearray(8 << 20))
            time.sleep(0.05 * (i + 1))
    kids.append(pid)
for k in kids:
    _, status = os.waitpid(k, 0)
    print(f"DataLoader worker (pid {k}) is killed by signal: Killed.", file=sys.stderr, flush=True)
sys.exit(1)
"""


def test_exit_code_and_output_pass_through():
    done = run_oomwatch("run", "--", sys.executable, "-c", "import sys; print('hello'); sys.exit(3)")
    assert done.returncode == 3
    assert done.stdout == b"hello\n"
    assert b"oomwatch run: " in done.stderr and b"exited with 3" in done.stderr


def test_success_prints_one_line():
    done = run_oomwatch("run", "--", "sh", "-c", "echo out; echo err >&2")
    assert done.returncode == 0
    assert done.stdout == b"out\n"
    lines = done.stderr.decode().splitlines()
    assert lines[0] == "err" and len(lines) == 2 and lines[1].startswith("oomwatch run: sh exited with 0")


def test_killed_by_signal_is_128_plus_n():
    done = run_oomwatch("run", "--no-capture", "--", "sh", "-c", "kill -9 $$")
    assert done.returncode == 137
    assert b"was killed by signal 9" in done.stderr


def test_missing_command_is_127():
    done = run_oomwatch("run", "--", "/nonexistent/oomwatch-test-command")
    assert done.returncode == 127
    assert b"cannot run /nonexistent/oomwatch-test-command" in done.stderr


def test_real_cgroup_oom_of_a_worker(tmp_path: Path):
    require_root_cgroup()
    script = tmp_path / "hog.py"
    script.write_text(HOG)
    report = tmp_path / "run.json"
    with memory_cgroup(160 << 20, name="oomwatch-run") as cg:
        done = run_oomwatch("run", "--report", str(report), "--", sys.executable, str(script), str(cg), timeout=120)
        path = cgroup_path_of(cg)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert done.stdout == b"started\n"
    assert "[cgroup_oom, confirmed]" in err, err
    doc = json.loads(report.read_text())
    diagnosis = doc["diagnosis"]
    assert diagnosis["verdict"] == "cgroup_oom"
    victim = diagnosis["victims"][0]
    workers = {p["pid"] for p in doc["processes"] if p["role"] == "dataloader_worker"}
    assert len(workers) == 2
    assert victim["pid"] in workers and victim["role"] == "dataloader_worker"
    assert victim["cgroup"] == path
    assert any(f"Killed process {victim['pid']} " in line for line in doc["kernel_lines"])
    # the samples saw the worker grow before the kill
    seen = next(p for p in doc["processes"] if p["pid"] == victim["pid"])
    assert seen["gone"] and seen["peak"]["anon"] > 64 << 20
    assert "Memory of the command's processes" in err


def test_quiet_prints_nothing_of_its_own():
    done = run_oomwatch("run", "-q", "--", sys.executable, "-c", "import sys; print('hello'); sys.exit(3)")
    assert (done.returncode, done.stdout, done.stderr) == (3, b"hello\n", b"")


# the hog above, written as a training script: a Dataset that fills a dict in __getitem__
CACHING = """
import os, sys, time
class Images:
    def __init__(self):
        self.cache = {}
    def __getitem__(self, idx):
        if idx not in self.cache:
            self.cache[idx] = bytearray(8 << 20)
        return self.cache[idx]
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
ds = Images()
for step in range(10_000):
    ds[step]
    time.sleep(0.02)
"""


def test_the_script_it_runs_is_read_for_its_calls(tmp_path: Path):
    """A cache filled in __getitem__ that the output never mentions: the code says it (file:line),
    and --no-code leaves the script unread."""
    require_root_cgroup()
    (tmp_path / "train.py").write_text(CACHING)
    causes = {}
    for flags in ((), ("--no-code",)):
        report = tmp_path / f"run{len(flags)}.json"
        with memory_cgroup(120 << 20, name="oomwatch-run-code") as cg:
            run_oomwatch("run", "-q", "--report", str(report), *flags, "--", sys.executable, "train.py", str(cg),
                         timeout=120, cwd=tmp_path)  # fmt: skip
        diagnosis = json.loads(report.read_text())["diagnosis"]
        assert diagnosis["verdict"] == "cgroup_oom"
        causes[flags] = diagnosis["causes"]
    top = causes[()][0]
    assert top["id"] == "unbounded_cache", causes[()]
    assert any(e["file"] == "train.py" and e["line"] == 8 for e in top["evidence"]), top["evidence"]
    assert not any(e["file"] == "train.py" for c in causes[("--no-code",)] for e in c["evidence"])


def test_secrets_in_the_command_line_are_redacted_and_the_report_is_its_owners(tmp_path: Path):
    """The command line is quoted (the inputs' names, the report's "command"): a key, a token and an
    env-style secret are shown as <redacted>, the flags' names kept; the report is created 0600, and
    an existing report keeps its mode. The command itself got the real values."""
    # it prints a digest of what it was given: the real values, not shown
    (tmp_path / "train.py").write_text(
        "import hashlib, sys; print(hashlib.sha256(' '.join(sys.argv[1:]).encode()).hexdigest()); sys.exit(1)\n"
    )
    secrets = ["sekrit-k3y-4242", "t0ken-abc-9f9f", "hf-env-5151"]
    argv = [sys.executable, "train.py", "--api-key=sekrit-k3y-4242", "--token", "t0ken-abc-9f9f",
            "HF_TOKEN=hf-env-5151", "--keep_in_memory"]  # fmt: skip
    given = hashlib.sha256(" ".join(argv[2:]).encode()).hexdigest().encode() + b"\n"
    report = tmp_path / "oom.json"
    shown = {}
    for fmt in ("text", "markdown", "json"):
        done = run_oomwatch("run", "-f", fmt, "--report", str(report), "--", *argv, cwd=tmp_path, timeout=120)
        assert done.returncode == 1 and done.stdout == given, done.stderr.decode()[-2000:]
        shown[fmt] = done.stderr.decode()
        assert "--api-key=<redacted>" in shown[fmt], shown[fmt]
        if fmt == "text":
            assert report.stat().st_mode & 0o777 == 0o600
            report.chmod(0o640)
    assert report.stat().st_mode & 0o777 == 0o640  # rewritten twice, its mode kept
    text = report.read_text()
    doc = json.loads(text)
    assert doc["command"][2:] == ["--api-key=<redacted>", "--token", "<redacted>", "HF_TOKEN=<redacted>",
                                  "--keep_in_memory"]  # fmt: skip
    assert any("--api-key=<redacted>" in i["file"] for i in doc["diagnosis"]["inputs"]), doc["diagnosis"]["inputs"]
    for where in (text, *shown.values()):
        assert not any(s in where for s in secrets), where


def test_a_capture_times_its_lines_in_its_head_and_its_tail(monkeypatch):
    """Each piece of output is marked with when it came; a line kept in the tail (past the head's bytes, some
    dropped between) is timed by the bytes written, not by where it sits in what was kept."""
    import io

    from oomwatch.agent import run as runmod

    monkeypatch.setattr(runmod, "HEAD_BYTES", 20)
    monkeypatch.setattr(runmod, "TAIL_BYTES", 40)
    cap = runmod.Capture(io.BytesIO(b""), io.BytesIO())
    cap.thread.join()
    clock = iter(range(100, 200))
    monkeypatch.setattr(runmod.time, "time", lambda: float(next(clock)))
    for step in range(12):
        cap._keep(f"step {step} loss 0.{step}\n".encode())
    timed = cap.timed_lines()
    assert cap.dropped > 0 and timed[0] == (100.0, "step 0 loss 0.0")
    assert timed[-1] == (111.0, "step 11 loss 0.11") and timed[-2] == (110.0, "step 10 loss 0.10")
    assert [t for t, _ in timed] == sorted(t for t, _ in timed)
