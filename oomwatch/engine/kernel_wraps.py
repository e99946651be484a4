"""Kernel report lines that a paste wrapped onto the next line, put back together (pure).

A person who pastes a kernel log into a mail, an issue or a terminal of fixed width wraps its
long lines without meaning to, two ways: a fold at a fixed column cuts inside a word or a number
and loses nothing (`anon-` + `rss:10324kB`, `(pt` + `_data_worker)`, `1679` + `360`), a word wrap
breaks at a space and loses the space. Each function here gets the cut line and the line after
it and says what the join gives, or None when the line after is not its rest.
"""

from __future__ import annotations

from oomwatch.engine import kernel_body as kb
from oomwatch.engine import kernel_lines as kl
from oomwatch.engine.model import TaskRow

MAX_JOINS = 4  # continuation lines one line may have (a summary folded at 80 columns)


def join_kill_text(first: str, rest: str) -> str:
    """A kill or summary line put back together: a word wrap lost a space after `,` or `)` and
    between `Killed`, `process` and the pid; elsewhere a fold lost nothing (the kB fields read
    the same either way)."""
    spaced = (
        first[-1:] in (",", ")")
        or (first.endswith("Killed") and rest.startswith("process"))
        or (first.endswith("process") and rest[:1].isdigit())
    )
    return first + (" " if spaced else "") + rest


def known_fields(kill: kl.KillLine) -> int:
    """How many of a kill line's fields were read."""
    values = (kill.comm, kill.uid, kill.total_vm_bytes, kill.anon_rss_bytes, kill.file_rss_bytes,
              kill.shmem_rss_bytes, kill.oom_score_adj)  # fmt: skip
    return sum(v is not None for v in values)


def rejoin_stats(first: str, rest: str) -> tuple[str, dict[str, int]] | None:
    """`Memory cgroup stats for /a/b` + `/c:`: a word wrap breaks before the path, a fold inside it
    (a cgroup path has no spaces)."""
    if " " in rest:
        return None
    return kb.parse_stats_header(first + (" " if first.endswith(" for") else "") + rest)


def rejoin_header(first: str, rest: str) -> tuple[tuple[str, ...] | None, str | None]:
    """The task table's header cut before `name`: (its columns, None) for the join whose names are
    all the kernel's, (None, the joined text) when it is still cut, (None, None) when ``rest`` is
    not its rest."""
    for sep in ("", " "):
        joined = first + sep + rest
        columns = kb.parse_table_header(joined)
        if columns is not None and kb.TABLE_COLUMNS.issuperset(columns):
            return columns, None
        names = joined.split("]", 1)[-1].lower().split()
        if columns is None and kb.is_cut_table_header(joined) and kb.TABLE_COLUMNS.issuperset(names):
            return None, joined
    return None, None


def rejoin_row(first: str, rest: str, columns: tuple[str, ...], line_no: int) -> tuple[TaskRow | None, str | None]:
    """A task-table row cut before its last columns: (the row, None) for the join whose columns all
    read as numbers with a name after them, (None, the joined text) when it is still cut (a fold's
    join, nothing added: which is right shows only at the name), (None, None) when ``rest`` is not
    its rest."""
    for sep in ("", " "):
        joined = first + sep + rest
        row = kb.parse_task_row(joined, columns, line_no)
        if row is not None and row.name and not row.name.split()[0].isdigit():
            return row, None
        if row is None and kb.is_cut_task_row(joined, columns):
            return None, joined
    return None, None
