"""The agent in a private cgroup namespace (a container on a cgroup v2 node is put in one): the
hierarchy it sees mounted starts above its namespace ("/../../.." in mountinfo) and other containers'
cgroups read "/../<theirs>" in /proc/PID/cgroup. For real, on the v1 memory hierarchy: `oomwatch top`
runs in a cgroup of its own under `unshare --cgroup`, a training rank runs in a limited sibling
cgroup, and the agent must find that cgroup, name it by its whole path and read its limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from oomwatch.cgroupfs.detect import CgroupMount, namespace_root, to_hierarchy
from oomwatch.paths import HostPaths
from tests.cgroup_util import V1_ROOT, memory_cgroup
from tests.conftest import ROOT, require_root_cgroup, require_tool

MIB = 1 << 20

RANK = """
import os, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
hold = bytearray(24 << 20)
for i in range(0, len(hold), 4096):
    hold[i] = 1
print("ready", flush=True)
time.sleep(120)
"""


def test_paths_relative_to_the_namespace_are_made_whole():
    assert to_hierarchy("/../pod-b/c2", "/kubepods/pod-a/c1") == "/kubepods/pod-a/pod-b/c2"
    assert to_hierarchy("/../../pod-b/c2", "/kubepods/pod-a/c1") == "/kubepods/pod-b/c2"
    assert to_hierarchy("/../../..", "/kubepods/pod-a/c1") == "/"
    assert to_hierarchy("/kubepods/x", "/kubepods/pod-a/c1") == "/kubepods/x"  # no "..": as it is
    assert to_hierarchy("/../x", None) == "/../x"  # the root not found: as it is


def test_the_namespace_root_is_found_by_our_pid(tmp_path: Path):
    tree = tmp_path / "cgroup"
    (tree / "kubepods" / "pod-a" / "c1").mkdir(parents=True)
    (tree / "kubepods" / "pod-b" / "c2").mkdir(parents=True)
    (tree / "kubepods" / "pod-a" / "c1" / "cgroup.procs").write_text("1\n4242\n")
    (tree / "kubepods" / "pod-b" / "c2" / "cgroup.procs").write_text("77\n")
    paths = HostPaths(cgroup=tree)
    mount = CgroupMount(2, "/../../..", "/sys/fs/cgroup", frozenset())
    assert namespace_root(paths, mount, pid=4242) == "/kubepods/pod-a/c1"
    other = CgroupMount(2, "/../../..", "/sys/fs/cgroup/other", frozenset())
    assert namespace_root(paths, other, pid=999) is None  # nowhere: unknown, and said by the caller
    assert namespace_root(paths, CgroupMount(2, "/", "/sys/fs/cgroup", frozenset())) is None  # no namespace


def test_top_in_a_private_cgroup_namespace_reads_a_sibling_containers_cgroup(tmp_path: Path):
    require_root_cgroup()
    unshare = require_tool("unshare", "Debian: util-linux")
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = dict(os.environ, PYTHONPATH=str(ROOT), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
               TORCHELASTIC_RUN_ID="ns-test")  # fmt: skip
    with memory_cgroup(None, name="oomwatch-ns-agent") as mine, memory_cgroup(96 * MIB, name="oomwatch-ns-job") as job:
        rank = subprocess.Popen([sys.executable, str(script), str(job)], stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert rank.stdout is not None and rank.stdout.readline().strip() == "ready"

            def enter() -> None:  # the child, before it execs unshare: in a cgroup of its own
                (mine / "cgroup.procs").write_text(str(os.getpid()))

            done = subprocess.run(
                [unshare, "--cgroup", sys.executable, "-m", "oomwatch", "top", "--once", "--interval", "0.3",
                 "--format", "json"],
                capture_output=True, text=True, timeout=120, preexec_fn=enter, env=dict(os.environ, PYTHONPATH=str(ROOT)),
            )  # fmt: skip
        finally:
            rank.kill()
            rank.wait()
            if rank.stdout:
                rank.stdout.close()
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (entry,) = [j for j in doc["jobs"] if j["job"] == "ns-test"]
    whole = "/" + str(job.relative_to(V1_ROOT))
    assert [c["path"] for c in entry["cgroups"]] == [whole], entry["cgroups"]
    (cg,) = entry["cgroups"]
    assert cg["limit_bytes"] == 96 * MIB and cg["usage_bytes"] >= 24 * MIB, cg
