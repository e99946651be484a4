"""What does one agent tick cost on a node with 1000 processes, against the psutil loop users would write?

Starts a farm of real processes (default 1000): a launcher (comm ``pt_elastic``, ``TORCHELASTIC_RUN_ID``
in its environment) that starts 10 python ranks (RANK / LOCAL_RANK), each of which holds a touched
private buffer and a shared anonymous mapping and forks ~99 children that sleep on them; three in four
children rename themselves ``pt_data_worker`` and one in three dirties 512 KiB of the buffer, so the
node has shared, copy-on-write and private pages and the agent sees one job with real roles.

Then, in a fresh process (so that its RSS is the agent's own, not the farm's), it measures in one run:

  * the PSS budget actually spent: a ``Sampler`` (default budget 0.05 of a CPU) ticking every
    ``--interval`` s for ``--seconds`` s, as the agent does; smaps seconds / wall seconds, and how many
    processes got a PSS value;
  * the tick cost: ``--ticks`` back-to-back ticks, the ``processes`` collector (the status-level read
    of every process + the /proc listing) and the whole tick;
  * one scrape: ``generate_latest`` of the exporter on the last tick (time, bytes, series);
  * the agent's VmRSS / VmHWM after all that (target < 60 MB);
  * the baseline, over the same PIDs, in the same process: ``p.memory_info()`` over cached
    ``psutil.Process`` objects, and the naive ``psutil.Process(pid).memory_info()`` per pass;

and prints the ratio agent / psutil (target <= 1.0, while reading more fields). Every process it
started is killed (its own process group) and reaped at the end, Ctrl-C included.

    python bench/agent_tick.py
    python bench/agent_tick.py --procs 2000 --ticks 50 --json /tmp/tick.json
    python bench/agent_tick.py --profile        # and where the tick's time goes (cProfile, top 10)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
JOB_ID = "bench-agent-tick"
PR_SET_CHILD_SUBREAPER = 36

# The farm, written to a file and run as `python FILE launcher|rank ...`: ranks are started by the
# launcher with their own environment (so /proc/PID/environ holds RANK), children are plain forks
# (same argv as their rank: what discovery calls a multiprocessing child). Every process announces
# its pid on the ready pipe, then blocks reading the lifeline pipe: EOF there (the bench is gone,
# even killed with SIGKILL) makes it exit.
FARM = r"""
import gc
import mmap
import os
import subprocess
import sys

MIB = 1 << 20


def rename(name):
    with open("/proc/self/comm", "w") as f:
        f.write(name)


def announce_and_park(ready, life):
    os.write(ready, b"%d\n" % os.getpid())
    while os.read(life, 1):
        pass
    os._exit(0)


def touch(buf, start, size, value):
    buf[start : start + size : 4096] = bytes([value]) * len(range(start, start + size, 4096))


def launcher(total, ranks, private_mb, shared_mb, ready, life):
    rename("pt_elastic")
    kids = total - 1 - ranks
    for r in range(ranks):
        n = kids // ranks + (r < kids % ranks)
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r % 8), WORLD_SIZE=str(ranks), GROUP_RANK="0")
        argv = [sys.executable, __file__, "rank", str(n), str(private_mb), str(shared_mb), str(ready), str(life)]
        subprocess.Popen(argv, env=env, pass_fds=(ready, life), stdout=subprocess.DEVNULL)
    announce_and_park(ready, life)


