"""Reads every page of a memory-mapped file at each step and keeps 8 MiB of results per step, for
ever. Under a memory limit the kept results crowd the mapped pages out: the kernel reclaims them and
the next step faults them back in, for tens of seconds (every task of the cgroup stalls: PSI
"full"), until it OOM-kills the process. Captured as tests/fixtures/run_reports/thrash_then_kill.

    python mapped_scan.py FILE
"""

from __future__ import annotations

import mmap
import os
import sys
import time


def main() -> None:
    with open(sys.argv[1], "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    kept = []
    t0 = time.time()
    step = 0
    while True:
        step += 1
        kept.append(bytearray(os.urandom(8 << 20)))
        total = sum(data[off] for off in range(0, len(data), 4096))
        print(f"step {step} {time.time() - t0:.1f}s checksum {total}", flush=True)


if __name__ == "__main__":
    main()
