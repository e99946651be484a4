"""A job keeps one name from start to finish (oomwatch.agent.sample.jobnames over discovery.classify): the
torchrun launcher keeps its ranks' run id when they die before it; a launcher seen before its ranks
takes their run id when they appear; a tree whose root died keeps its stand-in name; a reused pid
is named afresh."""

from __future__ import annotations

from oomwatch.agent.sample.discovery import classify
from oomwatch.agent.sample.jobnames import StableJobs
from oomwatch.agent.sample.process_roles import ProcInfo

RUN = {"TORCHELASTIC_RUN_ID": "llm-7b"}


def _launcher(start: int = 100) -> ProcInfo:
    return ProcInfo(100, 1, "torchrun", ("python3", "/usr/bin/torchrun", "--nproc-per-node=2", "train.py"), {}, None,
                    start)  # fmt: skip


def _rank(pid: int, rank: int) -> ProcInfo:
    env = {**RUN, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
    return ProcInfo(pid, 100, "python3", ("python3", "train.py"), env, None, pid)


def _jobs(stable: StableJobs, procs: list[ProcInfo]) -> dict[int, str | None]:
    members = {m.pid: m for m in classify(procs)}
    return {pid: m.job for pid, m in stable.apply(members, {p.pid: p.start_time for p in procs}).items()}


def test_a_launcher_keeps_its_ranks_run_id_when_they_die_first():
    stable = StableJobs()
    assert _jobs(stable, [_launcher()]) == {100: "tree-100"}  # before its ranks: a stand-in
    assert _jobs(stable, [_launcher(), _rank(101, 0), _rank(102, 1)]) == {100: "llm-7b", 101: "llm-7b", 102: "llm-7b"}
    # the ranks were killed; alone, discovery names the launcher after its pid again
    assert {m.job for m in classify([_launcher()])} == {"tree-100"}
    assert _jobs(stable, [_launcher()]) == {100: "llm-7b"}
    # a new process under that pid (reused: another start time) is named afresh
    assert _jobs(stable, [_launcher(start=999)]) == {100: "tree-100"}


def test_a_tree_whose_root_died_keeps_its_stand_in_name():
    stable = StableJobs()
    parent = ProcInfo(200, 1, "python3", ("python3", "train.py"), {}, None, 200)
    worker = ProcInfo(201, 200, "pt_data_worker", ("python3", "train.py"), {}, None, 201)
    assert _jobs(stable, [parent, worker]) == {200: "tree-200", 201: "tree-200"}
    orphan = ProcInfo(201, 1, "pt_data_worker", ("python3", "train.py"), {}, None, 201)
    assert [m.job for m in classify([orphan])] == ["tree-201"]  # the root of a tree of its own now
    assert _jobs(stable, [orphan]) == {201: "tree-200"}
