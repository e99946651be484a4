"""Accuracy of `oomwatch diagnose` on the labelled corpora (tests/corpus/*/*/label.yaml).

Scores, over every case folder (input*.log + label.yaml):
  * class   — host / gpu / shm / not_memory agrees with the label,
  * verdict — the exact verdict agrees,
  * victim  — pid, name and anon_rss_bytes of the first victim, on the cases whose label states them.

    python bench/accuracy.py            # summary
    python bench/accuracy.py -v         # and every disagreement
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oomwatch.engine.diagnose import diagnose  # noqa: E402
from oomwatch.engine.rules.loader import load_rules  # noqa: E402
from oomwatch.engine.scanner import Scanner  # noqa: E402
from oomwatch.sources import read_chunks  # noqa: E402

CLASS = {
    "host_oom": "host", "cgroup_oom": "host", "userspace_oom_kill": "host", "swap_thrash": "host",
    "python_memory_error": "host", "sigkill_unexplained": "not_memory", "cuda_oom": "gpu",
    "shm_exhausted": "shm", "other_crash": "not_memory", "no_oom_evidence": "not_memory",
}  # fmt: skip


@dataclass
class Score:
    cases: int = 0
    klass: int = 0
    verdict: int = 0
    victim: dict[str, list[int]] = field(
        default_factory=lambda: {"pid": [0, 0], "name": [0, 0], "anon_rss_bytes": [0, 0]}
    )
    misses: list[str] = field(default_factory=list)


def case_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("tests/corpus/*/*/label.yaml"))


def score(dirs: list[Path]) -> Score:
    rules = load_rules()
    scanner = Scanner(rules)
    s = Score()
    for d in dirs:
        label = yaml.safe_load((d / "label.yaml").read_text())
        inputs = sorted(p for p in d.glob("input*") if p.is_file())
        result = diagnose([scanner.scan(p.name, read_chunks(str(p))) for p in inputs], rules)
        s.cases += 1
        want_class = label.get("class") or CLASS[label["verdict"]]
        ok_class = CLASS[result.verdict] == want_class
        ok_verdict = result.verdict == label["verdict"]
        s.klass += ok_class
        s.verdict += ok_verdict
        first = result.victims[0] if result.victims else None
        problems = []
        for key, want in (label.get("victim") or {}).items():
            if key not in s.victim:
                continue
            got = getattr(first, key) if first else None
            s.victim[key][1] += 1
            s.victim[key][0] += got == want
            if got != want:
                problems.append(f"{key} {got!r} != {want!r}")
        if not ok_verdict:
            problems.insert(0, f"verdict {result.verdict} != {label['verdict']}")
        if problems:
            s.misses.append(f"{d.relative_to(ROOT)}: " + "; ".join(problems))
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    s = score(case_dirs(ROOT))
    if args.verbose:
        print("\n".join(s.misses))
    pct = lambda a, b: f"{a}/{b} ({100 * a / b:.0f}%)" if b else "-"  # noqa: E731
    print(f"cases {s.cases}: class {pct(s.klass, s.cases)}, verdict {pct(s.verdict, s.cases)}")
    for key, (ok, n) in s.victim.items():
        print(f"  victim {key}: {pct(ok, n)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
