"""Make the re-wrapped fixtures of tests/fixtures/pasted/ from real captures (stdlib only).

A person who pastes a kernel log into an e-mail, a forum or a terminal of fixed width changes
its lines without meaning to. Each transformation here does one such thing, deterministically,
to a real capture of tests/fixtures/captured/ (`dmesg -T` output):

* ``fold80``: every line cut at 80 columns, as a terminal's copy or `fold -w 80` does;
* ``quoted72``: every line word-wrapped at 72 columns (no word broken, none at a hyphen), then
  quoted with `> `, as a mail client replying to it does;
* ``syslog_tag``: the `dmesg -T` stamp replaced by a bare `kernel: ` tag (a syslog line whose
  date and host were cut off: `cut -d' ' -f5- /var/log/messages`);
* ``no_stamp``: the stamp removed (`dmesg -t`).

    python tools/capture/rewrap.py            # rewrite every fixture
    python tools/capture/rewrap.py --check    # exit 1 if a fixture differs from what this makes
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
CAPTURED = ROOT / "tests" / "fixtures" / "captured"
PASTED = ROOT / "tests" / "fixtures" / "pasted"
SOURCES = ("memcg_dataloader_worker", "memcg_torchrun_rank")  # folders of CAPTURED, their dmesg-T.txt
_STAMP = re.compile(r"^\[[^\]]*\d{4}\] ")  # `[Sun Nov 29 22:46:13 2026] `


def fold80(lines: list[str]) -> list[str]:
    return [line[i : i + 80] for line in lines for i in range(0, max(len(line), 1), 80)]


def quoted72(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        wrapped = textwrap.wrap(line, 72, break_long_words=False, break_on_hyphens=False) or [""]
        out.extend(f"> {w}" for w in wrapped)
    return out


def syslog_tag(lines: list[str]) -> list[str]:
    return [_STAMP.sub("kernel: ", line, count=1) for line in lines]


def no_stamp(lines: list[str]) -> list[str]:
    return [_STAMP.sub("", line, count=1) for line in lines]


TRANSFORMS: dict[str, Callable[[list[str]], list[str]]] = {
    "fold80": fold80,
    "quoted72": quoted72,
    "syslog_tag": syslog_tag,
    "no_stamp": no_stamp,
}


def made() -> dict[Path, str]:
    """Every fixture's path and the text this makes for it."""
    out: dict[Path, str] = {}
    for source in SOURCES:
        lines = (CAPTURED / source / "dmesg-T.txt").read_text(encoding="utf-8").splitlines()
        for name, transform in TRANSFORMS.items():
            out[PASTED / source / f"{name}.txt"] = "\n".join(transform(lines)) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    differ = []
    for path, text in made().items():
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                differ.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in differ:
        print(f"differs: {path.relative_to(ROOT)}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
