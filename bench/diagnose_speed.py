"""How fast is `oomwatch diagnose` on a big training log, against `grep -F -f`?

Generates a realistic training log (tqdm progress runs with carriage returns, loss and
metric lines, Python warnings, NCCL INFO lines, a handful of real failure fingerprints
near the end), then measures in one run:

  * the wall time of `oomwatch diagnose --format json LOG` (a fresh process, as users run it),
  * the wall time of `grep -F -c -f ANCHORS LOG` over the literal anchors of the same rules,
  * oomwatch's peak RSS (ru_maxrss of the child),

and prints both times, the ratio (target <= 1.0) and the peak memory (target < 100 MB).

    python bench/diagnose_speed.py            # 1 GiB log in a temporary directory
    python bench/diagnose_speed.py --size-mb 200 --keep /tmp/train.log
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oomwatch.engine.kernel_report import KERNEL_ANCHORS  # noqa: E402
from oomwatch.engine.loader import load_rules  # noqa: E402

FAILURE_TAIL = b"""\
[rank3]:[W501 10:12:13.000000000 ProcessGroupNCCL.cpp:1234] Warning: process group has NOT been destroyed
ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
RuntimeError: DataLoader worker (pid 31337) is killed by signal: Killed.
[2024-05-01 10:12:14,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 3 (pid: 31330) of binary: /usr/bin/python3
[ 9123.456789] pt_data_worker invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
[ 9123.456901] Out of memory: Killed process 31337 (pt_data_worker) total-vm:20123456kB, anon-rss:15123456kB, file-rss:1234kB, shmem-rss:0kB, UID:1000 pgtables:40000kB oom_score_adj:0
"""


def _healthy_block(rng: random.Random, step0: int) -> bytes:
    out = []
    for i in range(2000):
        step = step0 + i
        kind = rng.random()
        if kind < 0.55:
            bars = "".join(
                f"\rEpoch {step // 1000}:  {p:3d}%|{'#' * (p // 10):<10}| {p * 10}/1000 [00:{p:02d}<00:{99 - p:02d}, "
                f"{rng.uniform(2, 9):.2f}it/s, loss={rng.uniform(0.1, 3):.4f}, v_num=0]"
                for p in range(0, 100, 7)
            )
            out.append(bars)
        elif kind < 0.85:
            out.append(
                f"{{'loss': {rng.uniform(0.1, 3):.4f}, 'grad_norm': {rng.uniform(0.1, 9):.3f}, "
                f"'learning_rate': {rng.uniform(1e-6, 1e-4):.3e}, 'epoch': {step / 1000:.2f}}}"
            )
        elif kind < 0.93:
            out.append(
                f"[2024-05-01 10:{step % 60:02d}:{i % 60:02d},{i % 1000:03d}] [INFO] [trainer.py:{rng.randint(1, 999)}] "
                f"step={step} tokens/s={rng.randint(1000, 99999)} mem_alloc={rng.uniform(1, 70):.1f}GB"
            )
        elif kind < 0.97:
            out.append(
                f"/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:{rng.randint(1, 999)}: UserWarning: "
                "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly."
            )
        else:
            out.append(
                f"node{rng.randint(0, 9)}:{rng.randint(1000, 9999)}:{rng.randint(1000, 9999)} [0] NCCL INFO Channel 00/0{rng.randint(0, 7)} : 0[0] -> 1[1] via P2P/IPC"
            )
    return ("\n".join(out) + "\n").encode()


def make_log(path: Path, size: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    blocks = [_healthy_block(rng, i * 2000) for i in range(8)]
    written = 0
    with path.open("wb") as f:
        i = 0
        while written < size - len(FAILURE_TAIL):
            block = blocks[i % len(blocks)]
            f.write(block)
            written += len(block)
            i += 1
        f.write(FAILURE_TAIL)


def anchors_file(path: Path) -> int:
    rules = load_rules()
    anchors = {a for fp in rules.fingerprints for a in fp.anchors} | set(KERNEL_ANCHORS)
    path.write_text("\n".join(sorted(anchors)) + "\n")
    return len(anchors)


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return time.perf_counter() - start, done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keep", type=Path, help="write the log here and keep it")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="oomwatch-bench-"))
    try:
        log = args.keep or tmp / "train.log"
        if not log.exists() or log.stat().st_size < args.size_mb << 20:
            make_log(log, args.size_mb << 20)
        anchors = tmp / "anchors.txt"
        n = anchors_file(anchors)
        size_gb = log.stat().st_size / 2**30
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL)  # warm the page cache for both
        grep_s, grep = timed(["grep", "-F", "-c", "-f", str(anchors), str(log)])
        ow_s, ow = timed([sys.executable, "-m", "oomwatch", "diagnose", "--format", "json", str(log)])
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if ow.returncode not in (0, 3, 4):
            print(ow.stderr.decode(), file=sys.stderr)
            return 1
        print(f"log: {size_gb:.2f} GiB, {n} literal anchors; grep matched {grep.stdout.decode().strip()} lines")
        print(f"grep -F -f : {grep_s:6.2f} s  ({grep_s / size_gb:.2f} s/GiB)")
        print(f"oomwatch   : {ow_s:6.2f} s  ({ow_s / size_gb:.2f} s/GiB)")
        print(f"ratio oomwatch/grep: {ow_s / grep_s:.2f}  (target <= 1.0)")
        print(f"peak RSS of the slowest child (oomwatch): {peak_mb:.0f} MiB  (target < 100)")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
