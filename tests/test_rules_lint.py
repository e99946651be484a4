"""`oomwatch rules lint` / `rules list` and `--rules DIR` overrides, on real rule files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import ROOT, run_oomwatch

BROKEN = textwrap.dedent(
    """\
    rules:
      - id: OW-F-9001
        name: broken_pattern
        description: pattern does not compile
        event: crash
        anchors: ["boom"]
        pattern: 'boom ('
        examples: {match: ["boom ("]}
      - id: OW-F-9002
        name: unknown_event
        description: names an event kind that does not exist
        event: not_a_kind
        anchors: ["zap"]
        pattern: 'zap'
        examples: {match: ["zap"]}
      - id: OW-F-9003
        name: example_without_anchor
        description: the match example lacks the anchor, so the prefilter would hide it
        event: crash
        anchors: ["ANCHOR"]
        pattern: 'fizz'
        examples: {match: ["fizz"], no_match: ["fizz ANCHOR"]}
      - id: OW-F-9004
        name: missing_keys
      - id: OW-F-9005
        name: short_anchor
        description: a two-byte anchor is in most lines
        event: crash
        anchors: ["-9"]
        pattern: 'code -9'
        examples: {match: ["exit code -9"]}
    """
)
BAD_VERDICT = textwrap.dedent(
    """\
    verdicts:
      - id: OW-V-9001
        verdict: host_oom
        when: {fact: no.such.fact, gt: 0}
        summary: x
    """
)


def _write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_lint_builtin_ok() -> None:
    r = run_oomwatch("rules", "lint")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.startswith(b"ok: ")


def test_lint_reports_every_error_with_file_and_line(tmp_path: Path) -> None:
    _write(tmp_path, "fingerprints/broken.yaml", BROKEN)
    _write(tmp_path, "verdicts.yaml", BAD_VERDICT)
    r = run_oomwatch("rules", "lint", str(tmp_path))
    assert r.returncode == 5
    err = r.stderr.decode()
    assert "broken.yaml:2: pattern does not compile" in err
    assert "broken.yaml:9: unknown event kind 'not_a_kind'" in err
    assert "broken.yaml:16: OW-F-9003 example_without_anchor: match example contains none of the anchors" in err
    assert "no_match example matches" in err
    assert "broken.yaml:23: missing required key 'description'" in err
    assert "broken.yaml:25: OW-F-9005 short_anchor: anchor '-9' is shorter than 4 bytes" in err
    assert "verdicts.yaml:2: OW-V-9001: unknown fact 'no.such.fact'" in err
    assert "Traceback" not in err


def test_lint_reports_invalid_yaml_with_line(tmp_path: Path) -> None:
    _write(tmp_path, "fingerprints/bad.yaml", "rules:\n  - id: x\n    name: [unclosed\n")
    r = run_oomwatch("rules", "lint", str(tmp_path))
    assert r.returncode == 5
    assert "bad.yaml:" in r.stderr.decode() and "invalid YAML" in r.stderr.decode()


def test_diagnose_refuses_broken_rules_in_one_line(tmp_path: Path) -> None:
    _write(tmp_path, "fingerprints/broken.yaml", BROKEN)
    r = run_oomwatch("diagnose", "--rules", str(tmp_path), str(ROOT / "tests/fixtures/kernel/k-002.log"))
    assert r.returncode == 5
    assert len(r.stderr.decode().strip().splitlines()) == 1


def test_rules_dir_adds_a_fingerprint(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "fingerprints/site.yaml",
        textwrap.dedent(
            """\
            rules:
              - id: OW-F-9100
                name: site_watchdog_kill
                description: our site's watchdog kills jobs that exceed their memory budget
                event: userspace_oom_kill
                anchors: ["memwatchdog:"]
                pattern: 'memwatchdog: killed pid (?P<pid>\\d+) \\((?P<name>[^)]+)\\)'
                examples:
                  match: [{text: "memwatchdog: killed pid 77 (python)", fields: {pid: "77", name: python}}]
                  no_match: ["memwatchdog: started"]
            """
        ),
    )
    log = _write(tmp_path, "job.log", "step 1 loss 2.0\nmemwatchdog: killed pid 77 (python)\n")
    r = run_oomwatch("diagnose", "--format", "json", "--rules", str(tmp_path), str(log))
    out = json.loads(r.stdout)
    assert r.returncode == 3
    assert out["verdict"] == "userspace_oom_kill"
    assert out["victims"][0]["pid"] == 77
    # without the site rule the line means nothing
    r = run_oomwatch("diagnose", "--format", "json", str(log))
    assert json.loads(r.stdout)["verdict"] == "no_oom_evidence" and r.returncode == 0


def test_rules_dir_overrides_a_verdict_by_id(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "verdicts.yaml",
        "verdicts:\n  - id: OW-V-001\n    verdict: host_oom\n    confirmed: true\n"
        "    when: {fact: kernel.global_kills, gt: 0}\n    summary: SITE TEXT {victim}\n",
    )
    r = run_oomwatch(
        "diagnose", "--format", "json", "--rules", str(tmp_path), str(ROOT / "tests/fixtures/kernel/k-002.log")
    )
    assert json.loads(r.stdout)["summary"].startswith("SITE TEXT pid 1532")


def test_rules_list() -> None:
    r = run_oomwatch("rules", "list")
    assert r.returncode == 0
    lines = r.stdout.decode().splitlines()
    assert any("\tverdict:no_oom_evidence\t" in ln for ln in lines)
    assert any("event:cuda_oom" in ln for ln in lines)


def test_lint_refuses_duplicate_keys(tmp_path: Path) -> None:
    _write(tmp_path, "fingerprints/dup.yaml", "rules:\n  - id: OW-F-9200\n    id: OW-F-9201\n")
    r = run_oomwatch("rules", "lint", str(tmp_path))
    assert r.returncode == 5
    assert "dup.yaml:3: invalid YAML: duplicate key 'id'" in r.stderr.decode()
