"""A crash that is not memory is still a failure: the exception that ended a Python program is
`other_crash`, exit 4, with its line as evidence (it said no_oom_evidence and exit 0, which the
README keeps for "no memory failure and no crash found"); a memory error's traceback stays a memory
verdict, and an exception a log only mentions is no crash."""

from __future__ import annotations

import json

from tests.conftest import run_oomwatch

TRACE = 'Traceback (most recent call last):\n  File "train.py", line 41, in <module>\n    main()\n'


def _diagnose(text: str) -> tuple[int, dict]:
    r = run_oomwatch("diagnose", "-f", "json", "-", stdin=text.encode())
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    return r.returncode, json.loads(r.stdout)


def test_an_uncaught_exception_is_a_crash_exit_4():
    for last in ("RuntimeError: Expected all tensors to be on the same device", "AssertionError",
                 "[rank0]: KeyError: 'input_ids'"):  # fmt: skip
        rc, doc = _diagnose(TRACE + last + "\n")
        assert (rc, doc["verdict"]) == (4, "other_crash"), (last, doc["verdict"], doc["summary"])
        assert any(e["line"] == 4 for e in doc["evidence"]), doc["evidence"]


def test_a_memory_errors_traceback_stays_memory_and_a_mentioned_exception_is_no_crash():
    rc, doc = _diagnose(TRACE + "MemoryError: Unable to allocate 3.00 GiB for an array with shape (402653184,)\n")
    assert doc["verdict"] != "other_crash" and rc != 4, doc["verdict"]
    rc, doc = _diagnose("step 10 loss 2.3\nWARNING: ValueError: could not parse line 7, skipped\nstep 11 loss 2.2\n")
    assert (rc, doc["verdict"]) == (0, "no_oom_evidence"), doc["verdict"]
