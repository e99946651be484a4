"""A benign corpus (tests/corpus/benign/SOURCES.md): healthy training and node logs full of
near-misses. No fingerprint of a failure may match a line and no verdict may fire."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner
from tests.conftest import FIXTURES, ROOT

BENIGN = sorted(p for p in (ROOT / "tests" / "corpus" / "benign").iterdir() if p.suffix != ".md")
BENIGN.append(FIXTURES / "captured" / "torchrun_healthy" / "console.txt")
RULES = load_rules()
# kinds that state a fact rather than a failure: healthy output may carry them (a memory.events dump
# of zeros, a torch.cuda.memory_summary() table with no OOM)
INFORMATIONAL = {"not_oomkilled", "swap_full", "hint", "memcg_counter", "cuda_memory_summary"}


@pytest.mark.parametrize("path", BENIGN, ids=lambda p: p.name)
def test_no_verdict_on_healthy_logs(path: Path) -> None:
    scan = Scanner(RULES).scan(path.name, [path.read_bytes()])
    assert [(e.rule, e.line.no, e.line.text) for e in scan.events if e.kind not in INFORMATIONAL] == []
    assert scan.reports == []
    result = diagnose([scan], RULES)
    assert (result.verdict, result.causes) == ("no_oom_evidence", ())


def test_benign_corpus_is_not_empty() -> None:
    assert len(BENIGN) >= 5
