"""`oomwatch estimate` from a short probe, against the whole run: the length of a run, not its scale.

For each scenario chosen (its broken variant, at its own ranks and workers, under a limit that does not bind):

  (a) the whole run, wrapped in `oomwatch run -q --report FULL.json --`: the truth (its cgroup's anon+shmem
      peak, what a job needs) and its length (the steps its step counter reached, else its seconds);
  (b) the same run stopped after --share (0.5) of the whole run's seconds, 4 s at least (the runner kills its
      cgroup): the probe;
  (c) `oomwatch estimate --report PROBE.json --steps N --limit L --format json` (N: the whole run's steps; with
      no step counter in the probe's output, --duration with the whole run's seconds; L: the scenario's own
      limit): the prediction.

Compared: the predicted needed bytes with the whole run's peak, and "fits under L" with whether that peak is
under L. The scenarios' memory grows with their steps (a cache, a manager, accumulated outputs, pages un-shared
over an epoch) or loads and holds: both are here (--families).

    sudo python bench/estimate_probe.py --out /tmp/est-probe
    sudo python bench/estimate_probe.py --out /tmp/est-probe --families dict_cache,rank_leak --share 0.3
    sudo python bench/estimate_probe.py --out /tmp/est-probe --tty   # each run given a terminal (run --tty)
    python bench/estimate_probe.py --from /tmp/est-probe          # predict again, no runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scenarios.catalog import SCENARIOS  # noqa: E402
from scenarios.variants import VARIANTS  # noqa: E402

ALL = {**SCENARIOS, **VARIANTS}
# single-process or torchrun jobs whose output the runner captures whole (no wrapper script of their own)
FAMILIES = ("dict_cache", "manager_cache", "rank_leak", "kws_audio_workers", "probe_features_lightning",
            "tabular_regressor", "vit_tiny_trainer_workers", "ocr_lines_lightning", "segmenter_tiles",
            "sentiment_trainer", "small_lm_jsonl")  # fmt: skip
FREE_LIMIT = "8G"
STAT_INTERVAL = 0.02
PROBE_MIN = 4.0  # seconds a probe runs at least (a step counter needs 3 readings over a second to be timed)
SCHEMA = "oomwatch.bench.estimate_probe/v1"


def _wrap(report: Path, tty: bool = False) -> list[str]:
    """``oomwatch run`` around a run; ``tty``: the command writes to a terminal, as on a user's (run --tty)."""
    return [sys.executable, "-m", "oomwatch", "run", "-q", *(["--tty"] if tty else []), "--report", str(report), "--"]


def _run(name: str, root: Path, folder: Path, timeout: float | None, tty: bool = False) -> dict[str, Any]:
    """One run of ``name``'s broken variant into ``root / folder`` (its report's path kept relative to ``root``)."""
    from scenarios.runner import run_scenario

    folder = root / folder
    report = folder / "report.json"
    wrap = _wrap(report, tty)
    meta = run_scenario(ALL[name], fixed=False, out=folder, limit=FREE_LIMIT, wrap=wrap, timeout=timeout,
                        stat_interval=STAT_INTERVAL)  # fmt: skip
    doc = json.loads(report.read_text()) if report.exists() else {}
    progress = doc.get("progress") or {}
    points = progress.get("points") or []
    return {
        "duration_s": meta["duration_s"],
        "timed_out": meta["timed_out"],
        "exit_code": meta["exit_code"],
        "killed": bool(meta["killed_by_kernel"]),
        "peak_anon_shmem_bytes": meta.get("peak_anon_shmem_bytes"),
        "steps": points[-1][1] if points else None,
        "report": str(report.relative_to(root)) if report.exists() else None,
    }


def measure(names: list[str], out: Path, share: float, tty: bool = False) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        whole = _run(name, out, Path("runs") / name / "whole", None, tty)
        probe_s = max(PROBE_MIN, share * whole["duration_s"])
        probe = _run(name, out, Path("runs") / name / "probe", probe_s, tty)
        row = {"family": name, "limit": ALL[name].limit, "share": share, "whole": whole, "probe": probe, "tty": tty}
        rows.append(row)
        print(f"{name}: whole {whole['duration_s']:.0f} s, {whole['steps']} steps, "
              f"{(whole['peak_anon_shmem_bytes'] or 0) >> 20} MiB; probe {probe['duration_s']:.0f} s, "
              f"{probe['steps']} steps", flush=True)  # fmt: skip
    return rows


