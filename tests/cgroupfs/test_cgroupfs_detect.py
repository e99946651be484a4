"""Finding a process's memory cgroup from mountinfo and /proc/PID/cgroup (real hybrid-host capture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.cgroupfs.detect import (
    find_memory_cgroup,
    memory_cgroup_of,
    memory_mounts,
    parse_mountinfo,
)
from oomwatch.paths import HostPaths
from oomwatch.procfs import ProcessGone
from oomwatch.procfs.cgroup import parse_proc_cgroup

FIXTURES = Path(__file__).parents[1] / "fixtures"
PROC = FIXTURES / "proc" / "python-sleep" / "proc"
MOUNTINFO = (PROC / "self" / "mountinfo").read_text()
OWN = "/process_api/4b1437077037b65564293ec702d547b2/oomwatch-fixture-7894"

V2_ONLY = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
K8S_POD = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-ab.scope\n"


def test_hybrid_host_captured():
    mounts = parse_mountinfo(MOUNTINFO)
    v1, v2 = memory_mounts(mounts)
    assert v1 is not None and v1.mount_point == "/sys/fs/cgroup/memory" and v1.root == "/"
    assert v2 is not None and v2.mount_point == "/sys/fs/cgroup/unified"
    assert len([m for m in mounts if m.version == 1]) == 9


def test_proc_cgroup_captured():
    lines = parse_proc_cgroup((PROC / "8595" / "cgroup").read_text())
    memory = [m for m in lines if "memory" in m.controllers]
    assert len(memory) == 1 and memory[0].hierarchy_id == 4 and memory[0].path == OWN
    assert any(m.hierarchy_id == 0 and m.path == "/" for m in lines)
    named = [m for m in lines if "name=systemd" in m.controllers]
    assert named and named[0].path == "/"


def test_memory_cgroup_hybrid_prefers_v1_memory():
    paths = HostPaths(cgroup=Path("/host/cg"))
    mounts = parse_mountinfo(MOUNTINFO)
    lines = parse_proc_cgroup((PROC / "8595" / "cgroup").read_text())
    m = memory_cgroup_of(paths, mounts, lines, frozenset({"hugetlb"}))
    assert m is not None and m.version == 1
    assert m.directory == Path("/host/cg/memory" + OWN)
    assert m.v2_directory == Path("/host/cg/unified")


def test_memory_cgroup_v2_only():
    paths = HostPaths(cgroup=Path("/host/cg"))
    m = memory_cgroup_of(paths, parse_mountinfo(V2_ONLY), parse_proc_cgroup(K8S_POD), frozenset({"cpu", "memory"}))
    assert m is not None and m.version == 2
    assert m.directory == Path("/host/cg" + K8S_POD[3:].strip())


def test_v2_without_memory_controller_is_none():
    m = memory_cgroup_of(HostPaths(), parse_mountinfo(V2_ONLY), parse_proc_cgroup(K8S_POD), frozenset({"cpu"}))
    assert m is None


def test_cgroup_namespace_root_is_stripped():
    mountinfo = "35 31 0:32 /process_api/x /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    m = memory_cgroup_of(
        HostPaths(cgroup=Path("/c")),
        parse_mountinfo(mountinfo),
        parse_proc_cgroup("4:memory:/process_api/x/job\n"),
        frozenset(),
    )
    assert m is not None and m.directory == Path("/c/memory/job")


@pytest.mark.parametrize("text", ["", "garbage\n", "1 2 3 - cgroup\n", "a b c d e f - cgroup2\n"])
def test_mountinfo_garbage(text):
    assert memory_mounts(parse_mountinfo(text)) == (None, None)


def test_proc_cgroup_garbage():
    assert parse_proc_cgroup("no colons\nx:memory:/a\n")[0].hierarchy_id is None


def test_find_memory_cgroup_fixture_tree():
    m = find_memory_cgroup(HostPaths(proc=PROC, cgroup=Path("/nowhere")), 8595)
    assert m is not None and m.version == 1 and m.directory == Path("/nowhere/memory" + OWN)


def test_find_memory_cgroup_gone():
    with pytest.raises(ProcessGone):
        find_memory_cgroup(HostPaths(proc=PROC), 999999)


def test_live_self():
    import os

    from oomwatch.cgroupfs import read_cgroup_memory

    m = find_memory_cgroup(HostPaths(), os.getpid())
    if m is None:
        pytest.skip("no memory controller visible on this host")
    mem = read_cgroup_memory(HostPaths(), m.directory, pressure_dir=m.v2_directory)
    assert mem.version == m.version
    assert mem.usage is None or mem.usage > 0  # None: the root cgroup on v2 has no memory.current
