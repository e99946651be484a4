"""Each kill is written once and never lost: an incident's identity is the kill (agent.killid), a
restart that reads the same kill again writes nothing, and a state directory that refuses the file
still has the kill counted and exported at once, and written when it can be (also after a restart).

The kill is a real one: the report captured from a cgroup v1 OOM kill of a DataLoader worker
(tests/fixtures/captured/memcg_dataloader_worker, see its README)."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

from prometheus_client import generate_latest

from oomwatch.agent.incidents.writer import Incidents
from oomwatch.agent.serve.exporter import AgentCollector, registry_for
from oomwatch.agent.tick import ProcessSample
from oomwatch.agent.watch.killid import agent_kill_id, kernel_kill_id, line_kill_id
from oomwatch.agent.watch.logfile import LogFileWatcher
from oomwatch.agent.watch.spans import kill_reports
from oomwatch.procfs.kmsg import parse_kmsg_record
from tests.conftest import FIXTURES

CAPTURE = FIXTURES / "captured" / "memcg_dataloader_worker" / "kmsg.txt"


def _report() -> tuple[int, list]:
    records = [r for r in (parse_kmsg_record(line) for line in CAPTURE.read_bytes().splitlines()) if r is not None]
    ((pid, report),) = kill_reports(records)
    return pid, report


def _files(state: Path) -> list[Path]:
    d = state / "incidents"
    return sorted(d.glob("*.json")) if d.is_dir() else []


def _exposition(incidents: Incidents) -> str:
    collector = AgentCollector(top_n=5, budget_fraction=0.01)
    collector.incidents = incidents
    return generate_latest(registry_for(collector)).decode()


def test_a_kill_read_again_is_not_written_again_also_after_a_restart(tmp_path: Path):
    state = tmp_path / "state"
    pid, report = _report()
    first = Incidents(state)
    path = first.on_kill_records(pid, report)
    assert path is not None and path.exists()
    doc = json.loads(path.read_text())
    assert doc["kill_id"] == kernel_kill_id(first.boot, next(r.usec for r in report if "Killed process" in r.text), pid)
    assert first.on_kill_records(pid, report) == path  # the watcher handed it on twice
    # a restart reads the kernel log from before the kill (its position was not saved yet)
    again = Incidents(state)
    assert again.on_kill_records(pid, report) == path
    assert len(_files(state)) == 1
    assert sum(again.counts.values()) == 0  # counted by the agent that wrote it, not again
    # the same kill from the journal (the boot spelt without dashes) is the same kill
    usec = next(r.usec for r in report if "Killed process" in r.text)
    assert kernel_kill_id(first.boot.replace("-", "").upper(), usec, pid) == doc["kill_id"]
    # another kill of the same pid (a later report) is another incident
    later = [r.__class__(r.prefix, r.seq + 1000, r.usec + 5_000_000, r.flags, r.text, r.raw) for r in report]
    other = again.on_kill_records(pid, later)
    assert other is not None and other != path
    assert len(_files(state)) == 2


def test_lines_from_a_log_file_are_one_kill_by_their_kill_line(tmp_path: Path):
    pid, report = _report()
    lines = [r.dmesg_line() for r in report]
    assert line_kill_id(lines, pid) == line_kill_id([f"  {line} " for line in lines], pid)
    assert line_kill_id(lines, pid) != line_kill_id(lines, pid + 1)
    incidents = Incidents(tmp_path / "state")
    path = incidents.on_kill(pid, lines)
    assert incidents.on_kill(pid, lines[len(lines) // 2 :]) == path  # a restart that missed the header
    assert len(_files(tmp_path / "state")) == 1


def test_a_refused_write_is_counted_at_once_and_written_when_the_disk_allows(tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "incidents").write_text("not a directory: every write into it fails, for root too\n")
    pid, report = _report()
    incidents = Incidents(state)
    assert incidents.on_kill_records(pid, report) is None
    assert incidents.unwritten == 1 and incidents.write_errors == 1 and not incidents.durable()
    text = _exposition(incidents)
    # the alert's series and the counter are there before any file is
    assert f'comm="{report_comm(report)}"' in text
    assert 'verdict="cgroup_oom"' in text and "oomwatch_incident_timestamp_seconds{" in text
    assert "oomwatch_incidents_unwritten 1.0" in text and "oomwatch_incident_write_errors_total 1.0" in text
    assert incidents.flush(force=True) == [] and incidents.write_errors == 2  # still refused
    (state / "incidents").unlink()
    written = incidents.flush(force=True)
    assert len(written) == 1 and written[0].exists() and written[0].with_suffix(".txt").exists()
    assert incidents.durable() and "oomwatch_incidents_unwritten 0.0" in _exposition(incidents)
    assert json.loads(written[0].read_text())["diagnosis"]["verdict"] == "cgroup_oom"
    assert Incidents(state).on_kill_records(pid, report) == written[0]  # and a restart knows it


def report_comm(report: list) -> str:
    line = next(r.text for r in report if "Killed process" in r.text)
    m = re.search(r"Killed process \d+ \(([^)]*)\)", line)
    assert m
    return m.group(1)


def test_a_kill_the_disk_refused_is_read_again_after_a_restart(tmp_path: Path):
    """The watcher keeps its position before a kill not yet written: a restart reads it again."""
    state = tmp_path / "state"
    state.mkdir()
    log = tmp_path / "kern.log"
    log.write_text("")
    pid, report = _report()
    (state / "incidents").write_text("refuses writes\n")
    incidents = Incidents(state)
    watcher = LogFileWatcher(log, state, incidents.on_kill, durable=incidents.durable)
    start = json.loads((state / "logfile-position.json").read_text())["offset"]
    with log.open("a") as f:
        f.write("".join(f"kernel: {r.dmesg_line()}\n" for r in report))
    watcher.lines.extend(watcher._read_new())
    watcher._handle()
    watcher._save(watcher._offset)  # what the quiet time would do
    assert incidents.unwritten == 1
    assert json.loads((state / "logfile-position.json").read_text())["offset"] == start
    # the agent is killed now; the disk is freed; it starts again
    (state / "incidents").unlink()
    again = Incidents(state)
    watcher = LogFileWatcher(log, state, again.on_kill, durable=again.durable)
    watcher.lines.extend(watcher._read_new())
    watcher._handle()
    assert [json.loads(p.read_text())["victim"]["pid"] for p in _files(state)] == [pid]
    assert json.loads((state / "logfile-position.json").read_text())["offset"] == log.stat().st_size
    shutil.rmtree(state)


class _StuckEngine:
    """An engine whose scan never ends in time (what a pattern that backtracks for minutes did)."""

    def scan(self, *_: object) -> None:
        time.sleep(30)


def test_a_diagnosis_that_takes_too_long_is_abandoned_and_the_kill_written_with_what_is_known(tmp_path: Path):
    from oomwatch.render.diagnosis import RENDERERS

    pid, report = _report()
    incidents = Incidents(tmp_path / "state")
    incidents._engine = (_StuckEngine(), RENDERERS)
    incidents.diagnose_seconds = 0.5
    started = time.monotonic()
    path = incidents.on_kill_records(pid, report)
    assert time.monotonic() - started < 2.0
    assert path is not None
    doc = json.loads(path.read_text())
    assert doc["diagnosis"]["verdict"] == "cgroup_oom" and doc["diagnosis"]["cause_determined"] is False
    assert "abandoned" in doc["diagnosis"]["error"]
    assert any("Killed process" in line for line in doc["kernel_lines"])
    assert f"pid {pid}" in path.with_suffix(".txt").read_text()
    assert sum(incidents.counts.values()) == 1


def test_malformed_incident_files_are_skipped_and_said(tmp_path: Path):
    from tests.conftest import run_oomwatch

    state = tmp_path / "state"
    pid, report = _report()
    good = Incidents(state).on_kill_records(pid, report)
    assert good is not None
    d = state / "incidents"
    (d / "20260101T000000Z-a-1.json").write_text(
        '{"schema": "oomwatch.incident/v1", "id": "a", "time": 1, "victim": 5, "diagnosis": []}'
    )
    (d / "20260101T000000Z-b-2.json").write_text('{"schema": "oomwatch.incident/v1", "id": "b", "time": 1, "victim"')
    (d / "20260101T000000Z-c-3.json").write_text("[" * 100000 + "]" * 100000)
    r = run_oomwatch("incidents", "--state-dir", str(state))
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode()[-2000:]
    assert good.stem.encode() in r.stdout
    said = r.stderr.decode()
    assert "skipped 20260101T000000Z-a-1.json: no victim" in said and "b-2.json: unreadable" in said, said
    assert "c-3.json: unreadable" in said
    html = run_oomwatch("incidents", "--state-dir", str(state), "show", str(d / "20260101T000000Z-a-1.json"),
                        "--html", str(tmp_path / "a.html"))  # fmt: skip
    assert html.returncode == 2 and b"Traceback" not in html.stderr and b"usable shape" in html.stderr, html.stderr
    assert Incidents(state).on_kill_records(pid, report) == good  # the agent reads past them too


def _worker(pid: int) -> ProcessSample:
    return ProcessSample(pid=pid, ppid=1, comm="pt_data_worker", role="dataloader_worker", job="train", rank=None,
                         local_rank=None, state="S", rss=150 << 20, anon=140 << 20, file=10 << 20, shmem=0, swap=0,
                         hwm=150 << 20, cgroup="/oomwatch-incident")  # fmt: skip


def test_a_report_that_comes_after_the_sigkill_incident_replaces_it(tmp_path: Path):
    """journald on a loaded node handed a worker's OOM report on after the SIGKILL incident was written
    (CI, 2026-12-06): the report's incident takes that file over, counted once, and says what it replaced."""
    state = tmp_path / "state"
    pid, report = _report()
    incidents = Incidents(state)
    first = incidents.on_sigkill([_worker(pid)], "cgroup /oomwatch-incident held 152 MiB of its 160 MiB limit",
                                 "died of SIGKILL", ("from the exit event",), None, True)  # fmt: skip
    assert first is not None
    assert json.loads(first.read_text())["diagnosis"]["verdict"] == "userspace_oom_kill"
    assert [k[4] for k in incidents.counts] == ["userspace_oom_kill"]
    late = incidents.on_kill_records(pid, report)
    assert late == first and _files(state) == [first]
    doc = json.loads(first.read_text())
    assert doc["diagnosis"]["verdict"] == "cgroup_oom" and doc["replaces"] == agent_kill_id("exit", incidents.boot, pid)
    assert doc["kill_id"].startswith("kernel:") and "Killed process" in first.with_suffix(".txt").read_text()
    assert [(k[4], n) for k, n in incidents.counts.items()] == [("cgroup_oom", 1)]
    assert [e[5] for e in incidents.recent] == ["cgroup_oom"]
    assert incidents.on_kill_records(pid, report) == first  # handed on again: the same kill
    # a restart knows the kill by the report's id
    assert Incidents(state).on_kill_records(pid, report) == first and len(_files(state)) == 1


