"""Swap saturation and memory pressure: the analyzer on exact rows, the once-per-episode warnings,
the verdict and the note they feed; then for real: a swap file turned on, a process in a v1 memory
cgroup that thrashes (its working set three times its limit, paged through swap) and then grows
until swap is full and the kernel kills it, under the real agent: the incident quotes the node's
swap and pressure as the agent recorded them, and the agent warned before the kill."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oomwatch.agent.analyze.job import SOURCE, analyze
from oomwatch.agent.analyze.strain import StrainWarner
from oomwatch.agent.tick import CgroupSample, NodeSample, Tick
from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.model import LiveEvidence
from oomwatch.engine.rules.loader import load_rules
from oomwatch.procfs.pressure import Pressure, PressureLine
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.cgroup_util import memory_cgroup
from tests.conftest import require_root_cgroup, skip_or_fail

MIB = 1 << 20
GIB = 1 << 30
T0 = 1_700_000_000.0


def node_row(t: float, swap_free: int | None, full: float | None = None, some: float | None = None, total=8 * GIB):
    return {"time": t, "resolution": 1.0, "swap_total": total, "swap_free": swap_free, "pressure_some": some,
            "pressure_full": full}  # fmt: skip


# -- the analyzer ----------------------------------------------------------------------------------


def test_swap_saturation_is_the_worst_moment_with_its_time():
    rows = [node_row(T0 + k, 8 * GIB - k * 700 * MIB) for k in range(12)]  # 0% .. 94% used
    live = analyze([], node=rows)
    assert live.facts["history.swap_used_ratio"] == pytest.approx(11 * 700 / 8192, abs=0.001)
    assert live.facts["history.swap_total_bytes"] == 8 * GIB
    (line,) = live.evidence["swap"]
    assert line.file == SOURCE and "node: swap 94% used (7.5 GiB of 8.0 GiB)" in line.text, line.text
    assert time.strftime("%H:%M:%S", time.localtime(T0 + 11)) in line.text


def test_no_swap_and_little_use_say_nothing():
    assert "history.swap_used_ratio" not in analyze([], node=[node_row(T0, 0, total=0)]).facts  # no swap at all
    quiet = analyze([], node=[node_row(T0, 8 * GIB - 100 * MIB, full=0.5, some=2.0)])
    assert quiet.facts["history.swap_used_ratio"] < 0.5 and "swap" not in quiet.evidence
    assert quiet.facts["history.pressure_full_avg10"] == 0.5 and "pressure" not in quiet.evidence
    assert quiet.facts["history.pressure_full_seconds"] == 0.0


def test_pressure_names_the_worst_place_and_how_long_it_stayed_high():
    node = [node_row(T0 + k, None, full=12.0 if 3 <= k < 8 else 1.0, some=30.0) for k in range(10)]
    cg = [{"time": T0 + 9, "resolution": 1.0, "path": "/kubepods/pod-a", "pressure_some": 5.0, "pressure_full": 44.5}]
    live = analyze([], node=node, cgroups=cg)
    assert live.facts["history.pressure_full_avg10"] == 44.5
    assert live.facts["history.pressure_some_avg10"] == 30.0
    assert live.facts["history.pressure_full_seconds"] == 5.0  # the node's 5 s at 12% (the cgroup: 1 s)
    full, some = live.evidence["pressure"]
    assert full.text.startswith("cgroup /kubepods/pod-a: memory pressure full avg10 44.5%"), full.text
    assert some.text.startswith("node: memory pressure some avg10 30.0%"), some.text


# -- the warnings ----------------------------------------------------------------------------------


def _psi(full: float) -> Pressure:
    return Pressure(PressureLine(full, full, full, 0), PressureLine(full, full, full, 0))


def _tick(t: float, swap_used: float, full: float, cg_full: float | None = None) -> Tick:
    node = NodeSample(mem_total=64 * GIB, mem_available=GIB, swap_total=4 * GIB,
                      swap_free=int(4 * GIB * (1 - swap_used)), oom_kills=0, pressure=_psi(full))  # fmt: skip
    cgroups = ()
    if cg_full is not None:
        cgroups = (CgroupSample(path="/job", version=2, usage=GIB, limit=2 * GIB, effective_limit=2 * GIB,
                                peak=None, anon=GIB, file=0, shmem=0, swap=0, oom_kills=0, pressure=_psi(cg_full),
                                jobs=("train",)),)  # fmt: skip
    return Tick(time=t, duration=0.01, processes=(), cgroups=cgroups, node=node)


def test_strain_is_said_once_per_episode():
    w = StrainWarner()
    said = [[s.key for s in w.due(_tick(T0 + k, u, f))] for k, (u, f) in enumerate(
        [(0.5, 1.0), (0.92, 1.0), (0.95, 25.0), (0.85, 15.0), (0.91, 30.0), (0.7, 5.0), (0.93, 21.0)]
    )]  # fmt: skip
    # swap: on at 92%, still on at 85% (above the 80% low mark), off at 70%, on again at 93%
    assert said == [[], ["swap"], ["pressure:node"], [], [], [], ["swap", "pressure:node"]]
    msgs = [s.message for s in StrainWarner().due(_tick(T0, 0.95, 0.0, cg_full=35.0))]
    assert msgs[0].startswith("node swap 95% used (3.8 GiB of 4.0 GiB)"), msgs
    assert msgs[1].startswith("memory pressure on cgroup /job (job train): all its non-idle tasks stalled"), msgs


# -- verdict and note ------------------------------------------------------------------------------


def test_thrashing_without_a_kill_is_the_swap_thrash_verdict_with_the_agents_lines():
    rules = load_rules()
    rows = [node_row(T0 + k, int(8 * GIB * (0.5 - k * 0.05)) if k < 10 else 0, full=25.0) for k in range(12)]
    d = diagnose([], rules, live=analyze([], node=rows))
    assert d.verdict == "swap_thrash", d.verdict
    assert any(e.file == SOURCE and "swap 100% used" in e.text for e in d.evidence), d.evidence
    assert any(e.file == SOURCE and "full avg10 25.0%" in e.text for e in d.evidence), d.evidence
    # stalls alone: only when high for a while
    brief = [node_row(T0 + k, None, full=60.0 if k == 5 else 0.0) for k in range(12)]
    assert diagnose([], rules, live=analyze([], node=brief)).verdict == "no_oom_evidence"
    long = [node_row(T0 + k, None, full=22.0) for k in range(12)]
    assert diagnose([], rules, live=analyze([], node=long)).verdict == "swap_thrash"
    assert diagnose([], rules, live=LiveEvidence()).verdict == "no_oom_evidence"


# -- for real: swap on, a thrashing process in a cgroup, the agent watching -------------------------

THRASH = """
import os, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
time.sleep(1.0)  # let the agent see the process first
hog = []
def grow(mib, pause):
    for _ in range(mib):
        b = bytearray(1 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        hog.append(b)
        time.sleep(pause)
grow(80, 0.0)  # 24 MiB fit under the limit: the rest goes to swap
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:  # thrash: touch every page again and again, each pass pages most of them in
    for b in hog:
        for i in range(0, len(b), 4096):
            b[i] = (b[i] + 1) & 0xFF
grow(10_000, 0.02)  # then grow slowly until swap is full and the kernel kills it
"""


@contextlib.contextmanager
def swap_file(path: Path, size: int) -> Iterator[None]:
    """A real swap file, on for the ``with`` block only (swapoff and removal whatever happens)."""
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={size // MIB}", "status=none"], check=True)
    path.chmod(0o600)
    subprocess.run(["mkswap", str(path)], check=True, capture_output=True)
    on = subprocess.run(["swapon", str(path)], capture_output=True, text=True)
    if on.returncode != 0:
        path.unlink()
        skip_or_fail(f"swapon refused here: {on.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["swapoff", str(path)], check=False)
        path.unlink()


def test_incident_after_thrashing_quotes_swap_and_pressure(tmp_path: Path):
    require_root_cgroup()
    if any(line.split()[0] != "Filename" for line in Path("/proc/swaps").read_text().splitlines()):
        pytest.skip("this machine already has swap: the test needs to know the node's whole swap")
    state = tmp_path / "state"
    script = tmp_path / "thrash.py"
    script.write_text(THRASH)
    with swap_file(tmp_path / "swapfile", 96 * MIB):
        agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.1", "--state-dir", str(state))
        try:
            wait_ticks(agent)
            with memory_cgroup(24 * MIB, name="oomwatch-thrash") as cg:
                (cg / "memory.memsw.limit_in_bytes").write_text(str(1 << 30))  # may swap: all of the node's swap
                proc = subprocess.Popen([sys.executable, str(script), str(cg), "12"], stderr=subprocess.PIPE)
                _, err = proc.communicate(timeout=120)
            assert proc.returncode == -9, err
            incidents = state / "incidents"
            found: list[dict] = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not found:
                docs = [json.loads(p.read_text()) for p in incidents.glob("*.json")] if incidents.is_dir() else []
                found = [d for d in docs if d["victim"]["pid"] == proc.pid]  # other kills on the machine show too
                time.sleep(0.1)
        finally:
            agent.stop()
    assert found, "".join(agent.lines)
    (doc,) = found
    assert doc["diagnosis"]["verdict"] == "cgroup_oom"
    facts = doc["analysis"]
    assert facts["history.swap_used_ratio"] >= 0.9, facts
    # node-wide "full" falls with any other busy task: measured 14.8% alone, 7.9% with other tests running
    assert facts["history.pressure_full_avg10"] >= 1.0, facts
    assert doc["history"]["node"], "no node rows in the incident"
    note = [n for n in doc["diagnosis"]["notes"] if n.startswith("Memory had been short for a while")]
    assert note and "node: swap" in note[0], doc["diagnosis"]["notes"]
    warned = [line for line in agent.lines if "node swap" in line and "used" in line]
    assert warned, "".join(agent.lines)
    print("thrash facts:", {k: v for k, v in facts.items() if "swap" in k or "pressure" in k})
    print("note:", note[0])
