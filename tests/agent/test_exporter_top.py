"""The exposition and `oomwatch top` on a real process tree: names, labels, promtool, JSON."""

from __future__ import annotations

import gzip
import json
import os
import subprocess

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oomwatch.agent.sample.sampler import Sampler
from oomwatch.agent.serve.exporter import AgentCollector, RenderCache, registry_for
from oomwatch.agent.serve.series import PROCESS_LABELS, exported_processes
from oomwatch.agent.tick import ProcessSample, Tick
from oomwatch.agent.top import History
from oomwatch.render.top import render_text
from tests.agent.proctree import MIB, rank_tree
from tests.conftest import require_tool, run_oomwatch

GIB = 1 << 30


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
        collector = AgentCollector(top_n=3, top_workers=2)  # both workers per process
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
    assert len(exported) == sum(1 for p in exported_processes(tick, 3, 2) if p.rss is not None)
    ok = {s.labels["collector"]: s.value for s in samples["oomwatch_collector_success"]}
    assert ok == {"processes": 1, "smaps": 1, "cgroups": 1, "node": 1}
    assert samples["oomwatch_node_memory_total_bytes"][0].value > 0
    assert any(s.labels["training_job"] == tree.run_id for s in samples["oomwatch_cgroup_memory_usage_bytes"])


def test_workers_beyond_the_top_are_folded_into_their_ranks_aggregates():
    with rank_tree(size_mib=32, workers=4) as tree:
        (_, tick), _ = _ticks()
        collector = AgentCollector(top_n=3)  # top_workers 1
        collector.update(tick)
        text = generate_latest(registry_for(collector)).decode()
    samples = _samples(text)
    workers = [p for p in tick.processes if p.pid in tree.workers]
    assert len(workers) == 4 and all(p.uss is not None for p in workers)
    per_pid = {int(s.labels["pid"]) for s in samples["oomwatch_process_uss_bytes"]}
    assert tree.rank in per_pid and per_pid & set(tree.workers) == {tree.workers[0]}  # the writer: the top USS
    group = {"training_job": tree.run_id, "rank": "0", "role": "dataloader_worker"}

    def role(name, stat=None):
        found = [s.value for s in samples[f"oomwatch_role_{name}"]
                 if s.labels == (group if stat is None else {**group, "stat": stat})]  # fmt: skip
        assert len(found) == 1, (name, stat, found)
        return found[0]

    assert role("processes") == 4
    for name, attr in (("resident_bytes", "rss"), ("uss_bytes", "uss"), ("anon_bytes", "anon")):
        assert role(name, "sum") == sum(getattr(p, attr) for p in workers)
        assert role(name, "max") == max(getattr(p, attr) for p in workers)
    for name, attr in (("pss_bytes", "pss"), ("file_bytes", "file"), ("shmem_bytes", "shmem"), ("swap_bytes", "swap")):
        assert role(name, "sum") == sum(getattr(p, attr) for p in workers)
    kinds = {s.labels["kind"]: s.value for s in samples["oomwatch_processes"]}
    assert kinds["folded"] >= 3  # this job's 3; any other job on the machine adds its own


def test_series_are_bounded_by_ranks_and_roles_not_processes():
    def tick(workers):
        procs = [ProcessSample(pid=1, ppid=0, comm="torchrun", role="launcher", job="j", rank=None, local_rank=None,
                               state="S", rss=MIB, anon=MIB, file=0, shmem=0, swap=0, hwm=MIB)]  # fmt: skip
        pid = 100
        for r in range(8):
            procs.append(ProcessSample(pid=10 + r, ppid=1, comm="python", role="rank", job="j", rank=r, local_rank=r,
                                       state="S", rss=GIB, anon=GIB, file=0, shmem=0, swap=0, hwm=GIB, uss=GIB))  # fmt: skip
            for role in ["dataloader_worker"] * workers + ["manager"]:
                pid += 1
                procs.append(ProcessSample(pid=pid, ppid=10 + r, comm="pt_data_worker", role=role, job="j", rank=r,
                                           local_rank=r, state="S", rss=GIB, anon=GIB, file=0, shmem=0, swap=0,
                                           hwm=GIB, uss=pid * MIB, pss=MIB))  # fmt: skip
        return Tick(time=1.0, duration=0.01, processes=tuple(procs))

    def series(workers):
        collector = AgentCollector(top_n=0)
        collector.update(tick(workers))
        text = generate_latest(registry_for(collector)).decode()
        return [line for line in text.splitlines() if line.startswith(("oomwatch_process_", "oomwatch_role_"))]

    few, many = series(8), series(200)
    assert len(few) == len(many) <= 400  # 8 ranks x (8 or 200 workers + a manager): the same series
    top = [line for line in many if line.startswith("oomwatch_process_uss_bytes") and "dataloader_worker" in line]
    assert len(top) == 8 and all(f'pid="{200 * r + r + 100 + 200}"' in line for r, line in enumerate(top))


def test_the_exposition_is_rendered_once_per_tick():
    calls = []

    def encoder(registry):
        calls.append(1)
        return generate_latest(registry)

    collector = AgentCollector()
    cache = RenderCache(registry_for(collector), collector.version)
    collector.update(Tick(time=1.0, duration=0.01, processes=()))
    first = cache.get(encoder, False)
    assert cache.get(encoder, False) is first and gzip.decompress(cache.get(encoder, True)) == first
    assert len(calls) == 1
    collector.update(Tick(time=2.0, duration=0.01, processes=()))
    assert cache.get(encoder, True) and len(calls) == 2
    collector.forecasts = []  # replaced whole, as each tick does: a new version
    cache.get(encoder, False)
    assert len(calls) == 3
    # a configuration reloaded between ticks shows at the next scrape, not the next tick
    collector.budget_fraction = 0.25
    assert b"oomwatch_smaps_budget_ratio 0.25" in cache.get(encoder, False) and len(calls) == 4


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
    from oomwatch.agent.tick import CgroupSample, ProcessSample, Tick

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
