"""Swap figures printed one a line (/proc/meminfo, vmstat -s) are read together, within one file."""

from __future__ import annotations

from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner

RULES = load_rules()
TOTAL = "SwapTotal:       2097148 kB\n"
EMPTY = "SwapFree:              0 kB\n"


def _facts(*files: tuple[str, str]) -> dict:
    scanner = Scanner(RULES)
    return diagnose([scanner.scan(name, [text.encode()]) for name, text in files], RULES).facts


def test_meminfo_total_then_free_make_the_ratio() -> None:
    facts = _facts(("meminfo", TOTAL + EMPTY))
    assert (facts["swap.total_bytes"], facts["swap.used_ratio"]) == (2097148 * 1024, 1.0)


def test_a_free_line_alone_or_far_from_its_total_or_in_another_file_says_nothing() -> None:
    assert _facts(("meminfo", EMPTY))["swap.used_ratio"] is None
    assert _facts(("meminfo", TOTAL + "x\n" * 6 + EMPTY))["swap.used_ratio"] is None
    assert _facts(("a", TOTAL), ("b", EMPTY))["swap.used_ratio"] is None


def test_vmstat_s_lines_are_one_report() -> None:
    text = "      2097148 K total swap\n      1048574 K used swap\n      1048574 K free swap\n"
    assert _facts(("vmstat", text))["swap.used_ratio"] == 0.5
