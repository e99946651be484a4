"""What makes a kill the same kill wherever and whenever it is read: an incident's ``kill_id``.

The kernel stamps each message with its boot and its time on the monotonic clock (microseconds);
/dev/kmsg and the journal both carry those, so a kill read from either, before a restart or after,
has one id: ``kernel:<boot id>:<usec of its Killed process line>:<pid>``. A kernel log file may span
boots and its lines carry whatever stamp the logger gave them: there the id is a hash of the kill
line itself. A kill with no kernel line (a SIGKILL exit event, a counter that rose) is one per
process: its pid and boot, and its start time where known (a pid used again in the boot is another
process). Incidents are written once per id (see agent.incidents).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from oomwatch.paths import HostPaths
from oomwatch.procfs.bootid import read_boot_id


def boot_id(proc: Path = Path("/proc")) -> str:
    """This boot's id (the kernel's random one), or "" where it cannot be read."""
    return read_boot_id(HostPaths(proc=proc))


def kernel_kill_id(boot: str, usec: int, pid: int) -> str:
    """A kill read from /dev/kmsg or the journal: the boot, its line's kernel time, the victim."""
    boot = boot.replace("-", "").lower()  # /proc spells it with dashes, the journal without
    return f"kernel:{boot or 'unknown-boot'}:{usec}:{pid}"


def line_kill_id(lines: list[str], pid: int) -> str:
    """A kill read from a log file: the hash of its ``Killed process`` line (the first of the report's
    lines if it has none), with the victim's pid."""
    kill = next((line for line in lines if "Killed process" in line), lines[0] if lines else "")
    digest = hashlib.sha256(kill.strip().encode("utf-8", "replace")).hexdigest()[:24]
    return f"line:{digest}:{pid}"


def agent_kill_id(kind: str, boot: str, pid: int, start_time: int | None = None) -> str:
    """A kill the agent saw without a kernel report (``kind``: exit, counter): one per process, which
    ``start_time`` (clock ticks after boot, /proc/PID/stat) tells from an earlier one with its pid."""
    process = f"{pid}" if start_time is None else f"{pid}:{start_time}"
    return f"{kind}:{boot or 'unknown-boot'}:{process}"