def predict(rows: list[dict[str, Any]], root: Path, out: Path) -> list[dict[str, Any]]:
    """Each row's prediction from its probe's report (under ``root``), the estimates' output kept under ``out``."""
    from scenarios.cgroup import parse_size

    (out / "estimates").mkdir(parents=True, exist_ok=True)
    for row in rows:
        whole, probe = row["whole"], row["probe"]
        row["prediction"] = None
        if probe["report"] is None or not whole["peak_anon_shmem_bytes"]:
            row["why"] = "no probe report or no measured peak"
            continue
        by_time = ["--duration", f"{whole['duration_s']:.0f}s"]
        # the whole run's steps when the probe counted some; where the estimate refuses them (too few steps to
        # time), the whole run's seconds, as its refusal tells a user to give
        lengths = (
            [["--steps", str(whole["steps"])], by_time] if whole["steps"] and probe["steps"] is not None else [by_time]
        )
        refused: list[str] = []
        for length in lengths:
            argv = [sys.executable, "-m", "oomwatch", "estimate", "--report", str(root / probe["report"]), *length,
                    "--limit", row["limit"], "--format", "json"]  # fmt: skip
            r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
            if r.returncode != 2 or length is by_time:
                break
            refused.append((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200])
        (out / "estimates" / f"{row['family']}.json").write_text(
            json.dumps(
                {"argv": argv, "rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "refused": refused}, indent=1
            )
        )
        try:
            projection = json.loads(r.stdout)["projection"]
        except (ValueError, KeyError):
            row["why"] = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]
            continue
        truth = whole["peak_anon_shmem_bytes"]
        limit = parse_size(row["limit"])
        predicted_fits = projection["verdict"] != "over"  # "unknown" (it cannot tell) is no right answer
        row["prediction"] = {
            "by": length[0],
            "needed_bytes": projection["needed_bytes"],
            "low_bytes": projection["low_bytes"],
            "high_bytes": projection["high_bytes"],
            "verdict": projection["verdict"],
            "error": (projection["needed_bytes"] - truth) / truth,
            "fits_truth": truth <= limit,
            "fits_right": projection["verdict"] != "unknown" and predicted_fits == (truth <= limit),
        }
    return rows


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    print(f"\n{'scenario':26s} {'probe':>9s} {'whole':>9s} {'by':>10s} {'measured':>9s} {'predicted':>9s} "
          f"{'error':>7s} {'interval':>17s} {'fits?':>6s} {'said':>6s}")  # fmt: skip
    errors, fits = [], []
    for row in rows:
        whole, probe, p = row["whole"], row["probe"], row.get("prediction")
        said = f"{probe['duration_s']:.0f}s/{probe['steps']}"
        full = f"{whole['duration_s']:.0f}s/{whole['steps']}"
        if p is None:
            print(f"{row['family']:26s} {said:>9s} {full:>9s}  not predicted: {row.get('why')}")
            continue
        errors.append(abs(p["error"]))
        fits.append(p["fits_right"])
        interval = f"{p['low_bytes'] >> 20}-{p['high_bytes'] >> 20}"
        print(f"{row['family']:26s} {said:>9s} {full:>9s} {p['by']:>10s} {whole['peak_anon_shmem_bytes'] >> 20:>9d} "
              f"{p['needed_bytes'] >> 20:>9d} {p['error']:>+7.1%} {interval:>17s} {str(p['fits_truth']):>6s} "
              f"{p['verdict']:>6s}")  # fmt: skip
    verdict = {
        "predicted": len(errors),
        "median_abs_error": statistics.median(errors) if errors else None,
        "within_15pct": sum(e <= 0.15 for e in errors),
        "fits_right": sum(fits),
        "cannot_tell": sum(r["prediction"]["verdict"] == "unknown" for r in rows if r.get("prediction")),
    }
    if errors:
        print(f"\nmedian |error| {verdict['median_abs_error']:.1%} over {len(errors)}; within 15%: "
              f"{verdict['within_15pct']}/{len(errors)}; fits right: {sum(fits)}/{len(fits)}"
              + (f" ({verdict['cannot_tell']} cannot tell)" if verdict["cannot_tell"] else ""))  # fmt: skip
    return verdict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where the runs, estimates and summary.json go")
    ap.add_argument("--from", dest="source", type=Path, help="a summary.json's folder: predict again, no runs")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated scenario names")
    ap.add_argument("--share", type=float, default=0.5, help="the probe's share of the whole run's seconds")
    ap.add_argument("--tty", action="store_true", help="give each run a terminal for its output (oomwatch run --tty)")
    args = ap.parse_args(argv)
    if args.source is not None:
        rows = json.loads((args.source / "summary.json").read_text())["rows"]
        root, out = args.source, args.out or args.source
    else:
        if args.out is None:
            ap.error("give --out (where the runs go) or --from (a summary to predict again)")
        names = [n for n in args.families.split(",") if n]
        unknown = [n for n in names if n not in ALL]
        if unknown:
            ap.error(f"no scenario {unknown[0]}")
        started = time.monotonic()
        rows = measure(names, args.out, args.share, args.tty)
        print(f"runs took {time.monotonic() - started:.0f} s", flush=True)
        root = out = args.out
    out.mkdir(parents=True, exist_ok=True)
    rows = predict(rows, root, out)
    verdict = report(rows)
    (out / "summary.json").write_text(json.dumps({"schema": SCHEMA, "rows": rows, "verdict": verdict}, indent=1))
    print(f"\nwritten: {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
