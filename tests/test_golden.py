"""Golden whole-log cases: tests/cases/<name>/ holds input*.log (read together, in name
order) and expected.json, the full JSON output. Reviewers read the JSON diff.

Update after an intended change:  python -m pytest tests/test_golden.py --update-golden
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT, run_oomwatch

CASES = sorted(p for p in (ROOT / "tests" / "cases").iterdir() if p.is_dir())
SCHEMA = json.loads((ROOT / "oomwatch" / "data" / "diagnosis.schema.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_golden_case(case: Path, update_golden: bool) -> None:
    inputs = sorted(p.name for p in case.glob("input*") if p.is_file())
    assert inputs, f"{case} has no input*.log"
    r = run_oomwatch("diagnose", "--format", "json", *inputs, cwd=case)
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    got = json.loads(r.stdout)
    jsonschema.validate(got, SCHEMA)
    expected_file = case / "expected.json"
    if update_golden or not expected_file.exists():
        expected_file.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
        if not update_golden:
            pytest.fail(f"wrote new {expected_file.relative_to(ROOT)}: review it, then re-run")
    assert got == json.loads(expected_file.read_text())
