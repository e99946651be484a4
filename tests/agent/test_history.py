"""The agent's flight recorder on real SQLite files and real processes: what a tick leaves, folding
old rows into peaks, ageing, the size bound, a writer SIGKILLed mid-tick, corrupt and foreign files
moved aside, a full disk (a real 256 KiB tmpfs), a reader while another process writes, the
``oomwatch history`` command, and what an hour of a 150-process job costs on disk."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import errno
import io
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomwatch.agent.history.reader import open_readonly
from oomwatch.agent.history.schema import ADDED, SCHEMA_VERSION, TABLES_ADDED, CgroupRow, ProcessRow
from oomwatch.agent.history.store import HistoryStore
from oomwatch.agent.sample.notices import Notices
from oomwatch.agent.tick import CgroupSample, NodeSample, ProcessSample, StepMark, Tick
from oomwatch.cli.history import history_cmd, parse_when
from oomwatch.errors import InputError
from oomwatch.procfs.pressure import Pressure, PressureLine
from tests.conftest import ROOT, skip_or_fail

MIB = 1 << 20
GIB = 1 << 30
T0 = 1_700_000_000.0  # synthetic ticks: a fixed wall clock
JOB = "torchelastic-0f3c2a"


def proc(pid: int, *, job: str | None = JOB, role: str = "dataloader_worker", rank: int | None = 0,
         comm: str = "pt_data_worker", rss: int | None = 512 * MIB, uss: int | None = None, **kw) -> ProcessSample:  # fmt: skip
    values = dict(anon=rss // 2 if rss else None, file=64 * MIB, shmem=8 * MIB, swap=0, hwm=rss, pss=None)
    values.update(kw)
    return ProcessSample(pid=pid, ppid=1, comm=comm, role=role, job=job, rank=rank, local_rank=rank, state="S",
                         rss=rss, uss=uss, **values)  # fmt: skip


def cgroup(path: str = "/kubepods/pod-a/c1", usage: int = 8 * GIB, jobs: tuple[str, ...] = (JOB,)) -> CgroupSample:
    return CgroupSample(path=path, version=2, usage=usage, limit=16 * GIB, effective_limit=12 * GIB, peak=None,
                        anon=usage // 2, file=usage // 4, shmem=MIB, swap=0, oom_kills=0, pressure=None, jobs=jobs)  # fmt: skip


def node(available: int = 100 * GIB) -> NodeSample:
    return NodeSample(mem_total=512 * GIB, mem_available=available, swap_total=0, swap_free=0, oom_kills=3,
                      pressure=None)  # fmt: skip


def tick(t: float, processes=(), cgroups=(), node_sample=None) -> Tick:
    return Tick(time=t, duration=0.01, processes=tuple(processes), cgroups=tuple(cgroups), node=node_sample)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "history.db"


@contextlib.contextmanager
def opened(path: Path, **kw):
    store = HistoryStore(path, **kw)
    try:
        yield store
    finally:
        store.close()


def history_notices(notices: Notices) -> list[str]:
    return [n for n in notices.all if n.startswith("history:")]


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


# -- what a tick leaves ----------------------------------------------------------------------------


def test_a_smaps_reading_is_stored_once_in_the_tick_that_made_it(store_path: Path):
    # smaps is read on a CPU budget: between readings a sample carries the last one on. Stored again at
    # each tick, a worker whose memory climbs shows a flat USS: a plateau that reads as "loaded, then held"
    with opened(store_path) as store:
        read = [T0, T0, T0, T0 + 3.0]  # when each tick's sample had its smaps read
        uss = [10 * MIB, 10 * MIB, 10 * MIB, 90 * MIB]
        for i, (at, u) in enumerate(zip(read, uss, strict=True)):
            sample = proc(101, rss=(100 + 40 * i) * MIB, uss=u, pss=u, swap_pss=0, rchar=i, smaps_time=at)
            store.record(tick(T0 + i, [sample]))
        rows = store.processes(pid=101)
    assert [r.uss for r in rows] == [10 * MIB, None, None, 90 * MIB]
    assert [r.rss for r in rows] == [100 * MIB, 140 * MIB, 180 * MIB, 220 * MIB]  # read every tick: all kept


def test_the_analyzers_take_a_carried_smaps_reading_once():
    from oomwatch.agent.analyze.job import analyze

    # live samples (the agent's loners, `oomwatch run`) carry smaps_time: a repeated one is no new point
    rows = [
        {"time": T0 + i, "pid": 7, "role": "dataloader_worker", "comm": "pt_data_worker", "rss": 0,
         "anon": (20 + 30 * i) * MIB, "uss": u * MIB, "rchar": 0, "smaps_time": T0 + at}
        for i, (u, at) in enumerate([(10, 0), (40, 1), (40, 1), (40, 1), (130, 4)])
    ]  # fmt: skip
    victim = next(p for p in analyze(rows, 7).processes if p.pid == 7)
    # the carried reading is not read again: those two samples are the reading plus what anonymous memory added
    assert victim.basis == "USS" and victim.estimated == 2
    assert [v for _, v in victim.points] == [10 * MIB, 40 * MIB, 70 * MIB, 100 * MIB, 130 * MIB]


def test_a_process_keeps_its_latest_known_role_in_the_analysis():
    from oomwatch.agent.analyze.job import analyze

    # a Manager() server: a "worker" until the DataLoader's workers appear, then the manager; the last
    # sample, as it dies, knows no role. Its growth is a manager's.
    def row(t: float, role: str, anon: int | None) -> dict:
        return {"time": T0 + t, "pid": 9, "role": role, "comm": "python", "rss": anon, "anon": anon}

    rows = [row(0, "dataloader_worker", 150 * MIB), row(1, "manager", 200 * MIB), row(2, "manager", 500 * MIB),
            row(2.5, "unknown", None)]  # fmt: skip
    for order in (rows, rows[::-1]):  # in any order the store returns them
        assert analyze(order, 9).facts["history.manager_growth_bytes"] == 350 * MIB


def test_a_tick_is_stored_as_it_was_seen(store_path: Path):
    notices = Notices()
    with opened(store_path, notices=notices) as store:
        members = [
            proc(100, role="launcher", rank=None, comm="torchrun", rss=300 * MIB),
            proc(101, role="rank", rank=0, comm="python", rss=20 * GIB, uss=18 * GIB, pss=19 * GIB, swap_pss=0),
            proc(102, rss=None),  # a zombie: no memory figures, kept as unknown, never zero
            proc(103, job="other-job", role="rank", rank=1, comm="python"),
        ]
        outsiders = [proc(200, job=None, role="rank"), proc(201, role="other", comm="sshd")]
        store.record(tick(T0, members + outsiders, [cgroup(jobs=(JOB, "other-job"))], node(7 * GIB)))
        store.record(tick(T0 + 1, members, [cgroup()], node(6 * GIB)))

        rows = store.processes()
        assert {r.pid for r in rows} == {100, 101, 102, 103}  # only training-job members
        assert len(rows) == 8
        rank = [r for r in rows if r.pid == 101][0]
        assert rank == ProcessRow(time=T0, resolution=1.0, pid=101, job=JOB, role="rank", rank=0, local_rank=0,
                                  comm="python", rss=20 * GIB, anon=10 * GIB, file=64 * MIB, shmem=8 * MIB, swap=0,
                                  hwm=20 * GIB, pss=19 * GIB, uss=18 * GIB, swap_pss=0)  # fmt: skip
        zombie = [r for r in rows if r.pid == 102][0]
        assert (zombie.rss, zombie.anon, zombie.uss, zombie.pss) == (None, None, None, None)

        assert {r.pid for r in store.processes(job="other-job")} == {103}
        assert [r.time for r in store.processes(pid=101)] == [T0, T0 + 1]
        assert [r.time for r in store.processes(pid=101, since=T0 + 0.5)] == [T0 + 1]
        assert [r.time for r in store.processes(pid=101, until=T0 + 0.5)] == [T0]
        assert store.processes(job="no-such-job") == []

        cgs = store.cgroups()
        assert [c.jobs for c in cgs] == [f"{JOB},other-job", JOB]
        assert cgs[0] == CgroupRow(time=T0, resolution=1.0, path="/kubepods/pod-a/c1", jobs=f"{JOB},other-job",
                                   usage=8 * GIB, limit=16 * GIB, effective_limit=12 * GIB, anon=4 * GIB,
                                   file=2 * GIB, shmem=MIB, swap=0, oom_kills=0)  # fmt: skip
        assert store.cgroups(path="/elsewhere") == []
        assert [(n.time, n.mem_available, n.oom_kills) for n in store.node()] == [
            (T0, 7 * GIB, 3),
            (T0 + 1, 6 * GIB, 3),
        ]

        assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
        assert store.get_meta("nothing") is None
        store.set_meta("agent", "0.1.0")
        assert store.get_meta("agent") == "0.1.0"
    assert history_notices(notices) == []

    conn = sqlite3.connect(store_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
        indexes = {r[0]: r[1] for r in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'")}
        assert "ON process (time)" in indexes["process_time"]
        assert "ON process (job, time)" in indexes["process_job_time"]
    finally:
        conn.close()
    with opened(store_path) as again:  # reopening keeps everything
        assert len(again.processes()) == 8
        assert again.get_meta("agent") == "0.1.0"


def test_resolution_is_the_tick_interval(store_path: Path):
    with opened(store_path) as store:
        for k in range(4):
            store.record(tick(T0 + 5 * k, [proc(1)]))
        assert [r.resolution for r in store.processes()] == [1.0, 5.0, 5.0, 5.0]  # the first: the default interval


# -- bounds ----------------------------------------------------------------------------------------


def test_old_rows_fold_into_peaks_at_the_first_time_of_their_bucket(store_path: Path):
    with opened(store_path, fine_seconds=60, coarse_step=10) as store:
        for k in range(200):
            t = T0 + k
            rss = 1 * GIB + k * MIB + (3 * GIB if k == 47 else 0)  # a spike one second long
            role = "unknown" if k < 45 else "dataloader_worker"  # found out mid-bucket
            uss = 100 * MIB if k % 5 == 0 else None  # smaps on a budget: not every tick
            anon = GIB + (100 - k) * MIB  # falling while RSS rises: each size keeps its own peak
            store.record(tick(t, [proc(7, rss=rss, role=role, uss=uss, anon=anon), proc(8, rss=GIB)],
                              [cgroup(usage=8 * GIB + (GIB if k == 13 else 0))],
                              node(100 * GIB - (40 * GIB if k == 22 else 0))))  # fmt: skip
        store.maintain(T0 + 200)
        rows = store.processes(pid=7)
        cut = T0 + 140  # (200 - 60) on a 10 s boundary
        coarse = [r for r in rows if r.time < cut]
        fine = [r for r in rows if r.time >= cut]
        assert [r.time for r in coarse] == [T0 + 10 * b for b in range(14)]
        assert all(r.resolution == 10 for r in coarse)
        assert [r.time for r in fine] == [T0 + k for k in range(140, 200)]
        assert all(r.resolution == 1 for r in fine)
        spike = coarse[4]  # T0+40..49
        assert spike.rss == 1 * GIB + 47 * MIB + 3 * GIB  # the peak survives
        assert spike.hwm == spike.rss and spike.anon == GIB + 60 * MIB
        assert spike.role == "dataloader_worker"  # the bucket's last label
        assert coarse[3].role == "unknown"
        assert all(r.uss == 100 * MIB for r in coarse)  # MAX ignores the ticks without a value
        assert len(store.processes(pid=8)) == 14 + 60

        cgs = store.cgroups()
        assert [c.usage for c in cgs if c.time < cut][:2] == [8 * GIB, 9 * GIB]
        nodes = store.node()
        assert nodes[2].time == T0 + 20 and nodes[2].mem_available == 60 * GIB  # the lowest point
        assert nodes[2].resolution == 10

        # folding again changes nothing that was folded
        store.maintain(T0 + 205)
        assert store.processes(pid=7, until=cut - 1) == coarse


def _psi(some: float, full: float) -> Pressure:
    return Pressure(PressureLine(some, some, some, 1000), PressureLine(full, full, full, 500))


def test_pressure_and_swap_are_kept_and_fold_into_their_worst(store_path: Path):
    with opened(store_path, fine_seconds=60, coarse_step=10) as store:
        for k in range(100):
            psi = _psi(5.0 + (40.0 if k == 13 else 0.0), 1.0 + (25.5 if k == 14 else 0.0))
            n = NodeSample(mem_total=64 * GIB, mem_available=10 * GIB, swap_total=8 * GIB,
                           swap_free=8 * GIB - k * 10 * MIB, oom_kills=0, pressure=psi)  # fmt: skip
            cg = dataclasses.replace(cgroup(), pressure=_psi(float(k % 10), 0.0) if k != 50 else None)
            store.record(tick(T0 + k, [proc(1)], [cg], n))
        first = store.node()[0]
        assert (first.mem_total, first.swap_total, first.pressure_some, first.pressure_full) == (64 * GIB, 8 * GIB,
                                                                                               5.0, 1.0)  # fmt: skip
        assert store.cgroups()[50].pressure_some is None  # no PSI file: unknown, never zero
        store.maintain(T0 + 100)
        bucket = store.node()[1]  # T0+10..19
        assert bucket.resolution == 10
        assert (bucket.pressure_some, bucket.pressure_full) == (45.0, 26.5)
        assert bucket.swap_free == 8 * GIB - 19 * 10 * MIB  # the most swap used
        assert [c.pressure_some for c in store.cgroups() if c.resolution == 10][:3] == [9.0, 9.0, 9.0]


def as_schema(path: Path, version: int) -> None:
    """Make the file at ``path`` the one schema ``version`` wrote: the columns and tables added since go."""
    conn = sqlite3.connect(path)
    for since, name, _ in TABLES_ADDED:
        if version < since:
            conn.execute(f"DROP TABLE {name}")
    for since, columns in ADDED:
        if version < since:
            for table, column, _ in columns:
                conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    conn.commit()
    conn.close()


def test_a_schema_1_file_is_read_and_upgraded_in_place(store_path: Path):
    with opened(store_path) as store:
        store.record(tick(T0, [proc(1)], [cgroup()], node()))
    as_schema(store_path, 1)  # make it the file the first release wrote
    conn = sqlite3.connect(store_path)
    assert {r[1] for r in conn.execute("PRAGMA table_info(node)")} == {"time", "resolution", "mem_available",
                                                                       "swap_free", "oom_kills"}  # fmt: skip
    conn.close()

    reader = open_readonly(store_path)  # a reader cannot upgrade: the new columns read as unknown
    try:
        assert reader.get_meta("schema_version") == "1"
        assert [(n.mem_available, n.mem_total, n.pressure_full) for n in reader.node()] == [(100 * GIB, None, None)]
        assert [(c.usage, c.pressure_some) for c in reader.cgroups()] == [(8 * GIB, None)]
    finally:
        reader.close()

    notices = Notices()
    with opened(store_path, notices=notices) as store:  # the writer upgrades it, keeping every row
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
        store.record(tick(T0 + 1, [proc(1)], [dataclasses.replace(cgroup(), pressure=_psi(3.0, 2.0))],
                          dataclasses.replace(node(), pressure=_psi(7.0, 4.0))))  # fmt: skip
        assert [(n.time, n.mem_total, n.pressure_some) for n in store.node()] == [(T0, None, None),
                                                                                (T0 + 1, 512 * GIB, 7.0)]  # fmt: skip
        assert [c.pressure_full for c in store.cgroups()] == [None, 2.0]
        assert len(store.processes()) == 2
    assert history_notices(notices) == []
    assert not list(store_path.parent.glob("*.corrupt-*"))


def test_a_schema_2_file_gains_what_each_process_read(store_path: Path):
    with opened(store_path) as store:
        store.record(tick(T0, [proc(1)]))
    as_schema(store_path, 2)  # the file schema 2 wrote: no rchar
    reader = open_readonly(store_path)
    try:
        assert [p.rchar for p in reader.processes()] == [None]
    finally:
        reader.close()
    with opened(store_path) as store:
        store.record(tick(T0 + 1, [dataclasses.replace(proc(1), rchar=123 << 20)]))
        assert [p.rchar for p in store.processes()] == [None, 123 << 20]
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION)


def _mark(t: float, step: int, job: str = JOB, total: int | None = None, name: str = "") -> StepMark:
    return StepMark(t, job, "step_word" if total is None else "progress_bar", name, total, step)


def test_a_jobs_step_counter_is_kept_and_folds_into_its_highest_step(store_path: Path):
    with opened(store_path, fine_seconds=60, coarse_step=10) as store:
        for k in range(100):
            marks = [_mark(T0 + k, 10 * k)]
            if k % 7 == 0:  # an epoch bar beside it, and another job's counter
                marks += [_mark(T0 + k, k // 7, total=20, name="Epoch 0"), _mark(T0 + k, k, job="job-b")]
            store.record(dataclasses.replace(tick(T0 + k, [proc(1), proc(2, job="job-b")]), steps=tuple(marks)))
        rows = store.steps(job=JOB)
        assert [(r.time, r.step) for r in rows if r.rule == "step_word"][:3] == [(T0, 0), (T0 + 1, 10), (T0 + 2, 20)]
        assert [(r.name, r.total, r.step) for r in rows if r.rule == "progress_bar"][:2] == [("Epoch 0", 20, 0),
                                                                                           ("Epoch 0", 20, 1)]  # fmt: skip
        assert rows[0].job == JOB and rows[0].resolution == 1.0
        store.maintain(T0 + 100)
        words = [r for r in store.steps(job=JOB) if r.rule == "step_word"]
        coarse = [r for r in words if r.resolution == 10]
        # each bucket its highest step, at the time it was read
        assert [(r.time, r.step) for r in coarse] == [(T0 + 10 * b + 9, 100 * b + 90) for b in range(4)]
        assert [r.step for r in words if r.resolution == 1] == [10 * k for k in range(40, 100)]
        # the other job's 15 readings: 0 and 7, 21 and 28 share a bucket
        assert [r.step for r in store.steps(job="job-b")][:5] == [7, 14, 28, 35, 42]
        assert len(store.steps(job="job-b")) == 13 and store.steps(job="nobody") == []


def test_a_schema_3_file_gains_the_step_counters(store_path: Path):
    with opened(store_path) as store:
        store.record(tick(T0, [proc(1)]))
    as_schema(store_path, 3)  # the file schema 3 wrote: no step table
    reader = open_readonly(store_path)
    try:
        assert reader.steps(job=JOB) == [] and len(reader.processes()) == 1
    finally:
        reader.close()
    with opened(store_path) as store:
        store.record(dataclasses.replace(tick(T0 + 1, [proc(1)]), steps=(_mark(T0 + 1, 7),)))
        assert [r.step for r in store.steps(job=JOB)] == [7]
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION)


def test_the_highest_read_between_ticks_is_kept_and_folds_into_its_buckets_highest(store_path: Path):
    """Schema 5: beside each tick's figures, the highest anonymous memory of each process and anon + shmem of
    each cgroup read between it and the tick before (agent.peaks); a file of schema 4 gains the columns."""
    with opened(store_path) as store:
        store.record(tick(T0, [proc(1)], [cgroup()]))
    as_schema(store_path, 4)
    reader = open_readonly(store_path)
    try:
        assert [p.anon_peak for p in reader.processes()] == [None]
        assert [c.unreclaimable_peak for c in reader.cgroups()] == [None]
    finally:
        reader.close()
    with opened(store_path, fine_seconds=60, coarse_step=10) as store:
        for k in range(1, 100):
            top = (300 + k % 10) * MIB if k % 2 else None  # read between ticks every other tick
            cg = dataclasses.replace(cgroup(), unreclaimable_peak=None if top is None else 4 * top)
            store.record(tick(T0 + k, [proc(1, anon_peak=top)], [cg]))
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
        assert [p.anon_peak for p in store.processes()][:4] == [None, 301 * MIB, None, 303 * MIB]
        assert [c.unreclaimable_peak for c in store.cgroups()][:3] == [None, 4 * 301 * MIB, None]
        store.maintain(T0 + 100)
        coarse = [p for p in store.processes() if p.resolution == 10]
        assert [p.anon_peak for p in coarse] == [309 * MIB] * 4  # each bucket's highest
        assert [c.unreclaimable_peak for c in store.cgroups() if c.resolution == 10] == [4 * 309 * MIB] * 4


def test_a_newer_schema_is_moved_aside_not_written_into(store_path: Path):
    with opened(store_path) as store:
        store.record(tick(T0, [proc(1)]))
    conn = sqlite3.connect(store_path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    notices = Notices()
    with opened(store_path, notices=notices) as store:
        assert store.processes() == []
    assert any(f"schema version {SCHEMA_VERSION + 1}" in n for n in history_notices(notices)), notices.all
    assert len(list(store_path.parent.glob("history.db.corrupt-*"))) == 1


def test_record_maintains_by_itself_at_most_once_a_minute(store_path: Path):
    with opened(store_path, fine_seconds=30, coarse_step=10) as store:
        seen = []
        for k in range(181):
            store.record(tick(T0 + k, [proc(1)]))
            seen.append(store.get_meta("maintained"))
        runs = sorted({float(m) for m in seen if m is not None})
        assert runs == [T0, T0 + 60, T0 + 120, T0 + 180]
        rows = store.processes()
        # at T0+180 everything before the boundary of T0+150 was folded
        assert [r.time for r in rows if r.resolution == 10] == [T0 + 10 * b for b in range(15)]
        assert len(rows) == 15 + 31


def test_rows_older_than_max_age_are_dropped(store_path: Path):
    with opened(store_path, fine_seconds=30, coarse_step=10, max_age=100) as store:
        for k in range(300):
            store.record(tick(T0 + k, [proc(1), proc(2, job="gone-job")] if k < 50 else [proc(1)], [cgroup()],
                              node()))  # fmt: skip
        store.maintain(T0 + 300)
        for rows in (store.processes(), store.cgroups(), store.node()):
            assert min(r.time for r in rows) >= T0 + 200
            assert max(r.time for r in rows) == T0 + 299
        assert store.processes(job="gone-job") == []
    conn = sqlite3.connect(store_path)
    try:
        assert conn.execute("SELECT name FROM job").fetchall() == [(JOB,)]  # its label went with its rows
    finally:
        conn.close()


def test_the_file_stays_under_max_bytes(store_path: Path):
    max_bytes = 400 << 10
    with opened(store_path, max_bytes=max_bytes, fine_seconds=3600) as store:
        procs = [proc(1000 + i, rank=i) for i in range(40)]
        for k in range(600):
            store.record(tick(T0 + k, procs, [cgroup()], node()))
            if k % 60 == 59:
                assert store.file_bytes() <= max_bytes + (300 << 10)  # a minute of rows over, at most
        store.maintain(T0 + 600)
        assert store.file_bytes() <= max_bytes
        times = [r.time for r in store.processes(pid=1000)]
        assert times[-1] == T0 + 599  # the newest kept
        assert times[0] > T0 + 100  # the oldest dropped
        assert times == [T0 + k for k in range(int(times[0] - T0), 600)]  # contiguous: dropped from the start
        assert store.cgroups()[0].time >= times[0] - 1
    assert integrity(store_path) == "ok"
    assert store_path.stat().st_size <= max_bytes  # given back to the file system (closed: WAL checkpointed)


# -- robustness ------------------------------------------------------------------------------------

WRITER = r"""
import sys, time
from pathlib import Path
from oomwatch.agent.history.store import HistoryStore
from oomwatch.agent.tick import NodeSample, ProcessSample, Tick

