"""Every fingerprint's own examples: `match` lines match (with the stated fields),
`no_match` lines do not — checked the way the scanner sees lines."""

from __future__ import annotations

import pytest

from oomwatch.engine.rules.lint import check_examples, lint
from oomwatch.engine.rules.loader import load_rules

RULES = load_rules()


def test_builtin_rules_load_and_lint_clean() -> None:
    assert [str(e) for e in lint(RULES)] == []
    assert len(RULES.fingerprints) >= 50
    assert RULES.verdicts[-1].verdict == "no_oom_evidence"


@pytest.mark.parametrize("fp", RULES.fingerprints, ids=lambda fp: f"{fp.id}-{fp.name}")
def test_fingerprint_examples(fp) -> None:
    assert check_examples(fp) == []


def test_every_event_kind_is_used_or_kernel() -> None:
    used = {fp.event for fp in RULES.fingerprints} | {"kernel_oom"}
    assert set(RULES.events) - used == set()
