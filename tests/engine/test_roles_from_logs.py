"""Roles from what logs show, on real captures: a single-process trainer with DataLoader workers is
rank 0 of a world of 1; torch.multiprocessing.spawn's children are ranks and its parent their
launcher, from its frames alone; a multiprocessing Manager's server is ``manager`` when the logs
show a Manager (managers.py frames, a proxy), and nothing is guessed without it.

Fixtures: tests/fixtures/scenarios/manager_cache (a Manager().dict() cache, killed by a cgroup v1
limit; HOW.md there) and tests/fixtures/captured/memcg_mp_spawn_rank (mp.spawn, rank 1 killed; HOW.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from oomwatch.engine.api import Engine
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.jobshape import table_roles
from oomwatch.engine.verdict_choice import describe_victim
from oomwatch.engine.victims import launched, linked_pids, manager_shown
from tests.conftest import FIXTURES

MANAGER = FIXTURES / "scenarios" / "manager_cache"
SPAWN = FIXTURES / "captured" / "memcg_mp_spawn_rank"


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.load(())


def _diagnose(engine: Engine, inputs: Sequence[tuple[str, str]]) -> Diagnosis:
    return engine.diagnose([engine.scan(name, text.encode()) for name, text in inputs])


def _without(path: Path, *needles: str) -> str:
    return "".join(line for line in path.read_text().splitlines(keepends=True) if not any(n in line for n in needles))


def _roles(engine: Engine, inputs: Sequence[tuple[str, str]]) -> dict[int, tuple[str, int | None]]:
    scans = [engine.scan(name, text.encode()) for name, text in inputs]
    events = [ev for s in scans for ev in s.events]
    (report,) = [r for s in scans for r in s.reports]
    ranks, workers = linked_pids(events)
    return table_roles(report, {}, ranks, workers, launched(events), manager_shown(events))


def test_the_manager_killed_for_its_cache_is_the_manager(engine: Engine) -> None:
    inputs = [
        ("console.txt", (MANAGER / "console.txt").read_text()),
        ("dmesg.txt", (MANAGER / "dmesg.txt").read_text()),
    ]
    d = _diagnose(engine, inputs)
    assert (d.victims[0].pid, d.victims[0].role, d.victims[0].rank) == (27354, "manager", None)
    assert "pid 27354 (python, manager, " in d.summary
    roles = _roles(engine, inputs)
    # the workers' parent, first of the python processes: the training process, rank 0 of a world of 1
    assert roles[27353] == ("rank", 0)
    assert roles[27359] == ("dataloader_worker", None) and roles[27364] == ("dataloader_worker", None)
    assert d.causes and d.causes[0].id == "manager_cache"


def test_without_a_manager_in_the_logs_the_second_python_is_not_guessed(engine: Engine) -> None:
    console = _without(MANAGER / "console.txt", "managers.py", "Manager", "Proxy")
    assert "BrokenPipeError" in console  # a broken pipe alone: the main process or a queue could be its other end
    inputs = [("console.txt", console), ("dmesg.txt", (MANAGER / "dmesg.txt").read_text())]
    roles = _roles(engine, inputs)
    assert roles[27354] == ("unknown", None)
    assert roles[27353] == ("rank", 0)  # the workers' parent is still the training process
    kernel_only = _roles(engine, [("dmesg.txt", (MANAGER / "dmesg.txt").read_text())])
    assert kernel_only[27354] == ("unknown", None) and kernel_only[27353] == ("rank", 0)


def test_mp_spawn_frames_alone_make_its_children_ranks(engine: Engine) -> None:
    dmesg = ("dmesg.txt", (SPAWN / "dmesg.txt").read_text())
    # the log cut before the launcher's ProcessExitedException line and its glog line: only the frames
    console = _without(SPAWN / "console.txt", "ProcessExitedException", "Terminating process")
    assert "torch/multiprocessing/spawn.py" in console
    roles = _roles(engine, [("console.txt", console), dmesg])
    assert roles[13050] == ("launcher", None)  # the parent of the spawned processes, started first
    assert roles[13101][0] == "rank" and roles[13102][0] == "rank"
    assert roles[13100] == ("unknown", None)  # tiny: the resource tracker, no rank
    d = _diagnose(engine, [("console.txt", console), dmesg])
    assert (d.victims[0].pid, d.victims[0].role) == (13102, "rank")
    # with nothing from the launcher, nothing says these are ranks: two Python processes of a size
    alone = _roles(engine, [dmesg])
    assert alone[13102] == ("unknown", None) and alone[13050] == ("unknown", None)


def test_the_launchers_line_numbers_the_spawned_rank(engine: Engine) -> None:
    inputs = [("console.txt", (SPAWN / "console.txt").read_text()), ("dmesg.txt", (SPAWN / "dmesg.txt").read_text())]
    d = _diagnose(engine, inputs)
    assert (d.victims[0].pid, d.victims[0].role, d.victims[0].rank) == (13102, "rank", 1)
    assert "pid 13102 (python, rank 1, " in d.summary


def test_a_rank_0_of_one_and_a_worker_are_described_once() -> None:
    from oomwatch.engine.model import Victim

    main = Victim(27353, "python", "rank", 0, 1 << 30, None, None, None, (), "kernel")
    worker = Victim(27359, "pt_data_worker", "dataloader_worker", 2, 1 << 20, None, None, None, (), "kernel")
    assert describe_victim(main) == "pid 27353 (python, rank 0, 1.0 GiB anonymous RSS)"
    assert describe_victim(worker) == "pid 27359 (pt_data_worker, dataloader worker of rank 2, 1.0 MiB anonymous RSS)"


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        # lyu-yx/ACUMEN#4 (torch >= 1.5) and jeffffffli/HybrIK#198 (torch 1.4's plain Exception)
        ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL", 0),
        ("Exception: process 3 terminated with signal SIGKILL", 3),
    ],
)
def test_a_spawned_rank_lost_to_sigkill_is_a_victim_without_a_pid(engine: Engine, line: str, rank: int) -> None:
    d = _diagnose(engine, [("train.log", line + "\n")])
    assert [(v.pid, v.role, v.rank, v.source) for v in d.victims] == [(None, "rank", rank, "launcher")]
    assert f"a process (rank {rank}) was killed by SIGKILL" in d.summary


def test_the_lost_rank_paired_with_the_kernels_victim_is_listed_once(engine: Engine) -> None:
    inputs = [("console.txt", (SPAWN / "console.txt").read_text()), ("dmesg.txt", (SPAWN / "dmesg.txt").read_text())]
    d = _diagnose(engine, inputs)
    assert [(v.pid, v.rank) for v in d.victims if v.role == "rank"] == [(13102, 1)]
