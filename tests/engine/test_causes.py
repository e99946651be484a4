"""Causes from facts: each appears only with its evidence, ranked by confidence."""

from __future__ import annotations

import json
from pathlib import Path

from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.rules.lint import lint
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner

RULES = load_rules()
HEADER = "[ 100.000001] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
TABLE = "[ 100.000002] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"


def _row(pid: int, pages: int, name: str = "python3") -> str:
    return f"[ 100.000003] [{pid:>7}]     0 {pid:>5}  {pages * 2:>7}  {pages:>7}  1000000        0             0 {name}"


def _kill(pid: int, kb: int, name: str = "python3") -> str:
    return (
        f"[ 100.000009] Out of memory: Killed process {pid} ({name}) total-vm:{kb * 2}kB, anon-rss:{kb}kB, "
        "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1000kB oom_score_adj:0"
    )


def _diag(log: str):
    scan = Scanner(RULES).scan("t.log", [log.encode()])
    return diagnose([scan], RULES)


def _ranks_report(sizes: list[int], victim: int = 0) -> str:
    rows = [_row(1000 + i, pages) for i, pages in enumerate(sizes)]
    return "\n".join([HEADER, TABLE, *rows, _kill(1000 + victim, sizes[victim] * 4)]) + "\n"


def test_keep_in_memory_with_equal_ranks_is_the_top_cause() -> None:
    log = "    ds = load_from_disk(args.data, keep_in_memory=True)\n" + _ranks_report([150_000] * 4)
    d = _diag(log)
    top = d.causes[0]
    assert top.id == "keep_in_memory_duplication"
    assert top.confidence >= 0.8
    assert any("4 processes named python3" in r for r in top.reasons)
    assert {e.line for e in top.evidence} >= {1}  # the keep_in_memory line is cited
    assert "load_from_disk(path)" in top.fix


def test_no_hint_no_claim() -> None:
    d = _diag(_ranks_report([150_000] * 4))
    assert [c.id for c in d.causes] == ["unknown"]
    assert d.causes[0].confidence == 0.0


def test_manager_cache_from_a_manager_traceback() -> None:
    log = (
        '  File "/usr/lib/python3.10/multiprocessing/managers.py", line 817, in _callmethod\n'
        "BrokenPipeError: [Errno 32] Broken pipe\n" + _ranks_report([40_000, 40_000, 300_000], victim=2)
    )
    d = _diag(log)
    assert d.causes[0].id == "manager_cache"
    # the table alone cannot tell this lone big python (no workers beside it) from the trainer
    assert d.causes[0].confidence >= 0.7 and d.cause_determined


def test_broken_pipes_alone_do_not_claim_a_manager() -> None:
    log = "BrokenPipeError: [Errno 32] Broken pipe\n" + _ranks_report([40_000, 40_000, 300_000], victim=2)
    assert "manager_cache" not in [c.id for c in _diag(log).causes]


def test_prefetch_and_pin_memory() -> None:
    log = "DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True, prefetch_factor=32)\n" + _ranks_report(
        [200_000, 60_000]
    )
    d = _diag(log)
    assert d.causes[0].id == "pin_memory_prefetch"
    assert any("prefetch_factor is 32" in r for r in d.causes[0].reasons)


def test_another_program_took_the_memory(tmp_path: Path) -> None:
    log = "\n".join(
        [HEADER, TABLE, _row(10, 9_000_000, "mysqld"), _row(11, 1_500_000), _kill(10, 36_000_000, "mysqld")]
    )
    d = _diag(log + "\n")
    assert d.causes[0].id == "other_process"
    assert any("mysqld" in r for r in d.causes[0].reasons)


def test_cuda_fragmentation_vs_plain_gpu_oom() -> None:
    frag = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 1.25 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB memory in use. "
        "Of the allocated memory 60.01 GiB is allocated by PyTorch, and 16.23 GiB is reserved by PyTorch but unallocated."
    )
    assert [c.id for c in _diag(frag + "\n").causes] == ["cuda_fragmentation"]
    plain = frag.replace("16.23 GiB is reserved", "0.23 GiB is reserved")
    assert [c.id for c in _diag(plain + "\n").causes] == ["gpu_memory_exceeded"]


def test_no_cause_without_a_memory_verdict() -> None:
    d = _diag("keep_in_memory=True\nepoch 1 loss 0.1\n")
    assert (d.verdict, d.causes) == ("no_oom_evidence", ())


def test_lint_rejects_cause_with_unknown_fact(tmp_path: Path) -> None:
    (tmp_path / "causes.yaml").write_text(
        "causes:\n  - id: cpu_offload\n    title: t\n    remedy: r\n    when: {fact: hints.no_such_hint, gt: 0}\n"
        "    mechanism: m\n    fix: f\n    confirm: c\n"
    )
    errors = [str(e) for e in lint(load_rules([tmp_path]))]
    assert any("causes.yaml:2: cpu_offload: unknown fact 'hints.no_such_hint'" in e for e in errors)


def test_torch1_fragmentation_from_reserved_minus_allocated() -> None:
    msg = (
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
        "10.53 GiB already allocated; 11.75 MiB free; 14.70 GiB reserved in total by PyTorch)"
    )
    d = _diag(msg + "\n")
    assert d.facts["cuda.tried_bytes"] == 20 << 20
    assert d.facts["cuda.total_bytes"] == round(15.78 * 2**30)
    assert [c.id for c in d.causes] == ["cuda_fragmentation"]
    tight = msg.replace("10.53 GiB already allocated", "14.69 GiB already allocated")
    assert [c.id for c in _diag(tight + "\n").causes] == ["gpu_memory_exceeded"]