path, n, start, pause = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
store = HistoryStore(path, fine_seconds=float(sys.argv[5]))
k = start
while True:
    procs = tuple(
        ProcessSample(pid=1000 + i, ppid=999, comm="pt_data_worker", role="dataloader_worker", job="job-k",
                      rank=i % 8, local_rank=i % 8, state="S", rss=(k + 1) * 4096 + i, anon=k, file=i, shmem=0,
                      swap=0, hwm=(k + 1) * 4096 + i, pss=k if k % 3 == 0 else None, uss=None, swap_pss=None)
        for i in range(n)
    )
    store.record(Tick(time=1_700_000_000.0 + k, duration=0.0, processes=procs,
                      node=NodeSample(1 << 40, 1 << 39, 0, 0, 0, None)))
    if store.notices.all:
        print("ERROR", store.notices.all, flush=True)
        sys.exit(1)
    print(k, flush=True)
    k += 1
    if pause:
        time.sleep(pause)
"""


def start_writer(
    path: Path, n: int, start: int = 0, pause: float = 0.0, fine_seconds: float = 60
) -> subprocess.Popen[str]:
    """A process recording ticks of ``n`` processes in a loop (1 s apart in tick time), printing each
    tick's number once record() returned; it exits 1 at the first notice."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(n), str(start), str(pause), str(fine_seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_writer_killed_with_sigkill_loses_no_committed_tick(store_path: Path):
    store_path.parent.mkdir(parents=True)
    start = 0
    for round_ in range(3):  # killed at different moments: mid-insert, mid-maintenance, between ticks
        printed = []
        with start_writer(store_path, n=150, start=start) as writer:
            assert writer.stdout is not None
            target = start + 70 + 37 * round_  # past a maintenance run (every 60 ticks)
            for line in writer.stdout:
                assert not line.startswith("ERROR"), line
                printed.append(int(line))
                if printed[-1] >= target:
                    os.kill(writer.pid, signal.SIGKILL)
                    break
            # what it wrote before the kill, from the reader's buffer on: communicate() would read the pipe
            # itself and lose the lines the loop above had already buffered
            out = writer.stdout.read()
            assert writer.stderr is not None
            err = writer.stderr.read()
            writer.wait(timeout=30)
        assert writer.returncode == -signal.SIGKILL, err
        printed += [int(x) for x in out.split()]
        last = printed[-1]
        assert integrity(store_path) == "ok"
        reader = open_readonly(store_path)
        try:
            ticks = {int(n.time - T0) for n in reader.node()}
            first_worker = {int(r.time - T0): r for r in reader.processes(pid=1000)}
        finally:
            reader.close()
        # every printed tick is there (fine or folded into its 10 s bucket), at most one unprinted one after
        covered = ticks | {t + d for t in ticks for d in range(10)}
        assert set(range(last + 1)) <= covered, sorted(set(range(last + 1)) - covered)[:10]
        assert max(ticks) in (last, last + 1)
        assert first_worker[max(first_worker)].rss >= (last + 1) * 4096
        with opened(store_path) as store:  # the next agent writes on into the same file
            store.record(tick(T0 + max(ticks) + 1, [proc(1)], node_sample=node()))
            assert store.processes(pid=1) != []
            assert history_notices(store.notices) == []
        start = max(ticks) + 2


