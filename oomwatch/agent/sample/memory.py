"""Node and cgroup memory, read each tick: thin reads through procfs/cgroupfs, missing files said once.

The cgroups read are the memory cgroups of training-job processes (one read per distinct cgroup per
tick). Besides the cgroup's own limit, the *effective* limit is the smallest of it and its
ancestors' (a container without a limit inside a pod with one is bounded by the pod's).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from oomwatch.agent.sample.notices import Notices
from oomwatch.agent.tick import CgroupSample, NodeSample
from oomwatch.cgroupfs.detect import (
    CgroupMount,
    MemoryCgroup,
    host_dir,
    memory_cgroup_of,
    memory_mounts,
    namespace_root,
    parse_mountinfo,
    to_hierarchy,
)
from oomwatch.cgroupfs.files import parse_limit, read_optional
from oomwatch.cgroupfs.memory import read_cgroup_memory
from oomwatch.paths import HostPaths
from oomwatch.procfs.cgroup import CgroupMembership
from oomwatch.procfs.meminfo import read_meminfo
from oomwatch.procfs.mountinfo import read_mountinfo_text
from oomwatch.procfs.pressure import read_memory_pressure
from oomwatch.procfs.vmstat import oom_kill, read_vmstat

LOCATED_KEPT = 4096  # distinct memberships remembered (a node has a few cgroups a job)


def collect_node(paths: HostPaths, notices: Notices) -> NodeSample:
    meminfo = read_meminfo(paths)
    vmstat = read_vmstat(paths)
    pressure = read_memory_pressure(paths)
    kills = oom_kill(vmstat)
    if pressure is None:
        notices.say(
            "node-psi", f"no {paths.proc}/pressure/memory (kernel without PSI, or booted with psi=0): no node pressure"
        )
    if kills is None:
        notices.say("node-oom-kill", f"no oom_kill in {paths.proc}/vmstat (Linux < 4.13): no node OOM-kill count")
    return NodeSample(
        mem_total=meminfo.get("MemTotal"),
        mem_available=meminfo.get("MemAvailable"),
        swap_total=meminfo.get("SwapTotal"),
        swap_free=meminfo.get("SwapFree"),
        oom_kills=kills,
        pressure=pressure,
    )


class CgroupCollector:
    def __init__(self, paths: HostPaths, notices: Notices) -> None:
        self.paths = paths
        self.notices = notices
        self.mounts: list[CgroupMount] = []
        self.v2_controllers: frozenset[str] = frozenset()
        # locate's answers by membership: the processes of a job share a cgroup, and the answer is a
        # pure function of the membership and the mounts (forgotten on reload)
        self._located: dict[tuple[CgroupMembership, ...], tuple[str, MemoryCgroup] | None] = {}
        self.reload()

    def reload(self) -> None:
        """Re-read where the hierarchies are mounted (at start and on SIGHUP)."""
        self._located = {}
        try:
            text = read_mountinfo_text(self.paths)
        except OSError:
            text = ""
        self.mounts = parse_mountinfo(text)
        v1, v2 = memory_mounts(self.mounts)
        self.v2_controllers = frozenset()
        if v2 is not None:
            base = self._base(v2)
            self.v2_controllers = frozenset((read_optional(base / "cgroup.controllers") or "").split())
        if v1 is None and "memory" not in self.v2_controllers:
            self.notices.say("no-memcg", "no cgroup memory controller is mounted (v1 or v2): no cgroup figures")

    def _base(self, mount: CgroupMount) -> Path:
        return host_dir(self.paths, mount, mount.root)

    def locate(self, membership: Iterable[CgroupMembership]) -> tuple[str, MemoryCgroup] | None:
        """(the cgroup path as /proc/PID/cgroup names it, where its memory files are)."""
        key = tuple(membership)
        if key in self._located:
            return self._located[key]
        if len(self._located) >= LOCATED_KEPT:
            self._located.clear()
        found = self._located[key] = self._locate(list(key))
        return found

    def _locate(self, lines: list[CgroupMembership]) -> tuple[str, MemoryCgroup] | None:
        where = memory_cgroup_of(self.paths, self.mounts, lines, self.v2_controllers)
        if where is None:
            return None
        if where.version == 1:
            line = next((m for m in lines if "memory" in m.controllers), None)
        else:
            line = next((m for m in lines if m.hierarchy_id == 0 and not m.controllers), None)
        path = line.path if line else "/"
        mount = memory_mounts(self.mounts)[0 if where.version == 1 else 1]
        if path.startswith("/..") and mount is not None:  # seen from a private cgroup namespace: name it whole
            path = to_hierarchy(path, namespace_root(self.paths, mount))
        return path, where

    def collect(self, groups: dict[str, tuple[MemoryCgroup, set[str]]]) -> tuple[CgroupSample, ...]:
        """``groups``: cgroup path → (where its files are, the jobs with processes in it)."""
        out = []
        for path, (where, jobs) in sorted(groups.items()):
            mem = read_cgroup_memory(self.paths, where.directory, where.v2_directory)
            if mem.version is None:
                continue  # the cgroup went away between the process read and now
            self._say_missing(mem.version, mem.peak, mem.oom_kill, mem.pressure is None)
            out.append(
                CgroupSample(
                    path=path,
                    version=mem.version,
                    usage=mem.usage,
                    limit=mem.limit,
                    effective_limit=self._effective_limit(where, mem.limit),
                    peak=mem.peak,
                    anon=mem.anon,
                    file=mem.file,
                    shmem=mem.shmem,
                    swap=mem.swap,
                    oom_kills=mem.oom_kill,
                    pressure=mem.pressure,
                    jobs=tuple(sorted(jobs)),
                )
            )
        return tuple(out)

    def _effective_limit(self, where: MemoryCgroup, own: int | None) -> int | None:
        name = "memory.limit_in_bytes" if where.version == 1 else "memory.max"
        best = own
        d = where.directory.parent
        while d != d.parent and d.is_relative_to(self.paths.cgroup):
            text = read_optional(d / name)
            if text is None:
                break  # above the hierarchy's root (the root itself has no limit file in v2)
            limit = parse_limit(text)
            if limit is not None and (best is None or limit < best):
                best = limit
            d = d.parent
        return best

    def _say_missing(self, version: int, peak: int | None, kills: int | None, no_psi: bool) -> None:
        if peak is None:
            what = "memory.peak (Linux < 5.19)" if version == 2 else "memory.max_usage_in_bytes"
            self.notices.say(f"cg-peak-{version}", f"cgroup v{version} without {what}: no cgroup peak")
        if kills is None:
            what = "oom_kill in memory.events" if version == 2 else "oom_kill in memory.oom_control (Linux < 4.13)"
            self.notices.say(f"cg-oom-{version}", f"cgroup v{version} without {what}: no cgroup OOM-kill count")
        if no_psi:
            self.notices.say(
                "cg-psi",
                "no memory.pressure for the jobs' cgroups (cgroup v1 without a v2 mount, or no PSI): "
                "no cgroup pressure",
            )