def test_a_report_long_after_a_sigkill_incident_or_of_another_pid_is_an_incident_of_its_own(tmp_path, monkeypatch):
    from oomwatch.agent.incidents import ledger

    state = tmp_path / "state"
    pid, report = _report()
    incidents = Incidents(state)
    other = incidents.on_sigkill([_worker(pid + 1)], None, "died of SIGKILL", (), None, True)
    assert other is not None and incidents.on_kill_records(pid, report) not in (None, other)
    assert len(_files(state)) == 2
    monkeypatch.setattr(ledger, "REPLACE_SECONDS", -1.0)  # taken on longer ago than the window
    later = [r.__class__(r.prefix, r.seq + 1000, r.usec + 5_000_000, r.flags, r.text, r.raw) for r in report]
    sigkill = incidents.on_sigkill([_worker(pid)], None, "died of SIGKILL", (), None, True)
    assert sigkill is not None and incidents.on_kill_records(pid, later) not in (None, sigkill)
    assert len(_files(state)) == 4 and sum(incidents.counts.values()) == 4


def test_a_pid_used_again_and_sigkilled_again_is_another_incident(tmp_path: Path):
    """An exit's kill id is the process, not only its pid: a pid the kernel hands out again in the same boot
    (pid_max wraps on a busy node) and SIGKILLed again is a second incident; the same exit handed on twice is one."""
    from dataclasses import replace

    state = tmp_path / "state"
    incidents = Incidents(state)
    first = replace(_worker(4242), start_time=1_000)
    again = replace(_worker(4242), start_time=9_000_000)
    a = incidents.on_sigkill([first], None, "died of SIGKILL", (), None, True)
    assert a is not None and incidents.on_sigkill([first], None, "died of SIGKILL", (), None, True) == a
    b = incidents.on_sigkill([again], None, "died of SIGKILL", (), None, True)
    assert b is not None and b != a and len(_files(state)) == 2
    ids = {json.loads(f.read_text())["kill_id"] for f in _files(state)}
    assert ids == {
        agent_kill_id("exit", incidents.boot, 4242, 1_000),
        agent_kill_id("exit", incidents.boot, 4242, 9_000_000),
    }
    assert sum(incidents.counts.values()) == 2


def test_a_sigkill_incident_still_being_written_when_the_report_takes_over_is_not_written(tmp_path: Path):
    state = tmp_path / "state"
    pid, report = _report()
    incidents = Incidents(state)
    pending = incidents._claim(agent_kill_id("exit", incidents.boot, pid), time.time(), pid, _worker(pid), "train",
                               "pt_data_worker", "userspace_oom_kill", sigkill=True)  # fmt: skip
    assert not isinstance(pending, Path)
    path = incidents.on_kill_records(pid, report)
    assert path is not None and path.stem == pending.ident
    # the SIGKILL incident's diagnosis ends now: its labels and its files give way to the report's
    incidents._settle(pending, ("train", "dataloader_worker", "", "pt_data_worker", "userspace_oom_kill", "x"), "r")
    assert incidents._store(pending, {"diagnosis": {"verdict": "userspace_oom_kill"}}, "stale\n") == path
    assert json.loads(path.read_text())["diagnosis"]["verdict"] == "cgroup_oom"
    assert "stale" not in path.with_suffix(".txt").read_text()
    assert [(k[4], n) for k, n in incidents.counts.items()] == [("cgroup_oom", 1)]
