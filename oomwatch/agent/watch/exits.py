"""Process exits from the kernel's process events connector (netlink), as they happen.

The kernel OOM killer, a userspace killer (systemd-oomd, earlyoom, the kubelet) and ``kill -9``
all end a training process with SIGKILL, and only the process's parent can ``wait()`` for it. The
process events connector tells every subscriber about every exit on the node, with the wait status
(``exit_code``), so the agent learns of a SIGKILL death without being the parent.

Wire format (``include/uapi/linux/connector.h``, ``cn_proc.h``), native byte order::

    nlmsghdr   len u32, type u16, flags u16, seq u32, pid u32            16 bytes
    cn_msg     idx u32, val u32, seq u32, ack u32, len u16, flags u16    20 bytes
    proc_event what u32, cpu u32, timestamp_ns u64, then a union         16 + 24 bytes
      exit:    process_pid, process_tgid, exit_code, exit_signal         16 bytes
               parent_pid, parent_tgid (Linux 4.18 and later)             8 bytes

The connector sends every message with nlmsg_type NLMSG_DONE: here that is not an end marker.

Subscribing: a socket bound to the group CN_IDX_PROC gets the events once some socket sent
PROC_CN_MCAST_LISTEN (the kernel counts listeners and makes no events without one). It needs
CAP_NET_ADMIN before Linux 6.6 (any user since), a process in the initial user and PID namespaces
(the kernel silently ignores others) and the initial network namespace (the connector lives only
there). Since Linux 6.6 a listener can also ask for some event types only; the watcher asks for exits,
so the kernel does not wake it for every fork and exec (older kernels ignore that request and send
everything, which ``parse_messages`` skips).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("oomwatch.agent")

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_CN_MCAST_IGNORE = 2
PROC_EVENT_NONE = 0
PROC_EVENT_EXIT = 0x80000000

NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_OVERRUN = 4

SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)

# nlmsghdr + cn_msg + the head of proc_event (what, cpu, timestamp_ns): 52 bytes, no padding
_HEAD = struct.Struct("=IHHIIIIIIHHIIQ")
# the same followed by an exit event with its parent: a whole message, 76 bytes, one unpack
_EVENT = struct.Struct("=IHHIIIIIIHHIIQIIIiII")
_NLMSG = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_NL_LEN = _NLMSG.size  # 16
_CN_LEN = _CN_MSG.size  # 20
_EV_HEAD = 16  # what, cpu, timestamp_ns
_EXIT_SHORT = _EV_HEAD + 16  # 32: an exit event without the parent fields
_EXIT_LONG = _EXIT_SHORT + 8  # 40
_PAD = bytes(_EVENT.size)
_SKIP_TYPES = frozenset((NLMSG_NOOP, NLMSG_ERROR, NLMSG_OVERRUN))

RECV_SIZE = 8192  # one event is 76 bytes; the connector sends one message per datagram


@dataclass(frozen=True)
class ProcExit:
    """One task's exit. ``exit_code`` is the wait status; pids are in the initial PID namespace.

    ``timestamp_ns`` is the kernel's CLOCK_MONOTONIC time of the exit (``time.monotonic_ns()``).
    ``parent_pid``/``parent_tgid`` are 0 where the kernel does not say (threads, kernels before 4.18).
    """

    pid: int
    tgid: int
    exit_code: int
    exit_signal: int
    timestamp_ns: int
    parent_pid: int = 0
    parent_tgid: int = 0

    @property
    def killed_by(self) -> int | None:
        """The signal that ended the task (9 for SIGKILL), None when it exited by itself."""
        sig = self.exit_code & 0x7F
        return sig or None

    @property
    def exit_status(self) -> int | None:
        """The status it passed to exit(), None when a signal ended it."""
        if self.exit_code & 0x7F:
            return None
        return (self.exit_code >> 8) & 0xFF

    @property
    def core_dumped(self) -> bool:
        return bool(self.exit_code & 0x80)

    @property
    def is_thread_group_leader(self) -> bool:
        return self.pid == self.tgid


def parse_messages(data: bytes, leaders_only: bool = False) -> list[ProcExit]:
    """The exit events in one recv() buffer (one or more netlink messages); everything else skipped.

    ``leaders_only``: only the exits of thread-group leaders (processes), not of other threads.
    Never raises on malformed input: a truncated or inconsistent message ends the parsing, and what
    came before it is returned.
    """
    out: list[ProcExit] = []
    end = len(data)
    off = 0
    unpack = _EVENT.unpack_from
    while off + _NL_LEN <= end:
        # the last message may be shorter than an exit event: padded, the checks below keep to its bytes
        fields = unpack(data, off) if off + _EVENT.size <= end else unpack(bytes(data[off:]) + _PAD, 0)
        nl_len, nl_type, _, _, _, idx, val, _, _, cn_len, _, what, _, ts, pid, tgid, code, sig, ppid, ptgid = fields
        if nl_len < _NL_LEN or off + nl_len > end:
            break  # truncated, or a length that cannot be
        if (
            what == PROC_EVENT_EXIT
            and _EXIT_SHORT <= cn_len <= nl_len - _NL_LEN - _CN_LEN
            and idx == CN_IDX_PROC
            and val == CN_VAL_PROC
            and nl_type not in _SKIP_TYPES
            and (pid == tgid or not leaders_only)
        ):
            if cn_len >= _EXIT_LONG:
                out.append(ProcExit(pid, tgid, code, sig, ts, ppid, ptgid))
            else:
                out.append(ProcExit(pid, tgid, code, sig, ts))
        off += (nl_len + 3) & ~3
    return out


def _ack_error(data: bytes, ack: int) -> int | None:
    """The error in the kernel's acknowledgement of our control message (ack + 1), None if not one."""
    off = 0
    while off + _HEAD.size <= len(data):
        nl_len, nl_type, _, _, _, idx, val, _, cn_ack, cn_len, _, what, _, _ = _HEAD.unpack_from(data, off)
        if nl_len < _NL_LEN or off + nl_len > len(data):
            return None
        if (
            nl_type not in _SKIP_TYPES
            and (idx, val, what) == (CN_IDX_PROC, CN_VAL_PROC, PROC_EVENT_NONE)
            and cn_ack == (ack + 1) & 0xFFFFFFFF
            and _EV_HEAD + 4 <= cn_len <= nl_len - _NL_LEN - _CN_LEN
        ):
            return int(struct.unpack_from("=I", data, off + _HEAD.size)[0])
        off += (nl_len + 3) & ~3
    return None


