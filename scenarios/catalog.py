"""The scenarios: for each host-memory mechanism, a workload that really produces it inside a
memory cgroup limit, and a fixed variant that survives the same limit.

Each workload under ``scenarios/workloads/`` is a plain training script (argparse flags,
printed config, the libraries' own progress and log lines, loss lines); the broken and the
fixed variant differ only in the flags below. Sizes and limits are kept small so that the
whole suite (every scenario, broken and fixed) runs in a few minutes on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

from scenarios.scenario import Prepared, Scenario

__all__ = ["ALL", "GENERAL", "SCENARIOS", "Prepared", "Scenario", "WORKLOADS", "get"]

WORKLOADS = Path(__file__).resolve().parent / "workloads"

# What a diagnosis that cannot see the script may name instead of a scenario's cause: its general
# form (a dataset held in every rank's memory, without the call that put it there).
GENERAL = {"keep_in_memory_duplication": frozenset({"dataset_in_ram"})}


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="keep_in_memory",
            title="every rank copies the whole Arrow dataset into its own memory",
            mechanism=(
                "datasets.load_from_disk(path, keep_in_memory=True) reads the Arrow table into anonymous "
                "memory in each of the 4 torchrun ranks: 4 private copies of a 512 MiB dataset. Memory-mapped "
                "(the default) the ranks share one copy in the page cache, which the kernel can reclaim."
            ),
            script="keep_in_memory.py",
            nproc=4,
            broken_args=("--dataset-path", "{data}", "--keep-in-memory"),
            fixed_args=("--dataset-path", "{data}"),
            limit="1500M",
            prepare=Prepared("arrow", "arrow-512m", 512),
            victim_role="rank",
            cause="keep_in_memory_duplication",
            fix="datasets.load_from_disk(path)  # memory-mapped, shared by all ranks",
        ),
        Scenario(
            name="cow_refcount",
            title="forked DataLoader workers copy a dataset of Python objects page by page",
            mechanism=(
                "The Dataset holds a list of 600,000 (path, label, weight) tuples. The 4 forked DataLoader "
                "workers start sharing the parent's pages, but every sample a worker touches gets its reference "
                "counts written, so the page is copied (and the parent's garbage collector copies the pages it "
                "traverses): each worker's private memory (USS) climbs towards the size of the list while its "
                "RSS stays flat. The kernel then kills the largest process, the training process itself."
            ),
            script="cow_refcount.py",
            broken_args=("--num-samples", "600000", "--num-workers", "4", "--batch-size", "1024", "--storage", "list"),
            fixed_args=("--num-samples", "600000", "--num-workers", "4", "--batch-size", "1024", "--storage", "numpy"),
            limit="800M",
            victim_role="main",
            cause="cow_refcount_defeat",
            fix="store samples in numpy arrays (or Arrow) instead of a list of Python objects",
            notes=(
                "The kernel kills the training process first, not a worker: it has the largest RSS (every page "
                "the workers map plus its own). The copying shows in the workers' USS (meta.json: first -> last), "
                "not in their RSS, which stays flat. The kernel sometimes kills a worker a few milliseconds later "
                "as well, while the first victim's memory is still being freed.",
            ),
        ),
        Scenario(
            name="dict_cache",
            title="an unbounded dict cache in __getitem__ grows in every DataLoader worker",
            mechanism=(
                "__getitem__ stores every decoded sample in self.cache, a plain dict. Each of the 4 DataLoader "
                "workers has its own copy of the Dataset and so its own cache, which grows by one decoded "
                "image (192 KiB) per sample (7,000 samples) until a worker is killed."
            ),
            script="dict_cache.py",
            broken_args=("--num-workers", "4", "--cache", "dict"),
            fixed_args=("--num-workers", "4", "--cache", "lru", "--cache-size", "64"),
            limit="1400M",
            victim_role="dataloader_worker",
            cause="unbounded_cache",
            fix="self.load = functools.lru_cache(maxsize=64)(self.decode)  # or no cache at all",
            notes=(
                "All 4 workers grow alike; the kernel kills the largest, and often a second worker a few "
                "milliseconds later (the first victim's memory is still being freed). The limit is high enough "
                "that a worker's RSS passes the training process's (which maps more of torch's libraries) first.",
            ),
        ),
        Scenario(
            name="manager_cache",
            title="a multiprocessing.Manager().dict() sample cache grows in the manager process",
            mechanism=(
                "CachedDataset keeps decoded samples in a Manager().dict() shared by the DataLoader workers: "
                "every sample is pickled to the manager's server process and stays there, so the manager "
                "grows by the size of the decoded dataset until it is killed; the workers then fail with "
                "BrokenPipeError/ConnectionResetError on their next lookup."
            ),
            script="manager_cache.py",
            broken_args=("--num-workers", "4"),
            fixed_args=("--num-workers", "4", "--no-cache"),
            limit="800M",
            victim_role="manager",
            cause="manager_cache",
            fix="drop the Manager().dict() cache: decode in the workers and let the page cache keep the files",
            notes=(
                "The manager server process is a fork of the training process (same comm and command line); "
                "it is the first victim in every run seen. In about 1 run in 3 the kernel also kills the training "
                "process a few milliseconds later (a worker's allocation fails while the manager's memory is "
                "still being freed); the console then ends with bash's `Killed` line and may lack the workers' "
                "BrokenPipeError/ConnectionResetError/EOFError. The committed capture is a run with one kill.",
            ),
        ),
        Scenario(
            name="rank_leak",
            title="every rank keeps each step's output tensor on the host",
            mechanism=(
                "Each of the 2 torchrun ranks appends the step's logits (16 x 256 x 512 float32, 8 MiB) to a "
                "list for epoch-end metrics; nothing is ever freed, so every rank grows by 8 MiB a step "
                "until the limit kills one."
            ),
            script="rank_leak.py",
            nproc=2,
            broken_args=(),
            fixed_args=("--no-keep-outputs",),
            limit="1200M",
            victim_role="rank",
            cause="unbounded_cache",
            fix="losses.append(loss.item())  # keep Python floats, not tensors",
        ),
        Scenario(
            name="checkpoint_per_rank",
            title="every rank torch.loads the full training checkpoint into its own memory",
            mechanism=(
                "Each of the 4 torchrun ranks calls torch.load(path, map_location='cpu') on a 340 MiB checkpoint "
                "(model weights, EMA, Adam moments): 4 private copies at once, on top of each rank's model. "
                "With mmap=True the tensors stay in the shared page cache and only the weights are read."
            ),
            script="checkpoint_per_rank.py",
            nproc=4,
            broken_args=("--resume", "{data}"),
            fixed_args=("--resume", "{data}", "--mmap"),
            limit="2000M",
            prepare=Prepared("checkpoint", "checkpoint-340m.pt", 340),
            victim_role="rank",
            cause="checkpoint_load_duplication",
            fix="torch.load(path, map_location='cpu', mmap=True)  # or load on rank 0 and broadcast",
        ),
        Scenario(
            name="pin_memory_prefetch",
            title="a large prefetch_factor keeps dozens of large batches in flight",
            mechanism=(
                "num_workers=4 with prefetch_factor=16 lets 64 batches of 18 MiB (32 x 3 x 224 x 224 float32) "
                "wait in shared memory while the training step is slower than the workers (with CUDA, "
                "pin_memory=True copies them again into page-locked memory; CPU-only torch ignores it with a "
                "warning). The waiting batches are shmem charged to the cgroup but mapped by no process, so "
                "the kernel kills the largest process, the training process. prefetch_factor=2 keeps 8."
            ),
            script="pin_memory_prefetch.py",
            broken_args=("--num-workers", "4", "--prefetch-factor", "16", "--pin-memory"),
            fixed_args=("--num-workers", "4", "--prefetch-factor", "2", "--pin-memory"),
            limit="800M",
            victim_role="main",
            cause="pin_memory_prefetch",
            fix="DataLoader(..., num_workers=4, prefetch_factor=2, pin_memory=True)",
            notes=(
                "The batches waiting in the queues are unlinked /dev/shm files held by file descriptors: the "
                "kernel report's memory cgroup stats show them as `shmem`, but no task's RSS includes them, so "
                "the victim is the process with the largest RSS, the training process (bash prints `Killed`).",
            ),
        ),
    )
}


def _all() -> dict[str, Scenario]:
    from scenarios.variants import VARIANTS

    clash = set(VARIANTS) & set(SCENARIOS)
    assert not clash, f"scenario names used twice: {sorted(clash)}"
    return {**SCENARIOS, **VARIANTS}


ALL: dict[str, Scenario] = _all()


def get(name: str) -> Scenario:
    """The scenario called ``name`` (KeyError with the known names otherwise)."""
    try:
        return ALL[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(ALL)}") from None
