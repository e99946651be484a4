"""Turn raw log bytes into clean text, one line at a time.

`clean_text` takes one line's bytes (with or without its trailing newline) and:

- decodes UTF-8, replacing invalid bytes with U+FFFD (never raises);
- removes NUL bytes (sparse or zero-filled files, NUL-padded ring buffers);
- strips terminal escape sequences: CSI (`ESC [ 31m`, `ESC [K`, `ESC [2A`),
  OSC (`ESC ] 0;title BEL`, `ESC ] 8;;url ESC \\`), DCS/SOS/PM/APC strings
  (Buildkite's `ESC _bk;t=1704467967123 BEL`), two-byte escapes (`ESC 7`,
  `ESC (B`), the C1 CSI `U+009B`, and a dangling `ESC` at the end of a line;
- drops a leading UTF-8 byte-order mark and a trailing `\\n`, `\\r\\n` or `\\r`.

Carriage returns inside a line (tqdm progress bars redraw with `\\r`) are kept;
`split_cr` splits such a line into the segments that were drawn.

Lines that need none of this (the vast majority) take a fast path: a few
`in` checks on the bytes and one strict decode, no regex work.
"""

from __future__ import annotations

import re

__all__ = ["clean_text", "split_cr", "strip_ansi"]

# ECMA-48 escape sequences, longest forms first.
_ANSI_RE = re.compile(
    r"""
    \x1b\[ [0-?]* [ -/]* [@-~]                    # CSI: ESC [ params intermediates final
    | \u009b [0-?]* [ -/]* [@-~]                  # C1 CSI (U+009B)
    | \x1b[\]PX^_] [^\x07\x1b]* (?:\x07|\x1b\\|$) # OSC/DCS/SOS/PM/APC, BEL or ST ended
    | \x1b [ -/]* [0-~]                           # two-byte and nF escapes: ESC 7, ESC (B
    | \x1b                                        # a stray or truncated ESC
    """,
    re.VERBOSE,
)


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences from already decoded text."""
    if "\x1b" not in text and "\x9b" not in text:
        return text
    return _ANSI_RE.sub("", text)


def clean_text(raw: bytes) -> str:
    """Decode one line of log bytes into clean text; never raises.

    >>> clean_text(b"\\x1b[31mKilled\\x1b[0m\\r\\n")
    'Killed'
    """
    if raw.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte-order mark (GitHub logs)
        raw = raw[3:]
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw.rstrip(b"\r")
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", b"")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
    if b"\x1b" in raw or b"\xc2\x9b" in raw:
        text = _ANSI_RE.sub("", text)
        if text.endswith("\r"):  # an escape sat between the text and its CR
            text = text.rstrip("\r")
    return text


def split_cr(text: str) -> list[str]:
    """Split a carriage-return progress line into the segments that were drawn.

    Empty segments are dropped, so a tqdm line such as
    `"\\r 10%|#  | 1/10\\r 20%|## | 2/10\\r"` gives the two bars. A line without
    `\\r` comes back as a one-item list (an empty list for an empty line).
    """
    if "\r" not in text:
        return [text] if text else []
    return [seg for seg in text.split("\r") if seg]
