"""How far the causes can be trusted: over real reproductions diagnosed three ways, and over public
logs whose cause their thread established, what share of the top causes is right — per path, per
cause, and by confidence bucket (a reliability table: the confidence should mean what it says).

    sudo python bench/reliability.py --run              # run every scenario (~20-30 min), then report
    python bench/reliability.py --results runs.jsonl    # report on results recorded earlier
    python bench/reliability.py                         # the public cause corpus and the seed captures only

The runs are tests/test_three_ways.py's (each scenario run once in a memory cgroup, diagnosed by
`oomwatch run`, the agent, `diagnose --command` and `diagnose --no-code`); `--run` asks pytest for
all of them and keeps what they record. A top cause counts as right when it is the scenario's (or,
for a diagnosis without the code, its general form, scenarios.catalog.GENERAL); "undetermined"
when the output said the cause is not determined; "wrong" when it named another one as determined.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oomwatch.engine.api import Engine  # noqa: E402
from oomwatch.sources import read_chunks  # noqa: E402
from scenarios.catalog import GENERAL, SCENARIOS  # noqa: E402

BUCKETS = ((0.0, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.01))
PATHS = ("run", "agent", "diagnose --command", "diagnose --no-code")


def _rows_from_results(path: Path) -> list[dict]:
    """One row per (scenario run, path): the expected cause and what the path said."""
    rows = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        for p in PATHS:
            if p in r:
                causes = r[p]["causes"]
                rows.append({"case": r["scenario"], "source": r["family"], "path": p, "want": r["cause"],
                             "got": causes[0][0] if causes else None, "confidence": causes[0][1] if causes else 0.0,
                             "determined": bool(r[p]["determined"]), "general": p.endswith("--no-code")})  # fmt: skip
    return rows


def _rows_from_corpus(engine: Engine) -> list[dict]:
    """The public logs of tests/corpus/causes (logs only) and the committed seed captures (logs only)."""
    rows = []
    for label_file in sorted(ROOT.glob("tests/corpus/causes/*/label.yaml")):
        label = yaml.safe_load(label_file.read_text())
        inputs = sorted(p for p in label_file.parent.glob("input*") if p.is_file())
        d = engine.diagnose([engine.scan(p.name, read_chunks(str(p))) for p in inputs])
        top = d.causes[0] if d.causes else None
        rows.append({"case": label_file.parent.name, "source": "public logs", "path": "diagnose (logs)",
                     "want": label["cause"], "got": top.id if top else None,
                     "confidence": top.confidence if top else 0.0, "determined": bool(d.cause_determined),
                     "general": True})  # fmt: skip
    for name, scn in SCENARIOS.items():
        folder = ROOT / "tests" / "fixtures" / "scenarios" / name
        scans = [engine.scan(f, read_chunks(str(folder / f))) for f in ("console.txt", "kmsg.txt")]
        d = engine.diagnose(scans)
        top = d.causes[0] if d.causes else None
        rows.append({"case": name, "source": "seed captures", "path": "diagnose (logs)", "want": scn.cause,
                     "got": top.id if top else None, "confidence": top.confidence if top else 0.0,
                     "determined": bool(d.cause_determined), "general": True})  # fmt: skip
    return rows


def _right(row: dict) -> bool:
    ok = {row["want"], *(GENERAL.get(row["want"], ()) if row["general"] else ())}
    return row["got"] in ok


def report(rows: list[dict]) -> str:
    out = []
    by_path: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        by_path[(r["source"], r["path"])].append(r)
    out.append(f"{'source':<14} {'path':<20} {'cases':>5} {'right':>6} {'undetermined':>12} {'wrong':>6}")
    for (source, path), rs in sorted(by_path.items()):
        right = sum(1 for r in rs if r["determined"] and _right(r))
        wrong = sum(1 for r in rs if r["determined"] and not _right(r))
        undet = sum(1 for r in rs if not r["determined"])
        out.append(f"{source:<14} {path:<20} {len(rs):>5} {right / len(rs):>6.0%} {undet / len(rs):>12.0%} "
                   f"{wrong / len(rs):>6.0%}")  # fmt: skip
    out.append("")
    out.append("Reliability (every diagnosis's top cause, by its confidence):")
    out.append(f"  {'confidence':<12} {'n':>4} {'right':>6}   (determined: n, right)")
    for lo, hi in BUCKETS:
        rs = [r for r in rows if lo <= r["confidence"] < hi and r["got"] not in (None, "unknown")]
        det = [r for r in rs if r["determined"]]
        if rs:
            share = sum(map(_right, rs)) / len(rs)
            dshare = f"{sum(map(_right, det)) / len(det):.0%}" if det else "-"
            out.append(f"  {lo:.1f}–{min(hi, 1.0):.1f}    {len(rs):>4} {share:>6.0%}   ({len(det)}, {dshare})")
    out.append("")
    wrongs = [r for r in rows if r["determined"] and not _right(r)]
    if wrongs:
        out.append("Wrong and determined:")
        out.extend(f"  {r['case']} [{r['path']}]: {r['got']} ({r['confidence']:.2f}), not {r['want']}" for r in wrongs)
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, help="JSON lines recorded by tests/test_three_ways.py")
    p.add_argument("--run", action="store_true", help="run every scenario three ways first (root, ~30 min)")
    args = p.parse_args()
    rows = _rows_from_corpus(Engine.load())
    results = args.results
    if args.run:
        results = Path(tempfile.mkstemp(prefix="oomwatch-three-ways-", suffix=".jsonl")[1])
        env = dict(os.environ, OOMWATCH_ALL_SCENARIOS="1", OOMWATCH_THREE_WAYS=str(results), PYTHONPATH=str(ROOT))
        subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/test_three_ways.py", "-k", "one_run", "-p",
                        "no:cacheprovider"], cwd=ROOT, env=env, check=False)  # fmt: skip
        print(f"results: {results}")
    if results is not None:
        rows = _rows_from_results(results) + rows
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
