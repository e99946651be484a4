"""Training loops for tests, as scripts: what a job prints and holds as it steps."""

from __future__ import annotations

# A loop that steps every 30 ms (a tick a second sees one of its first 10 steps at most), keeps 1 MiB of each step
# and prints each step, as training scripts do; it writes down its own anonymous memory after each step (to
# argv[1]). It holds 64 MiB once set up, waits argv[2] seconds before its first step and argv[3] (if given) after
# its last.
FAST_LOOP = r"""
import json, sys, time
def anon():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) << 10 for l in f if l.startswith("RssAnon:"))
base = bytearray(64 << 20)
for i in range(0, len(base), 4096):
    base[i] = 1
time.sleep(float(sys.argv[2]))
kept, levels = [], []
for step in range(60):
    b = bytearray(1 << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    kept.append(b)
    print(f"step {step} loss 0.5", flush=True)
    levels.append(anon())
    time.sleep(0.03)
json.dump(levels, open(sys.argv[1], "w"))
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
"""
