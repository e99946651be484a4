"""The kernel files the agent reads outside a process's memory: /proc/PID/cgroup, mountinfo, boot_id and
/dev/kmsg records, parsed from real captures (tests/fixtures) and from hostile text."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.paths import HostPaths
from oomwatch.procfs import ProcessGone
from oomwatch.procfs.bootid import parse_boot_id, read_boot_id
from oomwatch.procfs.cgroup import CgroupMembership, parse_proc_cgroup, read_proc_cgroup, read_proc_cgroup_text
from oomwatch.procfs.kmsg import parse_kmsg_record, unescape
from oomwatch.procfs.mountinfo import MountEntry, parse_mountinfo, read_mountinfo

FIXTURES = Path(__file__).parents[1] / "fixtures"
PROC = FIXTURES / "proc" / "python-sleep" / "proc"
PATHS = HostPaths(proc=PROC)


def test_proc_cgroup_captured_hybrid_host():
    lines = parse_proc_cgroup((PROC / "8595" / "cgroup").read_text())
    assert len(lines) == 10
    assert lines[0] == CgroupMembership(9, frozenset({"name=systemd"}), "/")
    memory = next(m for m in lines if "memory" in m.controllers)
    assert memory == CgroupMembership(
        4, frozenset({"memory"}), "/process_api/4b1437077037b65564293ec702d547b2/oomwatch-fixture-7894"
    )
    assert lines[-1] == CgroupMembership(0, frozenset(), "/")  # the v2 line
    assert read_proc_cgroup(PATHS, 8595) == lines


def test_proc_cgroup_hostile():
    assert parse_proc_cgroup("") == []
    assert parse_proc_cgroup("no colons\n1:cpu\n") == []
    assert parse_proc_cgroup("x:memory:/a\n") == [CgroupMembership(None, frozenset({"memory"}), "/a")]
    # the path keeps its own colons, and an empty controller list is the v2 line
    assert parse_proc_cgroup("0::/a:b/c\n") == [CgroupMembership(0, frozenset(), "/a:b/c")]
    assert parse_proc_cgroup("3:cpu,,cpuacct:/\n")[0].controllers == frozenset({"cpu", "cpuacct"})


def test_proc_cgroup_gone_and_undecodable(tmp_path: Path):
    with pytest.raises(ProcessGone):
        read_proc_cgroup(PATHS, 999999)
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_bytes(b"0::/job\xff\n")
    with pytest.raises(UnicodeDecodeError):
        read_proc_cgroup_text(HostPaths(proc=tmp_path), 7)
    assert read_proc_cgroup(HostPaths(proc=tmp_path), 7, errors="replace")[0].path == "/job\ufffd"


def test_mountinfo_captured():
    entries = parse_mountinfo((PROC / "self" / "mountinfo").read_text())
    assert entries[0] == MountEntry("/", "/proc", "proc", ("rw",))
    memory = [e for e in entries if e.fstype == "cgroup" and "memory" in e.super_options]
    assert [e.mount_point for e in memory] == ["/sys/fs/cgroup/memory"]
    assert read_mountinfo(PATHS) == entries


def test_mountinfo_escapes_and_garbage():
    text = (
        "36 35 0:31 /a\\040b /mnt/with\\011tab\\134x rw shared:1 - ext4 /dev/sda1 rw,errors=remount-ro\n"
        "garbled line without the separator\n"
        "1 2 3 - short\n"
        "1 2 3 4 - proc proc\n"  # too few fields on the left
    )
    assert parse_mountinfo(text) == [MountEntry("/a b", "/mnt/with\ttab\\x", "ext4", ("rw", "errors=remount-ro"))]
    assert parse_mountinfo("") == []


def test_boot_id(tmp_path: Path):
    assert parse_boot_id("6c9a0d2e-5b1f-4c7e-9a43-2f0e8d1b7c55\n") == "6c9a0d2e-5b1f-4c7e-9a43-2f0e8d1b7c55"
    assert read_boot_id(HostPaths(proc=tmp_path)) == ""  # unreadable: no id, no error
    where = tmp_path / "sys" / "kernel" / "random"
    where.mkdir(parents=True)
    (where / "boot_id").write_text("6c9a0d2e-5b1f-4c7e-9a43-2f0e8d1b7c55\n")
    assert read_boot_id(HostPaths(proc=tmp_path)) == "6c9a0d2e-5b1f-4c7e-9a43-2f0e8d1b7c55"


def test_kmsg_records_captured():
    raw = (FIXTURES / "captured" / "memcg_dataloader_worker" / "kmsg.txt").read_bytes().splitlines()
    records = [parse_kmsg_record(line) for line in raw]
    assert all(r is not None for r in records)
    first = records[0]
    assert first is not None
    assert (first.prefix, first.seq, first.usec, first.flags, first.level) == (4, 1721, 776937606, "-", 4)
    assert first.text.startswith("pt_data_worker invoked oom-killer: gfp_mask=0xcc0")
    assert first.dmesg_line().startswith("[  776.937606] pt_data_worker invoked oom-killer")


def test_kmsg_hostile():
    assert parse_kmsg_record(b"") is None
    assert parse_kmsg_record(b"no semicolon") is None
    assert parse_kmsg_record(b"6,1;too few fields") is None
    assert parse_kmsg_record(b"6,x,3,-;not a number") is None
    rec = parse_kmsg_record(b"6,7,8;text\n SUBSYSTEM=devices\n")
    assert rec is not None and (rec.flags, rec.text) == ("", "text")  # dictionary lines are not the message
    assert unescape("a\\x09b\\x5c\\xzz") == "a\tb\\\\xzz"
