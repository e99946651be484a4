"""The fields of one rule match: the rule's constant fields, then its named groups.

Python's `re` (whose parser checks every pattern) allows a group name once per pattern, so a rule
whose alternatives each capture the same field names the second one with a digit: `pid2`,
`signal2`. Such a group is the field without its digit (`pid`) when the first did not match.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_ALTERNATE = re.compile(r"([a-z_]+?)[2-9]")


def match_fields(constant: Mapping[str, str], groups: Mapping[str, str | None]) -> dict[str, str]:
    """``constant`` (a rule's `fields`) updated with the groups that matched, alternates folded in.

    >>> match_fields({"launcher": "dask"}, {"pid": None, "pid2": "24092"})
    {'launcher': 'dask', 'pid': '24092'}
    """
    fields = dict(constant)
    alternates: dict[str, str] = {}
    for key, value in groups.items():
        if value is None:
            continue
        m = _ALTERNATE.fullmatch(key)
        if m is not None:
            alternates.setdefault(m.group(1), value)
        else:
            fields[key] = value
    for key, value in alternates.items():
        if groups.get(key) is None:
            fields[key] = value
    return fields
