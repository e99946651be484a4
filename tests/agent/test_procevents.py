"""Process exits from the netlink process events connector: the parser on bytes built here the way
the kernel lays them out, and the real watcher on real children killed with SIGKILL.

The real tests need a kernel that lets this process subscribe (root, or any user since Linux 6.6,
in the initial namespaces): they skip where it does not, except as root under CI=true, where they
fail."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from oomwatch.agent.watch import exits as procevents
from oomwatch.agent.watch.exits import ExitWatcher, ProcExit, parse_messages

EXIT = 0x80000000
FORK = 0x00000001
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3


def message(what: int, data: bytes, *, nl_type: int = NLMSG_DONE, idx: int = 1, val: int = 1, ack: int = 0) -> bytes:
    """One netlink message as the connector sends it: nlmsghdr, cn_msg, proc_event."""
    event = struct.pack("=IIQ", what, 1, 123_456_789_000) + data
    cn = struct.pack("=IIIIHH", idx, val, 7, ack, len(event), 0) + event
    msg = struct.pack("=IHHII", 16 + len(cn), nl_type, 0, 7, 0) + cn
    return msg + b"\0" * (-len(msg) % 4)  # NLMSG_ALIGN


def exit_event(pid: int, tgid: int, code: int, sig: int = 17, parent: tuple[int, int] | None = (50, 50)) -> bytes:
    data = struct.pack("=IIIi", pid, tgid, code, sig)
    if parent is not None:
        data += struct.pack("=II", *parent)
    return message(EXIT, data)


def fork_event(parent: int, child: int) -> bytes:
    return message(FORK, struct.pack("=IIII", parent, parent, child, child) + b"\0" * 8)  # union: 24 bytes


# -- the parser ---------------------------------------------------------------------------------


def test_an_exit_event_with_its_parent():
    data = exit_event(4242, 4242, 9, parent=(4000, 3999))
    assert len(data) == 16 + 20 + 40
    assert parse_messages(data) == [ProcExit(4242, 4242, 9, 17, 123_456_789_000, 4000, 3999)]
    ev = parse_messages(data)[0]
    assert ev.killed_by == signal.SIGKILL and ev.exit_status is None and ev.is_thread_group_leader


def test_an_exit_event_without_the_parent_fields():
    data = exit_event(4242, 4242, 3 << 8, parent=None)  # the exit part of the union: 16 bytes only
    assert len(data) == 16 + 20 + 32
    assert parse_messages(data) == [ProcExit(4242, 4242, 768, 17, 123_456_789_000)]
    ev = parse_messages(data)[0]
    assert ev.killed_by is None and ev.exit_status == 3 and (ev.parent_pid, ev.parent_tgid) == (0, 0)


def test_a_thread_exit_is_parsed_but_is_no_leader():
    (ev,) = parse_messages(exit_event(4250, 4242, 0, sig=-1, parent=(0, 0)))
    assert not ev.is_thread_group_leader and ev.exit_signal == -1 and ev.exit_status == 0


def test_leaders_only():
    data = exit_event(40, 40, 9) + exit_event(41, 40, 9, sig=-1) + exit_event(42, 42, 0, parent=None)
    assert [e.pid for e in parse_messages(data)] == [40, 41, 42]
    assert [e.pid for e in parse_messages(data, leaders_only=True)] == [40, 42]


def test_wait_status_decoding():
    assert ProcExit(1, 1, 0x8B, 17, 0).killed_by == signal.SIGSEGV  # with a core dump
    assert ProcExit(1, 1, 0x8B, 17, 0).core_dumped
    assert ProcExit(1, 1, 0x0F, 17, 0).killed_by == signal.SIGTERM
    assert not ProcExit(1, 1, 0x0F, 17, 0).core_dumped
    assert ProcExit(1, 1, 255 << 8, 17, 0).exit_status == 255
    assert ProcExit(1, 1, 0, 17, 0).killed_by is None


def test_other_events_are_skipped():
    assert parse_messages(fork_event(100, 101)) == []
    assert parse_messages(message(0, b"\0" * 24)) == []  # PROC_EVENT_NONE: an acknowledgement


def test_several_messages_in_one_buffer():
    data = exit_event(10, 10, 9) + fork_event(1, 11) + exit_event(12, 10, 9) + exit_event(13, 13, 1 << 8)
    assert [(e.pid, e.tgid, e.killed_by, e.exit_status) for e in parse_messages(data)] == [
        (10, 10, 9, None),
        (12, 10, 9, None),
        (13, 13, None, 1),
    ]


def test_a_truncated_buffer_gives_what_came_whole_and_never_raises():
    first, second = exit_event(10, 10, 9), exit_event(11, 11, 0, parent=None)
    data = first + second
    for n in range(len(data) + 1):
        got = [e.pid for e in parse_messages(data[:n])]
        if n < len(first):
            assert got == [], n
        elif n < len(data):
            assert got == [10], n
        else:
            assert got == [10, 11]


def test_netlink_control_messages_and_other_connectors_are_not_events():
    looks_like_exit = exit_event(20, 20, 9)
    noop = struct.pack("=IHHII", 16, NLMSG_NOOP, 0, 0, 0)
    error = bytearray(looks_like_exit)
    struct.pack_into("=H", error, 4, NLMSG_ERROR)
    other_connector = message(EXIT, struct.pack("=IIIiII", 21, 21, 9, 17, 1, 1), idx=2)
    data = noop + bytes(error) + other_connector + exit_event(22, 22, 9)
    assert [e.pid for e in parse_messages(data)] == [22]


def test_inconsistent_lengths_do_not_hang_or_raise():
    good = exit_event(30, 30, 9)
    zero_len = bytearray(good)
    struct.pack_into("=I", zero_len, 0, 0)
    assert parse_messages(bytes(zero_len) + good) == []  # parsing ends there: no endless loop
    too_long = bytearray(good)
    struct.pack_into("=H", too_long, 16 + 16, 200)  # cn_msg.len beyond the message
    assert [e.pid for e in parse_messages(bytes(too_long) + good)] == [30]
    too_short = bytearray(good)
    struct.pack_into("=H", too_short, 16 + 16, 20)  # shorter than an exit event
    assert parse_messages(bytes(too_short)) == []
    assert parse_messages(b"") == [] and parse_messages(b"\xff" * 15) == []


def test_control_messages_as_the_kernel_expects_them():
    listen = procevents._control(procevents.PROC_CN_MCAST_LISTEN, ack=5)
    assert struct.unpack("=IHHII", listen[:16]) == (40, NLMSG_DONE, 0, 0, 0)
    assert struct.unpack("=IIIIHHI", listen[16:]) == (1, 1, 0, 5, 4, 0, 1)
    only_exits = procevents._control(procevents.PROC_CN_MCAST_LISTEN, event_type=EXIT)
    assert struct.unpack("=IIIIHHII", only_exits[16:]) == (1, 1, 0, 0, 8, 0, 1, EXIT)
    ignore = procevents._control(procevents.PROC_CN_MCAST_IGNORE)
    assert struct.unpack("=I", ignore[-4:]) == (2,)


def test_the_acknowledgement_of_a_subscription():
    ack_ok = message(0, b"\0" * 24, ack=1001)
    ack_eperm = message(0, struct.pack("=I", 1) + b"\0" * 20, ack=1001)
    assert procevents._ack_error(ack_ok, 1000) == 0
    assert procevents._ack_error(ack_eperm, 1000) == 1
    assert procevents._ack_error(ack_ok, 999) is None  # someone else's
    assert procevents._ack_error(exit_event(1, 1, 0) + ack_ok, 1000) == 0


def test_start_says_why_it_cannot_subscribe(monkeypatch: pytest.MonkeyPatch):
    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(procevents.socket, "socket", refuse)
    watcher = ExitWatcher(lambda ev: None)
    assert watcher.start() is False
    assert watcher.unavailable is not None
    assert "Operation not permitted" in watcher.unavailable and "CAP_NET_ADMIN" in watcher.unavailable
    assert not watcher.running
    watcher.stop()  # nothing to stop: no error


# -- the real connector -------------------------------------------------------------------------


class Collector:
    """The callback: every reported exit, by pid, and a way to wait for one."""

    def __init__(self) -> None:
        self.by_pid: dict[int, list[ProcExit]] = {}
        self.reported_at: dict[int, int] = {}
        self.cond = threading.Condition()

    def __call__(self, ev: ProcExit) -> None:
        with self.cond:
            self.by_pid.setdefault(ev.pid, []).append(ev)
            self.reported_at.setdefault(ev.pid, time.monotonic_ns())
            self.cond.notify_all()

    def wait_for(self, pid: int, timeout: float = 2.0) -> ProcExit | None:
        with self.cond:
            self.cond.wait_for(lambda: pid in self.by_pid, timeout)
            return self.by_pid[pid][0] if pid in self.by_pid else None


def start_or_skip(watcher: ExitWatcher) -> None:
    """Start the real watcher; skip where the kernel does not let us subscribe, fail as root under CI."""
    if watcher.start():
        return
    if os.geteuid() == 0 and os.environ.get("CI") == "true":
        pytest.fail(f"{watcher.unavailable}; as root and CI=true this test must run")
    pytest.skip(watcher.unavailable or "process events connector not available")


@pytest.fixture
def watched() -> Iterator[tuple[ExitWatcher, Collector]]:
    collector = Collector()
    watcher = ExitWatcher(collector)
    start_or_skip(watcher)
    try:
        yield watcher, collector
    finally:
        watcher.stop()


SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_sigkilled_child_is_reported(watched: tuple[ExitWatcher, Collector]):
    watcher, collector = watched
    child = subprocess.Popen(SLEEPER)
    try:
        time.sleep(0.1)
        os.kill(child.pid, signal.SIGKILL)
        ev = collector.wait_for(child.pid)
    finally:
        child.kill()
        child.wait()
    assert ev is not None, "the watcher did not report the killed child within 2 s"
    assert ev.killed_by == signal.SIGKILL and ev.exit_status is None
    assert ev.pid == ev.tgid == child.pid
    assert ev.parent_tgid in (0, os.getpid())  # 0: a kernel that does not send the parent
    assert watcher.running and watcher.unavailable is None


def test_a_normal_exit_is_reported_with_its_status(watched: tuple[ExitWatcher, Collector]):
    _, collector = watched
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    child.wait()
    ev = collector.wait_for(child.pid)
    assert ev is not None
    assert ev.killed_by is None and ev.exit_status == 3 and ev.exit_code == 3 << 8
    assert len(collector.by_pid[child.pid]) == 1


THREADS = """
import threading, time
def gone():
    print(threading.get_native_id(), flush=True)
