"""Memory held level at its limit while every task stalls (the kernel reclaiming file pages and the
next step faulting them back in, for tens of seconds before it kills) is not a load that held: the
stall's samples are left out of the growth read. From a real capture (a climb of about 3 s, then
38 s pinned at a 400 MiB limit under PSI "full" up to 35%), and from PSI readings as the kernel
gives them (avg10, recomputed every 2 s)."""

from __future__ import annotations

import json
from typing import Any

from oomwatch.agent.analyze.job import analyze
from oomwatch.agent.analyze.pressure import PSI_PERIOD, trailing_stall
from oomwatch.engine.api import Engine
from oomwatch.engine.growth import growth_facts, shape
from oomwatch.engine.model import LiveProcess, Stall
from oomwatch.engine.rules.loader import load_rules
from tests.conftest import ROOT

MIB = 1 << 20
CAPTURE = ROOT / "tests" / "fixtures" / "run_reports" / "thrash_then_kill"


def _replay(doc: dict[str, Any], node: bool = True) -> tuple[Any, Any]:
    """The run's diagnosis again from its report: its samples through the analyzers, its output and the
    kernel's lines through the engine, oomwatch's own pid as no part of the job (as ``oomwatch run`` does)."""
    samples = doc["samples"]
    cols = samples["process_columns"]
    rows = [
        {**dict(zip(cols, pt, strict=True)), "pid": p["pid"], "role": p["role"], "rank": p["rank"], "comm": p["comm"]}
        for p in samples["processes"]
        for pt in p["points"]
        if pt[0] is not None and pt[3] is not None
    ]
    nodes = [dict(zip(samples["node_columns"], n, strict=True)) for n in samples["node"]] if node else []
    victim = doc["diagnosis"]["victims"][0]["pid"]
    live = analyze(rows, victim, node=nodes)
    engine = Engine(load_rules(()))
    scans = [
        engine.scan("stdout", (CAPTURE / "stdout.txt").read_bytes()),
        engine.scan("kernel log (/dev/kmsg)", "\n".join(doc["kernel_lines"]).encode() + b"\n"),
    ]
    known = {p["pid"]: (p["role"], p["rank"]) for p in doc["processes"]}
    known[doc["oomwatch_pid"]] = ("unknown", None)
    return live, engine.diagnose(scans, known=known, live=live)


def test_a_real_climb_pinned_at_the_limit_in_a_stall_is_a_climb() -> None:
    doc = json.loads((CAPTURE / "report.json").read_text())
    assert doc["diagnosis"]["causes"][0]["id"] == "unbounded_cache"  # what oomwatch run said as it ran
    live, d = _replay(doc)
    assert live.stall is not None and live.stall.where == "node" and live.stall.peak >= 20
    victim = next(p for p in live.processes if p.pid == d.victims[0].pid)
    t0, end = victim.points[0][0], victim.points[-1][0]
    # stalled from the end of its ~3 s climb on (the node's avg10 still held ~2% of an earlier run's stall
    # as this one started: the foot is there), ~38 s to the kill
    assert live.stall.start < t0 + 6 and end - live.stall.start > 30
    assert d.facts["growth.shape"] == "climb" and d.facts["growth.stalled_seconds"] >= 30, d.facts
    assert live.facts["history.victim_growth_r2"] >= 0.8, live.facts
    assert d.cause_determined and d.causes[0].id == "unbounded_cache", [(c.id, c.confidence) for c in d.causes]
    line = next(e.text for e in d.causes[0].evidence if e.file == "agent history")
    assert (
        ": climb (" in line and "; its last 3" in line and "held level while tasks stalled waiting for memory" in line
    )
    # oomwatch itself (in the cgroup, so in the kernel's task table) is no second rank of the job
    assert "rank0_extra" not in [c.id for c in d.causes]
    # the same samples without the pressure readings: the 38 s at the limit read as a load that held
    live, d = _replay(doc, node=False)
    assert live.stall is None and d.facts["growth.shape"] == "step"
    assert not (d.cause_determined and d.causes[0].id == "unbounded_cache")