def make_real_history(path: Path, ticks: int = 400, n: int = 60) -> None:
    with opened(path) as store:
        for k in range(ticks):
            store.record(tick(T0 + k, [proc(1000 + i, rss=GIB + k * MIB + i) for i in range(n)], [cgroup()], node()))


def quarantined(path: Path) -> list[Path]:
    return sorted(
        p for p in path.parent.iterdir() if p.name.startswith(path.name + ".corrupt-") and "-wal" not in p.name
    )


def assert_moved_aside_and_recording(path: Path, notices: Notices, store: HistoryStore, old_size: int) -> None:
    moved = quarantined(path)
    assert len(moved) == 1, list(path.parent.iterdir())
    stamp = moved[0].name.split(".corrupt-")[1]
    datetime.strptime(stamp, "%Y%m%dT%H%M%SZ")  # a UTC time
    assert moved[0].stat().st_size == old_size  # the evidence is kept as it was
    said = history_notices(notices)
    assert len(said) == 1 and moved[0].name in said[0] and "started a new file" in said[0], said
    store.record(tick(T0, [proc(1)], [cgroup()], node()))
    assert [r.pid for r in store.processes()] == [1]
    assert integrity(path) == "ok"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "overwritten"])
def test_a_corrupt_file_is_moved_aside_and_a_new_one_started(store_path: Path, damage: str):
    store_path.parent.mkdir(parents=True)
    if damage == "garbage":
        store_path.write_bytes(random.Random(1).randbytes(200_000))
    else:
        make_real_history(store_path)
        size = store_path.stat().st_size
        assert size > 500_000
        with open(store_path, "r+b") as f:
            if damage == "truncated":
                f.truncate(size // 2)
            else:
                f.seek(size // 3)
                f.write(random.Random(2).randbytes(64 << 10))
    old_size = store_path.stat().st_size
    notices = Notices()
    with opened(store_path, notices=notices) as store:  # never raises
        assert_moved_aside_and_recording(store_path, notices, store, old_size)


def test_a_foreign_sqlite_file_is_not_written_into(store_path: Path):
    store_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(store_path)
    conn.execute("CREATE TABLE precious (x)")
    conn.execute("INSERT INTO precious VALUES (42)")
    conn.commit()
    conn.close()
    old_size = store_path.stat().st_size
    notices = Notices()
    with opened(store_path, notices=notices) as store:
        assert_moved_aside_and_recording(store_path, notices, store, old_size)
    conn = sqlite3.connect(quarantined(store_path)[0])
    try:
        assert conn.execute("SELECT x FROM precious").fetchall() == [(42,)]
    finally:
        conn.close()


def test_an_unusable_directory_is_said_once_and_recording_starts_when_it_can(tmp_path: Path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    notices = Notices()
    with opened(blocker / "history.db", notices=notices) as store:
        for k in range(100):
            store.record(tick(T0 + k, [proc(1)]))  # never raises
        said = history_notices(notices)
        assert len(said) == 1 and "cannot open" in said[0], said
        assert store.processes() == []
        blocker.unlink()
        for k in range(100, 200):  # tried again once a minute (of tick time)
            store.record(tick(T0 + k, [proc(1)]))
        times = [r.time for r in store.processes()]
        assert times and times[-1] == T0 + 199 and times[0] <= T0 + 161
        assert len(history_notices(notices)) == 1


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        skip_or_fail(f"{what} needs root")


@contextlib.contextmanager
def tiny_filesystem(where: Path, size: str = "256k"):
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)]).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=True)  # never leave it mounted
            pytest.fail(f"{where} was still busy: a descriptor left open")


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_disk_is_said_once_and_recording_resumes_when_space_is_freed(tmp_path: Path):
    _need_root("mounting a tiny tmpfs")
    with tiny_filesystem(tmp_path / "small") as small:
        notices = Notices()
        path = small / "history.db"
        procs = [proc(1000 + i, rank=i) for i in range(20)]  # small ticks: the freed space holds ten
        with opened(path, notices=notices) as store:
            store.record(tick(T0, procs, [cgroup()], node()))
            assert len(store.processes()) == 20
            filler = fill(small)
            k = 1
            started = time.monotonic()
            for k in range(1, 201):  # the WAL reuses its space for a while: record until a write fails
                store.record(tick(T0 + k, procs, [cgroup()], node()))  # never raises
            per_call = (time.monotonic() - started) / 200
            said = history_notices(notices)
            assert len(said) == 1 and "cannot write" in said[0] and "full" in said[0], said
            recorded = {r.time for r in store.processes(pid=1000)}
            assert T0 + 200 not in recorded  # ticks on a full disk are dropped, not queued
            assert per_call < 0.05  # a failing write fails fast: no crash loop, no busy wait
            filler.unlink()
            for k in range(201, 211):
                store.record(tick(T0 + k, procs, [cgroup()], node()))
            assert {T0 + k for k in range(201, 211)} <= {r.time for r in store.processes(pid=1000)}
            assert len(history_notices(notices)) == 1  # said once
        assert integrity(path) == "ok"