t = threading.Thread(target=gone); t.start(); t.join()
def stays():
    print(threading.get_native_id(), flush=True)
    time.sleep(60)
threading.Thread(target=stays, daemon=True).start()
time.sleep(60)
"""


def test_threads_exits_are_not_reported(monkeypatch: pytest.MonkeyPatch):
    seen: list[ProcExit] = []  # everything the watcher read, threads included

    def spy(data: bytes, leaders_only: bool = False) -> list[ProcExit]:
        events = parse_messages(data)
        seen.extend(events)
        return [e for e in events if e.is_thread_group_leader or not leaders_only]

    monkeypatch.setattr(procevents, "parse_messages", spy)
    collector = Collector()
    watcher = ExitWatcher(collector)
    start_or_skip(watcher)
    child = subprocess.Popen([sys.executable, "-c", THREADS], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        gone, stays = int(child.stdout.readline()), int(child.stdout.readline())
        os.kill(child.pid, signal.SIGKILL)
        ev = collector.wait_for(child.pid)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not {gone, stays} <= {e.pid for e in list(seen)}:
            time.sleep(0.01)
    finally:
        child.kill()
        child.communicate()
        watcher.stop()
    assert ev is not None and ev.killed_by == signal.SIGKILL
    threads = {e.pid: e for e in seen if e.pid in (gone, stays)}
    assert set(threads) == {gone, stays}, "the threads' exits were never read: the test proves nothing"
    assert threads[gone].tgid == child.pid and threads[stays].killed_by == signal.SIGKILL
    assert gone not in collector.by_pid and stays not in collector.by_pid
    assert len(collector.by_pid[child.pid]) == 1  # the process, once


def test_stop_ends_the_thread_and_the_reports_and_start_starts_again():
    collector = Collector()
    watcher = ExitWatcher(collector)
    start_or_skip(watcher)
    thread = watcher._thread
    watcher.stop()
    assert thread is not None and not thread.is_alive() and not watcher.running
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert collector.wait_for(child.pid, timeout=0.3) is None
    watcher.stop()  # twice: no error
    assert watcher.start()
    try:
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        ev = collector.wait_for(child.pid)
        assert ev is not None and ev.exit_status == 0
    finally:
        watcher.stop()


def test_overruns_are_counted_and_the_watching_goes_on(caplog: pytest.LogCaptureFixture):
    release = threading.Event()
    collector = Collector()

    def slow(ev: ProcExit) -> None:
        release.wait(10)  # the first exit holds the thread: the tiny buffer overflows meanwhile
        collector(ev)

    watcher = ExitWatcher(slow, rcvbuf=1)  # the kernel's minimum: a few events
    start_or_skip(watcher)
    try:
        with caplog.at_level(logging.WARNING, logger="oomwatch.agent"):
            subprocess.run(["sh", "-c", "for i in $(seq 300); do /bin/true; done"], check=True)
            release.set()
            child = subprocess.Popen(SLEEPER)
            time.sleep(0.1)
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            ev = collector.wait_for(child.pid, timeout=5)
        assert ev is not None and ev.killed_by == signal.SIGKILL
        assert watcher.dropped > 0 and watcher.running
        assert sum("dropped events" in r.getMessage() for r in caplog.records) == 1  # logged once
    finally:
        release.set()
        watcher.stop()


def test_outside_the_initial_user_namespace_the_kernel_stays_silent(tmp_path):
    """The kernel ignores LISTEN from another user namespace without a word: start() must say so."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1)")
    code = (
        "from oomwatch.agent.watch.exits import ExitWatcher\n"
        "w = ExitWatcher(print, ack_timeout=0.5)\n"
        "print(w.start()); print(w.unavailable)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    proc = subprocess.run(
        [unshare, "--user", "--map-root-user", sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"no user namespaces here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    started, reason = proc.stdout.splitlines()[:2]
    assert started == "False"
    assert "namespace" in reason or "CAP_NET_ADMIN" in reason


def test_a_failing_callback_does_not_end_the_watching(caplog: pytest.LogCaptureFixture):
    collector = Collector()

    def failing(ev: ProcExit) -> None:
        collector(ev)
        raise RuntimeError("a bug in the callback")

    watcher = ExitWatcher(failing)
    start_or_skip(watcher)
    try:
        with caplog.at_level(logging.ERROR, logger="oomwatch.agent"):
            for _ in range(2):
                child = subprocess.Popen([sys.executable, "-c", "pass"])
                child.wait()
                assert collector.wait_for(child.pid) is not None
        assert watcher.running and watcher.callback_errors >= 2
        assert sum("callback failed" in r.getMessage() for r in caplog.records) == 1
    finally:
        watcher.stop()
