"""Text from logs, job output, process names, job ids and cgroup names, made safe to show a person.

Any process on a node chooses its own ``comm``, what it prints, and its environment: none of it may
move the cursor, set a terminal's title, ring its bell, clear its screen, or start a line of its own
in oomwatch's output or log. Every control character (C0, DEL, C1), line and paragraph separator,
invisible format character (bidi overrides, zero-width characters) and lone surrogate becomes a
visible backslash escape: ``\\x1b``, ``\\n``, ``\\r``, ``\\t``, ``\\x07``, ``\\u202e``. Tabs are
escaped too (they shift the columns of a table). Printable Unicode is left as it is, and so are
backslashes: the output is for reading, not for parsing back (JSON output is the exact form).

Markdown also renders raw HTML: :func:`markdown_text` escapes ``&``, ``<`` and ``>`` as well, outside
code spans; :func:`code_fence` and :func:`code_span` choose fences that their text cannot close.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_BACKTICKS = re.compile(r"`+")


def _escape_char(c: str) -> str:
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _unsafe(c: str) -> bool:
    if c.isprintable():
        return False
    return unicodedata.category(c) in _UNSAFE_CATEGORIES


def escape_controls(text: str) -> str:
    """``text`` with every control, separator, format and surrogate character as a visible escape."""
    if text.isprintable():  # the common case, in C
        return text
    return "".join(_escape_char(c) if _unsafe(c) else c for c in text)


def escape_lines(text: str) -> str:
    """Each line of ``text`` escaped, the line breaks between them kept: for a text made of lines
    (a rendered report) whose pieces may carry anything. A final line break stays one."""
    return "\n".join(escape_controls(line) for line in text.split("\n"))


_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def markdown_text(text: str) -> str:
    """``text`` for Markdown outside code: escaped controls, and no HTML. ``&``, ``<`` and ``>``
    become entities except inside code spans (where HTML is inert and entities would show as
    typed: rule text quotes `ls -l <checkpoint>`); a backtick that opens no span of this text is
    escaped, so that no span can begin here and end in another line of the same paragraph."""
    text = escape_controls(text)
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in _ASCII_PUNCTUATION:
            out.append("\\" + text[i + 1].translate(_HTML))  # an escaped character: never a span's backtick
            i += 2
            continue
        if c != "`":
            out.append(c.translate(_HTML))
            i += 1
            continue
        run = _BACKTICKS.match(text, i)
        if run is None:  # pragma: no cover - text[i] is a backtick
            break
        width = len(run.group())
        close = next((m for m in _BACKTICKS.finditer(text, run.end()) if len(m.group()) == width), None)
        if close is None:
            out.append("\\`" * width)  # opens nothing: a literal backtick
            i = run.end()
        else:
            out.append(text[i : close.end()])  # a code span, as it is
            i = close.end()
    return "".join(out)


def _longest_backticks(texts: Iterable[str]) -> int:
    return max((len(m.group()) for t in texts for m in _BACKTICKS.finditer(t)), default=0)


def code_fence(lines: Iterable[str], info: str = "") -> list[str]:
    """``lines`` (escaped) as a fenced code block whose fence is longer than any run of backticks in
    them: no line can close it and let what follows render as Markdown or HTML."""
    body = [escape_controls(line) for line in lines]
    fence = "`" * max(3, _longest_backticks(body) + 1)
    return [fence + info, *body, fence]


def code_span(text: str) -> str:
    """``text`` (escaped) as inline code that no backtick in it can end early."""
    body = escape_controls(text)
    ticks = "`" * (_longest_backticks([body]) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{ticks}{pad}{body}{pad}{ticks}"
