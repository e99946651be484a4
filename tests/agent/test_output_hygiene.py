"""What processes chose for themselves — their comm, their run id, their cgroup's name, what they
printed — reaches `oomwatch incidents`, `incidents show`, the incident's text file, `oomwatch top` and
the agent's log only as visible escapes (\\x1b, \\n): no terminal escape, no forged line."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
from pathlib import Path

from oomwatch.agent.tick import CgroupSample, ProcessSample, Tick
from oomwatch.agent.top import History
from oomwatch.render.incident_text import render_incident_text
from oomwatch.render.top import render_text
from tests.agent.agentproc import AgentProcess
from tests.conftest import FIXTURES, run_oomwatch

REAL = FIXTURES / "incidents" / "20261130T015859Z-tree-19055-19057.json"  # a job: 3 processes, its cgroup
COMM = "py\x1b]0;pwned\x07thon"
JOB = "run\x1b[2J\r\nFORGED: oomwatch agent: WARNING: fake"
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e]")


def _hostile(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    doc["victim"]["comm"], doc["victim"]["job"] = COMM, JOB
    doc["history"]["source"] = "history\x07"
    for row in doc["history"]["processes"]:
        row["role"] = "rank\x1b[5m"
    return doc


def _clean(text: str) -> None:
    assert not RAW_CONTROL.search(text), RAW_CONTROL.findall(text)
    assert not any(line.startswith("FORGED") for line in text.splitlines()), text


def test_the_incident_text_escapes_each_field_before_its_lines_are_joined():
    doc = _hostile(json.loads(REAL.read_text()))
    text = render_incident_text(doc, "DIAGNOSIS of py\x1b[31mthon\x1b]0;x\x07\n")
    _clean(text)
    assert "py\\x1b]0;pwned\\x07thon" in text and "run\\x1b[2J\\r\\nFORGED" in text
    assert "DIAGNOSIS of py\\x1b[31mthon\\x1b]0;x\\x07\n" in text and "rank\\x1b[5m" in text
    assert "History (history\\x07)" in text


def test_incidents_and_incidents_show_escape_what_was_recorded(tmp_path: Path):
    state = tmp_path / "state"
    (state / "incidents").mkdir(parents=True)
    doc = _hostile(json.loads(REAL.read_text()))
    (state / "incidents" / REAL.name).write_text(json.dumps(doc))
    listed = run_oomwatch("incidents", "--state-dir", str(state))
    assert listed.returncode == 0, listed.stderr
    _clean(listed.stdout.decode())
    assert "pid 19057 py\\x1b]0;pwned\\x07thon" in listed.stdout.decode()
    # a text file written by an agent that did not escape yet: escaped when shown
    (state / "incidents" / REAL.with_suffix(".txt").name).write_bytes(f"killed {COMM} of job run\x1b[2J\rX\n".encode())
    shown = run_oomwatch("incidents", "--state-dir", str(state), "show", doc["id"])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.decode() == "killed py\\x1b]0;pwned\\x07thon of job run\\x1b[2J\\rX\n"
    # --format json: the incident as data, as it was written
    as_json = run_oomwatch("incidents", "--state-dir", str(state), "show", doc["id"], "-f", "json")
    assert json.loads(as_json.stdout)["victim"]["comm"] == COMM


def test_incidents_show_html_writes_a_file_for_its_owner_only(tmp_path: Path):
    state = tmp_path / "state"
    (state / "incidents").mkdir(parents=True)
    shutil.copy(REAL, state / "incidents" / REAL.name)
    page = tmp_path / "page.html"
    done = run_oomwatch("incidents", "--state-dir", str(state), "show", str(REAL), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert page.stat().st_mode & 0o777 == 0o600
    # an existing file keeps the mode its owner gave it
    page.chmod(0o644)
    done = run_oomwatch("incidents", "--state-dir", str(state), "show", str(REAL), "--html", str(page))
    assert done.returncode == 0 and page.stat().st_mode & 0o777 == 0o644
    assert "0600" in run_oomwatch("incidents", "show", "--help").stdout.decode()


def _sample(pid: int, comm: str, job: str | None, role: str = "rank") -> ProcessSample:
    return ProcessSample(pid=pid, ppid=1, comm=comm, role=role, job=job, rank=0, local_rank=0, state="S",
                         rss=1 << 30, anon=1 << 29, file=1 << 20, shmem=0, swap=0, hwm=1 << 30,
                         cgroup="/job")  # fmt: skip


def test_top_escapes_comms_jobs_and_cgroups():
    cgroup = CgroupSample(path="/kubepods/pod\x1b[2J\nFORGED", version=2, usage=1 << 30, limit=2 << 30,
                          effective_limit=2 << 30, peak=None, anon=1 << 29, file=0, shmem=0, swap=0, oom_kills=0,
                          pressure=None, jobs=(JOB,))  # fmt: skip
    procs = (_sample(10, COMM, JOB), _sample(11, "loner\rFORGED", None, role="other"))
    ticks = [Tick(time=t, duration=0.01, processes=procs, cgroups=(cgroup,), node=None) for t in (100.0, 101.0)]
    history = History()
    for t in ticks:
        history.add(t)
    text = render_text(ticks[-1], history, ["note from a \x1b[31mprocess"])
    _clean(text)
    assert "job run\\x1b[2J\\r\\nFORGED" in text and "cgroup /kubepods/pod\\x1b[2J\\nFORGED" in text
    assert "py\\x1b]0;pwne" in text and "loner\\rFORGED" in text  # a comm column is 16 wide
    assert "note from a \\x1b[31mprocess" in text


def test_the_agents_log_escapes_what_it_quotes(tmp_path: Path):
    state = tmp_path / "state\x1b]0;pwned\x07\rFORGED"
    config = tmp_path / "agent.yaml"
    config.write_text("interval: 0.5\n")
    agent = AgentProcess("--listen", "127.0.0.1:0", "--config", str(config), "--state-dir", str(state))
    try:
        agent.proc.send_signal(signal.SIGHUP)
        line = agent.wait_for(r"configuration reloaded: .*").group(0)
    finally:
        rc = agent.stop()
    assert rc == 0, "".join(agent.lines)
    assert line.endswith("state\\x1b]0;pwned\\x07\\rFORGED"), line
    assert not any(RAW_CONTROL.search(x) or x.startswith("FORGED") for x in agent.lines), agent.lines


def test_the_log_formatter_keeps_a_tracebacks_lines():
    import logging

    from oomwatch.logfmt import EscapingFormatter

    try:
        raise ValueError("bad \x1b[2J value")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "pid %d (%s)", (7, "a\nb"), sys.exc_info())
    text = EscapingFormatter("%(levelname)s: %(message)s").format(record)
    first, *rest = text.split("\n")
    assert first == "ERROR: pid 7 (a\\nb)"
    assert rest[-1] == "ValueError: bad \\x1b[2J value" and rest[0].startswith("Traceback")
