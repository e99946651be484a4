"""Prometheus metrics from the latest tick, on the agent's own ``CollectorRegistry``.

A scrape never reads /proc: the sampler thread ticks on its interval and the collector renders the
newest :class:`Tick` (a scrape that lands mid-tick gets the previous one, whole).

Naming: ``oomwatch_`` prefix, ``_bytes`` / ``_seconds`` / ``_total`` units. Per-process labels are
bounded to ``training_job``, ``rank``, ``local_rank``, ``role``, ``pid``, ``comm``. Series are bounded by
ranks and roles, not by processes: per-process series (``oomwatch_process_*``, with ``pid``) exist for
every launcher and rank of a training job, for the ``top_workers`` processes by USS of each other
(job, rank, role) group (DataLoader workers, managers, unknown), and for the ``top_n`` processes outside
jobs by RSS; every process of those groups, shown per process or not, is counted in the group's
aggregates (``oomwatch_role_*``: count, sum and max by ``training_job``, ``rank``, ``role``), so that a
DataLoader restarted every epoch churns no series. The local history keeps every process (``oomwatch
top`` / ``history``). The job label is called
``training_job``: Prometheus sets a ``job`` label on every scraped series itself (the scrape job), and
a ``job`` label from the agent would be renamed ``exported_job`` on ingestion.
"""

from __future__ import annotations

import gzip
import platform
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from oomwatch import __version__
from oomwatch.agent.incidents.ledger import RECENT_SECONDS
from oomwatch.agent.serve.series import (
    PROCESS_GAUGES,
    PROCESS_LABELS,
    ROLE_GAUGES,
    ROLE_LABELS,
    TOP_WORKERS,
    Group,
    fold,
    process_labels,
)
from oomwatch.agent.tick import ProcessSample, Tick

if TYPE_CHECKING:
    from oomwatch.agent.analyze.forecast import Forecast
    from oomwatch.agent.incidents.writer import Incidents
    from oomwatch.procfs.pressure import Pressure


