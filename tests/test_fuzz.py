"""A seeded mutation fuzzer over the project's own real fixtures, run in-process through the road
`oomwatch diagnose` takes (sources.read_chunks, Engine.scan, Engine.diagnose, the renderers).

Each case mutates one fixture (byte flips, cuts, duplicated lines, numbers no machine has, NUL / ANSI /
carriage-return floods, two logs interleaved, prefixes nested many times, long hex and digit runs, gzip
wrapping, a gzip cut short) and must give a document the shipped JSON Schema accepts, no size below 0 or
above 1 EiB, no exception, within 50x the time of the fixture itself plus 1 s (a backtracking pattern
takes minutes). The seed is fixed: a failure names its case, and the case is the same on every run.
OOMWATCH_FUZZ_CASES=2000 runs more cases (the default is a few hundred, for CI).

The floods below are the hangs a fuzzer found (issue 12): one anchor word, one repeated line, repeated
report headers and task rows, a million rss samples, a small .gz of hundreds of MB of kernel reports.
Each must cost time in proportion to its length and hold a bounded number of events and reports.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import jsonschema
import pytest

from oomwatch.cli.diagnose import _program
from oomwatch.engine.api import Engine
from oomwatch.engine.kept_events import HINT_HEAD, HINT_MIDDLE, HINT_TAIL, MAX_EVENTS_HEAD, MAX_EVENTS_TAIL
from oomwatch.engine.kernel_lines import MAX_SIZE
from oomwatch.engine.kernel_report import MAX_REPORTS
from oomwatch.engine.scanner import ScanResult
from oomwatch.render.diagnosis import RENDERERS
from oomwatch.sources import read_chunks
from tests.conftest import ROOT

SEED = 20261201
CASES = int(os.environ.get("OOMWATCH_FUZZ_CASES", "400"))
SCHEMA = json.loads((ROOT / "oomwatch/data/diagnosis.schema.json").read_text())
K007 = ROOT / "tests/fixtures/kernel/k-007.log"  # a Proxmox cgroup OOM (tests/fixtures/kernel/SOURCES.md)


def _seeds() -> list[Path]:
    found = sorted((ROOT / "tests/fixtures/kernel").glob("*.log"))
    found += sorted((ROOT / "tests/fixtures/captured").glob("*/*.txt"))
    found += sorted((ROOT / "tests/corpus").glob("*/*/input*.log"))[::5]
    found += sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file() and p.suffix in (".log", ".txt"))
    return [p for p in found if 0 < p.stat().st_size < 1_000_000]


SEEDS = _seeds()
_NUMBER = re.compile(rb"\d+")
_ABSURD = [b"9" * 310, str(10**40).encode(), b"18446744073709551616", b"-1", b"-42446", b"-" + b"9" * 30]


def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 40)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def _cut(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def _duplicate(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 10)):
        i = rng.randrange(len(lines))
        lines[i:i] = [lines[i]] * rng.randint(1, 300)
    return b"\n".join(lines)


def _numbers(rng: random.Random, data: bytes) -> bytes:
    found = list(_NUMBER.finditer(data))
    if not found:
        return data + b"\n" + rng.choice(_ABSURD)
    for m in sorted(rng.sample(found, min(len(found), rng.randint(1, 30))), key=lambda m: -m.start()):
        new = b"-" + m.group() if rng.random() < 0.3 else rng.choice(_ABSURD)
        data = data[: m.start()] + new + data[m.end() :]
    return data


def _control(rng: random.Random, data: bytes) -> bytes:
    flood = rng.choice([b"\x00", b"\x1b[2K\x1b[1A", b"\r", b"\x1b]0;title\x07", b"\r\x00\x1b[31m"])
    at = rng.randrange(len(data) + 1)
    return data[:at] + flood * (rng.choice([100, 20_000]) // len(flood)) + data[at:]


def _interleave(rng: random.Random, data: bytes) -> bytes:
    a, b = data.split(b"\n"), rng.choice(SEEDS).read_bytes().split(b"\n")
    out = []
    while a or b:
        out.append((a if a and (not b or rng.random() < 0.5) else b).pop(0))
    return b"\n".join(out)


def _nest(rng: random.Random, data: bytes) -> bytes:
    prefix = rng.choice([b"[rank0]: [host] kernel: ", b"Jan  5 15:19:27 node1 kernel: ", b"[ 5864.708505] ",
                         b"2024-01-05T15:19:27.123Z stderr F ", b"<6>", b"6,420,820,-;"])  # fmt: skip
    depth = rng.choice([2, 8, 100])
    return b"\n".join(prefix * depth + line for line in data.split(b"\n"))


def _runs(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 3)):
        run = rng.choice([b"0" * 3000 + b"g", b"deadbeef" * 400 + b" x", b" ".join([b"ffffffff81234567"] * 500),
                          b"9" * 5000 + b"x", b" " * 20000 + b"x", b"a.service:" * 500, b"[" * 3000])  # fmt: skip
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i][:40] + run)
    return b"\n".join(lines)


MUTATIONS: list[Callable[[random.Random, bytes], bytes]] = [
    _flip, _cut, _duplicate, _numbers, _control, _interleave, _nest, _runs,
]  # fmt: skip


@cache
def _engine() -> Engine:
    return Engine.load()


def _sizes(doc: object) -> list[int]:
    """Every number under a key that ends in `_bytes`, anywhere in the document."""
    if isinstance(doc, dict):
        out = [v for k, v in doc.items() if k.endswith("_bytes") and isinstance(v, int)]
        return out + [n for v in doc.values() for n in _sizes(v)]
    if isinstance(doc, list):
        return [n for v in doc for n in _sizes(v)]
    return []


def _diagnose(path: Path) -> tuple[dict, ScanResult, float]:
    """What `oomwatch diagnose -f json PATH` does, in this process (the scripts a log names are looked up
    too); the document, the scan, the seconds."""
    engine = _engine()
    start = time.perf_counter()
    notes: list[str] = []
    scan = engine.scan(path.name, read_chunks(str(path), notes=notes))
    scan.notes.extend(notes)
    result = engine.diagnose([scan], program=_program((), [], (str(path),), [scan]))
    text = RENDERERS["json"](result)
    RENDERERS["text"](result)
    RENDERERS["markdown"](result)
    elapsed = time.perf_counter() - start
    doc = json.loads(text)
    jsonschema.validate(doc, SCHEMA)
    bad = [n for n in _sizes(doc) if not 0 <= n <= MAX_SIZE]
    assert not bad, bad
    return doc, scan, elapsed


@cache
def _plain_seconds(seed: Path) -> float:
    return min(_diagnose(seed)[2] for _ in range(2))


def _case(i: int, tmp: Path) -> tuple[Path, Path, str]:
    rng = random.Random(f"{SEED}:{i}")
    seed = rng.choice(SEEDS)
    data = seed.read_bytes()
    names = []
    for _ in range(rng.choice([1, 1, 2])):
        mutate = rng.choice(MUTATIONS)
        names.append(mutate.__name__.strip("_"))
        data = mutate(rng, data) or b"\n"
    wrap = rng.random()
    if wrap < 0.1:
        data, names = gzip.compress(data, compresslevel=1), [*names, "gzip"]
    elif wrap < 0.15:
        packed = gzip.compress(data, compresslevel=1)
        data, names = packed[: rng.randrange(10, len(packed))], [*names, "gzip cut"]
    path = tmp / f"case-{i}.log"
    path.write_bytes(data)
    return seed, path, "+".join(names)


def test_seeded_mutations_of_the_fixtures(tmp_path: Path) -> None:
    failures = []
    for i in range(CASES):
        seed, path, how = _case(i, tmp_path)
        try:
            _, _, seconds = _diagnose(path)
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its case
            failures.append(f"case {i} ({how} of {seed.relative_to(ROOT)}): {type(exc).__name__}: {exc}"[:500])
            continue
        finally:
            path.unlink()
        bound = 50 * _plain_seconds(seed) + 1.0
        if seconds > bound:
            failures.append(f"case {i} ({how} of {seed.relative_to(ROOT)}): {seconds:.2f} s > {bound:.2f} s")
    assert not failures, "\n".join(failures[:20])


# --- the floods a fuzzer found: time in proportion to the length, bounded memory -------------------------------

_REPORT = K007.read_bytes()
_HEADER = next(ln for ln in _REPORT.split(b"\n") if b"invoked oom-killer" in ln)
_ROW = next(ln for ln in _REPORT.split(b"\n") if re.search(rb"\] \[ *\d+\] +\d+ +\d+ +\d+", ln))
_KILLED = next(ln for ln in _REPORT.split(b"\n") if b"Killed process" in ln)


def _after_table_header(lines: list[bytes]) -> bytes:
    at = next(i for i, ln in enumerate(_REPORT.split(b"\n")) if b"[  pid  ]" in ln) + 1
    whole = _REPORT.split(b"\n")
    return b"\n".join(whole[:at] + lines + whole[at:])


def _kills_and_launcher_lines(n: int) -> bytes:
    """``n`` kernel kills of distinct pids, each with its launcher's line (victims were matched to lines by
    reading every event once per report)."""
    out = []
    for i in range(n):
        out.append(_HEADER.replace(b"php-fpm", b"w%d" % i))
        out.append(_KILLED.replace(b"3902942", b"%d" % (100_000 + i)))
        out.append(b"failed (exitcode: -9) local_rank: 0 (pid: %d) of binary: /usr/bin/python" % (100_000 + i))
    return b"\n".join(out) + b"\n"


FLOODS: dict[str, Callable[[int], bytes]] = {
    "distinct kills, each with its launcher line": lambda n: _kills_and_launcher_lines(n // 10),
    "one anchor word, one line": lambda n: b"Killed process " * n,
    "one anchor word per line": lambda n: b"MemoryError\n" * n,
    "exitcode: -9 per line": lambda n: b"exitcode: -9\n" * n,
    "one report line repeated": lambda n: _REPORT + (_KILLED + b"\n") * n,
    "repeated report headers": lambda n: (_HEADER + b"\n") * n + _REPORT,
    "repeated task rows": lambda n: _after_table_header([_ROW] * n),
    "rss samples": lambda n: b"step 1 rss=100MiB\n" * n + _REPORT,
}


@pytest.mark.parametrize("flood", sorted(FLOODS))
def test_a_flood_costs_its_length_and_holds_a_bounded_amount(flood: str, tmp_path: Path) -> None:
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    small.write_bytes(FLOODS[flood](20_000))
    big.write_bytes(FLOODS[flood](80_000))
    _diagnose(small)  # warm
    small_s = min(_diagnose(small)[2] for _ in range(2))
    _, scan, big_s = _diagnose(big)
    assert big_s < 4 * 3 * small_s + 0.5, (small_s, big_s)  # 4x the input: linear is 4x, quadratic 16x
    kinds: dict[str, int] = {}
    for ev in scan.events:
        kinds[ev.kind] = kinds.get(ev.kind, 0) + 1
    assert all(n <= MAX_EVENTS_HEAD + MAX_EVENTS_TAIL for n in kinds.values()), kinds
    assert len(scan.reports) <= MAX_REPORTS


def test_repeated_report_headers_keep_the_first_and_latest_reports_and_say_so(tmp_path: Path) -> None:
    path = tmp_path / "headers.log"
    path.write_bytes((_HEADER + b"\n") * (MAX_REPORTS * 3) + _REPORT)
    doc, scan, _ = _diagnose(path)
    assert len(scan.reports) == MAX_REPORTS
    assert any("kernel OOM reports in this input" in n for n in doc["notes"]), doc["notes"]
    plain, _, _ = _diagnose(K007)
    assert doc["victims"][0]["pid"] == plain["victims"][0]["pid"]  # the real report, last, is kept


def test_rss_samples_past_the_bound_keep_the_first_and_latest_and_say_so(tmp_path: Path) -> None:
    n = 3 * (MAX_EVENTS_HEAD + MAX_EVENTS_TAIL)
    path = tmp_path / "steps.log"
    path.write_bytes(b"".join(b"step %d rss=%dMiB\n" % (i, 100 + i // 1000) for i in range(n)))
    doc, scan, _ = _diagnose(path)
    rss = [ev for ev in scan.events if ev.line.text.startswith("step")]
    # memory figures are hints: the first, the latest and an evenly spaced sample between
    assert HINT_HEAD + HINT_TAIL < len(rss) <= HINT_HEAD + HINT_MIDDLE + HINT_TAIL
    assert rss[0].line.text == "step 0 rss=100MiB"
    assert rss[-1].line.text == f"step {n - 1} rss={100 + (n - 1) // 1000}MiB"  # the latest sample is kept
    assert any("thinned out" in n for n in doc["notes"]), doc["notes"]


def test_a_small_gzip_of_many_kernel_reports_is_read_within_bounds(tmp_path: Path) -> None:
    # a 24 KB block inside gzip's window: a small .gz of 120 MB of kernel reports (the fuzzer's took 197 s)
    block = _REPORT[: _REPORT.rfind(b"\n", 0, 24_000) + 1]
    path = tmp_path / "reports.log.gz"
    with gzip.open(path, "wb", compresslevel=6) as f:
        for _ in range(5000):
            f.write(block)
    assert path.stat().st_size < 5_000_000
    doc, scan, seconds = _diagnose(path)
    assert len(scan.reports) == MAX_REPORTS
    assert any("no task tables" in n for n in doc["notes"]), doc["notes"]
    assert doc["verdict"] == _diagnose(K007)[0]["verdict"]


def test_a_gzip_cut_in_its_middle_keeps_what_was_read(tmp_path: Path) -> None:
    packed = gzip.compress(_REPORT + b"".join(b"epoch 1 step %d loss 0.%d\n" % (i, i) for i in range(20_000)))
    path = tmp_path / "cut.log.gz"
    path.write_bytes(packed[: len(packed) * 3 // 4])
    doc, scan, _ = _diagnose(path)
    assert scan.reports and scan.reports[0].victim_pid == 3902942, "the reports before the cut are diagnosed"
    assert any("ends before its end" in n for n in doc["notes"]), doc["notes"]
