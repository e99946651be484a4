"""OOM incidents end to end: the real agent, a real cgroup v1 OOM kill of a DataLoader-like worker,
the incident file within 2 s naming the victim, its role and the verdict, the kill counted in the
metrics; the agent killed with -9 and restarted neither duplicates nor loses an incident."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from oomwatch.agent.watch.spans import kill_reports
from oomwatch.procfs.kmsg import parse_kmsg_record
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.cgroup_util import memory_cgroup
from tests.conftest import FIXTURES, require_root_cgroup, run_oomwatch


def _records(name: str):
    text = (FIXTURES / "captured" / name / "kmsg.txt").read_bytes()
    return [r for r in (parse_kmsg_record(line) for line in text.splitlines()) if r is not None]


def test_kill_reports_from_a_real_capture():
    records = _records("memcg_dataloader_worker")
    reports = kill_reports(records)
    assert len(reports) == 1
    pid, report = reports[0]
    assert "invoked oom-killer" in report[0].text
    assert f"Killed process {pid} " in next(r.text for r in report if "Killed process" in r.text)
    # two reports back to back: each keeps its own header, none overlaps
    twice = records + [r.__class__(r.prefix, r.seq + 100000, r.usec, r.flags, r.text, r.raw) for r in records]
    both = kill_reports(twice)
    assert [p for p, _ in both] == [pid, pid]
    assert both[1][1][0].seq == records[0].seq + 100000


def _hog_script(tmp_path: Path) -> Path:
    from tests.agent.test_run import HOG as SCRIPT

    path = tmp_path / "hog.py"
    path.write_text(SCRIPT)
    return path


def _run_hog(script: Path, limit: int) -> tuple[subprocess.CompletedProcess, float]:
    with memory_cgroup(limit, name="oomwatch-incident") as cg:
        done = subprocess.run([sys.executable, str(script), str(cg)], capture_output=True, timeout=120)
        ended = time.monotonic()
    return done, ended


def _incidents(state: Path, pids: set[int]) -> list[Path]:
    """This test's incidents: the agent reports every OOM kill on the machine, other tests' too."""
    d = state / "incidents"
    found = sorted(d.glob("*.json")) if d.is_dir() else []
    return [p for p in found if json.loads(p.read_text())["victim"]["pid"] in pids]


def _wait_incidents(state: Path, pids: set[int], timeout: float = 10.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _incidents(state, pids)
        if len(found) >= len(pids):
            return found
        time.sleep(0.05)
    return _incidents(state, pids)


def test_incident_for_a_real_oom_kill_and_restart_without_duplicates(tmp_path: Path):
    require_root_cgroup()
    state = tmp_path / "state"
    script = _hog_script(tmp_path)
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state))
    try:
        wait_ticks(agent)
        done, ended = _run_hog(script, 160 << 20)
        assert done.returncode == 1, done.stderr
        workers = {int(m) for m in re.findall(rb"pid (\d+)\) is killed", done.stderr)}
        assert len(workers) == 2
        found = _wait_incidents(state, workers)
        appeared = time.monotonic()
        assert len(found) == 2, [p.name for p in found]
        docs = [json.loads(p.read_text()) for p in found]
        for doc in docs:
            assert doc["schema"] == "oomwatch.incident/v1"
            assert doc["victim"]["pid"] in workers
            assert doc["victim"]["role"] == "dataloader_worker"
            assert doc["diagnosis"]["verdict"] == "cgroup_oom"
            assert doc["diagnosis"]["victims"][0]["role"] == "dataloader_worker"
            assert 0 <= doc["latency_seconds"] < 2.0, doc["latency_seconds"]
            assert doc["history"]["processes"], "no history of the victim's job in the incident"
            assert Path(str(found[0]).replace(".json", ".txt")).is_file()
        # for root only: incidents describe other users' processes and quote their jobs' output
        for path in [*found, state / "incidents", state / "history.db"]:
            assert path.stat().st_mode & 0o077 == 0, (path, oct(path.stat().st_mode))
        assert appeared - ended < 2.0
        text = agent.scrape()
        kills = [x for x in text.splitlines() if x.startswith("oomwatch_oom_kills_total{")]
        # any kill on the machine is counted (other tests' too): ours is the workers' line
        job = f'training_job="{docs[0]["victim"]["job"]}"'
        ours = [k for k in kills if job in k and 'role="dataloader_worker"' in k and 'verdict="cgroup_oom"' in k]
        assert len(ours) == 1 and ours[0].endswith(" 2.0"), kills
        # each incident of the last hour as a gauge (its time), with its top cause, remedy and id
        for doc in docs:
            line = [x for x in text.splitlines() if x.startswith("oomwatch_incident_timestamp_seconds{")
                    and f'incident="{doc["id"]}"' in x]  # fmt: skip
            top = doc["diagnosis"]["causes"][0]
            assert len(line) == 1 and f'cause="{top["id"]}"' in line[0] and 'remedy="' in line[0], line
            assert abs(float(line[0].rsplit(" ", 1)[1]) - doc["time"]) < 1e-3
        assert re.search(r"^oomwatch_last_oom_kill_timestamp_seconds \S+", text, re.M)
        listed = run_oomwatch("incidents", "--state-dir", str(state))
        assert listed.returncode == 0 and all(str(w).encode() in listed.stdout for w in workers), listed
        shown = run_oomwatch("incidents", "--state-dir", str(state), "show", docs[0]["id"])
        assert shown.returncode == 0 and b"MEMORY LIMIT HIT" in shown.stdout, shown
        # kill -9 the agent (by the pid we started), OOM-kill again while it is down, restart:
        # the new kills are found, the old ones not written twice
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait(timeout=10)
        done, _ = _run_hog(script, 160 << 20)
        assert done.returncode == 1
        later = {int(m) for m in re.findall(rb"pid (\d+)\) is killed", done.stderr)}
        assert len(later) == 2
    finally:
        agent.stop()
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state))
    try:
        found = _wait_incidents(state, workers | later)
        time.sleep(1.0)  # anything duplicated would show by now
        found = _incidents(state, workers | later)
        assert len(found) == 4, [p.name for p in found]
        pids = [json.loads(p.read_text())["victim"]["pid"] for p in found]
        assert len(set(pids)) == 4
        # the restarted agent exports the last hour's incidents, those written before the restart too
        text = agent.scrape()
        for path in found:
            ident = json.loads(path.read_text())["id"]
            assert f'incident="{ident}"' in text, ident
    finally:
        assert agent.stop() == 0


SLOW_HOG = """
import os, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
kids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        open("/proc/self/comm", "w").write("pt_data_worker")
        hog = []
        time.sleep(1.0)  # let the agent see the job and its cgroup first
        while True:
            hog.append(bytearray(8 << 20))
            time.sleep(0.1 * (i + 1))
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
    print(f"DataLoader worker (pid {k}) is killed by signal: Killed.", file=sys.stderr, flush=True)