class AgentCollector(Collector):
    def __init__(self, top_n: int = 20, budget_fraction: float = 0.05, top_workers: int = TOP_WORKERS) -> None:
        self.tick: Tick | None = None  # replaced whole by the sampler thread
        self.top_n = top_n
        self.top_workers = top_workers
        self.budget_fraction = budget_fraction
        self.smaps_spent_total = 0.0
        self.ticks_total = 0
        self.incidents: Incidents | None = None  # set by the daemon when it writes incidents
        self.forecasts: list[Forecast] = []  # replaced whole each tick

    def update(self, tick: Tick) -> None:
        self.smaps_spent_total += tick.smaps_spent
        self.ticks_total += 1
        self.tick = tick

    def version(self) -> object:
        """Changes whenever what :meth:`collect` yields may have (a new tick, new forecasts, an incident
        counted or written, a configuration reloaded between ticks): the key of the rendered exposition
        (:class:`RenderCache`)."""
        inc = self.incidents
        kills: object = None
        if inc is not None:
            with inc.lock:
                kills = (sum(inc.counts.values()), inc.last_time, inc.write_errors, hash(tuple(inc.recent)))
            kills = (kills, inc.unwritten)
        return self.ticks_total, id(self.forecasts), kills, (self.top_n, self.top_workers, self.budget_fraction)

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families depend on what the host has (GPUs, cgroups)

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily("oomwatch_build", "The agent's version and Python.")
        info.add_metric([], {"version": __version__, "python": platform.python_version()})
        yield info
        tick = self.tick
        yield CounterMetricFamily("oomwatch_ticks", "Sampler ticks completed.", value=self.ticks_total)
        yield CounterMetricFamily(
            "oomwatch_smaps_spent_seconds",
            "Time spent reading smaps_rollup (the PSS/USS budget actually used).",
            value=self.smaps_spent_total,
        )
        yield GaugeMetricFamily(
            "oomwatch_smaps_budget_ratio",
            "The configured smaps_rollup budget, as a fraction of one CPU.",
            value=self.budget_fraction,
        )
        yield from self._kills()
        if tick is None:
            return
        yield GaugeMetricFamily(
            "oomwatch_last_tick_timestamp_seconds", "When the newest sample was taken.", value=tick.time
        )
        yield GaugeMetricFamily("oomwatch_tick_duration_seconds", "How long the newest tick took.", value=tick.duration)
        ok = GaugeMetricFamily("oomwatch_collector_success", "1 if the collector succeeded in the newest tick.",
                               labels=["collector"])  # fmt: skip
        took = GaugeMetricFamily("oomwatch_collector_duration_seconds", "Time the collector took in the newest tick.",
                                 labels=["collector"])  # fmt: skip
        for r in tick.collectors:
            ok.add_metric([r.name], 1.0 if r.ok else 0.0)
            took.add_metric([r.name], r.duration)
        yield ok
        yield took
        yield from self._forecasts()
        yield from self._processes(tick)
        yield from self._cgroups(tick)
        yield from self._node(tick)
        yield from self._gpus(tick)

    def _forecasts(self) -> Iterator[Metric]:
        labels = ["training_job", "cgroup"]
        seconds = GaugeMetricFamily(
            "oomwatch_predicted_oom_seconds",
            "Seconds until the cgroup's unreclaimable memory (anon + shmem) reaches its effective limit, or the "
            'node\'s available memory reaches zero (cgroup="node"), at the trend of the last 2 minutes. '
            "Absent when memory is not growing steadily.",
            labels=labels,
        )
        slope = GaugeMetricFamily(
            "oomwatch_memory_growth_bytes_per_second",
            "The trend behind oomwatch_predicted_oom_seconds (least squares over the last 2 minutes).",
            labels=labels,
        )
        for f in self.forecasts:
            lv = [",".join(f.jobs), f.cgroup]
            seconds.add_metric(lv, f.seconds)
            slope.add_metric(lv, f.slope)
        yield seconds
        yield slope

    def _kills(self) -> Iterator[Metric]:
        inc = self.incidents
        if inc is None:
            return
        kills = CounterMetricFamily(
            "oomwatch_oom_kills",
            "Incidents since the agent started: processes of training jobs killed by the kernel's OOM killer "
            "(verdict cgroup_oom: a memory limit; host_oom: the node's RAM) or by SIGKILL from elsewhere "
            "(userspace_oom_kill, sigkill_unexplained), by the victim's job, role, rank and name, and the top cause.",
            labels=["training_job", "role", "rank", "comm", "verdict", "cause"],
        )
        recent = GaugeMetricFamily(
            "oomwatch_incident_timestamp_seconds",
            "When each incident of the last hour was written (at most the last 100), labelled with its victim, "
            "verdict, top cause, the fix in one line (remedy) and its id for `oomwatch incidents show ID`. A gauge, "
            "so that an alert sees a job's first kill too (a counter born at 1 shows no increase).",
            labels=["training_job", "role", "rank", "comm", "verdict", "cause", "remedy", "incident"],
        )
        now = time.time()
        with inc.lock:
            counts, last, latest = dict(inc.counts), inc.last_time, list(inc.recent)
            errors = inc.write_errors
        waiting = inc.unwritten
        for key, n in sorted(counts.items()):
            kills.add_metric(list(key), n)
        for t, *labels in latest:
            if now - t <= RECENT_SECONDS:
                recent.add_metric(labels, t)
        yield kills
        yield recent
        yield CounterMetricFamily(
            "oomwatch_incident_write_errors",
            "Attempts to write an incident's files that failed (the state directory full, read-only or not "
            "permitted); each is tried again every few seconds, and after a restart. The kill is counted "
            "(oomwatch_oom_kills_total, oomwatch_incident_timestamp_seconds) all the same.",
            value=errors,
        )
        yield GaugeMetricFamily(
            "oomwatch_incidents_unwritten",
            "Incidents counted but not yet written to the state directory (see oomwatch_incident_write_errors_total).",
            value=waiting,
        )
        if last is not None:
            yield GaugeMetricFamily(
                "oomwatch_last_oom_kill_timestamp_seconds",
                "When the agent last saw the kernel OOM-kill a process.",
                value=last,
            )

    def _processes(self, tick: Tick) -> Iterator[Metric]:
        exported, groups = fold(tick, self.top_n, self.top_workers)
        count = GaugeMetricFamily(
            "oomwatch_processes",
            "Processes seen on the node, those exported per process, and those of training jobs counted only in "
            "the per-(job, rank, role) aggregates (oomwatch_role_*).",
            labels=["kind"],
        )
        count.add_metric(["seen"], len(tick.processes))
        count.add_metric(["exported"], len(exported))
        folded = sum(max(0, len(m) - max(0, self.top_workers)) for m in groups.values())
        count.add_metric(["folded"], folded)
        yield count
        yield from self._roles(groups)
        for suffix, attr, doc in PROCESS_GAUGES:
            family = GaugeMetricFamily(f"oomwatch_process_{suffix}", doc, labels=PROCESS_LABELS)
            for p in exported:
                value = p.smaps_age(tick.time) if attr == "smaps_age" else getattr(p, attr)
                if value is not None:
                    family.add_metric(process_labels(p), value)
            yield family

    def _roles(self, groups: dict[Group, list[ProcessSample]]) -> Iterator[Metric]:
        count = GaugeMetricFamily(
            "oomwatch_role_processes",
            "Processes of a training job's (rank, role) group other than launchers and ranks (DataLoader workers, "
            "managers, unknown), all of them: those with per-process series (the top_workers by USS) and the rest.",
            labels=ROLE_LABELS,
        )
        for key, members in groups.items():
            count.add_metric(list(key), len(members))
        yield count
        for suffix, attr, with_max, what in ROLE_GAUGES:
            stats = "sum and max" if with_max else "sum"
            family = GaugeMetricFamily(
                f"oomwatch_role_{suffix}",
                f"{what} of the processes of oomwatch_role_processes, by stat ({stats}).",
                labels=[*ROLE_LABELS, "stat"],
            )
            for key, members in groups.items():
                values = [v for v in (getattr(p, attr) for p in members) if v is not None]
                if not values:
                    continue
                family.add_metric([*key, "sum"], sum(values))
                if with_max:
                    family.add_metric([*key, "max"], max(values))
            yield family

    def _cgroups(self, tick: Tick) -> Iterator[Metric]:
        labels = ["cgroup", "training_job"]
        gauges = {
            "usage": ("oomwatch_cgroup_memory_usage_bytes", "Memory charged to the cgroup (page cache included)."),
            "limit": ("oomwatch_cgroup_memory_limit_bytes", "The cgroup's own memory limit (absent: unlimited)."),
            "effective_limit": (
                "oomwatch_cgroup_memory_effective_limit_bytes",
                "The smallest limit of the cgroup and its ancestors (absent: unlimited).",
            ),
            "peak": ("oomwatch_cgroup_memory_peak_bytes", "Peak memory charged to the cgroup."),
            "anon": ("oomwatch_cgroup_memory_anon_bytes", "Anonymous memory in the cgroup (v2 anon, v1 total_rss)."),
            "file": ("oomwatch_cgroup_memory_file_bytes", "Page cache in the cgroup (v2 file, v1 total_cache)."),
            "shmem": ("oomwatch_cgroup_memory_shmem_bytes", "Shared memory and tmpfs in the cgroup."),
            "swap": ("oomwatch_cgroup_memory_swap_bytes", "Swap used by the cgroup."),
        }
        families = {k: GaugeMetricFamily(n, h, labels=labels) for k, (n, h) in gauges.items()}
        kills = CounterMetricFamily(
            "oomwatch_cgroup_oom_kills", "Processes the kernel OOM-killed in the cgroup (v2 memory.events, "
            "v1 memory.oom_control oom_kill).", labels=labels,
        )  # fmt: skip
        stall = CounterMetricFamily(
            "oomwatch_cgroup_memory_pressure_stall_seconds",
            "Time some / all tasks of the cgroup stalled on memory (PSI memory.pressure).",
            labels=[*labels, "kind"],
        )
        for c in tick.cgroups:
            lv = [c.path, ",".join(c.jobs)]
            for key, family in families.items():
                value = getattr(c, key)
                if value is not None:
                    family.add_metric(lv, value)
            if c.oom_kills is not None:
                kills.add_metric(lv, c.oom_kills)
            _stall(stall, lv, c.pressure)
        yield from families.values()
        yield kills
        yield stall

    def _node(self, tick: Tick) -> Iterator[Metric]:
        n = tick.node
        if n is None:
            return
        for name, value, doc in (
            ("oomwatch_node_memory_total_bytes", n.mem_total, "MemTotal of /proc/meminfo."),
            ("oomwatch_node_memory_available_bytes", n.mem_available, "MemAvailable of /proc/meminfo."),
            ("oomwatch_node_swap_total_bytes", n.swap_total, "SwapTotal of /proc/meminfo."),
            ("oomwatch_node_swap_free_bytes", n.swap_free, "SwapFree of /proc/meminfo."),
        ):
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value)
        if n.oom_kills is not None:
            doc = "OOM kills on the node since boot (/proc/vmstat oom_kill)."
            yield CounterMetricFamily("oomwatch_node_oom_kills", doc, value=n.oom_kills)
        stall = CounterMetricFamily(
            "oomwatch_node_memory_pressure_stall_seconds",
            "Time some / all tasks stalled on memory (/proc/pressure/memory).",
            labels=["kind"],
        )
        _stall(stall, [], n.pressure)
        yield stall

    def _gpus(self, tick: Tick) -> Iterator[Metric]:
        if not tick.gpus:
            return
        used = GaugeMetricFamily("oomwatch_gpu_memory_used_bytes", "GPU memory in use (NVML).",
                                 labels=["gpu", "uuid", "name"])  # fmt: skip
        total = GaugeMetricFamily("oomwatch_gpu_memory_total_bytes", "GPU memory in all (NVML).",
                                  labels=["gpu", "uuid", "name"])  # fmt: skip
        for g in tick.gpus:
            lv = [str(g.index), g.uuid, g.name]
            if g.used is not None:
                used.add_metric(lv, g.used)
            if g.total is not None:
                total.add_metric(lv, g.total)
        yield used
        yield total