def rank(n, private_mb, shared_mb, ready, life):
    gc.disable()  # a collection in a child would write to every tracked object: copy-on-write for nothing
    private = bytearray(private_mb * MIB)
    touch(private, 0, len(private), 1)
    shared = mmap.mmap(-1, shared_mb * MIB)  # MAP_SHARED | MAP_ANONYMOUS: RssShmem, like torch's shared tensors
    touch(shared, 0, len(shared), 1)
    for i in range(n):
        if os.fork() == 0:
            try:
                if i % 4 != 3:
                    rename("pt_data_worker")
                if i % 3 == 0:  # copy-on-write: 512 KiB of the rank's buffer become this child's own
                    touch(private, (i % private_mb) * MIB, MIB // 2, 2)
                announce_and_park(ready, life)
            finally:
                os._exit(0)
    announce_and_park(ready, life)


if sys.argv[1] == "launcher":
    launcher(*map(int, sys.argv[2:]))
else:
    rank(*map(int, sys.argv[2:]))
"""


# --------------------------------------------------------------------------- the farm (bench process)


class Farm:
    """The farm's process group: started with a new session, killed with killpg, reaped here (the
    bench is made a child subreaper, so the ranks' children, orphaned by the kill, are ours to reap)."""

    def __init__(self, tmp: Path, total: int, ranks: int, private_mb: int, shared_mb: int) -> None:
        self.tmp, self.total, self.ranks = tmp, total, ranks
        self.private_mb, self.shared_mb = private_mb, shared_mb
        self.launcher: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.life_w: int | None = None
        self.pids: list[int] = []

    def start(self, timeout: float) -> float:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        script = self.tmp / "train.py"
        script.write_text(FARM)
        ready_r, ready_w = os.pipe()
        life_r, self.life_w = os.pipe()
        os.set_inheritable(ready_w, True)
        os.set_inheritable(life_r, True)
        start = time.perf_counter()
        try:
            args = [self.total, self.ranks, self.private_mb, self.shared_mb, ready_w, life_r]
            self.launcher = subprocess.Popen(
                [sys.executable, str(script), "launcher", *map(str, args)],
                env=dict(os.environ, TORCHELASTIC_RUN_ID=JOB_ID),
                pass_fds=(ready_w, life_r),
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.pgid = self.launcher.pid  # a new session: its leader's pid is the group id
        finally:
            os.close(ready_w)
            os.close(life_r)
        try:
            self._wait_ready(ready_r, start + timeout)
        finally:
            os.close(ready_r)
        return time.perf_counter() - start

    def _wait_ready(self, fd: int, deadline: float) -> None:
        buf = b""
        while len(self.pids) < self.total:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"only {len(self.pids)} of {self.total} farm processes came up in time")
            if not select.select([fd], [], [], min(left, 1.0))[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the farm died after {len(self.pids)} of {self.total} processes came up")
            buf += chunk
            *lines, buf = buf.split(b"\n")
            self.pids.extend(int(line) for line in lines if line)

    def stop(self) -> int:
        """SIGKILL the whole group and reap it; returns how many processes were reaped."""
        reaped = 0
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)
        if self.life_w is not None:
            os.close(self.life_w)
            self.life_w = None
        if self.launcher is not None:
            self.launcher.wait()
            reaped += 1
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break  # no children left
            if pid == 0:
                time.sleep(0.01)
            else:
                reaped += 1
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, 0)
                print(f"warning: processes of group {self.pgid} are still there", file=sys.stderr)
        return reaped


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


# --------------------------------------------------------------------------- measuring (fresh process)


def self_status_kb(*keys: str) -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            out[key] = int(rest.split()[0])
    return out


def collector_duration(tick: Any, name: str) -> float:
    return next((c.duration for c in tick.collectors if c.name == name), 0.0)


def floors(kept: dict[int, int], passes: int) -> dict[str, float]:
    """Median seconds of bare passes over the same processes, no parsing: pread of the agent's kept
    status descriptors (the floor of the agent's design), pread of kept statm descriptors, and
    open+read+close of statm (the floor of psutil's memory_info)."""
    pids, status_fds = list(kept), list(kept.values())
    statm_fds = []
    for pid in pids:
        with contextlib.suppress(OSError):
            statm_fds.append(os.open(f"/proc/{pid}/statm", os.O_RDONLY))

    def open_read(pid: int) -> None:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/statm", "rb") as f:
            f.read()

    def median_of(fn: Any, items: list[int]) -> float:
        times = []
        for _ in range(passes):
            t0 = time.perf_counter()
            for x in items:
                fn(x)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    try:
        return {
            "pread_status_s": median_of(lambda fd: os.pread(fd, 8192, 0), status_fds),
            "pread_statm_s": median_of(lambda fd: os.pread(fd, 512, 0), statm_fds),
            "open_read_statm_s": median_of(open_read, pids),
            "listdir_proc_s": median_of(lambda _: os.listdir("/proc"), [0]),
            "n": len(status_fds),
        }
    finally:
        for fd in statm_fds:
            os.close(fd)


