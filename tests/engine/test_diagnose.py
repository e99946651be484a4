"""The pure engine from lines to a Diagnosis: verdict precedence, notes, linking."""

from __future__ import annotations

from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner

RULES = load_rules()
KILL = "[ 200.000000] Out of memory: Killed process 4242 (pt_main_thread) total-vm:100kB, anon-rss:2048kB, file-rss:4kB, shmem-rss:0kB"
CUDA = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.25 GiB is free."
ELASTIC = "E0101 00:00:00.000000 1 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 3 (pid: 4242) of binary: /usr/bin/python3"


def _diag(*files: tuple[str, str]):
    scanner = Scanner(RULES)
    return diagnose([scanner.scan(name, [text.encode()]) for name, text in files], RULES)


def test_cuda_oom_before_host_kill_is_said() -> None:
    d = _diag(("train.log", f"step 1\n{CUDA}\n{KILL}\n"))
    assert d.verdict == "host_oom" and d.confirmed
    assert any("CUDA out-of-memory error comes before the kernel's kill" in n for n in d.notes)


def test_host_kill_before_cuda_oom_is_said() -> None:
    d = _diag(("train.log", f"{KILL}\n{CUDA}\n"))
    assert d.verdict == "host_oom"
    assert any("killed a process before any CUDA out-of-memory error" in n for n in d.notes)


def test_cuda_oom_alone() -> None:
    d = _diag(("train.log", f"{CUDA}\n"))
    assert (d.verdict, d.confirmed) == ("cuda_oom", True)
    assert d.victims == ()


def test_launcher_pid_links_to_kernel_victim_across_files() -> None:
    d = _diag(("torchrun.log", ELASTIC + "\n"), ("dmesg.txt", KILL + "\n"))
    v = d.victims[0]
    assert (v.pid, v.name, v.role, v.rank, v.anon_rss_bytes) == (4242, "pt_main_thread", "rank", 3, 2048 * 1024)
    assert {e.file for e in v.evidence} == {"torchrun.log", "dmesg.txt"}
    assert len(d.victims) == 1


def test_sigkill_without_kernel_report_is_unconfirmed_host_oom() -> None:
    d = _diag(("torchrun.log", ELASTIC + "\n"))
    assert (d.verdict, d.confirmed) == ("host_oom", False)
    assert (d.victims[0].pid, d.victims[0].role, d.victims[0].rank) == (4242, "rank", 3)
    assert any("dmesg" in s for s in d.next_steps)


def test_sigkill_with_a_kernel_log_that_has_no_oom_is_unexplained() -> None:
    dmesg = "".join(f"[ {i}.000000] usb 1-1: new high-speed USB device number {i}\n" for i in range(1, 60))
    d = _diag(("torchrun.log", ELASTIC + "\n"), ("dmesg.txt", dmesg))
    assert (d.verdict, d.confirmed) == ("sigkill_unexplained", False)


def test_trigger_is_not_the_victim_note() -> None:
    header = "[ 199.000000] sed invoked oom-killer: gfp_mask=0x201da, order=0, oom_score_adj=0\n[ 199.000001] CPU: 1 PID: 777 Comm: sed Not tainted 5.15.0 #1\n"
    d = _diag(("dmesg.txt", header + KILL + "\n"))
    assert d.victims[0].pid == 4242
    assert any("invoked by sed (pid 777)" in n for n in d.notes)


def test_nothing_found() -> None:
    d = _diag(("train.log", "epoch 1 loss 0.3\nepoch 2 loss 0.2\n"))
    assert (d.verdict, d.confirmed, d.victims, d.evidence) == ("no_oom_evidence", False, (), ())


def test_same_input_same_diagnosis() -> None:
    text = f"{ELASTIC}\n{CUDA}\n{KILL}\n"
    assert _diag(("a", text)).to_json() == _diag(("a", text)).to_json()


