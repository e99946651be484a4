"""The job's own output, when it goes to files: what a training job prints (``keep_in_memory=True``,
a ``Manager()``, ``torch.load``, its tracebacks) tells causes apart that memory samples alone
cannot, so an incident reads it too.

A process's standard output and error are ``/proc/PID/fd/1`` and ``fd/2``; when one is a regular
file (``nohup python train.py > train.log``, Slurm's ``slurm-%j.out``, torchrun's ``--log-dir``),
its start and its end are read through that link (it works for a deleted file, and needs no access
to the file's directory). When one is a pipe, the process reading it (``| tee train.log``, a logger,
slurmstepd, a container shim: the writer's parent or a sibling) is found by the pipe's inode, and
the regular files it writes are the job's output. Terminals and sockets are skipped: there is
nothing to re-read. Each file is read once per incident even when many processes share it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Sized for the incident's one second: the agent scans with Python's re (~1.3 MB/s over a training
# log's lines, measured), so 320 KiB costs ~0.25 s.
HEAD = 64 << 10  # the start: the configuration and the dataset loading are printed there
TAIL = 256 << 10  # the end: what happened before the kill
MAX_FILES = 4
MAX_FDS = 256  # descriptors looked at in a pipe's candidate reader
MAX_LOGS_OF_A_READER = 4  # a reader writing more files than this is no logger (tee writes one or two)


@dataclass(frozen=True)
class JobOutput:
    path: str  # as the process's fd link names it (" (deleted)" when removed)
    pid: int  # whose fd it was read through
    size: int
    data: bytes  # whole lines: the start and the end, or the whole file when small

    @property
    def partial(self) -> bool:
        return self.size > len(self.data)


def _read(link: Path, size: int) -> bytes:
    with open(link, "rb") as f:
        if size <= HEAD + TAIL:
            return f.read(HEAD + TAIL)
        head = f.read(HEAD)
        f.seek(size - TAIL)
        tail = f.read(TAIL)
    head = head[: head.rfind(b"\n") + 1]  # whole lines only
    tail = tail[tail.find(b"\n") + 1 :]
    return head + tail


@dataclass(frozen=True)
class OutputFile:
    """Where a job's output goes, found while it runs: a job is often gone by the time its kill is
    handled (torchrun ends the other ranks and exits within a fraction of a second)."""

    path: str  # as the fd link names it (" (deleted)" when removed)
    pid: int
    fd: int
    dev: int
    ino: int


def _regular(proc: Path, pid: int, fd: int) -> OutputFile | None:
    link = proc / str(pid) / "fd" / str(fd)
    try:
        st = os.stat(link)  # the file itself (the link is followed)
        if not stat.S_ISREG(st.st_mode):
            return None
        return OutputFile(os.readlink(link), pid, fd, st.st_dev, st.st_ino)
    except OSError:
        return None  # gone, or not ours to read


def _writes(proc: Path, pid: int, fd: int) -> bool:
    """Whether ``fd`` of ``pid`` was opened for writing (its fdinfo flags: O_WRONLY or O_RDWR)."""
    try:
        text = (proc / str(pid) / "fdinfo" / str(fd)).read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags:"):
            try:
                return int(line.split()[1], 8) & 0o3 != 0
            except (IndexError, ValueError):
                return False
    return False


def _fds(proc: Path, pid: int) -> list[tuple[int, str]]:
    try:
        names = os.listdir(proc / str(pid) / "fd")
    except OSError:
        return []
    out = []
    for name in names[:MAX_FDS]:
        try:
            out.append((int(name), os.readlink(proc / str(pid) / "fd" / name)))
        except (OSError, ValueError):
            continue
    return out


def pipe_readers_files(
    proc: Path, pid: int, fd: int, candidates: Iterable[int], ancestors: Iterable[int] = ()
) -> list[OutputFile]:
    """The regular files written by the process among ``candidates`` that reads the pipe ``pid``'s
    ``fd`` writes to (``python train.py | tee train.log``: tee's train.log, and its stdout if a file).
    From a reader among ``ancestors`` (slurmstepd, a Python wrapper), only files it opened itself
    (descriptors 3 and up): its own stdout is its caller's, not the job's log."""
    try:
        pipe = os.readlink(proc / str(pid) / "fd" / str(fd))
    except OSError:
        return []
    if not pipe.startswith("pipe:"):
        return []
    above = set(ancestors)
    out: list[OutputFile] = []
    for reader in candidates:
        if reader == pid:
            continue
        fds = _fds(proc, reader)
        if not any(link == pipe and not _writes(proc, reader, n) for n, link in fds):
            continue
        # a log on disk (not a deleted temporary file), from a program that writes few: a logger, not
        # a shell or a test harness that happens to hold the pipe's other end
        written = [n for n, link in fds if n >= 1 and link.startswith("/") and not link.endswith(" (deleted)")
                   and _writes(proc, reader, n)]  # fmt: skip
        found = [f for f in (_regular(proc, reader, n) for n in written) if f is not None]
        if reader in above and not _passes_through(proc, reader):
            # a program that started the job (slurmstepd, a Python wrapper, a test harness): only a file it
            # opened itself for the job's output — not its own stdout/stderr, nor a saved copy of them
            files = [(f.dev, f.ino) for f in found]
            own = {(f.dev, f.ino) for f in found if f.fd in (1, 2)}
            found = [f for f in found if f.fd >= 3 and (f.dev, f.ino) not in own and files.count((f.dev, f.ino)) == 1]
        if len(found) > MAX_LOGS_OF_A_READER:
            continue
        out.extend(found)
    return out


def _passes_through(proc: Path, pid: int) -> bool:
    """``oomwatch run``: it passes its command's output through unchanged to its own stdout."""
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    names = [a.rsplit(b"/", 1)[-1] for a in argv[:4]]
    return b"run" in argv[:5] and (b"oomwatch" in names or b"oomwatch" in argv[:4])


def locate_outputs(
    pids: Iterable[int],
    proc: Path = Path("/proc"),
    neighbours: Mapping[int, Sequence[int]] | None = None,
    ancestors: Mapping[int, Sequence[int]] | None = None,
) -> list[OutputFile]:
    """The regular files that ``pids`` write their stdout/stderr to, directly or through a pipe to a
    process among ``neighbours[pid]`` (its ancestors and their children; ``ancestors[pid]``: which of
    them are its ancestors), at most ``MAX_FILES``; not read."""
    out: list[OutputFile] = []
    seen: set[tuple[int, int]] = set()
    for pid in pids:
        for fd in (1, 2):
            direct = _regular(proc, pid, fd)
            near, up = (neighbours or {}).get(pid, ()), (ancestors or {}).get(pid, ())
            found = [direct] if direct is not None else pipe_readers_files(proc, pid, fd, near, up)
            for f in found:
                if (f.dev, f.ino) in seen:
                    continue
                seen.add((f.dev, f.ino))
                out.append(f)
                if len(out) >= MAX_FILES:
                    return out
    return out


def _read_same(where: Path, f: OutputFile) -> JobOutput | None:
    """``f`` read through ``where`` (its fd link, or its path), if that is still the same file."""
    try:
        st = os.stat(where)
        if (st.st_dev, st.st_ino) != (f.dev, f.ino):
            return None  # the process is gone (pid reused), or the log was replaced
        return JobOutput(f.path, f.pid, st.st_size, _read(where, st.st_size))
    except OSError:
        return None  # gone, or not ours to read


def job_outputs(
    pids: Iterable[int],
    proc: Path = Path("/proc"),
    known: Iterable[OutputFile] = (),
    neighbours: Mapping[int, Sequence[int]] | None = None,
    ancestors: Mapping[int, Sequence[int]] | None = None,
) -> list[JobOutput]:
    """The job's output files, read (at most ``MAX_FILES``): those of ``pids`` still running, through
    their descriptors (works for a deleted file); then those ``known`` from earlier, through the
    descriptor if its process still runs, else by path."""
    out: list[JobOutput] = []
    read: set[tuple[int, int]] = set()
    for f in [*locate_outputs(pids, proc, neighbours, ancestors), *known]:
        if len(out) >= MAX_FILES:
            break
        if (f.dev, f.ino) in read:
            continue
        got = _read_same(proc / str(f.pid) / "fd" / str(f.fd), f) or _read_same(Path(f.path), f)
        if got is not None:
            out.append(got)
            read.add((f.dev, f.ino))
    return out
