"""Pick the verdict: the first verdict rule whose condition holds over the facts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from oomwatch.engine.model import OomReport, Victim
from oomwatch.engine.roles import role_phrase
from oomwatch.engine.rules.verdict_rules import VerdictRule
from oomwatch.engine.sizes import human

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def choose(rules: Sequence[VerdictRule], facts: Mapping[str, Any]) -> VerdictRule | None:
    for rule in rules:
        if rule.when.evaluate(facts):
            return rule
    return None


def describe_victim(v: Victim | None) -> str:
    if v is None:
        return "a process"
    parts = []
    if v.name:
        parts.append(v.name)
    if v.role == "rank" and v.rank is None:
        parts.append("training process")  # a single-process trainer, or a rank whose number nothing gave
    elif v.role not in ("unknown", "other"):
        parts.append(role_phrase(v.role, v.rank).replace("_", " "))
    elif v.rank is not None:
        parts.append(f"rank {v.rank}")
    if v.anon_rss_bytes is not None:
        parts.append(f"{human(v.anon_rss_bytes)} anonymous RSS")
    what = f"pid {v.pid}" if v.pid is not None else "a process"
    return f"{what} ({', '.join(parts)})" if parts else what


def template_values(victims: Sequence[Victim], reports: Sequence[OomReport]) -> dict[str, str]:
    first = victims[0] if victims else None
    # the limit and cgroup of the first victim's own report: never another kill's
    mine = [r for r in reports if first is not None and first.pid is not None and first.pid == r.victim_pid]
    rep = next((r for r in (*mine, *reports) if r.constraint == "memcg"), None)
    limit = ""
    if rep is not None and rep.memcg_limit_bytes is not None:
        limit = f" ({human(rep.memcg_limit_bytes)})"
    cgroup = (rep.oom_memcg or rep.task_memcg) if rep is not None else None
    if cgroup is None and first is not None:
        cgroup = first.cgroup
    return {
        "victim": describe_victim(first),
        "victims": ", ".join(describe_victim(v) for v in victims[:4]) or "a process",
        "count": str(len(victims)),
        "cgroup": cgroup or "(not named in the log)",
        "limit": limit,
        "cpuset": next((r.trigger_cpuset for r in reports if r.trigger_cpuset), None) or "(not named in the log)",
    }


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill {name} placeholders; unknown names stay as written (rules cannot run code)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)
