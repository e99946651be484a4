"""The alert rules (deploy/prometheus/): `promtool check rules` and `promtool test rules` on them, every
alert complete (for, severity, summary, description, a runbook section that exists) and unit-tested
both firing and not firing, and every metric they read one the agent exports.

promtool comes from Debian's prometheus package: skipped where it is missing, except in CI (CI=true).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.conftest import require_tool
from tests.deploy.promnames import promql_names

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "oomwatch.rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "oomwatch.rules.test.yaml"
RUNBOOK = ROOT / "docs" / "alerts.md"
SEVERITIES = {"critical", "warning", "info"}


def promtool() -> str:
    return require_tool("promtool", "Debian: apt-get install prometheus")


def alerts() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def test_promtool_checks_the_rules():
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout, done.stdout


def test_promtool_unit_tests_pass():
    done = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_a_broken_expectation_fails_promtool(tmp_path: Path):
    """The unit tests can fail: the same file with one expected label changed does."""
    (tmp_path / RULES.name).write_text(RULES.read_text())
    broken = RULE_TESTS.read_text().replace("training_job: llm-pretrain, role: rank", "training_job: other, role: rank")
    assert broken != RULE_TESTS.read_text()
    (tmp_path / RULE_TESTS.name).write_text(broken)
    done = subprocess.run(
        [promtool(), "test", "rules", str(tmp_path / RULE_TESTS.name)], capture_output=True, text=True
    )
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr, done.stdout + done.stderr


def test_every_alert_is_complete_with_a_runbook_section():
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("## ")
    }
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names)) >= 9
    for a in alerts():
        assert "for" in a, a["alert"]
        assert a["labels"]["severity"] in SEVERITIES, a["alert"]
        ann = a["annotations"]
        assert ann.get("summary") and ann.get("description"), a["alert"]
        page, _, anchor = ann["runbook_url"].partition("#")
        assert page == "docs/alerts.md" and anchor == a["alert"].lower() and anchor in anchors, ann["runbook_url"]
    assert anchors == {n.lower() for n in names}, "a runbook section without its alert, or the reverse"


def test_every_alert_is_unit_tested_firing_and_not_firing():
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    for a in alerts():
        assert cases.get(a["alert"]) == {True, False}, f"{a['alert']}: {cases.get(a['alert'])}"


def test_every_metric_and_label_the_alerts_read_is_exported(exported: tuple[set[str], set[str]]):
    names, labels = exported
    for a in alerts():
        metrics, used_labels = promql_names(a["expr"])
        assert metrics, a["alert"]
        assert metrics <= names, f"{a['alert']} reads {sorted(metrics - names)}, which the agent does not export"
        assert used_labels <= labels, f"{a['alert']} uses labels {sorted(used_labels - labels)}"
        templated = set(re.findall(r"\$labels\.(\w+)", yaml.safe_dump(a["annotations"])))
        assert templated <= labels | {"instance", "job"}, f"{a['alert']} templates {sorted(templated - labels)}"
