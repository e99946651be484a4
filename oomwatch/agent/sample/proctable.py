"""The live process table: one kept file descriptor on ``/proc/PID/status`` per process.

Each tick lists ``/proc``, re-reads every known process's status with ``os.pread`` on its kept
descriptor (no open/close, no path walk) and opens new ones. A kept descriptor belongs to the
process it was opened for: once that process is gone, reading it fails with ``ESRCH``, so a PID
reused by a new process is never read as the old one (it is dropped and tracked afresh).

What is read once per process (or again when its name changes, i.e. it exec'd or renamed itself):
``stat`` (start time), ``cmdline``, ``environ`` (only the job-identity keys, see procfs.environ),
``cgroup``. A new process is read again whenever its status changes in its first seconds: a freshly
exec'd one can show an empty cmdline/environ for a moment, a fork read before its exec shows its
parent's command line, and a shell may move itself into a cgroup just after it started. A process
whose peak RSS falls exec'd (a new address space; see ``execed``): it is read as new again.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass

from oomwatch.agent.sample.discovery import cgroup_path
from oomwatch.agent.sample.notices import Notices
from oomwatch.agent.sample.process_roles import ProcInfo
from oomwatch.paths import HostPaths
from oomwatch.procfs import ProcessGone, process_files
from oomwatch.procfs.cgroup import CgroupMembership, parse_proc_cgroup, read_proc_cgroup_text
from oomwatch.procfs.cmdline import read_cmdline
from oomwatch.procfs.environ import read_environ
from oomwatch.procfs.mountinfo import parse_mountinfo, read_mountinfo_text
from oomwatch.procfs.smaps_rollup import SmapsRollup
from oomwatch.procfs.stat import read_stat
from oomwatch.procfs.status import Status, parse_status_bytes

STATUS_READ = 8192  # status is ~1.5 KiB; a larger read costs nothing more
RETRY_EMPTY_FOR = 5.0  # seconds: re-read a new process's cmdline, environ and cgroup this long
GONE_ERRNOS = frozenset({errno.ESRCH, errno.ENOENT})

MEMBERSHIPS_KEPT = 4096  # distinct /proc/PID/cgroup texts remembered (a node has a few cgroups a job)


@dataclass
class Tracked:
    info: ProcInfo
    status: Status
    membership: tuple[CgroupMembership, ...]
    fd: int | None  # None: past the descriptor limit, status is opened each tick
    first_seen: float
    kernel_thread: bool
    smaps: SmapsRollup | None = None
    smaps_at: float | None = None
    smaps_cost: float | None = None
    smaps_time: float | None = None  # wall clock of the last smaps read
    rchar: int | None = None  # /proc/PID/io rchar, read with smaps
    gpu_memory: int | None = None
    raw: bytes = b""  # the last status read: an identical read needs no parsing (idle processes)
    located: bool = False  # whether ``location`` (the memory cgroup, found by the sampler) is set
    location: object = None
    cached: tuple[object, ...] | None = None  # (inputs..., the ProcessSample built from them)


class ProcessTable:
    def __init__(self, paths: HostPaths, notices: Notices) -> None:
        self.paths = paths
        self.notices = notices
        self.procs: dict[int, Tracked] = {}
        # what came, went or changed name/parent/argv since the sampler last looked (old and new
        # ProcInfo both): the sampler re-runs role discovery only when one of them can matter
        self.changes: list[ProcInfo] = []
        self._proc = str(paths.proc)
        self._out_of_fds = False
        self._memberships: dict[str, tuple[CgroupMembership, ...]] = {}  # /proc/PID/cgroup text -> parsed
        self._say_hidepid()

    def _say_hidepid(self) -> None:
        try:
            mountinfo = read_mountinfo_text(self.paths)
        except OSError:
            return
        mode = hidepid(mountinfo, self._proc)
        if mode is not None and os.geteuid() != 0:
            self.notices.say(
                "hidepid",
                f"{self._proc} is mounted with hidepid={mode}: other users' processes are invisible to this "
                "agent (run it as root, or in the group named by the mount's gid= option)",
            )

    def close(self) -> None:
        for t in self.procs.values():
            self._close(t)
        self.procs.clear()

    def _close(self, t: Tracked) -> None:
        if t.fd is not None:
            with contextlib.suppress(OSError):
                os.close(t.fd)
            t.fd = None

    def update(self, now: float) -> None:
        """One tick: drop the gone, re-read the known, add the new."""
        try:
            names = os.listdir(self._proc)
        except OSError as exc:
            raise RuntimeError(f"cannot list {self._proc}: {exc.strerror}") from exc
        seen: set[int] = set()
        for name in names:
            if not name.isdigit():
                continue
            pid = int(name)
            seen.add(pid)
            t = self.procs.get(pid)
            if t is not None:
                if self._refresh(t, now):
                    continue
                self._drop(pid)  # gone (and maybe reused): track the new one afresh
            self._add(pid, now)
        for pid in [p for p in self.procs if p not in seen]:
            self._drop(pid)

    def _drop(self, pid: int) -> None:
        t = self.procs.pop(pid, None)
        if t is not None:
            self._close(t)
            self.changes.append(t.info)

    def _read_status(self, pid: int, fd: int | None) -> bytes:
        if fd is not None:
            return os.pread(fd, STATUS_READ, 0)
        with open(f"{self._proc}/{pid}/status", "rb") as f:
            return f.read(STATUS_READ)

    def _refresh(self, t: Tracked, now: float) -> bool:
        """Re-read a known process; False when it is gone."""
        pid = t.info.pid
        try:
            data = self._read_status(pid, t.fd)
        except OSError:
            return False  # ESRCH on a kept descriptor: gone, whatever the PID now names
        if not data:
            return False
        if data == t.raw:
            return True  # nothing changed, not even a context-switch count
        t.raw = data
        status = parse_status_bytes(data)
        old = t.info
        comm = status.name if status.name is not None else old.comm
        ppid = status.ppid if status.ppid is not None else old.ppid
        before, t.status = t.status, status
        if execed(before, status):
            # a new address space: it exec'd, maybe a program of the same name (python -> python), with a
            # new command line, environment (RANK, the run id) and cgroup: read it as new while it settles
            t.first_seen = now
        young = not t.kernel_thread and now - t.first_seen < RETRY_EMPTY_FOR
        if comm != old.comm or ppid != old.ppid:
            argv, env, cgroup = old.argv, old.env, old.cgroup
            if comm != old.comm:  # exec'd (new argv, environ; a shell may have moved itself to a cgroup
                # first) or renamed itself (pt_data_worker)
                argv, env = self._argv_env(pid, old.argv, old.env)
                cgroup = self._relocate(t, pid, old.cgroup)
            t.info = ProcInfo(pid, ppid, comm, argv, env, cgroup, old.start_time)
            self.changes += (old, t.info)
        elif young:
            # mid-exec (cmdline and environ read empty), or read between a fork and its exec of a
            # program with the same name (`subprocess.Popen([sys.executable, ...])` from Python: the
            # parent's argv, which reads as a forked worker), or moved to its cgroup just after it
            # started (a shell writing itself into cgroup.procs): read them again while it is new
            argv, env = self._argv_env(pid, old.argv, old.env)
            cgroup = self._relocate(t, pid, old.cgroup)
            if argv != old.argv or env != old.env or cgroup != old.cgroup:
                t.info = ProcInfo(pid, ppid, comm, argv, env, cgroup, old.start_time)
                self.changes += (old, t.info)
        return True

    def _relocate(self, t: Tracked, pid: int, cgroup: str | None) -> str | None:
        """Read the process's cgroups again; a new membership is located again by the sampler."""
        membership = self._membership(pid) or t.membership
        if membership == t.membership:
            return cgroup
        t.membership, t.located = membership, False
        return cgroup_path(membership)

    def _argv_env(self, pid: int, argv: tuple[str, ...], env: dict[str, str]) -> tuple[tuple[str, ...], dict[str, str]]:
        with contextlib.suppress(ProcessGone, OSError):
            argv = tuple(read_cmdline(self.paths, pid))
        try:
            env = read_environ(self.paths, pid)
        except PermissionError:
            self.notices.say(
                "environ",
                f"cannot read /proc/{pid}/environ: permission denied (other users' and non-dumpable processes "
                "need root with CAP_SYS_PTRACE); where it is denied, RANK/LOCAL_RANK are unknown and roles come "
                "from the process tree only",
            )
        except (ProcessGone, OSError):
            pass
        return argv, env

    def _open(self, pid: int) -> int | None:
        if self._out_of_fds:
            return None
        try:
            return os.open(f"{self._proc}/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self._out_of_fds = True
                self.notices.say(
                    "fds",
                    "out of file descriptors for kept /proc/PID/status handles (raise LimitNOFILE); "
                    "opening status per tick for the rest",
                )
                return None
            raise

    def _add(self, pid: int, now: float) -> None:
        try:
            fd = self._open(pid)
        except OSError:
            return  # gone already (or hidden)
        try:
            with process_files(pid):
                data = self._read_status(pid, fd)
                stat = read_stat(self.paths, pid)
        except (ProcessGone, OSError):
            if fd is not None:
                os.close(fd)
            return
        status = parse_status_bytes(data)
        ppid = status.ppid if status.ppid is not None else (stat.ppid or 0)
        kernel_thread = pid == 2 or ppid == 2
        argv: tuple[str, ...] = ()
        env: dict[str, str] = {}
        if not kernel_thread:
            argv, env = self._argv_env(pid, (), {})
        membership = self._membership(pid)
        cgroup = cgroup_path(membership)
        comm = status.name if status.name is not None else (stat.comm or "")
        info = ProcInfo(pid, ppid, comm, argv, env, cgroup, stat.starttime)
        self.procs[pid] = Tracked(info, status, membership, fd, now, kernel_thread, raw=data)
        self.changes.append(info)

    def _membership(self, pid: int) -> tuple[CgroupMembership, ...]:
        try:
            text = read_proc_cgroup_text(self.paths, pid, errors="replace")
        except (ProcessGone, OSError):
            return ()
        # the processes of a job share their cgroups: parsed once, and one tuple held for all of them
        found = self._memberships.get(text)
        if found is None:
            if len(self._memberships) >= MEMBERSHIPS_KEPT:
                self._memberships.clear()
            found = self._memberships[text] = tuple(parse_proc_cgroup(text))
        return found


def execed(before: Status, now: Status) -> bool:
    """Whether a process exec'd between two reads of its status: its peak RSS (VmHWM) fell. The peak
    only grows in one address space; a fork starts its own at what it shares with its parent, and an
    exec starts a new one from nothing, so a worker forked from a large trainer that execs a new
    trainer shows it at its next read (a program that outgrows the old peak before then does not)."""
    return before.vm_hwm is not None and now.vm_hwm is not None and now.vm_hwm < before.vm_hwm


def hidepid(mountinfo: str, mount_point: str) -> str | None:
    """The ``hidepid=`` mode of the proc mount at ``mount_point`` (the last one mounted there), or None
    when processes are not hidden (no option, ``0`` or ``off``)."""
    mode = None
    for m in parse_mountinfo(mountinfo):
        if m.fstype != "proc" or m.mount_point != mount_point:
            continue
        mode = None
        for opt in m.super_options:
            if opt.startswith("hidepid="):
                value = opt.split("=", 1)[1]
                mode = None if value in ("0", "off") else value
    return mode
