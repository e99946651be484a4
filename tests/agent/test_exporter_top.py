"""The exposition and `oomwatch top` on a real process tree: names, labels, promtool, JSON."""

from __future__ import annotations

import json
import os
import subprocess

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oomwatch.agent.exporter import PROCESS_LABELS, AgentCollector, exported_processes, registry_for
from oomwatch.agent.sampler import Sampler
from oomwatch.agent.top import History, render_text
from tests.agent.proctree import MIB, rank_tree
from tests.conftest import require_tool, run_oomwatch


def _ticks(n=2, **kw):
    sampler = Sampler(pss_budget=1.0, gpu=False, **kw)
    try:
        ticks = []
        for _ in range(n):
            ticks.append(sampler.tick())
        return ticks, sampler.notices.all
    finally:
        sampler.close()


def _samples(text):
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_exposition_names_labels_and_values():
    with rank_tree(size_mib=32, workers=2) as tree:
        (_, tick), _ = _ticks()
        collector = AgentCollector(top_n=3)
        collector.update(tick)
        text = generate_latest(registry_for(collector)).decode()
    samples = _samples(text)
    # the agent's own series, and its process's (prometheus_client's standard process_* series)
    assert all(name.startswith(("oomwatch_", "process_")) for name in samples)
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} <= set(samples)
    build = samples["oomwatch_build_info"][0]
    assert build.labels["version"] and build.value == 1
    uss = {int(s.labels["pid"]): s for s in samples["oomwatch_process_uss_bytes"]}
    for pid in (tree.rank, *tree.workers):
        s = uss[pid]
        assert set(s.labels) == set(PROCESS_LABELS)
        assert s.labels["training_job"] == tree.run_id and s.labels["rank"] == "0"
    assert uss[tree.rank].labels["role"] == "rank"
    assert {uss[w].labels["role"] for w in tree.workers} == {"dataloader_worker"}
    assert uss[tree.workers[0]].value > 24 * MIB > uss[tree.workers[1]].value  # the writer un-shared its pages
    rss = {int(s.labels["pid"]): s.value for s in samples["oomwatch_process_resident_bytes"]}
    assert rss[tree.workers[1]] > 24 * MIB  # RSS counts the shared pages: it cannot tell them apart
    # per-process series: the job's processes plus top_n others only
    exported = {int(s.labels["pid"]) for s in samples["oomwatch_process_resident_bytes"]}
    jobs = {p.pid for p in tick.processes if p.in_job and p.rss is not None}  # zombies have no figures
    assert jobs <= exported and len(exported - jobs) <= 3
    assert len(exported) == sum(1 for p in exported_processes(tick, 3) if p.rss is not None)
    ok = {s.labels["collector"]: s.value for s in samples["oomwatch_collector_success"]}
    assert ok == {"processes": 1, "smaps": 1, "cgroups": 1, "node": 1}
    assert samples["oomwatch_node_memory_total_bytes"][0].value > 0
    assert any(s.labels["training_job"] == tree.run_id for s in samples["oomwatch_cgroup_memory_usage_bytes"])


def test_promtool_accepts_the_exposition(tmp_path):
    promtool = require_tool("promtool", "apt-get install prometheus")
    with rank_tree(size_mib=8, workers=1):
        (_, tick), _ = _ticks()
    collector = AgentCollector()
    collector.update(tick)
    text = generate_latest(registry_for(collector))
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done


def test_top_text_groups_job_rank_workers():
    with rank_tree(size_mib=32, workers=2) as tree:
        ticks, notices = _ticks()
        history = History()
        for t in ticks:
            history.add(t)
        text = render_text(ticks[-1], history, notices)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith(f"job {tree.run_id}:"))
    assert "1 rank, 2 workers" in lines[header]
    rows = lines[header + 1 :]
    rank_row = next(i for i, line in enumerate(rows) if line.split()[:2] == [str(tree.rank), "rank"])
    for w in tree.workers:
        row = next(i for i, line in enumerate(rows) if line.split()[:1] == [str(w)])
        assert row > rank_row and "└ worker" in rows[row]


def test_top_once_json_cli():
    with rank_tree(size_mib=32, workers=2) as tree:
        done = run_oomwatch("top", "--once", "--format", "json", "--interval", "1.1", timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "oomwatch.top/v1"
    job = next(j for j in doc["jobs"] if j["job"] == tree.run_id)
    procs = {p["pid"]: p for p in job["processes"]}
    assert procs[tree.rank]["role"] == "rank" and procs[tree.rank]["rank"] == 0
    writer, reader = procs[tree.workers[0]], procs[tree.workers[1]]
    assert writer["role"] == reader["role"] == "dataloader_worker"
    assert writer["uss_bytes"] > 24 * MIB > reader["uss_bytes"]
    # two samples 1.1 s apart: growth is known (idle processes: about zero)
    assert writer["rss_growth_bytes_per_minute"] is not None
    assert abs(writer["rss_growth_bytes_per_minute"]) < 8 * MIB


def test_top_live_on_a_terminal_redraws_and_stops_on_ctrl_c():
    import pty
    import select
    import signal
    import sys
    import time

    from tests.conftest import ROOT

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "oomwatch", "top", "--interval", "0.3"],
        stdout=follower, stderr=follower, stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    os.close(follower)
    out = b""
    try:
        deadline = time.monotonic() + 30
        while out.count(b"\x1b[H\x1b[2J") < 3 and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                out += os.read(leader, 65536)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    assert out.count(b"\x1b[H\x1b[2J") >= 3, out[-2000:]
    assert b"oomwatch top" in out and b"Traceback" not in out


def test_promtool_accepts_hostile_label_values(tmp_path):
    """Label values are what processes named themselves: quotes, backslashes, newlines, escapes and
    bidi overrides in a comm, a run id and a cgroup name stay inside their label (the exposition
    escapes them) and come back as they were; promtool accepts the page."""
    from oomwatch.agent.model import CgroupSample, ProcessSample, Tick

    promtool = require_tool("promtool", "apt-get install prometheus")
    job = 'run"} 1\nfake_metric{a="b'
    comm = "py\\x\x1b]0;pwned\x07\r\u202e"
    path = '/kubepods/pod"\n\\c'
    procs = tuple(
        ProcessSample(
            pid=pid,
            ppid=1,
            comm=comm,
            role=role,
            job=job,
            rank=0,
            local_rank=0,
            state="S",
            rss=64 * MIB,
            anon=32 * MIB,
            file=MIB,
            shmem=0,
            swap=0,
            hwm=64 * MIB,
            uss=30 * MIB,
            pss=31 * MIB,
            cgroup=path,
        )  # fmt: skip
        for pid, role in ((10, "rank"), (11, "dataloader_worker"))
    )
    cgroup = CgroupSample(path=path, version=2, usage=MIB, limit=2 * MIB, effective_limit=2 * MIB, peak=None,
                          anon=MIB, file=0, shmem=0, swap=0, oom_kills=1, pressure=None, jobs=(job,))  # fmt: skip
    collector = AgentCollector()
    collector.update(Tick(time=1.0, duration=0.01, processes=procs, cgroups=(cgroup,)))
    text = generate_latest(registry_for(collector))
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done
    samples = _samples(text.decode())
    assert "fake_metric" not in samples
    uss = [s for s in samples["oomwatch_process_uss_bytes"] if s.labels["pid"] == "10"]
    assert len(uss) == 1 and uss[0].labels["comm"] == comm and uss[0].labels["training_job"] == job
    assert any(s.labels.get("cgroup") == path for s in samples["oomwatch_cgroup_memory_usage_bytes"])
