"""SIGKILL deaths the kernel's OOM killer did not cause: when memory counts as short (pure), then for
real — the agent running, a DataLoader-like job, its worker killed with ``kill -9`` (memory not
short: ``sigkill_unexplained``), then the job in a v1 memory cgroup at 95% of its limit killed the way
a userspace OOM killer does it (``userspace_oom_kill``), the whole rest of a job killed at once (one
incident, the largest named), and the agent's own children never mistaken for a job."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from oomwatch.agent.incidents.sigkills import SHORT_CGROUP, memory_short
from oomwatch.agent.tick import CgroupSample, NodeSample, Tick
from oomwatch.procfs.pressure import Pressure, PressureLine
from tests.agent.agentproc import AgentProcess, wait_metric, wait_ticks
from tests.cgroup_util import memory_cgroup
from tests.conftest import require_root_cgroup, skip_or_fail

MIB = 1 << 20
GIB = 1 << 30


def _node(available: int, swap_used: float = 0.0, full: float = 0.0) -> NodeSample:
    psi = Pressure(PressureLine(full, full, full, 0), PressureLine(full, full, full, 0))
    return NodeSample(mem_total=64 * GIB, mem_available=available, swap_total=4 * GIB,
                      swap_free=int(4 * GIB * (1 - swap_used)), oom_kills=0, pressure=psi)  # fmt: skip


def _cg(anon: int, jobs=("train",)) -> CgroupSample:
    return CgroupSample(path="/job", version=1, usage=anon, limit=GIB, effective_limit=GIB, peak=None, anon=anon,
                        file=0, shmem=0, swap=0, oom_kills=0, pressure=None, jobs=jobs)  # fmt: skip


def test_when_memory_counts_as_short():
    def tick(node, cgroups=()):
        return Tick(time=0.0, duration=0.0, processes=(), node=node, cgroups=tuple(cgroups))

    assert memory_short(None, "train") is None
    assert memory_short(tick(_node(32 * GIB), [_cg(GIB // 2)]), "train") is None
    assert memory_short(tick(_node(4 * GIB)), "train") == "the node had 4.0 GiB of 64.0 GiB available"
    assert memory_short(tick(_node(32 * GIB, swap_used=0.95)), "train") == "swap was 95% used"
    assert "stalled on memory 31%" in (memory_short(tick(_node(32 * GIB, full=31.0)), "train") or "")
    near = tick(_node(32 * GIB), [_cg(int(0.93 * GIB))])
    assert memory_short(near, "train") == "cgroup /job held 952.3 MiB of its 1.0 GiB limit"
    assert memory_short(near, "other-job") is None  # another job's cgroup says nothing of this one


JOB = """
import os, sys, time
if len(sys.argv) > 1:
    open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
print("config: dataset_path=/data/arrow keep_in_memory=True num_workers=2", file=sys.stderr, flush=True)
hold = bytearray(int(os.environ.get("HOLD_MIB", "0")) << 20)
for i in range(0, len(hold), 4096):
    hold[i] = 1
kids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        open("/proc/self/comm", "w").write("pt_data_worker")
        mine = bytearray((i + 1) * (8 << 20))
        for j in range(0, len(mine), 4096):
            mine[j] = 1
        time.sleep(600)
        os._exit(0)
    kids.append(pid)
print(" ".join(map(str, kids)), flush=True)
for k in kids:
    try:
        os.waitpid(k, 0)
    except ChildProcessError:
        pass
time.sleep(600)
"""


def _start_job(tmp_path: Path, *args: str, hold_mib: int = 0) -> tuple[subprocess.Popen, list[int]]:
    """The job, its stderr (its log: it prints its configuration there) to ``tmp_path/train.log``."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, HOLD_MIB=str(hold_mib))
    with open(tmp_path / "train.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=log, text=True,
                                env=env)  # fmt: skip
    assert proc.stdout is not None
    workers = [int(x) for x in proc.stdout.readline().split()]
    assert len(workers) == 2
    return proc, workers


