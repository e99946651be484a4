"""Tests for oomwatch.engine.prefix.strip_prefix."""

from __future__ import annotations

import dataclasses
import time

import pytest

from oomwatch.engine.prefix import Prefixed, strip_prefix

OOM = "Out of memory: Killed process 13536 (python) total-vm:95424496kB, anon-rss:64712340kB"

# (line, time, text, kernel, host)
# fmt: off
CASES = [
    # --- bare dmesg -----------------------------------------------------------------
    ("[ 5864.708505] " + OOM, "5864.708505", OOM, True, None),
    ("[    0.000000] Linux version 5.15.0-91-generic", "0.000000",
     "Linux version 5.15.0-91-generic", True, None),
    ("[12345678.123456] oom_reaper: reaped process 13536 (python)", "12345678.123456",
     "oom_reaper: reaped process 13536 (python)", True, None),
    ("[ 5864.708505] [  T1234] " + OOM, "5864.708505", OOM, True, None),
    ("[    0.000000][    T0] Booting Linux on physical CPU 0x0", "0.000000",
     "Booting Linux on physical CPU 0x0", True, None),
    ("[ 5864.708505] [   C12] NMI watchdog: BUG", "5864.708505", "NMI watchdog: BUG", True, None),
    ("[ 5864.708505 <    0.000037>] " + OOM, "5864.708505", OOM, True, None),
    # task-table rows: only the timestamp bracket goes
    ("[ 5864.708505] [13536] 275858 13536 23856124 16178085 129515520 0 0 python",
     "5864.708505", "[13536] 275858 13536 23856124 16178085 129515520 0 0 python", True, None),
    ("[ 5864.708505] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents "
     "oom_score_adj name", "5864.708505",
     "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
     True, None),
    # call trace indentation is kept (one separator space removed)
    ("[ 5864.708505]  dump_stack+0x6d/0x8b", "5864.708505", " dump_stack+0x6d/0x8b", True, None),
    # --- dmesg -T, any locale ---------------------------------------------------------
    ("[Mon Jan  5 15:19:27 2015] " + OOM, "Mon Jan 5 15:19:27 2015", OOM, True, None),
    ("[Di Aug 12 03:54:03 2025] " + OOM, "Di Aug 12 03:54:03 2025", OOM, True, None),
    ("[mar. août 12 03:54:03 2025] " + OOM, "mar. août 12 03:54:03 2025", OOM, True, None),
    ("[mar ago 12 03:54:03 2025] " + OOM, "mar ago 12 03:54:03 2025", OOM, True, None),
    ("[Вт авг 12 03:54:03 2025] " + OOM, "Вт авг 12 03:54:03 2025", OOM, True, None),
    ("[Tue Aug 12 03:54:03 2025 <    0.000012>] " + OOM, "Tue Aug 12 03:54:03 2025", OOM, True,
     None),
    # --- dmesg --time-format iso, -r, -x ---------------------------------------------
    ("2024-01-05T15:19:27,708440+00:00 " + OOM, "2024-01-05T15:19:27,708440+00:00", OOM, True,
     None),
    ("<6>[ 5864.708505] " + OOM, "5864.708505", OOM, True, None),
    ("<4>Out of memory", None, "Out of memory", False, None),
    ("kern  :err   : [ 5864.708505] " + OOM, "5864.708505", OOM, True, None),
    ("kern  :info  : " + OOM, None, OOM, True, None),
    ("daemon:info  : systemd[1]: Started foo", None, "systemd[1]: Started foo", False, None),
    # --- /dev/kmsg ----------------------------------------------------------------------
    ("6,420,82018607,-;" + OOM, "82018607", OOM, True, None),
    ("3,1234,5864708505,c;oom-kill:constraint=CONSTRAINT_MEMCG", "5864708505",
     "oom-kill:constraint=CONSTRAINT_MEMCG", True, None),
    ("4,77,4000000,-,caller=T1234;" + OOM, "4000000", OOM, True, None),
    (" SUBSYSTEM=memory", None, " SUBSYSTEM=memory", True, None),
    (" DEVICE=+memory:memory0", None, " DEVICE=+memory:memory0", True, None),
    # --- BSD syslog ---------------------------------------------------------------------
    ("Jan  5 15:19:27 myhost kernel: [ 5864.708440] " + OOM, "Jan 5 15:19:27", OOM, True, "myhost"),
    ("Jan  5 15:19:27 kernel: [ 5864.708440] " + OOM, "Jan 5 15:19:27", OOM, True, None),
    ("Jan 28 19:58:45 localhost kernel: " + OOM, "Jan 28 19:58:45", OOM, True, "localhost"),
    ("Jan  5 15:19:01 host CRON[14500]: (root) CMD (run-parts /etc/cron.hourly)",
     "Jan 5 15:19:01", "(root) CMD (run-parts /etc/cron.hourly)", False, "host"),
    ("Jan  5 15:19:01 gpu-node-7.example.com systemd[1]: session-3.scope: A process of this "
     "unit has been killed by the OOM killer.", "Jan 5 15:19:01",
     "session-3.scope: A process of this unit has been killed by the OOM killer.", False,
     "gpu-node-7.example.com"),
    ("Jan  5 15:19:01 host (sd-pam)[2211]: pam_unix(systemd-user:session): session closed",
     "Jan 5 15:19:01", "pam_unix(systemd-user:session): session closed", False, "host"),
    ("Jan  5 15:19:27 myhost kernel: usb 1-1: new high-speed USB device", "Jan 5 15:19:27",
     "usb 1-1: new high-speed USB device", True, "myhost"),
    ("Jan  5 15:19:27 myhost kernel: [ 5864.708440]  oom_kill_process+0xe6/0x110",
     "Jan 5 15:19:27", " oom_kill_process+0xe6/0x110", True, "myhost"),
    # RFC 5424 / rsyslog ISO
    ("2024-03-01T10:11:12.123456+00:00 host kernel: " + OOM, "2024-03-01T10:11:12.123456+00:00",
     OOM, True, "host"),
    ("2024-03-01T10:11:12.123456+00:00 host kernel: [ 5864.708440] " + OOM,
     "2024-03-01T10:11:12.123456+00:00", OOM, True, "host"),
    ("2024-03-01T10:11:12.123456+00:00 node-3 kubelet[1742]: eviction manager: must evict pod",
     "2024-03-01T10:11:12.123456+00:00", "eviction manager: must evict pod", False, "node-3"),
    # --- journalctl ----------------------------------------------------------------------
    ("Mär 05 10:11:12 host kernel: " + OOM, "Mär 05 10:11:12", OOM, True, "host"),
    ("Okt 05 10:11:12 host kernel: " + OOM, "Okt 05 10:11:12", OOM, True, "host"),
    ("Dez 05 10:11:12 host systemd[1]: foo.service: Failed with result 'oom-kill'.",
     "Dez 05 10:11:12", "foo.service: Failed with result 'oom-kill'.", False, "host"),
    ("févr. 05 10:11:12 host kernel: " + OOM, "févr. 05 10:11:12", OOM, True, "host"),
    ("мар 05 10:11:12 host kernel: " + OOM, "мар 05 10:11:12", OOM, True, "host"),
    ("3月 05 10:11:12 host kernel: " + OOM, "3月 05 10:11:12", OOM, True, "host"),
    ("2024-03-05T10:11:12+0100 host kernel: " + OOM, "2024-03-05T10:11:12+0100", OOM, True,
     "host"),
    ("Mar 05 10:11:12.123456 host kernel: " + OOM, "Mar 05 10:11:12.123456", OOM, True, "host"),
    ("2024-03-05T10:11:12.123456+0100 host kernel: " + OOM, "2024-03-05T10:11:12.123456+0100",
     OOM, True, "host"),
    # --- kubectl / containerd ------------------------------------------------------------
    ("2024-01-05T15:19:27.123456789Z torch.OutOfMemoryError: CUDA out of memory.",
     "2024-01-05T15:19:27.123456789Z", "torch.OutOfMemoryError: CUDA out of memory.", False,
     None),
    ("2024-01-05T15:19:27.123456789Z stderr F torch.OutOfMemoryError: CUDA out of memory.",
     "2024-01-05T15:19:27.123456789Z", "torch.OutOfMemoryError: CUDA out of memory.", False,
     None),
    ("2024-01-05T15:19:27.123456789+01:00 stdout P Epoch 1/10",
     "2024-01-05T15:19:27.123456789+01:00", "Epoch 1/10", False, None),
    ("2024-01-05T15:19:27.123456789Z [ 5864.708505] " + OOM, "2024-01-05T15:19:27.123456789Z",
     OOM, True, None),
    ("2024-01-05T15:19:27.123456789Z [rank3]: torch.OutOfMemoryError: CUDA out of memory",
     "2024-01-05T15:19:27.123456789Z", "[rank3]: torch.OutOfMemoryError: CUDA out of memory",
     False, None),
    ("2024-01-05T15:19:27Z Epoch 1: loss=0.5", "2024-01-05T15:19:27Z", "Epoch 1: loss=0.5", False,
     None),
    # --- CI runners ------------------------------------------------------------------------
    ("2024-01-05T15:19:27.1234567Z ##[error]Process completed with exit code 137.",
     "2024-01-05T15:19:27.1234567Z", "##[error]Process completed with exit code 137.", False,
     None),
    ("2024-01-05T15:19:27.123456Z 00O Killed", "2024-01-05T15:19:27.123456Z", "Killed", False,
     None),
    ("2024-01-05T15:19:27.123456Z 01E RuntimeError: oom", "2024-01-05T15:19:27.123456Z",
     "RuntimeError: oom", False, None),
    ("2024-01-05T15:19:27.123456Z 00O+tail of a long line", "2024-01-05T15:19:27.123456Z",
     "tail of a long line", False, None),
    ("[2024-01-05T15:19:27.123Z] Killed", "2024-01-05T15:19:27.123Z", "Killed", False, None),
    ("[2024-01-05T15:19:27.123Z] [ 5864.708505] " + OOM, "2024-01-05T15:19:27.123Z", OOM, True,
     None),
    # --- kubectl logs --prefix: the pod is the host ----------------------------------------
    ("[pod/trainer-worker-1/pytorch] [rank1]: RuntimeError: x", None, "[rank1]: RuntimeError: x", False,
     "trainer-worker-1"),
    ("[pod/trainer-worker-1/pytorch] 2024-01-05T15:19:27.123456789Z step 3", "2024-01-05T15:19:27.123456789Z",
     "step 3", False, "trainer-worker-1"),
    # --- a child's output relayed with its stream's name (accelerate's test runner) ---------
    ("stderr:   exitcode  : 1 (pid: 8835)", None, "  exitcode  : 1 (pid: 8835)", False, None),
    ("stdout: [rank0]: step 3 loss 2.1", None, "[rank0]: step 3 loss 2.1", False, None),
    # --- nesting ---------------------------------------------------------------------------
    ("2024-01-05T15:19:27.123Z Jan  5 15:19:27 node1 kernel: [ 5864.708440] " + OOM,
     "2024-01-05T15:19:27.123Z", OOM, True, "node1"),
]
# fmt: on

