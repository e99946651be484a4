"""Hostile inputs made from a real report (tests/fixtures/kernel/k-007.log, a Proxmox cgroup OOM, see
its SOURCES.md): lines that made a pattern backtrack without end, numbers no machine has, floods of
one line. `diagnose` must answer each within the same time as the plain report, without a traceback,
with a document the shipped JSON Schema accepts and no negative or absurd size in it."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import jsonschema
import pytest

from oomwatch.engine.kernel_lines import MAX_SIZE, is_report_shaped
from oomwatch.sources import read_chunks
from tests.conftest import ROOT, run_oomwatch

REPORT = (ROOT / "tests/fixtures/kernel/k-007.log").read_text()
SCHEMA = json.loads((ROOT / "oomwatch/data/diagnosis.schema.json").read_text())
STAMP = "[Di Aug 12 03:54:03 2025] "


def _insert_after(text: str, anchor: str, lines: list[str]) -> str:
    at = text.index(anchor)
    end = text.index("\n", at) + 1
    return text[:end] + "".join(STAMP + line + "\n" for line in lines) + text[end:]


def _sizes(doc: object) -> list[int]:
    """Every number under a key that ends in `_bytes`, anywhere in the document."""
    out: list[int] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k.endswith("_bytes") and isinstance(v, int):
                out.append(v)
            out.extend(_sizes(v))
    elif isinstance(doc, list):
        for v in doc:
            out.extend(_sizes(v))
    return out


def _diagnose(tmp_path: Path, text: str | bytes, name: str = "hostile.log") -> dict:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    r = run_oomwatch("diagnose", "-f", "json", str(path), timeout=60)
    assert r.returncode in (0, 3), r.stderr.decode()[-2000:]
    assert b"Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert all(0 <= n <= MAX_SIZE for n in _sizes(doc)), _sizes(doc)
    return doc


# each family: lines a process on the node can print, put inside the report
FAMILIES = {
    # hex runs: `^(?:[0-9a-f]{8,16}\s*){2,}$` split them every possible way (81 zeros: 0.1 s, 101: 6 s)
    "hex runs": ["0" * n + "g" for n in (101, 400, 3000)] + ["deadbeef" * 500 + " x"],
    "spaced stack words with junk": [" ".join(["ffffffff81234567"] * 2000) + " zz"],
    "digit runs in fields": ["oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null)," + "9" * 5000 + "x"],
    "numbers no machine has": [
        "[1833437]     0 1833437 " + "9" * 310 + "      630    98304        0             0 huge",
        "[1833438]     0 1833438   -42446     -630   -98304        0             0 negative",
    ],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_hostile_line_inside_a_report_costs_no_more_than_the_report(family: str, tmp_path: Path) -> None:
    text = _insert_after(REPORT, "Tasks state" if "numbers" in family else "Call Trace:", FAMILIES[family])
    start = time.monotonic()
    plain = _diagnose(tmp_path, REPORT, "plain.log")
    plain_s = time.monotonic() - start
    start = time.monotonic()
    doc = _diagnose(tmp_path, text)
    hostile_s = time.monotonic() - start
    # the verdict and victim stand: the hostile lines are data, not part of the report's meaning
    assert doc["verdict"] == plain["verdict"] and doc["victims"][0]["pid"] == plain["victims"][0]["pid"]
    # a process start dominates both; backtracking would take minutes
    assert hostile_s < plain_s * 3 + 5, (hostile_s, plain_s)


def test_the_victims_own_row_with_negative_numbers_gives_no_negative_size(tmp_path: Path) -> None:
    # the victim's sizes come from its task-table row when its "Killed process" line is cut short
    row = "[3902942]  1000 3902942  3685044  3195335 27021312        0             0 php-fpm"
    assert row in REPORT
    text = REPORT.replace(row, "[3902942]  1000 3902942  -3685044  -3195335 -27021312        0             0 php-fpm")
    killed = "Killed process 3902942 (php-fpm) total-vm"
    text = text[: text.index(killed) + len("Killed process 3902942 (php-fpm)")] + "\n"
    doc = _diagnose(tmp_path, text)  # no negative size anywhere (checked in _diagnose)
    assert doc["victims"] and doc["victims"][0]["pid"] == 3902942


def test_the_victims_sizes_from_a_killed_line_with_absurd_numbers_are_unknown(tmp_path: Path) -> None:
    text = REPORT.replace("anon-rss:12625252kB", "anon-rss:" + "9" * 30 + "kB")
    doc = _diagnose(tmp_path, text)
    victim = doc["victims"][0]
    assert victim["pid"] == 3902942 and victim.get("anon_rss_bytes") in (None, 12625252 * 1024)


def test_a_dataloader_line_with_a_pid_no_machine_has_is_no_crash(tmp_path: Path) -> None:
    line = "RuntimeError: DataLoader worker (pid(s) 4242, " + "7" * 6000 + ") exited unexpectedly\n"
    doc = _diagnose(tmp_path, line * 3)
    assert all(len(str(v.get("pid") or "")) <= 10 for v in doc["victims"]), doc["victims"]


def test_raw_stack_words_are_still_report_lines() -> None:
    assert is_report_shaped("ffff8880 00000000 ffffffff81234567")
    assert is_report_shaped("0000000000000000 ffffffffffffffff  ")
    assert not is_report_shaped("00000000")  # one word alone is not a stack dump
    assert not is_report_shaped("0" * 5000 + "g")


def test_a_gzip_input_is_read_up_to_its_bound_and_the_rest_is_said(tmp_path: Path) -> None:
    path = tmp_path / "big.log.gz"
    with gzip.open(path, "wb") as f:
        for _ in range(64):
            f.write(b"step 1 rss=100MiB\n" * 4096)
    notes: list[str] = []
    data = b"".join(read_chunks(str(path), chunk_size=10_000, notes=notes, max_gzip=100_000))
    assert len(data) == 100_000 and len(notes) == 1 and "only the first" in notes[0]
    notes.clear()
    data = b"".join(read_chunks(str(path), notes=notes))
    assert len(data) == 64 * 4096 * len(b"step 1 rss=100MiB\n") and notes == []


def test_a_task_row_with_a_negative_or_absurd_size_gives_none_for_it() -> None:
    from oomwatch.engine.kernel_body import parse_table_header, parse_task_row

    cols = parse_table_header(
        "[  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes swapents oom_score_adj name"
    )
    assert cols is not None
    row = parse_task_row(
        "[  30705]     0 30705   555442   176679   -155793    20886  0  -2007040  0  -1000 python3", cols, 1
    )
    assert row is not None and row.anon_rss_bytes is None and row.file_rss_bytes == 20886 * 4096
    assert row.oom_score_adj == -1000  # a score may be negative: it is kept
    huge = parse_task_row("[  30705]     0 30705   555442   " + "9" * 20 + "  1  2  0  4096  0  0 python3", cols, 1)
    assert huge is not None and huge.rss_bytes is None and huge.anon_rss_bytes == 4096


def _worst_cost(pattern: object, text: str) -> float:
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        try:
            pattern.search(text, timeout=5)  # type: ignore[attr-defined]
        except TimeoutError:
            return 5.0
        best = min(best, time.perf_counter() - start)
    return best


def test_every_rule_pattern_costs_linear_time_on_runs_of_one_unit() -> None:
    # runs a process can print inside a line that holds a rule's anchor: spaces (`^\s*-?\s*reason:` split a
    # run of 32k spaces every way: 4 s), a word run before a suffix (`[\w.]+\.service: ` on "a.service:"
    # repeated: 25 s), digits, brackets; and each anchor repeated
    from oomwatch.engine.rules.loader import load_rules

    rules = load_rules([])
    units = [" ", "a", "0", "a.service:", ": ", "[", "rss ", "x=1 ", "\t-", "ab_c."]
    patterns = [(fp.id, fp.pattern, fp.anchors[0] + " ", [a + " " for a in fp.anchors]) for fp in rules.fingerprints]
    patterns += [(f"{r.__class__.__name__}:{getattr(r, 'name', '')}", r.pattern, "", []) for r in rules.activities]
    patterns += [(f"{r.__class__.__name__}:{getattr(r, 'name', '')}", r.pattern, "", []) for r in rules.streams]
    patterns += [(r.id, p, "", []) for r in rules.code for p in [getattr(r, "pattern", None)] if p is not None]
    slow = []
    for name, pattern, lead, more in patterns:
        for unit in units + more:
            small = _worst_cost(pattern, lead + unit * (4000 // len(unit)))
            big = _worst_cost(pattern, lead + unit * (32000 // len(unit)))
            if big > 8 * 4 * small + 0.05:  # 8x the text: linear is 8x, quadratic 64x
                slow.append((name, unit, round(small * 1000, 2), round(big * 1000, 2)))
    assert not slow, slow


def test_a_size_no_machine_has_is_no_size_and_no_crash() -> None:
    from oomwatch.engine.sizes import parse_size

    for text in ("9" * 310, "9" * 310 + " GiB", str(10**40) + "kB", "1" * 5000 + ".5 MiB", "4194304 TiB"):
        assert parse_size(text) is None, text  # no OverflowError (issue 12), no size above 1 EiB
    assert parse_size("1048576 TiB") == MAX_SIZE  # 1 EiB itself is still a size
    assert parse_size("-5 MiB") is None and parse_size("15.78 GiB") == round(15.78 * 2**30)


def test_a_traceback_naming_a_script_no_file_system_takes_is_no_crash(tmp_path: Path) -> None:
    # found by the fuzzer (a byte flip and a number of 310 nines in a DataLoader traceback): diagnose looks for
    # the script a traceback names, and stat() refused a path component of hundreds of characters (a traceback)
    frame = '  File "/usr/' + "9" * 400 + '/train.py", line 12, in <module>\n'  # /usr exists: the name is looked up
    text = (
        "Traceback (most recent call last):\n"
        + frame
        + "RuntimeError: DataLoader worker (pid 12) is killed by signal: Bus error.\n"
    )
    doc = _diagnose(tmp_path, text)
    assert doc["victims"] and doc["victims"][0]["pid"] == 12


def test_a_summary_line_of_repeated_fields_costs_linear_time() -> None:
    # `,task=(.*?),pid=...$` tried every `,task=` against the line's end: 680 of them in 4 KB, 20 ms a line
    from oomwatch.engine.kernel_lines import parse_summary

    for unit in (",task=", ",oom_memcg=", ",task_memcg=", ",pid=1"):
        texts = ["oom-kill:constraint=CONSTRAINT_MEMCG" + unit * (n // len(unit)) for n in (4000, 32000)]
        small, big = (min(_timed(parse_summary, t) for _ in range(3)) for t in texts)
        assert big < 8 * 4 * small + 0.002, (unit, small, big)
    whole = "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=py,x,pid=12,uid=0"
    s = parse_summary(whole)
    assert s is not None and (s.oom_memcg, s.task_memcg, s.task, s.pid, s.uid) == ("/a", "/a/b", "py,x", 12, 0)


def _timed(fn: object, text: str) -> float:
    start = time.perf_counter()
    fn(text)  # type: ignore[operator]
    return time.perf_counter() - start