def _end(proc: subprocess.Popen | None) -> None:
    """The job, killed if still running (by its pid) and its output pipe closed."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _incidents(state: Path, pids: set[int], n: int, timeout: float = 5.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    found: list[dict] = []
    while time.monotonic() < deadline:
        d = state / "incidents"
        docs = [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.is_dir() else []
        found = [doc for doc in docs if doc["victim"]["pid"] in pids]  # other kills on the machine show too
        if len(found) >= n:
            break
        time.sleep(0.05)
    return found


def _require_exit_events(agent: AgentProcess) -> None:
    if any("no process exit events" in line for line in agent.lines):
        skip_or_fail("no process exit events here: " + "".join(agent.lines))


def test_kill_9_of_a_worker_and_then_of_the_rest_of_the_job(tmp_path: Path):
    require_root_cgroup()
    state = tmp_path / "state"
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state))
    stack = contextlib.ExitStack()
    proc = None
    try:
        wait_ticks(agent)
        cg = stack.enter_context(memory_cgroup(None, name="oomwatch-sigkill"))  # a job's own cgroup, no limit
        proc, workers = _start_job(tmp_path, str(cg))
        wait_metric(agent, rf'pid="{workers[1]}",[^}}]*role="dataloader_worker"')
        killed_at = time.monotonic()
        os.kill(workers[0], signal.SIGKILL)
        (doc,) = _incidents(state, {workers[0]}, 1)
        written = time.monotonic() - killed_at
        d = doc["diagnosis"]
        assert d["verdict"] == "sigkill_unexplained" and d["confirmed"] is True, d
        assert doc["victim"]["role"] == "dataloader_worker" and doc["kernel_lines"] == []
        assert "killed by SIGKILL" in d["summary"] and "memory was not short" in d["summary"], d["summary"]
        assert "wait status 0x9" in d["notes"][0], d["notes"]
        assert 0 < doc["latency_seconds"] < 1.0, doc["latency_seconds"]  # the exit event's kernel time to written
        assert d["next_steps"], "the verdict's next steps come from rules/verdicts.yaml"
        kills = [x for x in agent.scrape().splitlines() if x.startswith("oomwatch_oom_kills_total{")]
        assert any('verdict="sigkill_unexplained"' in k and 'role="dataloader_worker"' in k for k in kills), kills
        text = (state / "incidents" / f"{doc['id']}.txt").read_text()
        said = " ".join(line.strip() for line in text.split("\n\n")[0].splitlines()[1:])  # wrapped to 100 columns
        assert "was killed by SIGKILL, not by the kernel's OOM killer" in said, text
        assert all(len(line) <= 100 for line in text.splitlines()), text
        print(f"kill -9 to incident: {written:.2f} s (latency {doc['latency_seconds']} s)")

        # the rest of the job at once (a container kill): one incident, the largest process named
        os.kill(proc.pid, signal.SIGKILL)
        os.kill(workers[1], signal.SIGKILL)
        proc.wait(timeout=10)
        (doc,) = _incidents(state, {proc.pid, workers[1]}, 1)
        time.sleep(1.0)
        assert len(_incidents(state, {proc.pid, workers[1]}, 2, timeout=0.1)) == 1  # not one per process
        assert "1 other process of its cgroup died of SIGKILL" in doc["diagnosis"]["summary"], doc["diagnosis"]
    finally:
        _end(proc)
        agent.stop()
        stack.close()
    _require_exit_events(agent)


def _wait_cgroup_anon(agent: AgentProcess, name: str, at_least: float, timeout: float = 30.0) -> None:
    """Until the agent has seen the cgroup ``name`` hold ``at_least`` anonymous bytes."""
    import re

    deadline = time.monotonic() + timeout
    seen = 0.0
    while time.monotonic() < deadline:
        values = re.findall(rf'^oomwatch_cgroup_memory_anon_bytes\{{[^}}]*cgroup="[^"]*{name}[^"]*"[^}}]*\}} (\S+)',
                            agent.scrape(), re.M)  # fmt: skip
        seen = max([float(v) for v in values] + [seen])
        if seen >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError(f"cgroup {name} held {seen:.0f} bytes, never {at_least:.0f}")


def test_sigkill_while_the_jobs_cgroup_is_near_its_limit_is_a_userspace_oom_kill(tmp_path: Path):
    require_root_cgroup()
    state = tmp_path / "state"
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state))
    proc = None
    try:
        wait_ticks(agent)
        with memory_cgroup(160 * MIB, name="oomwatch-sigkill") as cg:
            proc, workers = _start_job(tmp_path, str(cg), hold_mib=120)  # + workers' 8 and 16 MiB + python: 94%
            wait_metric(agent, rf'pid="{workers[1]}",[^}}]*role="dataloader_worker"')
            _wait_cgroup_anon(agent, "oomwatch-sigkill", SHORT_CGROUP * 160 * MIB)  # allocated (slow when busy)
            time.sleep(0.5)
            os.kill(workers[1], signal.SIGKILL)  # as earlyoom or systemd-oomd would: the signal, no kernel report
            (doc,) = _incidents(state, {workers[1]}, 1)
            proc.kill()
            proc.wait()
    finally:
        _end(proc)
        agent.stop()
    _require_exit_events(agent)
    d = doc["diagnosis"]
    assert d["verdict"] == "userspace_oom_kill", d
    assert "memory was short then (cgroup " in d["summary"] and "limit" in d["summary"], d["summary"]
    assert any("earlyoom" in step or "systemd-oomd" in step for step in d["next_steps"]), d["next_steps"]
    # the job's log (its stderr, a file) was read: what it printed names the cause
    assert [o["path"] for o in doc["job_output"]] == [str(tmp_path / "train.log")], doc["job_output"]
    top = d["causes"][0]
    assert top["id"] == "keep_in_memory_duplication", [(c["id"], c["confidence"]) for c in d["causes"]]
    assert any(e["file"].startswith("job output ") and "keep_in_memory=True" in e["text"] for e in top["evidence"])


class _FakeIncidents:
    """What Sigkills reads of the incidents: the samples, and which pids the kernel log has told of."""

    def __init__(self, victim) -> None:
        self.victim = victim
        self.last_tick = Tick(time=time.time(), duration=0.0, processes=(), node=_node(32 * GIB), cgroups=())
        self.told: set[int] = set()
        self.written: list[tuple[float, list[int]]] = []

    def last_sample(self, pid):
        return self.victim if pid == self.victim.pid else None

    def ticks_since(self, since):
        return [self.last_tick]

    def reported(self, pid):
        return pid in self.told

    def on_sigkill(self, victims, *_):
        self.written.append((time.monotonic(), [v.pid for v in victims]))


def _exit(pid: int):
    from oomwatch.agent.watch.exits import ProcExit

    return ProcExit(pid=pid, tgid=pid, exit_code=signal.SIGKILL, exit_signal=signal.SIGKILL,
                    timestamp_ns=time.monotonic_ns())  # fmt: skip


def _sample(pid: int):
    from oomwatch.agent.tick import ProcessSample

    return ProcessSample(pid=pid, ppid=1, comm="pt_data_worker", role="dataloader_worker", job="train", rank=None,
                         local_rank=None, state="S", rss=64 * MIB, anon=60 * MIB, file=4 * MIB, shmem=0, swap=0,
                         hwm=64 * MIB, cgroup="/job")  # fmt: skip


def test_a_report_late_by_seconds_is_waited_for_when_the_oom_kill_count_rose():
    """The count rose: the kill was an OOM kill whose report is on its way (through journald it came
    more than 3 s late on CI); the SIGKILL is no incident of its own once the report came."""
    from oomwatch.agent.incidents.sigkills import Sigkills

    kills = [0]
    fake = _FakeIncidents(_sample(4242))
    sig = Sigkills(fake, kernel_log=True, grace=0.1, late_grace=8.0, node_oom_kills=lambda: kills[0])
    fake.last_tick = dataclasses.replace(fake.last_tick, node=dataclasses.replace(fake.last_tick.node, oom_kills=0))
    sig.on_exit(_exit(4242))
    kills[0] = 1  # the kernel counted it
    threading.Timer(4.0, fake.told.add, (4242,)).start()  # its report, 4 s late
    time.sleep(5.0)
    assert fake.written == [] and not sig._pending


def test_a_sigkill_with_no_report_is_written_after_the_grace_or_the_late_grace():
    from oomwatch.agent.incidents.sigkills import Sigkills

    kills = [0]
    fake = _FakeIncidents(_sample(4242))
    fake.last_tick = dataclasses.replace(fake.last_tick, node=dataclasses.replace(fake.last_tick.node, oom_kills=0))
    sig = Sigkills(fake, kernel_log=True, grace=0.1, late_grace=1.0, node_oom_kills=lambda: kills[0])
    started = time.monotonic()
    sig.on_exit(_exit(4242))  # the count did not rise: not an OOM kill, written after the grace
    time.sleep(0.6)
    assert [pids for _, pids in fake.written] == [[4242]] and fake.written[0][0] - started < 0.5
    kills[0] = 1  # now it rose (another process's OOM kill, say) and no report names this one
    started = time.monotonic()
    sig.on_exit(_exit(4242))
    time.sleep(0.5)
    assert len(fake.written) == 1  # still waiting for a report
    time.sleep(1.0)
    assert len(fake.written) == 2 and 0.9 < fake.written[1][0] - started < 1.4
