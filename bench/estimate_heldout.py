"""`oomwatch estimate` on scenarios it was not built against: the variants (scenarios/variants.py, written by
someone who did not read oomwatch's rules) that torchrun launches. Each is measured with 1 rank (wrapped in
`oomwatch run --report`) and predicted at its own default scale (2 or 3 ranks), then run there: with no binding
limit for its peaks, and under its own limit for "does it fit". The same bench as estimate_accuracy.py, its
families and scales swapped.

    sudo python bench/estimate_heldout.py --out /tmp/est-heldout
    python bench/estimate_heldout.py --from /tmp/est-heldout       # predict again, no runs
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import estimate_accuracy as bench  # noqa: E402

from scenarios.variants import VARIANTS  # noqa: E402

HELDOUT = tuple(name for name, s in VARIANTS.items() if s.nproc > 1 and not s.shell and not s.fixed_shell)


def main(argv: list[str] | None = None) -> int:
    large = {VARIANTS[n].nproc for n in HELDOUT}
    if len(large) != 1:  # one large scale for all (the bench has one); the rest are measured apart
        chosen = max(large, key=lambda n: sum(VARIANTS[v].nproc == n for v in HELDOUT))
        families = tuple(v for v in HELDOUT if VARIANTS[v].nproc == chosen)
    else:
        chosen, families = large.pop(), HELDOUT
    return bench.main_on({n: VARIANTS[n] for n in families}, "ranks", (1,), chosen, argv)


if __name__ == "__main__":
    sys.exit(main())
