"""`oomwatch incidents show ID --html FILE`: the incident as one self-contained page.

The pure tests render a real incident (tests/fixtures/incidents/, written by the agent for a real
cgroup v1 OOM kill: see the README there) and derived copies of it (hostile text, empty history,
odd values, a synthetic job of every role). The browser tests render the page in a real headless
Chromium (Debian's `chromium`), read back its DOM and its layout, and decode a screenshot (stdlib
only) to check that the chart is painted in the role colours with the limit and the kill on it.
"""

from __future__ import annotations

import colorsys
import copy
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from oomwatch.render.incident_chart import LIMIT_COLOUR
from oomwatch.render.incident_html import render_incident_html
from oomwatch.render.incident_values import ROLE_STYLES, kill_time
from oomwatch.sharedfile import write_for_people
from tests.conftest import FIXTURES, require_tool, run_oomwatch

INCIDENTS = FIXTURES / "incidents"
REAL = INCIDENTS / "20261130T015859Z-tree-19055-19057.json"  # a job: 3 processes, 20 samples, its cgroup
REAL_NO_HISTORY = INCIDENTS / "20261130T015902Z-node-19082.json"  # killed while the agent was down
HOSTILE = "<script>alert(1)</script>"
MiB = 1 << 20
GiB = 1 << 30


def _doc(path: Path = REAL) -> dict[str, Any]:
    return json.loads(path.read_text())


def _svg(page: str, chart_id: str) -> str:
    m = re.search(rf'<svg id="{chart_id}".*?</svg>', page, re.S)
    assert m, f"no <svg id={chart_id}>"
    return m.group(0)


def _series(svg: str) -> list[dict[str, str]]:
    out = []
    for m in re.finditer(r"<path ([^>]*)>", svg):
        attrs = dict(re.findall(r'([a-z-]+)="([^"]*)"', m.group(1)))
        if "series" in attrs.get("class", "").split():
            out.append(attrs)
    return out


