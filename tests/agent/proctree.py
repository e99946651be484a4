"""A real process tree shaped like one DDP rank: a python "rank" with RANK/LOCAL_RANK and an elastic
run id in its environment, holding a buffer, and forked children that name themselves
``pt_data_worker`` like torch's DataLoader workers. One worker writes to every page of the parent's
buffer (copy-on-write defeat: its USS grows, its RSS does not), the other only reads.

Run as a script: prints "ready <rank pid> <worker pids...>" once everything is in place, then waits
for stdin to close."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20


def main() -> None:
    size = int(sys.argv[1]) * MIB
    workers = int(sys.argv[2])
    comm = sys.argv[3] if len(sys.argv) > 3 else ""
    if comm:
        Path("/proc/self/comm").write_text(comm)
    buf = bytearray(size)
    for i in range(0, size, 4096):
        buf[i] = 1  # touch: resident, private to the rank until forked
    pids = []
    for n in range(workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            Path("/proc/self/comm").write_text("pt_data_worker")
            if n == 0:
                for i in range(0, size, 4096):
                    buf[i] = 2  # write: un-shares every page
            else:
                total = sum(buf[i] for i in range(0, size, 4096))  # read only: pages stay shared
                assert total > 0
            os.write(w, b"x")
            os.close(w)
            sys.stdin.read()  # until the test closes stdin
            os._exit(0)
        os.close(w)
        os.read(r, 1)
        os.close(r)
        pids.append(pid)
    print("ready", os.getpid(), *pids, flush=True)
    sys.stdin.read()
    for pid in pids:
        os.waitpid(pid, 0)


@dataclass
class Tree:
    proc: subprocess.Popen[str]
    rank: int
    workers: list[int]
    run_id: str


@contextmanager
def rank_tree(size_mib: int = 64, workers: int = 2, rank: int = 0, comm: str = ""):
    run_id = f"oomwatch-test-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", TORCHELASTIC_RUN_ID=run_id)
    proc = subprocess.Popen(
        [sys.executable, __file__, str(size_mib), str(workers), comm],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line and line[0] == "ready", f"tree did not start: {line}"
        yield Tree(proc, int(line[1]), [int(p) for p in line[2:]], run_id)
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


if __name__ == "__main__":
    main()
