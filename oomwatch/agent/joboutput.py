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


def job_outputs(pids: Iterable[int], proc: Path = Path("/proc")) -> list[JobOutput]:
    """The regular files that ``pids`` write their stdout/stderr to (at most ``MAX_FILES``), read."""
    out: list[JobOutput] = []
    seen: set[tuple[int, int]] = set()
    for pid in pids:
        for fd in (1, 2):
            link = proc / str(pid) / "fd" / str(fd)
            try:
                st = os.stat(link)  # the file itself (the link is followed)
                if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                name = os.readlink(link)
                data = _read(link, st.st_size)
            except OSError:
                continue  # gone, or not ours to read
            out.append(JobOutput(name, pid, st.st_size, data))
            if len(out) >= MAX_FILES:
                return out
    return out