def _points(d: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", d)]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]


def _tags(page: str) -> _Tags:
    p = _Tags()
    p.feed(page)
    p.close()
    return p


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "section", "footer", "p", "h1", "h2", "h3", "code",
    "span", "dl", "dt", "dd", "div", "pre", "b", "ul", "li", "figure", "figcaption", "svg", "rect", "line", "text",
    "path", "circle", "g", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip


def _assert_self_contained(page: str) -> None:
    parsed = _tags(page)
    assert parsed.tags <= ALLOWED_TAGS, parsed.tags - ALLOWED_TAGS
    for tag, name, value in parsed.attrs:
        assert name not in ("src", "href", "xlink:href", "srcset", "action", "formaction", "background"), (tag, name)
        assert not name.startswith("on"), (tag, name, value)
    assert "url(" not in page and "@import" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def _torchrun_like(doc: dict[str, Any]) -> dict[str, Any]:
    """The real incident with a synthetic history: a torchrun job of every role over five minutes,
    in GiB, the victim a DataLoader worker."""
    doc = copy.deepcopy(doc)
    kill = kill_time(doc)
    assert kill is not None
    procs = [(100, "torchrun", "launcher", None, 0.6), (101, "pt_main_thread", "rank", 0, 3.0),
             (102, "pt_main_thread", "rank", 1, 3.2), (103, "python3", "manager", None, 1.8)]  # fmt: skip
    procs += [(200 + i, "pt_data_worker", "dataloader_worker", None, 1.0 + i * 0.1) for i in range(4)]
    rows, cgroups = [], []
    for step in range(31):
        t = kill - 300 + step * 10
        total = 0
        for pid, comm, role, rank, base in procs:
            grow = 1 + step / 30 * (2.5 if role == "dataloader_worker" else 0.2)
            anon = int(base * grow * GiB)
            total += anon
            rows.append({"time": t, "resolution": 10.0, "pid": pid, "job": "torchrun-run-1", "role": role,
                         "rank": rank, "local_rank": rank, "comm": comm, "rss": anon + 50 * MiB, "anon": anon,
                         "file": 50 * MiB, "shmem": 0, "swap": 0, "hwm": anon, "pss": anon // 2,
                         "uss": anon // 3 if role != "launcher" else None, "swap_pss": 0})  # fmt: skip
        cgroups.append({"time": t, "resolution": 10.0, "path": "/kubepods/pod-x/trainer", "jobs": "torchrun-run-1",
                        "usage": total, "limit": 32 * GiB, "effective_limit": 30 * GiB, "anon": total, "file": 0,
                        "shmem": 0, "swap": 0, "oom_kills": 0})  # fmt: skip
    doc["history"] = {"source": "synthetic", "processes": rows, "cgroups": cgroups}
    doc["victim"].update(pid=203, comm="pt_data_worker", job="torchrun-run-1", role="dataloader_worker", rank=None)
    return doc


# -- pure ---------------------------------------------------------------------------------------


def test_one_line_per_process_coloured_by_role():
    doc = _doc()
    page = render_incident_html(doc)
    rows = doc["history"]["processes"]
    last_role = {r["pid"]: r["role"] for r in sorted(rows, key=lambda r: r["time"])}
    anon = _series(_svg(page, "chart-anon"))
    assert sorted(int(s["data-pid"]) for s in anon) == sorted(last_role)
    for s in anon:
        role = last_role[int(s["data-pid"])]
        assert f"role-{role}" in s["class"].split()
        assert s["stroke"] == ROLE_STYLES[role][0]
        assert len(_points(s["d"])) == sum(1 for r in rows if r["pid"] == int(s["data-pid"]))
    victims = [s for s in anon if "victim" in s["class"].split()]
    assert [s["data-pid"] for s in victims] == [str(doc["victim"]["pid"])]
    # USS is known for every process of this incident: the second chart has the same lines
    uss = _series(_svg(page, "chart-uss"))
    assert sorted(s["data-pid"] for s in uss) == sorted(s["data-pid"] for s in anon)
    # USS on its own scale: the largest private set reaches the top of its chart, far below the limit
    # (drawn in the chart above only)
    uss_svg = _svg(page, "chart-uss")
    assert 'class="limit"' not in uss_svg and 'class="usage"' not in uss_svg
    highest = min(y for line in uss for _, y in _points(line["d"]))
    assert highest < 26 + 0.1 * (270 - 26 - 42), highest  # within the top tenth of the plot area
    # the legend names each role present, with its count
    assert re.search(r'class="legend-role role-dataloader_worker">.*?DataLoader worker \(2\)', page)
    assert re.search(r'class="legend-role role-unknown">.*?unknown \(1\)', page)


def test_limit_usage_and_kill_marker():
    doc = _doc()
    page = render_incident_html(doc)
    svg = _svg(page, "chart-anon")
    limit = doc["history"]["cgroups"][-1]["effective_limit"]
    assert limit == 167772160
    m = re.search(r'<line class="limit" data-bytes="(\d+)"[^>]* y1="([\d.]+)"', svg)
    assert m and int(m.group(1)) == limit
    limit_y = float(m.group(2))
    assert '<text class="limit-label"' in svg and ">limit 160.0 MiB</text>" in svg
    assert 'stroke-dasharray="8 5"' in svg
    usage = re.findall(r'<path class="usage" [^>]*d="([^"]+)"', svg)
    assert len(usage) == 1 and len(_points(usage[0])) == len(doc["history"]["cgroups"])
    # the kill: a vertical line at t = 0, right of every sample (all were taken before it), labelled
    kill = re.search(r'<line class="kill-line" x1="([\d.]+)" x2="([\d.]+)"', svg)
    assert kill and kill.group(1) == kill.group(2)
    kill_x = float(kill.group(1))
    assert "\u2715 killed pid 19057 pt_data_worker (DataLoader worker)</text>" in svg
    everything = [p for s in _series(svg) for p in _points(s["d"])] + _points(usage[0])
    assert everything and all(x < kill_x for x, _ in everything)
    # nothing in this incident went over the limit (the kernel killed at it): every point is below the line
    assert all(y > limit_y for _, y in everything)
    # the x axis is labelled in seconds relative to the kill, the y axis in MiB
    assert re.search(r">0 s</text>", svg) and re.search(r">\u22121(\.\d+)? s</text>", svg)
    assert re.search(r">150 MiB</text>", svg)
    assert "time relative to the kill" in svg


def test_kill_time_is_time_less_latency():
    doc = _doc()
    assert kill_time(doc) == pytest.approx(doc["time"] - doc["latency_seconds"])
    doc["latency_seconds"] = None
    assert kill_time(doc) == doc["time"]
    for absurd in (1e300, float("inf"), 10**400, "yesterday", True):
        doc["time"] = absurd
        assert "killed</dt><dd>" in render_incident_html(doc)  # a page, whatever the time says
    doc.pop("time")
    assert kill_time(doc) is None
    assert "killed</dt><dd>-</dd>" in render_incident_html(doc)  # no time at all: still a page


def test_header_and_kernel_lines():
    doc = _doc()
    page = render_incident_html(doc)
    cause = doc["diagnosis"]["causes"][0]
    assert f"Most likely cause: {cause['title']}" in page
    assert "@functools.lru_cache(maxsize=4096)" in page and '<pre class="fix">' in page
    assert "cgroup_oom (confirmed)" in page
    assert "2026-11-30 01:58:58 UTC" in page
    assert doc["diagnosis"]["summary"].split(":")[0] in page
    kernel = re.search(r'<pre class="kernel">(.*?)</pre>', page, re.S)
    assert kernel and kernel.group(1).count("\n") == len(doc["kernel_lines"]) - 1
    assert "Memory cgroup out of memory: Killed process 19057 (pt_data_worker)" in kernel.group(1)


def test_self_contained_no_network_references():
    for path in (REAL, REAL_NO_HISTORY):
        doc = _doc(path)
        page = render_incident_html(doc)
        _assert_self_contained(page)
        # the diagnosis has reference URLs; the page shows none of them (nor any other)
        assert re.search(r"\b(src|href)\s*=", page) is None
        assert "https:" not in page and "http:" not in page and "//" not in page.replace("://", "")
    _assert_self_contained(render_incident_html(_torchrun_like(_doc())))


def test_hostile_text_is_escaped():
    doc = _doc()
    evil = HOSTILE + '"><img src=x onerror=alert(2)><a href="https://evil.example/">'
    doc["id"] = evil
    doc["victim"]["comm"] = evil
    doc["victim"]["job"] = evil
    doc["diagnosis"]["summary"] = evil
    doc["diagnosis"]["victims"][0]["cgroup"] = evil
    doc["diagnosis"]["causes"][0]["title"] = evil
    doc["diagnosis"]["causes"][0]["fix"] = evil
    doc["kernel_lines"].append(evil)
    for r in doc["history"]["processes"]:
        if r["pid"] == 19056:
            r["comm"] = evil
            r["role"] = evil  # a role this version does not know, and markup in it
    for r in doc["history"]["cgroups"]:
        r["path"] = evil
    page = render_incident_html(doc)
    assert "<script" not in page.lower() and "<img" not in page.lower() and "<a " not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    _assert_self_contained(page)
    # the unknown role is drawn as "other", its name only as text
    anon = _series(_svg(page, "chart-anon"))
    other = [s for s in anon if s["data-pid"] == "19056"]
    assert other and "role-other" in other[0]["class"].split() and other[0]["stroke"] == ROLE_STYLES["other"][0]


def test_empty_history_says_so():
    # a real one: the agent was down when the kernel killed; the history's cgroup is another one
    page = render_incident_html(_doc(REAL_NO_HISTORY))
    assert "No history recorded" in page and "<svg" not in page
    assert "not the victim&#x27;s, not drawn" in page
    assert "pid 19082 <code>pt_data_worker</code>" in page
    assert "DataLoader worker" in page  # the role from the diagnosis, the agent never saw it
    doc = _doc()
    doc["history"] = {"source": "history unreadable: disk I/O error", "processes": [], "cgroups": []}
    page = render_incident_html(doc)
    assert "No history recorded" in page and "history unreadable: disk I/O error" in page and "<svg" not in page
    del doc["history"]
    assert "No history recorded" in render_incident_html(doc)


def test_cgroup_only_history():
    doc = _doc()
    doc["history"]["processes"] = []
    page = render_incident_html(doc)
    svg = _svg(page, "chart-anon")
    assert not _series(svg) and '<path class="usage"' in svg and 'data-bytes="167772160"' in svg
    assert "No per-process history recorded" in page and 'id="chart-uss"' not in page


def test_single_sample_none_and_huge_values():
    doc = _doc()
    t = kill_time(doc)
    assert t is not None
    base = {"resolution": 1.0, "job": "j", "role": "rank", "rank": 0, "local_rank": 0, "comm": "pt_main_thread",
            "rss": None, "anon": None, "file": None, "shmem": None, "swap": None, "hwm": None, "pss": None,
            "uss": None, "swap_pss": None}  # fmt: skip
    doc["history"]["processes"] = [
        dict(base, time=t - 5, pid=1, anon=None, rss=3 << 60),  # one sample, anon unknown: RSS is drawn
        dict(base, time=t - 4, pid=2, anon=1 << 62),
        dict(base, time=t - 3, pid=2, anon=None),  # a hole in the line
        dict(base, time=t - 2, pid=2, anon=5 << 60, uss=10**400),  # not a float: not drawn
        dict(base, time=t - 1, pid=2, anon=float("nan")),
        dict(base, time=None, pid=3, anon=1),  # no time: not drawn
        dict(base, time=t - 1, pid=4),  # nothing known
        dict(base, time=t - 1, pid=5, anon=True),  # a bool is no size
    ]
    doc["history"]["cgroups"] = [dict(doc["history"]["cgroups"][0], time=t - 1, usage=None, limit=None,
                                      effective_limit=None)]  # fmt: skip
    page = render_incident_html(doc)
    svg = _svg(page, "chart-anon")
    series = {s["data-pid"]: s for s in _series(svg)}
    assert set(series) == {"1", "2", "4", "5"}
    assert series["1"]["d"].count("M") == 1 and len(_points(series["1"]["d"])) == 1
    assert re.search(r'<circle class="point role-rank" cx="[\d.]+" cy="[\d.]+"', svg)  # the lone sample shows
    assert series["2"]["d"].count("M") == 2 and len(_points(series["2"]["d"])) == 2
    assert series["4"]["d"] == "" and series["5"]["d"] == ""
    assert re.search(r">\d+(\.\d+)? EiB</text>", svg)
    assert 'class="limit"' not in svg
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    assert 'id="chart-uss"' not in page and "No USS in the history" in page


def test_all_roles_minutes_and_far_limit():
    doc = _torchrun_like(_doc())
    page = render_incident_html(doc)
    svg = _svg(page, "chart-anon")
    series = _series(svg)
    assert len(series) == 8
    roles = {c for s in series for c in s["class"].split() if c.startswith("role-")}
    assert roles == {"role-launcher", "role-rank", "role-manager", "role-dataloader_worker"}
    assert ">limit 30.0 GiB</text>" in svg  # the effective limit, not the 32 GiB one
    assert re.search(r">\u2212300 s</text>", svg) and re.search(r">\d+ GiB</text>", svg)
    assert "\u2715 killed pid 203 pt_data_worker (DataLoader worker)" in svg
    assert len(_series(_svg(page, "chart-uss"))) == 7  # no USS for the launcher
    # a limit far above everything is said, not drawn to a scale that would flatten the lines
    for r in doc["history"]["cgroups"]:
        r["effective_limit"] = r["limit"] = 1 << 45
    svg = _svg(render_incident_html(doc), "chart-anon")
    assert 'class="limit"' not in svg and ">limit 32.0 TiB: far above the chart" in svg
    assert not re.search(r">\d+ TiB</text>", svg)


def test_write_is_atomic(tmp_path: Path):
    out = tmp_path / "incident.html"
    out.write_text("old")
    write_for_people(out, render_incident_html(_doc()))
    assert out.read_text() == render_incident_html(_doc())
    assert [p.name for p in tmp_path.iterdir()] == ["incident.html"]
    with pytest.raises(OSError):
        write_for_people(tmp_path / "missing" / "x.html", render_incident_html(_doc()))
    assert [p.name for p in tmp_path.iterdir()] == ["incident.html"]


# -- the command line ---------------------------------------------------------------------------


def test_cli_show_html(tmp_path: Path):
    state = tmp_path / "state"
    (state / "incidents").mkdir(parents=True)
    shutil.copy(REAL, state / "incidents" / REAL.name)
    out = tmp_path / "page.html"
    done = run_oomwatch("incidents", "--state-dir", str(state), "show", "20261130T015859Z", "--html", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"wrote {out}\n"
    assert out.read_text() == render_incident_html(_doc())
    # with --format json: still only the one line (the page is what was asked for)
    out2 = tmp_path / "page2.html"
    done = run_oomwatch("incidents", "--state-dir", str(state), "show", str(REAL), "-f", "json", "--html", str(out2))
    assert done.returncode == 0 and done.stdout.decode() == f"wrote {out2}\n" and out2.is_file()
    # without --html, --format json prints the incident as before
    done = run_oomwatch("incidents", "--state-dir", str(state), "show", "20261130T015859Z", "-f", "json")
    assert done.returncode == 0 and json.loads(done.stdout) == _doc()
    # a directory that is not there: a usage error, nothing left behind
    done = run_oomwatch(
        "incidents", "--state-dir", str(state), "show", str(REAL), "--html", str(tmp_path / "no/x.html")
    )
    assert done.returncode == 2 and b"cannot write" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "page2.html", "state"]


# -- a real browser -----------------------------------------------------------------------------


def _chromium() -> str:
    if shutil.which("chromium") is None and shutil.which("chromium-browser"):
        return str(shutil.which("chromium-browser"))
    return require_tool("chromium", "apt-get install --no-install-recommends chromium")


CHROMIUM_SECONDS = 30  # one run takes ~2 s here; one hung in a CI run (still running after 60 s)
CHROMIUM_STARTS = 3  # a run that has not ended in time is killed and started again, this many starts in all


def _chromium_runs(exe: str, tmp: Path, *runs: tuple[str, ...]) -> list[str]:
    """Run headless Chromium once for each of ``runs`` (its arguments), all at once; their outputs.

    A run still going after CHROMIUM_SECONDS is killed (its own process group) and started again with a
    fresh profile, up to CHROMIUM_STARTS starts; one that hangs every time fails the test, as does one
    that exits with an error."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
             "--window-size=1200,900", "--deterministic-mode",
             "--run-all-compositor-stages-before-draw"]  # fmt: skip
    env = dict(os.environ, HOME=str(tmp))
    started: list[tuple[subprocess.Popen[bytes], Any, Any]] = []

    def start(args: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], Any, Any]:
        name = f"chromium-{len(list(tmp.glob('chromium-*.out')))}"  # each start its own profile and outputs
        out, err = open(tmp / f"{name}.out", "w+b"), open(tmp / f"{name}.err", "w+b")  # noqa: SIM115
        cmd = [exe, *flags, f"--user-data-dir={tmp / f'{name}.profile'}", *args]
        run = (subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True), out, err)
        started.append(run)
        return run

    def stop(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:  # only what this test started: its own process groups
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    outputs = []
    try:
        first = [start(args) for args in runs]
        for args, run in zip(runs, first, strict=True):
            for n in range(1, CHROMIUM_STARTS + 1):
                proc, out, err = run
                try:
                    rc = proc.wait(timeout=CHROMIUM_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    stop(proc)
                    if n == CHROMIUM_STARTS:
                        err.seek(0)
                        raise AssertionError(
                            f"chromium {args} still running after {CHROMIUM_SECONDS} s, {n} starts: "
                            + err.read().decode(errors="replace")[-2000:]
                        ) from None
                    run = start(args)
            out.seek(0)
            err.seek(0)
            assert rc == 0, err.read().decode(errors="replace")[-2000:]
            outputs.append(out.read().decode(errors="replace"))
    finally:
        for proc, out, err in started:
            stop(proc)
            out.close()
            err.close()
    return outputs


# what the page's geometry is, as the browser laid it out (run only in a copy that allows the script)
_MEASURE = """<script>
const out = {};
for (const svg of document.querySelectorAll("svg.chart")) {
  const r = svg.getBoundingClientRect();
  out[svg.id] = {left: r.left, top: r.top, width: r.width, height: r.height,
                 lengths: Array.from(svg.querySelectorAll("path.series")).map(p => p.getTotalLength())};
}
document.body.setAttribute("data-measured", JSON.stringify(out));
</script>"""


def _png_rgb(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB rows of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if ftype == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif ftype == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        else:
            assert ftype == 0, ftype
        rows.append(bytes(line) if bpp == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
        prev = line
    return width, height, rows


def _hex(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _measuring_copy(page_path: Path) -> Path:
    """A copy of the page that allows one script, which writes where the browser put each chart and
    each line's length into the DOM (the page itself forbids scripts)."""
    measure = page_path.with_name(f"measure-{page_path.name}")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page_path.read_text())
    measure.write_text(html.replace("</body>", _MEASURE + "</body>"))
    return measure


def _geometry(dom: str) -> dict[str, Any]:
    m = re.search(r'data-measured="([^"]*)"', dom)
    assert m, "the measuring script did not run"
    geometry: dict[str, Any] = json.loads(m.group(1).replace("&quot;", '"'))
    return geometry


def _decode(shot: Path) -> list[bytes]:
    width, height, rows = _png_rgb(shot.read_bytes())
    assert (width, height) == (1200, 900)
    return rows


def _pixels(rows: list[bytes], box: dict[str, float]) -> tuple[int, list[tuple[int, int, int]]]:
    """How many pixels the screenshot has inside ``box`` (the chart, as laid out), and those of them
    that are not (nearly) white."""
    left, top = int(box["left"]), int(box["top"])
    right, bottom = int(box["left"] + box["width"]), int(box["top"] + box["height"])
    inked = []
    for row in rows[top:bottom]:
        for x in range(left, right):
            p = (row[3 * x], row[3 * x + 1], row[3 * x + 2])
            if min(p) < 240:
                inked.append(p)
    return (right - left) * (bottom - top), inked


def _assert_painted(rows: list[bytes], box: dict[str, float]) -> None:
    """Every part of the chart's box has something drawn: grid lines in each part of the plot, tick
    labels under each quarter of it. A screenshot taken before the page was fully painted lacks
    whole tiles (seen here without --deterministic-mode: the bottom of the chart and all below it)."""

    def count(left: float, top: float, right: float, bottom: float, darker: int) -> int:
        return sum(
            1
            for row in rows[int(top) : int(bottom)]
            for x in range(int(left), int(right))
            if min(row[3 * x : 3 * x + 3]) < darker
        )

    labels_top = box["top"] + box["height"] * (270 - 42) / 270  # the SVG's x-axis margin (viewBox 1000 x 270)
    for i in range(4):
        left, right = box["left"] + box["width"] * i / 4, box["left"] + box["width"] * (i + 1) / 4
        for j in range(2):
            top = box["top"] + (labels_top - box["top"]) * j / 2
            grid = count(left, top, right, top + (labels_top - box["top"]) / 2, 235)
            assert grid > 100, f"nothing painted in part ({i}, {j}) of the chart: {grid} pixels"
        text = count(left, labels_top, right, box["top"] + box["height"], 200)
        assert text > 20, f"no tick labels painted under quarter {i} of the chart: {text} pixels"


def _painted(exe: str, tmp: Path, shot: Path, page_path: Path, box: dict[str, float], tries: int = 3) -> list[bytes]:
    """The screenshot's rows once it is complete: headless Chromium sometimes saves a screenshot
    before every tile is painted (seen in 1 of ~10 CI runs even with --deterministic-mode); such a
    capture is taken again, up to ``tries`` captures in all. A page that never paints fails."""
    rows = _decode(shot)
    for attempt in range(1, tries + 1):
        try:
            _assert_painted(rows, box)
            return rows
        except AssertionError:
            if attempt == tries:
                raise
        _chromium_runs(exe, tmp, (f"--screenshot={shot}", page_path.as_uri()))
        rows = _decode(shot)
    return rows


def _near(pixels: list[tuple[int, int, int]], colours: dict[str, str]) -> dict[str, int]:
    """How many pixels are (nearly) each of ``colours``: the inside of a line, not its anti-aliased edge."""
    targets = {name: _hex(c) for name, c in colours.items()}
    near = dict.fromkeys(targets, 0)
    for r, g, b in pixels:
        for name, (tr, tg, tb) in targets.items():
            if abs(r - tr) + abs(g - tg) + abs(b - tb) < 60:
                near[name] += 1
    return near


def _hues(pixels: list[tuple[int, int, int]]) -> dict[int, int]:
    """Saturated pixels by hue, in 30-degree buckets: greys, black and white are left out."""
    out: dict[int, int] = {}
    for r, g, b in pixels:
        h, lightness, sat = colorsys.rgb_to_hls(r / 255, g / 255, b / 255)
        if sat > 0.45 and 0.2 < lightness < 0.8:
            out[int(h * 12) % 12] = out.get(int(h * 12) % 12, 0) + 1
    return out


def _stand_in(tmp: Path, hangs: int, then: str) -> Path:
    """A "browser" that hangs (sleeps) on its first ``hangs`` starts, then runs ``then`` with the arguments."""
    exe = tmp / "stand-in-chromium"
    exe.write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{tmp}/starts" 2>/dev/null || echo 0); echo $((n + 1)) > "{tmp}/starts"\n'
        f'echo $$ >> "{tmp}/pids"; [ "$n" -lt {hangs} ] && exec sleep 600\n'
        f'exec {then} "$@"\n'
    )
    exe.chmod(0o755)
    return exe


def test_a_hung_browser_is_started_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM_SECONDS", 1)
    exe = _stand_in(tmp_path, hangs=1, then="echo")
    started = time.monotonic()
    (out,) = _chromium_runs(exe, tmp_path, ("--dump-dom", "file:///x.html"))
    assert out.endswith("--dump-dom file:///x.html\n") and "--user-data-dir=" in out
    assert (tmp_path / "starts").read_text() == "2\n" and time.monotonic() - started < 10
    assert len(list(tmp_path.glob("chromium-*.out"))) == 2  # a fresh profile and outputs for the second start


def test_a_browser_that_always_hangs_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM_SECONDS", 1)
    exe = _stand_in(tmp_path, hangs=99, then="echo")
    with pytest.raises(AssertionError, match="still running after 1 s, 3 starts"):
        _chromium_runs(exe, tmp_path, ("--dump-dom", "file:///x.html"))
    assert (tmp_path / "starts").read_text() == "3\n"
    # every start is gone (killed, its process group, and waited for)
    pids = (tmp_path / "pids").read_text().split()
    assert len(pids) == 3 and not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_chromium_draws_the_chart(tmp_path: Path):
    exe = _chromium()
    page_path = tmp_path / "incident.html"
    write_for_people(page_path, render_incident_html(_doc()))
    shot = tmp_path / "shot.png"
    started = time.monotonic()
    dom, measured, _ = _chromium_runs(
        exe,
        tmp_path,
        ("--dump-dom", page_path.as_uri()),  # the DOM Chromium built from the page
        ("--dump-dom", _measuring_copy(page_path).as_uri()),  # its layout
        (f"--screenshot={shot}", page_path.as_uri()),  # its pixels
    )
    browser = time.monotonic() - started

    # the charts and their lines are in the DOM
    anon = _svg(dom, "chart-anon")
    assert len(_series(anon)) == 3 and len(_series(_svg(dom, "chart-uss"))) == 3
    assert '<line class="limit" data-bytes="167772160"' in anon and 'class="kill-line"' in anon

    # laid out: each chart's box, each line drawn with a length, the first chart on the first screen
    geometry = _geometry(measured)
    assert set(geometry) == {"chart-anon", "chart-uss"}
    box = geometry["chart-anon"]
    assert box["width"] > 800 and box["height"] > 150
    assert len(box["lengths"]) == 3 and all(length > 50 for length in box["lengths"]), box["lengths"]
    assert box["top"] + box["height"] <= 900, "the first chart is not on the first screen"

    # the pixels of the page itself, in the first chart's box
    started = time.monotonic()
    rows = _painted(exe, tmp_path, shot, page_path, box)
    decode = time.monotonic() - started
    area, pixels = _pixels(rows, box)
    ink = sum(1 for p in pixels if min(p) < 200)
    assert ink > area * 0.01, (ink, area)  # lines, axes, labels: not an empty box
    near = _near(pixels, {"dataloader_worker": ROLE_STYLES["dataloader_worker"][0],
                          "unknown": ROLE_STYLES["unknown"][0], "limit": LIMIT_COLOUR})  # fmt: skip
    assert all(n >= 40 for n in near.values()), near  # both roles' colours and the limit's, a line's worth each
    hues = {h: n for h, n in _hues(pixels).items() if n >= 40}
    assert len(hues) >= 3, hues  # and, whatever the palette: three distinct colours
    # the kill: a dark vertical line where the SVG put it
    scale = box["width"] / 1000  # the SVG's viewBox is 1000 units wide
    kill_x = float(re.search(r'class="kill-line" x1="([\d.]+)"', anon).group(1))  # type: ignore[union-attr]
    column = int(box["left"] + kill_x * scale)
    top, bottom = int(box["top"]), int(box["top"] + box["height"])
    dark = sum(
        1
        for y in range(top + int(40 * scale), bottom - int(50 * scale))
        if any(sum(rows[y][3 * x : 3 * x + 3]) < 3 * 90 for x in (column - 1, column, column + 1))
    )
    assert dark > (bottom - top - 90 * scale) * 0.9, dark
    print(f"chromium x3 (parallel) {browser:.2f} s, decode {decode:.2f} s; near: {near}; hues: {hues}")


def test_chromium_draws_every_role_in_its_colour(tmp_path: Path):
    exe = _chromium()
    page_path = tmp_path / "torchrun.html"
    write_for_people(page_path, render_incident_html(_torchrun_like(_doc())))
    shot = tmp_path / "shot.png"
    started = time.monotonic()
    measured, _ = _chromium_runs(
        exe, tmp_path, ("--dump-dom", _measuring_copy(page_path).as_uri()), (f"--screenshot={shot}", page_path.as_uri())
    )
    box = _geometry(measured)["chart-anon"]
    assert len(box["lengths"]) == 8 and all(length > 50 for length in box["lengths"]), box["lengths"]
    rows = _painted(exe, tmp_path, shot, page_path, box)
    _, pixels = _pixels(rows, box)
    elapsed = time.monotonic() - started
    roles = ("launcher", "rank", "dataloader_worker", "manager")
    near = _near(pixels, {role: ROLE_STYLES[role][0] for role in roles})
    assert all(n >= 40 for n in near.values()), near
    hues = {h: n for h, n in _hues(pixels).items() if n >= 40}
    assert len(hues) >= 4, hues
    print(f"chromium x2 (parallel) and decode {elapsed:.2f} s; near: {near}; hues: {hues}")
