"""Pick the kernel's OOM-killer reports for one memory cgroup out of ``/dev/kmsg`` records.

The ring buffer also holds other cgroups' (other containers') OOM reports, so a report is
kept only when its ``oom-kill:`` summary names our cgroup (or a descendant) in
``oom_memcg=``/``task_memcg=`` — or, on kernels before 4.19, its ``Task in X killed as a
result of limit of Y`` line does. A kept report runs from the nearest preceding ``<comm>
invoked oom-killer:`` record through the ``Killed process`` record, plus a later
``oom_reaper: reaped process <pid>`` record for the same pid when the kernel printed one.
Nothing inside a report is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from scenarios.cgroup import KmsgRecord

__all__ = ["OomReport", "extract_reports"]

_OOM_KILL = re.compile(r"^oom-kill:(.*)$")
_INVOKED = re.compile(r"^(?P<comm>.*) invoked oom-killer: ")
_TASK_IN = re.compile(r"^Task in (\S+) killed as a result of limit of (\S+)")
_KILLED = re.compile(
    r"(?:Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?)"
    r": Killed process (?P<pid>\d+) \((?P<comm>.*?)\)"
    r"(?: total-vm:(?P<total_vm>\d+)kB, anon-rss:(?P<anon>\d+)kB, "
    r"file-rss:(?P<file>\d+)kB, shmem-rss:(?P<shmem>\d+)kB)?"
)
_REAPED = re.compile(r"^oom_reaper: reaped process (?P<pid>\d+) \(")
_MAX_REPORT = 600  # records between the summary and the kill line (a huge task table)


@dataclass
class OomReport:
    """One OOM-killer report for our cgroup: its records and what the kernel said in it."""

    records: list[KmsgRecord]
    invoked_by: str | None = None
    constraint: str | None = None
    oom_memcg: str | None = None
    task_memcg: str | None = None
    killed_pid: int | None = None
    killed_comm: str | None = None
    total_vm_kb: int | None = None
    anon_rss_kb: int | None = None
    file_rss_kb: int | None = None
    shmem_rss_kb: int | None = None
    reaped: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        """JSON-ready facts (for meta.json)."""
        return {
            "first_seq": self.records[0].seq,
            "last_seq": self.records[-1].seq,
            "invoked_by": self.invoked_by,
            "constraint": self.constraint,
            "oom_memcg": self.oom_memcg,
            "task_memcg": self.task_memcg,
            "killed_pid": self.killed_pid,
            "killed_comm": self.killed_comm,
            "total_vm_kb": self.total_vm_kb,
            "anon_rss_kb": self.anon_rss_kb,
            "file_rss_kb": self.file_rss_kb,
            "shmem_rss_kb": self.shmem_rss_kb,
            "oom_reaper": self.reaped,
        }


def _kv(s: str, key: str) -> str | None:
    m = re.search(r"(?:^|,)" + re.escape(key) + r"=([^,]*)", s)
    return m.group(1) if m else None


def _in_scope(path: str | None, cg: str) -> bool:
    return bool(path) and (path == cg or str(path).startswith(cg.rstrip("/") + "/"))


def _opt_int(s: str | None) -> int | None:
    return int(s) if s is not None else None


def extract_reports(records: list[KmsgRecord], cgroup_path: str) -> list[OomReport]:
    """The OOM-killer reports in ``records`` (oldest first) whose cgroup is ``cgroup_path``.

    ``cgroup_path`` is the path as the kernel prints it (``/parent/child``); reports for its
    descendants count too.
    """
    reports: list[OomReport] = []
    used_until = -1  # index of the last record of the previous kept report
    for i, rec in enumerate(records):
        if i <= used_until:
            continue
        summary = _OOM_KILL.match(rec.text)
        task_in = _TASK_IN.match(rec.text)
        if summary:
            body = summary.group(1)
            ours = _in_scope(_kv(body, "oom_memcg"), cgroup_path) or _in_scope(_kv(body, "task_memcg"), cgroup_path)
        elif task_in:
            ours = _in_scope(task_in.group(1), cgroup_path) or _in_scope(task_in.group(2), cgroup_path)
        else:
            continue
        if not ours:
            continue
        start = i
        for j in range(i - 1, used_until, -1):
            text = records[j].text
            if _KILLED.search(text) or _OOM_KILL.match(text):
                break  # walked into the previous report: this one lost its header
            if _INVOKED.match(text):
                start = j
                break
        end, killed = i, None
        for j in range(i, min(len(records), i + _MAX_REPORT)):
            killed = _KILLED.search(records[j].text)
            if killed:
                end = j
                break
        report = OomReport(records=[])
        inv = _INVOKED.match(records[start].text)
        report.invoked_by = inv["comm"] if inv else None
        if summary:
            body = summary.group(1)
            report.constraint = _kv(body, "constraint")
            report.oom_memcg = _kv(body, "oom_memcg")
            report.task_memcg = _kv(body, "task_memcg")
        elif task_in:
            report.task_memcg, report.oom_memcg = task_in.group(1), task_in.group(2)
        kept = records[start : end + 1]
        if killed:
            report.killed_pid = int(killed["pid"])
            report.killed_comm = killed["comm"]
            report.total_vm_kb = _opt_int(killed["total_vm"])
            report.anon_rss_kb = _opt_int(killed["anon"])
            report.file_rss_kb = _opt_int(killed["file"])
            report.shmem_rss_kb = _opt_int(killed["shmem"])
            for j in range(end + 1, len(records)):
                reaped = _REAPED.match(records[j].text)
                if reaped and int(reaped["pid"]) == report.killed_pid:
                    kept = [*kept, records[j]]
                    report.reaped = True
                    if j == end + 1:
                        end = j
                    break
        report.records = kept
        reports.append(report)
        used_until = end
    return reports
