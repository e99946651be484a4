"""A rule's fields: constants, then groups; a group named like a field with a digit is that field."""

from __future__ import annotations

from oomwatch.engine.fields import match_fields


def test_an_alternates_group_is_the_field_when_the_first_did_not_match() -> None:
    assert match_fields({"launcher": "dask"}, {"pid": None, "pid2": "24092"}) == {"launcher": "dask", "pid": "24092"}


def test_the_first_alternative_wins_and_unmatched_groups_are_no_fields() -> None:
    assert match_fields({}, {"pid": "1", "pid2": "2", "name": None}) == {"pid": "1"}
    assert match_fields({"signal": "9"}, {"signal2": None}) == {"signal": "9"}
