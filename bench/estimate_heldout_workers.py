"""`oomwatch estimate` on DataLoader-worker jobs it was not built against: the single-process variants of
scenarios/variants.py (written by someone who did not read oomwatch's rules) whose script takes a worker count.
Each is measured with 1 worker (under `oomwatch run --report`) and predicted at its own default (3 workers),
then run there: with no binding limit for its peaks, and under its own limit for "does it fit". The same bench
as estimate_accuracy.py, its families and scales swapped.

    sudo python bench/estimate_heldout_workers.py --out /tmp/est-heldout-workers
    python bench/estimate_heldout_workers.py --from /tmp/est-heldout-workers      # predict again, no runs
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import estimate_accuracy as bench  # noqa: E402

from scenarios.variants import VARIANTS  # noqa: E402

WORKLOADS = Path(__file__).resolve().parent.parent / "scenarios" / "workloads"


def default_workers(script: str) -> int | None:
    """The worker count the variant's script runs with when not told (its flag's default)."""
    source = (WORKLOADS / script).read_text()
    found = re.search(r"""add_argument\(\s*["']--(?:num-)?workers["'][^)]*default=(\d+)""", source)
    return int(found.group(1)) if found else None


HELDOUT = tuple(
    name
    for name, s in VARIANTS.items()
    if not s.nproc and not s.shell and not s.fixed_shell and s.workers_flag() and default_workers(s.script)
)


def main(argv: list[str] | None = None) -> int:
    large = {default_workers(VARIANTS[n].script) for n in HELDOUT}
    chosen = max(large, key=lambda n: sum(default_workers(VARIANTS[v].script) == n for v in HELDOUT))
    families = tuple(v for v in HELDOUT if default_workers(VARIANTS[v].script) == chosen)
    return bench.main_on({n: VARIANTS[n] for n in families}, "workers", (1,), int(chosen or 1), argv)


if __name__ == "__main__":
    sys.exit(main())
