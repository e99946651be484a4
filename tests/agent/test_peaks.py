"""Between the sampler's ticks, the highest memory of each process and cgroup (agent/peaks.py): files read
every 20 ms, their highest handed to the next tick; and a real transient that `oomwatch run`'s ticks miss."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from oomwatch.agent.peaks import PeakWatch, unreclaimable
from oomwatch.agent.run import run_command
from oomwatch.paths import HostPaths

MIB = 1 << 20


def test_the_highest_since_the_last_take_is_handed_on_and_a_gone_pid_is_skipped(tmp_path: Path):
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "7").mkdir(parents=True)
    (cg / "job").mkdir(parents=True)
    watch = PeakWatch(HostPaths(proc=proc, cgroup=cg), page_size=4096)
    watch.watch([7, 8], {"/job": Path("job")})  # 8 has no /proc entry: it exited

    def at(resident: int, shared: int, anon: int, shmem: int) -> None:
        (proc / "7" / "statm").write_text(f"90000 {resident} {shared} 1 0 80000 0\n")
        (cg / "job" / "memory.stat").write_text(f"cache 0\nrss {anon}\nshmem {shmem}\ntotal_rss {anon}\n"
                                                f"total_shmem {shmem}\n")  # fmt: skip

    for resident, shared, anon in ((1000, 200, 10 * MIB), (5000, 200, 30 * MIB), (2000, 200, 20 * MIB)):
        at(resident, shared, anon, MIB)
        watch.read_once()
    assert watch.take() == ({7: 4800 * 4096}, {"/job": 31 * MIB})
    assert watch.take() == ({}, {})  # nothing read since
    at(1500, 200, 5 * MIB, 0)
    watch.read_once()
    assert watch.take() == ({7: 1300 * 4096}, {"/job": 5 * MIB})
    (proc / "7" / "statm").write_text("90000\n")  # cut short, or not numbers: no reading, not a zero
    (cg / "job" / "memory.stat").write_text("cache 0\n")
    watch.read_once()
    (proc / "7" / "statm").write_text("90000 x 200 1 0 80000 0\n")
    watch.read_once()
    assert watch.take() == ({}, {})


def test_memory_stat_of_either_version_gives_anon_and_shmem():
    assert unreclaimable("anon 100\nfile 7\nshmem 20\n") == 120  # v2
    assert unreclaimable("rss 5\nshmem 1\ntotal_rss 100\ntotal_shmem 20\n") == 120  # v1, with its children
    assert unreclaimable("cache 4\n") is None


SPIKE = """
import sys, time
print("loading", flush=True)
time.sleep(0.6)
buf = b"x" * (200 << 20)  # every page written: 200 MiB of anonymous memory for a quarter of a second
time.sleep(0.25)
del buf
time.sleep(2.6)
"""


def test_a_transient_the_ticks_miss_is_in_the_report():
    out, err = io.BytesIO(), io.BytesIO()
    result = run_command([sys.executable, "-c", SPIKE], interval=3.0, stdout=out, stderr=err, read_code=False)
    assert result.returncode == 0, err.getvalue()
    samples = result.recorder.samples()
    cols = samples["process_columns"]
    (mine,) = [p for p in samples["processes"] if p["comm"].startswith("python")]
    points = [dict(zip(cols, pt, strict=True)) for pt in mine["points"]]
    assert max(p["anon"] for p in points) < 100 * MIB  # the ticks (every 3 s) did not see it
    assert max(p["anon_peak"] for p in points) >= 195 * MIB  # the readings between them did
    assert all(p["anon_peak"] >= p["anon"] for p in points)
    assert result.recorder.seen[mine["pid"]].peak["anon"] >= 195 * MIB  # and so does the process's peak
    if samples["cgroup"] is not None:  # the test runs in a cgroup that holds the job's memory
        top = max(dict(zip(samples["cgroup_columns"], pt, strict=True))["unreclaimable_peak"]
                  for pt in samples["cgroup"]["points"])  # fmt: skip
        assert top >= 195 * MIB