def test_selected_process_stands_in_when_the_kill_line_is_missing() -> None:
    d = _diag(
        (
            "syslog",
            "Jan 28 19:58:45 gce kernel: [  455.498827] Out of memory: Kill process 1532 (badsysprogram) score 919 or sacrifice child\n",
        )
    )
    assert (d.verdict, d.confirmed) == ("host_oom", True)
    assert (d.victims[0].pid, d.victims[0].name, d.victims[0].anon_rss_bytes) == (1532, "badsysprogram", None)


def test_a_rank_reported_on_several_launcher_lines_counts_once() -> None:
    # torchrun names a killed rank in its log line and twice more in its summary (rank, then pid)
    summary = "\n".join(
        [
            ELASTIC,
            "Failures:",
            "[1]:",
            "  rank      : 1 (local_rank: 1)",
            "  exitcode  : -15 (pid: 4243)  (SIGTERM)",
            "  traceback : Signal 15 (SIGTERM) received by PID 4243",
            "Root Cause (first observed failure):",
            "[0]:",
            "  rank      : 3 (local_rank: 3)",
            "  exitcode  : -9 (pid: 4242)  (SIGKILL)",
            "  traceback : Signal 9 (SIGKILL) received by PID 4242",
        ]
    )
    d = _diag(("torchrun.log", summary + "\n"))
    assert (d.facts["launcher.ranks_failed"], d.facts["launcher.ranks_killed"]) == (2, 1)
    # two ranks killed, each named by its own pid
    other = ELASTIC.replace("local_rank: 3 (pid: 4242)", "local_rank: 2 (pid: 4244)")
    d = _diag(("torchrun.log", f"{ELASTIC}\n{other}\n"))
    assert (d.facts["launcher.ranks_failed"], d.facts["launcher.ranks_killed"]) == (2, 2)


# A 3.10-era report cut after its first lines: the trigger's cpuset names where it ran.
HEADER_310 = "[ 9.1] thrash invoked oom-killer: gfp_mask=0xd0, order=0, oom_score_adj=0\n"


def test_report_of_a_task_in_a_container_is_probably_its_limit() -> None:
    for cpuset in (
        "91091d5382d54a44e697e224ebccba7f587c43184bfb51b123cf8c16920598d9",
        "docker-08028fe1cf868eab49a1d1255bb05a2286a305562af7e4402248e3008b638c80.scope",
        "/kubepods/burstable/pod77f06c5c-4593-43e9-b970-987f6ecb825b/0123456789ab",
    ):
        d = _diag(("messages", f"{HEADER_310}[ 9.1] thrash cpuset={cpuset} mems_allowed=0-1\n"))
        assert (d.verdict, d.confirmed) == ("cgroup_oom", False), cpuset
        assert cpuset in d.summary


def test_report_of_a_task_outside_containers_or_with_the_hosts_meminfo_stays_host() -> None:
    d = _diag(("messages", f"{HEADER_310}[ 9.1] thrash cpuset=/ mems_allowed=0\n"))
    assert d.verdict == "host_oom"
    # only a global OOM prints the host's Mem-Info: a container's process hit the host's limit
    docker = "docker-08028fe1cf868eab49a1d1255bb05a2286a305562af7e4402248e3008b638c80.scope"
    d = _diag(("messages", f"{HEADER_310}[ 9.1] thrash cpuset={docker} mems_allowed=0\n[ 9.2] 4194304 pages RAM\n"))
    assert d.verdict == "host_oom"


def test_of_a_userspace_killers_several_kills_the_latest_named_pid_is_the_victim() -> None:
    log = (
        "Jan 09 14:32:25 H systemd-oomd[70]: oomd attempting to kill 113 with KILL\n"
        "Jan 09 14:32:25 H systemd-oomd[70]: oomd attempting to kill 118 with KILL\n"
        "Jan 09 14:32:25 H systemd-oomd[70]: oomd attempting to kill 108 with KILL\n"
        "Jan 09 14:32:26 H systemd[1]: x.service: systemd-oomd killed 1 process(es) in this unit.\n"
    )
    d = _diag(("journal", log))
    assert d.verdict == "userspace_oom_kill"
    assert d.victims[0].pid == 108
