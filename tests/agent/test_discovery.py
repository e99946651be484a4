"""Discovery and roles: pure rules on hand-built process trees, then a real forked process tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from oomwatch.agent.sample.discovery import (
    Member,
    ProcInfo,
    classify,
    kept_managers,
    kept_spawn_roles,
    memory_cgroup_path,
    pod_uid,
    snapshot,
)
from oomwatch.paths import HostPaths

PY = "/usr/bin/python3"
SPAWN = ("-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)")


def P(pid, ppid, comm, *argv, env=None, cgroup=None):  # noqa: N802 - reads like a table row
    return ProcInfo(pid, ppid, comm, tuple(argv), dict(env or {}), cgroup, pid)


def by_pid(procs):
    return {m.pid: m for m in classify(procs)}


def env(rank, run="r1", **more):
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": run, **more}


def test_torchrun_ranks_workers_and_manager():
    train = (PY, "-u", "train.py", "--bs", "8")
    procs = [
        P(1, 0, "systemd", "/sbin/init"),
        P(10, 1, "bash", "bash", "run.sh"),
        P(100, 10, "torchrun", PY, "/usr/local/bin/torchrun", "--nproc_per_node", "2", "train.py"),
        P(101, 100, "pt_main_thread", *train, env=env(0)),
        P(102, 100, "pt_main_thread", *train, env=env(1)),
        P(103, 101, "pt_data_worker", *train, env=env(0)),
        P(104, 101, "pt_data_worker", *train, env=env(0)),
        P(105, 101, "python3", *train, env=env(0)),  # a Manager() server beside named workers
        P(106, 102, "python3", PY, "-c", "from multiprocessing.resource_tracker import main;main(9)", env=env(1)),
        P(107, 101, "nvidia-smi", "nvidia-smi", env=env(0)),
    ]
    m = by_pid(procs)
    assert m[100] == Member(100, "launcher", "r1", None, None)  # joins its ranks' elastic run id
    assert m[101] == Member(101, "rank", "r1", 0, 0)
    assert m[102] == Member(102, "rank", "r1", 1, 1)
    assert m[103] == Member(103, "dataloader_worker", "r1", 0, 0)
    assert m[104].role == "dataloader_worker"
    assert m[105].role == "manager"
    assert (m[106].role, m[106].job) == ("other", "r1")  # the resource tracker: in the job, no part of it
    assert (m[107].role, m[107].job) == ("other", "r1")
    assert (m[1].role, m[1].job) == ("other", None) and (m[10].role, m[10].job) == ("other", None)


def test_a_manager_stays_one_between_epochs_when_its_workers_are_gone():
    train = (PY, "-u", "train.py")
    rank = P(101, 100, "pt_main_thread", *train, env=env(0))
    manager = P(105, 101, "python3", *train, env=env(0))
    during = [P(100, 10, "torchrun", PY, "/usr/local/bin/torchrun", "train.py"), rank, manager,
              P(103, 101, "pt_data_worker", *train, env=env(0))]  # fmt: skip
    seen: dict[int, int | None] = {}
    assert kept_managers(by_pid(during), during, seen)[105].role == "manager"
    between = [p for p in during if p.pid != 103]  # the epoch's workers exited: alone, it reads as a worker
    assert by_pid(between)[105].role == "dataloader_worker"
    assert kept_managers(by_pid(between), between, seen)[105].role == "manager"
    # its pid taken by a new process (another start time): that one is judged afresh
    reused = [*(p for p in between if p.pid != 105), ProcInfo(105, 101, "python3", train, env(0), None, 999)]
    assert kept_managers(by_pid(reused), reused, seen)[105].role == "dataloader_worker" and 105 not in seen


def test_an_mp_spawn_job_stays_one_when_one_spawned_process_is_left():
    parent = P(300, 1, "python", PY, "train_recsys.py")
    tracker = P(301, 300, "python", PY, "-c", "from multiprocessing.resource_tracker import main;main(5)")
    ranks = [P(302 + i, 300, "python", PY, *SPAWN, "--multiprocessing-fork") for i in range(2)]
    seen: dict[int, tuple[int | None, str]] = {}
    both = [parent, tracker, *ranks]
    m = kept_spawn_roles(by_pid(both), both, seen)
    assert (m[300].role, m[302].role, m[303].role) == ("launcher", "rank", "rank")
    last = [parent, tracker, ranks[1]]  # rank 0 done: alone, the other reads as a worker of a trainer
    assert (by_pid(last)[300].role, by_pid(last)[303].role) == ("rank", "dataloader_worker")
    m = kept_spawn_roles(by_pid(last), last, seen)
    assert (m[300].role, m[303].role) == ("launcher", "rank")
    assert kept_spawn_roles(by_pid([parent, tracker]), [parent, tracker], seen)[300].role == "launcher"  # all done
    # a spawned DataLoader worker that torch named, and a process that took a kept pid, are judged afresh
    named = [parent, tracker, P(303, 300, "pt_data_worker", PY, *SPAWN, "--multiprocessing-fork")]
    assert kept_spawn_roles(by_pid(named), named, seen)[303].role == "dataloader_worker"
    reused = [ProcInfo(300, 1, "python", (PY, "train.py"), {}, None, 999), tracker,
              ProcInfo(303, 300, "python", (PY, *SPAWN, "--multiprocessing-fork"), {}, None, 998)]  # fmt: skip
    m = kept_spawn_roles(by_pid(reused), reused, seen)
    assert (m[300].role, m[303].role) == ("rank", "dataloader_worker") and 300 not in seen
    # a torchrun launcher is one by its argv: nothing to keep
    torchrun = [
        P(400, 1, "torchrun", PY, "/usr/local/bin/torchrun", "t.py"),
        P(401, 400, "python", PY, "t.py", env=env(0)),
    ]
    kept_spawn_roles(by_pid(torchrun), torchrun, seen)
    assert 400 not in seen and 401 not in seen


def test_python_m_torch_distributed_run_and_elastic_agent():
    procs = [
        P(200, 1, "python", PY, "-m", "torch.distributed.run", "--nproc_per_node=1", "t.py"),
        P(201, 200, "python", PY, "t.py"),  # no RANK visible yet (fresh exec): a python child of a launcher
        P(300, 1, "pt_elastic", PY, "agent.py"),
        P(310, 1, "python3", PY, "-m", "torch.distributed.launch", "t.py"),
    ]
    m = by_pid(procs)
    assert m[200].role == "launcher" and m[300].role == "launcher" and m[310].role == "launcher"
    assert m[201] == Member(201, "rank", "tree-200", None, None)
    assert m[300].job == "tree-300"


def test_deepspeed_launcher_chain():
    procs = [
        P(1, 0, "init", "/sbin/init"),
        P(400, 1, "deepspeed", PY, "/usr/bin/deepspeed", "--num_gpus", "2", "train.py"),
        P(401, 400, "python", PY, "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30="),
        P(402, 401, "python", PY, "-u", "train.py", "--local_rank=0", env={"RANK": "0", "LOCAL_RANK": "0"}),
        P(403, 401, "python", PY, "-u", "train.py", "--local_rank=1", env={"RANK": "1", "LOCAL_RANK": "1"}),
    ]
    m = by_pid(procs)
    assert [m[p].role for p in (400, 401, 402, 403)] == ["launcher", "launcher", "rank", "rank"]
    assert {m[p].job for p in (400, 401, 402, 403)} == {"tree-400"}
    assert m[403].rank == 1


def test_accelerate_and_lightning_need_their_subcommand():
    procs = [
        P(500, 1, "accelerate", PY, "/usr/bin/accelerate", "launch", "train.py"),
        P(501, 1, "accelerate", PY, "/usr/bin/accelerate", "config"),
        P(502, 1, "lightning", PY, "/usr/bin/lightning", "run", "model", "train.py"),
        P(503, 1, "mpirun", "mpirun", "-np", "4", PY, "train.py"),
        P(504, 503, "python", PY, "train.py"),
    ]
    m = by_pid(procs)
    assert m[500].role == "launcher" and m[502].role == "launcher" and m[503].role == "launcher"
    assert (m[501].role, m[501].job) == ("other", None)
    assert m[504].role == "rank" and m[504].job == "tree-503"


def test_mp_spawn_parent_is_launcher_children_are_ranks():
    procs = [
        P(600, 1, "pt_main_thread", PY, "main.py"),
        P(601, 600, "pt_main_thread", PY, *SPAWN, "--multiprocessing-fork"),
        P(602, 600, "pt_main_thread", PY, *SPAWN, "--multiprocessing-fork"),
        P(603, 600, "python3", PY, "-c", "from multiprocessing.resource_tracker import main;main(5)"),
        P(604, 601, "pt_data_worker", PY, *SPAWN, "--multiprocessing-fork"),
    ]
    m = by_pid(procs)
    assert m[600].role == "launcher"
    assert m[601].role == "rank" and m[602].role == "rank" and m[601].rank is None
    assert m[603].role == "other" and m[604].role == "dataloader_worker"  # 603: the resource tracker
    assert {x.job for x in m.values()} == {"tree-600"}


def test_slurm_srun_tasks_are_one_job():
    slurm = {"SLURM_JOB_ID": "4242"}
    procs = [
        P(700, 1, "slurmstepd", "slurmstepd: [4242.0]"),
        P(701, 700, "python", PY, "train.py", env={**slurm, "RANK": "0", "LOCAL_RANK": "0"}),
        P(702, 700, "python", PY, "train.py", env={**slurm, "RANK": "1", "LOCAL_RANK": "1"}),
        P(703, 701, "python", PY, "train.py", env={**slurm, "RANK": "0", "LOCAL_RANK": "0"}),  # fork worker
        P(704, 700, "bash", "bash", env=slurm),
        P(710, 1, "srun", "srun", "-N2", PY, "train.py", env={"SLURM_JOB_ID": "4243"}),
    ]
    m = by_pid(procs)
    assert (m[701].role, m[701].job) == ("rank", "slurm-4242")
    assert (m[702].role, m[702].job) == ("rank", "slurm-4242")
    assert (m[703].role, m[703].job, m[703].rank) == ("dataloader_worker", "slurm-4242", 0)
    assert (m[700].role, m[700].job) == ("other", None) and (m[704].role, m[704].job) == ("other", None)
    assert (m[710].role, m[710].job) == ("launcher", "slurm-4243")


@pytest.mark.parametrize(
    ("path", "uid"),
    [
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0f1a_4b5c_9d8e_112233445566.slice/cri-containerd-ab12.scope",
            "1b2c3d4e-0f1a-4b5c-9d8e-112233445566",
        ),
        (
            "/kubepods/besteffort/pod1b2c3d4e-0f1a-4b5c-9d8e-112233445566/ab12cd34",
            "1b2c3d4e-0f1a-4b5c-9d8e-112233445566",
        ),
        ("/kubepods/pod0123456789abcdef0123456789abcdef/ab12", "0123456789abcdef0123456789abcdef"),
        ("/user.slice/user-1000.slice/session-2.scope", None),
        ("/system.slice/podman-pod1b2c3d4e-0f1a-4b5c-9d8e-112233445566.scope", None),
        (None, None),
    ],
)
def test_pod_uid(path, uid):
    assert pod_uid(path) == uid


def test_k8s_pod_groups_ranks_without_elastic_id():
    cg = "/kubepods/burstable/pod1b2c3d4e-0f1a-4b5c-9d8e-112233445566/c1"
    procs = [
        P(800, 1, "python", PY, "train.py", env={"RANK": "0"}, cgroup=cg),
        P(801, 800, "python", PY, "train.py", env={"RANK": "0"}, cgroup=cg),
        P(900, 1, "kube-proxy", "kube-proxy", cgroup="/kubepods/burstable/podaaaaaaaa-0f1a-4b5c-9d8e-112233445566/c9"),
    ]
    m = by_pid(procs)
    assert (m[800].role, m[800].job) == ("rank", "pod-1b2c3d4e-0f1a-4b5c-9d8e-112233445566")
    assert (m[801].role, m[801].job) == ("dataloader_worker", "pod-1b2c3d4e-0f1a-4b5c-9d8e-112233445566")
    assert (m[900].role, m[900].job) == ("other", None)


def test_lone_python_with_workers_main_is_the_training_process():
    train = (PY, "train.py")
    procs = [
        P(1000, 1, "python3", *train),
        P(1001, 1000, "python3", *train),  # fork DataLoader workers on torch < 2.1: same argv, plain comm
        P(1002, 1000, "python3", *train),
        P(1010, 1, "python3", PY, "script.py"),  # a lone python with no workers: nothing says training
    ]
    m = by_pid(procs)
    # no RANK, no launcher, workers: the training process, rank 0 of a world of 1
    assert (m[1000].role, m[1000].job, m[1000].rank) == ("rank", "tree-1000", 0)
    assert (m[1001].role, m[1001].job, m[1001].rank) == ("dataloader_worker", "tree-1000", None)
    assert m[1002].role == "dataloader_worker"
    assert (m[1010].role, m[1010].job) == ("other", None)


def test_a_trainer_that_re_executes_its_script_for_the_other_ranks_is_their_first_rank():
    # Lightning's DDP strategy: the script's own process is rank 0 (its RANK set in-process, after its
    # environment was read); it starts `sys.executable script args` with LOCAL_RANK for the others
    procs = [
        P(2000, 1, "python", "python", "finetune.py", "--devices", "2"),
        P(2001, 2000, "python", PY, "finetune.py", "--devices", "2", env={"LOCAL_RANK": "1", "NODE_RANK": "0"}),
        P(2002, 2000, "python", PY, "other.py", env={"LOCAL_RANK": "0"}),  # not its program: says nothing
        P(2010, 1, "python", "python", "serve.py"),
        P(2011, 2010, "python", PY, "worker.py", env={"RANK": "0"}),
    ]
    m = by_pid(procs)
    assert (m[2000].role, m[2000].job) == ("rank", "tree-2000")
    assert (m[2001].role, m[2001].job, m[2001].local_rank) == ("rank", "tree-2000", 1)
    assert m[2002].job == "tree-2000"
    assert (m[2010].role, m[2010].job) == ("other", None)
    assert (m[2011].role, m[2011].job) == ("rank", "tree-2011")


def test_unrelated_and_hostile_processes():
    procs = [
        P(2, 0, "kthreadd"),
        P(3, 2, "kworker/0:1"),
        P(20, 1, "foo) Z ", "foo) Z "),
        P(21, 1, "bash", "bash"),
        P(22, 21, "bash", "bash"),  # a subshell: same argv as its parent, but not python
        P(23, 23, "python3", PY, "x.py"),  # a torn read: its own parent
        P(24, 25, "python3", PY, "y.py"),  # parent gone
    ]
    assert {m.role for m in classify(procs)} == {"other"}
    assert {m.job for m in classify(procs)} == {None}
    assert classify([]) == []


def test_deterministic():
    procs = [P(100, 1, "torchrun", "torchrun", "t.py"), P(101, 100, "python", PY, "t.py", env=env(0))]
    assert classify(procs) == classify(list(procs)) and classify(procs[::-1])[::-1] == classify(procs)


def test_snapshot_fixture_tree():
    fixture = HostPaths(proc=Path(__file__).parents[1] / "fixtures" / "proc" / "python-sleep" / "proc")
    procs = snapshot(fixture)
    assert [p.pid for p in procs] == [8595]
    assert procs[0].ppid == 8590 and procs[0].comm == "python3" and procs[0].env == {}


def test_snapshot_skips_gone_and_empty(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("7 (kworker/0:1) I 2 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0")
    (tmp_path / "7" / "cmdline").write_bytes(b"")
    (tmp_path / "8").mkdir()  # vanished between listdir and read: no stat
    (tmp_path / "self").mkdir()
    procs = snapshot(HostPaths(proc=tmp_path))
    assert procs == [ProcInfo(7, 2, "kworker/0:1", (), {}, None, 99)]


CHILD_SCRIPT = """
import multiprocessing as mp, sys, time
def work():
    time.sleep(120)
