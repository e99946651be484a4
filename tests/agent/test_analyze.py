"""The live analyzers on exact rows (what each signal needs and what it says), then end to end: the
agent running while a real scenario workload is OOM-killed in a cgroup; the incident's top cause
comes from the agent's history (copy-on-write: the workers' USS growth is quoted)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from oomwatch.agent.analyze import SOURCE, analyze
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.conftest import ROOT, require_root_cgroup

MIB = 1 << 20


def row(t, pid, role, rss, anon, uss, rank=0, comm="python"):
    return {"time": t, "pid": pid, "role": role, "rank": rank, "comm": comm, "rss": rss, "anon": anon, "uss": uss}


def test_copy_on_write_defeat_uss_up_rss_flat():
    rows = []
    for i in range(5):
        t = 100.0 + i
        rows.append(row(t, 10, "rank", 400 * MIB, 380 * MIB, 390 * MIB))
        for w in (11, 12):
            rows.append(
                row(t, w, "dataloader_worker", 400 * MIB, 380 * MIB, 5 * MIB + i * 60 * MIB, comm="pt_data_worker")
            )
    live = analyze(rows, victim_pid=10)
    f = live.facts
    assert f["history.workers"] == 2
    assert f["history.worker_private_growth_ratio"] == 49.0  # 245 MiB / 5 MiB
    assert f["history.worker_rss_growth_ratio"] == 1.0
    assert f["history.worker_uss_growth_bytes"] == 240 * MIB
    lines = [e.text for e in live.evidence["workers_uss"]]
    assert len(lines) == 2 and "USS 5.0 MiB → 245.0 MiB while RSS 400.0 MiB → 400.0 MiB" in lines[0]
    assert all(e.file == SOURCE for e in live.evidence["workers_uss"])
    assert len({e.line for e in live.evidence["workers_uss"]}) == 2  # distinct: evidence is deduplicated by line


def test_unbounded_growth_and_its_fit():
    rows = [row(float(t), 20, "dataloader_worker", (50 + 30 * t) * MIB, (40 + 30 * t) * MIB, None) for t in range(10)]
    f = analyze(rows, victim_pid=20).facts
    assert f["history.victim_growth_ratio"] == round(310 / 40, 2)
    assert f["history.victim_growth_r2"] == 1.0
    assert "history.workers" not in f  # no USS: nothing said about copy-on-write


def test_similar_ranks_and_a_growing_manager():
    rows = []
    for t in (0.0, 5.0):
        for pid, uss in ((1, 800 * MIB), (2, 820 * MIB), (3, 790 * MIB), (4, 100 * MIB)):
            rows.append(row(t, pid, "rank", uss, uss, uss, rank=pid))
        rows.append(row(t, 9, "manager", 0, (10 if t == 0 else 300) * MIB, None))
    f = analyze(rows).facts
    assert f["history.ranks"] == 4 and f["history.ranks_similar"] == 3
    assert f["history.manager_growth_bytes"] == 290 * MIB


def test_nothing_from_too_little():
    assert analyze([]).facts == {}
    one = [row(1.0, 5, "dataloader_worker", MIB, MIB, MIB)]
    assert analyze(one, 5).facts == {}


def _run_scenario_under_agent(tmp_path: Path, name: str) -> dict:
    state = tmp_path / "state"
    # this scenario's workers live about a second: sample them often, their smaps every tick
    agent = AgentProcess(
        "--listen", "127.0.0.1:0", "--interval", "0.1", "--pss-budget", "1.0", "--state-dir", str(state)
    )
    try:
        wait_ticks(agent)
        done = subprocess.run(
            [sys.executable, "-m", "scenarios", "run", name, "--out", str(tmp_path / "capture")],
            capture_output=True, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert done.returncode in (0, 3), done.stderr.decode()[-3000:]
        deadline = time.monotonic() + 10
        found: list[Path] = []
        while time.monotonic() < deadline and not found:
            found = sorted((state / "incidents").glob("*.json"))
            time.sleep(0.1)
        assert found, "".join(agent.lines)
        return json.loads(found[0].read_text())
    finally:
        agent.stop()


def test_incident_for_copy_on_write_quotes_the_workers_uss_growth(tmp_path: Path):
    require_root_cgroup()
    doc = _run_scenario_under_agent(tmp_path, "cow_refcount")
    top = doc["diagnosis"]["causes"][0]
    assert top["id"] == "cow_refcount_defeat", doc["diagnosis"]["causes"]
    quoted = [e for e in top["evidence"] if e["file"] == SOURCE]
    assert quoted and "USS" in quoted[0]["text"] and "while RSS" in quoted[0]["text"], top
    print("copy-on-write incident evidence:", *[e["text"] for e in quoted], sep="\n  ")
