"""How fast is `oomwatch diagnose` on big logs, against `grep -F -f` and `rg -F -f`?

Generates the logs, then times in one run, side by side, for each log:

  * `oomwatch diagnose --format json LOG` (a fresh process, as users run it) and its peak RSS,
  * `grep -F -c -f ANCHORS LOG` and `rg -F -c -f ANCHORS LOG` over the literal anchors of the same
    rules (ripgrep is skipped, with a line that says so, where `rg` is not installed),

alternately (oomwatch, grep, oomwatch, rg, ...), and prints min and median wall seconds and the
ratios taken pair by pair (min and median), so a drift of the machine's speed does not move them.

Logs: a small training log (1 MiB), a training log of --size-mb (tqdm runs with carriage
returns, loss and metric lines, Python warnings, NCCL INFO lines, a handful of real failure
fingerprints at the end), the same with 1% of its lines benign look-alikes (`RSS:` in memory
logging, `step: 137`, `lr=1e-9`, `exitcode` in prose), and a kernel log of --size-mb (dmesg with
call traces, kernel versions, USB and network lines, one OOM report at the end).

Targets: on the training logs, oomwatch <= 0.75 x grep's wall; peak RSS < 100 MB at any size.

    python bench/diagnose_speed.py                    # 1 GiB logs in a temporary directory
    python bench/diagnose_speed.py --size-mb 200 --runs 5 --only train,lookalike
"""

from __future__ import annotations

import argparse
import os
import random
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

FAILURE_TAIL = b"""\
[rank3]:[W501 10:12:13.000000000 ProcessGroupNCCL.cpp:1234] Warning: process group has NOT been destroyed
ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
RuntimeError: DataLoader worker (pid 31337) is killed by signal: Killed.
[2024-05-01 10:12:14,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 3 (pid: 31330) of binary: /usr/bin/python3
[ 9123.456789] pt_data_worker invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
[ 9123.456901] Out of memory: Killed process 31337 (pt_data_worker) total-vm:20123456kB, anon-rss:15123456kB, file-rss:1234kB, shmem-rss:0kB, UID:1000 pgtables:40000kB oom_score_adj:0
"""


LOOKALIKES = (
    "[mem] rank{r} step {step}: RSS: {mb} MB, shared: 312 MB",
    "step: 137 | loss {loss:.4f} | tokens/s {tok}",
    "scheduler: warmup done, lr=1e-9 -> {lr:.2e} at step {step}",
    "note: the launcher reports each worker's exitcode when it ends; step {step} checkpointed",
)

KERNEL_TAIL = b"""\
[ 9123.456789] pt_data_worker invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
[ 9123.456795] CPU: 7 PID: 31337 Comm: pt_data_worker Not tainted 5.15.0-91-generic #101-Ubuntu
[ 9123.456801] Call Trace:
[ 9123.456803]  <TASK>
[ 9123.456805]  dump_stack_lvl+0x4a/0x63
[ 9123.456810]  dump_header+0x4a/0x1f4
[ 9123.456812]  oom_kill_process.cold+0xb/0x10
[ 9123.456815]  out_of_memory+0x1bd/0x4f0
[ 9123.456820]  </TASK>
[ 9123.456830] Tasks state (memory values in pages):
[ 9123.456831] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name
[ 9123.456840] [  31337]  1000 31337  5030864  3780864 30420992        0             0 pt_data_worker
[ 9123.456845] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=pt_data_worker,pid=31337,uid=1000
[ 9123.456901] Out of memory: Killed process 31337 (pt_data_worker) total-vm:20123456kB, anon-rss:15123456kB, file-rss:1234kB, shmem-rss:0kB, UID:1000 pgtables:40000kB oom_score_adj:0
"""


def _healthy_block(rng: random.Random, step0: int, lookalike: float = 0.0) -> bytes:
    out = []
    for i in range(2000):
        step = step0 + i
        if lookalike and rng.random() < lookalike:
            out.append(
                rng.choice(LOOKALIKES).format(
                    r=rng.randint(0, 7),
                    step=step,
                    mb=rng.randint(9000, 12000),
                    loss=rng.uniform(0.1, 3),
                    tok=rng.randint(1000, 99999),
                    lr=rng.uniform(1e-6, 1e-4),
                )
            )
            continue
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


def _kernel_block(rng: random.Random, t0: float) -> bytes:
    """dmesg as a busy host prints it: kernel versions and call traces (hung tasks, warnings), USB,
    network, audit and filesystem lines; no OOM."""
    out = []
    t = t0
    while len(out) < 2000:
        t += rng.uniform(0.0001, 0.5)
        kind = rng.random()
        if kind < 0.15:
            pid = rng.randint(100, 99999)
            trace = [
                f"INFO: task kworker/{rng.randint(0, 63)}:{rng.randint(0, 9)}:{pid} blocked for more than 120 seconds.",
                f"      Not tainted 5.15.0-9{rng.randint(0, 9)}-generic #10{rng.randint(0, 9)}-Ubuntu",
                f"CPU: {rng.randint(0, 63)} PID: {pid} Comm: kworker/{rng.randint(0, 63)}:1 Not tainted 5.15.0-91-generic #101-Ubuntu",
                "Hardware name: Supermicro SYS-4029GP-TRT/X11DPG-OT-CPU, BIOS 3.9 09/29/2023",
                "Call Trace:",
                " <TASK>",
                f" __schedule+0x2{rng.randint(10, 99)}/0x5{rng.randint(10, 99)}",
                " schedule+0x69/0x110",
                " io_schedule+0x46/0x80",
                f" wait_on_page_bit_common+0x10{rng.randint(0, 9)}/0x390",
                " </TASK>",
            ]
            out.extend(trace)
        elif kind < 0.35:
            out.append(
                f"usb 1-{rng.randint(1, 9)}: new high-speed USB device number {rng.randint(1, 99)} using xhci_hcd"
            )
        elif kind < 0.55:
            out.append(
                f'audit: type=1400 audit({t:.3f}:{rng.randint(1, 999)}): apparmor="DENIED" operation="open" '
                f'profile="snap.lxd.daemon" name="/proc/{rng.randint(100, 99999)}/mountinfo" pid={rng.randint(100, 99999)} comm="lxd"'
            )
        elif kind < 0.7:
            out.append(
                f"IPv6: ADDRCONF(NETDEV_CHANGE): veth{rng.randint(1000, 9999)}a{rng.randint(0, 9)}: link becomes ready"
            )
        elif kind < 0.85:
            out.append(
                f"EXT4-fs (nvme{rng.randint(0, 9)}n1p{rng.randint(1, 9)}): mounted filesystem with ordered data mode. Quota mode: none."
            )
        else:
            out.append(
                f"mlx5_core 0000:{rng.randint(10, 99)}:00.{rng.randint(0, 9)}: mlx5_fw_tracer_handle_traces:740:(pid {rng.randint(100, 99999)}): FW trace -9{rng.randint(0, 9)}"
            )
    return "".join(f"[{t0 + i * 0.01:12.6f}] {line}\n" for i, line in enumerate(out)).encode()


