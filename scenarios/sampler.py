"""Per-process memory of everything in a cgroup, sampled from ``/proc`` every ~0.2 s.

For each process in ``cgroup.procs`` the sampler reads ``/proc/PID/smaps_rollup`` (RSS, PSS,
USS = Private_Clean + Private_Dirty, anonymous) and keeps the peaks plus the first and last
values, with the process's comm, command line, parent and a role hint (launcher, rank N,
dataloader_worker, manager, shell, main, ...). It also records the cgroup's usage over time
(``usage``) and, beside it, what of that usage can and cannot be reclaimed (``memory``: the
``memory.stat`` counters ``total_rss`` (anonymous), ``total_shmem``, ``total_cache`` (page cache,
shmem included) and ``total_mapped_file``): page cache is reclaimed before the kernel kills, anonymous
memory and shmem are not (without swap).
A process that vanishes between two reads is normal and simply stops being sampled.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from scenarios.cgroup import cgroup_pids, read_int

__all__ = ["MEMORY_STAT_FIELDS", "ProcStats", "Sampler", "read_memory_stat", "read_smaps_rollup"]

# memory.stat counter -> key in a memory timeline sample (bytes; the hierarchical totals, so that
# children of the cgroup count too)
MEMORY_STAT_FIELDS = {
    "total_rss": "rss",
    "total_shmem": "shmem",
    "total_cache": "cache",
    "total_mapped_file": "mapped_file",
}

_KB_FIELDS = {
    "Rss": "rss",
    "Pss": "pss",
    "Private_Clean": "private_clean",
    "Private_Dirty": "private_dirty",
    "Anonymous": "anon",
    "Swap": "swap",
}


def read_smaps_rollup(pid: int) -> dict[str, int] | None:
    """Bytes per field of ``/proc/PID/smaps_rollup`` (``uss`` added), or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (OSError, ValueError):
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        name = _KB_FIELDS.get(key)
        if name:
            with contextlib.suppress(ValueError, IndexError):
                out[name] = int(rest.split()[0]) * 1024
    if "rss" not in out:
        return None  # a zombie or a kernel thread: nothing mapped
    out["uss"] = out.get("private_clean", 0) + out.get("private_dirty", 0)
    return out


def read_memory_stat(cg: Path) -> dict[str, int] | None:
    """The cgroup's ``memory.stat`` counters named in MEMORY_STAT_FIELDS (bytes, by their timeline
    keys), or None when the file cannot be read (the cgroup is gone)."""
    data = _read(str(cg / "memory.stat"))
    if data is None:
        return None
    out: dict[str, int] = {}
    for line in data.decode("ascii", "replace").splitlines():
        key, _, value = line.partition(" ")
        name = MEMORY_STAT_FIELDS.get(key)
        if name:
            with contextlib.suppress(ValueError):
                out[name] = int(value)
    return out


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _ppid(pid: int) -> int | None:
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    try:
        return int(data.rsplit(b")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def _environ_var(pid: int, key: str) -> str | None:
    data = _read(f"/proc/{pid}/environ")
    if not data:
        return None
    prefix = key.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("utf-8", "replace")
    return None


def _unix_listeners() -> dict[str, str]:
    """inode -> path of listening unix sockets (from /proc/net/unix)."""
    out: dict[str, str] = {}
    data = _read("/proc/net/unix")
    if not data:
        return out
    for line in data.decode("utf-8", "replace").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8:
            out[parts[6]] = parts[7]
    return out


def _is_mp_manager(pid: int) -> bool:
    """Does the process own a multiprocessing listener socket (``/tmp/pymp-*/listener-*``)?"""
    listeners = {ino: p for ino, p in _unix_listeners().items() if "/pymp-" in p and "listener-" in p}
    if not listeners:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in listeners:
                return True
    return False


@dataclass
class ProcStats:
    """What the sampler saw of one process (bytes; times in seconds since the run started)."""

    pid: int
    ppid: int | None
    comm: str
    cmdline: str
    role: str
    first_seen_s: float
    last_seen_s: float = 0.0
    samples: int = 0
    peak_rss: int = 0
    peak_pss: int = 0
    peak_uss: int = 0
    peak_anon: int = 0
    first_uss: int | None = None
    last_uss: int | None = None
    first_rss: int | None = None
    last_rss: int | None = None
    comms: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, object]:
        """The stats as written to meta.json (bytes, seconds)."""
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "comm": self.comm,
            "comms_seen": self.comms,
            "role": self.role,
            "cmdline": self.cmdline,
            "samples": self.samples,
            "first_seen_s": round(self.first_seen_s, 2),
            "last_seen_s": round(self.last_seen_s, 2),
            "peak_rss_bytes": self.peak_rss,
            "peak_pss_bytes": self.peak_pss,
            "peak_uss_bytes": self.peak_uss,
            "peak_anon_bytes": self.peak_anon,
            "first_uss_bytes": self.first_uss,
            "last_uss_bytes": self.last_uss,
            "first_rss_bytes": self.first_rss,
            "last_rss_bytes": self.last_rss,
        }


