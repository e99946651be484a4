"""Inputs that belong together are read together; an input about another failure is set aside and
said; `--each` diagnoses every input on its own (engine.grouping, `diagnose --each`)."""

from __future__ import annotations

import json
from pathlib import Path

from oomwatch.engine.api import Engine
from tests.conftest import run_oomwatch

ROOT = Path(__file__).resolve().parent.parent
JOB_LOG = ROOT / "examples/torchrun-rank-oom/torchrun.log"
JOB_DMESG = ROOT / "examples/torchrun-rank-oom/dmesg-T.txt"
OTHER_DMESG = ROOT / "tests/fixtures/captured/memcg_dataloader_worker/dmesg-T.txt"
CUDA = """Traceback (most recent call last):
  File "train.py", line 88, in <module>
    loss = model(batch).loss
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB \
of which 1.06 GiB is free. Of the allocated memory 75.10 GiB is allocated by PyTorch
"""
SHM = """ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's workers \
are out of shared memory. Please try to raise your shared memory limit.
"""
STEPS = "epoch 1 step 10 loss 2.31\nepoch 1 step 20 loss 2.02\nKilled\n"


def _json(*args: str) -> tuple[int, object]:
    r = run_oomwatch("diagnose", "-f", "json", *args)
    assert not r.stderr, r.stderr.decode()
    return r.returncode, json.loads(r.stdout)


def test_the_launcher_log_and_its_nodes_dmesg_are_read_together():
    rc, doc = _json(str(JOB_LOG), str(JOB_DMESG))
    assert rc == 3 and doc["set_aside"] == [] and doc["victims"][0]["pid"] == 12922


def test_a_bare_training_log_cannot_be_told_apart_and_stays(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(STEPS)
    rc, doc = _json(str(log), str(JOB_DMESG))
    assert doc["set_aside"] == [] and [i["file"] for i in doc["inputs"]] == [str(log), str(JOB_DMESG)]
    assert doc["victims"][0]["pid"] == 12922


def test_inputs_of_other_failures_are_set_aside_and_said(tmp_path):
    cuda, shm = tmp_path / "gpu-job.log", tmp_path / "loader.log"
    cuda.write_text(CUDA)
    shm.write_text(SHM)
    rc, doc = _json(str(cuda), str(OTHER_DMESG), str(shm))
    assert (rc, doc["verdict"]) == (3, "cuda_oom")
    aside = {a["file"]: a["reason"] for a in doc["set_aside"]}
    assert set(aside) == {str(OTHER_DMESG), str(shm)}, aside
    assert "host RAM" in aside[str(OTHER_DMESG)] and "/dev/shm" in aside[str(shm)]
    assert doc["victims"] == [] or all(v["pid"] != 12665 for v in doc["victims"])
    quoted = [e["file"] for e in doc["evidence"]] + [e["file"] for c in doc["causes"] for e in c["evidence"]]
    assert set(quoted) <= {str(cuda)}, quoted
    assert not [n for n in doc["notes"] if "loader.log" in n or "dmesg" in n]
    text = run_oomwatch("diagnose", str(cuda), str(OTHER_DMESG), str(shm)).stdout.decode()
    assert "Inputs set aside" in text and "--each" in text


def test_a_kill_of_another_job_in_its_own_file_is_listed_apart(tmp_path):
    # the two captures were made on one machine 10 s apart: their times link the files, and the
    # other job's kill (another cgroup) is listed apart as in one whole dmesg
    rc, doc = _json(str(JOB_LOG), str(JOB_DMESG), str(OTHER_DMESG))
    assert doc["set_aside"] == [] and [k["pid"] for k in doc["other_kills"]] == [12665]
    assert [v["pid"] for v in doc["victims"]] == [12922]
    # the same kill a day later: nothing links it, its dead pid is its own, so the file is set aside
    later = tmp_path / "other-node-dmesg.txt"
    later.write_text(OTHER_DMESG.read_text().replace("Sun Nov 29", "Mon Nov 30"))
    rc, doc = _json(str(JOB_LOG), str(JOB_DMESG), str(later))
    assert [a["file"] for a in doc["set_aside"]] == [str(later)], doc["set_aside"]
    assert [v["pid"] for v in doc["victims"]] == [12922] and doc["other_kills"] == []


def test_each_diagnoses_every_input_alone_and_exits_with_the_gravest(tmp_path):
    ok, crash = tmp_path / "ok.log", tmp_path / "crash.log"
    ok.write_text("epoch 1 step 10 loss 2.31\n")
    crash.write_text('Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nKeyError: 3\n')
    rc, docs = _json("--each", str(ok), str(crash))
    assert rc == 4 and isinstance(docs, list)
    assert [(d["inputs"][0]["file"], d["verdict"]) for d in docs] == [(str(ok), "no_oom_evidence"),
                                                                      (str(crash), "other_crash")]  # fmt: skip
    rc, docs = _json("--each", str(crash), str(JOB_DMESG))
    assert rc == 3 and [d["verdict"] for d in docs] == ["other_crash", "cgroup_oom"]
    r = run_oomwatch("diagnose", "--each", str(ok), str(crash))
    text = r.stdout.decode()
    assert text.index(f"=== {ok} ===") < text.index("NO MEMORY FAILURE") < text.index(f"=== {crash} ===")
    md = run_oomwatch("diagnose", "--each", "-f", "markdown", str(ok), str(crash)).stdout.decode()
    assert md.count("\n## ") + md.startswith("## ") == 2


def test_times_minutes_apart_link_inputs_hours_apart_tell_them_apart():
    engine = Engine.load()
    a = engine.scan("node0.log", b"2026-11-29T10:00:01Z Killed\n")
    line = b"DataLoader worker (pid %d) is killed by signal: Killed.\n"
    near = engine.scan("node1.log", b"2026-11-29T10:03:00Z " + line % 77)  # kubectl logs --timestamps
    far = engine.scan("old.log", b"2026-11-28T10:00:00Z " + line % 78)
    assert engine.group([a, near]).aside == ()
    g = engine.group([a, near, far])
    assert [i for i, _ in g.aside] == [2] and " h from " in g.aside[0][1]
