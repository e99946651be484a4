"""Which rule patterns can backtrack catastrophically: read from the parsed pattern (Python's own
regular-expression parser), never from the pattern's text.

Two shapes make a backtracking matcher take exponential time on a line that almost matches:

* a repeat inside an unbounded repeat where the inner one can match a varying number of times
  (``(a+)+``, ``(a*)*``, ``(?:x+\\s*)+``, ``(?:[0-9a-f]{8,16}\\s*){2,}``): a run can be split between the
  two in exponentially many ways;
* an alternation under an unbounded repeat whose branches can begin with the same character
  (``(a|a)*``, ``(?:\\w|\\d)+``): each repeat chooses between them again.

An inner repeat made possessive (``x++``, ``x*+``) or put in an atomic group (``(?>x+)``) gives no
choice back, and passes; so does a bounded outer repeat of up to ``MAX_BOUNDED`` times.
"""

from __future__ import annotations

import re
import re._constants as sre  # noqa: PLC2701 - the parser's own vocabulary
import re._parser as sre_parse  # noqa: PLC2701
import warnings
from collections.abc import Callable, Iterable
from typing import Any

MAX_BOUNDED = 10  # an outer repeat bounded by this many times is polynomial of small degree
_SAMPLE = [chr(c) for c in range(0x300)] + ["\u00e9", "\u0394", "\u0416", "\u4e2d", "\u0660", "\u2003", "\U0001f600"]
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT)

CharTest = Callable[[str], bool]


class _State(sre_parse.State):  # type: ignore[misc,name-defined]
    """The parser's state, letting a group name be given twice (the `regex` module allows it)."""

    def opengroup(self, name: str | None = None) -> int:
        if name is not None and name in self.groupdict:
            name = None
        return int(super().opengroup(name))


def backtracking_problems(pattern: str, ignorecase: bool = False) -> list[str]:
    """Why ``pattern`` can take exponential time, one message per shape found (empty: it cannot)."""
    flags = re.IGNORECASE if ignorecase else 0
    try:
        with warnings.catch_warnings():  # "possible nested set" and the like: the compile already spoke
            warnings.simplefilter("ignore")
            parsed = sre_parse.parse(pattern, flags, _State())
    except (re.error, OverflowError, RecursionError) as exc:
        return [f"pattern cannot be checked for backtracking (use the syntax of Python's re): {exc}"]
    problems: list[str] = []
    _walk(list(parsed), False, ignorecase or bool(parsed.state.flags & re.IGNORECASE), problems)
    return sorted(set(problems))


def _walk(items: Iterable[tuple[Any, Any]], under: bool, icase: bool, problems: list[str]) -> None:
    """``under``: inside an unbounded (or long) repeat that backtracks."""
    for op, av in items:
        if op in _REPEATS:
            low, high, body = av
            if under and low != high:
                problems.append(
                    "nested quantifier: a repeat that varies inside an unbounded repeat can backtrack "
                    "exponentially; make the inner one possessive (x++, x*+) or atomic (?>...), or bound the outer"
                )
            outer = high == sre.MAXREPEAT or high > MAX_BOUNDED
            _walk(body, under or (outer and high > 1), icase, problems)
        elif op == sre.POSSESSIVE_REPEAT:  # gives nothing back: its inside is a fresh start
            _walk(av[2], False, icase, problems)
        elif op == sre.ATOMIC_GROUP:
            _walk(av, False, icase, problems)
        elif op == sre.SUBPATTERN:
            _walk(av[-1], under, _folds(icase, av), problems)
        elif op == sre.BRANCH:
            branches = av[1]
            if under and _overlapping(branches, icase):
                problems.append(
                    "alternation under an unbounded repeat with branches that can begin alike "
                    "backtracks exponentially; make the branches start differently or the group atomic (?>...)"
                )
            for branch in branches:
                _walk(branch, under, icase, problems)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            _walk(av[1], under, icase, problems)
        elif op == sre.GROUPREF_EXISTS:
            _walk(av[1], under, icase, problems)
            if av[2] is not None:
                _walk(av[2], under, icase, problems)


