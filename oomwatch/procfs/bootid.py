"""``/proc/sys/kernel/random/boot_id``: this boot's random id (Documentation/admin-guide/sysctl/kernel.rst,
"random"), the same until the next boot.

Sample::

    6c9a0d2e-5b1f-4c7e-9a43-2f0e8d1b7c55
"""

from __future__ import annotations

from oomwatch.paths import HostPaths


def parse_boot_id(text: str) -> str:
    """The id as the file spells it (with dashes), without the newline."""
    return text.strip()


def read_boot_id(paths: HostPaths) -> str:
    """This boot's id, or "" where it cannot be read."""
    try:
        text = (paths.proc / "sys" / "kernel" / "random" / "boot_id").read_text()
    except OSError:
        return ""
    return parse_boot_id(text)
