"""Without root the sampler degrades and says what it cannot read; under hidepid it sees only its own
processes and says why. Privileges are dropped in a forked child (uid/gid 65534, no groups), with
the modules imported before the fork."""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import tempfile
from pathlib import Path

from oomwatch.agent.sample.sampler import Sampler
from oomwatch.paths import HostPaths
from tests.agent.proctree import rank_tree
from tests.conftest import skip_or_fail

NOBODY = 65534


def _need_root() -> None:
    if os.geteuid() != 0:
        skip_or_fail("needs root (to drop to an unprivileged user)")


def _as_nobody(paths: HostPaths) -> dict:
    """Two ticks as an unprivileged user; what they saw, through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            sampler = Sampler(paths, pss_budget=1.0, gpu=False)
            sampler.tick()
            tick = sampler.tick()
            sampler.close()
            out = {
                "procs": {p.pid: (p.role, p.job, p.rss, p.uss) for p in tick.processes},
                "notices": list(sampler.notices.all),
                "ok": all(c.ok for c in tick.collectors),
                "errors": [c.error for c in tick.collectors if not c.ok],
                "me": os.getpid(),
            }
            os.write(w, pickle.dumps(out))
        except BaseException as exc:  # report anything to the parent, never return into pytest
            os.write(w, pickle.dumps({"error": repr(exc)}))
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    result = pickle.loads(b"".join(chunks))
    assert "error" not in result, result
    return result


def test_without_root_it_degrades_and_says_so():
    _need_root()
    with rank_tree(size_mib=16, workers=2) as tree:
        seen = _as_nobody(HostPaths())
    assert seen["ok"], seen["errors"]
    procs = seen["procs"]
    # status is world-readable: RSS of root's processes is still known
    assert procs[tree.rank][2] > 0
    # environ is not: RANK is unknown, but the workers' names still give them away
    for w in tree.workers:
        assert procs[w][0] == "dataloader_worker" and procs[w][3] is None  # no USS without ptrace rights
    assert procs[tree.rank][0] == "rank"  # the parent of workers is the training process, RANK or not
    text = "\n".join(seen["notices"])
    assert "environ: permission denied" in text and "smaps_rollup: permission denied" in text


def test_under_hidepid_it_sees_only_its_own_and_says_why():
    _need_root()
    base = Path(tempfile.mkdtemp(prefix="oomwatch-hidepid-"))  # pytest's tmp_path is root-only (0700)
    base.chmod(0o755)
    mnt = base / "proc"
    mnt.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "proc", "-o", "hidepid=2", "proc", str(mnt)], capture_output=True)
        if mounted.returncode != 0:
            skip_or_fail(f"cannot mount proc with hidepid=2 here: {mounted.stderr!r}")
        try:
            seen = _as_nobody(HostPaths(proc=mnt))
        finally:
            subprocess.run(["umount", str(mnt)], check=True, timeout=30)
    finally:
        with contextlib.suppress(OSError):
            mnt.rmdir()
            base.rmdir()
    assert seen["ok"], seen["errors"]
    assert set(seen["procs"]) == {seen["me"]}
    assert any("hidepid=invisible" in n or "hidepid=2" in n for n in seen["notices"]), seen["notices"]
