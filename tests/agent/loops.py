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

# A loop whose steps rise above where they end: each takes 48 MiB of activations for 60 ms and frees them (back to
# the system: a large block) before it prints the step, as a training step frees its activations and gradients;
# 150 ms pass before the next (its data loading), so the sample a step's line brings reads where the step ended.
# It holds 64 MiB once set up, waits argv[1] seconds before its first step and argv[2] after its 30th.
RISING_LOOP = r"""
import sys, time
base = bytearray(64 << 20)
for i in range(0, len(base), 4096):
    base[i] = 1
time.sleep(float(sys.argv[1]))
for step in range(30):
    activations = bytearray(48 << 20)
    for i in range(0, len(activations), 4096):
        activations[i] = 1
    time.sleep(0.06)
    del activations
    print(f"step {step} loss 0.5", flush=True)
    time.sleep(0.15)
time.sleep(float(sys.argv[2]))
"""
