"""cgroup v1/v2 memory parsers and readers on real v1 captures and v2 files written from the kernel docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.cgroupfs import read_cgroup_memory
from oomwatch.cgroupfs.files import parse_flat_keyed, parse_limit, parse_value
from oomwatch.cgroupfs.v1 import parse_oom_control, read_v1_memory
from oomwatch.cgroupfs.v2 import read_v2_memory
from oomwatch.paths import HostPaths

CGROUP = Path(__file__).parents[1] / "fixtures" / "cgroup"
PATHS = HostPaths(cgroup=CGROUP)


@pytest.mark.parametrize(
    ("text", "value"),
    [("9223372036854771712\n", None), ("9223372036854710272\n", None), ("max\n", None), ("67108864\n", 67108864)],
)
def test_limit(text, value):
    assert parse_limit(text) == value


@pytest.mark.parametrize("text", [None, "", "\n", "12abc", "-", "max max"])
def test_value_garbage_is_none(text):
    assert parse_value(text) is None


def test_flat_keyed_skips_garbage():
    assert parse_flat_keyed("a 1\nb x\n\nc\nd 2 3\ne 4") == {"a": 1, "e": 4}
    assert parse_flat_keyed(None) == {}


def test_v1_captured():
    m = read_v1_memory(CGROUP / "v1-sleep-64m")
    assert m.limit == 64 << 20
    assert m.usage == 28487680
    assert m.max_usage == 28581888
    assert m.failcnt == 0
    assert m.stat["rss"] == 28057600 and m.stat["total_rss"] == 28057600
    assert m.stat["hierarchical_memsw_limit"] == 9223372036854771712
    assert m.oom_control is not None
    assert (m.oom_control.oom_kill_disable, m.oom_control.under_oom, m.oom_control.oom_kill) == (False, False, 0)


def test_v1_oom_control_old_kernel():
    o = parse_oom_control("oom_kill_disable 0\nunder_oom 1\n")
    assert o.under_oom is True and o.oom_kill is None


def test_v2_docs():
    m = read_v2_memory(CGROUP / "v2-docs")
    assert (m.current, m.max, m.peak, m.swap_current) == (536870912, 1073741824, 805306368, 4096)
    assert m.stat["anon"] == 402653184 and m.stat["shmem"] == 67108864
    assert m.events == {"low": 0, "high": 0, "max": 12, "oom": 2, "oom_kill": 2, "oom_group_kill": 0}


def test_v2_old_kernel_unlimited():
    m = read_v2_memory(CGROUP / "v2-docs" / "unlimited-old-kernel")
    assert m.max is None and m.peak is None and m.swap_current is None
    assert m.stat == {} and "oom_group_kill" not in m.events


def test_cgroup_memory_v1():
    m = read_cgroup_memory(PATHS, Path("v1-sleep-64m"), pressure_dir=Path("v2-unified-root"))
    assert m.version == 1
    assert (m.usage, m.limit, m.peak) == (28487680, 64 << 20, 28581888)
    assert (m.anon, m.file, m.shmem, m.swap, m.oom_kill) == (28057600, 0, 0, 0, 0)
    assert m.pressure is not None and m.pressure.full is not None
    assert m.pressure.full.total_us == 3843339


def test_cgroup_memory_v2():
    m = read_cgroup_memory(PATHS, Path("v2-docs"))
    assert m.version == 2
    assert (m.usage, m.limit, m.peak, m.anon, m.file, m.shmem, m.swap, m.oom_kill) == (
        536870912,
        1073741824,
        805306368,
        402653184,
        125829120,
        67108864,
        4096,
        2,
    )
    assert m.pressure is not None and m.pressure.some is not None and m.pressure.some.avg10 == 0.0


def test_cgroup_memory_missing_everything_is_none(tmp_path):
    m = read_cgroup_memory(HostPaths(cgroup=tmp_path), Path("gone"))
    assert m.version is None and m.usage is None and m.pressure is None


def test_cgroup_memory_v1_no_psi():
    assert read_cgroup_memory(PATHS, Path("v1-sleep-64m")).pressure is None
