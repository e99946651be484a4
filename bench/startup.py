"""How long does one `oomwatch diagnose` of a small log take, from the shell's point of view?

On a typical call (one pasted log, a loop over many logs, a CI step) starting up is the whole cost.
This runs, in alternating rounds (A B C D A B C D ...), fresh processes of:

  A  `oomwatch diagnose EXAMPLE` with the compiled-rules cache warm (the usual call),
  B  the same with the cache off (OOMWATCH_NO_CACHE=1: every rule file read and checked),
  C  `python -c pass` (the interpreter's own start, the floor),
  D  `grep -F -c -f ANCHORS EXAMPLE` over the rules' literal anchors,

and prints each one's min and median wall time, and the ratios A/B, A/C, A/D per round (min and
median), plus whether A and B printed the same bytes. Target (issue 14): A <= 0.15 s.

    python bench/startup.py              # 20 rounds on examples/torchrun-rank-oom
    python bench/startup.py --rounds 50

Bytecode is written (PYTHONDONTWRITEBYTECODE is dropped) and one warm-up round runs first, as
after `pip install`, which compiles the package's modules.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oomwatch.engine.kernel_report import KERNEL_ANCHORS  # noqa: E402
from oomwatch.engine.rules.loader import load_rules  # noqa: E402

EXAMPLE = [ROOT / "examples/torchrun-rank-oom/torchrun.log", ROOT / "examples/torchrun-rank-oom/dmesg-T.txt"]


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False).stdout
    return time.perf_counter() - t0, out


def _stats(xs: list[float]) -> str:
    return f"min {min(xs):.3f}  median {statistics.median(xs):.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    tmp = Path(tempfile.mkdtemp(prefix="oomwatch-startup-"))
    try:
        env["OOMWATCH_CACHE_DIR"] = str(tmp / "cache")
        cold = {**env, "OOMWATCH_NO_CACHE": "1"}
        anchors = tmp / "anchors.txt"
        rules = load_rules()
        lits = {a for fp in rules.fingerprints for a in fp.anchors} | set(KERNEL_ANCHORS)
        anchors.write_text("\n".join(sorted(lits)) + "\n")
        diagnose = [sys.executable, "-m", "oomwatch", "diagnose", *map(str, EXAMPLE)]
        commands = {
            "A diagnose (cache warm)": (diagnose, env),
            "B diagnose (cache off)": (diagnose, cold),
            "C python -c pass": ([sys.executable, "-c", "pass"], env),
        }
        grep = shutil.which("grep")
        if grep:
            commands["D grep -F -c -f anchors"] = ([grep, "-F", "-c", "-f", str(anchors), *map(str, EXAMPLE)], env)
        times: dict[str, list[float]] = {k: [] for k in commands}
        outputs: dict[str, bytes] = {}
        for cmd, e in commands.values():  # warm-up: bytecode written, cache built
            _run(cmd, e)
        for _ in range(args.rounds):
            for name, (cmd, e) in commands.items():
                dt, out = _run(cmd, e)
                times[name].append(dt)
                outputs.setdefault(name, out)
        print(
            f"oomwatch diagnose on {EXAMPLE[0].parent.name} ({sum(p.stat().st_size for p in EXAMPLE)} bytes), "
            f"{args.rounds} alternating rounds, wall seconds:"
        )
        for name, xs in times.items():
            print(f"  {name:28s} {_stats(xs)}")
        a = times["A diagnose (cache warm)"]
        for name, xs in times.items():
            if name.startswith("A"):
                continue
            ratios = [x / y for x, y in zip(a, xs, strict=True)]
            print(f"  A / {name[0]}{'':25s} {_stats(ratios)}")
        same = outputs["A diagnose (cache warm)"] == outputs["B diagnose (cache off)"]
        print(f"  same output bytes with and without the cache: {same}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