def _psi(readings: list[tuple[float, float]]) -> list[dict[str, float]]:
    return [{"time": t, "pressure_full": v, "resolution": 1.0} for t, v in readings]


def test_the_stall_starts_at_the_foot_of_the_last_rise() -> None:
    # avg10 as the kernel moves it: an earlier stall (loading, 2-6 s) eased, decaying; then a new one
    # from about 24 s to the kill at 40 s; each value read twice (recomputed every 2 s, read every 1 s)
    values = [0, 0, 6, 6, 18, 18, 27, 27, 22, 22, 18, 18, 15, 15, 12, 12, 10, 10, 8, 8, 6.5, 6.5, 5.3, 5.3,
              7, 7, 12, 12, 17, 17, 21, 21, 24, 24, 27, 27, 29, 29, 31, 31, 31]  # fmt: skip
    node = _psi([(float(t), v) for t, v in enumerate(values)])
    stall = trailing_stall(node, [], until=40.0)
    assert stall == Stall(22.0 - PSI_PERIOD, 31.0, "node")  # the foot (5.3, first read at 22 s), not 2 s
    # a job's cgroup that stalled from earlier than the node did: the earliest
    cgroup = [{"time": float(t), "pressure_full": 14.0 if t >= 12 else 0.5, "path": "/job"} for t in range(41)]
    assert trailing_stall(node, cgroup, until=40.0) == Stall(12.0 - PSI_PERIOD, 14.0, "cgroup /job")
    # eased by the end: no stall still on
    assert trailing_stall(_psi([(0.0, 20.0), (10.0, 9.0)]), [], until=10.0) is None
    # readings after the victim's last sample (and the second of slack) are not its stall
    assert trailing_stall(_psi([(0.0, 0.0), (5.0, 0.0), (9.0, 40.0)]), [], until=5.0) is None
    assert trailing_stall([], [], until=5.0) is None


def test_a_load_that_held_before_a_stall_stays_a_step() -> None:
    # a rank that loaded its copy of the data in 2 s and held it 15 s, then stalled with the others 5 s
    points = tuple([(t / 10, (20 + 19 * t) * MIB) for t in range(21)] + [(2.0 + t, 400 * MIB) for t in range(1, 21)])
    rank = LiveProcess(7, "python", "rank", 0, "USS", points)
    stall = Stall(17.0, 30.0, "node")
    facts, lines = growth_facts(rank, [], 0, stall)
    assert facts["growth.shape"] == "step" and facts["growth.stalled_seconds"] == 5.0, facts
    assert "its last 5.0 s (5 samples) held level" in lines[0].text
    # a climb the stall caught half-way (still rising in it): nothing held level, nothing left out
    climb = LiveProcess(7, "python", "rank", 0, "USS", tuple((float(t), (20 + 30 * t) * MIB) for t in range(20)))
    facts, _ = growth_facts(climb, [], 0, Stall(10.0, 30.0, "node"))
    assert facts["growth.shape"] == "climb" and facts["growth.stalled_seconds"] is None
    assert facts["growth.points"] == 20
    # the 3 s climb and 24 s at its limit of the CI run this came from: a step, unless the stall is known
    pinned = [(t / 10, (5 + 9 * t) * MIB) for t in range(41)] + [(4.0 + t / 2, 365 * MIB) for t in range(1, 49)]
    assert shape(pinned)[0] == "step"
    facts, _ = growth_facts(LiveProcess(8, "pt_data_worker", "dataloader_worker", 0, "USS", tuple(pinned)), [],
                            None, Stall(3.5, 53.0, "node"))  # fmt: skip
    assert facts["growth.shape"] == "climb" and facts["growth.stalled_seconds"] == 24.2, facts
