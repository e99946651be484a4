"""What the agent exports and what PromQL reads, for the tests of what is deployed beside it (the
Grafana dashboard, the Prometheus rules): a PromQL name extractor, and the exported names read for
real — a running ``oomwatch agent`` scraped, plus the exporter's collector fed a synthetic tick with a
GPU and one incident for the families that only exist with data this machine lacks.

The fixtures ``agent_exposition`` and ``exported`` are in tests/deploy/conftest.py.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oomwatch.agent.analyze.forecast import Forecast
from oomwatch.agent.incidents.writer import Incidents
from oomwatch.agent.serve.exporter import AgentCollector, registry_for
from oomwatch.agent.tick import CgroupSample, CollectorResult, GpuSample, NodeSample, ProcessSample, Tick
from oomwatch.procfs.pressure import Pressure, PressureLine

# Labels Prometheus itself puts on every scraped series (the agent never exports them).
TARGET_LABELS = {"instance", "job"}
# Series Prometheus itself writes for every target.
PROMETHEUS_SERIES = {"up"}
# Families the dashboard may use that a real agent on this machine cannot show: they need an
# NVIDIA GPU, or an incident. They come from the synthetic exposition only.
CONDITIONAL = {"oomwatch_gpu_memory_used_bytes", "oomwatch_gpu_memory_total_bytes",
               "oomwatch_last_oom_kill_timestamp_seconds"}  # fmt: skip
GIB = 1 << 30


# --------------------------------------------------------------------------- PromQL names

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+)(?![\w.:])
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_:][\w:]*)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=(){}\[\],@:])
    """,
    re.X,
)
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile", "limitk", "limit_ratio"}  # fmt: skip
# followed by a list of label names in parentheses
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan", "start", "end"}
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg_over_time", "ceil",
    "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time", "day_of_month", "day_of_week",
    "day_of_year", "days_in_month", "deg", "delta", "deriv", "double_exponential_smoothing", "exp", "floor",
    "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate", "label_join",
    "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time", "min_over_time",
    "minute", "month", "pi", "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
    "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt",
    "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
}  # fmt: skip
MATCH_OPS = {"=", "!=", "=~", "!~"}


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read {expr[pos : pos + 20]!r} in {expr!r}")
        pos = m.end()
        if m.lastgroup not in ("space", "comment"):
            out.append((m.lastgroup or "", m.group()))
    return out


def _closing(toks: list[tuple[str, str]], start: int, expr: str) -> int:
    """Index of the bracket that closes the one at ``start``."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    for i in range(start, len(toks)):
        kind, text = toks[i]
        if kind != "op":
            continue
        if text in pairs:
            stack.append(pairs[text])
        elif text in pairs.values():
            if not stack or stack.pop() != text:
                break
            if not stack:
                return i
    raise ValueError(f"unbalanced brackets in {expr!r}")


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression refers to. Strings, numbers, durations, ranges,
    keywords, aggregations and functions are not names; label names are those of matchers and of
    by/without/on/ignoring/group_left/group_right lists. A name called like a function that PromQL
    does not have is an error, not a metric."""
    toks = tokens(expr)
    if _closing([("op", "("), *toks, ("op", ")")], 0, expr) != len(toks) + 1:  # every bracket closed, in order
        raise ValueError(f"unbalanced brackets in {expr!r}")
    metrics: set[str] = set()
    labels: set[str] = set()
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1][1] if i + 1 < len(toks) else None
        if text == "{" and kind == "op":
            end = _closing(toks, i, expr)
            inner = toks[i + 1 : end]
            for k in range(len(inner) - 2):
                (nk, name), (_, op), (vk, value) = inner[k : k + 3]
                if nk == "name" and op in MATCH_OPS and vk == "string":
                    labels.add(name)
                    if name == "__name__" and op == "=":
                        metrics.add(value[1:-1])
            i = end + 1
        elif text == "[" and kind == "op":
            i = _closing(toks, i, expr) + 1
        elif kind == "name" and text.lower() in GROUPING:
            if following == "(":
                end = _closing(toks, i + 1, expr)
                labels.update(t for k, t in toks[i + 2 : end] if k == "name")
                i = end + 1
            else:
                i += 1  # group_left without a label list
        elif kind == "name" and (text.lower() in KEYWORDS or text.lower() in AGGREGATIONS):
            i += 1
        elif kind == "name" and following == "(":
            if text not in FUNCTIONS:
                raise ValueError(f"{text}() is no PromQL function, in {expr!r}")
            i += 1
        elif kind == "name":
            metrics.add(text)
            i += 1
        else:
            i += 1
    return metrics, labels - {"__name__"}


# --------------------------------------------------------------------------- what the agent exports


def exposition_names(text: str) -> tuple[set[str], set[str]]:
    """(series names, label names) of an exposition: the names of its `# TYPE` lines (a counter's
    series end in _total whether or not its TYPE line says so) and of its samples."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            names.add(name)
            if kind.strip() == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
    labels: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.add(sample.name)
            labels.update(sample.labels)
    return names, labels


def synthetic_exposition(state_dir: Path) -> str:
    """The exporter's collector after one tick of a job with a rank and a worker, a limited cgroup,
    PSI, a GPU, a forecast and one incident (written by the agent's own code for a counted kill)."""
    now = time.time()
    psi = Pressure(PressureLine(0.0, 0.0, 0.0, 1_500_000), PressureLine(0.0, 0.0, 0.0, 500_000))

    def process(pid: int, comm: str, role: str, gpu: int | None) -> ProcessSample:
        return ProcessSample(pid=pid, ppid=4000, comm=comm, role=role, job="job-1", rank=0, local_rank=0, state="S",
                             rss=GIB, anon=GIB // 2, file=GIB // 4, shmem=GIB // 4, swap=0, hwm=GIB, pss=GIB // 2,
                             uss=GIB // 3, swap_pss=0, smaps_time=now, cgroup="/job", gpu_memory=gpu)  # fmt: skip

    rank = process(4242, "pt_main_thread", "rank", GIB)
    worker = process(4243, "pt_data_worker", "dataloader_worker", None)
    cgroup = CgroupSample(path="/job", version=2, usage=GIB, limit=2 * GIB, effective_limit=2 * GIB, peak=GIB,
                          anon=GIB // 2, file=GIB // 4, shmem=GIB // 4, swap=0, oom_kills=1, pressure=psi,
                          jobs=("job-1",))  # fmt: skip
    tick = Tick(
        time=now,
        duration=0.01,
        processes=(rank, worker),
        cgroups=(cgroup,),
        node=NodeSample(64 * GIB, 32 * GIB, 4 * GIB, 4 * GIB, 1, psi),
        gpus=(GpuSample(0, "GPU-00000000-0000-0000-0000-000000000000", "NVIDIA H100", GIB, 80 * GIB),),
        collectors=tuple(CollectorResult(n, True, 0.001) for n in ("processes", "smaps", "cgroups", "node", "gpu")),
    )
    incidents = Incidents(state_dir)
    incidents.observe(tick)
    incidents.on_counted_kill(worker, "/job", 1)
    collector = AgentCollector()
    collector.incidents = incidents
    collector.forecasts = [Forecast("/job", ("job-1",), GIB, 2 * GIB, 1e6, 1073.0, 0.99)]
    collector.update(tick)
    return generate_latest(registry_for(collector)).decode()
