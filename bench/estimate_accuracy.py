"""How well `oomwatch estimate` predicts a job's host-memory peak at full scale, and with the fix —
against real runs of the scenarios (scenarios/: torch on CPU in a real cgroup v1 memory limit).

For each scenario family (a seed scenario: keep_in_memory, checkpoint_per_rank, rank_leak scale by
torchrun ranks; cow_refcount, dict_cache, manager_cache by DataLoader workers):

  (a) the broken variant at the small scales (1 and 2 ranks / workers) under a limit that does not
      bind (--free-limit, 8G), wrapped in `oomwatch run -q --report R.json --` (outside the cgroup):
      the recorded runs the estimator models;
  (b) the broken variant at the large scale (4 ranks / 4 workers), not binding: its measured peaks;
  (c) the fixed variant at the large scale, not binding: its peaks;
  (d) broken and fixed at the large scale under the scenario's own limit: killed or not (the truth
      for "will it fit").

Two peaks per run, from the cgroup: `memory.max_usage_in_bytes` (usage: page cache included, which
the kernel reclaims before it kills) and `peak_anon_shmem_bytes` (the largest memory.stat total_rss +
total_shmem, memory.stat read every 20 ms: what cannot be reclaimed without swap). The second is what a job
"needs"; the first is what a naive reading of the cgroup says.

Then for each small run's report:

    oomwatch estimate --report R.json --ranks N --workers W --limit LIMIT --format json

(N, W: the large run's shape — 4 ranks and 0 workers, or 1 rank and 4 workers; LIMIT: the scenario's
own limit) whose JSON has projection.{needed_bytes, with_cache_bytes, verdict} (verdict "fits",
"tight" or "over") and what_if = [{"cause", "projection": {...}}]. Compared: needed_bytes with the
large broken run's anon+shmem peak, with_cache_bytes with its usage peak, the verdict with whether
the broken run was killed under the limit ("over" = predicted not to fit; "fits" and "tight" =
predicted to fit), and the what_if of the scenario's cause with the fixed run. When the command fails
(it does not exist yet) the bench says "estimate not available" and prints the measured table.

    sudo python bench/estimate_accuracy.py --out /tmp/est                 # all six families, once
    sudo python bench/estimate_accuracy.py --out /tmp/est --families dict_cache,rank_leak --repeat 2
    python bench/estimate_accuracy.py --from /tmp/est                     # predict again, no runs
    python bench/estimate_accuracy.py --from /tmp/a --from /tmp/b --out /tmp/ab   # pooled, spread over both

Written under --out: runs/REP/FAMILY/CASE/ (each run's capture: meta.json with its memory timeline,
console.txt, dmesg.txt, HOW.md; report.json of the wrapped runs), estimates/ (each estimate's JSON
or error) and summary.json (every run's figures, every prediction, the errors).

Before each run the scenario's prepared data (the Arrow dataset, the checkpoint) is evicted from the
page cache (posix_fadvise DONTNEED on its files only), so that every run reads it cold: in cgroup v1 a
cached page stays charged to the cgroup that first read it, so otherwise only the first run of a
family after the data was written is charged for its page cache. --warm leaves it cached.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scenarios.catalog import SCENARIOS, Scenario  # noqa: E402
from scenarios.cgroup import parse_size  # noqa: E402

RANK_FAMILIES = ("keep_in_memory", "checkpoint_per_rank", "rank_leak")
WORKER_FAMILIES = ("cow_refcount", "dict_cache", "manager_cache")
FAMILIES = (*RANK_FAMILIES, *WORKER_FAMILIES)
SMALL = (1, 2)
LARGE = 4
TOLERANCE = 0.15  # each broken prediction within ±15% of the measured peak
MEDIAN_TOLERANCE = 0.10  # the median error at most 10%
FIXED_TOLERANCE = 0.20  # the fixed variant's prediction within ±20%
# memory.stat read every 20 ms for the anon+shmem peak: at 0.2 s a checkpoint load's peak is missed
# by up to 10% (checkpoint_per_rank, 2 ranks: 1383-1518 MiB sampled against a usage peak of 1874)
STAT_INTERVAL = 0.02


@dataclass(frozen=True)
class Case:
    """One run of the bench: a family's scenario at a scale, broken or fixed, under a limit."""

    family: str
    scale: int  # ranks (rank families) or DataLoader workers (worker families)
    fixed: bool
    binding: bool  # under the scenario's own limit (True) or the free limit
    wrapped: bool  # under `oomwatch run --report` (the small runs the estimator reads)

    @property
    def dim(self) -> str:
        return "ranks" if self.family in RANK_FAMILIES else "workers"

    @property
    def name(self) -> str:
        return f"{'fixed' if self.fixed else 'broken'}-{self.dim}{self.scale}-{'limit' if self.binding else 'free'}"

    def knobs(self) -> dict[str, int]:
        return {"nproc": self.scale} if self.dim == "ranks" else {"workers": self.scale}


