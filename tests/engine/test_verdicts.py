"""The verdict table (engine.verdicts) is the one list of verdicts: the rules, the exit codes, the
headlines and the diagnosis JSON schema agree with it."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from oomwatch.engine.rules.loader import builtin_rules_dir, load_rules
from oomwatch.engine.verdicts import (
    BY_ID,
    HEADLINES,
    IDS,
    KILL_VERDICTS,
    MEMORY_VERDICTS,
    NO_OOM_EVIDENCE,
    OOM_KILL_VERDICTS,
    OTHER_FAILURE_VERDICTS,
    RAN_OUT,
    TABLE,
)
from oomwatch.exitcodes import Exit, for_verdict, gravest

SCHEMA = Path(__file__).resolve().parents[2] / "oomwatch" / "data" / "diagnosis.schema.json"


def _rules_yaml(name: str) -> dict:
    return yaml.safe_load((builtin_rules_dir() / name).read_text(encoding="utf-8"))


def test_ids_are_unique_and_each_has_a_headline() -> None:
    assert len(IDS) == len(set(IDS)) == len(TABLE) == len(BY_ID)
    assert NO_OOM_EVIDENCE in IDS
    for v in TABLE:
        assert HEADLINES[v.id] == v.headline and v.headline.strip() == v.headline and v.headline
        assert v.exit_class in ("memory", "other", "none")


def test_every_verdict_the_rules_name_is_in_the_table() -> None:
    used = {item["verdict"] for item in _rules_yaml("verdicts.yaml")["verdicts"]}
    for cause in _rules_yaml("causes.yaml")["causes"]:
        used.update(cause.get("verdicts") or ())
    assert used, "no verdict read from rules/"
    assert used <= set(IDS), sorted(used - set(IDS))


def test_the_loaded_rules_give_every_verdict_they_may() -> None:
    rules = load_rules()
    assert not rules.errors
    assert {r.verdict for r in rules.verdicts} <= set(IDS)
    assert any(r.verdict == NO_OOM_EVIDENCE for r in rules.verdicts)


def test_the_schema_enum_is_the_table() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["properties"]["verdict"]["enum"] == list(IDS)


def test_exit_codes_follow_the_exit_class() -> None:
    expected = {"memory": Exit.MEMORY_FAILURE, "other": Exit.OTHER_FAILURE, "none": Exit.OK}
    for v in TABLE:
        assert for_verdict(v.id) == expected[v.exit_class], v.id
        assert v.memory == (v.id in MEMORY_VERDICTS)
    assert for_verdict("not_a_verdict") == Exit.OK
    assert gravest(["no_oom_evidence", "other_crash", "cuda_oom"]) == Exit.MEMORY_FAILURE


def test_the_named_sets() -> None:
    """As they were spelled before the table (exitcodes, grouping, diagnose, agent.incidents)."""
    assert {
        "host_oom", "cgroup_oom", "userspace_oom_kill", "cuda_oom", "shm_exhausted",
        "python_memory_error", "swap_thrash",
    } == MEMORY_VERDICTS  # fmt: skip
    assert {"sigkill_unexplained", "other_crash"} == OTHER_FAILURE_VERDICTS
    assert {"host_oom", "cgroup_oom"} == OOM_KILL_VERDICTS
    assert {"host_oom", "cgroup_oom", "userspace_oom_kill", "sigkill_unexplained"} == KILL_VERDICTS
    assert RAN_OUT == {
        "host_oom": "host RAM", "cgroup_oom": "host RAM", "userspace_oom_kill": "host RAM",
        "swap_thrash": "host RAM", "sigkill_unexplained": "host RAM", "python_memory_error": "host RAM",
        "cuda_oom": "GPU memory", "shm_exhausted": "/dev/shm",
    }  # fmt: skip
