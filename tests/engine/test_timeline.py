"""The first failure across ranks and nodes (oomwatch/engine/timeline.py), end to end through the engine.

The real case is tests/fixtures/captured/multinode_torchrun_rank_oom (README there). The small logs below
are made of lines in the formats real tools print (the NCCL watchdog and CUDA OOM lines of
rules/fingerprints/crashes.yaml and cuda.yaml, torchrun's ChildFailedError table and glog lines of the
capture), arranged the way kubectl, Slurm and tail put several ranks' output together.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from oomwatch.engine.api import Engine
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.stamps import parse_message_time, parse_prefix_time
from oomwatch.render.diagnosis import render_json, render_markdown, render_text

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests" / "fixtures" / "captured" / "multinode_torchrun_rank_oom"
FILES = ("node-0.log", "node-1.log", "node-1.dmesg-T.txt")
SCHEMA = json.loads((ROOT / "oomwatch" / "data" / "diagnosis.schema.json").read_text())


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.load()


def _diagnose(engine: Engine, inputs: dict[str, str]) -> Diagnosis:
    return engine.diagnose([engine.scan(name, text.encode()) for name, text in inputs.items()])


def _capture(engine: Engine, names: tuple[str, ...]) -> Diagnosis:
    return engine.diagnose([engine.scan(n, (CAPTURE / n).read_bytes()) for n in names])


@pytest.mark.parametrize("names", list(itertools.permutations(FILES)))
def test_capture_names_the_killed_rank_first_in_any_order(engine: Engine, names: tuple[str, ...]) -> None:
    d = _capture(engine, names)
    t = d.timeline
    assert t is not None
    assert (t.first.kind, t.first.role, t.first.rank, t.first.host, t.first.pid) == (
        "kernel_oom",
        "root",
        3,
        "node-1",
        12622,
    )
    assert t.first.time == "18:45:19"  # the kernel's line, before any launcher noticed
    assert sorted((f.host, f.rank) for f in t.after) == [("node-0", 0), ("node-0", 1), ("node-1", 2)]
    assert {f.role for f in t.after} == {"collateral"}
    assert t.ordered_by == "time"
    assert t.headline() == "rank 3 on node-1 was killed by the kernel at 18:45:19; 3 ranks on 2 nodes failed after it"
    assert d.verdict == "cgroup_oom"
    # the victim is named by its global rank (the table's row), not its local rank (the launcher's line)
    assert [(v.pid, v.rank) for v in d.victims] == [(12622, 3)]


def test_capture_without_the_kernel_log_names_the_sigkill(engine: Engine) -> None:
    t = _capture(engine, ("node-0.log", "node-1.log")).timeline
    assert t is not None
    assert (t.first.kind, t.first.rank, t.first.host, t.first.pid) == ("sigkill", 3, "node-1", 12622)
    assert len(t.after) == 3


def test_one_node_that_only_saw_the_effects_says_so(engine: Engine) -> None:
    # node 0's own table names its rank 0 as "Root Cause": it only lost its peer
    t = _capture(engine, ("node-0.log",)).timeline
    assert t is not None
    assert t.first.role == "collateral" and t.first.kind == "peer_lost"
    assert any("No failure of its own" in n for n in t.notes)


def test_capture_output_in_every_format(engine: Engine) -> None:
    d = _capture(engine, FILES)
    text = render_text(d, width=200)
    assert text.splitlines()[0] == (
        "First failure: rank 3 on node-1 was killed by the kernel at 18:45:19; 3 ranks on 2 nodes failed after it"
    )
    assert render_text(d).splitlines()[:2] == [  # 100 columns: wrapped, whole
        "First failure: rank 3 on node-1 was killed by the kernel at 18:45:19; 3 ranks on 2 nodes failed",
        "after it",
    ]
    assert "Timeline (ordered by time):" in text
    md = render_markdown(d)
    assert md.startswith("**First failure: rank 3 on node-1 was killed by the kernel at 18:45:19;")
    assert "| first | 18:45:19 | rank 3 on node-1 | was killed by the kernel |" in md
    doc = json.loads(render_json(d))
    assert doc["timeline"]["first_failure"]["rank"] == 3
    assert doc["timeline"]["collateral_total"] == 3
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, SCHEMA)


def test_single_failure_has_no_timeline(engine: Engine) -> None:
    d = _diagnose(engine, {"train.log": "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB\n"})
    assert d.timeline is None
    assert "timeline" not in d.to_json()
    assert not render_text(d).startswith("First failure")


# Slurm `srun -l`: each line starts with the task's rank. Rank 5's CUDA OOM has no time of its own,
# rank 0's watchdog timeout (glog time) came half an hour later; a collateral kind never goes first.
SRUN = """\
 0: [rank 0] step 200 loss 2.1034
 5: [rank 5] step 200 loss 2.0977
 5: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.15 GiB of which 1.20 GiB is free.
 0: [rank0]:[E1229 20:07:13.155873106 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20980, OpType=ALLREDUCE, NumelIn=3, NumelOut=3, Timeout(ms)=1800000) ran for 1800033 milliseconds before timing out.
 1: [rank1]:[E1229 20:07:13.160012345 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20980, OpType=ALLREDUCE, NumelIn=3, NumelOut=3, Timeout(ms)=1800000) ran for 1800038 milliseconds before timing out.