def measure(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT))
    before_import = self_status_kb("VmRSS")["VmRSS"]
    from prometheus_client import generate_latest

    from oomwatch.agent.sample.sampler import Sampler
    from oomwatch.agent.serve.exporter import AgentCollector, registry_for

    farm = set(json.loads(Path(args.measure).read_text())["pids"])
    rss_imported = self_status_kb("VmRSS")["VmRSS"]
    sampler = Sampler(pss_budget=args.budget, top_n=args.top_n)
    exporter = AgentCollector(args.top_n, args.budget)
    res: dict[str, Any] = {"rss_start_kb": before_import, "rss_imported_kb": rss_imported}

    # 1. The agent's loop: tick every --interval s for --seconds s; what it spends on smaps_rollup.
    logging.getLogger("oomwatch.agent").addHandler(logging.NullHandler())  # notices: reported below
    # Only figures are kept of each tick, and the last tick (as the exporter does): keeping every Tick
    # would put 1000 ProcessSamples per tick on the agent's RSS.
    started: list[float] = []  # when each tick began, s into the run
    spent_at: list[float] = []  # smaps seconds each tick spent
    reads = 0  # smaps_rollup reads (a process whose smaps_time changed was read this tick)
    read_at: dict[int, float] = {}
    notices: list[str] = []
    first = None
    start = time.perf_counter()
    due = start
    while True:
        started.append(time.perf_counter() - start)
        tick = sampler.tick()
        exporter.update(tick)
        first = first or tick
        spent_at.append(tick.smaps_spent)
        for p in tick.processes:
            if p.smaps_time is not None and read_at.get(p.pid) != p.smaps_time:
                read_at[p.pid] = p.smaps_time
                reads += 1
        notices += tick.notices
        due += args.interval
        if due - start >= args.seconds:
            break
        time.sleep(max(0.0, due - time.perf_counter()))
    wall = time.perf_counter() - start
    half = next(i for i, t in enumerate(started) if t >= wall / 2)
    half_spent = sum(spent_at[half:])
    last = tick
    candidates = [p for p in last.processes if p.rss and p.in_job]
    others = sorted((p for p in last.processes if p.rss and not p.in_job), key=lambda p: -(p.rss or 0))
    candidates += others[: args.top_n]
    spent = sum(spent_at)
    res["budget"] = {
        "fraction": args.budget,
        "bucket_s": sampler.budget.capacity,
        "interval_s": args.interval,
        "ticks": len(started),
        "wall_s": wall,
        "smaps_spent_s": spent,
        "spent_fraction": spent / wall,
        "bound_fraction": (args.budget * wall + sampler.budget.capacity) / wall,
        "first_tick_spent_s": first.smaps_spent,
        "second_half_fraction": half_spent / (wall - started[half]),
        "smaps_reads": reads,
        "pss_known": sum(1 for p in candidates if p.pss is not None),
        "candidates": len(candidates),
    }
    res["notices"] = notices
    res["first_tick_s"] = first.duration
    res["first_tick_processes_s"] = collector_duration(first, "processes")
    roles: dict[str, int] = {}
    for p in last.processes:
        if p.pid in farm:
            key = f"{p.job or '-'}/{p.role}"
            roles[key] = roles.get(key, 0) + 1
    res["farm_seen"] = sum(roles.values())
    res["farm_roles"] = roles

    # 1b. The rest of the daemon's first loop iteration on that first tick: the history's first record
    # (every process), the incidents' first look, the first render of the exposition.
    from oomwatch.agent.history.store import HistoryStore
    from oomwatch.agent.incidents.writer import Incidents

    with tempfile.TemporaryDirectory(prefix="oomwatch-bench-state-") as state_name:
        state = Path(state_name)
        t0 = time.perf_counter()
        history = HistoryStore(state / "history.db")
        history.record(first)
        res["first_history_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        Incidents(state, history).observe(first)
        res["first_incidents_s"] = time.perf_counter() - t0
        history.close()
    first_only = AgentCollector(args.top_n, args.budget)
    first_only.update(first)
    t0 = time.perf_counter()
    generate_latest(registry_for(first_only))
    res["first_render_s"] = time.perf_counter() - t0
    del first_only

    # 2. One scrape of the last tick.
    registry = registry_for(exporter)
    scrape_s = []
    for _ in range(5):
        t0 = time.perf_counter()
        body = generate_latest(registry)
        scrape_s.append(time.perf_counter() - t0)
    res["scrape_s"] = scrape_s
    res["scrape_bytes"] = len(body)
    res["scrape_series"] = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    del body, first, tick, last, candidates, others  # only the exporter's tick stays, as in the agent

    # 3. The agent's memory after ticking, before psutil is loaded into this process.
    res["agent_memory_kb"] = self_status_kb("VmRSS", "VmHWM")

    # 4. Served over HTTP, as Prometheus scrapes it, against prometheus-process-exporter configured per
    # process with smaps: each scraped every --scrape-interval s for --cpu-seconds s (the agent ticking
    # on the same interval, every tick rendered: the worst case of the render cache), then
    # --pairs alternating pairs of scrapes (which goes first alternates), a fresh tick before each pair.
    # Before psutil is loaded: this process's memory is still the agent's own.
    res.update(served(args, sampler, exporter))

    # 5. The tick cost against the baseline, over the same PIDs (those the agent tracks), in rounds:
    # one agent tick, one ProcessTable.update alone, one pass of each psutil loop (the box may be busy
    # with other work; interleaving gives each the same share of it).
    import psutil

    pids = sorted(sampler.table.procs)
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append((pid, psutil.Process(pid)))

    def cached() -> dict[int, Any]:
        out = {}
        for pid, p in procs:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                out[pid] = p.memory_info()
        return out

    def naive() -> dict[int, Any]:
        out = {}
        for pid in pids:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                out[pid] = psutil.Process(pid).memory_info()
        return out

    def timed(fn: Any) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    cached(), naive()  # warm-up
    names = (
        "agent_processes_s",
        "agent_tick_s",
        "agent_smaps_s",
        "table_update_s",
        "table_update_busy_s",
        "psutil_cached_s",
        "psutil_naive_s",
    )
    series: dict[str, list[float]] = {name: [] for name in names}
    reclassified = 0
    for _ in range(args.ticks):
        members = sampler.members
        tick = sampler.tick()
        exporter.update(tick)
        reclassified += sampler.members is not members
        series["agent_processes_s"].append(collector_duration(tick, "processes"))
        series["agent_smaps_s"].append(collector_duration(tick, "smaps"))
        series["agent_tick_s"].append(tick.duration)
        series["table_update_s"].append(timed(lambda: sampler.table.update(sampler.clock())))
        for t in sampler.table.procs.values():
            t.raw = b""  # as if every process had changed since the last read: every status is parsed
        series["table_update_busy_s"].append(timed(lambda: sampler.table.update(sampler.clock())))
        series["psutil_cached_s"].append(timed(cached))
        series["psutil_naive_s"].append(timed(naive))
    res.update(series)
    res["reclassified"] = reclassified
    res["processes_seen"] = len(tick.processes)
    res["baseline_pids"] = len(pids)

    # 6. Where the tick's time goes (after the timings, so it does not slow them).
    if args.profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.ticks):
            sampler.tick()
        prof.disable()
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("tottime").print_stats(10)
        stats.sort_stats("cumulative").print_stats(10)
        res["profile"] = text.getvalue()
        res["floors"] = floors({p: t.fd for p, t in sampler.table.procs.items() if t.fd is not None}, args.ticks)
    sampler.close()
    Path(args.out).write_text(json.dumps(res))
    return 0


