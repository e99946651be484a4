"""The live analyzers on exact rows (what each signal needs and what it says), then end to end: the
agent running while a real scenario workload is OOM-killed in a cgroup; each kill the kernel reports
for the scenario's cgroup gets an incident naming that process, and the incident's top cause quotes
the agent's history (copy-on-write: the workers' USS growth; an unbounded cache: the victim's
growth; a Manager cache: the manager's growth; keep_in_memory: each rank's private set)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oomwatch.agent.analyze.job import SOURCE, analyze
from scenarios.catalog import SCENARIOS
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.conftest import ROOT, require_root_cgroup, require_scenario_deps

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


def test_victim_growth_on_uss_when_smaps_was_read_often_enough():
    # a forked worker: anonymous memory starts at the 200 MiB it shares with its parent, USS at 2 MiB
    rows = [row(float(t), 21, "dataloader_worker", (210 + 25 * t) * MIB, (200 + 25 * t) * MIB, (2 + 25 * t) * MIB)
            for t in range(8)]  # fmt: skip
    live = analyze(rows, victim_pid=21)
    assert live.facts["history.victim_growth_basis"] == "USS"
    assert live.facts["history.victim_growth_ratio"] == round(177 / 2, 2)  # against 1.88x on anonymous memory
    assert "USS (private memory) 2.0 MiB → 177.0 MiB in 7.0 s" in live.evidence["victim_growth"][0].text
    # two smaps reads only: anonymous memory it is
    sparse = [{**r, "uss": r["uss"] if r["time"] in (0.0, 7.0) else None} for r in rows]
    assert analyze(sparse, victim_pid=21).facts["history.victim_growth_basis"] == "anonymous"


def test_samples_between_smaps_reads_carry_the_private_memory_by_the_anonymous():
    # a busy node: the smaps budget read the worker at every 4th of its 16 samples; it also maps 30 MiB
    # of private file pages (USS above anonymous minus shared)
    rows = [row(float(t), 22, "dataloader_worker", (230 + 25 * t) * MIB, (200 + 25 * t) * MIB,
                (32 + 25 * t) * MIB if t % 4 == 0 else None) for t in range(16)]  # fmt: skip
    rows[-1]["uss"] = None  # the last sample too: after the last read, what anonymous memory added since
    live = analyze(rows, victim_pid=22)
    (proc,) = live.processes
    assert proc.basis == "USS" and proc.estimated == 12 and len(proc.points) == 16
    assert [v // MIB for _, v in proc.points] == [32 + 25 * t for t in range(16)]
    assert live.facts["history.victim_growth_ratio"] == round(407 / 32, 2)
    assert "; 12 of 16 between smaps reads, from its anonymous memory" in live.evidence["victim_growth"][0].text
    # a worker whose pages went private while its anonymous memory held (copy-on-write) between reads:
    # the estimate holds between reads and meets each read
    cow = [row(float(t), 23, "dataloader_worker", 230 * MIB, 200 * MIB, (2 + 20 * t) * MIB if t % 3 == 0 else None)
           for t in range(10)]  # fmt: skip
    (proc,) = analyze(cow, victim_pid=23).processes
    assert [v // MIB for _, v in proc.points] == [2, 2, 2, 62, 62, 62, 122, 122, 122, 182]


def test_private_memory_is_at_most_the_anonymous_and_shmem_memory():
    # a process that reads a 64 MiB file it alone maps while it keeps 30 MiB a second (a real run under a
    # 400 MiB limit, tests/fixtures/run_reports/thrash_then_kill): its USS counts the mapped file's pages,
    # which the limit trades for the anonymous memory that grows; read as USS, the climb levels off
    rows = [row(float(t), 30, "rank", (70 + 30 * t) * MIB, (5 + 30 * t) * MIB, min(69 + 30 * t, 370) * MIB)
            for t in range(13)]  # fmt: skip
    (proc,) = analyze(rows, victim_pid=30).processes
    assert proc.basis == "USS" and [v // MIB for _, v in proc.points] == [5 + 30 * t for t in range(13)]


def test_similar_ranks_and_a_growing_manager():
    rows = []
    for t in (0.0, 5.0):
        for pid, uss in ((1, 800 * MIB), (2, 820 * MIB), (3, 790 * MIB), (4, 100 * MIB)):
            rows.append(row(t, pid, "rank", uss, uss, uss, rank=pid))
        rows.append(row(t, 9, "manager", 0, (10 if t == 0 else 300) * MIB, None))
    f = analyze(rows).facts
    assert f["history.ranks"] == 4 and f["history.ranks_similar"] == 3
    assert f["history.manager_growth_bytes"] == 290 * MIB
    # ranks killed part-way through loading the same data (a real keep_in_memory run): peaks count
    loading = [row(float(t), pid, "rank", 0, 0, min(peak, 190 + 60 * t) * MIB, rank=pid)
               for pid, peak in ((1, 342), (2, 350), (3, 198), (4, 202)) for t in range(4)]  # fmt: skip
    live = analyze(loading)
    assert live.facts["history.ranks_similar"] == 4 and live.facts["history.ranks_uss_sum_bytes"] == 1092 * MIB
    assert live.evidence["ranks_uss"][0].text.startswith("pid 2 (python, rank 2): USS 350.0 MiB at ")
    # two ranks killed at 202 MiB while all four held that much, the survivors at 410 MiB the next sample
    # (a CI run's incident): beside what the others held at that moment, every rank is alike
    killed = [row(t / 4, pid, "rank", 0, 0, (120 + 20 * t if t < 5 else 410) * MIB, rank=pid)
              for pid in (1, 2, 3, 4) for t in range(5 if pid in (1, 4) else 6)]  # fmt: skip
    assert analyze(killed).facts["history.ranks_similar"] == 4
    # a rank that held a fifth of its peers at every moment is not one of them
    small = [row(float(t), pid, "rank", 0, 0, (40 if pid == 4 else 200) * (t + 1) * MIB, rank=pid)
             for pid in (1, 2, 3, 4) for t in range(4)]  # fmt: skip
    assert analyze(small).facts["history.ranks_similar"] == 3


def test_nothing_from_too_little():
    assert analyze([]).facts == {}
    one = [row(1.0, 5, "dataloader_worker", MIB, MIB, MIB)]
    assert analyze(one, 5).facts == {}


# The kernel's kill line, as the scenario runner's dmesg.txt has it
KILLED = re.compile(r"Killed process (\d+) \((.*?)\)")


@dataclass
class AgentRun:
    """A scenario run under the agent: the kernel's kills of the scenario's cgroup (its capture's
    dmesg.txt, in order) and the agent's incident for each of them (by victim pid)."""

    meta: dict[str, Any]
    capture: Path  # the runner's --out directory
    kills: list[tuple[int, str]]  # (pid, comm) from the kernel's "Killed process" lines
    incidents: dict[int, dict[str, Any]]

    @property
    def first(self) -> dict[str, Any]:
        """The incident of the first process the kernel killed."""
        return self.incidents[self.kills[0][0]]


