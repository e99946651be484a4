"""Facts that need no hint word: the activity of each rank's last lines, the shape of the job's memory
across its processes and over time, the calls in the code that ran."""

from __future__ import annotations

from oomwatch.engine.activity import activity_facts
from oomwatch.engine.code import code_facts, scan_program
from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.growth import growth_facts, shape
from oomwatch.engine.jobshape import Member, job_facts
from oomwatch.engine.model import Evidence, LiveEvidence, LiveProcess, Program, SourceFile
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import WINDOW, Scanner

RULES = load_rules()
MIB = 1 << 20


def _scan(name: str, text: str, chunks: int = 1):
    data = text.encode()
    step = max(1, len(data) // chunks)
    return Scanner(RULES).scan(name, [data[i : i + step] for i in range(0, len(data), step)])


# ------------------------------------------------------------------ activity


def test_each_ranks_last_activity_before_the_kill() -> None:
    log = "\n".join(
        [
            "[rank 0] step 10 loss 2.31",
            "[rank 1] step 10 loss 2.29",
            "[rank 0] Loading checkpoint /ckpt/last.pt",
            "[rank 1] Loading checkpoint /ckpt/last.pt",
            "E1201 09:28:44.984000 3292 api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 3299) of binary: /usr/bin/python",
            "[rank 1] Traceback (most recent call last):",
            "[rank 1] step 11 loss 2.28",  # after the kill: not what it was doing
        ]
    )
    scan = _scan("train.log", log + "\n")
    assert [line.no for line in scan.before_failure] == [1, 2, 3, 4]
    facts, evidence = activity_facts([scan], RULES.activities, RULES.streams, [])
    assert facts["activity.checkpoint_load"] == 2 and facts["activity.training"] == 0
    assert facts["activity.streams"] == 2 and facts["activity.last"] == "checkpoint_load"
    assert [e.line for e in evidence["checkpoint_load"]] == [3, 4]


def test_the_window_before_the_failure_crosses_chunks_and_keeps_line_numbers() -> None:
    filler = [f"iter {i}: loss 3.{i % 10}, time 212.4ms" for i in range(3000)]
    log = "\n".join([*filler, "loading dataset from /data/tokenized", "Killed"]) + "\n"
    scan = _scan("run.log", log, chunks=7)
    assert sum(len(line.text) + 1 for line in scan.before_failure) <= WINDOW
    last = scan.before_failure[-1]
    assert (last.no, last.text) == (3001, "loading dataset from /data/tokenized")
    assert scan.last_lines[-1].no == 3002
    facts, _ = activity_facts([scan], RULES.activities, RULES.streams, [])
    assert facts["activity.victim"] == "dataset_load"  # one stream: it is the victim's


def test_a_per_rank_log_file_names_its_rank_and_ends_at_the_kill() -> None:
    scan = _scan("job output /tmp/tel/none_x/attempt_0/3/stdout.log", "step 1 loss 2.0\nbuilding the FAISS index\n")
    assert scan.before_failure is None
    facts, _ = activity_facts([scan], RULES.activities, RULES.streams, [])
    assert facts["activity.index_build"] == 1


# ------------------------------------------------------------------ job shape


def _m(pid: int, role: str, mib: int, rank: int | None = None, name: str = "python") -> Member:
    return Member(pid, name, role, rank, mib * MIB, Evidence("t", pid, f"row {pid}"))


def test_ranks_alike_filling_the_limit() -> None:
    ranks = [_m(10 + i, "rank", m, i) for i, m in enumerate([340, 352, 360, 330])]
    facts, evidence = job_facts([_m(9, "launcher", 140, name="pt_elastic"), *ranks], [], 1536 * MIB, 10, None, "t")
    assert facts["job.ranks"] == 4 and facts["job.ranks_alike"] == 4
    assert facts["job.ranks_share"] > 0.85
    assert facts["job.top_rank_ratio"] < 1.1
    assert len(evidence["job:ranks"]) == 4


def test_one_rank_far_above_the_others() -> None:
    ranks = [_m(10, "rank", 900, 0), _m(11, "rank", 300, 1), _m(12, "rank", 320, 2), _m(13, "rank", 310, 3)]
    facts, evidence = job_facts(ranks, [], 4096 * MIB, 10, None, "t")
    assert facts["job.top_rank"] == 0 and facts["job.top_rank_ratio"] >= 2.8 and facts["job.top_rank_is_victim"]
    assert facts["job.ranks_alike"] == 3  # the three others are alike
    assert evidence["job:top_rank"][0].line == 10


def test_another_program_invoking_the_oom_killer() -> None:
    table = [_m(10, "rank", 200, 0), _m(11, "other", 600, name="sort")]
    facts, evidence = job_facts(table, table, 1024 * MIB, 10, "sort", "t")
    assert facts["job.outsider_name"] == "sort" and facts["job.outsider_share"] > 0.5
    assert facts["job.trigger_outside"] is True and facts["job.trigger_share"] > 0.5
    assert evidence["job:outsider"][0].line == 11


# ------------------------------------------------------------------ growth


def test_step_then_plateau_is_not_a_climb() -> None:
    step = [(0, 50 * MIB), (1, 400 * MIB), (2, 405 * MIB), (3, 404 * MIB), (4, 406 * MIB), (5, 407 * MIB)]
    climb = [(t, (50 + 60 * t) * MIB) for t in range(8)]
    assert shape(step)[0] == "step"
    assert shape(climb)[0] == "climb"
    assert shape([(t, 300 * MIB + t) for t in range(8)])[0] == "flat"


def test_growth_from_samples_and_from_printed_figures() -> None:
    victim = LiveProcess(7, "python", "rank", 0, "USS", tuple((float(t), (100 + 80 * t) * MIB) for t in range(6)))
    facts, lines = growth_facts(victim, [], 0)
    assert facts["growth.shape"] == "climb" and facts["growth.basis"] == "USS samples" and lines
    log = "".join(f"[rank 1] step {i} loss 2.{i} rss={1000 + 300 * i}MiB\n" for i in range(6))
    scan = _scan("train.log", log)
    facts, lines = growth_facts(None, scan.events, 1)
    assert facts["growth.shape"] == "climb" and facts["growth.basis"] == "printed memory figures"
    assert facts["growth.points"] == 6 and [e.line for e in lines] == [1, 6]


# ------------------------------------------------------------------ code


def _code(text: str, argv: tuple[str, ...] | None = None) -> dict:
    program = Program((SourceFile("train.py", text),), argv)
    hits, notes = scan_program(program, RULES.code)
    assert notes == []
    return code_facts(hits, RULES.code, program)


KIM = """
import argparse, datasets
p = argparse.ArgumentParser()
p.add_argument("--keep-in-memory", action="store_true")
args = p.parse_args()
ds = datasets.load_from_disk(args.data, keep_in_memory=args.keep_in_memory)
"""


def test_a_flag_decides_a_keyword_from_the_command_line() -> None:
    assert _code(KIM, ("python", "train.py", "--keep-in-memory"))["code.keep_in_memory"] == 1
    assert _code(KIM, ("python", "train.py"))["code.keep_in_memory"] == 0
    assert _code(KIM)["code.keep_in_memory"] == 0  # no command line: the default (store_true: False)


def test_a_conditional_keyword_takes_the_branch_its_flag_picks() -> None:
    src = """
import argparse
from torch.utils.data import DataLoader
p = argparse.ArgumentParser()
p.add_argument("--v2", action="store_true")
p.add_argument("--eager", action="store_true")
args = p.parse_args()
loader = DataLoader(ds, num_workers=2, prefetch_factor=2 if args.v2 else 24, pin_memory=not args.eager)
"""
    facts = _code(src, ("python", "train.py"))
    assert facts["code.prefetch_factor.value"] == 24 and facts["code.pin_memory"] == 1
    facts = _code(src, ("python", "train.py", "--v2", "--eager"))
    assert facts["code.prefetch_factor"] == 0 and facts["code.pin_memory"] == 0
    # a test that is not a known flag: the value is not known (counted, as a keyword of unknown value is)
    unknown = src.replace("if args.v2", "if cfg.small")
    assert _code(unknown, ("python", "train.py"))["code.prefetch_factor"] == 1


def test_a_dataclass_field_and_an_unknown_value() -> None:
    hf = """
from dataclasses import dataclass, field
@dataclass
class DataArguments:
    keep_in_memory: bool = field(default=False)
ds = load_from_disk(path, keep_in_memory=data_args.keep_in_memory)
"""
    assert _code(hf, ("train.py", "--keep_in_memory"))["code.keep_in_memory"] == 1
    assert _code(hf, ("train.py",))["code.keep_in_memory"] == 0
    # a value no definition in the files gives is counted, and said so in the evidence
    program = Program((SourceFile("t.py", "ds = load_from_disk(p, keep_in_memory=cfg.kim)\n"),))
    hits, _ = scan_program(program, RULES.code)
    assert [h.rule for h in hits] == ["keep_in_memory"] and "not known" in hits[0].evidence.text


def test_code_facts_are_unknown_without_code() -> None:
    facts = code_facts([], RULES.code, None)
    assert facts["code.files"] == 0 and facts["code.torch_load"] is None


def _four_ranks_killed() -> str:
    """A cgroup's OOM report: four torchrun ranks with equal anonymous RSS filling it, one killed."""
    rows = "\n".join(
        f"[ 10.1] [  {pid}]     0 {pid}   535505   {anon + 52000}    {anon}    52000         0  1462272        0"
        "             0 python"
        for pid, anon in ((2913, 90000), (2914, 88000), (2915, 91000), (2916, 86000))
    )
    return "\n".join(
        [
            "[ 10.0] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
            "[ 10.0] memory: usage 1536000kB, limit 1536000kB, failcnt 0",
            "[ 10.1] Tasks state (memory values in pages):",
            "[ 10.1] [  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes swapents"
            " oom_score_adj name",
            "[ 10.1] [  2889]     0  2889   216056    70469    37412    33057         0   765952        0"
            "             0 pt_elastic",
            rows,
            "[ 10.2] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/job,"
            "task_memcg=/job,task=python,pid=2915,uid=0",
            "[ 10.2] Memory cgroup out of memory: Killed process 2915 (python) total-vm:2142084kB, anon-rss:364000kB, "
            "file-rss:208000kB, shmem-rss:0kB, UID:0 pgtables:1428kB oom_score_adj:0",
        ]
    )


def test_the_seed_case_is_named_from_the_task_table_and_the_last_lines() -> None:
    """Four torchrun ranks with equal anonymous RSS filling a cgroup, each printing only that it is
    loading the dataset: a duplication cause, without a hint word; with the script, keep_in_memory."""
    kernel = _four_ranks_killed()
    console = "".join(f"[rank {r}] loading dataset\n" for r in range(4))
    scans = [_scan("console.txt", console), _scan("dmesg.txt", kernel + "\n")]
    d = diagnose(scans, RULES)
    assert d.verdict == "cgroup_oom" and d.victims[0].role == "rank"
    assert d.causes[0].id == "dataset_in_ram" and d.cause_determined, [(c.id, c.confidence) for c in d.causes]
    code = Program((SourceFile("train.py", "ds = load_from_disk(p, keep_in_memory=True)\n"),), ("train.py",))
    d = diagnose(scans, RULES, program=code)
    assert d.causes[0].id == "keep_in_memory_duplication" and d.cause_determined
    assert any(e.file == "train.py" for e in d.causes[0].evidence)


def test_ranks_alike_after_many_training_steps_are_no_copy_of_the_data() -> None:
    """The same kernel report, the ranks having printed their training steps: killed at step 3 the ranks alike
    still say a copy each (a dataset and the first batches); killed at step 60 they grew alike over the steps."""
    for step, copy in ((3, True), (60, False)):
        console = "".join(
            f"[rank {r}] step {n}/250 loss=0.52 lr=3.0e-04\n" for n in range(1, step + 1) for r in range(4)
        )
        d = diagnose([_scan("console.txt", console), _scan("dmesg.txt", _four_ranks_killed() + "\n")], RULES)
        assert d.facts["activity.steps_before_kill"] == step
        said = [r for c in d.causes if c.id == "dataset_in_ram" for r in c.reasons]
        assert any("a copy each" in r for r in said) is copy, (step, said)


def test_memory_that_rose_as_files_were_read_is_a_load() -> None:
    """The agent's samples of a rank whose USS climbed 20x while it read as much from files: a load
    (a dataset, a checkpoint read in), not an accumulation, even with nothing printed."""
    points = tuple((float(t), (20 + 60 * t) * MIB) for t in range(6))
    loading = LiveProcess(
        7, "python", "rank", 0, "USS", points, tuple((float(t), (5 + 55 * t) * MIB) for t in range(6))
    )
    leaking = LiveProcess(7, "python", "rank", 0, "USS", points, tuple((float(t), 5 * MIB) for t in range(6)))
    facts, lines = growth_facts(loading, [], 0)
    assert facts["growth.shape"] == "climb" and facts["growth.read_share"] >= 0.9
    assert "it read 275.0 MiB meanwhile" in lines[0].text
    assert growth_facts(leaking, [], 0)[0]["growth.read_share"] == 0.0


def test_a_job_that_never_reached_a_training_step_ran_out_setting_up() -> None:
    from oomwatch.engine.activity import before_training

    loading = _scan("console.txt", "loading /data/corpus.jsonl\nread 152000 documents\nKilled\n")
    assert before_training([loading], RULES.activities) is True
    training = _scan("console.txt", "loading /data/corpus.jsonl\nstep 10 loss 2.3\nKilled\n")
    assert before_training([training], RULES.activities) is False
    silent = _scan("console.txt", "Killed\n")  # it said nothing of what it did
    assert before_training([silent], RULES.activities) is None
    long = _scan(
        "console.txt", "".join(f"warning {i}: " + "x" * 80 + "\n" for i in range(2000)) + "loading data\nKilled\n"
    )
    assert before_training([long], RULES.activities) is None  # its start is not in the window: steps may be there


def test_separate_programs_sharing_a_limit() -> None:
    from oomwatch.agent.analyze.job import programs

    samples = [
        {"pid": 10, "ppid": 1, "comm": "bash", "anon": 1 << 20},
        {"pid": 11, "ppid": 10, "comm": "python", "anon": 600 << 20},  # started by the shell: a program
        {"pid": 12, "ppid": 10, "comm": "python", "anon": 200 << 20},  # its sibling: another program
        {"pid": 13, "ppid": 11, "comm": "pt_data_worker", "anon": 300 << 20},  # started by 11: part of it
        {"pid": 20, "ppid": 1, "comm": "pt_elastic", "anon": 100 << 20},
        {"pid": 21, "ppid": 20, "comm": "python", "anon": 500 << 20},  # a rank: part of the launcher's
    ]
    assert [(pid, comm) for pid, comm, _ in programs(samples)] == [(11, "python"), (12, "python"), (20, "pt_elastic")]


def test_a_jobs_processes_are_one_program_whoever_their_parent_is_now() -> None:
    from oomwatch.agent.analyze.job import programs

    samples = [
        {"pid": 30, "ppid": 1, "comm": "python", "anon": 600 << 20, "job": "tree-30", "in_job": True},
        {
            "pid": 31,
            "ppid": 1,
            "comm": "pt_data_worker",
            "anon": 300 << 20,
            "job": "tree-30",
            "in_job": True,
        },  # orphaned
        {"pid": 40, "ppid": 1, "comm": "python", "anon": 200 << 20, "job": None, "in_job": False},
    ]
    assert programs(samples, by_job=True) == ((30, "python", 600 << 20), (40, "python", 200 << 20))
    assert len(programs(samples)) == 3  # by parents alone, the orphaned worker looks like a program of its own


def _memcg_kill(victim: int, limit_kb: int = 1024000) -> str:
    return "\n".join(
        [
            "[ 20.0] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
            f"[ 20.0] memory: usage {limit_kb}kB, limit {limit_kb}kB, failcnt 0",
            "[ 20.1] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/job,"
            f"task_memcg=/job,task=python,pid={victim},uid=0",
            f"[ 20.1] Memory cgroup out of memory: Killed process {victim} (python) total-vm:2142084kB, "
            "anon-rss:364000kB, file-rss:20800kB, shmem-rss:0kB, UID:0 pgtables:1428kB oom_score_adj:0",
        ]
    )


def test_a_climb_that_is_a_sliver_of_the_limit_did_not_fill_it() -> None:
    """A steady climb in the victim's samples counts for an accumulation only when, in every process
    of its role, it is a real share of the limit: 42 MiB of 1000 MiB in the one main process is not
    what filled it; the same climb in each of 4 workers of a 160 MiB limit is."""

    def live(role: str, n: int, rise: int) -> LiveEvidence:
        points = tuple((t * 0.2, (12 + rise * t // 9) * MIB) for t in range(10))
        return LiveEvidence(processes=tuple(LiveProcess(7 + i, "python", role, None, "USS", points) for i in range(n)))

    scans = [_scan("dmesg.txt", _memcg_kill(7) + "\n")]
    d = diagnose(scans, RULES, live=live("rank", 1, 42))
    assert d.facts["growth.shape"] == "climb" and d.facts["growth.capacity_share"] < 0.1
    cache = next((c for c in d.causes if c.id == "unbounded_cache"), None)
    assert cache is None or not any("climbed steadily" in r for r in cache.reasons), cache
    d = diagnose([_scan("dmesg.txt", _memcg_kill(7, 160 * 1024) + "\n")], RULES, live=live("dataloader_worker", 4, 42))
    assert d.facts["growth.capacity_share"] >= 0.1
    cache = next(c for c in d.causes if c.id == "unbounded_cache")
    assert any("climbed steadily" in r for r in cache.reasons), cache.reasons


def test_a_climb_is_read_against_the_steps_when_they_slowed_near_the_limit() -> None:
    """2 MiB kept every step, at 40 steps/s for 4 s and then 5 steps/s (the kernel reclaiming for every
    page): over time 80% of the rise came in the first 38% and it "held" (a step: loaded, not accumulated);
    against the steps the job printed it is a straight climb. A load before the steps stays a step."""
    times = [t * 0.5 for t in range(21)]

    def steps_at(t: float) -> float:
        return 40 * t if t <= 4 else 160 + 5 * (t - 4)

    progress = tuple((t, int(steps_at(t))) for t in times[1:])
    leak = LiveProcess(7, "python", "rank", 0, "USS", tuple((t, int((300 + 2 * steps_at(t)) * MIB)) for t in times))
    facts, _ = growth_facts(leak, [], 0)
    assert facts["growth.shape"] == "step" and facts["growth.axis"] == "time"
    facts, lines = growth_facts(leak, [], 0, progress=progress)
    assert facts["growth.shape"] == "climb" and facts["growth.axis"] == "steps", facts
    assert "against the job's training steps a climb" in lines[0].text and ": step;" in lines[0].text
    # a dataset read in before the first step, then steps at a steady pace: a load, on either clock
    load = LiveProcess(7, "python", "rank", 0, "USS", tuple((t, (300 if t < 2 else 900) * MIB) for t in times))
    late = tuple((t, int(40 * (t - 2))) for t in times if t >= 2)
    assert growth_facts(load, [], 0, progress=late)[0]["growth.shape"] == "step"