PROCESS_EXPORTER = "prometheus-process-exporter"
# one group per process (its comm and pid), so that it exports what the agent does per process
PROCESS_EXPORTER_CONFIG = """process_names:
  - name: "{{.Comm}}-{{.PID}}"
    cmdline:
      - '.+'
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[float, bytes]:
    import urllib.request

    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return time.perf_counter() - t0, body


def series_of(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def cpu_of(pid: int) -> float:
    """utime + stime of a process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_process_exporter(tmp: Path) -> tuple[subprocess.Popen[bytes] | None, str, str]:
    """(process, metrics URL, why not): process-exporter on 127.0.0.1, one group per process, smaps read."""
    import shutil

    binary = shutil.which(PROCESS_EXPORTER)
    if binary is None:
        return None, "", f"{PROCESS_EXPORTER} is not installed (Debian: apt-get install prometheus-process-exporter)"
    config = tmp / "process-exporter.yaml"
    config.write_text(PROCESS_EXPORTER_CONFIG)
    port = free_port()
    cmd = [binary, "-config.path", str(config), "-gather-smaps=true", "-web.listen-address", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            return None, "", f"{PROCESS_EXPORTER} exited {proc.returncode}: {err[-300:]}"
        try:
            get(url)
            return proc, url, ""
        except OSError:
            time.sleep(0.2)
    stop_process(proc)
    return None, "", f"{PROCESS_EXPORTER} did not answer on {url} in 30 s"


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stderr:
        proc.stderr.close()


def served(args: argparse.Namespace, sampler: Any, exporter: Any) -> dict[str, Any]:
    from oomwatch.agent.serve.exporter import registry_for
    from oomwatch.agent.serve.http import MetricsServer

    out: dict[str, Any] = {}
    server = MetricsServer(registry_for(exporter), "127.0.0.1:0", version=exporter.version)
    server.start()
    tmp = Path(tempfile.mkdtemp(prefix="oomwatch-bench-pe-"))
    pe, pe_url, why = (None, "", "not asked for (--no-process-exporter)")
    if not args.no_process_exporter:
        pe, pe_url, why = start_process_exporter(tmp)
    out["process_exporter"] = why or "ok"
    try:
        # CPU per minute: the agent ticking and scraped every interval (its whole process: ticks, the
        # HTTP server, the render, the client's read); process-exporter scraped on the same interval
        interval, seconds = args.scrape_interval, args.cpu_seconds
        cpu0, t0 = time.process_time(), time.perf_counter()
        due = t0
        while time.perf_counter() - t0 < seconds:
            exporter.update(sampler.tick())
            get(server.url)
            due += interval
            time.sleep(max(0.0, due - time.perf_counter()))
        out["agent_cpu_per_min_s"] = (time.process_time() - cpu0) / (time.perf_counter() - t0) * 60
        # before this process reads process-exporter's much larger bodies (a client's memory, not the agent's)
        out["agent_memory_served_kb"] = self_status_kb("VmRSS", "VmHWM")
        if pe is not None:
            cpu0, t0 = cpu_of(pe.pid), time.perf_counter()
            due = t0
            while time.perf_counter() - t0 < seconds:
                get(pe_url)
                due += interval
                time.sleep(max(0.0, due - time.perf_counter()))
            out["pe_cpu_per_min_s"] = (cpu_of(pe.pid) - cpu0) / (time.perf_counter() - t0) * 60
        # alternating pairs: a fresh tick, then the agent's first scrape of it (rendered) and a second
        # (served from the cache), and process-exporter's, in alternating order
        first, again, other, ratios = [], [], [], []
        for i in range(args.pairs):
            exporter.update(sampler.tick())
            order = ("agent", "pe") if i % 2 == 0 else ("pe", "agent")
            took: dict[str, float] = {}
            for who in order:
                if who == "agent":
                    took["agent"], body = get(server.url)
                    again.append(get(server.url)[0])
                    out["agent_http_bytes"], out["agent_http_series"] = len(body), series_of(body)
                elif pe is not None:
                    took["pe"], pe_body = get(pe_url)
                    out["pe_bytes"], out["pe_series"] = len(pe_body), series_of(pe_body)
            first.append(took["agent"])
            if "pe" in took:
                other.append(took["pe"])
                ratios.append(took["agent"] / took["pe"])
        out["agent_http_scrape_s"], out["agent_http_cached_scrape_s"] = first, again
        if other:
            out["pe_scrape_s"], out["scrape_ratio"] = other, ratios
    finally:
        server.stop()
        if pe is not None:
            stop_process(pe)
    return out


# --------------------------------------------------------------------------- report


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f}"


