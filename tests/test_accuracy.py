"""Regression guard on the labelled corpora (tests/corpus/*/*/label.yaml, see their READMEs):
real logs from public bug reports and reference kernel reports. The thresholds sit a little
under what is measured today (bench/accuracy.py prints it), so a change that breaks formats
fails here."""

from __future__ import annotations

import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from accuracy import case_dirs, score  # noqa: E402


def test_corpus_accuracy_does_not_regress() -> None:
    s = score(case_dirs(ROOT))
    assert s.cases >= 90
    assert s.klass / s.cases >= 0.93, s.misses
    assert s.verdict / s.cases >= 0.90, s.misses
    for key, (ok, n) in s.victim.items():
        assert n and ok / n >= 0.90, (key, s.misses)