def test_a_reader_reads_while_another_process_writes(store_path: Path):
    store_path.parent.mkdir(parents=True)
    with start_writer(store_path, n=150, pause=0.002, fine_seconds=3600) as writer:
        assert writer.stdout is not None
        for line in writer.stdout:  # the file exists and has ticks
            if int(line) >= 5:
                break
        reader = open_readonly(store_path)
        try:
            counts = []
            for _ in range(30):
                rows = reader.processes(pid=1000)
                counts.append(len(rows))
                assert [r.time for r in rows] == sorted(r.time for r in rows)
                last = rows[-1].time
                assert len(reader.processes(job="job-k", since=last, until=last)) == 150  # never a half tick
                time.sleep(0.02)
            assert counts == sorted(counts) and counts[-1] > counts[0]
            with pytest.raises(ValueError):
                reader.set_meta("x", "y")
            reader.record(tick(T0, [proc(1)]))  # a reader records nothing, and does not raise
            assert reader.processes(pid=1) == []
        finally:
            reader.close()
        result = runner().invoke(history_cmd, ["--state-dir", str(store_path.parent), "--pid", "1001",
                                               "--format", "csv"])  # fmt: skip
        assert result.exit_code == 0, result.output
        assert len(result.stdout.splitlines()) > 5
        assert writer.poll() is None  # the writer was never disturbed
        writer.kill()
        _, err = writer.communicate(timeout=30)
        assert writer.returncode == -signal.SIGKILL, err
    assert integrity(store_path) == "ok"