time.sleep(1.0)  # the parent (and so the cgroup) outlives its workers a little, as a trainer does
sys.exit(1)
"""


def test_without_a_kernel_log_the_counters_still_make_an_incident(tmp_path: Path):
    """No /dev/kmsg and no log file (here: a --kernel-log that does not exist): the cgroup's OOM-kill
    count rises and a worker vanishes in the same sample: an unconfirmed incident names it."""
    require_root_cgroup()
    state = tmp_path / "state"
    script = tmp_path / "slow_hog.py"
    script.write_text(SLOW_HOG)
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state),
                         "--kernel-log", str(tmp_path / "no-such-kern.log"))  # fmt: skip
    try:
        wait_ticks(agent)
        done, _ = _run_hog(script, 160 << 20)
        workers = {int(m) for m in re.findall(rb"pid (\d+)\) is killed", done.stderr)}
        assert len(workers) == 2, done.stderr
        found = _wait_incidents(state, workers)
        assert len(found) == 2, "".join(agent.lines)
        for path in found:
            doc = json.loads(path.read_text())
            d = doc["diagnosis"]
            assert d["verdict"] == "cgroup_oom" and d["confirmed"] is False
            assert doc["victim"]["role"] == "dataloader_worker" and doc["kernel_lines"] == []
            assert "OOM-kill count" in d["summary"] and "not confirmed" in d["summary"]
        others = [p for p in (state / "incidents").glob("*.json") if p not in found]
        assert not others, [p.name for p in others]  # the parent, which exited by itself, is not blamed
    finally:
        agent.stop()
    assert any("incidents from the OOM-kill counters only" in line for line in agent.lines)


def test_a_worker_orphaned_by_its_ranks_death_stays_in_the_job_and_is_no_program_of_its_own(tmp_path: Path):
    from oomwatch.agent.analyze.job import programs
    from oomwatch.agent.incidents.writer import Incidents
    from oomwatch.agent.tick import ProcessSample, Tick

    def sample(pid: int, ppid: int, comm: str, role: str, job: str | None) -> ProcessSample:
        return ProcessSample(pid=pid, ppid=ppid, comm=comm, role=role, job=job, rank=None, local_rank=None,
                             state="S", rss=480 << 20, anon=470 << 20, file=0, shmem=0, swap=0, hwm=480 << 20,
                             cgroup="/job")  # fmt: skip

    incidents = Incidents(tmp_path / "state")
    t0 = 1_700_000_000.0
    main, worker = (
        sample(10, 1, "python", "rank", "tree-10"),
        sample(11, 10, "pt_data_worker", "dataloader_worker", "tree-10"),
    )
    incidents.observe(Tick(time=t0, duration=0.01, processes=(main, worker), cgroups=()))
    # its rank is gone: re-parented to init, the worker is of no job now (and large: a "loner")
    orphan = sample(11, 1, "pt_data_worker", "unknown", None)
    incidents.observe(Tick(time=t0 + 0.2, duration=0.01, processes=(orphan,), cgroups=()))
    assert incidents.seen[11][1].job == "tree-10"
    mates = incidents._cgroup_mates(11)
    assert len(programs(mates, by_job=True)) == 1, programs(mates, by_job=True)