# Lines that must come back unchanged, not kernel, no time.
UNCHANGED = [
    "",
    "[",
    "]",
    "[]",
    "[ ",
    "[ 5864.708505",
    "[5864] x",
    "[13536] 275858 13536 23856124 16178085 129515520 0 0 python",
    "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
    "[ T123] no timestamp before the caller id",
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "[default0]:RuntimeError: CUDA error: out of memory",
    "[pod/trainer-worker-1] no container",
    "stderr:no space",
    "stderr output follows",
    "[pod/Trainer_1/pytorch] not a Kubernetes name",
    "foo) Z ",
    "foo) Z R 1 2 3",
    ") Z ",
    "Killed",
    "Out of memory: Killed process 13536 (python)",
    "2024-01-05 15:19:27,123 INFO train.py:42 epoch 1",
    "2024-01-05 15:19:27.123 | ERROR | oom",
    "I0105 15:19:27.123456 12345 trainer.cc:42] step 1",
    "15:19:27  Killed",
    "12:34",
    "2024",
    "2024-01-05",
    "2024-01-05T",
    "2024-01-05T15:19",
    "2024-01-05T15:19:27.123Zmsg",
    "6,420",
    "6,420,82018607,-",
    "1,2,3 is not a kmsg record",
    "<",
    "<6",
    "<abc>x",
    "Jan",
    "Jan  5",
    "Jan  5 15:19",
    "Epoch 5 of 10: loss",
    "Step 5 12:00 something",
    '  File "train.py", line 12, in <module>',
    "    x = torch.empty(1 << 40)",
    " lower=case",
    "\ufffd\ufffd\ufffd",
    "kern",
    "kern  :",
    "kern  :bogus : x",
    '{"ts": "2024-01-05T15:19:27Z", "msg": "oom"}',
]


