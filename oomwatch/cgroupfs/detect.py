"""Find the memory cgroup of a process: ``/proc/self/mountinfo`` (Documentation/filesystems/proc.rst,
"mountinfo") says where the hierarchies are mounted, ``/proc/PID/cgroup`` (man 7 cgroups) says
where the process sits in each (both parsed in ``procfs.mountinfo`` and ``procfs.cgroup``).

Samples::

    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
    4:memory:/process_api/4b1437077037b65564293ec702d547b2

Hosts are v1, v2, or hybrid (both mounted; the memory controller on one of them).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from oomwatch.paths import HostPaths
from oomwatch.procfs import mountinfo
from oomwatch.procfs.cgroup import CgroupMembership, read_proc_cgroup

HOST_CGROUP_ROOT = PurePosixPath("/sys/fs/cgroup")


@dataclass(frozen=True)
class CgroupMount:
    version: int  # 1 or 2
    root: str  # the path inside the hierarchy that is mounted (field 4; "/" unless in a namespace)
    mount_point: str
    controllers: frozenset[str]  # v1: from the super options; v2: empty (see cgroup.controllers)


@dataclass(frozen=True)
class MemoryCgroup:
    version: int
    directory: Path  # holds memory.* files (v1 memory hierarchy, or v2 with the memory controller)
    v2_directory: Path | None  # the v2 directory (memory.pressure lives there, even on hybrid hosts)


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup hierarchies mounted, from a mountinfo text."""
    mounts = []
    for m in mountinfo.parse_mountinfo(text):
        if m.fstype == "cgroup2":
            mounts.append(CgroupMount(2, m.root, m.mount_point, frozenset()))
        elif m.fstype == "cgroup":
            mounts.append(CgroupMount(1, m.root, m.mount_point, frozenset(m.super_options)))
    return mounts


def memory_mounts(mounts: list[CgroupMount]) -> tuple[CgroupMount | None, CgroupMount | None]:
    """(the v1 memory hierarchy mount, the v2 mount); either may be None, both exist on hybrid hosts."""
    v1 = next((m for m in mounts if m.version == 1 and "memory" in m.controllers), None)
    v2 = next((m for m in mounts if m.version == 2), None)
    return v1, v2


def _mount_dir(paths: HostPaths, mount: CgroupMount) -> Path:
    mount_point = PurePosixPath(mount.mount_point)
    if mount_point.is_relative_to(HOST_CGROUP_ROOT):
        return paths.cgroup / mount_point.relative_to(HOST_CGROUP_ROOT)
    return Path(mount_point)


def _ups(path: str) -> int:
    """How many leading ``..`` a path has ("/../../x": 2): how far above our cgroup namespace it is."""
    n = 0
    for part in PurePosixPath(path).parts[1:]:
        if part != "..":
            break
        n += 1
    return n


NAMESPACE_SEARCH_LIMIT = 50_000  # cgroup directories looked at, at most, to find our own
_namespace_roots: dict[tuple[str, str, str], str | None] = {}


def namespace_root(paths: HostPaths, mount: CgroupMount, pid: int | None = None) -> str | None:
    """Our cgroup namespace's root as a path of the hierarchy, when we are in a private cgroup
    namespace (a container on a cgroup v2 host, say) and the hierarchy mounted here reaches above it:
    mountinfo then gives the mount's root as "/../..", and /proc/PID/cgroup gives other containers'
    cgroups as "/../<pod>/<container>", relative to a root it does not name. Found by looking, at that
    depth under the mount, for the directory whose cgroup.procs holds our pid (once; cached)."""
    depth = _ups(mount.root)
    if depth == 0:
        return None
    pid = os.getpid() if pid is None else pid
    key = (str(paths.cgroup), mount.mount_point, mount.root)
    if key in _namespace_roots:
        return _namespace_roots[key]
    found: str | None = None
    level: list[tuple[Path, tuple[str, ...]]] = [(_mount_dir(paths, mount), ())]
    seen = 0
    for _ in range(depth):
        below = []
        for directory, names in level:
            with contextlib.suppress(OSError):
                for entry in os.scandir(directory):
                    if entry.is_dir(follow_symlinks=False):
                        below.append((Path(entry.path), (*names, entry.name)))
        seen += len(below)
        level = below
        if seen > NAMESPACE_SEARCH_LIMIT:
            level = []
            break
    mine = str(pid)
    for directory, names in level:
        with contextlib.suppress(OSError):
            if mine in (directory / "cgroup.procs").read_text().split():
                found = "/" + "/".join(names)
                break
    _namespace_roots[key] = found
    return found


def to_hierarchy(path: str, ns_root: str | None) -> str:
    """A path as /proc/PID/cgroup or mountinfo gives it, made a path of the whole hierarchy (``..``
    resolved against our namespace's root); unchanged when it has no ``..`` or the root is unknown."""
    if ns_root is None or not path.startswith("/.."):
        return path
    return posixpath.normpath(f"{ns_root}/{path}")


def host_dir(paths: HostPaths, mount: CgroupMount, cgroup_path: str) -> Path:
    """The directory for ``cgroup_path`` under ``mount``, rebased onto ``paths.cgroup``."""
    root_path = mount.root
    if root_path.startswith("/..") or cgroup_path.startswith("/.."):
        ns = namespace_root(paths, mount)
        root_path, cgroup_path = to_hierarchy(root_path, ns), to_hierarchy(cgroup_path, ns)
    rel = PurePosixPath(cgroup_path)
    root = PurePosixPath(root_path)
    if root != PurePosixPath("/") and rel.is_relative_to(root):
        rel = rel.relative_to(root)
    return _mount_dir(paths, mount).joinpath(*[p for p in rel.parts if p != "/"])


def memory_cgroup_of(
    paths: HostPaths,
    mounts: list[CgroupMount],
    membership: list[CgroupMembership],
    v2_controllers: frozenset[str],
) -> MemoryCgroup | None:
    """Pure: where a process's memory files are. ``v2_controllers`` is the v2 root's cgroup.controllers."""
    v1_mount, v2_mount = memory_mounts(mounts)
    v1_line = next((m for m in membership if "memory" in m.controllers), None)
    v2_line = next((m for m in membership if m.hierarchy_id == 0 and not m.controllers), None)
    v2_dir = host_dir(paths, v2_mount, v2_line.path) if v2_mount and v2_line else None
    if v1_mount and v1_line:
        return MemoryCgroup(1, host_dir(paths, v1_mount, v1_line.path), v2_dir)
    if v2_dir is not None and "memory" in v2_controllers:
        return MemoryCgroup(2, v2_dir, v2_dir)
    return None


def find_memory_cgroup(paths: HostPaths, pid: int) -> MemoryCgroup | None:
    """Read mountinfo, /proc/PID/cgroup and the v2 root's cgroup.controllers; raises ProcessGone."""
    mounts = parse_mountinfo(mountinfo.read_mountinfo_text(paths))
    membership = read_proc_cgroup(paths, pid)
    _, v2_mount = memory_mounts(mounts)
    controllers: frozenset[str] = frozenset()
    if v2_mount is not None:
        try:
            text = (host_dir(paths, v2_mount, "/") / "cgroup.controllers").read_text()
            controllers = frozenset(text.split())
        except OSError:
            pass
    return memory_cgroup_of(paths, mounts, membership, controllers)
