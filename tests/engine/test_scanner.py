"""The scanner on bytes: line numbers survive, every prefilter backend agrees, hostile
input is bounded. No files: chunks are given directly (the engine does no I/O)."""

from __future__ import annotations

import pytest

from oomwatch.engine.prefilter import available_backends
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner

RULES = load_rules()
WORKER = b"RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. "
KILLED = (
    b"Out of memory: Killed process 4242 (pt_data_worker) total-vm:100kB, anon-rss:2048kB, file-rss:4kB, shmem-rss:0kB"
)


def _scan(data: bytes, chunk: int = 1 << 20, backend: str | None = None, max_line: int | None = None):
    scanner = (
        Scanner(RULES, backend=backend) if max_line is None else Scanner(RULES, backend=backend, max_line=max_line)
    )
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    return scanner.scan("t.log", chunks)


def _log() -> bytes:
    lines = [b"step %d loss 0.5" % i for i in range(1000)]
    lines[500] = WORKER
    lines[700] = b"[ 1234.567890] " + KILLED
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("chunk", [7, 64, 4096, 1 << 20])
def test_line_numbers_survive_any_chunking(chunk: int) -> None:
    result = _scan(_log(), chunk=chunk)
    assert [(e.kind, e.line.no) for e in result.events] == [("dataloader_worker_killed", 501)]
    assert [(r.victim_pid, r.last_line) for r in result.reports] == [(4242, 701)]
    assert result.info is not None and result.info.lines == 1000


@pytest.mark.parametrize("backend", available_backends())
def test_backends_agree(backend: str) -> None:
    base = _scan(_log(), backend="re")
    other = _scan(_log(), backend=backend)
    assert [(e.rule, e.line.no, e.fields) for e in other.events] == [(e.rule, e.line.no, e.fields) for e in base.events]
    assert other.reports == base.reports


@pytest.mark.parametrize("backend", available_backends())
def test_task_rows_without_an_anchor_are_found(backend: str) -> None:
    """No literal anchor is in a task-table row: the prefilter's pattern finds it, on every backend."""
    rows = [
        b"[ 1433.437419] [   6762]  1000  6762   898879   127313  2678784    \t0         \t0 firefox",
        b"[ 1433.437425] [   7251]  1000  7251   525959\t28506   905216    \t0         \t0 okular",
        b"[ 1433.437426] [   7332]  1000  7332   163601\t17699  1916928    \t0         \t0 slack",
    ]
    data = b"\n".join([b"step 1 loss 0.5"] * 300 + rows + [b"step 2 loss 0.4"] * 300) + b"\n"
    (report,) = _scan(data, chunk=4096, backend=backend).reports
    assert [t.name for t in report.tasks] == ["firefox", "okular", "slack"]
    assert report.first_line == 301


def test_crlf_nul_ansi_and_carriage_return_runs() -> None:
    data = (
        b"epoch 1\r\n"
        b"\x1b[31m" + WORKER + b"\x1b[0m\r\n"
        b" 10%|#  | 1/10\r 20%|## | 2/10\r" + WORKER.replace(b"4242", b"4343") + b"\r\n"
        b"\x00\x00bin\xff\xfeary\n"
    )
    result = _scan(data)
    assert [(e.line.no, e.fields["pid"]) for e in result.events] == [(2, "4242"), (3, "4343")]
    assert result.events[0].line.text.startswith("RuntimeError")


def test_no_trailing_newline_and_empty_input() -> None:
    result = _scan(WORKER)
    assert [e.line.no for e in result.events] == [1]
    empty = _scan(b"")
    assert empty.events == [] and empty.info is not None and empty.info.lines == 0


def test_overlong_line_is_cut_counted_and_said() -> None:
    long_line = b"x" * 5000 + WORKER + b"y" * 5000
    data = b"first\n" + long_line + b"\n" + WORKER + b"\n"
    result = _scan(data, chunk=1024, max_line=2048)
    # the long line's anchor lies past the cut: only the last line is seen, numbered right
    assert [e.line.no for e in result.events] == [3]
    assert result.info is not None and result.info.truncated_lines == 1
    assert any("longer than 2048 bytes" in n for n in result.notes)


def test_cut_off_kernel_report_does_not_swallow_the_rest() -> None:
    head = b"[ 1.000000] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
    body = b"".join(b"step %d loss 0.1\n" % i for i in range(5000))
    result = _scan(head + body + WORKER + b"\n")
    assert len(result.reports) == 1 and result.reports[0].victim_pid is None
    assert [e.line.no for e in result.events] == [5002]


