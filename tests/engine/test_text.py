"""Tests for oomwatch.engine.text."""

from __future__ import annotations

import time

import pytest

from oomwatch.engine.text import clean_text, split_cr, strip_ansi


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (b"", ""),
        (b"plain line", "plain line"),
        (b"plain line\n", "plain line"),
        (b"crlf line\r\n", "crlf line"),
        (b"lone cr\r", "lone cr"),
        (b"many cr\r\r\n", "many cr"),
        (b"\n", ""),
        (b"\r\n", ""),
        # only the last newline is the line's own; text stays otherwise untouched
        (b"  indented\tand tabbed  ", "  indented\tand tabbed  "),
        # UTF-8, valid and not
        ("Mär 05 10:11:12 host kernel: ok".encode(), "Mär 05 10:11:12 host kernel: ok"),
        (b"bad \xff\xfe bytes", "bad \ufffd\ufffd bytes"),
        (b"truncated \xe2\x82", "truncated \ufffd"),
        (b"latin-1 caf\xe9", "latin-1 caf\ufffd"),
        (b"\xef\xbb\xbf2024-01-05T15:19:27.1234567Z hi", "2024-01-05T15:19:27.1234567Z hi"),
        # NUL bytes
        (b"\x00\x00\x00[ 1.0] after nuls", "[ 1.0] after nuls"),
        (b"K\x00i\x00l\x00l\x00e\x00d\x00", "Killed"),
        (b"\x00" * 64, ""),
        # CSI: colours, erase line, cursor movement, private modes
        (b"\x1b[31mKilled\x1b[0m", "Killed"),
        (b"\x1b[1;31mERROR\x1b[0m: CUDA out of memory\r\n", "ERROR: CUDA out of memory"),
        (b"\x1b[38;5;196mred\x1b[39m", "red"),
        (b"\x1b[38;2;255;0;0mtrue\x1b[m", "true"),
        (b"section_start:1704467967:build\r\x1b[0Kbuild", "section_start:1704467967:build\rbuild"),
        (b"\x1b[K\x1b[2K\x1b[A\x1b[1Gline", "line"),
        (b"\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"),
        (b"Killed\x1b[0m\r\n", "Killed"),
        (b"Killed\r\x1b[0m", "Killed"),
        # OSC: titles and hyperlinks, BEL- or ST-terminated, and unterminated
        (b"\x1b]0;train.py\x07Epoch 1", "Epoch 1"),
        (b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\", "link"),
        (b"before\x1b]0;never ends", "before"),
        # APC (Buildkite timestamps), DCS
        (b"\x1b_bk;t=1704467967123\x07~~~ Running", "~~~ Running"),
        (b"\x1bPq#0;2;0;0;0\x1b\\after", "after"),
        # two-byte escapes and charset selection
        (b"\x1b7saved\x1b8", "saved"),
        (b"\x1b(Bascii\x1b)0", "ascii"),
        (b"\x1bMreverse index", "reverse index"),
        # C1 CSI as UTF-8 (U+009B)
        (b"\xc2\x9b31mred\xc2\x9b0m", "red"),
        # stray / truncated ESC
        (b"dangling\x1b", "dangling"),
        (b"dangling csi\x1b[", "dangling csi"),
        (b"\x1b\x1b\x1b", ""),
        # things that look like escapes but are not
        (b"[31m not an escape", "[31m not an escape"),
        (b"foo) Z ", "foo) Z "),
        # a tqdm progress line keeps its inner CRs
        (b"\r 10%|#  | 1/10\r 20%|## | 2/10\r\n", "\r 10%|#  | 1/10\r 20%|## | 2/10"),
    ],
)
def test_clean_text(raw: bytes, want: str) -> None:
    assert clean_text(raw) == want


@pytest.mark.parametrize(
    "raw",
    [
        bytes(range(256)),
        bytes(range(256)) * 100,
        b"\x1b" * 10_000,
        b"\x1b[" * 10_000,
        b"\x1b]" * 10_000,
        b"\x1b[" + b"1;" * 50_000 + b"m",
        b"\xff" * 100_000,
        b"\r" * 100_000,
    ],
    ids=["all-bytes", "all-bytes-x100", "esc", "csi-open", "osc-open", "csi-long", "ff", "cr"],
)
def test_hostile_bytes_never_raise(raw: bytes) -> None:
    start = time.perf_counter()
    got = clean_text(raw)
    assert time.perf_counter() - start < 1.0
    assert isinstance(got, str)
    assert "\x00" not in got
    assert "\x1b" not in got


def test_clean_text_long_plain_line() -> None:
    raw = b"x" * 5_000_000
    assert clean_text(raw) == "x" * 5_000_000


def test_clean_text_fast_path_throughput() -> None:
    lines = [b"[ 5864.708505] Out of memory: Killed process 13536 (python)\n"] * 200_000
    start = time.perf_counter()
    for raw in lines:
        clean_text(raw)
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", ""),
        ("no escapes", "no escapes"),
        ("\x1b[32mgreen\x1b[0m", "green"),
        ("\u009b1mbold\u009b0m", "bold"),
    ],
)
def test_strip_ansi(text: str, want: str) -> None:
    assert strip_ansi(text) == want


def test_strip_ansi_returns_same_object_when_clean() -> None:
    text = "nothing to do here"
    assert strip_ansi(text) is text


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", []),
        ("plain", ["plain"]),
        ("\r", []),
        ("\r\r\r", []),
        ("a\rb", ["a", "b"]),
        ("\r 10%|#  | 1/10\r 20%|## | 2/10\r", [" 10%|#  | 1/10", " 20%|## | 2/10"]),
        (
            "Epoch 1:  50%|#####     | 5/10 [00:01<00:01]\rEpoch 1: 100%|##########| 10/10\r"
            "RuntimeError: CUDA out of memory.",
            [
                "Epoch 1:  50%|#####     | 5/10 [00:01<00:01]",
                "Epoch 1: 100%|##########| 10/10",
                "RuntimeError: CUDA out of memory.",
            ],
        ),
        ("a\r\rb", ["a", "b"]),
        ("  \r x", ["  ", " x"]),
    ],
)
def test_split_cr(text: str, want: list[str]) -> None:
    assert split_cr(text) == want


def test_split_cr_after_clean_text() -> None:
    raw = b"\x1b[A\r  0%|          | 0/3\r\x1b[A 33%|###3      | 1/3\rKilled\r\n"
    assert split_cr(clean_text(raw)) == ["  0%|          | 0/3", " 33%|###3      | 1/3", "Killed"]
