"""``/proc/PID/mountinfo``: the mounts a process sees (Documentation/filesystems/proc.rst, "mountinfo").

Sample (mount id, parent id, major:minor, root, mount point, options, optional fields, ``-``, fstype,
source, super options)::

    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.paths import HostPaths


@dataclass(frozen=True)
class MountEntry:
    root: str  # field 4, unescaped
    mount_point: str  # field 5, unescaped
    fstype: str
    super_options: tuple[str, ...]


def _unescape(field: str) -> str:
    # mountinfo octal-escapes space, tab, newline and backslash
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Every well-formed line of a mountinfo file; garbled lines are skipped."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lf, rf = left.split(), right.split()
        if len(lf) < 5 or len(rf) < 3:
            continue
        out.append(MountEntry(_unescape(lf[3]), _unescape(lf[4]), rf[0], tuple(rf[2].split(","))))
    return out


def read_mountinfo_text(paths: HostPaths, pid: int | str = "self") -> str:
    """The file's text (raises OSError)."""
    return (paths.proc / str(pid) / "mountinfo").read_text()


def read_mountinfo(paths: HostPaths, pid: int | str = "self") -> list[MountEntry]:
    """:func:`parse_mountinfo` of ``/proc/PID/mountinfo`` (our own by default); raises OSError."""
    return parse_mountinfo(read_mountinfo_text(paths, pid))