def _overlapping(branches: list[Any], icase: bool) -> bool:
    firsts = [_first(list(b), icase) for b in branches]
    for i, a in enumerate(firsts):
        for b in firsts[i + 1 :]:
            if a is None or b is None:  # a branch that can match nothing overlaps every other
                return True
            if any(a(ch) and b(ch) for ch in _SAMPLE):
                return True
    return False


def _first(items: list[tuple[Any, Any]], icase: bool) -> CharTest | None:
    """A test for the characters a sequence can begin with; None when it can match the empty string."""
    tests: list[CharTest] = []
    for op, av in items:
        test, nullable = _first_of(op, av, icase)
        if test is not None:
            tests.append(test)
        if not nullable:
            return lambda ch: any(t(ch) for t in tests)
    return None


def _first_of(op: Any, av: Any, icase: bool) -> tuple[CharTest | None, bool]:
    """(what the item can begin with, whether it can match the empty string)."""
    if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
        return _fold(_char_test(op, av), icase), False
    if op in (*_REPEATS, sre.POSSESSIVE_REPEAT):
        low, _, body = av
        test = _first(list(body), icase)
        return test, low == 0 or test is None
    if op == sre.SUBPATTERN:
        test = _first(list(av[-1]), _folds(icase, av))
        return test, test is None
    if op == sre.ATOMIC_GROUP:
        test = _first(list(av), icase)
        return test, test is None
    if op == sre.BRANCH:
        tests = [_first(list(b), icase) for b in av[1]]
        present = [t for t in tests if t is not None]
        return (lambda ch: any(t(ch) for t in present)), any(t is None for t in tests)
    # assertions, anchors, backreferences: treated as matching nothing (a backreference may; be safe)
    if op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
        return (lambda ch: True), True
    return None, True


def _folds(icase: bool, group: Any) -> bool:
    """Whether a group (its inline flags: ``(?i:...)``, ``(?-i:...)``) matches case-insensitively."""
    _, add, remove, _ = group
    return (icase or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE


def _fold(test: CharTest, icase: bool) -> CharTest:
    if not icase:
        return test
    return lambda ch: test(ch) or test(ch.lower()) or test(ch.upper())


_CATEGORIES: dict[Any, CharTest] = {
    sre.CATEGORY_DIGIT: lambda ch: re.match(r"\d", ch) is not None,
    sre.CATEGORY_NOT_DIGIT: lambda ch: re.match(r"\D", ch) is not None,
    sre.CATEGORY_SPACE: lambda ch: re.match(r"\s", ch) is not None,
    sre.CATEGORY_NOT_SPACE: lambda ch: re.match(r"\S", ch) is not None,
    sre.CATEGORY_WORD: lambda ch: re.match(r"\w", ch) is not None,
    sre.CATEGORY_NOT_WORD: lambda ch: re.match(r"\W", ch) is not None,
}


def _char_test(op: Any, av: Any) -> CharTest:
    if op == sre.LITERAL:
        return lambda ch: ord(ch) == av
    if op == sre.NOT_LITERAL:
        return lambda ch: ord(ch) != av
    if op == sre.ANY:
        return lambda ch: ch != "\n"
    negate = bool(av) and av[0][0] == sre.NEGATE
    parts: list[CharTest] = []
    for kind, value in av[1:] if negate else av:
        if kind == sre.LITERAL:
            parts.append(_in_range(value, value))
        elif kind == sre.RANGE:
            parts.append(_in_range(value[0], value[1]))
        elif kind == sre.CATEGORY:
            parts.append(_CATEGORIES.get(value, lambda ch: True))
        else:
            parts.append(lambda ch: True)
    if negate:
        return lambda ch: not any(p(ch) for p in parts)
    return lambda ch: any(p(ch) for p in parts)


def _in_range(low: int, high: int) -> CharTest:
    return lambda ch: low <= ord(ch) <= high