def make_log(path: Path, size: int, seed: int = 1, kind: str = "train") -> None:
    """Every block is new (its steps, numbers and times): a log that repeated a few blocks would be
    served from the scanner's caches of lines seen a moment ago, which real logs rarely are."""
    rng = random.Random(seed)
    lookalike = 0.01 if kind == "lookalike" else 0.0
    tail = KERNEL_TAIL if kind == "kernel" else FAILURE_TAIL
    written = 0
    with path.open("wb") as f:
        i = 0
        while written < size - len(tail):
            block = _kernel_block(rng, 10.0 + i * 20) if kind == "kernel" else _healthy_block(rng, i * 2000, lookalike)
            f.write(block)
            written += len(block)
            i += 1
        f.write(tail)


def anchors_file(path: Path) -> int:
    rules = load_rules()
    anchors = {a for fp in rules.fingerprints for a in fp.anchors} | set(KERNEL_ANCHORS)
    path.write_text("\n".join(sorted(anchors)) + "\n")
    return len(anchors)


def timed(cmd: list[str]) -> tuple[float, float, int, bytes]:
    """Wall seconds, peak RSS (MiB) and exit status of one fresh process, and its stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode, out


def _stats(xs: list[float]) -> str:
    return f"min {min(xs):7.3f}  median {statistics.median(xs):7.3f}"


def bench_log(log: Path, anchors: Path, runs: int) -> bool:
    """Time oomwatch against grep and rg on one log, alternating; print one block. False when oomwatch failed."""
    ow_cmd = [sys.executable, "-m", "oomwatch", "diagnose", "--format", "json", str(log)]
    others = {"grep -F": ["grep", "-F", "-c", "-f", str(anchors), str(log)]}
    rg = shutil.which("rg")
    if rg:
        others["rg -F"] = [rg, "-F", "-c", "--no-config", "-f", str(anchors), str(log)]
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL)  # warm the page cache for all
    walls: dict[str, list[float]] = {"oomwatch": [], **{k: [] for k in others}}
    ratios: dict[str, list[float]] = {k: [] for k in others}
    peaks: list[float] = []
    counts: dict[str, str] = {}
    for _ in range(runs):
        for name, cmd in others.items():  # pairs: oomwatch then the other, so drift hits both alike
            ow_s, peak, rc, _out = timed(ow_cmd)
            if rc not in (0, 3, 4):
                print(f"oomwatch diagnose failed on {log.name} (exit {rc})", file=sys.stderr)
                return False
            other_s, _, _, out = timed(cmd)
            counts[name] = out.decode().strip()
            walls["oomwatch"].append(ow_s)
            walls[name].append(other_s)
            ratios[name].append(ow_s / other_s)
            peaks.append(peak)
    size = log.stat().st_size
    print(f"\n{log.name}: {size / 2**20:.0f} MiB, {runs} pair(s) each")
    for name, xs in walls.items():
        extra = f"  matched {counts[name]} lines" if name in counts else f"  peak RSS max {max(peaks):.0f} MiB"
        print(f"  {name:9s} wall s: {_stats(xs)}{extra}")
    for name, xs in ratios.items():
        print(f"  oomwatch / {name:7s}: {_stats(xs)}")
    if not rg:
        print("  rg -F   : skipped (ripgrep is not installed)")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the big logs (default 1024)")
    ap.add_argument("--runs", type=int, default=3, help="pairs per comparison (default 3)")
    ap.add_argument("--only", default="small,train,lookalike,kernel", help="which logs, comma-separated")
    ap.add_argument("--dir", type=Path, help="write the logs here and keep them (reused when big enough)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="oomwatch-bench-"))
    try:
        where = args.dir or tmp
        where.mkdir(parents=True, exist_ok=True)
        anchors = tmp / "anchors.txt"
        n = anchors_file(anchors)
        print(f"{n} literal anchors; targets: oomwatch <= 0.75 x grep -F wall on training logs, peak RSS < 100 MiB")
        ok = True
        for name in args.only.split(","):
            size = (1 if name == "small" else args.size_mb) << 20
            log = where / f"{name}.log"
            if not log.exists() or log.stat().st_size < size:
                make_log(log, size, kind={"small": "train"}.get(name, name))
            ok = bench_log(log, anchors, args.runs) and ok
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