def cases(family: str) -> list[Case]:
    small = [Case(family, n, False, False, True) for n in SMALL]
    large = [Case(family, LARGE, fixed, binding, False) for binding in (False, True) for fixed in (False, True)]
    return [*small, *large]


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / (1 << 20):.0f}"


def _wrap(report: Path) -> list[str]:
    return [sys.executable, "-m", "oomwatch", "run", "-q", "--report", str(report), "--"]


def _roles(processes: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per role ("rank", "dataloader_worker", ...): how many processes, the largest peak USS and RSS."""
    out: dict[str, dict[str, int]] = {}
    for p in processes:
        role = "rank" if str(p["role"]).startswith("rank ") else str(p["role"])
        r = out.setdefault(role, {"count": 0, "max_peak_uss_bytes": 0, "max_peak_rss_bytes": 0})
        r["count"] += 1
        r["max_peak_uss_bytes"] = max(r["max_peak_uss_bytes"], p["peak_uss_bytes"])
        r["max_peak_rss_bytes"] = max(r["max_peak_rss_bytes"], p["peak_rss_bytes"])
    return out


def evict_data(scn: Scenario) -> int:
    """Drop the scenario's prepared data from the page cache (posix_fadvise DONTNEED on each file,
    clean unmapped pages only: nothing else on the machine is touched), so that every run reads it
    cold and is charged for its page cache, not only the first run after the data was written (a
    cgroup v1 page stays charged to the cgroup that first read it, then to its parent). Returns the
    bytes of the files advised."""
    from scenarios.runner import default_cache_dir

    if scn.prepare is None:
        return 0
    target = default_cache_dir() / scn.prepare.name
    files = [target] if target.is_file() else sorted(f for f in target.rglob("*") if f.is_file())
    total = 0
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def run_case(case: Case, folder: Path, free_limit: str, cold: bool = True) -> dict[str, Any]:
    """Run one case (a real scenario run in a fresh cgroup); its figures without the timelines.
    ``cold``: evict the scenario's data from the page cache first (evict_data)."""
    from scenarios.runner import prepare_data, run_scenario

    scn = SCENARIOS[case.family]
    evicted = 0
    if cold:
        from scenarios.runner import default_cache_dir

        prepare_data(scn, default_cache_dir())  # built before it is evicted
        evicted = evict_data(scn)
    report = folder / "report.json"
    limit = scn.limit if case.binding else free_limit
    t0 = time.monotonic()
    meta = run_scenario(
        scn,
        fixed=case.fixed,
        out=folder,
        limit=limit,
        wrap=_wrap(report) if case.wrapped else None,
        stat_interval=STAT_INTERVAL,
        **case.knobs(),
    )
    timeline = meta.get("memory_timeline") or []
    row = {
        "family": case.family,
        "case": case.name,
        "scale": {case.dim: case.scale},
        "variant": "fixed" if case.fixed else "broken",
        "limit": limit,
        "limit_bytes": meta["limit_bytes"],
        "binding": case.binding,
        "killed": bool(meta["killed_by_kernel"]),
        "oom_kills": len(meta["oom_kills"]),
        "victims": [v.get("role_hint") for v in meta["oom_kills"]],
        "exit_code": meta["exit_code"],
        "exit_signal": meta["exit_signal"],
        "timed_out": meta["timed_out"],
        "duration_s": meta["duration_s"],
        "wall_s": round(time.monotonic() - t0, 1),
        "peak_usage_bytes": meta["memory_max_usage_in_bytes"],
        "peak_memsw_bytes": meta["memory_memsw_max_usage_in_bytes"],
        "peak_anon_shmem_bytes": meta.get("peak_anon_shmem_bytes"),
        "peak_anon_shmem_at_s": meta.get("peak_anon_shmem_at_s"),
        "peak_anon_shmem_interval_s": meta.get("peak_anon_shmem_interval_s"),
        "peak_sampled_usage_bytes": max((s.get("usage", 0) for s in timeline), default=None),
        "peak_cache_bytes": max((s.get("cache", 0) for s in timeline), default=None),
        "peak_mapped_file_bytes": max((s.get("mapped_file", 0) for s in timeline), default=None),
        "peak_shmem_bytes": max((s.get("shmem", 0) for s in timeline), default=None),
        "samples": len(timeline),
        "data_evicted_bytes": evicted,
        "roles": _roles(meta["processes"]),
        "command": meta["command"],
        "capture": str(folder),
        "report": str(report) if case.wrapped and report.exists() else None,
    }
    return row


