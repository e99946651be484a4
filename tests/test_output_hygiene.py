"""What a log, a process name or a file name carries reaches `diagnose`'s text and Markdown only as
visible escapes: no terminal escape, bell, backspace, carriage return or line of its own on the
terminal, and no HTML from the log rendered outside code in Markdown. JSON keeps the text as data.

The report is real (tests/fixtures/kernel/k-007.log, a Proxmox cgroup OOM) with its victim renamed
and its cgroup given a bidi override; the training log beside it quotes HTML and a code fence."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_oomwatch, skip_or_fail

REPORT = (ROOT / "tests/fixtures/kernel/k-007.log").read_text()
COMM = "py\x07th\x08on"  # the engine strips ANSI sequences from lines, not these
HOSTILE_LINE = (
    "RuntimeError: DataLoader worker (pid 3902942) is killed by signal: Killed. \x07\x08 "
    "<img src=x onerror=alert(1)> & ``` <b>bold</b> ` stray"
)
# a file name is shown as given: ESC, BEL, CR and LF in it reach the renderers untouched
NAME = "job\x1b]0;pwned\x07\x1b[2J\r\nFORGED.log"
# bytes a terminal acts on: C0 controls but the line feed, DEL; C1 as UTF-8
RAW_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9\xaa-\xae]")


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / NAME
    log.write_text(HOSTILE_LINE + "\n")
    kernel = tmp_path / "k.log"
    kernel.write_text(REPORT.replace("php-fpm", COMM).replace("/lxc/39004/ns", "/lxc/39004/\u202ens"))
    return log, kernel


def _diagnose(tmp_path: Path, fmt: str) -> bytes:
    log, kernel = _inputs(tmp_path)
    done = run_oomwatch("diagnose", "-f", fmt, str(log), str(kernel), timeout=60)
    assert done.returncode == 3, done.stderr.decode()[-2000:]
    return done.stdout


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_no_raw_control_character_reaches_the_terminal(tmp_path: Path, fmt: str) -> None:
    out = _diagnose(tmp_path, fmt)
    assert not RAW_CONTROL.search(out), RAW_CONTROL.findall(out)[:10]
    text = out.decode()
    assert "py\\x07th\\x08on" in text  # the victim's name, escaped where it is shown
    assert "job\\x1b]0;pwned\\x07\\x1b[2J\\r\\nFORGED.log" in text  # the input's name: one piece, no new line
    assert not any(line.startswith("FORGED") for line in text.splitlines())
    assert "/lxc/39004/\\u202ens" in text
    assert "Killed. \\x07\\x08 " in text  # the evidence line


def test_markdown_renders_no_html_from_the_log(tmp_path: Path) -> None:
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        skip_or_fail("markdown-it-py is not installed (pip install markdown-it-py)")
    md = _diagnose(tmp_path, "markdown").decode()
    html = MarkdownIt("commonmark").render(md)
    assert "<img" not in html and "<b>" not in html, html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # shown, inside code
    # the only tags are the renderer's own and those the Markdown itself writes
    assert set(re.findall(r"<(/?[a-z0-9]+)", html)) <= {
        "h3", "/h3", "p", "/p", "table", "/table", "thead", "/thead", "tbody", "/tbody", "tr", "/tr", "th", "/th",
        "td", "/td", "details", "/details", "summary", "/summary", "pre", "/pre", "code", "/code", "strong",
        "/strong", "em", "/em", "ul", "/ul", "li", "/li", "blockquote", "/blockquote",
    }  # fmt: skip
    # the log's ``` closes no fence: the whole evidence line stays inside one
    blocks = re.findall(r"<pre><code>(.*?)</code></pre>", html, re.S)
    assert any("Killed. \\x07\\x08 &lt;img" in b and "``` &lt;b&gt;bold&lt;/b&gt; ` stray" in b for b in blocks)


def test_json_keeps_the_text_as_data(tmp_path: Path) -> None:
    doc = json.loads(_diagnose(tmp_path, "json"))
    assert doc["victims"][0]["name"] == COMM
    assert any(e["text"].endswith("<b>bold</b> ` stray") and "\x07\x08" in e["text"] for e in doc["evidence"])
    assert str(tmp_path / NAME) in {i["file"] for i in doc["inputs"]}


def test_an_input_error_names_the_file_escaped(tmp_path: Path) -> None:
    missing = tmp_path / NAME
    done = run_oomwatch("diagnose", str(missing))
    assert done.returncode == 2
    assert not RAW_CONTROL.search(done.stderr), done.stderr
    assert done.stderr.decode().splitlines() == [
        f"oomwatch: {tmp_path}/job\\x1b]0;pwned\\x07\\x1b[2J\\r\\nFORGED.log: no such file"
    ]
