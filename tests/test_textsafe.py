"""Control characters shown as visible escapes; printable Unicode left alone; Markdown that cannot
render HTML outside code, and code blocks and spans that their text cannot close."""

from __future__ import annotations

import pytest

from oomwatch.textsafe import code_fence, code_span, escape_controls, escape_lines, markdown_text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text 12 GiB", "plain text 12 GiB"),
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
        ("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred"),
        ("a\rb\nc\td", "a\\rb\\nc\\td"),
        ("nul\x00 del\x7f c1\x9b", "nul\\x00 del\\x7f c1\\x9b"),
        ("rtl\u202eevil\u200b", "rtl\\u202eevil\\u200b"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("tag\U000e0041", "tag\\U000e0041"),  # a format character above the BMP
        ("bad\udcff", "bad\\udcff"),  # a byte decoded with surrogateescape
        ("Größe: 3 ГиБ → 数据 😀 \u00a0nbsp", "Größe: 3 ГиБ → 数据 😀 \u00a0nbsp"),
        ("C:\\path\\x1b", "C:\\path\\x1b"),  # backslashes are left alone
    ],
)
def test_escape_controls(raw: str, shown: str) -> None:
    assert escape_controls(raw) == shown


def test_escape_lines_keeps_the_line_breaks_between_lines() -> None:
    assert escape_lines("one\x1b[2J\ntwo\r\n") == "one\\x1b[2J\ntwo\\r\n"
    assert escape_lines(escape_lines("a\x07\nb")) == escape_lines("a\x07\nb")  # escaping twice changes nothing


def test_markdown_text_renders_no_html() -> None:
    assert markdown_text("<img src=x onerror=alert(1)> & \x1b") == "&lt;img src=x onerror=alert(1)&gt; &amp; \\x1b"


def test_a_code_fence_cannot_be_closed_by_its_lines() -> None:
    block = code_fence(["ok", "``` ", "<img src=x>", "````x"])
    fence = block[0]
    assert set(fence) == {"`"} and len(fence) == 5 and block[-1] == fence
    assert all(not line.strip().startswith(fence) for line in block[1:-1])
    assert code_fence(["a\x1b"], "python") == ["```python", "a\\x1b", "```"]


def test_a_code_span_cannot_be_ended_by_its_text() -> None:
    assert code_span("train.log") == "`train.log`"
    assert code_span("a`b") == "``a`b``"
    assert code_span("`x") == "`` `x ``"
    assert code_span("n\x1b") == "`n\\x1b`"
