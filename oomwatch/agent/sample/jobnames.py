"""A job keeps one name from start to finish: what :func:`oomwatch.agent.sample.discovery.classify` names
from one snapshot is held per process for as long as the process lives.

A name from the job itself (the elastic run id, the Slurm job, the pod) is kept once seen: when the
ranks die first, the launcher left alone would otherwise be renamed ``tree-<its pid>`` (it does not
carry the run id its ranks had), and its last metrics, its history and its cgroup's OOM kills would be
filed under a job that never existed. A ``tree-`` name is only a stand-in: it gives way to a real
one when that appears (the ranks a launcher starts), and to no other ``tree-`` name (the tree's root
died and another process is the root now). Pure bookkeeping, fed by the sampler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from oomwatch.agent.sample.discovery import Member

STAND_IN = "tree-"


class StableJobs:
    def __init__(self) -> None:
        # (pid, start time) -> the job it was named last; a reused pid starts again
        self._named: dict[tuple[int, int | None], str] = {}

    def apply(self, members: Mapping[int, Member], starts: Mapping[int, int | None]) -> dict[int, Member]:
        """``members`` with each process's job as it was first known (see the module's docstring);
        ``starts``: each pid's start time, telling a reused pid from the process named before."""
        out: dict[int, Member] = {}
        named: dict[tuple[int, int | None], str] = {}
        for pid, m in members.items():
            key = (pid, starts.get(pid))
            before = self._named.get(key)
            job = m.job
            stand_in = job is None or job.startswith(STAND_IN)
            # a real name is kept; a stand-in is kept rather than replaced by another stand-in
            if before is not None and stand_in and (not before.startswith(STAND_IN) or job is not None):
                job = before
            if job is not None:
                named[key] = job
            out[pid] = m if job == m.job else replace(m, job=job)
        self._named = named  # only the living: gone processes are forgotten
        return out