# ------------------------------------------------------------------------------------------ predict


def estimate(report: str, ranks: int, workers: int | None, limit: str, out: Path) -> tuple[dict[str, Any] | None, str]:
    """`oomwatch estimate` on a recorded run's report; (its JSON, "") or (None, why not). ``workers`` None: as
    many per rank as the run had."""
    argv = [sys.executable, "-m", "oomwatch", "estimate", "--report", report, "--ranks", str(ranks),
            *(["--workers", str(workers)] if workers is not None else []), "--limit", limit, "--format", "json"]  # fmt: skip
    try:
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{type(e).__name__}: {e}"
    out.write_text(json.dumps({"argv": argv, "rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}, indent=1))
    try:
        doc = json.loads(r.stdout)
        doc["projection"]["needed_bytes"]  # noqa: B018 - the contract's keys must be there
    except (ValueError, KeyError, TypeError):
        tail = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return None, f"exit {r.returncode}: {tail[:200]}"
    return doc, ""


def _err(pred: Any, measured: Any) -> float | None:
    if not isinstance(pred, (int, float)) or not measured:
        return None
    return (pred - measured) / measured


def _fits(verdict: Any) -> bool | None:
    return None if verdict not in ("fits", "tight", "over") else verdict != "over"


def _what_if(doc: dict[str, Any], cause: str) -> dict[str, Any] | None:
    for w in doc.get("what_if") or []:
        # the samples alone name a per-rank copy without telling a dataset from a checkpoint
        same = (
            {cause, "per_rank_copy"}
            if cause in ("keep_in_memory_duplication", "checkpoint_load_duplication")
            else {cause}
        )
        if isinstance(w, dict) and w.get("cause") in same:
            return w
    return None


def _inside(low: int | None, high: int | None, measured: int | None) -> bool | None:
    """Whether the measured peak lies in the predicted interval (None: either not known)."""
    return None if low is None or high is None or measured is None else low <= measured <= high


def predict(rows: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Every small run's estimate of its family's large runs, broken and fixed, beside the truth."""
    by = {(r["rep"], r["family"], r["case"]): r for r in rows}
    preds = []
    for small in (r for r in rows if r["report"]):
        family, rep = small["family"], small["rep"]
        scn: Scenario = SCENARIOS[family]
        ranks, workers = (LARGE, None) if family in RANK_FAMILIES else (1, LARGE)
        dim = "ranks" if family in RANK_FAMILIES else "workers"
        truth = {f"{v}-{b}": by.get((rep, family, f"{v}-{dim}{LARGE}-{b}")) for v in ("broken", "fixed") for b in ("free", "limit")}  # fmt: skip
        name = f"{rep}-{family}-{small['case']}"
        doc, why = estimate(small["report"], ranks, workers, scn.limit, out / f"{name}.json")
        row: dict[str, Any] = {"rep": rep, "family": family, "from": small["case"], "target": {"ranks": ranks,
                               "workers": workers, "limit": scn.limit}, "available": doc is not None, "why": why}  # fmt: skip
        for v in ("broken", "fixed"):
            free, lim = truth[f"{v}-free"], truth[f"{v}-limit"]
            row[v] = {
                "measured_needed_bytes": free and free["peak_anon_shmem_bytes"],
                "measured_usage_bytes": free and free["peak_usage_bytes"],
                "fits_truth": None if lim is None else not lim["killed"],
            }
        if doc is not None:
            proj = doc.get("projection") or {}
            w = _what_if(doc, scn.cause)
            fixed_proj = (w or {}).get("projection") or {}
            for v, p in (("broken", proj), ("fixed", fixed_proj)):
                t = row[v]
                t["predicted_needed_bytes"] = p.get("needed_bytes")
                t["predicted_with_cache_bytes"] = p.get("with_cache_bytes")
                t["predicted_verdict"] = p.get("verdict")
                t["predicted_low_bytes"], t["predicted_high_bytes"] = p.get("low_bytes"), p.get("high_bytes")
                t["inside_interval"] = _inside(p.get("low_bytes"), p.get("high_bytes"), t["measured_needed_bytes"])
                t["needed_error"] = _err(p.get("needed_bytes"), t["measured_needed_bytes"])
                t["with_cache_error"] = _err(p.get("with_cache_bytes"), t["measured_usage_bytes"])
                pf = _fits(p.get("verdict"))
                t["fits_predicted"] = pf
                t["fits_right"] = None if pf is None or t["fits_truth"] is None else pf == t["fits_truth"]
                if p.get("verdict") == "unknown" and t["fits_truth"] is not None:
                    t["fits_right"] = False  # it said it cannot tell: not a right answer (counted apart too)
            row["what_if_cause"] = scn.cause if w else None
        preds.append(row)
    return preds


# ------------------------------------------------------------------------------------------ report


def print_measured(rows: list[dict[str, Any]]) -> None:
    print("measured (MiB; needed = peak total_rss+total_shmem, read every 20 ms; usage = memory.max_usage_in_bytes)")
    head = f"{'rep':>3} {'family':<20} {'case':<22} {'limit':>6} {'usage':>6} {'needed':>6} {'cache':>6} {'shmem':>6} {'killed':>6} {'exit':>5} {'dur s':>6}"  # fmt: skip
    print(head)
    for r in rows:
        ex = r["exit_code"] if r["exit_code"] is not None else r["exit_signal"]
        print(
            f"{r['rep']:>3} {r['family']:<20} {r['case']:<22} {r['limit']:>6} {_mib(r['peak_usage_bytes']):>6} "
            f"{_mib(r['peak_anon_shmem_bytes']):>6} {_mib(r['peak_cache_bytes']):>6} {_mib(r['peak_shmem_bytes']):>6} "
            f"{'yes' if r['killed'] else 'no':>6} {ex!s:>5} {r['duration_s']:>6}"
            + (" TIMEOUT" if r["timed_out"] else "")
        )


def spread(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run-to-run spread of each case run more than once: min, max, (max-min)/mean of each peak."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["family"], r["case"]), []).append(r)
    out = []
    for (family, case), rs in groups.items():
        if len(rs) < 2:
            continue
        s: dict[str, Any] = {"family": family, "case": case, "runs": len(rs), "killed": [r["killed"] for r in rs]}
        for key in ("peak_usage_bytes", "peak_anon_shmem_bytes", "duration_s"):
            vals = [r[key] for r in rs if r[key] is not None]
            if vals:
                mean = statistics.fmean(vals)
                s[key] = {"min": min(vals), "max": max(vals), "spread": (max(vals) - min(vals)) / mean if mean else 0}
        out.append(s)
    return out


def print_spread(sp: list[dict[str, Any]]) -> None:
    if not sp:
        return
    print("\nrun-to-run spread ((max-min)/mean)")
    for s in sp:
        u, n, d = s.get("peak_usage_bytes", {}), s.get("peak_anon_shmem_bytes", {}), s.get("duration_s", {})
        print(
            f"  {s['family']:<20} {s['case']:<22} x{s['runs']} usage {_mib(u.get('min'))}-{_mib(u.get('max'))} MiB "
            f"({u.get('spread', 0):.1%}), needed {_mib(n.get('min'))}-{_mib(n.get('max'))} MiB ({n.get('spread', 0):.1%}), "
            f"duration {d.get('min')}-{d.get('max')} s, killed {s['killed']}"
        )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def print_predictions(preds: list[dict[str, Any]]) -> dict[str, Any]:
    print("\npredictions")
    if not preds:
        print("  (no recorded small runs)")
        return {}
    if not any(p["available"] for p in preds):
        print(f"  estimate not available ({preds[0]['why']}); the measured table above is the ground truth")
        return {"available": False, "why": preds[0]["why"]}
    errs, fixed_errs, fits = [], [], []
    inside: dict[str, list[bool]] = {"broken": [], "fixed": []}  # the measured peak in the predicted interval
    unknown = 0  # "fits" verdicts that said they cannot tell
    head = f"{'rep':>3} {'family':<20} {'from':<22} {'variant':<7} {'needed':>6} {'pred':>6} {'err':>7} {'usage':>6} {'pred+$':>6} {'err':>7} {'fits':>5} {'pred':>6}"  # fmt: skip
    print(head)
    for p in preds:
        if not p["available"]:
            print(f"{p['rep']:>3} {p['family']:<20} {p['from']:<22} estimate not available: {p['why']}")
            continue
        for v in ("broken", "fixed"):
            t = p[v]
            if t.get("needed_error") is not None:
                (errs if v == "broken" else fixed_errs).append(abs(t["needed_error"]))
            if t.get("inside_interval") is not None:
                inside[v].append(t["inside_interval"])
            if t.get("fits_right") is not None:
                fits.append(t["fits_right"])
                unknown += t.get("predicted_verdict") == "unknown"
            print(
                f"{p['rep']:>3} {p['family']:<20} {p['from']:<22} {v:<7} {_mib(t['measured_needed_bytes']):>6} "
                f"{_mib(t.get('predicted_needed_bytes')):>6} {_pct(t.get('needed_error')):>7} "
                f"{_mib(t['measured_usage_bytes']):>6} {_mib(t.get('predicted_with_cache_bytes')):>6} "
                f"{_pct(t.get('with_cache_error')):>7} {str(t['fits_truth']):>5} {str(t.get('predicted_verdict')):>6}"
            )
    median = statistics.median(errs) if errs else None
    verdict = {
        "available": True,
        "broken_cases": len(errs),
        "median_abs_error": median,
        "max_abs_error": max(errs, default=None),
        "within_15pct": sum(e <= TOLERANCE for e in errs),
        "fixed_cases": len(fixed_errs),
        "fixed_within_20pct": sum(e <= FIXED_TOLERANCE for e in fixed_errs),
        "fits_right": sum(fits),
        "fits_cases": len(fits),
        "cannot_tell": unknown,
        "inside_interval": sum(inside["broken"]),
        "fixed_inside_interval": sum(inside["fixed"]),
    }
    verdict["meets_bar"] = bool(
        errs
        and median is not None
        and median <= MEDIAN_TOLERANCE
        and verdict["within_15pct"] == len(errs)
        and verdict["fixed_within_20pct"] == len(fixed_errs)
        and all(fits)
    )
    print(
        f"\nmedian |error| {_pct(median)} over {len(errs)} broken predictions (bar: <= 10%, each <= 15%: "
        f"{verdict['within_15pct']}/{len(errs)}); fixed within 20%: {verdict['fixed_within_20pct']}/{len(fixed_errs)}; "
        f"fits right: {sum(fits)}/{len(fits)}"
        + (f" ({unknown} cannot tell)" if unknown else "")
        + f"; bar met: {verdict['meets_bar']}"
    )
    print(f"measured inside the predicted interval: broken {sum(inside['broken'])}/{len(inside['broken'])}, "
          f"fixed {sum(inside['fixed'])}/{len(inside['fixed'])}")  # fmt: skip
    return verdict


def _rerun_small(
    rows: list[dict[str, Any]], families: list[str], out: Path, free_limit: str, *, cold: bool
) -> list[dict[str, Any]]:
    """The small (wrapped) runs made again, once per rep; the large runs' rows kept."""
    kept = [r for r in rows if r.get("report") is None]
    reps = sorted({r["rep"] for r in rows})
    for rep in reps:
        for family in families:
            for case in cases(family):
                if not case.wrapped:
                    continue
                folder = out / "runs" / f"rep{rep}" / family / case.name
                print(f"[rep {rep}] {family} {case.name} (small, again) ...", file=sys.stderr, flush=True)
                row = run_case(case, folder, free_limit, cold=cold)
                row["rep"] = rep
                kept.append(row)
    return kept


def main_on(
    scenarios: dict[str, Scenario], by: str, small: tuple[int, ...], large: int, argv: list[str] | None = None
) -> int:
    """This bench on other families (``scenarios``: the held-out variants) scaled ``by`` "ranks" or "workers",
    from the ``small`` scales to ``large``; ``argv`` as main's (``--families`` defaults to all of them)."""
    global SCENARIOS, RANK_FAMILIES, WORKER_FAMILIES, FAMILIES, SMALL, LARGE
    families = tuple(scenarios)
    SCENARIOS = {**SCENARIOS, **scenarios}
    RANK_FAMILIES, WORKER_FAMILIES = (families, ()) if by == "ranks" else ((), families)
    FAMILIES, SMALL, LARGE = families, small, large
    args = list(sys.argv[1:] if argv is None else argv)
    if "--families" not in args:
        args += ["--families", ",".join(families)]
    return main(args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, help="folder for the captures, reports, estimates and summary.json")
    p.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated (default: {','.join(FAMILIES)})")
    p.add_argument("--repeat", type=int, default=1, help="run every case this many times (run-to-run spread)")
    p.add_argument("--free-limit", default="8G", help="the limit that does not bind (default 8G)")
    p.add_argument(
        "--warm",
        action="store_true",
        help="leave the scenarios' data in the page cache between runs (default: evict it before each run, "
        "so that each is charged for reading it, not only the first)",
    )
    p.add_argument(
        "--from",
        dest="previous",
        type=Path,
        action="append",
        help="no runs: predict again from a previous --out (repeatable: their runs are pooled, reps renumbered)",
    )
    p.add_argument(
        "--small-only",
        action="store_true",
        help="with --from: run the small recorded runs again (the estimator's input, e.g. after a change to what "
        "`oomwatch run --report` records) into --out, and keep the previous large runs as the truth",
    )
    args = p.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        p.error(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    if args.small_only and (not args.previous or args.out is None):
        p.error("--small-only needs --from (the large runs) and --out (the new small runs)")
    if args.previous:
        out = args.out or args.previous[0]
        rows = []
        for prev in args.previous:
            base = max((r["rep"] for r in rows), default=0)
            for r in json.loads((prev / "summary.json").read_text())["runs"]:
                if r["family"] in families:
                    # the folder may have moved (a copy of the summary and the reports elsewhere)
                    moved = prev / "runs" / f"rep{r['rep']}" / r["family"] / r["case"] / "report.json"
                    report = r["report"] if r["report"] is None or Path(r["report"]).exists() else str(moved)
                    rows.append({**r, "rep": base + r["rep"], "report": report, "from_summary": str(prev)})
        families = [f for f in families if any(r["family"] == f for r in rows)]  # the families recorded there
        if args.small_only:
            rows = _rerun_small(rows, families, out, args.free_limit, cold=not args.warm)
    else:
        if args.out is None:
            p.error("--out is required (or --from)")
        from scenarios.cgroup import v1_memory_parent

        if os.geteuid() != 0 or v1_memory_parent() is None:
            print("error: needs root and a writable cgroup v1 memory controller", file=sys.stderr)
            return 2
        parse_size(args.free_limit)
        out = args.out
        rows = []
        for rep in range(1, args.repeat + 1):
            for family in families:
                for case in cases(family):
                    folder = out / "runs" / f"rep{rep}" / family / case.name
                    print(f"[rep {rep}] {family} {case.name} ...", file=sys.stderr, flush=True)
                    row = run_case(case, folder, args.free_limit, cold=not args.warm)
                    row["rep"] = rep
                    rows.append(row)
                    print(
                        f"    usage {_mib(row['peak_usage_bytes'])} MiB, needed {_mib(row['peak_anon_shmem_bytes'])} MiB,"
                        f" killed {row['killed']}, {row['duration_s']} s",
                        file=sys.stderr,
                        flush=True,
                    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "estimates").mkdir(exist_ok=True)
    print_measured(rows)
    sp = spread(rows)
    print_spread(sp)
    preds = predict(rows, out / "estimates")
    verdict = print_predictions(preds)
    summary = {
        "schema": "oomwatch.bench.estimate_accuracy/v1",
        "free_limit": args.free_limit,
        "data": "warm" if args.warm else "cold (evicted before each run)",
        "families": families,
        "runs": rows,
        "spread": sp,
        "predictions": preds,
        "verdict": verdict,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nwritten: {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