@pytest.mark.parametrize("backend", available_backends())
def test_only_the_anchors_found_are_tried_yet_decoding_loses_none(backend: str) -> None:
    """The scanner tries on a line only the rules of the anchors the prefilter found in its bytes; an
    anchor that only decoding makes whole (an escape inside it) is still tried, as with stdlib re."""
    lines = [b"step %d loss 0.5" % i for i in range(300)]
    lines[100] = b"[ 1234.567890] Out of memory: Kil\x1b[0mled process 4242 (python) total-vm:100kB, anon-rss:2048kB"
    lines[200] = WORKER.replace(b"is killed", b"is \x1b[31mki\x1b[0mlled")
    lines[250] = b"Process exited: pid=31337 returncode=-9 lr=1e-9 RSS: 2048 MB"
    data = b"\n".join(lines) + b"\n"
    base, other = _scan(data, backend="re"), _scan(data, backend=backend)
    assert [(e.rule, e.line.no, e.fields) for e in other.events] == [(e.rule, e.line.no, e.fields) for e in base.events]
    assert other.reports == base.reports
    assert {e.line.no for e in other.events} >= {201, 251}


BENIGN_LOOKALIKES = [
    b"{'loss': 0.4123, 'grad_norm': 1.234, 'learning_rate': 1.000e-09, 'epoch': 0.12}",
    b"scheduler: warmup done, lr=1e-9 -> 3.2e-05 at step 400",
    b"[2024-05-01 10:00:01,000] [INFO] [trainer.py:12] step=12 tokens/s=12345 mem_alloc=12.3GB",
    b"[ 9123.456795] CPU: 7 PID: 31337 Comm: kworker/7:1 Not tainted 5.15.0-91-generic #101-Ubuntu",
    b"[   12.000000] usb 1-9: new high-speed USB device number 9 using xhci_hcd",
    b"[   13.000000] mlx5_core 0000:3b:00.1: mlx5_fw_tracer_handle_traces:740:(pid 912): FW trace -91",
    b"Epoch 3:  98%|#########| 980/1000 [00:98<00:01, 4.12it/s, loss=0.4123, v_num=0]",
]


@pytest.mark.parametrize("line", BENIGN_LOOKALIKES)
def test_common_lines_are_no_candidates(line: bytes) -> None:
    """Anchors are selective: the lines a training or kernel log is made of (a learning rate of 1e-9,
    `mem_alloc=`, a kernel version `5.15.0-91`) hold none, so the scanner never decodes them."""
    assert Scanner(RULES).prefilter.hits(line) == []


def test_a_flood_of_one_hint_is_thinned_evenly_and_keeps_the_others() -> None:
    """20,000 memory figures printed every step, a config line in their middle: the config line is
    kept, the figures are thinned to at most HINT_HEAD + HINT_MIDDLE + HINT_TAIL spread over the whole
    run, their count and the series' order stay those of the input, and the note says so."""
    from oomwatch.engine import growth
    from oomwatch.engine.facts import compute_facts
    from oomwatch.engine.kept_events import HINT_HEAD, HINT_MIDDLE, HINT_TAIL

    n = 20_000
    lines = [b"step %d loss 0.5 RSS: %d MB" % (i, 1000 + i // 10) for i in range(n)]
    lines.insert(n // 2, b"dataset = load_from_disk(path, keep_in_memory=True)")
    result = _scan(b"\n".join(lines) + b"\n")
    figures = [e for e in result.events if e.kind == "hint" and e.fields.get("hint") == "host_memory"]
    assert HINT_HEAD + HINT_TAIL < len(figures) <= HINT_HEAD + HINT_MIDDLE + HINT_TAIL
    assert any(e.fields.get("hint") == "keep_in_memory" for e in result.events)
    assert [e.line.no for e in result.events] == sorted(e.line.no for e in result.events)
    (series,) = growth.printed_series(result.events).values()
    order = [x for x, _, _ in series]
    assert order[0] == 0 and order[-1] == n - 1 and order == sorted(order)  # the whole run, in its order
    facts = compute_facts([], result.events, [], [], ["hint"], ["host_memory"])
    assert facts["hints.host_memory"] == n
    assert any("thinned out" in note for note in result.notes)


def test_a_few_hints_are_all_kept() -> None:
    lines = b"\n".join(b"step %d RSS: %d MB" % (i, 1000 + i) for i in range(500)) + b"\n"
    result = _scan(lines)
    assert len([e for e in result.events if e.kind == "hint"]) == 500
    assert not any("thinned" in note for note in result.notes)
