"""Text for people fits its width and cuts nothing; Markdown cuts nothing; no word is said twice.

Every golden case (tests/cases) and every example (examples/) is diagnosed once, in-process, and
rendered as text at 100 columns (not a terminal), at 80 and at 40, and as Markdown. The command line
is run once under a real pseudo-terminal, sized by COLUMNS and by the terminal itself.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomwatch.agent.incidents.listing import INCIDENT_SCHEMA
from oomwatch.cli import main
from oomwatch.engine.api import Engine
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.model import Evidence
from oomwatch.engine.roles import role_phrase
from oomwatch.render.diagnosis import render_markdown, render_text
from oomwatch.render.incident_text import render_incident_text
from oomwatch.render.layout import MAX_QUOTE, NOT_A_TERMINAL, code, output_width, quote, table, wrap
from oomwatch.textsafe import escape_controls
from tests.conftest import ROOT

CASES = sorted(p for p in (ROOT / "tests" / "cases").iterdir() if p.is_dir())
EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir())
# a word said twice in a row ("rank rank 3", "the the"); numbers are not words (a task table's "0 0")
DOUBLED = re.compile(r"\b([^\W\d_]+)\s+\1\b", re.IGNORECASE)
ALLOWED_DOUBLES: frozenset[str] = frozenset()  # none needed so far: add one with the sentence that needs it


def _inputs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name not in ("README.md", "expected.json"))


@pytest.fixture(scope="module")
def diagnoses() -> dict[str, Diagnosis]:
    engine = Engine.load(())
    out = {}
    for folder in [*CASES, *EXAMPLES]:
        scans = [engine.scan(p.name, p.read_bytes()) for p in _inputs(folder)]
        out[str(folder.relative_to(ROOT))] = engine.diagnose(scans)
    return out


def _too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.mark.parametrize("width", [NOT_A_TERMINAL, 80, 40])
def test_every_line_of_text_fits_the_width(diagnoses: dict[str, Diagnosis], width: int) -> None:
    for name, d in diagnoses.items():
        text = render_text(d, width) if width != NOT_A_TERMINAL else render_text(d)
        assert not _too_wide(text, width), (name, _too_wide(text, width))


def _unspaced(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_text_and_markdown_show_every_evidence_line_whole(diagnoses: dict[str, Diagnosis]) -> None:
    """Wrapped, not cut: each evidence line is in the text (whitespace aside: it was wrapped) and
    whole in the Markdown; no "…" that the logs did not have."""
    for name, d in diagnoses.items():
        text, md = render_text(d, 80), render_markdown(d)
        flowed = _unspaced(text)
        for e in d.evidence:
            where = f"{e.file}:{e.line}: "
            assert where + escape_controls(e.text) in md, (name, e.text)
            assert _unspaced(where + escape_controls(e.text)) in flowed, (name, e.text)
        logs = "".join(p.read_text(errors="replace") for p in _inputs(ROOT / name))
        if "…" not in logs:
            assert "…" not in text and "…" not in md, name


def _without_quotes(d: Diagnosis) -> Diagnosis:
    """``d`` with every quoted log line replaced by a mark: a log may say a word twice (sacct's
    `60843303.batch  batch`), oomwatch's own words may not."""

    def mark(evidence: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
        return tuple(dataclasses.replace(e, text="(quoted)") for e in evidence)

    return dataclasses.replace(
        d,
        evidence=mark(d.evidence),
        causes=tuple(dataclasses.replace(c, evidence=mark(c.evidence)) for c in d.causes),
        victims=tuple(dataclasses.replace(v, evidence=mark(v.evidence)) for v in d.victims),
    )


def test_no_word_is_said_twice(diagnoses: dict[str, Diagnosis]) -> None:
    for name, full in diagnoses.items():
        d = _without_quotes(full)
        for out in (render_text(d), render_text(d, 40), render_markdown(d)):
            doubles = [m.group(0) for m in DOUBLED.finditer(out) if m.group(1).lower() not in ALLOWED_DOUBLES]
            assert not doubles, (name, doubles)


@pytest.mark.parametrize("role", ["rank", "launcher", "dataloader_worker", "manager", "other", "unknown", None])
@pytest.mark.parametrize("rank", [None, 0, 3, "3"])
def test_a_role_and_its_rank_are_said_once(role: str | None, rank: int | str | None) -> None:
    said = role_phrase(role, rank)
    assert not DOUBLED.search(said), said
    if rank is not None:
        assert said.endswith(f"rank {rank}")
    assert said.split(" ")[0] == (role or "unknown") or said == f"rank {rank}"


def _incident(tmp_path: Path, role: str, rank: int | None) -> Path:
    doc = {
        "schema": INCIDENT_SCHEMA,
        "id": "20261130T014501Z-torchrun-run-1-4242",
        "time": 1764467101.0,
        "victim": {"pid": 4242, "comm": "python3", "role": role, "rank": rank, "job": "run-1"},
        "diagnosis": {"verdict": "cgroup_oom", "causes": [{"id": "unbounded_cache"}]},
        "history": {"source": "the agent's samples", "processes": []},
    }
    folder = tmp_path / "incidents"
    folder.mkdir(exist_ok=True)
    path = folder / f"{doc['id']}.json"
    path.write_text(json.dumps(doc))
    return path


def test_incidents_and_incident_text_say_rank_once(tmp_path: Path) -> None:
    path = _incident(tmp_path, "rank", 3)
    listed = CliRunner().invoke(main, ["incidents", "--state-dir", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    assert "(rank 3)" in listed.output and not DOUBLED.search(listed.output), listed.output
    assert not _too_wide(listed.output, NOT_A_TERMINAL)
    text = render_incident_text(json.loads(path.read_text()), "MEMORY LIMIT HIT\n")
    assert "pid 4242 (python3, rank 3) of job run-1" in text and not DOUBLED.search(text), text


def test_a_worker_is_said_to_be_of_its_rank(tmp_path: Path) -> None:
    text = render_incident_text(json.loads(_incident(tmp_path, "dataloader_worker", 1).read_text()), "x\n")
    assert "(python3, dataloader_worker of rank 1)" in text


def test_an_absurd_line_is_cut_and_says_so() -> None:
    line = "x" * 50_000
    lines = quote("train.log:7", line, 100)
    assert all(len(x) <= 100 for x in lines)
    shown = "".join(x.strip() for x in lines)
    assert shown.count("x") == MAX_QUOTE
    assert f"[cut: {50_000 - MAX_QUOTE} more characters]" in " ".join(" ".join(lines).split())


def test_a_quoted_line_breaks_at_spaces_commas_and_slashes_and_keeps_its_spacing() -> None:
    # tests/fixtures/captured/memcg_torchrun_rank: the kernel's oom-kill line has no space in 200 characters
    kill = (
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/process_api/d0096446eb50056ee825dbf0d10db061/oomwatch-capture-12688,"
        "task_memcg=/process_api/d0096446eb50056ee825dbf0d10db061/oomwatch-capture-12688,task=python3,pid=12922,uid=0"
    )
    lines = quote("dmesg.txt:79", kill, 80)
    assert len(lines) > 2 and all(len(x) <= 80 for x in lines)
    assert all(x.startswith("      ") for x in lines[1:])  # a hanging indent under "  dmesg.txt:79: "
    assert "".join(x.strip() for x in lines) == "dmesg.txt:79: " + kill
    assert all(x.rstrip()[-1] in ",/" for x in lines[:-1])  # broken where the line itself allows it
    row = "[  12922]     0 12922   314539   161687   138059 python3"
    assert quote("d:78", row, 100) == [f"  d:78: {row}"]


def test_prose_breaks_at_spaces_only() -> None:
    lines = wrap("Compare the limit with the job's peak: `cat /sys/fs/cgroup/<path>/memory.peak` (v2).", 50, "  - ")
    assert lines[1] == "    /sys/fs/cgroup/<path>/memory.peak` (v2)."  # the path whole, on the next line


def test_a_long_line_of_code_goes_on_further_in_and_a_comment_stays_a_comment() -> None:
    comment = "# smaller per-GPU batch with gradient accumulation, checkpointing, mixed precision"
    lines = code([comment, "x = 1"], 60)
    assert all(len(x) <= 60 for x in lines)
    assert lines[-1] == "    x = 1"
    assert all(x.lstrip().startswith("#") for x in lines[:-1]) and lines[1].startswith("        # ")


def test_a_table_too_wide_becomes_one_block_per_row() -> None:
    header = ["pid", "name", "cgroup", "from"]
    cgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e.slice/cri-containerd-0a1b2c.scope"
    rows = [["12922", "python3", cgroup, "kernel"], ["12921", "python3", "/", "kernel"]]
    wide = table(header, rows, 200)
    assert len(wide) == 3 and wide[1].split() == rows[0]
    narrow = table(header, rows, 80)
    assert all(len(x) <= 80 for x in narrow)
    assert narrow[:2] == ["  pid 12922", "    name python3,"]  # the cgroup does not fit beside it
    assert (
        narrow[2].startswith("    cgroup /kubepods.slice/") and narrow[-1] == "    name python3, cgroup /, from kernel"
    )
    assert cgroup in "".join(x.strip() for x in narrow)


class _Stream:
    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def isatty(self) -> bool:
        return self.fd is not None and os.isatty(self.fd)

    def fileno(self) -> int:
        if self.fd is None:
            raise OSError("no file")
        return self.fd


def _pty(columns: int) -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return master, slave


def test_the_width_is_the_terminals_or_columns_or_100(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    with (tmp_path / "out").open("w") as f:
        assert output_width(f) == NOT_A_TERMINAL
    monkeypatch.setenv("COLUMNS", "80")
    with (tmp_path / "out").open("w") as f:
        assert output_width(f) == NOT_A_TERMINAL  # COLUMNS is a terminal's width: a file has none
    master, slave = _pty(132)
    try:
        assert output_width(_Stream(slave)) == 80
        monkeypatch.delenv("COLUMNS")
        assert output_width(_Stream(slave)) == 132
        monkeypatch.setenv("COLUMNS", "12")
        assert output_width(_Stream(slave)) == 40
    finally:
        os.close(master)
        os.close(slave)


def _on_a_terminal(columns: int, env_columns: str | None, *args: str) -> str:
    master, slave = _pty(columns)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT)
    if env_columns is not None:
        env["COLUMNS"] = env_columns
    proc = subprocess.Popen([sys.executable, "-m", "oomwatch", *args], stdout=slave, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        proc.wait(timeout=60)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.parametrize(("columns", "env_columns", "width"), [(200, "80", 80), (72, None, 72)])
def test_diagnose_on_a_terminal_fits_it(columns: int, env_columns: str | None, width: int) -> None:
    example = ROOT / "examples" / "torchrun-rank-oom"
    out = _on_a_terminal(columns, env_columns, "diagnose", *(str(p) for p in _inputs(example)))
    assert "MEMORY LIMIT HIT" in out or "OUT OF MEMORY" in out, out[-2000:]
    assert not _too_wide(out, width)
    assert max(len(line) for line in out.splitlines()) > width - 10  # it uses the width it has


def test_an_incident_written_at_100_columns_is_shown_in_a_narrower_terminal(tmp_path: Path) -> None:
    path = _incident(tmp_path, "rank", 3)
    engine = Engine.load(())
    example = ROOT / "examples" / "torchrun-rank-oom"
    d = engine.diagnose([engine.scan(p.name, p.read_bytes()) for p in _inputs(example)])
    written = render_incident_text(json.loads(path.read_text()), render_text(d))
    assert not _too_wide(written, NOT_A_TERMINAL) and _too_wide(written, 60)
    path.with_suffix(".txt").write_text(written)
    for columns, width in ((None, 200), ("60", 60)):  # a 200-column terminal; one that says COLUMNS=60
        out = _on_a_terminal(200, columns, "incidents", "--state-dir", str(tmp_path), "show", path.stem)
        assert out.startswith("oomwatch incident "), out[:500]
        assert not _too_wide(out, width)
        assert _unspaced(out) == _unspaced(written)  # wrapped, nothing lost


def test_run_s_table_of_samples_fits_the_width() -> None:
    from oomwatch.agent.recorder import Recorder
    from oomwatch.agent.tick import ProcessSample, Tick
    from oomwatch.render.run import render_samples

    gib = 1 << 30

    def sample(pid: int, comm: str, role: str, rank: int | None, uss: int) -> ProcessSample:
        return ProcessSample(pid, 1, comm, role, "run-1", rank, rank, "R", 3 * gib, 2 * gib, gib, 0, 0, 3 * gib,
                             uss=uss)  # fmt: skip

    rec = Recorder()
    for t, grown in ((1.0, 0), (2.0, 900 << 20)):
        procs = (sample(4194303, "pt_main_thread", "rank", 7, gib + grown),
                 sample(4194304, "pt_data_worker", "dataloader_worker", 7, 512 << 20))  # fmt: skip
        rec.add(Tick(t, 0.01, procs))
    wide = render_samples(rec, 1.0)
    assert not _too_wide(wide, NOT_A_TERMINAL) and "dataloader_worker" in wide
    assert wide.splitlines()[1].split() == ["PID", "ROLE", "RANK", "COMM", "RSS", "ANON", "USS", "USS", "GROWTH",
                                            "END"]  # fmt: skip
    assert wide.splitlines()[2].split()[0] == "4194303" and "+900.0 MiB" in wide.splitlines()[2]
    narrow = render_samples(rec, 1.0, 60)
    assert not _too_wide(narrow, 60)
    assert "  PID 4194304" in narrow and "USS GROWTH +0 B" in narrow  # one block per process
    assert "RSS 3.0 GiB," in narrow and "USS GROWTH +900.0 MiB," in narrow  # a pair is never split


def test_a_long_file_name_before_a_quoted_line_goes_on_a_line_of_its_own() -> None:
    where = "/scratch/users/someone/experiments/2026-11-30/run-0042/logs/node-17/rank-3/stderr.log:123456"
    lines = quote(where, "Killed process 4242 (python3) total-vm:1258156kB, anon-rss:552236kB", 60)
    assert all(len(x) <= 60 for x in lines), lines
    assert "".join(x.strip() for x in lines).startswith(where.replace(" ", "") + ":Killed")
    assert lines[-1].startswith("      ") and "anon-rss" in "".join(lines)