def report(res: dict[str, Any], farm: dict[str, Any]) -> None:
    n = res["processes_seen"]
    b = res["budget"]
    mem = res["agent_memory_kb"]
    print(
        f"farm: {farm['procs']} processes (1 launcher, {farm['ranks']} ranks, {farm['procs'] - 1 - farm['ranks']} "
        f"forked children) up in {farm['startup_s']:.1f} s; MemAvailable {farm['mem_delta'] / 2**20:+.0f} MiB"
    )
    roles = ", ".join(f"{k} {v}" for k, v in sorted(res["farm_roles"].items()))
    print(f"the agent sees {n} processes; the farm's {res['farm_seen']} as job/role: {roles}")
    print()
    print(f"one pass over every process ({n} PIDs), {len(res['agent_tick_s'])} passes   median ms   min ms  us/proc")
    rows = (
        ("agent: processes collector (status + /proc listing)", res["agent_processes_s"]),
        ("agent: whole tick (+ smaps on budget, cgroups, node, gpu)", res["agent_tick_s"]),
        ("agent:   of which smaps_rollup reads", res["agent_smaps_s"]),
        ("agent: ProcessTable.update alone (status-level read)", res["table_update_s"]),
        ("agent: ProcessTable.update, every status changed (all parsed)", res["table_update_busy_s"]),
        ("psutil: p.memory_info(), cached Process objects", res["psutil_cached_s"]),
        ("psutil: psutil.Process(pid).memory_info() each pass", res["psutil_naive_s"]),
    )
    for label, times in rows:
        med = statistics.median(times)
        print(f"  {label:<58} {ms(med)} {ms(min(times))} {med / n * 1e6:8.1f}")
    print(
        f"  (in {res['reclassified']} of {len(res['agent_tick_s'])} ticks a process came, went or renamed itself "
        "somewhere on the node, and the processes collector re-ran discovery's classify)"
    )
    print(
        f"  agent first tick (discovery: stat, cmdline, environ, cgroup of each): {res['first_tick_s'] * 1e3:.0f} ms"
        f" (processes collector {res['first_tick_processes_s'] * 1e3:.0f} ms)"
    )
    first_loop = res["first_tick_s"] + res["first_history_s"] + res["first_incidents_s"] + res["first_render_s"]
    print(
        f"  the daemon's first loop on it: {first_loop * 1e3:.0f} ms (sampler tick {res['first_tick_s'] * 1e3:.0f}, "
        f"history record {res['first_history_s'] * 1e3:.0f}, incidents {res['first_incidents_s'] * 1e3:.0f}, "
        f"first render {res['first_render_s'] * 1e3:.0f}; target < 1 s)"
    )
    print()
    print(
        f"PSS budget {b['fraction']:g} of a CPU (bucket {b['bucket_s']:g} s), ticking every {b['interval_s']:g} s for "
        f"{b['wall_s']:.1f} s ({b['ticks']} ticks): smaps_rollup took {b['smaps_spent_s']:.3f} s = "
        f"{b['spent_fraction']:.3f} of a CPU (bound: budget + first bucket = {b['bound_fraction']:.3f}); "
        f"second half of the run {b['second_half_fraction']:.3f}"
    )
    per_read = b["smaps_spent_s"] / b["smaps_reads"] * 1e3 if b["smaps_reads"] else 0.0
    print(
        f"  {b['smaps_reads']} smaps_rollup reads ({per_read:.2f} ms each); PSS known for {b['pss_known']} of "
        f"{b['candidates']} candidates (job members + top {farm['top_n']} others)"
    )
    print(
        f"scrape: generate_latest {statistics.median(res['scrape_s']) * 1e3:.1f} ms (median of 5), "
        f"{res['scrape_bytes'] / 1e6:.2f} MB, {res['scrape_series']} series"
    )
    first, again = res["agent_http_scrape_s"], res["agent_http_cached_scrape_s"]
    print(
        f"scrape over HTTP ({len(first)} ticks): first of each tick {statistics.median(first) * 1e3:.1f} ms median, "
        f"{min(first) * 1e3:.1f} min; again (cached) {statistics.median(again) * 1e3:.2f} ms median; "
        f"{res['agent_http_bytes'] / 1e6:.3f} MB, {res['agent_http_series']} series (target <= 0.2 s)"
    )
    print(
        f"agent CPU per minute, ticking and scraped every {farm['scrape_interval']:g} s: {res['agent_cpu_per_min_s']:.2f} s"
    )
    if res["process_exporter"] != "ok":
        print(f"process-exporter comparison skipped: {res['process_exporter']}")
    else:
        pe, ratio = res["pe_scrape_s"], res["scrape_ratio"]
        print(
            f"process-exporter (one group per process, smaps): scrape {statistics.median(pe) * 1e3:.1f} ms median, "
            f"{min(pe) * 1e3:.1f} min, {res['pe_bytes'] / 1e6:.2f} MB, {res['pe_series']} series; CPU per minute "
            f"{res['pe_cpu_per_min_s']:.2f} s"
        )
        print(
            f"ratio agent / process-exporter over {len(ratio)} alternating pairs: scrape min {min(ratio):.3f}, "
            f"median {statistics.median(ratio):.3f} (target <= 0.2); CPU per minute "
            f"{res['agent_cpu_per_min_s'] / res['pe_cpu_per_min_s']:.3f}; bytes "
            f"{res['agent_http_bytes'] / res['pe_bytes']:.3f}; series {res['agent_http_series'] / res['pe_series']:.3f}"
        )
    served_mem = res["agent_memory_served_kb"]
    print(
        f"agent RSS after serving: VmRSS {served_mem['VmRSS'] / 1024:.1f} MiB, VmHWM {served_mem['VmHWM'] / 1024:.1f} MiB"
    )
    print(
        f"agent RSS: VmRSS {mem['VmRSS'] / 1024:.1f} MiB, VmHWM {mem['VmHWM'] / 1024:.1f} MiB (target < 60 MB); "
        f"interpreter {res['rss_start_kb'] / 1024:.1f} MiB, + imports {res['rss_imported_kb'] / 1024:.1f} MiB"
    )
    print()
    agent, table = statistics.median(res["agent_processes_s"]), statistics.median(res["table_update_s"])
    cached, naive = statistics.median(res["psutil_cached_s"]), statistics.median(res["psutil_naive_s"])
    res["ratio_cached"], res["ratio_naive"] = agent / cached, agent / naive
    res["ratio_table_cached"] = table / cached
    print(
        f"ratio (agent status-level tick / psutil memory_info loop, cached objects) = {agent / cached:.2f}  (target <= 1.0)"
    )
    print(f"ratio (ProcessTable.update alone / psutil memory_info loop, cached objects) = {table / cached:.2f}")
    busy = statistics.median(res["table_update_busy_s"])
    res["ratio_busy_cached"] = busy / cached
    print(f"ratio (ProcessTable.update, every status parsed / psutil loop, cached objects) = {busy / cached:.2f}")
    print(f"ratio (agent status-level tick / psutil.Process(pid).memory_info() loop)   = {agent / naive:.2f}")
    print(
        "  agent reads /proc/PID/status (kept fd, pread): RSS, anon, file, shmem, swap, HWM, state, ppid, name, "
        "+ the /proc listing (discovery of new / gone processes)"
    )
    print("  psutil memory_info reads /proc/PID/statm (open per call): rss, vms, shared, text, data")
    if res["notices"]:
        print("agent notices: " + "; ".join(res["notices"]))
    if "floors" in res:
        f = res["floors"]
        print()
        print(f"floors, bare syscalls over the same {f['n']} processes, no parsing (median ms):")
        print(f"  pread /proc/PID/status on kept fds   {ms(f['pread_status_s'])}")
        print(f"  pread /proc/PID/statm on kept fds    {ms(f['pread_statm_s'])}")
        print(f"  open+read+close /proc/PID/statm      {ms(f['open_read_statm_s'])}")
        print(f"  os.listdir('/proc')                  {ms(f['listdir_proc_s'])}")
    if "profile" in res:
        print()
        print(f"cProfile of {len(res['agent_tick_s'])} ticks (measuring process):")
        print(res["profile"].rstrip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=1000, help="processes in the farm, all told")
    ap.add_argument("--ranks", type=int, default=10, help="of which ranks (each forks its share of the rest)")
    ap.add_argument("--private-mb", type=int, default=16, help="touched private buffer per rank, MiB")
    ap.add_argument("--shared-mb", type=int, default=4, help="touched shared anonymous mapping per rank, MiB")
    ap.add_argument("--ticks", type=int, default=20, help="timed ticks / psutil passes")
    ap.add_argument("--interval", type=float, default=0.25, help="tick interval of the budget run, s")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of the budget run, s")
    ap.add_argument("--budget", type=float, default=0.05, help="pss_budget, fraction of a CPU")
    ap.add_argument("--top-n", type=int, default=20)
    ap.add_argument("--startup-timeout", type=float, default=60.0, help="s to wait for the farm")
    ap.add_argument("--profile", action="store_true", help="also cProfile the ticks, top 10 entries")
    ap.add_argument("--scrape-interval", type=float, default=1.0, help="tick / scrape interval of the CPU runs, s")
    ap.add_argument("--cpu-seconds", type=float, default=10.0, help="length of each CPU-per-minute run, s")
    ap.add_argument("--pairs", type=int, default=10, help="alternating scrape pairs, agent / process-exporter")
    ap.add_argument("--no-process-exporter", action="store_true", help="skip the process-exporter comparison")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the measuring process
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        return measure(args)
    if args.procs < args.ranks + 1 or args.ranks < 1 or args.private_mb < 1:
        ap.error("--procs must exceed --ranks (>= 1); --private-mb >= 1")

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    with tempfile.TemporaryDirectory(prefix="oomwatch-bench-") as tmp_name:
        tmp = Path(tmp_name)
        farm = Farm(tmp, args.procs, args.ranks, args.private_mb, args.shared_mb)
        avail = mem_available()
        try:
            startup = farm.start(args.startup_timeout)
            time.sleep(0.2)  # let the last forks settle their pages
            delta = mem_available() - avail
            pidfile, out = tmp / "pids.json", tmp / "result.json"
            pidfile.write_text(json.dumps({"pids": farm.pids}))
            cmd = [sys.executable, str(Path(__file__).resolve()), "--measure", str(pidfile), "--out", str(out)]
            for opt in ("ticks", "interval", "seconds", "budget", "top_n", "scrape_interval", "cpu_seconds", "pairs"):
                cmd += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
            if args.no_process_exporter:
                cmd.append("--no-process-exporter")
            if args.profile:
                cmd.append("--profile")
            done = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(ROOT)))
            if done.returncode != 0:
                print(f"the measuring process failed (exit {done.returncode})", file=sys.stderr)
                return 1
            res = json.loads(out.read_text())
        finally:
            reaped = farm.stop()
        info = {"procs": args.procs, "ranks": args.ranks, "startup_s": startup, "mem_delta": delta, "top_n": args.top_n,
                "scrape_interval": args.scrape_interval}  # fmt: skip
        report(res, info)
        print(f"farm stopped: {reaped} processes killed and reaped")
        if args.json:
            args.json.write_text(json.dumps({"farm": info, **res}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the farm is already gone (Farm.stop in a finally)
        sys.exit(130)