def _stall(family: CounterMetricFamily, labels: list[str], pressure: Pressure | None) -> None:
    if pressure is None:
        return
    for kind, line in (("some", pressure.some), ("full", pressure.full)):
        if line is not None and line.total_us is not None:
            family.add_metric([*labels, kind], line.total_us / 1e6)


class RenderCache:
    """The exposition rendered once per version of what it shows (once per tick): every scrape of that
    tick is served the same bytes, gzipped or not, in each format asked for; rendering is serialized, so
    that scrapes arriving together render once."""

    def __init__(self, registry: CollectorRegistry, version: Callable[[], object]) -> None:
        self.registry = registry
        self.version = version
        self._lock = threading.Lock()
        self._key: object = None
        self._bodies: dict[tuple[Callable[[CollectorRegistry], bytes], bool], bytes] = {}

    def get(self, encoder: Callable[[CollectorRegistry], bytes], gzipped: bool) -> bytes:
        with self._lock:
            key = self.version()
            if key != self._key:
                self._key, self._bodies = key, {}
            body = self._bodies.get((encoder, gzipped))
            if body is None:
                plain = self._bodies.get((encoder, False))
                if plain is None:
                    plain = self._bodies[(encoder, False)] = encoder(self.registry)
                body = gzip.compress(plain, compresslevel=6) if gzipped else plain
                self._bodies[(encoder, gzipped)] = body
            return body


def registry_for(collector: AgentCollector) -> CollectorRegistry:
    """The agent's registry: its collector, and the agent process's own CPU, memory, descriptors and
    start time (prometheus_client's process_* series, from /proc/self)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry
