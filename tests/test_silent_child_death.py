"""A launcher that stops the job because a child died, when nothing says why the child died, is a
probable (unconfirmed) host OOM: the child said nothing, as a SIGKILLed process does (OW-V-029).
With the child's traceback, or only a rank's own `Received SIGTERM`, it is not."""

from __future__ import annotations

import json

from tests.conftest import run_oomwatch

DEEPSPEED = (  # the shape of DeepSpeed's launcher output cut before its `exits with return code` line
    "[2024-01-22 16:50:44,316] [INFO] [utils.py:799:see_memory_usage] CPU Virtual Memory: used = 26.4 GB, percent = 84.6%\n"
    "[2024-01-22 16:50:49,553] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1080504\n"
)  # fmt: skip
TORCHRUN = (
    "[rank0]: step 120 loss 1.93\n"
    "W1201 09:28:44.971000 3292 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 3300 "
    "closing signal SIGTERM\n"
)
TRACE = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\nKeyError: 3\n'


def _diagnose(text: str) -> tuple[int, dict]:
    r = run_oomwatch("diagnose", "-f", "json", "-", stdin=text.encode())
    return r.returncode, json.loads(r.stdout)


def test_a_launcher_stopping_the_job_after_a_silent_death_is_a_probable_oom():
    for log in (DEEPSPEED, TORCHRUN):
        rc, doc = _diagnose(log)
        assert (rc, doc["verdict"], doc["confirmed"], doc["rule"]) == (3, "host_oom", False, "OW-V-029"), doc["summary"]
        assert "exit" in doc["summary"] and "not proven" in doc["summary"]


def test_a_childs_traceback_or_a_ranks_own_sigterm_is_not():
    rc, doc = _diagnose(TRACE + DEEPSPEED)
    assert doc["verdict"] == "other_crash" and rc == 4
    rc, doc = _diagnose("[rank: 1] Received SIGTERM: 15\n")
    assert doc["verdict"] != "host_oom", doc["summary"]