def test_open_readonly_says_what_is_wrong(tmp_path: Path):
    with pytest.raises(InputError, match="no history at"):
        open_readonly(tmp_path / "missing.db")
    with pytest.raises(InputError, match="not a history file"):
        open_readonly(tmp_path)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(InputError, match="not a readable oomwatch history file"):
        open_readonly(garbage)
    assert garbage.read_bytes() == b"not sqlite at all" * 100  # a reader never moves anything
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="not an oomwatch history file"):
        open_readonly(foreign)


# -- oomwatch history ------------------------------------------------------------------------------


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()


@pytest.fixture
def recent_history(tmp_path: Path) -> tuple[Path, float]:
    """20 minutes of two jobs up to now: 10 minutes fine, the rest in 10 s peaks."""
    now = time.time()
    with opened(tmp_path / "history.db", fine_seconds=600) as store:
        start = now - 1200
        for k in range(1200):
            t = start + k
            store.record(tick(t, [
                proc(41, role="rank", rank=0, comm="python", rss=20 * GIB + k * MIB, uss=19 * GIB, pss=19 * GIB),
                proc(42, rank=0, rss=GIB, uss=100 * MIB + k * MIB),
                proc(77, job="job-b", role="rank", rank=3, comm="evil\x1b[31mname", rss=2 * GIB),
            ], [cgroup(), cgroup("/kubepods/pod-b/c2", 3 * GIB, ("job-b",))], node()))  # fmt: skip
        store.maintain(now)
    return tmp_path, now


