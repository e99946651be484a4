"""``oomwatch agent``: tick on an interval, serve /metrics, reload on SIGHUP, stop on SIGTERM.

The sampler runs in the main thread; the HTTP server in its own threads renders the newest tick.
A reload re-reads the config file (flags still win); a config that fails to load is logged and the
running one kept, so a typo never takes a node's monitoring down.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from oomwatch import __version__
from oomwatch.agent.analyze.forecast import NODE, Trends, Warner
from oomwatch.agent.analyze.strain import StrainWarner
from oomwatch.agent.config import AgentConfig, load_config
from oomwatch.agent.history.store import HistoryStore
from oomwatch.agent.incidents.counter import CounterKills
from oomwatch.agent.incidents.sigkills import Sigkills
from oomwatch.agent.incidents.writer import Incidents
from oomwatch.agent.peaks import PeakWatch, joined
from oomwatch.agent.sample.sampler import Sampler
from oomwatch.agent.serve.exporter import AgentCollector, registry_for
from oomwatch.agent.serve.http import MetricsServer
from oomwatch.agent.serve.webconfig import WebConfig, load_web_config
from oomwatch.agent.steps import InThread, StepWatch
from oomwatch.agent.tick import Tick
from oomwatch.agent.watch.exits import ExitWatcher
from oomwatch.agent.watch.journal import JOURNAL, JournalWatcher, journal_readable
from oomwatch.agent.watch.kmsg import KmsgWatcher
from oomwatch.agent.watch.logfile import LogFileWatcher
from oomwatch.engine.sizes import human
from oomwatch.errors import ConfigError
from oomwatch.paths import HostPaths

log = logging.getLogger("oomwatch.agent")

STALL_SECONDS = 10.0  # a tick later than this (or 3 intervals) makes /-/healthy unhealthy
STOP_SECONDS = 1.8  # SIGTERM ends the agent within this, whatever its threads are doing
EARLY = 0.01  # seconds before its time a tick counts as an extra one (a timed wait may end a little early)


def raise_fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one: one kept descriptor per process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
        except (ValueError, OSError):
            return soft
    return soft


class Agent:
    def __init__(self, config_path: Path | None, flags: Mapping[str, Any], paths: HostPaths | None = None) -> None:
        self.config_path = config_path
        self.flags = dict(flags)
        self.paths = paths or HostPaths()
        self.config = load_config(config_path, self.flags)
        self.web = load_web_config(self.config.web_config) if self.config.web_config else None
        self.stop_requested = threading.Event()
        self._ticked = time.monotonic()  # when the sampling loop last finished a tick (or started)
        self.reload_requested = threading.Event()
        self._wake = threading.Event()
        self.sampler = Sampler(self.paths, pss_budget=self.config.pss_budget, top_n=self.config.top_n)
        self.collector = AgentCollector(self.config.top_n, self.config.pss_budget, self.config.top_workers)
        self.server = MetricsServer(
            registry_for(self.collector), self.config.listen, self.web, self.health, self.collector.version
        )
        self.trends = Trends()
        self.warner = Warner()
        self.strain = StrainWarner()
        self.history: HistoryStore | None = None
        self.incidents: Incidents | None = None
        self.watcher: KmsgWatcher | LogFileWatcher | JournalWatcher | None = None
        self.exits: ExitWatcher | None = None
        self.counter_kills: CounterKills | None = None  # incidents from the counters, without a kernel log
        self.steps: InThread | None = None  # the jobs' step counters in their output, for the history
        # the highest memory of the jobs in their first steps between ticks (every 20 ms), for the history
        self.peaks: PeakWatch | None = None

    def _open_state(self) -> None:
        """History, incidents and the kernel-log watcher; each missing piece is said once, and the
        agent goes on without it (metrics still work)."""
        notices = self.sampler.notices
        state = self.config.state_dir
        try:
            state.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # kills are still counted and exported (the alert fires); history and incident files wait
            # for the directory: both try again (a restart finds the kills the disk refused again)
            notices.say("state", f"cannot use the state directory {state} ({exc.strerror or exc}): kills are "
                        "counted, their incident files written once it can be (set --state-dir or state_dir "
                        "to a writable directory)")  # fmt: skip
        self.history = HistoryStore(state / "history.db", notices=notices)
        self.incidents = Incidents(state, self.history, proc=self.paths.proc, read_code=self.config.read_code)
        self.collector.incidents = self.incidents
        incidents = self.incidents
        # a job's first steps bring ticks of their own (agent.steps): the loop is woken, its schedule kept
        self.steps = InThread(StepWatch(incidents.step_rules, self.paths.proc), on_step=self._wake.set)
        self.peaks = PeakWatch(self.paths).start()
        if self.config.kernel_log is not None and str(self.config.kernel_log) == JOURNAL:
            why = journal_readable()
            if why is not None:
                notices.say("kernel-log", f"cannot follow the journal: {why}: incidents from the OOM-kill counters "
                            "only (unconfirmed)")  # fmt: skip
                self._counters_only(incidents)
                return
            self.watcher = JournalWatcher(state, incidents.on_kill, durable=incidents.durable)
        elif self.config.kernel_log is not None:
            try:
                self.watcher = LogFileWatcher(
                    self.config.kernel_log, state, incidents.on_kill, durable=incidents.durable
                )
            except OSError as exc:
                notices.say("kernel-log", f"cannot read the kernel log {self.config.kernel_log} "
                            f"({exc.strerror or exc}): incidents from the OOM-kill counters only "
                            "(unconfirmed)")  # fmt: skip
                self._counters_only(incidents)
                return
        else:
            try:
                self.watcher = KmsgWatcher(
                    self.paths.kmsg, state, incidents.on_kill_records, self.paths.proc, durable=incidents.durable
                )
            except OSError as exc:
                why = journal_readable()
                if why is None:
                    notices.say("kmsg", f"cannot read {self.paths.kmsg} ({exc.strerror or exc}): following the "
                                "kernel's messages in the journal (journalctl -k -f) instead")  # fmt: skip
                    self.watcher = JournalWatcher(state, incidents.on_kill, durable=incidents.durable)
                else:
                    notices.say("kmsg", f"cannot read {self.paths.kmsg} ({exc.strerror or exc}) nor the journal "
                                f"({why}): no incidents from the kernel's OOM reports, only from the OOM-kill "
                                "counters (unconfirmed); give it root, or CAP_SYSLOG where kernel.dmesg_restrict=1, "
                                "or --kernel-log /var/log/kern.log")  # fmt: skip
                    self._counters_only(incidents)
                    return
        self.watcher.start()
        threading.Thread(target=self.incidents.warm, name="oomwatch-warm", daemon=True).start()

    def _watch_exits(self) -> None:
        """SIGKILL deaths of training processes that no OOM report explains (see agent.sigkills)."""
        if self.incidents is None:
            return
        sigkills = Sigkills(self.incidents, kernel_log=self.watcher is not None, paths=self.paths)
        watcher = ExitWatcher(sigkills.on_exit)
        if watcher.start():
            self.exits = watcher
        else:
            self.sampler.notices.say("exits", f"no process exit events ({watcher.unavailable}): a training process "
                                     "killed by SIGKILL outside the kernel's OOM killer (systemd-oomd, earlyoom, "
                                     "the kubelet, kill -9) makes no incident")  # fmt: skip

    def _counters_only(self, incidents: Incidents) -> None:
        self.counter_kills = CounterKills(incidents)
        threading.Thread(target=incidents.warm, name="oomwatch-warm", daemon=True).start()

    def health(self) -> str | None:
        """None while the sampling loop ticks; else what is wrong (``/-/healthy`` answers 503)."""
        late = time.monotonic() - self._ticked
        allowed = max(3 * self.config.interval, STALL_SECONDS)
        if late > allowed:
            return f"no tick for {late:.0f}s (every {self.config.interval:g}s expected)"
        return None

    def request_stop(self, *_: object) -> None:
        if not self.stop_requested.is_set():
            # a thread stuck in a job's output or a diagnosis must not keep the node's agent from stopping:
            # what it had not written is read again at the next start (positions are saved after the files)
            timer = threading.Timer(STOP_SECONDS, self._stop_now)
            timer.daemon = True
            timer.start()
        self.stop_requested.set()
        self._wake.set()

    def _stop_now(self) -> None:
        log.warning("still stopping after %.1fs (a thread is busy): exiting now", STOP_SECONDS)
        logging.shutdown()
        os._exit(0)

    def request_reload(self, *_: object) -> None:
        self.reload_requested.set()
        self._wake.set()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self.request_reload)

    def run(self) -> None:
        # the state directory describes other users' processes and quotes their jobs' output: for root
        # (and whoever it lets in) only, wherever the agent runs (the systemd unit says UMask=0077 too)
        os.umask(0o077)
        fds = raise_fd_limit()
        self.server.start()  # ConfigError when the address cannot be bound: the caller exits 2
        self._open_state()
        self._watch_exits()
        log.info(
            "oomwatch agent %s: metrics on %s, every %gs, smaps budget %g%% of a CPU, descriptor limit %d",
            __version__,
            self.server.url,
            self.config.interval,
            self.config.pss_budget * 100,
            fds,
        )
        try:
            self._loop()
        finally:
            self.server.stop()
            if self.watcher is not None:
                self.watcher.stop(timeout=0.5)
            if self.exits is not None:
                self.exits.stop(timeout=0.5)
            if self.peaks is not None:
                self.peaks.close()
            if self.history is not None:
                self.history.close()
            self.sampler.close()
            log.info("oomwatch agent stopped")

    def _loop(self) -> None:
        due = time.monotonic()
        overrun_said = False
        while not self.stop_requested.is_set():
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self.reload()
            started = time.monotonic()
            early = due - started > EARLY  # woken before its time (a job's step, a reload): the schedule stays
            tick = self.sampler.tick()
            if self.peaks is not None:
                tick = self._with_peaks(tick, self.peaks)
            self.collector.update(tick)
            if self.incidents is not None:
                self.incidents.observe(tick)
                self.incidents.flush()
                if self.steps is not None:  # the jobs' step counters, from their output files (where located)
                    marks = self.steps.offer(tick.time, self.incidents.outputs_located())
                    tick = replace(tick, steps=tuple(marks))
            if self.counter_kills is not None:
                self.counter_kills.observe(tick)
            if self.history is not None:
                self.history.record(tick)
            forecasts = self.trends.add(tick)
            self.collector.forecasts = forecasts
            for f in self.warner.due(forecasts):
                where = "the node's RAM" if f.cgroup == NODE else f"cgroup {f.cgroup}"
                jobs = f" (job {', '.join(f.jobs)})" if f.jobs else ""
                log.warning(
                    "predicted OOM: %s%s reaches its limit %s in %.0fs at %s/s (now %s unreclaimable, fit r2 %.2f)",
                    where, jobs, human(f.limit), f.seconds, human(int(f.slope)), human(f.used), f.r2,
                )  # fmt: skip
            for strain in self.strain.due(tick):
                log.warning("%s", strain.message)
            self._ticked = time.monotonic()
            if not early:
                due += self.config.interval
            delay = due - time.monotonic()
            if delay < 0:
                if not overrun_said:
                    took, every = time.monotonic() - started, self.config.interval
                    log.warning(
                        "a tick took %.3fs (sampling %.3fs), longer than the interval (%gs)", took, tick.duration, every
                    )
                    overrun_said = True
                due = time.monotonic()
                delay = 0
            self._wake.wait(delay)
            self._wake.clear()

    def _with_peaks(self, tick: Tick, peaks: PeakWatch) -> Tick:
        """``tick`` with the highest memory read since the tick before, and ``peaks`` told what to read until the
        next: the processes and cgroups of the jobs before or in their first steps (agent.steps)."""
        tick = joined(tick, *peaks.take())
        opening = self.steps.opening() if self.steps is not None else frozenset()
        pids = [p.pid for p in tick.processes if p.in_job and p.job in opening]
        dirs = self.sampler.memory_dirs
        groups = {c.path: dirs[c.path] for c in tick.cgroups if c.path in dirs and opening.intersection(c.jobs)}
        peaks.watch(pids, groups)
        return tick

    def reload(self) -> None:
        try:
            new = load_config(self.config_path, self.flags)
            web = load_web_config(new.web_config) if new.web_config else None
        except ConfigError as exc:
            log.error("reload failed, keeping the running configuration: %s", exc)
            return
        except Exception:  # a bug in reading it: still no reason to stop watching the node
            log.exception("reload failed, keeping the running configuration")
            return
        old = self.config
        if (new.state_dir, new.kernel_log) != (old.state_dir, old.kernel_log):
            log.warning("state_dir and kernel_log take effect at the next start; still using %s", old.state_dir)
            new = replace(new, state_dir=old.state_dir, kernel_log=old.kernel_log)
        self.config = new
        self.sampler.reload(pss_budget=new.pss_budget, top_n=new.top_n)
        self.collector.top_n, self.collector.budget_fraction = new.top_n, new.pss_budget
        self.collector.top_workers = new.top_workers
        if self.incidents is not None:
            self.incidents.read_code = new.read_code
        # the web config file may have changed even where its path did not (new certificate, new users)
        if new.listen != old.listen or new.web_config is not None or old.web_config is not None:
            self._restart_server(new, web)
        log.info("configuration reloaded: %s", _describe(new))

    def _restart_server(self, new: AgentConfig, web: WebConfig | None) -> None:
        old_listen, old_web = self._bound_listen(), self.web
        self.server.stop()
        server = MetricsServer(registry_for(self.collector), new.listen, web, self.health, self.collector.version)
        try:
            server.start()
        except ConfigError as exc:
            log.error("%s: serving on the previous address (%s) again", exc, old_listen)
            server = MetricsServer(
                registry_for(self.collector), old_listen, old_web, self.health, self.collector.version
            )
            server.start()
        else:
            self.web = web
        self.server = server

    def _bound_listen(self) -> str:
        host, port = self.server.address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _describe(c: AgentConfig) -> str:
    web = f", web config {c.web_config}" if c.web_config else ""
    return (
        f"listen {c.listen}, interval {c.interval:g}s, smaps budget {c.pss_budget:g}, top_n {c.top_n}, "
        f"top_workers {c.top_workers}{web}, "
        f"state {c.state_dir}"
    )
