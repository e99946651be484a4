"""`oomwatch estimate` on scenarios it was not built against: the variants (scenarios/variants.py, written by
someone who did not read oomwatch's rules) that torchrun launches. Each is measured with 1 rank (wrapped in
`oomwatch run --report`) and predicted at its own default scale (2 or 3 ranks), then run there: with no binding
limit for its peaks, and under its own limit for "does it fit". The same bench as estimate_accuracy.py, its
families and scales swapped.

    sudo python bench/estimate_heldout.py --out /tmp/est-heldout
    python bench/estimate_heldout.py --from /tmp/est-heldout       # predict again, no runs

The variants of another default (3 ranks), from 1 and 2 ranks:

    sudo python bench/estimate_heldout.py --default-ranks 3 --small 1,2 --out /tmp/est-heldout-3

The variants another launcher starts (`accelerate launch`, torch.distributed.run in a shell line, mp.spawn in
the script: `Scenario.ranks`), scaled through that launcher's own rank count:

    sudo python bench/estimate_heldout.py --launchers --small 2 --large 4 --out /tmp/est-launchers

(`accelerate launch --multi_gpu` refuses one process: those jobs are measured from 2 ranks, predicted at 4.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import estimate_accuracy as bench  # noqa: E402

from scenarios.variants import VARIANTS  # noqa: E402

HELDOUT = tuple(name for name, s in VARIANTS.items() if s.nproc > 1 and not s.shell and not s.fixed_shell)
LAUNCHED = tuple(name for name, s in VARIANTS.items() if s.ranks > 1)


def default_ranks(name: str) -> int:
    s = VARIANTS[name]
    return s.nproc or s.ranks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--default-ranks", type=int, help="the variants whose default is this many ranks (default: "
                    "the most common default; one large scale a bench)")  # fmt: skip
    ap.add_argument("--small", default="1", help="the small scales measured, comma-separated (default 1)")
    ap.add_argument("--large", type=int, help="predict and run them at this many ranks (default: their default)")
    ap.add_argument("--launchers", action="store_true", help="the variants started by another launcher than "
                    "torchrun (accelerate launch, torch.distributed.run in a shell line, mp.spawn)")  # fmt: skip
    ours, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    pool = LAUNCHED if ours.launchers else HELDOUT
    large = {default_ranks(n) for n in pool}
    chosen = ours.default_ranks or max(large, key=lambda n: sum(default_ranks(v) == n for v in pool))
    families = tuple(v for v in pool if default_ranks(v) == chosen)
    if not families:
        ap.error(f"no held-out variant runs {chosen} ranks by default ({sorted(large)} do)")
    small = tuple(int(n) for n in ours.small.split(",") if n)
    return bench.main_on({n: VARIANTS[n] for n in families}, "ranks", small, ours.large or chosen, rest)


if __name__ == "__main__":
    sys.exit(main())
