"""Incidents for training processes killed by SIGKILL that the kernel's OOM killer did not kill: a
userspace OOM killer (systemd-oomd, earlyoom, the kubelet's eviction, Ray's memory monitor), a
scheduler, a watchdog, a container runtime, or someone's ``kill -9``.

The process events connector (:mod:`oomwatch.agent.watch.exits`) says which process died of which
signal. A SIGKILL death of a process the agent saw in a training job waits ``grace`` seconds for
the kernel's report (an OOM kill is a SIGKILL too, and its report comes through the kernel log
watcher a little later); if none came for that pid, one incident is written for the processes of
its memory cgroup (else its job) killed together (a container kill ends them all at once): the
largest of them is named, as an OOM killer would have chosen it. When the node's OOM-kill count
rose meanwhile, the report is on its way: the group waits until the kernel log has told of each of
its processes, or ``late_grace`` seconds (journald on a loaded node hands the kernel's lines on
seconds late; a report later still replaces the SIGKILL incident, see
:meth:`~oomwatch.agent.incidents.ledger.Ledger._claim`); with no kernel log at all those kills are
left to the counters (:class:`~oomwatch.agent.incidents.counter.CounterKills`).

The verdict: ``userspace_oom_kill`` when memory was short at the time (:func:`memory_short`), else
``sigkill_unexplained``; unconfirmed as to who sent the signal, confirmed that it was SIGKILL.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from oomwatch.agent.incidents.writer import Incidents
from oomwatch.agent.tick import ProcessSample, Tick
from oomwatch.agent.watch.exits import ProcExit
from oomwatch.engine.sizes import human
from oomwatch.paths import HostPaths
from oomwatch.procfs.vmstat import oom_kill, read_vmstat

log = logging.getLogger("oomwatch.agent")

GRACE = 0.6  # seconds to wait for the kernel's OOM report before calling a SIGKILL something else
# the most to wait when the node's OOM-kill count rose meanwhile: the report is coming (a worker's
# report of a cgroup OOM came more than 3 s after its exit through journald, on a 2-core CI machine
# running the test suite: a wait of 3 s called that OOM kill a userspace one)
LATE_GRACE = 15.0
POLL = 0.05  # how often the late wait looks whether the kernel log has told
SHORT_AVAILABLE = 0.10  # MemAvailable under this share of MemTotal
SHORT_CGROUP = 0.90  # a cgroup's unreclaimable memory at this share of its effective limit
SHORT_PRESSURE = 10.0  # PSI memory "full" avg10, percent
SHORT_SWAP = 0.90  # swap used


BEFORE_SECONDS = 2.0  # memory is short before a SIGKILL if a sample of the seconds before says so


def memory_short(tick: Tick | None, job: str | None) -> str | None:
    """What said memory was short in ``tick`` (the node, or a cgroup of ``job``), in words; None if not."""
    if tick is None:
        return None
    said: list[str] = []
    n = tick.node
    if n is not None:
        if n.mem_total and n.mem_available is not None and n.mem_available < SHORT_AVAILABLE * n.mem_total:
            said.append(f"the node had {human(n.mem_available)} of {human(n.mem_total)} available")
        if n.swap_total and n.swap_free is not None and n.swap_total - n.swap_free >= SHORT_SWAP * n.swap_total:
            said.append(f"swap was {(n.swap_total - n.swap_free) / n.swap_total:.0%} used")
        full = n.pressure.full.avg10 if n.pressure is not None and n.pressure.full is not None else None
        if full is not None and full >= SHORT_PRESSURE:
            said.append(f"tasks on the node stalled on memory {full:.0f}% of the last 10 s")
    for c in tick.cgroups:
        if job is None or job not in c.jobs or not c.effective_limit or c.anon is None:
            continue
        used = c.anon + (c.shmem or 0)
        if used >= SHORT_CGROUP * c.effective_limit:
            said.append(f"cgroup {c.path} held {human(used)} of its {human(c.effective_limit)} limit")
    return "; ".join(said) or None


def _node_oom_kills(paths: HostPaths) -> int | None:
    try:
        return oom_kill(read_vmstat(paths))
    except OSError:
        return None


class Sigkills:
    def __init__(
        self,
        incidents: Incidents,
        *,
        kernel_log: bool,
        grace: float = GRACE,
        late_grace: float = LATE_GRACE,
        paths: HostPaths | None = None,
        node_oom_kills: Callable[[], int | None] | None = None,
    ) -> None:
        self.incidents = incidents
        self.kernel_log = kernel_log  # a kernel log watcher runs: an OOM kill's report will come through it
        self.grace = grace
        self.late_grace = late_grace
        host = paths or HostPaths()
        self._oom_kills = node_oom_kills or (lambda: _node_oom_kills(host))
        self._lock = threading.Lock()
        # group (the memory cgroup, else the job) -> its SIGKILLed processes: a container or Slurm kill
        # ends a whole cgroup, whose workers may already be orphans that make jobs of their own
        self._pending: dict[str, list[tuple[ProcExit, ProcessSample]]] = {}
        self._oom_kills_before: dict[str, int | None] = {}
        # the samples of the seconds before the first kill of the group (the last one may already show the
        # victim exiting, its memory released: short before, not any more)
        self._ticks_before: dict[str, list[Tick]] = {}

    def on_exit(self, ev: ProcExit) -> None:
        """Called for every process exit on the node (the connector's thread): cheap unless SIGKILL."""
        if ev.killed_by != signal.SIGKILL:
            return
        victim = self.incidents.last_sample(ev.pid)
        if victim is None or not victim.in_job or victim.job is None:
            return
        key = victim.cgroup or victim.job
        with self._lock:
            group = self._pending.get(key)
            if group is None:
                group = self._pending[key] = []
                tick = self.incidents.last_tick
                node = tick.node if tick is not None else None
                # the count before this kill: the last sample's (reading it now could already include it)
                self._oom_kills_before[key] = node.oom_kills if node is not None else None
                # memory as it was, not after the kill freed some
                self._ticks_before[key] = self.incidents.ticks_since(time.time() - BEFORE_SECONDS)
                timer = threading.Timer(self.grace, self._decide, (key, time.monotonic()))
                timer.daemon = True
                timer.start()
            group.append((ev, victim))

    def _decide(self, key: str, started: float) -> None:
        try:
            before = self._oom_kills_before.get(key)
            now = self._oom_kills()
            oom_meanwhile = before is not None and now is not None and now > before
            if oom_meanwhile:
                waited = time.monotonic() - started
                if not self.kernel_log:
                    self._drop(key)  # the counters tell OOM kills apart; never two incidents for one kill
                    return
                self._await_reports(key, self.late_grace - waited)  # this timer's own thread
            with self._lock:
                group = self._pending.pop(key, [])
                self._oom_kills_before.pop(key, None)
                ticks = self._ticks_before.pop(key, [])
            left = [(ev, v) for ev, v in group if not self.incidents.reported(ev.pid)]
            if left:
                self._write(left, ticks)
        except Exception:  # never the connector's or the agent's end
            log.exception("writing the SIGKILL incident for %s failed", key)

    def _await_reports(self, key: str, seconds: float) -> None:
        """Wait up to ``seconds`` until the kernel log has told of every process of the group ``key``
        (more may join it meanwhile: a cgroup's OOM kills its processes one by one)."""
        deadline = time.monotonic() + seconds
        while True:
            with self._lock:
                pids = [ev.pid for ev, _ in self._pending.get(key, [])]
            if all(self.incidents.reported(pid) for pid in pids) or time.monotonic() >= deadline:
                return
            time.sleep(POLL)

    def _drop(self, key: str) -> None:
        with self._lock:
            self._pending.pop(key, None)
            self._oom_kills_before.pop(key, None)
            self._ticks_before.pop(key, None)

    def _write(self, group: list[tuple[ProcExit, ProcessSample]], ticks: list[Tick]) -> None:
        group.sort(key=lambda g: -(g[1].rss or 0))  # the largest first: the one a memory killer picks
        ev, victim = group[0]
        size = f", {human(victim.rss)} resident" if victim.rss is not None else ""
        died = f"died of SIGKILL{size} (wait status {ev.exit_code:#x}), and no OOM report names it"
        source = "the kernel's log has no OOM report for it" if self.kernel_log else "no kernel log could be read"
        notes = (
            f"from the kernel's process exit event (wait status {ev.exit_code:#x}: killed by signal "
            f"{ev.killed_by}); {source}",
        )
        short = next((said for said in (memory_short(t, victim.job) for t in ticks) if said is not None), None)
        self.incidents.on_sigkill([v for _, v in group], short, died, notes, ev.timestamp_ns / 1e9, self.kernel_log)
