"""``/proc/meminfo``: node memory (Documentation/filesystems/proc.rst, "meminfo").

Sample::

    MemTotal:       98688808 kB
    MemAvailable:   90245492 kB

Returned as a dict of bytes (``kB`` values × 1024; unit-less HugePages_* counts stay as they are).
"""

from __future__ import annotations

from oomwatch.paths import HostPaths
from oomwatch.procfs import kb_lines


def parse_meminfo(text: str) -> dict[str, int]:
    return kb_lines(text)


def read_meminfo(paths: HostPaths) -> dict[str, int]:
    return parse_meminfo((paths.proc / "meminfo").read_text())
