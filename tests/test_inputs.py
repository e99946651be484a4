"""The command line on real files and hostile input: one-line errors, no tracebacks,
bounded time and memory."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, run_oomwatch

K002 = FIXTURES / "kernel" / "k-002.log"


def _json(r: subprocess.CompletedProcess) -> dict:
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    return json.loads(r.stdout)


def test_missing_file_is_one_line_error() -> None:
    r = run_oomwatch("diagnose", "/nonexistent/train.log")
    assert r.returncode == 2
    assert r.stderr.decode().strip().splitlines() == ["oomwatch: /nonexistent/train.log: no such file"]
    assert r.stdout == b""


def test_directory_and_unreadable_file(tmp_path: Path) -> None:
    r = run_oomwatch("diagnose", str(tmp_path))
    assert r.returncode == 2 and "is a directory" in r.stderr.decode()
    locked = tmp_path / "locked.log"
    locked.write_text("x\n")
    locked.chmod(0)
    if os.geteuid() != 0:  # root reads anything
        r = run_oomwatch("diagnose", str(locked))
        assert r.returncode == 2 and "permission denied" in r.stderr.decode()


def test_no_arguments_shows_usage() -> None:
    r = run_oomwatch("diagnose")
    assert r.returncode == 2 and b"Usage:" in r.stderr


def test_stdin_gzip_and_plain_agree(tmp_path: Path) -> None:
    raw = K002.read_bytes()
    gz = tmp_path / "k.log.gz"
    gz.write_bytes(gzip.compress(raw))
    plain = _json(run_oomwatch("diagnose", "-f", "json", str(K002)))
    from_gz = _json(run_oomwatch("diagnose", "-f", "json", str(gz)))
    from_stdin = _json(run_oomwatch("diagnose", "-f", "json", "-", stdin=gzip.compress(raw)))
    for out in (from_gz, from_stdin):
        assert out["verdict"] == plain["verdict"] == "host_oom"
        assert out["victims"][0]["pid"] == plain["victims"][0]["pid"] == 1532
        assert out["victims"][0]["evidence"][-1]["line"] == plain["victims"][0]["evidence"][-1]["line"]
    assert from_stdin["inputs"][0]["file"] == "<stdin>"


def test_a_gzip_that_is_no_gzip_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b" + b"this is no deflate stream" * 10)
    r = run_oomwatch("diagnose", str(bad))
    assert r.returncode == 2
    assert len(r.stderr.decode().strip().splitlines()) == 1 and "cannot read" in r.stderr.decode()


def test_a_cut_gzip_gives_what_it_held_and_says_so(tmp_path: Path) -> None:
    # a copy stopped early: the report that came out before the cut is diagnosed, and the cut is said
    raw = K002.read_bytes()
    whole = gzip.compress(raw)
    cut = tmp_path / "cut.gz"
    cut.write_bytes(whole[: len(whole) * 9 // 10])
    out = _json(run_oomwatch("diagnose", "-f", "json", str(cut)))
    plain = _json(run_oomwatch("diagnose", "-f", "json", str(K002)))
    assert out["verdict"] == plain["verdict"] == "host_oom"
    assert any("ends before its end" in n for n in out["notes"] + out["inputs"][0].get("notes", [])), out["notes"]
    header_only = tmp_path / "header.gz"
    header_only.write_bytes(whole[:12])
    r = run_oomwatch("diagnose", "-f", "json", str(header_only))
    assert r.returncode == 0 and b"Traceback" not in r.stderr


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    r = run_oomwatch("diagnose", "-f", "json", str(empty))
    out = _json(r)
    assert r.returncode == 0 and out["verdict"] == "no_oom_evidence"
    assert out["inputs"] == [{"file": str(empty), "lines": 0, "bytes": 0, "truncated_lines": 0, "notes": []}]


def test_binary_garbage_is_survived(tmp_path: Path) -> None:
    junk = tmp_path / "core.bin"
    junk.write_bytes(os.urandom(3 << 20) + b"\nKilled process 9 (x) total-vm:1kB, anon-rss:8kB, file-rss:0kB\n")
    r = run_oomwatch("diagnose", "-f", "json", str(junk))
    assert _json(r)["victims"][0]["anon_rss_bytes"] == 8192


def test_two_hundred_megabyte_line_bounded_time_and_memory(tmp_path: Path) -> None:
    big = tmp_path / "one-line.log"
    with big.open("wb") as f:
        f.write(b"Killed process 77 (python) total-vm:10kB, anon-rss:4kB, file-rss:0kB")
        block = b"\xe2\x96\x88" * (1 << 20)  # tqdm's full block, 3 MiB per write
        for _ in range(67):
            f.write(block)
        f.write(b"\nKilled process 78 (python) total-vm:10kB, anon-rss:8kB, file-rss:0kB\n")
    # peak RSS of the child, measured by a parent that runs nothing else
    probe = (
        "import resource, subprocess, sys;"
        f"r = subprocess.run([sys.executable, '-m', 'oomwatch', 'diagnose', '-f', 'json', {str(big)!r}],"
        " capture_output=True);"
        "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + chr(10));"
        "sys.stdout.write(r.stdout.decode())"
    )
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    elapsed = time.monotonic() - start
    first, _, rest = done.stdout.decode().partition("\n")
    peak_mib = int(first) / 1024
    out = json.loads(rest)
    assert peak_mib < 150, f"peak RSS {peak_mib:.0f} MiB on a 200 MB line"
    assert elapsed < 60
    assert out["inputs"][0]["truncated_lines"] == 1
    assert any("longer than" in n for n in out["notes"])
    victims = {v["pid"]: v for v in out["victims"]}
    assert sorted(victims) == [77, 78]  # the anchor at the start of the long line is kept
    assert victims[78]["evidence"][0]["line"] == 2


def test_several_files_are_read_together(tmp_path: Path) -> None:
    launcher = tmp_path / "torchrun.log"
    launcher.write_text(
        "[2024-05-01 10:00:00,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
        "(exitcode: -9) local_rank: 1 (pid: 1532) of binary: /usr/bin/python3\n"
    )
    out = _json(run_oomwatch("diagnose", "-f", "json", str(launcher), str(K002)))
    victim = out["victims"][0]
    assert (victim["pid"], victim["rank"], victim["role"]) == (1532, 1, "rank")
    assert {e["file"] for e in victim["evidence"]} == {str(launcher), str(K002)}


def test_stdin_only_once() -> None:
    r = run_oomwatch("diagnose", "-", "-", stdin=b"")
    assert r.returncode == 2 and "only once" in r.stderr.decode()


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_output_is_deterministic(fmt: str) -> None:
    a = run_oomwatch("diagnose", "-f", fmt, str(K002))
    b = run_oomwatch("diagnose", "-f", fmt, str(K002))
    assert a.stdout == b.stdout and a.returncode == b.returncode == 3


def test_line_made_of_every_anchor_is_bounded(tmp_path: Path) -> None:
    """A hostile line that contains every anchor many times, so every pattern runs on 1 MiB."""
    from oomwatch.engine.kernel_report import KERNEL_ANCHORS
    from oomwatch.engine.rules.loader import load_rules

    anchors = sorted({a for fp in load_rules().fingerprints for a in fp.anchors} | set(KERNEL_ANCHORS))
    unit = (" (((( " + " ".join(anchors) + " 9999999999 ::: ").encode()
    hostile = tmp_path / "hostile.log"
    hostile.write_bytes((unit * ((1 << 20) // len(unit) + 1))[: 1 << 20] + b"\n" + b"step 1 loss 0.5\n")
    start = time.monotonic()
    r = run_oomwatch("diagnose", "-f", "json", str(hostile), timeout=300)
    elapsed = time.monotonic() - start
    assert b"Traceback" not in r.stderr, r.stderr.decode()[-2000:]
    assert r.returncode in (0, 3, 4)
    assert json.loads(r.stdout)["inputs"][0]["lines"] == 2
    assert elapsed < 120, f"{elapsed:.0f} s on one hostile line"


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """Inputs over 50 MB show progress on stderr when it is a terminal, and never in pipes."""
    import pty

    big = tmp_path / "big.log"
    line = b"{'loss': 0.1234, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
    with big.open("wb") as f:
        for _ in range((60 << 20) // (len(line) * 1000) + 1):
            f.write(line * 1000)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "oomwatch", "diagnose", "-f", "json", str(big)],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    os.close(follower)
    out, _ = proc.communicate(timeout=120)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.returncode == 0 and json.loads(out)["verdict"] == "no_oom_evidence"
    assert b"big.log" in seen and b"%" in seen
    piped = run_oomwatch("diagnose", str(big))
    assert piped.stderr == b""