def test_no_training_job_no_other_process_claim() -> None:
    """A database killed on a host with no Python processes: nothing says why (not 'another process')."""
    log = "\n".join(
        [HEADER, TABLE, _row(10, 9_000_000, "mysqld"), _row(12, 2_000, "sshd"), _kill(10, 36_000_000, "mysqld")]
    )
    assert [c.id for c in _diag(log + "\n").causes] == ["unknown"]


def test_a_cause_needs_a_one_line_remedy(tmp_path: Path) -> None:
    head = "causes:\n  - id: cpu_offload\n    title: t\n"
    tail = "    when: {fact: hints.cpu_offload, gt: 0}\n    mechanism: m\n    fix: f\n    confirm: c\n"
    cases = [
        ("", "missing required key 'remedy'"),
        (f"    remedy: {'x' * 161}\n", "remedy must be one line of 1 to 160 characters"),
    ]
    for remedy, says in cases:
        (tmp_path / "causes.yaml").write_text(head + remedy + tail)
        try:
            errors = [str(e) for e in lint(load_rules([tmp_path]))]
        except Exception as exc:  # a rule that cannot be loaded is refused at load time
            errors = [str(exc)]
        assert any(says in e for e in errors), errors


def test_a_measurement_that_contradicts_a_cause_rules_it_out() -> None:
    """Forked workers killed, but the agent measured their private memory growing by 2 MiB: not
    copy-on-write (dropped, and a note says why)."""
    from oomwatch.engine.model import LiveEvidence

    workers = [_row(2000 + i, 60_000, "pt_data_worker") for i in range(3)]
    log = "\n".join([HEADER, TABLE, _row(1999, 80_000), *workers, _kill(2000, 240_000, "pt_data_worker")]) + "\n"
    scan = Scanner(RULES).scan("t.log", [log.encode()])
    assert "cow_refcount_defeat" in [c.id for c in diagnose([scan], RULES).causes]
    live = LiveEvidence(facts={"history.workers": 3, "history.worker_uss_growth_bytes": 2 << 20})
    d = diagnose([scan], RULES, live=live)
    assert "cow_refcount_defeat" not in [c.id for c in d.causes]
    assert any(n.startswith("Not cow_refcount_defeat") and "2.0 MiB" in n for n in d.notes), d.notes


def test_an_undetermined_cause_is_said_plainly_everywhere() -> None:
    """Nothing discriminates: the text, Markdown and JSON say the cause is not determined, list what
    to collect, and an alert gets no fix."""
    from oomwatch.agent.incidents.ledger import NO_REMEDY, alert_cause
    from oomwatch.render.diagnosis import render_json, render_markdown, render_text

    d = _diag(_ranks_report([150_000] * 4))
    assert d.cause_determined is False and d.top_cause is None
    text = render_text(d)
    assert "Cause: not determined from this evidence" in text and "Why (1)" not in text
    assert "To tell the causes apart, collect:" in text and "the training script" in text
    assert "Cause: not determined" in render_markdown(d)
    doc = json.loads(render_json(d))
    assert doc["cause_determined"] is False
    assert alert_cause(doc) == ("unknown", NO_REMEDY) and "not determined" in NO_REMEDY


def test_a_close_second_leaves_the_cause_undetermined() -> None:
    from oomwatch.engine.causes import is_determined
    from oomwatch.engine.model import Cause

    def c(cid: str, conf: float) -> Cause:
        return Cause(cid, cid, conf, (), "", "")

    decide = RULES.decide
    assert is_determined([c("dataset_in_ram", 0.45), c("checkpoint_load_duplication", 0.2)], decide)
    assert not is_determined([c("dataset_in_ram", 0.45), c("checkpoint_load_duplication", 0.4)], decide)
    assert is_determined([c("other_process", 0.45 + 0.05), c("unbounded_cache", 0.2 + 0.2)], decide)  # a lead of 0.1
    assert not is_determined([c("dataset_in_ram", 0.35)], decide)
    assert not is_determined([c("unknown", 0.0)], decide)
    # a general form close behind agrees with the top cause; a third cause close behind does not
    refines = {r.id: r.refines for r in RULES.causes}
    kim, general = c("keep_in_memory_duplication", 0.95), c("dataset_in_ram", 0.9)
    assert not is_determined([kim, general], decide)
    assert is_determined([kim, general], decide, refines)
    assert is_determined([kim, general, c("rank0_extra", 0.2)], decide, refines)
    assert not is_determined([kim, general, c("rank0_extra", 0.9)], decide, refines)
    # the general form on top is not made specific by the special case behind it
    assert not is_determined([general, c("keep_in_memory_duplication", 0.85)], decide, refines)


def test_refines_names_causes_that_exist() -> None:
    from oomwatch.engine.rules.cause_rules import parse_cause

    base = {"id": "keep_in_memory_duplication", "title": "t", "remedy": "r", "when": {"fact": "kernel.kills", "gt": 0},
            "mechanism": "m", "fix": "f", "confirm": "c"}  # fmt: skip
    rule, errs = parse_cause({**base, "refines": ["dataset_in_ram"]}, "x.yaml", ("cgroup_oom",))
    assert rule is not None and rule.refines == ("dataset_in_ram",) and not errs
    assert "unknown cause 'no_such' in `refines`" in parse_cause({**base, "refines": ["no_such"]}, "x", ())[1]
    assert "`refines` must be a list of cause ids" in parse_cause({**base, "refines": "dataset_in_ram"}, "x", ())[1]
    assert "a cause cannot refine itself" in parse_cause({**base, "refines": [base["id"]]}, "x", ())[1]