@pytest.mark.parametrize(("line", "time_", "text", "kernel", "host"), CASES)
def test_strip_prefix(line: str, time_: str | None, text: str, kernel: bool, host: str | None) -> None:
    assert strip_prefix(line) == Prefixed(time_, text, kernel, host)


@pytest.mark.parametrize("line", UNCHANGED)
def test_unrecognised_lines_are_unchanged(line: str) -> None:
    assert strip_prefix(line) == Prefixed(None, line, False, None)


def test_bsd_stamp_without_tag_keeps_rest() -> None:
    got = strip_prefix("Jan  5 15:19:27 -- MARK --")
    assert got == Prefixed("Jan 5 15:19:27", "-- MARK --", False, None)


def test_stamp_alone() -> None:
    assert strip_prefix("[ 5864.708505]") == Prefixed("5864.708505", "", True, None)
    assert strip_prefix("[ 5864.708505] ") == Prefixed("5864.708505", "", True, None)
    assert strip_prefix("2024-01-05T15:19:27Z") == Prefixed("2024-01-05T15:19:27Z", "", False, None)


def test_outermost_time_and_host_win() -> None:
    got = strip_prefix("2024-03-01T10:11:12+00:00 h1 kernel: [  12.500000] " + OOM)
    assert got.time == "2024-03-01T10:11:12+00:00"
    assert got.host == "h1"
    assert got.kernel is True


