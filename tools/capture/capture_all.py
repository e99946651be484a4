#!/usr/bin/env python3
"""Re-make the captured fixtures under tests/fixtures/captured/ (see README.md here).

    sudo python3 tools/capture/capture_all.py --list
    sudo python3 tools/capture/capture_all.py [--venv DIR] [NAME ...]

Run from anywhere; commands run from the repository root.  Torch captures need `python`
(and `torchrun`) with torch importable on PATH, e.g. --venv pointing at a venv made with
`pip install torch==2.13.0` (CPU build) and `pip install tqdm`.  Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join("tests", "fixtures", "captured")
W = "tools/capture/workloads"

HOG_NOTE = (
    "`tools/capture/workloads/hog.py` appends 10 MiB bytearrays (every page written) and prints a line every 50 MiB."
)
TORCH_NOTE = (
    "Software: {torch}; torch is the CPU wheel, installed with `pip install torch==2.13.0` "
    "(plus `pip install tqdm`) into a venv made with `python3 -m venv --system-site-packages`."
)
NO_TRIM = "Nothing was trimmed from any file."
PATHS_NOTE = (
    "Tracebacks show the paths of the capture machine: the repository checkout and a venv "
    "holding torch; they were left as printed."
)


@dataclass
class Capture:
    name: str
    command: list[str]
    description: str
    limit: str = "max"
    torch: bool = False
    expect_oom: bool = False
    also: str | None = None
    timeout: float = 120
    notes: list[str] = field(default_factory=list)


def _ddp(mode: str, port: int, extra: list[str] | None = None) -> list[str]:
    return [
        "torchrun",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        f"{W}/ddp_train.py",
        "--mode",
        mode,
        *(extra or []),
    ]


SHM_MOUNT = "mount -t tmpfs -o size=1M tmpfs /dev/shm && exec python {script}"
SHM_NOTE = (
    "`unshare -m` gives the command a private mount namespace (util-linux makes its mounts "
    "private), in which a 1 MiB tmpfs is mounted over /dev/shm; the host's /dev/shm is "
    "untouched. No memory limit: the cgroup only scopes the kernel messages (there were none)."
)

CAPTURES = [
    Capture(
        "memcg_python_hog",
        ["python3", f"{W}/hog.py"],
        "A plain Python process grows past its memory cgroup's limit and the kernel OOM-kills it.",
        limit="200M",
        expect_oom=True,
        notes=[HOG_NOTE, NO_TRIM],
    ),
    Capture(
        "memcg_dataloader_worker",
        ["python", f"{W}/dataloader_oom.py"],
        "A torch DataLoader(num_workers=2) worker whose Dataset keeps an unbounded per-worker "
        "cache is OOM-killed by the memory cgroup (kernel comm `pt_data_worker`); the training "
        "script's own output (the DataLoader's RuntimeErrors) is in console.txt.",
        limit="500M",
        torch=True,
        expect_oom=True,
        notes=[
            "`tools/capture/workloads/dataloader_oom.py`: worker 0's `__getitem__` stores a 16 MiB "
            "buffer per sample in `self.cache`; the main process and both workers are in the "
            "cgroup (workers are forked, so they inherit it).",
            TORCH_NOTE,
            PATHS_NOTE,
            NO_TRIM,
        ],
    ),
    Capture(
        "memcg_torchrun_rank",
        _ddp("oom", 29531, ["--steps", "200"]),
        "torchrun --nproc_per_node 2 (gloo, CPU DDP): rank 1 keeps 32 MiB per step until the "
        "memory cgroup's OOM killer SIGKILLs it; torchrun's elastic agent reports exitcode -9 "
        "and a ChildFailedError; rank 0 first fails in gloo (peer closed the connection).",
        limit="900M",
        torch=True,
        expect_oom=True,
        notes=[
            "Whole process tree in the cgroup: the torchrun agent (kernel comm `pt_elastic`) and both ranks.",
            TORCH_NOTE,
            PATHS_NOTE,
            NO_TRIM,
        ],
    ),
    Capture(
        "memcg_distributed_launch_rank",
        [
            "python",
            "-m",
            "torch.distributed.launch",
            "--nproc_per_node",
            "2",
            "--master_port",
            "29532",
            f"{W}/ddp_train.py",
            "--mode",
            "oom",
            "--steps",
            "200",
        ],
        "Same OOM as memcg_torchrun_rank, launched with the deprecated "
        "`python -m torch.distributed.launch` (FutureWarning, then the same elastic agent).",
        limit="900M",
        torch=True,
        expect_oom=True,
        notes=[TORCH_NOTE, PATHS_NOTE, NO_TRIM],
    ),
    Capture(
        "memcg_mp_spawn_rank",
        ["python", f"{W}/ddp_train.py", "--mode", "oom", "--steps", "200", "--spawn", "2"],
        "Same OOM with torch.multiprocessing.spawn(nprocs=2): the parent raises "
        "ProcessExitedException: process 1 terminated with signal SIGKILL.",
        limit="900M",
        torch=True,
        expect_oom=True,
        notes=[TORCH_NOTE, PATHS_NOTE, NO_TRIM],
    ),
    Capture(
        "shell_killed",
        ["bash", "-c", f'python3 {W}/hog.py; echo "exit status: $?"'],
        "Non-interactive `bash -c`: its child is OOM-killed, bash reports "
        "`bash: line 1: PID Killed ...` and `$?` is 137.",
        limit="200M",
        expect_oom=True,
        notes=[HOG_NOTE, NO_TRIM],
    ),
    Capture(
        "shell_killed_script",
        [f"{W}/train.sh"],
        "A bash job script (`tools/capture/workloads/train.sh`) whose python step is OOM-killed: "
        "bash names the script and line (`...train.sh: line 4: PID Killed ...`), `$?` is 137.",
        limit="200M",
        expect_oom=True,
        notes=[HOG_NOTE, NO_TRIM],
    ),
    Capture(
        "shell_killed_dash",
        ["sh", "-c", f'python3 {W}/hog.py; echo "exit status: $?"'],
        "`sh -c` where /bin/sh is dash: dash prints a bare `Killed` for the OOM-killed child.",
        limit="200M",
        expect_oom=True,
        notes=[HOG_NOTE, NO_TRIM],
    ),
    Capture(
        "shell_killed_interactive",
        [
            "python3",
            f"{W}/interactive_shell.py",
            f"python3 {W}/hog.py",
            'echo "exit status: $?"',
        ],
        "An interactive bash (in a pseudo-terminal, PS1='$ ') runs the hog, which is OOM-killed: "
        "the shell prints a bare `Killed`, then `$?` is 137.",
        limit="200M",
        expect_oom=True,
        notes=[
            HOG_NOTE,
            "console.txt is the raw terminal transcript (CRLF line ends, typed commands echoed) "
            "as read from the pty by `tools/capture/workloads/interactive_shell.py`.",
            NO_TRIM,
        ],
    ),
    Capture(
        "torchrun_healthy",
        _ddp("healthy", 29534),
        "Contrast (no failure): a short healthy torchrun run; rank 0 prints loss lines and a tqdm "
        "progress bar (carriage returns kept).",
        torch=True,
        notes=[
            "No memory limit: the cgroup only scopes kernel messages (there were none).",
            TORCH_NOTE,
            NO_TRIM,
        ],
    ),
    Capture(
        "torchrun_exception",
        _ddp("raise", 29535),
        "Contrast (not memory): rank 1 raises an ordinary ValueError at step 3; torchrun reports "
        "exitcode 1 and a ChildFailedError with the rank's traceback.",
        torch=True,
        notes=["No memory limit.", TORCH_NOTE, PATHS_NOTE, NO_TRIM],
    ),
    Capture(
        "torchrun_segfault",
        _ddp("segfault", 29536),
        "Contrast (not memory): rank 1 dereferences NULL (ctypes.string_at(0)) and dies of "
        "SIGSEGV; torchrun reports exitcode -11. The kernel's own `segfault at 0` line is kept.",
        torch=True,
        also=r"segfault at |^Code: ",
        notes=[
            "No memory limit. The kernel records kept are those logged during the run that "
            "match `segfault at ` or start with `Code: ` (the segfault report and its code dump).",
            TORCH_NOTE,
            PATHS_NOTE,
            NO_TRIM,
        ],
    ),
    Capture(
        "dataloader_shm_enospc",
        ["unshare", "-m", "sh", "-c", SHM_MOUNT.format(script=f"{W}/dataloader_shm.py")],
        "Contrast (shared memory, not RAM): DataLoader(num_workers=2) with /dev/shm a 1 MiB "
        "tmpfs; the worker cannot allocate the batch's shared memory: RuntimeError ... "
        "No space left on device (28), re-raised in the main process.",
        torch=True,
        notes=[SHM_NOTE, TORCH_NOTE, PATHS_NOTE, NO_TRIM],
    ),
    Capture(
        "dataloader_shm_bus_error",
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            SHM_MOUNT.format(script=f"{W}/dataloader_shm.py shared_cache"),
        ],
        "Contrast (shared memory, not RAM): a Dataset that caches samples in "
        "multiprocessing.shared_memory blocks, with /dev/shm a 1 MiB tmpfs: writing the block "
        "raises a real SIGBUS in the workers; torch prints its 'Unexpected bus error' message "
        "and the main process raises 'killed by signal: Bus error'.",
        torch=True,
        notes=[
            SHM_NOTE,
            "console.txt contains NUL bytes exactly as written: torch's SIGBUS handler writes its "
            "message with the C string's terminating NUL.",
            TORCH_NOTE,
            PATHS_NOTE,
            NO_TRIM,
        ],
    ),
    Capture(
        "python_memory_error",
        ["bash", "-c", f"ulimit -v 1000000; exec python3 {W}/hog.py"],
        "Contrast (no kernel OOM kill): the hog under `ulimit -v 1000000` (RLIMIT_AS ~1 GB): "
        "the allocation fails inside Python, which raises MemoryError.",
        notes=[HOG_NOTE, "No memory-cgroup limit.", PATHS_NOTE, NO_TRIM],
    ),
    Capture(
        "numpy_unable_to_allocate",
        ["python", f"{W}/big_alloc.py", "numpy"],
        "Contrast (no kernel OOM kill): np.zeros((100000, 100000)) on a machine with less RAM "
        "than that and heuristic overcommit: numpy's _ArrayMemoryError 'Unable to allocate 74.5 GiB ...'.",
        torch=True,
        notes=["No memory-cgroup limit.", TORCH_NOTE, PATHS_NOTE, NO_TRIM],
    ),
    Capture(
        "torch_cpu_alloc_error",
        ["python", f"{W}/big_alloc.py", "torch"],
        "Contrast (no kernel OOM kill): torch.zeros(100000, 100000) on the CPU: "
        "DefaultCPUAllocator: can't allocate memory (40000000000 bytes, error code 12).",
        torch=True,
        notes=["No memory-cgroup limit.", TORCH_NOTE, PATHS_NOTE, NO_TRIM],
    ),
]


def _software(env: dict) -> str:
    code = (
        "import sys, platform\n"
        "try:\n    import torch; t = torch.__version__\nexcept ImportError:\n    t = None\n"
        "try:\n    import numpy; n = numpy.__version__\nexcept ImportError:\n    n = None\n"
        "try:\n    import tqdm; q = tqdm.__version__\nexcept ImportError:\n    q = None\n"
        "print(f'Python {platform.python_version()}, torch {t}, numpy {n}, tqdm {q}')\n"
    )
    out = subprocess.run(["python", "-c", code], env=env, capture_output=True, text=True)
    return out.stdout.strip() or f"unknown ({out.stderr.strip()})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="captures to make (default: all)")
    p.add_argument("--venv", help="prepend DIR/bin to PATH (where python/torchrun live)")
    p.add_argument("--list", action="store_true", help="list the captures and exit")
    p.add_argument("--out", default=OUT, help="folder of capture folders (relative to repo)")
    args = p.parse_args()
    if args.list:
        for c in CAPTURES:
            print(f"{c.name:32} {c.description}")
        return 0
    wanted = [c for c in CAPTURES if not args.names or c.name in args.names]
    unknown = set(args.names) - {c.name for c in CAPTURES}
    if unknown:
        raise SystemExit(f"unknown capture(s): {sorted(unknown)}")
    env = dict(os.environ)
    if args.venv:
        env["PATH"] = os.path.join(os.path.abspath(args.venv), "bin") + os.pathsep + env["PATH"]
    software = _software(env)
    failed = []
    for c in wanted:
        cmd = [
            sys.executable,
            os.path.join(HERE, "kernel_oom.py"),
            "--out",
            os.path.join(args.out, c.name),
            "--limit",
            c.limit,
            "--timeout",
            str(c.timeout),
            "--description",
            c.description,
        ]
        for note in c.notes:
            cmd += ["--note", note.format(torch=software)]
        if not c.torch:
            cmd += ["--note", f"Software: {software}."]
        if c.also:
            cmd += ["--also", c.also]
        if c.expect_oom:
            cmd.append("--expect-oom")
        cmd += ["--", *c.command]
        print(f"== {c.name}", flush=True)
        rc = subprocess.run(cmd, cwd=REPO, env=env).returncode
        if rc != 0:
            failed.append(c.name)
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