def test_history_text(recent_history):
    state, now = recent_history
    result = runner().invoke(history_cmd, ["--state-dir", str(state), "--job", JOB, "--since", "10s"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["time", "pid", "role", "rank", "comm", "RSS", "anon", "USS", "PSS", "swap"]
    assert len(lines) in (1 + 2 * 9, 1 + 2 * 10, 1 + 2 * 11)  # the command's clock has moved on a little
    rank = [line for line in lines if " 41 " in line][-1]
    assert "rank" in rank and "python" in rank and "GiB" in rank and "19.0 GiB" in rank
    stamp = rank.split()[0]
    assert abs(datetime.fromisoformat(stamp).timestamp() - now) < 12  # local ISO time

    everything = runner().invoke(history_cmd, ["--state-dir", str(state)])
    assert everything.exit_code == 0
    header = everything.stdout.splitlines()[0].split()
    assert header[:3] == ["time", "job", "pid"]  # two jobs: which is which
    assert "\x1b" not in everything.stdout and "evil\\x1b[31mname" in everything.stdout
    assert "*" in everything.stdout and "peak" in everything.stdout.splitlines()[-1]


def test_history_tables_escape_what_processes_named_themselves(tmp_path: Path):
    """A job's run id, its comm and its cgroup's name are the job's own: in the tables, escapes, each on
    its row (a raw newline would start a forged row); csv and json keep them as data."""
    job, comm, path = "run\x1b]0;pwned\x07\nFORGED", "py\x1b[31mthon\r", "/kubepods/pod\x1b[2J/c\u202e1"
    now = time.time()
    with opened(tmp_path / "history.db") as store:
        store.record(tick(now - 5, [proc(41, job=job, role="rank", comm=comm), proc(42, job="other", comm="ok")],
                          [cgroup(path, jobs=(job,))], node()))  # fmt: skip
    for args in ([], ["--cgroups"]):
        result = runner().invoke(history_cmd, ["--state-dir", str(tmp_path), *args])
        assert result.exit_code == 0, result.output
        assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\u202e]", result.stdout), result.stdout
        assert not any(line.startswith("FORGED") for line in result.stdout.splitlines())
        shown = result.stdout
        assert "run\\x1b]0;pwned\\x07\\nFORGED" in shown
        assert ("/kubepods/pod\\x1b[2J/c\\u202e1" if args else "py\\x1b[31mthon\\r") in shown
    as_json = runner().invoke(history_cmd, ["--state-dir", str(tmp_path), "--cgroups", "--format", "json"])
    assert json.loads(as_json.stdout)["cgroups"][0]["path"] == path


def test_history_json_and_csv(recent_history):
    state, now = recent_history
    result = runner().invoke(history_cmd, ["--state-dir", str(state), "--pid", "42", "--since", "5m",
                                           "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "oomwatch.history/v1"
    rows = doc["processes"]
    assert 298 <= len(rows) <= 301 and {r["pid"] for r in rows} == {42}
    assert set(rows[0]) == set(ProcessRow.__dataclass_fields__)
    assert all(r["time"] >= now - 300 for r in rows) and rows[-1]["uss"] == 100 * MIB + 1199 * MIB

    iso_from = datetime.fromtimestamp(now - 1000).isoformat(timespec="seconds")
    iso_to = datetime.fromtimestamp(now - 700).isoformat(timespec="seconds")
    result = runner().invoke(history_cmd, ["--state-dir", str(state), "--pid", "41", "--since", iso_from,
                                           "--until", iso_to, "--format", "csv"])  # fmt: skip
    assert result.exit_code == 0, result.output
    table = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(table[0]) == list(ProcessRow.__dataclass_fields__)
    assert all(now - 1001 <= float(r["time"]) <= now - 700 for r in table)
    assert {r["resolution"] for r in table} == {"10.0"}  # this far back: 10 s peaks
    assert int(table[0]["rss"]) > 20 * GIB and table[0]["swap_pss"] == ""  # raw bytes; unknown is empty

    result = runner().invoke(history_cmd, ["--state-dir", str(state), "--cgroups", "--job", "job-b",
                                           "--since", "1m", "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "oomwatch.history/v1"
    assert {c["path"] for c in doc["cgroups"]} == {"/kubepods/pod-b/c2"} and 58 <= len(doc["cgroups"]) <= 61
    assert set(doc["cgroups"][0]) == set(CgroupRow.__dataclass_fields__)

    text = runner().invoke(history_cmd, ["--state-dir", str(state), "--cgroups", "--since", "3s"])
    assert text.exit_code == 0 and "/kubepods/pod-b/c2" in text.stdout and "16.0 GiB" in text.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "yesterday"], "--since 'yesterday'"),
        (["--until", "10 parsecs"], "--until '10 parsecs'"),
        (["--cgroups", "--pid", "3"], "--pid does not apply"),
    ],
)
def test_history_usage_errors_are_one_line_and_exit_2(recent_history, args, says):
    state, _ = recent_history
    result = runner().invoke(history_cmd, ["--state-dir", str(state), *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("oomwatch: ") and says in result.stderr


def test_when_forms():
    now = 1_714_550_000.0
    assert parse_when("10m", now) == now - 600
    assert parse_when("2h", now) == now - 7200
    assert parse_when("1d", now) == now - 86400
    assert parse_when("90s", now) == now - 90
    assert parse_when("1.5h", now) == now - 5400
    assert parse_when("now", now) == now
    assert parse_when("2024-05-01T07:30Z", now) == 1_714_548_600
    assert parse_when("2024-05-01T09:30+02:00", now) == 1_714_548_600
    local = datetime(2024, 5, 1, 9, 30).timestamp()  # no zone: local time
    assert parse_when("2024-05-01T09:30", now) == local and parse_when("2024-05-01 09:30:00", now) == local
    for bad in ("yesterday", "10", "-5m", "10 parsecs", ""):
        with pytest.raises(ValueError, match="duration ago"):
            parse_when(bad, now)


def test_history_without_a_file(tmp_path: Path):
    result = runner().invoke(history_cmd, ["--state-dir", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "no history at" in result.stderr and "history.db" in result.stderr
    (tmp_path / "history.db").write_text("hello")
    result = runner().invoke(history_cmd, ["--state-dir", str(tmp_path)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "not a readable" in result.stderr


def test_history_nothing_selected_and_help(recent_history):
    state, _ = recent_history
    result = runner().invoke(history_cmd, ["--state-dir", str(state), "--job", "nobody"])
    assert result.exit_code == 0 and result.stdout == "" and "no process samples" in result.stderr
    result = runner().invoke(history_cmd, ["--help"])
    assert result.exit_code == 0
    assert (
        "oomwatch history --job" in result.stdout
        and "--since" in result.stdout
        and "/var/lib/oomwatch" in result.stdout
    )


# -- cost ------------------------------------------------------------------------------------------


def _written_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


@pytest.mark.slow
def test_disk_use_per_hour(tmp_path: Path):
    """One hour of a 150-process job at a 1 s interval, maintenance as the agent runs it. Prints the
    numbers quoted in oomwatch/agent/history/store.py (run with -s)."""
    n, seconds = 150, 3600
    rng = random.Random(7)
    base = [rng.randrange(200 * MIB, 8 * GIB) for _ in range(n)]
    job = "torchelastic-3f2a9c1e-5b7d-4e1a-9d0c-2b8e6f4a1c7d"
    path = tmp_path / "history.db"
    costs = []
    maintenance_ticks: set[int] = set()
    written = _written_bytes()
    with opened(path) as store:
        for k in range(seconds):
            t = T0 + k + rng.random() * 0.01  # a real clock's fractions
            procs = [
                ProcessSample(pid=40_000 + i, ppid=40_000 if i % 10 else 1, comm="pt_data_worker" if i % 10 else "python",
                              role="dataloader_worker" if i % 10 else "rank", job=job, rank=i // 10,
                              local_rank=(i // 10) % 8, state="S",
                              rss=base[i] + k * 4096 * (i % 3) + rng.randrange(MIB), anon=base[i] // 2 + k * 4096,
                              file=base[i] // 4, shmem=64 * MIB, swap=0, hwm=base[i] + k * 12288,
                              pss=base[i] * 3 // 4 if (k + i) % 5 == 0 else None,
                              uss=base[i] // 2 + k * 4096 if (k + i) % 5 == 0 else None, swap_pss=0)
                for i in range(n)
            ]  # fmt: skip
            cgs = [cgroup(f"/kubepods/burstable/pod{j}/{'a' * 64}", 40 * GIB + k * MIB) for j in range(2)]
            sample = tick(t, procs, cgs, node(400 * GIB - k * MIB))
            started = time.perf_counter()
            store.record(sample)
            costs.append(time.perf_counter() - started)
            maintained = store.get_meta("maintained")
            if maintained is not None and float(maintained) == sample.time:
                maintenance_ticks.add(k)
        size = store.file_bytes()
        rows = len(store.processes(pid=40_000))
        assert history_notices(store.notices) == []
    written = _written_bytes() - written
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert rows >= 900 + 260  # 15 min at 1 s, the rest in 10 s peaks

    assert 59 <= len(maintenance_ticks) <= 61
    maintenance = [c for k, c in enumerate(costs) if k in maintenance_ticks]
    plain = sorted(c for k, c in enumerate(costs) if k not in maintenance_ticks)
    insert_ms = plain[len(plain) // 2] * 1000
    mean_ms = sum(costs) / len(costs) * 1000
    maintain_ms = (sum(maintenance) / len(maintenance)) * 1000 - insert_ms
    # steady state: each further hour adds 360 buckets x 150 processes; bytes per row from this file
    conn = sqlite3.connect(path)
    try:
        process_rows = conn.execute("SELECT COUNT(*) FROM process").fetchone()[0]
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout.strip()
    finally:
        conn.close()
    per_row = size / process_rows
    per_hour = 360 * n * per_row
    print(
        f"\nhistory, {n} processes at 1 s for {seconds / 3600:g} h (on {fs}): file {size / 1e6:.1f} MB after the "
        f"first hour ({process_rows} process rows, {per_row:.0f} B a row with its indexes); then "
        f"+{per_hour / 1e6:.1f} MB per further hour of 10 s peaks, {(size + 23 * per_hour) / 1e6:.0f} MB for a day "
        f"(extrapolated); record() {insert_ms:.2f} ms a tick (median; mean with maintenance {mean_ms:.2f} ms), "
        f"maintain() {maintain_ms:.0f} ms a minute; {written / seconds / 1024:.0f} KiB written a tick (WAL and "
        f"checkpoints)"
    )
    assert insert_ms < 20 and size < 100e6


def test_diagnose_with_a_damaged_history_still_diagnoses_the_log_and_says_why(recent_history):
    from tests.conftest import ROOT, run_oomwatch

    state, _ = recent_history
    db = state / "history.db"
    size = db.stat().st_size
    with db.open("r+b") as f:  # a third of the way in, pages of garbage (a bad sector, a torn copy)
        for off in range(size // 3, size // 3 + 16 * 1024, 1024):
            f.seek(off + 16)
            f.write(bytes((i * 37 + off) % 251 for i in range(1000)))
    r = run_oomwatch("diagnose", "-f", "json", str(ROOT / "tests/fixtures/kernel/k-007.log"), "--history", str(db))
    assert r.returncode in (0, 3) and b"Traceback" not in r.stderr, r.stderr.decode()[-2000:]  # 3: not determined
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "cgroup_oom"
    assert any(n.startswith("history not used: cannot read history") for n in doc["notes"]), doc["notes"]


def test_history_steps_shows_a_jobs_counters(tmp_path: Path):
    now = time.time()
    with opened(tmp_path / "history.db", fine_seconds=60) as store:
        for k in range(120):
            t = now - 120 + k
            marks = (_mark(t, 5 * k), _mark(t, k % 40, total=40, name="Epoch 1"))
            store.record(dataclasses.replace(tick(t, [proc(1)]), steps=marks))
        store.maintain(now)
    state = ["--state-dir", str(tmp_path)]
    text = runner().invoke(history_cmd, [*state, "--job", JOB, "--steps"])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["time", "counter", "name", "step", "of"]
    assert lines[1].split()[0].endswith("*") and not lines[-2].split()[0].endswith("*")  # coarse rows first, marked
    assert lines[-2].split()[1:] == ["progress_bar", "Epoch", "1", "39", "40"]
    assert "a counter's highest step" in lines[-1]
    doc = json.loads(runner().invoke(history_cmd, [*state, "--job", JOB, "--steps", "--format", "json"]).stdout)
    assert doc["schema"] == "oomwatch.history/v1" and doc["steps"][-1]["step"] in (595, 39)
    assert {r["rule"] for r in doc["steps"]} == {"step_word", "progress_bar"}
    csv_out = runner().invoke(history_cmd, [*state, "--job", JOB, "--steps", "--format", "csv"]).stdout
    assert csv_out.splitlines()[0] == "time,resolution,job,rule,name,total,step"
    for bad, said in ((["--steps"], "--steps needs --job"), (["--job", JOB, "--steps", "--cgroups"], "not --cgroups")):
        refused = runner().invoke(history_cmd, [*state, *bad])
        assert refused.exit_code == 2 and said in refused.stderr, refused.output
    none = runner().invoke(history_cmd, [*state, "--job", "nobody", "--steps"])
    assert "no step counter samples recorded" in none.stderr
