"""`oomwatch diagnose` reads the code that ran: --script, --command (its script, and the flags it
was given), a script the logs name when it is here; --no-code reads none. The committed capture of
the keep_in_memory reproduction (its console prints nothing of how it loads) is the input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import FIXTURES, ROOT, run_oomwatch

CAPTURE = FIXTURES / "scenarios" / "keep_in_memory"
WORKLOAD = ROOT / "scenarios" / "workloads" / "keep_in_memory.py"


def _diag(*args: str, cwd: Path = ROOT) -> dict:
    r = run_oomwatch("diagnose", "-f", "json", str(CAPTURE / "console.txt"), str(CAPTURE / "kmsg.txt"), *args, cwd=cwd)
    assert r.returncode == 3, r.stderr.decode()
    return json.loads(r.stdout)


def _top(d: dict) -> tuple[str, bool]:
    return d["causes"][0]["id"], d["cause_determined"]


def test_the_command_line_decides_the_scripts_flags() -> None:
    meta = json.loads((CAPTURE / "meta.json").read_text())
    assert "--keep-in-memory" in meta["command"]
    d = _diag("--command", meta["command"])
    assert _top(d) == ("keep_in_memory_duplication", True)
    code = [e for e in d["causes"][0]["evidence"] if e["file"] == "scenarios/workloads/keep_in_memory.py"]
    assert (
        code and "keep_in_memory=args.keep_in_memory" in code[0]["text"] and "from the command line" in code[0]["text"]
    )
    assert any(n.startswith("code read (local") for n in d["notes"])


def test_a_script_alone_reads_its_flags_defaults() -> None:
    # without the command line, --keep-in-memory (store_true) is at its default: off
    d = _diag("--script", str(WORKLOAD))
    assert _top(d) == ("dataset_in_ram", True)
    assert not any(c["id"] == "keep_in_memory_duplication" for c in d["causes"])


def test_no_code_and_a_named_script_that_is_not_here(tmp_path: Path) -> None:
    d = _diag("--no-code")
    assert _top(d) == ("dataset_in_ram", True)  # the general form: ranks alike, loading a dataset
    assert not any(n.startswith("code read") for n in d["notes"])
    # the console names scenarios/workloads/keep_in_memory.py FAILED: from the checkout it is found...
    assert any(n.startswith("code read (local") for n in _diag()["notes"])
    # ...from elsewhere it is not, and nothing is claimed from it
    shutil.copy(CAPTURE / "console.txt", tmp_path / "console.txt")
    away = run_oomwatch("diagnose", "-f", "json", "console.txt", str(CAPTURE / "kmsg.txt"), cwd=tmp_path)
    assert not any(n.startswith("code read") for n in json.loads(away.stdout)["notes"])


def test_bad_command_and_missing_script_are_usage_errors() -> None:
    bad = run_oomwatch("diagnose", str(CAPTURE / "console.txt"), "--command", "torchrun 'unclosed")
    assert bad.returncode == 2 and b"--command" in bad.stderr and b"Traceback" not in bad.stderr
    missing = run_oomwatch("diagnose", str(CAPTURE / "console.txt"), "--script", "/nonexistent/train.py")
    assert missing.returncode == 2 and b"Traceback" not in missing.stderr
