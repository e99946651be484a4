"""Text laid out for a person's terminal: paragraphs, quoted log lines, code and tables that fit a width.

Pure: the width is an argument (the command line decides it, :func:`output_width`). Nothing a person
needs is cut: a paragraph wraps at spaces, a quoted log line also after commas and, where one piece
is longer than the line, inside it, with a hanging indent; a table too wide for the width becomes one
block per row. Only an absurd line is cut (:data:`MAX_QUOTE` characters), and the text says so.

Widths count code points: a wide (CJK) character takes two columns on a terminal, so a line full of
them may overrun; logs are rarely that.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Collection, Sequence
from typing import TextIO

NOT_A_TERMINAL = 100  # columns of text written to a file or a pipe
MIN_WIDTH = 40  # narrower terminals still get 40 columns: below that nothing reads well
# A quoted line longer than this is cut (and says so): the kernel's printk keeps at most 1024 bytes of a
# line (LOG_LINE_MAX), Python tracebacks and launchers rarely print more; a 50 KB progress-bar line
# would be 500 lines of a report.
MAX_QUOTE = 2048
ROOM = 16  # columns an indent or a label leaves, at least, for the text after it


class _QuoteWrapper(textwrap.TextWrapper):
    # a quoted line may also break after a comma or a slash: the kernel's
    # oom-kill:constraint=...,oom_memcg=/... line has no space for hundreds of characters
    wordsep_simple_re = re.compile(r"(\s+|(?<=[,/])(?=[^\s,/]))")


def _wrapper(width: int, first: str, rest: str, quoted: bool) -> textwrap.TextWrapper:
    kind = _QuoteWrapper if quoted else textwrap.TextWrapper
    return kind(
        width=width,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=True,
        break_on_hyphens=False,
        replace_whitespace=True,
        drop_whitespace=True,
    )


def wrap(text: str, width: int, first: str = "", rest: str | None = None, quoted: bool = False) -> list[str]:
    """``text`` as lines of at most ``width`` columns: the first starts with ``first``, the others
    with ``rest`` (default: as many spaces as ``first`` is long). Prose breaks at spaces (and inside
    a word only when it is longer than a line); ``quoted`` text (a log line, a table's cell) also after
    commas and slashes. Spaces inside a line are kept."""
    rest = " " * len(first) if rest is None else rest
    width = max(width, len(rest) + ROOM)  # an indent leaves room for some text
    if len(first) > width - ROOM:  # a long file name before a quoted line: on lines of its own
        head = _wrapper(width, "", rest, True).wrap(first.rstrip())
        return [*head, *wrap(text, width, rest, rest, quoted)]
    lines = _wrapper(width, first, rest, quoted).wrap(text)
    return lines or [first.rstrip()]


def clip_quote(text: str, limit: int = MAX_QUOTE) -> str:
    """A quoted line whole, or its first ``limit`` characters and a word saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [cut: {len(text) - limit} more characters]"


def quote(where: str, text: str, width: int, indent: str = "  ") -> list[str]:
    """A log line quoted as ``where: text``, wrapped with a hanging indent of 4 more spaces."""
    return wrap(clip_quote(text), width, f"{indent}{where}: ", indent + "    ", quoted=True)


def code(lines: Sequence[str], width: int, indent: str = "    ") -> list[str]:
    """Code, a line of it per line when it fits; a longer one goes on, 4 spaces further in (a comment
    goes on as a comment)."""
    out: list[str] = []
    for line in lines:
        if len(indent) + len(line) <= width:
            out.append((indent + line).rstrip())
            continue
        body = line.lstrip()
        lead = indent + line[: len(line) - len(body)]
        more = lead + "    " + ("# " if body.startswith("#") else "")
        out.extend(wrap(body, width, lead, more, quoted=True))
    return out


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    indent: str = "  ",
    right: Collection[int] = (),
) -> list[str]:
    """Rows in columns under ``header`` when they fit ``width`` (the columns numbered in ``right``
    aligned right); else one block per row: its first cell, then the others as ``name value``
    pairs, wrapped."""
    body = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in body) for i in range(len(header))]
    if len(indent) + sum(widths) + 2 * (len(widths) - 1) <= width:
        return [indent + "  ".join(_cells(r, widths, right)).rstrip() for r in body]
    out: list[str] = []
    for r in rows:
        out.extend(wrap(f"{header[0]} {r[0]}", width, indent, quoted=True))
        pairs = [f"{h} {c}" for h, c in zip(header[1:], r[1:], strict=True)]
        out.extend(_pack(pairs, width, indent + "  "))
    return out


def _pack(pairs: Sequence[str], width: int, indent: str) -> list[str]:
    """``name value`` pairs, comma-separated, as many to a line as fit; one longer than a line wraps."""
    out: list[str] = []
    line = ""
    for i, pair in enumerate(pairs):
        piece = pair + ("," if i < len(pairs) - 1 else "")
        if line and len(indent) + len(line) + 1 + len(piece) <= width:
            line += " " + piece
            continue
        if line:
            out.append(indent + line)
        if len(indent) + len(piece) <= width:
            line = piece
        else:
            *full, line = wrap(piece, width, indent, quoted=True)
            out.extend(full)
            line = line[len(indent) :]
    if line:
        out.append(indent + line)
    return out


def rewrap(text: str, width: int) -> str:
    """Text laid out for another width (an incident's text, written at 100 columns, shown in a
    narrower terminal): each longer line wrapped as a quoted line, under its own indent and 4 more."""
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        body = line.lstrip(" ")
        lead = line[: len(line) - len(body)]
        out.extend(wrap(body, width, lead, lead + "    ", quoted=True))
    return "\n".join(out)


def _cells(row: Sequence[str], widths: Sequence[int], right: Collection[int]) -> list[str]:
    return [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]


def output_width(stream: TextIO) -> int:
    """The columns to lay text out in for ``stream``: when it is a terminal, ``COLUMNS`` if set (as
    :func:`shutil.get_terminal_size` reads it), else the terminal's own width, at least
    :data:`MIN_WIDTH`; when it is not, :data:`NOT_A_TERMINAL`."""
    try:
        if not stream.isatty():
            return NOT_A_TERMINAL
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):  # a closed stream, or one with no file
        return NOT_A_TERMINAL
    columns = 0
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit():
        columns = int(env)
    if columns <= 0:
        try:
            columns = os.get_terminal_size(fd).columns
        except OSError:
            columns = 0
    return max(MIN_WIDTH, columns) if columns > 0 else NOT_A_TERMINAL
