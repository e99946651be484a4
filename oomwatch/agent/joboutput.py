"""The job's own output, when it goes to files: what a training job prints (``keep_in_memory=True``,
a ``Manager()``, ``torch.load``, its tracebacks) tells causes apart that memory samples alone
cannot, so an incident reads it too.

A process's standard output and error are ``/proc/PID/fd/1`` and ``fd/2``; when one is a regular
file (``nohup python train.py > train.log``, Slurm's ``slurm-%j.out``, a launcher's log directory),
its start and its end are read through that link (it works for a deleted file, and needs no access
to the file's directory). Pipes, terminals and sockets (Kubernetes, systemd's journal) are skipped:
there is nothing to re-read. Each file is read once per incident even when many processes share it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Sized for the incident's one second: the agent scans with Python's re (~1.3 MB/s over a training
# log's lines, measured), so 320 KiB costs ~0.25 s.
HEAD = 64 << 10  # the start: the configuration and the dataset loading are printed there
TAIL = 256 << 10  # the end: what happened before the kill
MAX_FILES = 4


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


def locate_outputs(pids: Iterable[int], proc: Path = Path("/proc")) -> list[OutputFile]:
    """The regular files that ``pids`` write their stdout/stderr to (at most ``MAX_FILES``), not read."""
    out: list[OutputFile] = []
    seen: set[tuple[int, int]] = set()
    for pid in pids:
        for fd in (1, 2):
            link = proc / str(pid) / "fd" / str(fd)
            try:
                st = os.stat(link)  # the file itself (the link is followed)
                if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                out.append(OutputFile(os.readlink(link), pid, fd, st.st_dev, st.st_ino))
            except OSError:
                continue  # gone, or not ours to read
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


def job_outputs(pids: Iterable[int], proc: Path = Path("/proc"), known: Iterable[OutputFile] = ()) -> list[JobOutput]:
    """The job's output files, read (at most ``MAX_FILES``): those of ``pids`` still running, through
    their descriptors (works for a deleted file); then those ``known`` from earlier, through the
    descriptor if its process still runs, else by path."""
    out: list[JobOutput] = []
    read: set[tuple[int, int]] = set()
    for f in [*locate_outputs(pids, proc), *known]:
        if len(out) >= MAX_FILES:
            break
        if (f.dev, f.ino) in read:
            continue
        got = _read_same(proc / str(f.pid) / "fd" / str(f.fd), f) or _read_same(Path(f.path), f)
        if got is not None:
            out.append(got)
            read.add((f.dev, f.ino))
    return out
