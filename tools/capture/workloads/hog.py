"""Grow host memory without bound: append 10 MiB bytearrays (pages touched) until killed."""

import sys
import time

CHUNK = 10 * 1024 * 1024
hog = []
print("hog: allocating 10 MiB chunks until something stops me", flush=True)
while True:
    hog.append(bytearray(b"\x01") * CHUNK)
    if len(hog) % 5 == 0:
        print(f"hog: holding {len(hog) * 10} MiB", flush=True)
    if len(sys.argv) > 1:
        time.sleep(float(sys.argv[1]))
