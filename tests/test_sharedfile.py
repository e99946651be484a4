"""Files written for people (a run's --report, an incident's HTML page): new ones 0600 whatever the
umask, existing ones keep their mode, written through a symbolic link, never half written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oomwatch.sharedfile import write_for_people


def test_a_new_file_is_its_owners_only_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        write_for_people(tmp_path / "report.json", "{}\n")
    finally:
        os.umask(old)
    assert (tmp_path / "report.json").read_text() == "{}\n"
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o600


def test_an_existing_file_keeps_its_mode_and_a_link_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "shared.html"
    target.write_text("old")
    target.chmod(0o644)
    link = tmp_path / "link.html"
    link.symlink_to(target)
    write_for_people(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.html", "shared.html"]  # no temporary file left


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        write_for_people(tmp_path / "missing" / "x.json", "{}")
    bad = tmp_path / "x.json"
    with pytest.raises(UnicodeEncodeError):
        write_for_people(bad, "\udcff")
    assert list(tmp_path.iterdir()) == []