"""  # noqa: E501


def test_srun_labels_give_ranks_and_the_root_kind_goes_first(engine: Engine) -> None:
    d = _diagnose(engine, {"slurm-4242.out": SRUN})
    t = d.timeline
    assert t is not None
    assert (t.first.kind, t.first.rank, t.first.time) == ("cuda_oom", 5, None)
    assert [(f.kind, f.rank, f.time) for f in t.after] == [
        ("collective_timeout", 0, "20:07:13"),
        ("collective_timeout", 1, "20:07:13"),
    ]
    assert t.ordered_by == "time and input order"
    assert t.headline() == "rank 5 ran out of GPU memory; 2 ranks failed after it or at an unknown time"
    assert d.verdict == "cuda_oom"


# `kubectl logs --timestamps` of each pod of a job, put together with `==> POD <==` headers (as `tail -n +1`
# prints several files). worker-1's rank was killed (its launcher's line), worker-0 lost its peer later.
KUBECTL_SECTIONS = """\
==> trainer-worker-0 <==
2024-05-01T10:00:00.100000000Z [rank 0] step 40 loss 1.72
2024-05-01T10:00:09.400000000Z [rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.1.0.7]:40112: Connection reset by peer
==> trainer-worker-1 <==
2024-05-01T10:00:00.200000000Z [rank 1] step 40 loss 1.69
2024-05-01T10:00:08.900000000Z E0501 10:00:08.900000 31 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 0 (pid: 57) of binary: /usr/bin/python3
"""  # noqa: E501


def test_kubectl_sections_give_hosts(engine: Engine) -> None:
    t = _diagnose(engine, {"job.log": KUBECTL_SECTIONS}).timeline
    assert t is not None
    assert (t.first.kind, t.first.host, t.first.pid, t.first.time) == ("sigkill", "trainer-worker-1", 57, "10:00:08")
    assert [(f.kind, f.host, f.rank) for f in t.after] == [("peer_lost", "trainer-worker-0", 0)]
    assert t.headline() == (
        "pid 57 on trainer-worker-1 was killed by SIGKILL at 10:00:08; 1 rank on 1 node failed after it"
    )


def test_kubectl_prefix_gives_hosts_and_order_does_not_matter(engine: Engine) -> None:
    # `kubectl logs -l job-name=trainer --prefix`: every line carries its pod; lines of pods interleave
    lines = [
        "[pod/trainer-worker-0/pytorch] [rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/"
        "pair.cc:553] Connection closed by peer [10.1.0.7]:40112.",
        "[pod/trainer-worker-1/pytorch] [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is free.",
    ]
    for ordered in (lines, lines[::-1]):
        t = _diagnose(engine, {"pods.log": "\n".join(ordered) + "\n"}).timeline
        assert t is not None
        assert (t.first.kind, t.first.host, t.first.rank) == ("cuda_oom", "trainer-worker-1", 1)
        assert [(f.host, f.rank, f.role) for f in t.after] == [("trainer-worker-0", 0, "collateral")]


def test_lines_without_pid_or_rank_join_the_one_named_process_of_their_file(engine: Engine) -> None:
    # a DataLoader worker's death, told three ways in one log: one failure, no timeline
    log = (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
        "RuntimeError: DataLoader worker (pid 14190) is killed by signal: Bus error. It is possible that dataloader's"
        " workers are out of shared memory.\n"
    )
    assert _diagnose(engine, {"train.log": log}).timeline is None


def test_times_in_the_formats_logs_print() -> None:
    assert parse_prefix_time("Tue Dec 1 18:45:19 2026").shown == "18:45:19"  # type: ignore[union-attr]
    assert parse_prefix_time("2024-05-01T10:00:08.900000000Z").frac == pytest.approx(0.9)  # type: ignore[union-attr]
    assert parse_prefix_time("Mar 5 23:58:01").year is None  # type: ignore[union-attr]
    assert parse_prefix_time("5864.708505") is None  # seconds since boot: no wall-clock time
    assert parse_prefix_time("mar. août 12 03:54:03 2025") is None  # a locale's names: unknown, not wrong
    glog = parse_message_time("E1201 18:45:20.728000 12613 site-packages/torch/distributed/elastic/api.py:1002] x")
    assert glog is not None and (glog.month, glog.day, glog.shown) == (12, 1, "18:45:20")
    nested = parse_message_time("[rank3]:[E1229 20:07:13.155873106 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog")
    assert nested is not None and nested.shown == "20:07:13"
    pylog = parse_message_time("[2023-10-13 17:40:02,544] torch.distributed.elastic.multiprocessing.api: [ERROR]")
    assert pylog is not None and pylog.year == 2023
    assert parse_message_time("E1399 18:45:20.728000 not a date") is None


def test_failure_roles_are_checked_when_rules_load(tmp_path: Path) -> None:
    from oomwatch.engine.rules.loader import load_rules

    (tmp_path / "events.yaml").write_text(
        "events:\n  mine: 'a kind of my own'\n"
        "failures:\n  mine: {role: first, says: went first}\n  nosuch: {role: root, says: x}\n"
    )
    errors = [str(e) for e in load_rules([tmp_path]).errors]
    assert any("'mine' needs `role` (root or collateral)" in e for e in errors)
    assert any("unknown event kind 'nosuch'" in e for e in errors)


def test_every_failure_kind_is_an_event_kind(engine: Engine) -> None:
    assert set(engine.rules.failures) <= set(engine.rules.events)
    assert {f.role for f in engine.rules.failures.values()} == {"root", "collateral"}
    # the kinds that are effects of another process's failure by nature
    collateral = {k for k, f in engine.rules.failures.items() if f.role == "collateral"}
    assert {"peer_lost", "collective_timeout", "job_stopping", "launcher_failure", "worker_group_restart"} <= collateral


def test_a_verdict_about_a_later_failure_says_so(engine: Engine) -> None:
    log = (
        "==> trainer-worker-0 <==\n"
        "2024-05-01T10:00:01.000000000Z [rank0]: Fatal Python error: Segmentation fault\n"
        "==> trainer-worker-1 <==\n"
        "2024-05-01T10:05:00.000000000Z [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
        " 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is free.\n"
    )
    d = _diagnose(engine, {"job.log": log})
    assert d.timeline is not None
    assert (d.timeline.first.kind, d.timeline.first.host, d.timeline.first.time) == (
        "crash",
        "trainer-worker-0",
        "10:00:01",
    )
    assert d.verdict == "cuda_oom"
    assert any(
        n.startswith(
            "The verdict is about a later failure (rank 1 on trainer-worker-1 ran out of GPU memory) than the first one (rank 0 on trainer-worker-0"
        )
        for n in d.notes
    )
    # the capture's verdict is about its first failure: no such note
    assert not any("later failure" in n for n in _capture(engine, FILES).notes)


def test_one_combined_log_of_both_nodes(engine: Engine) -> None:
    # `cat node-0.log node-1.log`: no header, two hosts in the tables; each rank's lines find their node
    combined = (CAPTURE / "node-0.log").read_text() + (CAPTURE / "node-1.log").read_text()
    dmesg = (CAPTURE / "node-1.dmesg-T.txt").read_text()
    t = _diagnose(engine, {"all.log": combined, "node-1.dmesg-T.txt": dmesg}).timeline
    assert t is not None
    assert (t.first.kind, t.first.rank, t.first.host) == ("kernel_oom", 3, "node-1")
    assert sorted((f.host, f.rank) for f in t.after) == [("node-0", 0), ("node-0", 1), ("node-1", 2)]


def test_a_healthy_job_has_no_timeline(engine: Engine) -> None:
    healthy = ROOT / "tests" / "fixtures" / "captured" / "torchrun_healthy" / "console.txt"
    assert engine.diagnose([engine.scan("console.txt", healthy.read_bytes())]).timeline is None


def test_nccl_debug_lines_name_their_host_and_pid(engine: Engine) -> None:
    # NCCL_DEBUG=WARN lines begin HOST:PID:TID [DEV] (format of the NCCL issues cited in distributed.yaml)
    log = (
        "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total"
        " capacity of 79.15 GiB of which 1.20 GiB is free.\n"
        "gpu-node-1:183006:183181 [1] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer"
        " gpu-node-3<47861>\n"
        "gpu-node-2:20111:20190 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer"
        " gpu-node-3<47862>\n"
    )
    t = _diagnose(engine, {"job.log": log}).timeline
    assert t is not None
    assert (t.first.kind, t.first.rank) == ("cuda_oom", 5)
    assert [(f.host, f.pid, f.kind) for f in t.after] == [
        ("gpu-node-1", 183006, "peer_lost"),
        ("gpu-node-2", 20111, "peer_lost"),
    ]
    assert t.headline() == (
        "rank 5 ran out of GPU memory; 2 other processes on 2 nodes failed after it or at an unknown time"
    )