if __name__ == "__main__":
    ctx = mp.get_context("fork")
    kids = [ctx.Process(target=work, daemon=True) for _ in range(2)]
    for k in kids:
        k.start()
    print(*[k.pid for k in kids], flush=True)
    sys.stdin.read()
    for k in kids:
        k.terminate()
        k.join()
"""


def test_live_forked_workers_of_a_rank():
    run_id = f"test-{os.getpid()}"
    environ = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": run_id}
    environ.pop("SLURM_JOB_ID", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environ, text=True
    )
    kids: list[int] = []
    try:
        # the parent prints its children's pids once both are forked (and so visible in /proc)
        assert proc.stdout is not None
        kids = [int(x) for x in proc.stdout.readline().split()]
        assert len(kids) == 2
        members = {m.pid: m for m in classify(snapshot(HostPaths()))}
        assert (members[proc.pid].role, members[proc.pid].rank) == ("rank", 0)
        for kid in kids:
            assert (members[kid].role, members[kid].rank, members[kid].local_rank) == ("dataloader_worker", 0, 0)
            assert members[kid].job == members[proc.pid].job
        assert members[proc.pid].job == run_id
        assert members[os.getpid()].job is None
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            for pid in [*kids, proc.pid]:  # only the processes this test started
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


def test_the_memory_cgroup_of_a_hybrid_host_is_the_v1_memory_line():
    from oomwatch.procfs.cgroup import parse_proc_cgroup

    hybrid = "12:memory:/kubepods/pod1/c1\n11:cpu,cpuacct:/kubepods/pod1/c1\n0::/\n"
    assert memory_cgroup_path(parse_proc_cgroup(hybrid)) == "/kubepods/pod1/c1"
    assert memory_cgroup_path(parse_proc_cgroup("0::/system.slice/train.service\n")) == "/system.slice/train.service"
    assert memory_cgroup_path(parse_proc_cgroup("")) is None
