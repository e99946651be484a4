"""The sampler on real processes: roles, jobs and values against what /proc says, USS telling a
copy-on-write writer from a reader, vanishing PIDs, zombies, hostile names, churn without leaks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from oomwatch.agent.sample.sampler import Sampler
from tests.agent.proctree import MIB, rank_tree, status_kb


def _by_pid(tick):
    return {p.pid: p for p in tick.processes}


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _leaked(sampler, base_fds: int, base_tracked: int) -> int:
    """Descriptors open beyond one per tracked process (other processes may come and go meanwhile)."""
    return (_open_fds() - base_fds) - (len(sampler.table.procs) - base_tracked)


def test_roles_jobs_and_values_match_proc():
    with rank_tree(size_mib=64, workers=2) as tree:
        sampler = Sampler(pss_budget=1.0, gpu=False)
        try:
            sampler.tick()
            tick = sampler.tick()
        finally:
            sampler.close()
        procs = _by_pid(tick)
        rank, writer, reader = procs[tree.rank], procs[tree.workers[0]], procs[tree.workers[1]]
        assert (rank.role, rank.job, rank.rank, rank.local_rank) == ("rank", tree.run_id, 0, 0)
        for w in (writer, reader):
            assert (w.role, w.job, w.rank, w.comm) == ("dataloader_worker", tree.run_id, 0, "pt_data_worker")
            assert w.ppid == tree.rank
        # the processes are idle: what the tick read is what /proc says now
        for p in (rank, writer, reader):
            assert p.rss == status_kb(p.pid, "VmRSS")
            assert p.anon == status_kb(p.pid, "RssAnon")
            assert p.file == status_kb(p.pid, "RssFile")
            assert p.hwm == status_kb(p.pid, "VmHWM")
            assert p.swap == status_kb(p.pid, "VmSwap")
            # its start (field 22 of /proc/PID/stat, after the parenthesised comm): the process, not just its pid
            assert p.start_time == int(Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        # RSS cannot tell them apart (both map the parent's 64 MiB), USS can
        assert writer.rss > 60 * MIB and reader.rss > 60 * MIB
        assert writer.uss > 60 * MIB, writer
        assert reader.uss < 16 * MIB, reader
        assert reader.pss < writer.pss
        assert writer.smaps_age(tick.time) is not None and writer.smaps_age(tick.time) < 5
        assert tick.node is not None and tick.node.mem_total > 0
        assert {c.name for c in tick.collectors} >= {"processes", "smaps", "cgroups", "node"}
        assert all(c.ok for c in tick.collectors), tick.collectors
        # the job's memory cgroup was found and read (this machine: cgroup v1)
        assert any(tree.run_id in c.jobs and c.usage for c in tick.cgroups), tick.cgroups
        # each sample names the cgroup whose memory limit it is under (on a hybrid host the v1 memory
        # line: the v2 line says "/" for every process, and every process would share the victim's limit)
        for p in (rank, writer, reader):
            assert p.cgroup == _memory_line(p.pid), (p.cgroup, Path(f"/proc/{p.pid}/cgroup").read_text())


def _memory_line(pid: int) -> str | None:
    lines = [line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    v1 = [path for _, controllers, path in lines if "memory" in controllers.split(",")]
    v2 = [path for hid, controllers, path in lines if hid == "0" and not controllers]
    return (v1 or v2 or [None])[0]


def test_vanished_processes_are_dropped_and_their_descriptors_closed():
    sampler = Sampler(gpu=False)
    try:
        sampler.tick()
        base_fds, base_tracked = _open_fds(), len(sampler.table.procs)
        procs = [subprocess.Popen(["sleep", "30"]) for _ in range(20)]
        tick = sampler.tick()
        assert {p.pid for p in procs} <= set(_by_pid(tick))
        assert _open_fds() >= base_fds + 20  # one kept status descriptor each
        for p in procs:
            p.kill()
            p.wait()
        tick = sampler.tick()
        assert not {p.pid for p in procs} & set(_by_pid(tick))
        assert _leaked(sampler, base_fds, base_tracked) <= 2
    finally:
        sampler.close()


def test_zombie_and_hostile_name():
    hostile = "foo) Z (\nbar"
    code = (
        "import os, sys, time\n"
        f"open('/proc/self/comm', 'w').write({hostile!r})\n"
        "pid = os.fork()\n"
        "if pid == 0: os._exit(0)\n"
        "print(pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        zombie = int(proc.stdout.readline())
        time.sleep(0.2)
        sampler = Sampler(gpu=False)
        try:
            tick = sampler.tick()
        finally:
            sampler.close()
        procs = _by_pid(tick)
        z = procs[zombie]
        assert z.state == "Z" and z.rss is None and z.anon is None
        parent = procs[proc.pid]
        # the kernel keeps 15 bytes and escapes the newline in status
        assert parent.comm == Path(f"/proc/{proc.pid}/comm").read_text().rstrip("\n").replace("\n", "\\n")
        assert parent.comm.startswith("foo) Z (")
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()


def test_churn_thousands_of_short_lived_processes_no_crash_no_leak():
    sampler = Sampler(gpu=False)
    try:
        sampler.tick()
        base_fds, base_tracked = _open_fds(), len(sampler.table.procs)
        runs = sampler.classify_runs
        churn = subprocess.Popen(["sh", "-c", "i=0; while [ $i -lt 3000 ]; do /bin/true & i=$((i+1)); done; wait"])
        ticks = 0
        seen_max = 0
        while churn.poll() is None:
            tick = sampler.tick()
            ticks += 1
            seen_max = max(seen_max, len(tick.processes))
            assert all(c.ok for c in tick.collectors), tick.collectors
        churn.wait()
        tick = sampler.tick()
        assert ticks >= 3
        assert not any(p.ppid == churn.pid for p in tick.processes)
        assert len(sampler.table.procs) == len(tick.processes)
        assert _leaked(sampler, base_fds, base_tracked) <= 2, (base_fds, _open_fds())
        # shells and /bin/true outside any training job cannot change a role: no re-discovery for them
        # (other processes on the machine may still cause a few)
        assert sampler.classify_runs - runs < ticks / 2, (sampler.classify_runs - runs, ticks)
    finally:
        sampler.close()


def test_pid_reuse_is_never_read_as_the_old_process():
    """A kept descriptor fails once its process is gone, even if the PID now names another process."""
    sampler = Sampler(gpu=False)
    try:
        p = subprocess.Popen(["sleep", "30"])
        sampler.tick()
        tracked = sampler.table.procs[p.pid]
        fd = tracked.fd
        assert fd is not None
        p.kill()
        p.wait()
        try:
            os.pread(fd, 100, 0)
            raise AssertionError("read a gone process's status")
        except ProcessLookupError:
            pass
        sampler.tick()
        assert p.pid not in sampler.table.procs or sampler.table.procs[p.pid] is not tracked
    finally:
        sampler.close()