def _run_scenario_under_agent(tmp_path: Path, name: str, interval: float = 0.1, budget: float = 1.0) -> AgentRun:
    """Run scenario ``name`` while the agent samples every ``interval`` s with an smaps budget of
    ``budget`` CPU; wait for an incident for each kill the kernel reported for the scenario's cgroup
    (the agent reads every kill on the machine: only this cgroup's are this scenario's)."""
    require_root_cgroup()
    require_scenario_deps()
    state, capture = tmp_path / "state", tmp_path / "capture"
    agent = AgentProcess(
        "--listen", "127.0.0.1:0", "--interval", str(interval), "--pss-budget", str(budget), "--state-dir", str(state)
    )
    try:
        wait_ticks(agent)
        done = subprocess.run(
            [sys.executable, "-m", "scenarios", "run", name, "--out", str(capture)],
            capture_output=True, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert done.returncode in (0, 3), done.stderr.decode()[-3000:]
        meta = json.loads((capture / "meta.json").read_text())
        kills = [(int(m.group(1)), m.group(2)) for m in KILLED.finditer((capture / "dmesg.txt").read_text())]
        assert kills, f"the kernel killed nothing in {name}'s cgroup: {meta['oom_kills']}"
        pids = {pid for pid, _ in kills}
        deadline = time.monotonic() + 10
        incidents: dict[int, dict[str, Any]] = {}
        while time.monotonic() < deadline and set(incidents) != pids:
            for path in sorted((state / "incidents").glob("*.json")):
                doc = json.loads(path.read_text())
                if any(meta["cgroup_path"] in line for line in doc["kernel_lines"]):
                    assert doc["victim"]["pid"] in pids, (doc["victim"], kills)
                    incidents[doc["victim"]["pid"]] = doc
            time.sleep(0.1)
        assert kills[0][0] in incidents, f"no incident for {kills[0]} in 10 s:\n{''.join(agent.lines)}"
        return AgentRun(meta, capture, kills, incidents)
    finally:
        agent.stop()


def _check_victim(run: AgentRun, name: str) -> dict[str, Any]:
    """The first incident names the process of the kernel's first kill line: pid, comm, the role the
    scenario expects, and the role (and rank) the runner's own sampler saw it in."""
    doc = run.first
    pid, comm = run.kills[0]
    victim = doc["victim"]
    assert (victim["pid"], victim["comm"]) == (pid, comm), (victim, run.kills)
    assert f"Killed process {pid} ({comm})" in "\n".join(doc["kernel_lines"])
    assert 0 <= doc["latency_seconds"] < 2.0, doc["latency_seconds"]  # the kernel's kill line to the incident
    assert victim["role"] == SCENARIOS[name].victim_role, victim
    hint = next(k["role_hint"] for k in run.meta["oom_kills"] if k["killed_pid"] == pid)
    if victim["role"] == "rank":
        assert hint == f"rank {victim['rank']}", (victim, hint)
    else:
        assert hint == victim["role"], (victim, hint)
    for other in run.incidents.values():  # every kill of the scenario got its own incident
        assert (other["victim"]["pid"], other["victim"]["comm"]) in run.kills
    return doc


def _top_cause(doc: dict[str, Any], expected: str) -> dict[str, Any]:
    causes = doc["diagnosis"]["causes"]
    # on a miss, what the diagnosis had to go on: the kernel's report, the job's output, the history
    had = {
        "causes": [(c["id"], c["confidence"], c["reasons"]) for c in causes],
        "kernel_lines": len(doc["kernel_lines"]),
        "task_rows": sum(bool(re.search(r"\]\s+\d+\s+\d+\s+\d+\s+\d+", line)) for line in doc["kernel_lines"]),
        "job_output": [o["path"] for o in doc["job_output"]],
        "analysis": doc["analysis"],
        "victim_samples": sum(p["pid"] == doc["victim"]["pid"] for p in doc["history"].get("processes", [])),
    }
    assert causes and causes[0]["id"] == expected, had
    return causes[0]


def _reanalyze(doc: dict[str, Any]) -> Any:
    """What the analyzers make of an incident's history: its process rows, with the node's and the job's
    cgroups' rows (their memory pressure: a stall at the end is left out of the victim's growth)."""
    h = doc["history"]
    return analyze(
        h["processes"],
        doc["victim"]["pid"],
        node=h.get("node", ()),
        cgroups=h.get("cgroups", ()),
        steps=h.get("steps", ()),
    )


def test_incident_for_copy_on_write_quotes_the_workers_uss_growth(tmp_path: Path):
    # this scenario's workers live about a second: sample them often, their smaps every tick
    doc = _run_scenario_under_agent(tmp_path, "cow_refcount").first
    top = doc["diagnosis"]["causes"][0]
    assert top["id"] == "cow_refcount_defeat", doc["diagnosis"]["causes"]
    quoted = [e for e in top["evidence"] if e["file"] == SOURCE]
    live = _reanalyze(doc).facts
    assert quoted and "USS" in quoted[0]["text"] and "while RSS" in quoted[0]["text"], (top, live)
    print("copy-on-write incident evidence:", *[e["text"] for e in quoted], sep="\n  ")


@pytest.mark.slow
@pytest.mark.root
def test_incident_for_a_dict_cache_quotes_the_workers_growth(tmp_path: Path):
    # sampled as often as copy-on-write: see the growth ratio below
    run = _run_scenario_under_agent(tmp_path, "dict_cache")
    doc = _check_victim(run, "dict_cache")
    pid = doc["victim"]["pid"]
    top = _top_cause(doc, "unbounded_cache")
    live = _reanalyze(doc)
    # a forked worker's anonymous memory starts with the ~210 MiB it shares with its parent (at most
    # ~2.3x before the kill, against the rule's 2x): its growth is measured on its USS (8-90x here)
    assert live.facts["history.victim_growth_basis"] == "USS", live.facts
    assert live.facts["history.victim_growth_ratio"] >= 2 and live.facts["history.victim_growth_r2"] >= 0.8
    quoted = [e["text"] for e in top["evidence"] if e["file"] == SOURCE]
    assert quoted and quoted[0].startswith(f"pid {pid} (") and "USS (private memory)" in quoted[0], top
    print("dict_cache incident evidence:", *quoted, sep="\n  ")


@pytest.mark.slow
@pytest.mark.root
def test_incident_for_a_manager_cache_quotes_the_managers_growth(tmp_path: Path):
    run = _run_scenario_under_agent(tmp_path, "manager_cache", interval=0.25, budget=0.5)
    doc = _check_victim(run, "manager_cache")
    # what the analyzers make of the incident's own history rows (the rows they were given)
    live = _reanalyze(doc)
    assert live.facts.get("history.manager_growth_bytes", 0) >= 64 * MIB, live.facts
    print("manager_cache analyzers:", *[e.text for e in live.evidence["manager_growth"]], sep="\n  ")
    top = _top_cause(doc, "manager_cache")
    quoted = [e["text"] for e in top["evidence"] if e["file"] == SOURCE]
    assert any(", manager): anonymous memory" in q for q in quoted), top
    print("manager_cache incident evidence:", *quoted, sep="\n  ")


@pytest.mark.slow
@pytest.mark.root
def test_incident_for_keep_in_memory_quotes_every_ranks_private_set(tmp_path: Path):
    run = _run_scenario_under_agent(tmp_path, "keep_in_memory", interval=0.25, budget=0.5)
    doc = _check_victim(run, "keep_in_memory")
    live = _reanalyze(doc)
    assert live.facts.get("history.ranks_similar", 0) >= 2, live.facts
    print("keep_in_memory analyzers:", *[e.text for e in live.evidence["ranks_uss"]], sep="\n  ")
    top = _top_cause(doc, "keep_in_memory_duplication")
    quoted = [e["text"] for e in top["evidence"] if e["file"] == SOURCE]
    assert any(re.search(r", rank \d+\): USS ", q) for q in quoted), top  # its rank said once
    assert any("ranks each held about" in r for r in top["reasons"]), top["reasons"]
    # the ranks print to a file (the runner's console.txt): the agent read it — what they were doing
    assert [o["path"] for o in doc["job_output"]] == [str(run.capture / "console.txt")], doc["job_output"]
    assert any("loading the dataset" in r for r in top["reasons"]), top["reasons"]
    # and the script the launcher's command line names: the call behind it, its flag read from that line
    code = [e["text"] for e in top["evidence"] if e["file"] == "scenarios/workloads/keep_in_memory.py"]
    assert any("keep_in_memory=args.keep_in_memory" in t and "from the command line" in t for t in code), top
    print("keep_in_memory incident evidence:", *quoted, *code, sep="\n  ")
