"""The estimator's model and projection on traces of known shape: a per-rank copy, a worker that grows, limits."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from oomwatch.engine.progress import Progress
from oomwatch.estimate.fixes import GC_PASS, VALUES_SHARE, WORKER_FLOOR, fixed_models, seen_mechanisms
from oomwatch.estimate.inputs import EstimateInputError, from_report
from oomwatch.estimate.model import JobPoint, Point, Trace, build, process_model
from oomwatch.estimate.project import Scale, loaded, project
from oomwatch.estimate.steps import clock
from oomwatch.render.estimate import render_text
from tests.conftest import FIXTURES

MIB = 1 << 20


def trace(pid: int, role: str, values: list[int], rank: int | None = None, rss: int | None = None) -> Trace:
    """Samples every 0.5 s; RSS grows with the private set (new memory), or stays at ``rss`` (pages un-shared:
    a forked worker's anonymous memory is then its parent's: ``rss`` less 100 MiB of files)."""
    t = Trace(pid, role, rank, "python")
    t.points = [
        Point(i * 0.5, v, v + 20 * MIB, rss or v + 60 * MIB, rss - 100 * MIB if rss else v)
        for i, v in enumerate(values)
    ]
    return t


def loads(start: int, copy: int, n: int = 40, at: int = 6) -> list[int]:
    """A rank that starts at ``start`` and loads ``copy`` bytes over two samples at sample ``at``, then stays."""
    return [start if i < at else start + copy // 2 if i == at else start + copy for i in range(n)]


def test_a_per_rank_copy_scales_with_the_ranks_and_its_fix_shares_one_copy():
    ranks = [trace(10 + r, "rank", loads(200 * MIB, 500 * MIB), rank=r) for r in range(2)]
    launcher = trace(9, "launcher", [30 * MIB] * 40)
    model = build([launcher, *ranks])
    rank = model.roles["rank"]
    assert rank.seen == 2 and rank.peak == 700 * MIB and rank.step == 500 * MIB and rank.settled
    assert model.roles["launcher"].per == "node" and model.basis == "processes"
    assert model.shared_unreclaimable == 3 * 20 * MIB  # PSS beyond USS of each process, once

    four = project(model, Scale(ranks=4, workers=0), limit=1500 * MIB)
    assert four.needed == 30 * MIB + 4 * 700 * MIB + 60 * MIB
    assert four.verdict == "over"
    ((cause, _, fixed, assumption),) = fixed_models(model, ["keep_in_memory_duplication", "keep_in_memory_duplication"])
    mapped = project(fixed, Scale(ranks=4, workers=0), limit=1500 * MIB)
    assert cause == "keep_in_memory_duplication" and "500 MiB" in assumption
    assert mapped.needed == 30 * MIB + 4 * 200 * MIB + 60 * MIB and mapped.verdict == "fits"
    assert mapped.with_cache - mapped.needed == 500 * MIB  # the one shared copy, in the page cache


def test_a_rank_that_kept_what_it_read_holds_a_copy_beside_its_frameworks_memory():
    """From the samples alone (no diagnosis): a rank that read a 340 MiB checkpoint and kept it as it read it holds
    a per-rank copy, beside 450 MiB its framework allocated reading little (a real first contact: read against
    all it grew by, the copy was hidden); a rank that streams 1 GiB through and keeps nothing holds none."""

    def reading(values: list[int], read: list[int]) -> Trace:
        t = trace(10, "rank", values, rank=0)
        t.points = [replace(p, rchar=r) for p, r in zip(t.points, read, strict=True)]
        return t

    grows = [15 * MIB + min(i, 9) * 50 * MIB for i in range(12)] + [465 * MIB + 340 * MIB] * 28  # imports, then load
    read = [min(i, 9) * 4 * MIB for i in range(12)] + [36 * MIB + 340 * MIB] * 28
    model = build([reading(grows, read)])
    assert model.roles["rank"].read_kept == 340 * MIB + 36 * MIB  # what the imports read is in too: tens of MiB
    assert seen_mechanisms(model) == ["per_rank_copy"]
    streams = reading([200 * MIB] * 40, [i * 26 * MIB for i in range(40)])  # 1 GiB read, nothing kept
    assert build([streams]).roles["rank"].read_kept == 0 and seen_mechanisms(build([streams])) == []


def test_workers_scale_with_ranks_times_workers_and_a_growing_one_is_extended_to_the_full_run():
    main = trace(1, "rank", [600 * MIB] * 40, rank=0)
    # copy-on-write: its USS climbs while its RSS stays (the parent's pages, un-shared); it took most of it early
    # (pages of small objects: touching a few un-shares the page) and still creeps up 4 MiB/s at the end
    climb = [20 * MIB + min(i, 8) * 50 * MIB + max(0, i - 8) * 2 * MIB for i in range(40)]  # to 482 of its 600
    worker = trace(2, "dataloader_worker", climb, rss=700 * MIB)
    model = build([main, worker])
    w = model.roles["dataloader_worker"]
    assert not w.settled and not w.split and w.growth == pytest.approx(4 * MIB, rel=0.01)
    assert model.workers_per_rank == 1
    short = project(model, Scale(ranks=2, workers=4))
    assert [(s.role, s.count) for s in short.shares] == [("dataloader_worker", 8), ("rank", 2)]
    assert short.shares[0].each == w.peak  # each un-shares its parent's pages whatever the count
    longer = project(model, Scale(ranks=2, workers=4, seconds=model.seconds + 60))
    assert longer.needed - short.needed == pytest.approx(8 * 60 * 4 * MIB, rel=0.01)
    assert longer.high > longer.needed  # still growing: the interval widens
    assert any("still grew" in a for a in longer.assumptions)
    ((_, _, fixed, _),) = fixed_models(model, ["cow_refcount_defeat"])
    # its anonymous memory stayed its parent's: it allocated nothing, and keeps only the interpreter's pages
    assert fixed.roles["dataloader_worker"].peak == WORKER_FLOOR and fixed.roles["dataloader_worker"].growth == 0

    # un-sharing that climbs with the samples to its end (large per-sample objects) is split among more workers
    steady = trace(2, "dataloader_worker", [20 * MIB + i * 5 * MIB for i in range(40)], rss=700 * MIB)
    model = build([main, steady])
    assert model.roles["dataloader_worker"].split
    assert project(model, Scale(ranks=1, workers=4)).shares[0].each == 20 * MIB + 39 * 5 * MIB / 4
    assert seen_mechanisms(model) == ["cow_refcount_defeat"]  # pages un-shared (RSS flat), not a cache


def test_loaders_that_run_one_after_the_other_add_no_workers_to_the_peak():
    main = trace(1, "rank", [300 * MIB] * 40, rank=0)
    train, val = trace(2, "dataloader_worker", [20 * MIB] * 20), trace(3, "dataloader_worker", [20 * MIB] * 20)
    val.points = [replace(p, time=p.time + 9.5) for p in val.points]  # starts as the first ends
    assert build([main, train, val]).workers_per_rank == 1
    val.points = [replace(p, time=p.time - 5) for p in val.points]  # alive together for 5 s
    assert build([main, train, val]).workers_per_rank == 2


def test_a_cache_kept_over_epochs_holds_more_of_the_data_with_more_workers():
    """Each epoch deals the samples out at random: over 2 epochs one of 3 workers loads 1 - (2/3)^2 of them."""
    main = trace(1, "rank", [300 * MIB] * 40, rank=0)
    cache = trace(2, "dataloader_worker", [20 * MIB + i * 10 * MIB for i in range(40)])  # RSS grows: a cache
    # two epochs of 200 steps, the second from 5 s on (the bar counts 20 steps a sample, and starts again)
    points = tuple((i * 0.5, i * 20) for i in range(1, 38))
    bar = Progress(points, total=200, rule="progress_bar", restarts=1)
    ticks = clock(bar, 0.0)
    assert ticks is not None and len(ticks.epoch_starts) == 2
    model = build([main, cache], steps=ticks)
    w = model.roles["dataloader_worker"]
    assert w.split and w.epochs == 2 and seen_mechanisms(model) == ["unbounded_cache"]
    each = project(model, Scale(ranks=1, workers=3), steps=ticks).shares[0].each
    assert each == pytest.approx(20 * MIB + (w.peak - 20 * MIB) * (1 - (2 / 3) ** 2), rel=1e-6)
    one = build([main, cache])  # no epochs known: one, a third each
    assert project(one, Scale(ranks=1, workers=3)).shares[0].each == pytest.approx(20 * MIB + (w.peak - 20 * MIB) / 3)


def test_a_workers_cache_of_the_data_it_loads_is_split_among_more_workers():
    main = trace(1, "rank", [300 * MIB] * 40, rank=0)
    cache = trace(2, "dataloader_worker", [20 * MIB + min(i, 30) * 10 * MIB for i in range(40)])  # RSS grows too
    model = build([main, cache])
    w = model.roles["dataloader_worker"]
    assert w.split and w.peak == 320 * MIB
    four = project(model, Scale(ranks=1, workers=4))
    assert four.shares[0].each == 20 * MIB + 300 * MIB / 4  # a quarter of the data each, beyond its start
    assert any("split among them" in a for a in four.assumptions)

    # a buffer each worker takes at its start is each worker's, whatever their number
    buffer = trace(2, "dataloader_worker", [20 * MIB] * 2 + [180 * MIB] * 38)
    model = build([main, buffer])
    assert not model.roles["dataloader_worker"].split
    assert project(model, Scale(ranks=1, workers=4)).shares[0].each == 180 * MIB


def test_a_growing_job_under_a_limit_says_when_it_reaches_it():
    worker = trace(2, "dataloader_worker", [100 * MIB + i * 5 * MIB for i in range(40)])
    model = build([trace(1, "rank", [300 * MIB] * 40, rank=0), worker])
    p = project(model, Scale(ranks=1, workers=1, seconds=600), limit=2048 * MIB)
    # with no training step counted, loading (it stops) and accumulating (it goes on) look alike: what it held
    # at the end fits, so it cannot tell; if it goes on, it reaches the limit then
    assert p.verdict == "unknown" and p.seconds_to_limit is not None
    assert model.seconds < p.seconds_to_limit < 600
    assert project(model, Scale(ranks=1, workers=1, seconds=600), limit=300 * MIB).verdict == "over"  # held more


def test_a_cache_filling_over_epochs_reaches_the_limit_where_its_own_projection_does():
    """A worker's cache of the samples it loads fills as 1 - (1 - 1/slots)^epochs of the data, not at the rate
    one worker filled it in its first epoch: the moment it reaches the limit is where the projection of a run
    that long needs it, and does not move with how long the full run is (it came at step 935 of 1000 and 4870 of
    5000 for one job when read off a straight line from the run's end)."""
    main = trace(1, "rank", [300 * MIB] * 40, rank=0)
    cache = trace(2, "dataloader_worker", [20 * MIB + i * 10 * MIB for i in range(40)])  # RSS grows: a cache
    bar = Progress(tuple((i * 0.5, i * 5) for i in range(1, 40)), total=200, rule="progress_bar")
    ticks = clock(bar, 0.0)
    assert ticks is not None
    model = build([main, cache], steps=ticks)
    assert model.roles["dataloader_worker"].split
    limit = 1200 * MIB
    at: list[float] = []
    for steps in (1000, 5000):
        scale = Scale(ranks=1, workers=4, seconds=ticks.seconds_at(steps), steps=steps)
        p = project(model, scale, limit=limit, steps=ticks)
        assert p.verdict == "over" and p.seconds_to_limit is not None and p.step_at_limit is not None
        then = project(model, replace(scale, seconds=p.seconds_to_limit), steps=ticks).needed
        assert then == pytest.approx(limit, rel=1e-3)  # a run that long needs the limit
        assert ticks.last[0] < p.seconds_to_limit < scale.seconds and not p.limit_by_then
        said = " ".join(render_text(model, p, [], "r.json", steps=ticks).split())
        assert f"grows into the limit about {p.seconds_to_limit:.0f} s into the run" in said
        at.append(p.step_at_limit)
    assert at[0] == pytest.approx(at[1], abs=1)
    # reached by the measured run's end: then; never reached: none
    scale = Scale(ranks=1, workers=4, seconds=ticks.seconds_at(1000), steps=1000)
    already = project(model, scale, limit=400 * MIB, steps=ticks)
    assert already.seconds_to_limit == ticks.last[0] and already.limit_by_then
    # not "about" then: it needed the limit by then, at a moment the samples do not say
    said = " ".join(render_text(model, already, [], "r.json", steps=ticks).split())
    assert f"it needs the limit already by {ticks.last[0]:.0f} s into the run" in said
    assert "grows into the limit about" not in said
    assert project(model, scale, limit=40 * 1024 * MIB, steps=ticks).seconds_to_limit is None


def test_the_job_cgroup_gives_the_shared_pages_and_the_page_cache():
    ranks = [trace(10 + r, "rank", [400 * MIB] * 20, rank=r) for r in range(2)]
    job = [JobPoint(0.0, usage=820 * MIB, anon=800 * MIB, shmem=0, file=20 * MIB)]
    job += [JobPoint(i * 0.5, usage=1520 * MIB, anon=800 * MIB, shmem=100 * MIB, file=620 * MIB) for i in range(1, 20)]
    model = build(ranks, job)
    assert model.basis == "cgroup"
    assert model.shared_unreclaimable == 100 * MIB  # anon + shmem beyond the private sets
    assert model.page_cache == 620 * MIB and model.measured_peak == 1520 * MIB  # the cache charged to it

    # a cgroup that held others' memory at the first sample is not the job's own: its figures are not used
    shared = [JobPoint(i * 0.5, usage=9000 * MIB, anon=5000 * MIB, shmem=0) for i in range(20)]
    model = build(ranks, shared)
    assert model.basis == "processes" and model.page_cache == 0 and "no memory cgroup of its own" in model.notes[0]


def test_a_report_without_samples_is_refused_with_what_to_do():
    with pytest.raises(EstimateInputError, match="run --report"):
        from_report({"command": ["python", "x.py"], "processes": []}, "old.json")
    doc = {"samples": {"processes": [{"pid": 1, "role": "rank", "rank": 0, "comm": "python",
                                      "points": [[0.0, 1, 2, 3, 4, 0], ["bad"], [1.0, None, None, None, None, None]]}],
                       "cgroup": None},
           "diagnosis": {"causes": [{"id": "keep_in_memory_duplication"}]}, "returncode": -9}  # fmt: skip
    rec = from_report(doc, "r.json")
    assert len(rec.traces[0].points) == 2 and rec.causes == ("keep_in_memory_duplication",)
    assert rec.ended == "killed by signal 9"


def test_the_copy_a_fix_shares_is_what_the_rank_read_as_it_climbed_not_its_imports():
    # imports read 40 MiB while the rank grew 100 MiB; then it read a 500 MiB file and kept it
    t = Trace(10, "rank", 0, "python")
    for i in range(40):
        private = 100 * MIB + min(i, 4) * 25 * MIB + (500 * MIB if i >= 8 else 250 * MIB if i == 7 else 0)
        read = min(i, 4) * 10 * MIB + (500 * MIB if i >= 8 else 250 * MIB if i == 7 else 0)
        t.points.append(Point(i * 0.5, private, private, private + 60 * MIB, private, 0, read))
    model = build([t])
    assert model.roles["rank"].read == 540 * MIB and model.roles["rank"].climb_read == 500 * MIB
    ((_, _, fixed, assumption),) = fixed_models(model, ["keep_in_memory_duplication"])
    assert fixed.roles["rank"].peak == 200 * MIB and "500 MiB" in assumption


def test_what_a_rank_read_to_its_peak_counts_to_the_reading_after_the_peak_when_smaps_came_before_it():
    """rchar is read with smaps, every third sample here: the rank read a 300 MiB file over 1.5 s, peaked between
    two readings, then freed what it read (a state dict loaded into its model). Its reads up to the last reading
    before the peak (200 MiB) are not its copy; up to the reading that closes the peak's interval (300) are."""
    t = Trace(10, "rank", 0, "python")
    private = [200] * 6 + [300, 400, 500] + [500] * 3 + [200] * 28  # peak at sample 8 (4.0 s)
    read = [0] * 6 + [100, 200, 300] + [300] * 31
    for i, (v, r) in enumerate(zip(private, read, strict=True)):
        t.points.append(Point(i * 0.5, v * MIB if i % 3 == 0 else None, None, (v + 60) * MIB, v * MIB, 0,
                              r * MIB if i % 3 == 0 else None))  # fmt: skip
    rank = build([t]).roles["rank"]
    assert rank.peak == 500 * MIB and rank.climb_read == 300 * MIB
    ((_, _, fixed, assumption),) = fixed_models(build([t]), ["checkpoint_load_duplication"])
    assert fixed.roles["rank"].peak == 200 * MIB and "300 MiB" in assumption


def parent_and_workers(rank: int, late: bool) -> list[Trace]:
    """A rank holding 400 MiB of Python objects and two forked workers each un-sharing 100 MiB of them
    (RSS flat); ``late``: their first sample comes after they had un-shared most of it."""
    parent = Trace(10 + rank, "rank", rank, "python")
    parent.points = [Point(i * 0.5, 150 * MIB, 250 * MIB, 420 * MIB, 400 * MIB, 0) for i in range(40)]
    workers = []
    for w in range(2):
        t = Trace(100 + 10 * rank + w, "dataloader_worker", rank, "pt_data_worker")
        for i in range(10, 40):
            uss = min(100, (70 if late else 5) + (i - 10) * 3) * MIB
            t.points.append(Point(i * 0.5, uss, uss + 100 * MIB, 400 * MIB, 400 * MIB, 0))
        workers.append(t)
    return [parent, *workers]


def job_of_one_rank() -> list[JobPoint]:
    """Its cgroup: the parent's 400 MiB alone, then with what the two workers un-shared (100 MiB each at last)."""
    anon = [400 * MIB + (2 * min(100, 5 + (i - 10) * 3) * MIB if i >= 10 else 0) for i in range(40)]
    return [JobPoint(i * 0.5, usage=a, anon=a, shmem=0) for i, a in enumerate(anon)]


def test_pages_a_rank_shares_with_its_forked_workers_scale_with_the_ranks():
    model = build(parent_and_workers(0, late=False), job_of_one_rank())
    assert model.families == model.shared_unreclaimable == 600 * MIB - 150 * MIB - 2 * 100 * MIB  # the parent's
    two = project(model, Scale(ranks=2, workers=2))
    assert two.shared_once == 2 * model.families  # each rank's own pages, shared with its own workers
    assert any("one set for each rank" in a for a in two.assumptions)


def test_numpy_storage_keeps_each_worker_at_what_it_allocated_and_shrinks_the_parents_objects():
    for late in (False, True):
        model = build(parent_and_workers(0, late=late), job_of_one_rank())
        worker = model.roles["dataloader_worker"]
        # its anonymous memory is its parent's (RSS flat): it allocated nothing itself, however early its first
        # sample (5 MiB private then) or late (70 MiB): what it held then was un-shared already
        assert worker.own == 0
        ((_, _, fixed, assumption),) = fixed_models(model, ["cow_refcount_defeat"])
        # it still un-shares its parent's interpreter pages (the loop's garbage collector writes them)
        assert fixed.roles["dataloader_worker"].peak == WORKER_FLOOR
        # of what a worker un-shared of the dataset, the values' fifth stays in the parent
        unshared = worker.peak - WORKER_FLOOR
        assert fixed.roles["rank"].peak == pytest.approx(model.roles["rank"].peak - unshared * (1 - VALUES_SHARE[1]))
        assert fixed.roles["rank"].low < fixed.roles["rank"].peak < fixed.roles["rank"].high
        assert "not known" in assumption and "interpreter" in assumption
        p = project(fixed, Scale(ranks=1, workers=4))
        assert p.shares[0].each == WORKER_FLOOR  # not back at the worker's first sample
        assert p.shares[1].each == fixed.roles["rank"].peak
        # a full pass of a worker's garbage collector writes every object the interpreter tracks: the interval's
        # high end holds it for each worker (no more than the worker held broken), and the parent shrinks the
        # less at that end, part of what the measured workers un-shared having been the interpreter's pages
        assert fixed.roles["dataloader_worker"].high == min(worker.peak, WORKER_FLOOR + GC_PASS)
        assert "full pass" in assumption
        least = max(0.0, unshared - GC_PASS) * (1 - VALUES_SHARE[2])
        assert fixed.roles["rank"].high == pytest.approx(model.roles["rank"].high - least)
        assert p.high - p.needed >= 4 * (fixed.roles["dataloader_worker"].high - WORKER_FLOOR)


def test_a_worker_that_allocated_memory_keeps_it_with_numpy_storage():
    """A worker whose anonymous memory rose 30 MiB beyond its parent's (buffers of its own) keeps those 30 MiB
    and the interpreter's pages; the rest of its private set was the dataset's pages."""
    traces = parent_and_workers(0, late=False)
    for w in traces[1:]:
        for i, p in enumerate(w.points):
            w.points[i] = replace(p, anon=(p.anon or 0) + min(30, i * 3) * MIB)
    model = build(traces, job_of_one_rank())
    assert model.roles["dataloader_worker"].own == 30 * MIB
    ((_, _, fixed, _),) = fixed_models(model, ["cow_refcount_defeat"])
    assert fixed.roles["dataloader_worker"].peak == 30 * MIB + WORKER_FLOOR


def test_a_managers_cache_is_split_among_the_ranks_and_its_fix_removes_the_manager():
    rank = trace(10, "rank", [300 * MIB] * 40, rank=0)
    manager = trace(11, "manager", [20 * MIB + min(i, 36) * 10 * MIB for i in range(40)])  # fills as it runs
    model = build([rank, manager])
    assert model.roles["manager"].per == "rank" and model.roles["manager"].split
    two = project(model, Scale(ranks=2, workers=0))
    assert dict((s.role, s.each) for s in two.shares)["manager"] == 20 * MIB + 360 * MIB / 2
    assert any("DistributedSampler" in a for a in two.assumptions)
    ((_, _, fixed, _),) = fixed_models(model, ["manager_cache"])
    assert "manager" not in fixed.roles


def test_with_its_steps_known_a_ranks_accumulation_is_named_and_its_fix_stops_at_the_first_step():
    # a rank that builds its model (to 300 MiB), then keeps 8 MiB of every step for 30 steps, one a sample
    values = [100 * MIB + min(i, 5) * 40 * MIB + max(0, i - 8) * 8 * MIB for i in range(40)]
    rank = trace(10, "rank", values, rank=0)
    bar = Progress(tuple((i * 0.5, (i - 8) * 1) for i in range(9, 39)), total=None, rule="step_word")
    ticks = clock(bar, 0.0)
    assert ticks is not None and ticks.rate == pytest.approx(2.0)
    assert seen_mechanisms(build([rank])) == []  # without its steps: a model being built looks the same
    model = build([rank], steps=ticks)
    r = model.roles["rank"]
    assert r.per_step == pytest.approx(8 * MIB, rel=0.01) and r.at_first_step == 300 * MIB + 8 * MIB
    assert seen_mechanisms(model) == ["unbounded_cache"]
    ((_, _, fixed, assumption),) = fixed_models(model, ["unbounded_cache"])
    assert fixed.roles["rank"].peak == r.at_first_step and "first step" in assumption
    # the full run's 100 steps: 8 MiB each beyond the last counted one, and the limit given as a step
    full = project(model, Scale(ranks=1, workers=0, seconds=ticks.seconds_at(100), steps=100), 1024 * MIB, ticks)
    held = r.peak + model.shared_unreclaimable  # at the last counted step
    assert full.needed == pytest.approx(held + (100 - ticks.last[1]) * 8 * MIB, rel=0.01)
    assert full.step_at_limit == pytest.approx(ticks.last[1] + (1024 * MIB - held) / (8 * MIB), rel=0.02)


def test_what_a_rank_kept_of_its_first_steps_is_read_over_every_step_past_its_warm_up():
    """A rank at 220 MiB after its first step warms up by 40 MiB and keeps 10 MiB a step. Sampled at step 9, then
    every 15-25 steps, the later half's three samples (steps 50, 75, 100: 60 MiB under and over the line, as a
    heap's holes leave them) say 12.4 MiB a step; the line through every sample past the warm-up says 10.7. Taken
    off the sample at step 9, the first gives a warm level of 238 MiB, the second 253: the fix's level is 260."""
    at = {0: 220, 9: 350, 20: 460, 35: 610, 50: 700, 75: 1010, 100: 1320}  # step: MiB
    rank = Trace(10, "rank", 0, "python")
    rank.points = [Point(n * 0.05, v * MIB, v * MIB, v * MIB + 60 * MIB, v * MIB) for n, v in at.items()]
    bar = Progress(tuple((i * 0.05, i) for i in range(101)), total=None, rule="step_word")  # 20 steps a second
    ticks = clock(bar, 0.0)
    assert ticks is not None
    model = build([rank], steps=ticks)
    r = model.roles["rank"]
    assert r.per_step == pytest.approx(12.4 * MIB, rel=0.01)  # the later half: what the run goes on doing
    assert r.warm == pytest.approx(260 * MIB, abs=8 * MIB)
    ((_, _, fixed, _),) = fixed_models(model, ["unbounded_cache"])
    assert fixed.roles["rank"].peak == pytest.approx(260 * MIB, abs=8 * MIB)


def test_a_bounded_caches_worker_stays_where_its_growth_over_the_epoch_meets_the_epochs_start():
    """Sampled first when its cache held some already (50 MiB over its 20), it fills 10 MiB a sample over one
    epoch of 40 steps: with the epoch known, the fix keeps it at 20 MiB, not at its first sample."""
    main = trace(1, "rank", [300 * MIB] * 40, rank=0)
    cache = trace(2, "dataloader_worker", [20 * MIB + (i + 3) * 10 * MIB for i in range(36)])
    bar = Progress(tuple((i * 0.5 - 1.5, i) for i in range(3, 40)), total=40, rule="progress_bar")
    ticks = clock(bar, 0.0)
    assert ticks is not None
    model = build([main, cache], steps=ticks)
    assert model.roles["dataloader_worker"].start == 50 * MIB
    ((_, _, fixed, assumption),) = fixed_models(model, ["unbounded_cache"])
    assert fixed.roles["dataloader_worker"].peak == pytest.approx(20 * MIB, abs=2 * MIB)
    assert "meets the epoch's start" in assumption
    ((_, _, unknown, _),) = fixed_models(build([main, cache]), ["unbounded_cache"])
    assert unknown.roles["dataloader_worker"].peak == 50 * MIB  # without the epoch: its first sample


def test_a_worker_read_at_the_epochs_start_is_fixed_where_its_steady_growth_meets_it():
    """Read at the epoch's start (8 MiB: forked, before its first batches' buffers), then 12 MiB of them at once
    and 10 MiB a sample of cache: the bounded cache keeps the buffers, so the fix holds it where the line through
    its growth over the epoch's first half meets the epoch's start, not at that first reading. A worker read before the epoch (50 MiB)
    whose counter's first line came at step 6 of 40, and whose fill then bends (fast, then flat: a line through
    it meets the start far above), stays at its first reading: a line through a bend says nothing of where it
    began."""
    main = trace(1, "rank", [300 * MIB] * 40, rank=0)
    bar = Progress(tuple((i * 0.5, i) for i in range(40)), total=40, rule="progress_bar")  # "0/40" at 0 s
    ticks = clock(bar, 0.0)
    assert ticks is not None
    cache = trace(2, "dataloader_worker", [8 * MIB] + [20 * MIB + i * 10 * MIB for i in range(1, 36)])
    model = build([main, cache], steps=ticks)
    worker = model.roles["dataloader_worker"]
    assert worker.start == 8 * MIB and worker.by_epoch[0] == 8 * MIB
    ((_, _, fixed, _),) = fixed_models(model, ["unbounded_cache"])
    # the line through the first half's marks, its first reading among them: 17 MiB (its steady growth alone, 20)
    assert 15 * MIB < fixed.roles["dataloader_worker"].peak <= 20 * MIB
    late = Progress(tuple((i * 0.5, i) for i in range(6, 40)), total=40, rule="progress_bar")  # from step 6
    late_ticks = clock(late, 0.0)
    assert late_ticks is not None
    bends = [50, 360, 413, 443, 459, 471, 479, 482] + [482 + i for i in range(28)]
    model = build([main, trace(2, "dataloader_worker", [v * MIB for v in bends])], steps=late_ticks)
    worker = model.roles["dataloader_worker"]
    assert worker.by_epoch[0] is None and worker.start == 50 * MIB
    ((_, _, fixed, _),) = fixed_models(model, ["unbounded_cache"])
    assert fixed.roles["dataloader_worker"].peak == 50 * MIB


def test_a_short_run_still_rising_at_its_end_has_not_settled():
    # 3 s of samples (a probe stopped early): too few for a line through its second half, still rising
    rank = trace(10, "rank", [100 * MIB + i * 20 * MIB for i in range(7)], rank=0)
    r = build([rank]).roles["rank"]
    assert not r.settled and r.growth == pytest.approx(40 * MIB)  # its last third: 20 MiB a sample, 2 a second
    full = project(build([rank]), Scale(ranks=1, workers=0, seconds=10.0))
    assert full.shares[0].each == pytest.approx(220 * MIB + 40 * MIB * (10.0 - 3.0), rel=0.01)
    # no step was counted: loading or accumulating is not known, so the interval reaches down to what it held
    assert full.low <= 220 * MIB + build([rank]).shared_unreclaimable and full.high > full.needed
    assert any("whether it was still loading (it stops) or accumulating" in a for a in full.assumptions)
    # one that rose and held is settled, however short
    held = trace(10, "rank", [100 * MIB, 300 * MIB, 300 * MIB, 300 * MIB, 300 * MIB, 300 * MIB], rank=0)
    assert build([held]).roles["rank"].settled


def test_a_manager_filling_with_the_samples_stops_when_the_epoch_has_been_loaded():
    """A manager's cache of the samples every worker loads: 10 MiB a step over the first 20 of 40-step epochs
    when the probe stopped. The full run of 100 steps (2.5 epochs) holds the whole epoch's data once: 40 steps'
    worth, not 100; a worker's own cache (one of 4 slots) keeps filling over the epochs as it gets samples it
    had not had."""
    rank = trace(10, "rank", [300 * MIB] * 24, rank=0)
    manager = trace(11, "manager", [20 * MIB + max(0, min(i - 2, 20)) * 10 * MIB for i in range(24)])
    bar = Progress(tuple((i * 0.5, i - 2) for i in range(2, 23)), total=40, rule="progress_bar")
    ticks = clock(bar, 0.0)
    assert ticks is not None
    model = build([rank, manager], steps=ticks)
    m = model.roles["manager"]
    assert m.split and m.at_first_step == 20 * MIB
    full = project(model, Scale(ranks=1, workers=0, seconds=ticks.seconds_at(100), steps=100), steps=ticks)
    each = dict((s.role, s.each) for s in full.shares)
    assert each["manager"] == pytest.approx(20 * MIB + 400 * MIB, rel=0.02)  # the epoch's 40 steps, once
    assert loaded(1, 0.5) == 0.5 and loaded(1, 2.5) == 1.0
    assert loaded(4, 2.5) == pytest.approx(1 - 0.75**2 * (1 - 0.5 / 4))


def test_a_last_sample_taken_as_it_exited_is_left_out_of_its_growth():
    climb = [100 * MIB + i * 8 * MIB for i in range(30)]
    exiting = trace(10, "rank", [*climb, 150 * MIB], rank=0)  # its memory already going back
    bar = Progress(tuple((i * 0.5, i) for i in range(31)), total=None, rule="step_word")
    ticks = clock(bar, 0.0)
    assert ticks is not None
    r = build([exiting], steps=ticks).roles["rank"]
    assert r.per_step == pytest.approx(8 * MIB, rel=0.01) and not r.settled


def test_a_transient_between_samples_is_in_each_ranks_peak_and_in_the_jobs():
    # two ranks load a 300 MiB copy and, for less than a sample's interval, a 90 MiB buffer beside it (a DDP
    # broadcast, a checkpoint's tensors being built): only the 20 ms readings between samples saw it
    def rank(r: int, between: bool) -> Trace:
        t = Trace(10 + r, "rank", r, "python")
        for i in range(30):
            v = 200 * MIB + (300 * MIB if i >= 8 else 0)
            top = v + 90 * MIB if i == 12 else v
            t.points.append(Point(i * 0.5, v, v, v + 60 * MIB, v, 0, None, top if between else None))
        return t

    def job(between: bool) -> list[JobPoint]:
        out = []
        for i in range(30):
            a = 2 * (200 + (300 if i >= 8 else 0)) * MIB
            out.append(JobPoint(i * 0.5, usage=a, anon=a, shmem=0, peak=a + 180 * MIB if between and i == 12 else a))
        return out

    seen = build([rank(0, True), rank(1, True)], job(True))
    assert seen.roles["rank"].peak == 590 * MIB and seen.measured_needed == 1180 * MIB
    assert seen.shared_unreclaimable == 0  # the transient is each rank's own, not pages they share
    four = project(seen, Scale(ranks=4, workers=0))
    assert four.needed == 4 * 590 * MIB
    missed = build([rank(0, False), rank(1, False)], job(False))  # a report from before the 20 ms readings
    assert missed.roles["rank"].peak == 500 * MIB and missed.measured_needed == 1000 * MIB
    ((_, _, fixed, _),) = fixed_models(seen, ["checkpoint_load_duplication"])
    assert fixed.roles["rank"].peak == 290 * MIB  # the buffer stays when the copy is memory-mapped


def test_a_reports_points_carry_what_was_read_between_them():
    doc = {"samples": {"processes": [{"pid": 1, "role": "rank", "rank": 0, "comm": "python",
                                      "points": [[0.0, 10, 10, 20, 10, 0, 5, 40], [1.0, 10, 10, 20, 10, 0, None]]}],
                       "cgroup": {"path": "/job", "points": [[0.0, 30, 10, 0, 20, 100, 45], [1.0, 30, 10, 0, 20, 100]]}}}  # fmt: skip
    rec = from_report(doc, "r.json")
    assert [p.anon_peak for p in rec.traces[0].points] == [40, None]
    assert [j.peak for j in rec.job] == [45, None] and rec.job[0].unreclaimable == 45 and rec.job[1].unreclaimable == 10


def test_a_process_killed_during_a_tick_counts_its_last_highest_as_its_own():
    # the kernel killed the rank during the tick: its last sample read only the 20 ms highest of its anonymous
    # memory, the cgroup's that moment's highest; what the job held there is the rank's, not pages it shared
    rank = Trace(10, "rank", None, "python")
    for i in range(10):
        a = (100 + 30 * i) * MIB
        rank.points.append(Point(float(i), a, a, a + 10 * MIB, a, 0, None, a))
    rank.points.append(Point(10.0, None, None, None, None, None, None, 400 * MIB))
    job = [JobPoint(float(i), (120 + 30 * i) * MIB, (100 + 30 * i) * MIB, 0, 20 * MIB) for i in range(10)]
    job.append(JobPoint(10.0, 200 * MIB, 150 * MIB, 0, 8 * MIB, peak=400 * MIB))
    assert rank.private_peaks()[-1] == (10.0, 400 * MIB)
    seen = build([rank], job)
    assert seen.measured_needed == 400 * MIB and seen.shared_unreclaimable == 0  # not 400 MiB shared on top
    assert project(seen, Scale(ranks=1, workers=0)).needed == 400 * MIB


def test_a_process_exiting_over_two_ticks_keeps_its_highest_and_is_not_alive_at_the_second():
    # (a recorded rank_leak run of 1 rank) the rank exited over two ticks: the first read only its 20 ms
    # highest (1431 MiB), the second nothing (a zombie: no memory, its highest 0); the cgroup's highest between
    # them is still the rank's. Without that: 1.4 GiB read as pages shared by the job, once per node on top
    rank = Trace(10, "rank", 0, "python")
    launcher = Trace(9, "launcher", None, "torchrun")
    job = []
    for i in range(10):
        a = (200 + 120 * i) * MIB
        rank.points.append(Point(float(i), a, a, a, a, 0, None, a))
        launcher.points.append(Point(float(i), 146 * MIB, 146 * MIB, 146 * MIB, 146 * MIB, 0, None, 146 * MIB))
        job.append(JobPoint(float(i), a + 151 * MIB, a + 146 * MIB, 0, 5 * MIB))
    top = 1280 * MIB
    rank.points += [Point(10.0, None, None, None, None, None, None, top + 5 * MIB),
                    Point(11.0, None, None, None, None, None, None, 0)]  # fmt: skip
    for t in (10.0, 11.0):
        launcher.points.append(Point(t, 146 * MIB, 146 * MIB, 146 * MIB, 146 * MIB, 0, None, 146 * MIB))
    job.append(JobPoint(10.0, 1310 * MIB, 1300 * MIB, 0, 8 * MIB, peak=(146 + 1285) * MIB))
    job.append(JobPoint(11.0, 150 * MIB, 146 * MIB, 0, 4 * MIB, peak=1423 * MIB))
    assert rank.private_peaks()[-1] == (10.0, top + 5 * MIB)
    assert 11.0 not in rank.held_at()
    seen = build([rank, launcher], job)
    assert seen.shared_unreclaimable == 0
    assert seen.measured_needed == (146 + 1285) * MIB


def test_growth_only_a_late_smaps_reading_showed_is_dated_at_the_reading_before():
    # (a recorded cow_refcount worker) its un-shared pages were anonymous already (its parent's, mapped by both):
    # its anonymous memory stayed at 236 MiB; smaps read its USS at its start (40 MiB) and next at 63% of its
    # life (136 MiB). It may have grown at once: not taken for a worker growing with its share of the data
    def worker(grows_with_anon: bool) -> Trace:
        w = Trace(2, "dataloader_worker", None, "pt_data_worker")
        for i in range(9):
            uss = 40 * MIB if i < 5 else 136 * MIB
            anon = (40 + 12 * i) * MIB if grows_with_anon else 236 * MIB
            read = i in (0, 5)
            w.points.append(Point(i * 0.2, uss if read or grows_with_anon else None, None, anon, anon, 0))
        return w

    late = process_model(worker(False))
    assert late is not None and late.filled_at == 0.0
    # a worker whose anonymous memory grew with it (it allocated): dated where it got there
    allocating = process_model(worker(True))
    assert allocating is not None and allocating.filled_at >= 0.5


def test_pages_shared_after_a_fork_are_read_where_the_parents_uss_was_read_after_it():
    # (a CI probe's samples) a parent of 156 MiB forked 2 workers; the job's first sample is of the moment
    # after the fork, before smaps read the parent again (its USS still carried as private from before);
    # every later sample holds the same 231 MiB: the shared pages are read at the last of them
    rank = Trace(1, "rank", None, "python", [Point(-0.24, 4 * MIB, 4 * MIB, 4 * MIB, 4 * MIB, 0)])
    rank.points.append(Point(0.0, None, None, 160 * MIB, 156 * MIB, 0))
    workers = [Trace(2 + i, "dataloader_worker", None, "pt_data_worker") for i in range(2)]
    for i in range(1, 20):
        rank.points.append(Point(i * 0.2, 0, 60 * MIB, 160 * MIB, 156 * MIB, 0))
    for w in workers:
        w.points.extend(Point(i * 0.2, 40 * MIB, 100 * MIB, 200 * MIB, 196 * MIB, 0) for i in range(20))
    job = [JobPoint(i * 0.2, 232 * MIB, 231 * MIB, 0, MIB) for i in range(20)]
    seen = build([rank, *workers], job)
    assert seen.shared_unreclaimable == 151 * MIB  # 231 - (0 + 2 x 40), not 0 (231 - 156 - 80)


def test_a_real_run_killed_at_its_limit_needs_what_it_held_there():
    # oomwatch run's report of a process OOM-killed at 400 MiB (tests/fixtures/run_reports/thrash_then_kill)
    rec = from_report(json.loads((FIXTURES / "run_reports" / "thrash_then_kill" / "report.json").read_text()), "r")
    seen = build(rec.traces, rec.job)
    assert 380 * MIB <= seen.measured_needed <= 400 * MIB
    assert seen.shared_unreclaimable < 32 * MIB  # oomwatch's own pages in the cgroup, not the rank's again
    assert 380 * MIB <= project(seen, Scale(ranks=1, workers=0)).needed <= 400 * MIB


def test_a_worker_exiting_between_samples_does_not_make_that_intervals_peak_the_jobs_moment():
    # a rank of 500 MiB and its worker of 100 MiB, which exits at the epoch's end between samples 10 and 11: the
    # interval's peak (the worker's last 20 MiB with it) is of a moment whose processes' own peaks are not all
    # in the sample that follows, so the job's top moment is a sample's own figure there
    rank = Trace(10, "rank", 0, "python")
    worker = Trace(11, "dataloader_worker", 0, "pt_data_worker")
    job = []
    for i in range(20):
        rank.points.append(Point(i * 0.5, 500 * MIB, 500 * MIB, 560 * MIB, 500 * MIB, 0, None, 500 * MIB))
        if i <= 10:
            worker.points.append(Point(i * 0.5, 100 * MIB, 100 * MIB, 300 * MIB, 100 * MIB, 0, None, 100 * MIB))
        a = (600 if i <= 10 else 500) * MIB
        job.append(JobPoint(i * 0.5, usage=a, anon=a, shmem=0, peak=620 * MIB if i == 11 else a))
    seen = build([rank, worker], job)
    assert seen.measured_needed == 600 * MIB
    assert seen.shared_unreclaimable == 0  # not the 120 MiB the exited worker's peak less the rank's alone gives


def test_where_a_rank_stood_at_its_first_step_is_after_that_step_without_what_it_kept_since():
    # 200 MiB before its first step; the first step (its activations, gradients, the allocator's warm-up) takes it
    # to 280 MiB, done at 3.1 s, just after a sample; then it keeps 8 MiB of each step, 8 steps a second. The
    # sample nearest the step's line is from before it; the one after holds 3.2 steps' more
    def held(t: float) -> int:
        steps = min(max(0.0, t - 3.1), 60 / 8) * 8
        return 200 * MIB if t < 3.1 else int(280 * MIB + steps * 8 * MIB)

    rank = trace(10, "rank", [held(i * 0.5) for i in range(30)], rank=0)
    bar = Progress(tuple((3.1 + n / 8, n) for n in range(61)), total=None, rule="step_word")
    ticks = clock(bar, 0.0)
    assert ticks is not None
    r = build([rank], steps=ticks).roles["rank"]
    assert r.per_step == pytest.approx(8 * MIB, rel=0.01)
    assert r.at_first_step == pytest.approx(280 * MIB, rel=0.01)
    assert seen_mechanisms(build([rank], steps=ticks)) == ["unbounded_cache"]
    sparse = trace(10, "rank", [held(i * 2.0 + 0.5) for i in range(8)], rank=0)  # the agent's, 2 s apart: the
    sparse.points = [replace(p, time=p.time * 4 + 0.5) for p in sparse.points]  # first after the step, 1.4 s on
    assert build([sparse], steps=ticks).roles["rank"].at_first_step == pytest.approx(280 * MIB, rel=0.01)


def test_a_processs_private_set_is_what_it_cannot_give_back_not_file_pages_it_alone_maps():
    # one rank alone maps its libraries' pages: smaps counts them in its USS (private: no other process maps
    # them), but they are page cache, shared as soon as a second rank maps them; its anonymous memory is the bound
    alone = Trace(10, "rank", 0, "python")
    alone.points = [Point(i * 0.5, 900 * MIB, 920 * MIB, 1000 * MIB, 840 * MIB, 0) for i in range(10)]
    assert {v for _, v in alone.private()} == {840 * MIB}
    assert build([alone]).roles["rank"].peak == 840 * MIB
    # a forked worker's USS, below its anonymous memory (most of it its parent's, shared), stays its USS
    worker = Trace(11, "dataloader_worker", 0, "pt_data_worker")
    worker.points = [Point(i * 0.5, 30 * MIB, 200 * MIB, 700 * MIB, 600 * MIB, 0) for i in range(10)]
    assert {v for _, v in worker.private()} == {30 * MIB}


def test_the_next_epochs_worker_forked_just_after_the_jobs_peak_was_not_alive_then():
    # non-persistent workers: the first epoch's grows to 300 MiB and exits at 5 s, at the job's peak; the next
    # epoch's is forked 0.5 s later at 20 MiB. At the peak only the first was alive: the role's peak is its 300
    rank = trace(1, "rank", [500 * MIB] * 21, rank=0)
    first = trace(2, "dataloader_worker", [20 * MIB + i * 28 * MIB for i in range(11)], rank=0)
    second = trace(3, "dataloader_worker", [20 * MIB + i * 26 * MIB for i in range(10)], rank=0)
    second.points = [replace(p, time=p.time + 5.5) for p in second.points]
    job = [JobPoint(i * 0.5, usage=None, anon=(500 + (20 + i * 28 if i <= 10 else 20 + (i - 11) * 26)) * MIB,
                    shmem=0) for i in range(21)]  # fmt: skip
    model = build([rank, first, second], job)
    w = model.roles["dataloader_worker"]
    assert model.workers_per_rank == 1 and w.peak == 300 * MIB and w.low == w.high == 300 * MIB


def test_a_rank_0_that_gathers_the_others_results_is_a_role_of_its_own():
    # two ranks: rank 0 keeps every rank's predictions (gather_object to rank 0), to 800 MiB; rank 1 stays at 150
    zero = trace(10, "rank", [150 * MIB + min(i, 30) * 22 * MIB for i in range(40)], rank=0)
    one = trace(11, "rank", [150 * MIB] * 40, rank=1)
    launcher = trace(9, "launcher", [140 * MIB] * 40)
    model = build([launcher, zero, one])
    assert set(model.roles) == {"launcher", "rank", "rank0"} and model.ranks == 2
    three = project(model, Scale(ranks=3, workers=0))
    assert {s.role: s.count for s in three.shares} == {"launcher": 1, "rank": 2, "rank0": 1}
    assert three.needed == model.shared_unreclaimable + (140 + 2 * 150 + 810) * MIB
    assert any("rank 0 held more than the other ranks" in a for a in three.assumptions)
    assert "rank0_extra" in seen_mechanisms(model)
    ((_, _, fixed, said),) = fixed_models(model, ["rank0_extra"])
    assert project(fixed, Scale(ranks=3, workers=0)).needed == model.shared_unreclaimable + (140 + 3 * 150) * MIB
    assert "150 MiB" in said
    # rank 0 a little above the others (its logging, a metric) is a rank like them; one rank cannot tell
    level = build([launcher, trace(10, "rank", [190 * MIB] * 40, rank=0), one])
    assert "rank0" not in level.roles and level.roles["rank"].seen == 2
    alone = project(build([launcher, zero]), Scale(ranks=3, workers=0))
    assert any("measured with one rank" in a for a in alone.assumptions)


def test_a_run_cut_off_while_the_job_climbed_cannot_tell_with_no_step_counted():
    # the probe ended 0.6 s after the workers were forked: each has too few samples to be seen growing, but the
    # job's cgroup was still climbing steeply; with no training step counted, what the full run holds is unknown
    rank = trace(1, "rank", [300 * MIB] * 20, rank=0)
    climbing = [JobPoint(i * 0.5, usage=None, anon=(300 + max(0, i - 14) * 150) * MIB, shmem=0) for i in range(20)]
    flat = [JobPoint(i * 0.5, usage=None, anon=300 * MIB, shmem=0) for i in range(20)]
    cut, done = build([rank], climbing), build([rank], flat)
    assert cut.rising and not done.rising
    full = Scale(ranks=1, workers=0, seconds=60)
    assert project(cut, full, limit=2048 * MIB).verdict == "unknown"
    assert project(done, full, limit=2048 * MIB).verdict == "fits"
    assert project(cut, Scale(ranks=1, workers=0), limit=2048 * MIB).verdict != "unknown"  # not extended past it


def test_a_ranks_fix_keeps_what_its_loop_warmed_up_to_over_its_first_steps_not_only_the_first():
    # a rank that keeps 8 MiB of each step, 10 steps a second; its optimizer's state and allocator warm up over
    # the first steps: 240 MiB after the first, 280 MiB (beside what it kept) from the sixth on, as rank_leak's
    # fixed twin measured (236 at step 0, 278 at step 6, 262-287 to its end)
    def held(t: float) -> int:
        n = max(0.0, (t - 2.0) * 10)
        return 150 * MIB if t < 2.0 else int(240 * MIB + min(n, 6.0) / 6.0 * 40 * MIB + n * 8 * MIB)

    rank = trace(10, "rank", [held(0.05 + i * 0.25) for i in range(48)], rank=0)
    rank.points = [replace(p, time=0.05 + i * 0.25) for i, p in enumerate(rank.points)]
    bar = Progress(tuple((2.0 + n / 10, n) for n in range(0, 100, 5)), total=None, rule="step_word")
    ticks = clock(bar, 0.0)
    assert ticks is not None
    model = build([rank], steps=ticks)
    r = model.roles["rank"]
    assert r.per_step == pytest.approx(8 * MIB, rel=0.02)
    assert r.at_first_step is not None and r.at_first_step < 260 * MIB  # its first sample after step 0
    assert r.warm == pytest.approx(280 * MIB, rel=0.03)
    ((_, _, fixed, assumption),) = fixed_models(model, ["unbounded_cache"])
    settled = fixed.roles["rank"]
    assert settled.peak == pytest.approx(280 * MIB, rel=0.03) and "first steps" in assumption
    assert settled.low == pytest.approx(r.at_first_step) and settled.high == settled.peak
    # a run whose first sample after the first step came later than its warm-up: that sample tells it
    late = trace(10, "rank", [held(2.9 + i * 0.5) for i in range(20)], rank=0)
    late.points = [replace(p, time=2.9 + i * 0.5) for i, p in enumerate(late.points)]
    warm = build([late], steps=ticks).roles["rank"].warm
    assert warm == pytest.approx(280 * MIB, rel=0.03)


def test_a_rank_whose_private_set_rose_as_its_workers_unshared_its_pages_kept_nothing():
    """fresh-r9's dict_cache from 2 workers: while the workers ran, the trainer's private set rose from 72 MiB after
    the first step to 118 at the job's peak (its workers un-shared the pages they mapped of it), a slope of 0.2 MiB
    a step, its anonymous memory 217 to 232 MiB. Nothing it kept: the cache's fix leaves it at its peak (taken to
    72, the fixed twin was predicted 29.6% under). A rank whose anonymous memory rose with its private set kept it."""
    bar = Progress(tuple((1.0 + n / 10, n) for n in range(0, 200, 5)), total=None, rule="step_word")
    ticks = clock(bar, 0.0)
    assert ticks is not None

    def rank(allocated: bool) -> Trace:
        t = Trace(10, "rank", 0, "python")
        for i in range(100):
            time = 0.5 + i * 0.2
            n = max(0.0, (time - 1.0) * 10)
            private = int((72 + 46 * n / 200) * MIB) if time >= 1.0 else 60 * MIB
            anon = int((217 + (46 if allocated else 15) * n / 200) * MIB)
            t.points.append(Point(time, private, private, anon + 60 * MIB, anon, 0))
        return t

    worker = trace(11, "dataloader_worker", [20 * MIB + min(i, 30) * 20 * MIB for i in range(40)])
    worker.points = [replace(p, time=1.0 + i * 0.5) for i, p in enumerate(worker.points)]
    left = build([rank(allocated=False), worker], steps=ticks)
    assert left.roles["rank"].per_step and left.roles["rank"].per_step > 0  # its private set rose with the steps
    ((_, _, fixed, assumption),) = fixed_models(left, ["unbounded_cache"])
    assert fixed.roles["rank"].peak == left.roles["rank"].peak and "rank" not in assumption
    assert fixed.roles["dataloader_worker"].peak < left.roles["dataloader_worker"].peak
    kept = build([rank(allocated=True), worker], steps=ticks)
    ((_, _, fixed, _),) = fixed_models(kept, ["unbounded_cache"])
    assert fixed.roles["rank"].peak < kept.roles["rank"].peak - 30 * MIB


def test_a_ranks_fix_keeps_how_far_its_first_step_rose_above_where_it_ended():
    # rank_leak: each step's logits, their softmax and gradients (~16-24 MiB) are freed before the step's line is
    # printed, so the samples at the lines read the level between steps; the fixed twin's peak (its cgroup read
    # every 20 ms, four ranks in lockstep) holds them on top. The 20 ms readings between the sample before the
    # first step's line and the one at it saw that step 18 MiB above its end (measured: 222 -> 240 MiB)
    def held(t: float) -> int:
        n = max(0.0, (t - 2.0) * 10)
        return 150 * MIB if t < 2.0 else int(280 * MIB + n * 8 * MIB)

    bar = Progress(tuple((2.0 + n / 10, n) for n in range(0, 100, 5)), total=None, rule="step_word")
    ticks = clock(bar, 0.0)
    assert ticks is not None

    def rank(highest: bool) -> Trace:
        t = trace(10, "rank", [held(0.05 + i * 0.25) for i in range(48)], rank=0)
        points = []
        for i, p in enumerate(t.points):
            at = 0.05 + i * 0.25
            rise = 0
            if highest and at == 2.05:
                rise = 18 * MIB  # the sample closing the first step
            elif highest and at > 3.0:
                rise = 300 * MIB * (i % 2)  # later: what it accumulates (logits concatenated again) hides the steps
            points.append(replace(p, time=at, anon_peak=p.anon + rise if highest else None))
        t.points = points
        return t

    seen = build([rank(highest=True)], steps=ticks).roles["rank"]
    assert seen.step_rise == 18 * MIB
    ((_, _, fixed, _),) = fixed_models(build([rank(highest=True)], steps=ticks), ["unbounded_cache"])
    assert fixed.roles["rank"].peak == pytest.approx(seen.warm + 18 * MIB)
    # the agent's samples read no highest between them: the level between steps, as before
    unseen = build([rank(highest=False)], steps=ticks)
    assert unseen.roles["rank"].step_rise is None
    ((_, _, fixed, _),) = fixed_models(unseen, ["unbounded_cache"])
    assert fixed.roles["rank"].peak == pytest.approx(unseen.roles["rank"].warm)


def test_a_rank_left_alone_with_the_pages_its_worker_shared_kept_nothing_a_bounded_cache_would_stop():
    """A worker's dict cache: the trainer's private set falls when its worker forks (the pages are shared), and
    rises back when the worker exits after the last step, its anonymous memory unchanged (measured: 99 to 206 MiB
    in a dict_cache run). That rise is no accumulation: the cache's fix stops the worker and leaves the rank at its
    peak. A rank whose evaluation after the last step allocates keeps the rise, and the fix takes it off."""
    bar = Progress(tuple((1.0 + n / 10, n) for n in range(0, 40, 5)), total=None, rule="step_word")
    ticks = clock(bar, 0.0)
    assert ticks is not None

    def rank(after: int, allocated: bool) -> Trace:
        t = Trace(10, "rank", 0, "python")
        for i in range(40):
            time = i * 0.25
            private = (100 if time < 1.0 else 100 + (after if time > 5.0 else 0)) * MIB
            anon = 200 * MIB + (after * MIB if allocated and time > 5.0 else 0)
            t.points.append(Point(time, private, private, anon + 60 * MIB, anon, 0))
        return t

    worker = trace(11, "dataloader_worker", [20 * MIB + min(i, 16) * 40 * MIB for i in range(20)])
    worker.points = [replace(p, time=1.0 + i * 0.2) for i, p in enumerate(worker.points)]
    alone = build([rank(110, allocated=False), worker], steps=ticks)
    assert alone.roles["rank"].after_steps == 0
    ((_, _, fixed, assumption),) = fixed_models(alone, ["unbounded_cache"])
    assert fixed.roles["rank"].peak == alone.roles["rank"].peak and "rank" not in assumption
    assert fixed.roles["dataloader_worker"].peak < alone.roles["dataloader_worker"].peak
    collects = build([rank(110, allocated=True), worker], steps=ticks)
    assert collects.roles["rank"].after_steps == 110 * MIB
    ((_, _, fixed, _),) = fixed_models(collects, ["unbounded_cache"])
    assert fixed.roles["rank"].peak == pytest.approx(100 * MIB)


def test_a_ranks_growth_per_step_is_read_against_the_steps_it_counted_when_its_pace_changes():
    """A rank keeps 10 MiB a step; it steps 40 a second for its first 50 steps, then 10 a second (its pages
    faulted in, its peers slower). Against the counted steps its later growth and what it kept are 10 MiB a step;
    against one rate for the whole run (a line through its counts, 15 steps a second) they read 7, and its fix's
    level (its level once warm, less what it kept) 17 MiB high."""

    def done(t: float) -> float:
        return 40 * t if t <= 1.25 else 50 + 10 * (t - 1.25)

    bar = Progress(tuple((i / 40 if i <= 50 else 1.25 + (i - 50) / 10, i) for i in range(0, 101, 5)),
                   total=None, rule="step_word")  # fmt: skip
    ticks = clock(bar, 0.0)
    assert ticks is not None and 12 < ticks.rate < 18
    rank = Trace(10, "rank", 0, "python")
    rank.points = [Point(t, v, v, v, v) for t in (i * 0.1 for i in range(63))
                   for v in [(220 + 10 * round(done(t))) * MIB]]  # fmt: skip
    model = build([rank], steps=ticks)
    r = model.roles["rank"]
    assert r.per_step == pytest.approx(10 * MIB, rel=0.02)
    assert r.warm == pytest.approx(220 * MIB, abs=3 * MIB)
    ((_, _, fixed, _),) = fixed_models(model, ["unbounded_cache"])
    assert fixed.roles["rank"].peak == pytest.approx(220 * MIB, abs=3 * MIB)


def test_a_rank_sampled_once_in_its_warm_up_steps_is_read_warm_over_its_next_samples():
    """A rank stepping 60 times a second, sampled every 12 steps: one sample falls in its 10 warm-up steps, and
    it was taken low in a step (30 MiB under the 270 its loop holds once warm, which a step rises 20 above).
    Its level once warm, what its fix keeps, is the most of its first four samples past the first step less the
    12 MiB a step it kept: 290 MiB, not that one sample's 240."""
    swing = {6: -30, 18: 10, 30: 20, 42: -10, 54: 0, 66: 5, 78: -5, 90: 0, 100: 0}  # MiB off the warm line
    at = {0: 220} | {n: 270 + s + 12 * n for n, s in swing.items()}
    rank = Trace(10, "rank", 0, "python")
    rank.points = [Point(n / 60, v * MIB, v * MIB, v * MIB, v * MIB) for n, v in at.items()]
    bar = Progress(tuple((i / 60, i) for i in range(0, 101, 5)), total=None, rule="step_word")
    ticks = clock(bar, 0.0)
    assert ticks is not None
    model = build([rank], steps=ticks)
    r = model.roles["rank"]
    assert r.warm == pytest.approx(290 * MIB, abs=6 * MIB)
    ((_, _, fixed, _),) = fixed_models(model, ["unbounded_cache"])
    assert fixed.roles["rank"].peak == pytest.approx(290 * MIB, abs=6 * MIB)