class Sampler(threading.Thread):
    """Samples the processes of cgroup ``cg`` every ``interval`` seconds until ``stop()``."""

    def __init__(self, cg: Path, interval: float = 0.2, stat_interval: float | None = None) -> None:
        super().__init__(name="oomwatch-sampler", daemon=True)
        self.cg = cg
        self.interval = interval
        # memory.stat alone (cheap) is also read every stat_interval s by a second thread, for the
        # peak only: a transient peak (a checkpoint being loaded) lasts less than 0.2 s
        self.stat_interval = stat_interval if stat_interval and stat_interval < interval else None
        self._lock = threading.Lock()
        self._stat_thread: threading.Thread | None = None
        self.procs: dict[int, ProcStats] = {}
        self.usage: list[tuple[float, int]] = []  # (seconds, memory.usage_in_bytes)
        # each sample: {"t": seconds, "usage": memory.usage_in_bytes, "rss", "shmem", "cache", "mapped_file"}
        self.memory: list[dict[str, float]] = []
        self.peak_anon_shmem = 0  # the largest total_rss + total_shmem seen
        self.peak_anon_shmem_at: float | None = None
        self._stop_event = threading.Event()
        self._t0 = time.monotonic()

    def start(self) -> None:
        """Start sampling (and the memory.stat thread when ``stat_interval`` is set)."""
        super().start()
        if self.stat_interval:
            self._stat_thread = threading.Thread(target=self._stat_loop, name="oomwatch-stat", daemon=True)
            self._stat_thread.start()

    def stop(self) -> None:
        """Stop sampling and wait for the threads."""
        self._stop_event.set()
        self.join(timeout=10)
        if self._stat_thread is not None:
            self._stat_thread.join(timeout=10)

    def _stat_loop(self) -> None:
        while not self._stop_event.is_set():
            stat = read_memory_stat(self.cg)
            if stat is not None:
                self._peak(stat, time.monotonic() - self._t0)
            self._stop_event.wait(self.stat_interval)

    def _peak(self, stat: dict[str, int], now: float) -> None:
        anon_shmem = stat.get("rss", 0) + stat.get("shmem", 0)
        with self._lock:
            if anon_shmem > self.peak_anon_shmem:
                self.peak_anon_shmem, self.peak_anon_shmem_at = anon_shmem, round(now, 2)

    def run(self) -> None:
        """The thread: sample, sleep ``interval``, until stopped."""
        while not self._stop_event.is_set():
            self.sample_once()
            self._stop_event.wait(self.interval)

    def sample_once(self) -> None:
        """Read the cgroup usage and every process in it once."""
        now = time.monotonic() - self._t0
        usage = read_int(self.cg / "memory.usage_in_bytes")
        if usage is not None:
            self.usage.append((round(now, 2), usage))
        stat = read_memory_stat(self.cg)
        if stat is not None:
            self.memory.append({"t": round(now, 2), "usage": usage if usage is not None else -1, **stat})
            self._peak(stat, now)
        for pid in cgroup_pids(self.cg):
            mem = read_smaps_rollup(pid)
            if mem is None:
                continue
            comm_b = _read(f"/proc/{pid}/comm")
            if not comm_b:
                continue  # exited between the two reads
            comm = comm_b.decode("utf-8", "replace").strip()
            st = self.procs.get(pid)
            argv = self._argv(pid) if st is not None else None
            if st is None or (argv and argv != st.argv):
                # new, or a fork that has exec'ed another program since the last sample (an empty
                # command line is a process in the middle of exec or exit: keep what we have)
                fresh = self._new(pid, comm, now)
                if fresh is None:
                    continue
                if st is not None:
                    fresh.first_seen_s = st.first_seen_s
                st = self.procs[pid] = fresh
            if comm not in st.comms:
                st.comms.append(comm)
            st.comm = comm
            if st.role in ("forked_child", "main") and comm == "pt_data_worker":
                st.role = "dataloader_worker"
            elif st.role == "forked_child" and _is_mp_manager(pid):
                st.role = "manager"
            st.samples += 1
            st.last_seen_s = now
            st.peak_rss = max(st.peak_rss, mem["rss"])
            st.peak_pss = max(st.peak_pss, mem.get("pss", 0))
            st.peak_uss = max(st.peak_uss, mem["uss"])
            st.peak_anon = max(st.peak_anon, mem.get("anon", 0))
            if st.first_uss is None:
                st.first_uss, st.first_rss = mem["uss"], mem["rss"]
            st.last_uss, st.last_rss = mem["uss"], mem["rss"]

    @staticmethod
    def _argv(pid: int) -> list[str] | None:
        raw = _read(f"/proc/{pid}/cmdline")
        if raw is None:
            return None
        return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]

    def _new(self, pid: int, comm: str, now: float) -> ProcStats | None:
        argv = self._argv(pid)
        if argv is None:
            return None
        cmdline = " ".join(argv)
        ppid = _ppid(pid)
        parent_argv = (self._argv(ppid) if ppid else None) or []
        return ProcStats(
            pid=pid,
            ppid=ppid,
            comm=comm,
            cmdline=cmdline,
            role=self._role(pid, comm, argv, parent_argv),
            first_seen_s=now,
            comms=[comm],
            argv=argv,
        )

    @staticmethod
    def _role(pid: int, comm: str, argv: list[str], parent_argv: list[str]) -> str:
        joined = " ".join(argv)
        if comm == "pt_data_worker":
            return "dataloader_worker"
        if argv and os.path.basename(argv[0]) in ("bash", "sh", "dash"):
            return "shell"
        if "torch.distributed.run" in joined or (len(argv) > 1 and os.path.basename(argv[1]) == "torchrun"):
            return "launcher"
        if "multiprocessing.resource_tracker" in joined:
            return "resource_tracker"
        if argv == parent_argv:
            return "forked_child"  # same command line as its parent: forked, not exec'ed
        rank = _environ_var(pid, "RANK")
        if rank is not None:
            return f"rank {rank}"
        return "main"