def test_layers_are_bounded() -> None:
    line = "[ 1.0] " * 10 + "msg"
    got = strip_prefix(line)
    assert got.time == "1.0"
    assert got.kernel is True
    assert got.text.endswith("msg")
    assert got.text != "msg"  # at most a handful of layers are stripped


def test_prefixed_is_frozen() -> None:
    got = strip_prefix("[ 1.0] x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.text = "y"  # type: ignore[misc]


@pytest.mark.parametrize(
    "line",
    [
        "[" * 100_000,
        "[ " + "1" * 100_000,
        "[ " + "1" * 50_000 + "." + "2" * 50_000,
        "Jan " * 50_000,
        "Jan  5 15:19:27 " + "h" * 100_000,
        "Jan  5 15:19:27 " + "a " * 50_000,
        "2024-01-05T15:19:27Z " + "x" * 100_000,
        "2024-01-05T15:19:27Z " + "h[" * 50_000,
        "6,1," + "9" * 100_000,
        "[Mon " * 30_000,
        "kern " * 30_000,
        "<" * 100_000,
    ],
    ids=lambda line: f"{line[:12]!r}x{len(line)}",
)
def test_long_hostile_lines_are_fast(line: str) -> None:
    start = time.perf_counter()
    got = strip_prefix(line)
    assert time.perf_counter() - start < 0.5
    assert isinstance(got.text, str)
    assert len(got.text) <= len(line)


def test_very_long_message_kept_whole() -> None:
    msg = "x" * 1_000_000
    got = strip_prefix("[ 5864.708505] " + msg)
    assert got.text == msg


def test_many_lines_throughput() -> None:
    lines = [
        "[ 5864.708505] " + OOM,
        "Jan  5 15:19:27 myhost kernel: [ 5864.708440] " + OOM,
        "2024-01-05T15:19:27.123456789Z stderr F " + OOM,
        OOM,
        '  File "train.py", line 12, in <module>',
    ] * 20_000
    start = time.perf_counter()
    for line in lines:
        strip_prefix(line)
    assert time.perf_counter() - start < 5.0


def test_openwrt_logread_prefix() -> None:
    p = strip_prefix(
        "Sat Jan 25 09:40:15 2020 kern.err kernel: [22043.048568] Killed process 1039 (netifd) total-vm:1680kB"
    )
    assert (p.time, p.kernel, p.text) == (
        "Sat Jan 25 09:40:15 2020",
        True,
        "Killed process 1039 (netifd) total-vm:1680kB",
    )
    q = strip_prefix("Sat Jan 25 09:40:15 2020 daemon.info procd[1]: started")
    assert (q.kernel, q.text) == (False, "started")