def _control(op: int, ack: int = 0, event_type: int | None = None) -> bytes:
    """A control message to the connector: the 4-byte op, or (Linux 6.6+) op and event filter."""
    payload = struct.pack("=I", op) if event_type is None else struct.pack("=II", op, event_type)
    cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, ack, len(payload), 0) + payload
    return _NLMSG.pack(_NL_LEN + len(cn), NLMSG_DONE, 0, 0, 0) + cn


def _unavailable(exc: OSError, step: str) -> str:
    why = {
        errno.EPERM: "needs CAP_NET_ADMIN in the initial network namespace before Linux 6.6",
        errno.EACCES: "needs CAP_NET_ADMIN in the initial network namespace before Linux 6.6",
        errno.EPROTONOSUPPORT: "kernel without CONFIG_CONNECTOR, or not in the initial network namespace",
        errno.EAFNOSUPPORT: "no netlink sockets here",
    }.get(exc.errno or 0)
    text = f"process events connector not available: {exc}"
    if why:
        return f"{text} ({why})"
    return f"{text} ({step})"


class ExitWatcher:
    """Calls ``on_exit`` (in a daemon thread of its own) for every process exit on the node.

    Only thread-group leaders are reported: a thread's exit is not a process's. The callback runs
    on the watcher's thread and should be quick (thousands of exits a second on a busy node): while
    it runs, events queue in the socket and beyond its buffer the kernel drops them (``dropped``
    counts the times that happened). ``start()`` says False and why (``unavailable``) where the
    connector cannot be used; it does not raise for that.

    ``gather``: after a wake-up the thread waits this long before reading, so that a burst of exits
    costs one wake-up rather than one each (about 8 instead of 30 µs of CPU an exit at 2000 exits a
    second); it adds as much to the delay of a report.
    """

    def __init__(
        self,
        on_exit: Callable[[ProcExit], object],
        *,
        rcvbuf: int = 8 << 20,
        ack_timeout: float = 2.0,
        gather: float = 0.01,
    ) -> None:
        self.on_exit = on_exit
        self.rcvbuf = rcvbuf
        self.ack_timeout = ack_timeout
        self.gather = gather
        self.unavailable: str | None = None
        self.dropped = 0  # receive buffer overruns (ENOBUFS): each lost one or more events
        self.callback_errors = 0
        self._sock: socket.socket | None = None
        self._wake_r = -1
        self._wake_w = -1
        self._stopping = False
        self._pending: list[ProcExit] = []
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Subscribe and start the thread. False (reason in ``unavailable``) when that cannot be."""
        if self.running:
            return True
        self.unavailable = None
        self._stopping = False
        self._pending = []
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        except OSError as exc:
            self.unavailable = _unavailable(exc, "socket")
            return False
        try:
            self._set_rcvbuf(sock)
            sock.bind((0, 1 << (CN_IDX_PROC - 1)))  # port id 0: the kernel picks one
            reason = self._subscribe(sock)
        except OSError as exc:
            reason = _unavailable(exc, "bind and subscribe")
        if reason is not None:
            sock.close()
            self.unavailable = reason
            return False
        self._sock = sock
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="oomwatch-procevents", daemon=True)
        self._thread.start()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Unsubscribe, end the thread and close the socket. Safe to call more than once."""
        sock, thread = self._sock, self._thread
        if sock is None:
            return
        self._stopping = True
        with contextlib.suppress(OSError):  # else the kernel may go on making events for nobody: a cost only
            sock.sendto(_control(PROC_CN_MCAST_IGNORE), (0, 0))
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("the process events thread did not end within %.1f s (a slow callback?)", timeout)
        sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._sock = None
        self._thread = None
        self._wake_r = self._wake_w = -1

    def _set_rcvbuf(self, sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, self.rcvbuf)  # beyond rmem_max: CAP_NET_ADMIN
        except OSError:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)  # capped at rmem_max

    def _subscribe(self, sock: socket.socket) -> str | None:
        """LISTEN, and wait for the kernel's acknowledgement: None when subscribed, else why not.

        The plain LISTEN is acknowledged on every kernel (the kernel stays silent where it ignores
        the caller: another user or PID namespace). Then the exit-only filter (Linux 6.6+; older
        kernels ignore a control message of that size, and we then get every event type).
        """
        ack = random.randrange(1, 1 << 31)
        sock.setblocking(False)
        sock.sendto(_control(PROC_CN_MCAST_LISTEN, ack), (0, 0))
        deadline = time.monotonic() + self.ack_timeout
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        while True:
            try:
                data = sock.recv(RECV_SIZE)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    return (
                        "process events connector not available: the kernel did not acknowledge the "
                        f"subscription within {self.ack_timeout:g} s (it ignores processes outside the "
                        "initial user and PID namespaces, e.g. a container without hostPID; or a kernel "
                        "without CONFIG_PROC_EVENTS)"
                    )
                poller.poll(left * 1000)
                continue
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self._overrun()  # events are flowing: the subscription works
                    break
                raise
            self._pending.extend(parse_messages(data, leaders_only=True))
            err = _ack_error(data, ack)
            if err is not None:
                if err:
                    return f"process events connector not available: {os.strerror(err)} (errno {err})"
                break
        sock.sendto(_control(PROC_CN_MCAST_LISTEN, 0, PROC_EVENT_EXIT), (0, 0))
        return None

    def _overrun(self) -> None:
        if not self.dropped:
            log.warning(
                "process events: the kernel dropped events (receive buffer full); "
                "some exits will not be seen (counted in dropped)"
            )
        self.dropped += 1

    def _deliver(self, ev: ProcExit) -> None:
        try:
            self.on_exit(ev)
        except Exception:  # a failing callback must not end the watching
            if not self.callback_errors:
                log.exception("the process exit callback failed (pid %d)", ev.pid)
            self.callback_errors += 1

    def _run(self) -> None:
        sock = self._sock
        if sock is None:
            return
        for ev in self._pending:
            self._deliver(ev)
        self._pending = []
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        recv = sock.recv
        deliver = self._deliver
        while not self._stopping:
            try:
                data = recv(RECV_SIZE)
            except BlockingIOError:
                poller.poll()
                if self.gather:
                    time.sleep(self.gather)  # let a burst gather: one wake-up for many events
                continue
            except OSError as exc:
                if self._stopping:
                    break
                if exc.errno == errno.ENOBUFS:
                    self._overrun()
                    continue
                if exc.errno == errno.EINTR:
                    continue
                log.error("reading process events failed, no more exits will be seen: %s", exc)
                break
            for ev in parse_messages(data, leaders_only=True):
                deliver(ev)
