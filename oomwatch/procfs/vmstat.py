"""``/proc/vmstat``: node VM counters, ``name value`` per line (Documentation/admin-guide/mm, man 5 proc).

Sample::

    nr_free_pages 2296713
    oom_kill 171

``oom_kill`` appeared in Linux 4.13; :func:`oom_kill` returns None when it is missing.
"""

from __future__ import annotations

from oomwatch.paths import HostPaths
from oomwatch.procfs import flat_keyed


def parse_vmstat(text: str) -> dict[str, int]:
    return flat_keyed(text)


def oom_kill(vmstat: dict[str, int]) -> int | None:
    return vmstat.get("oom_kill")


def read_vmstat(paths: HostPaths) -> dict[str, int]:
    return parse_vmstat((paths.proc / "vmstat").read_text())
