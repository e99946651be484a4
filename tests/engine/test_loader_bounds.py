"""Rules files that are hostile or malformed are lint errors with file:line (exit 5), never a traceback,
a hang or a memory blow-up: bounded size and alias expansion, malformed shapes, a linear-time merge, and
patterns that backtrack catastrophically refused (tests on the shipped rules keep them passing)."""

from __future__ import annotations

import gc
import random
import re
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import regex

from oomwatch.engine.rules import loader, ruleset
from oomwatch.engine.rules.loader import MAX_RULES_FILE_BYTES, load_rules
from oomwatch.engine.rules.redos import backtracking_problems
from oomwatch.engine.rules.ruleset import RuleSet
from tests.conftest import run_oomwatch

RULE = """\
  - id: OW-F-{n}
    name: extra_{n}
    description: d
    event: crash
    anchors: ["zz{n}"]
    pattern: 'zz{n}'
    examples: {{match: ["zz{n}"]}}
"""


def _laughs(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\nrules:\n" + RULE.format(n=9001).replace("description: d", f"description: *l{levels}")


def _dir_with(tmp: Path, name: str, text: str | bytes) -> Path:
    path = tmp / "fingerprints" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return tmp


def _errors(directory: Path) -> list[str]:
    return [str(e) for e in load_rules([directory]).errors]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (_laughs(), "laughs.yaml:5: invalid YAML: aliases expand to more than"),
        ("rules:\n  - &a [*a]\n", "laughs.yaml:2: invalid YAML: alias *a refers to itself"),
        ("rules: " + "[" * 20_000 + "]" * 20_000 + "\n", "laughs.yaml:1: invalid YAML: nested more than 64"),
        (b"rules:\n  - id: caf\xe9\n", "laughs.yaml:0: cannot read: not UTF-8"),
    ],
)
def test_expansion_nesting_and_bytes_are_load_errors(tmp_path: Path, text: str | bytes, said: str) -> None:
    errors = _errors(_dir_with(tmp_path, "laughs.yaml", text))
    assert any(said in e for e in errors), errors


def test_billion_laughs_is_a_lint_error_and_exit_5(tmp_path: Path) -> None:
    directory = _dir_with(tmp_path, "laughs.yaml", _laughs())
    done = run_oomwatch("rules", "lint", str(directory), timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 5, err
    assert "laughs.yaml:5: invalid YAML: aliases expand to more than 10000 nodes" in err
    assert "Traceback" not in err


def test_a_rules_file_over_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    text = "rules:\n" + "#" * MAX_RULES_FILE_BYTES + "\n"
    errors = _errors(_dir_with(tmp_path, "big.yaml", text))
    assert any("big.yaml:0: cannot read: larger than 4 MiB" in e for e in errors), errors


def _rule(n: int, extra: str = "", pattern: str | None = None, examples: str | None = None) -> str:
    text = RULE.format(n=n)
    if pattern is not None:
        text = text.replace(f"'zz{n}'", pattern)
    if examples is not None:
        text = text.replace(f'{{match: ["zz{n}"]}}', examples)
    return text + extra


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        (_rule(1, "    flags: 5\n"), "flags must be a list of words (known: ignorecase), not a number"),
        (_rule(1, "    flags: {ignorecase: true}\n"), "flags must be a list of words"),
        (_rule(1, "    fields: [a, b]\n"), "fields must be a mapping of names to values, not a list"),
        (_rule(1, "    fields: {a: [1]}\n"), "fields: each value must be a string or a number"),
        (_rule(1, "    references: {a: b}\n"), "references must be a list of strings, not a mapping"),
        (_rule(1, pattern="[zz1]"), "pattern must be a string, not a list"),
        (_rule(1, pattern="5"), "pattern must be a string, not a number"),
        (_rule(1).replace("    name: extra_1\n", "    name: {a: 1}\n"), "name must be a string, not a mapping"),
        (_rule(1, examples="{match: 5}"), "examples: `match` and `no_match` must be lists"),
        (_rule(1, examples="{match: [zz1], no_match: zz1}"), "examples: `match` and `no_match` must be lists"),
        (_rule(1, examples="{match: [{text: zz1, fields: [a]}]}"), "an example's fields must be a mapping"),
        (_rule(1).replace("    event: crash\n", ""), "missing required key 'event'"),
        (_rule(1, "    ? [a, b]\n    : c\n"), "invalid YAML: a key must be a plain word, not a list or mapping"),
        (_rule(1, "    ? {a: b}\n    : c\n"), "invalid YAML: a key must be a plain word, not a list or mapping"),
    ],
)
def test_each_malformed_fingerprint_is_an_error_at_its_line(tmp_path: Path, rule: str, said: str) -> None:
    errors = _errors(_dir_with(tmp_path, "bad.yaml", "rules:\n" + rule))
    assert any(e.startswith(f"{tmp_path}/fingerprints/bad.yaml:") and said in e for e in errors), errors
    assert not any(e.split(": ", 1)[0].endswith(":0") and "bad.yaml" in e for e in errors), errors


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("verdicts.yaml", "verdicts:\n  - id: OW-V-9\n    verdict: host_oom\n    when: {fact: x, gt: 0}\n"
         "    summary: s\n    next_steps: 5\n", "verdicts.yaml:2: next_steps must be a list"),
        ("verdicts.yaml", "verdicts:\n  - id: OW-V-9\n    verdict: host_oom\n    when: 5\n    summary: s\n",
         "verdicts.yaml:2: "),
        ("activities.yaml", "activities:\n  - id: a\n    title: t\n    pattern: 'x(a|a)*$'\n"
         "    examples: {match: [xa]}\n", "activities.yaml:2: alternation under an unbounded repeat"),
        ("activities.yaml", "activities: []\nstreams:\n  - id: s\n    pattern: '(?P<rank>\\d+)'\n    flags: 7\n",
         "activities.yaml:3: "),
        ("code.yaml", "code:\n  - 5\n", "code.yaml:0: "),
    ],
)  # fmt: skip
def test_malformed_rules_of_other_kinds_are_errors(tmp_path: Path, name: str, text: str, said: str) -> None:
    (tmp_path / name).write_text(text)
    errors = _errors(tmp_path)
    assert any(said in e for e in errors), errors


def test_malformed_rules_exit_5_with_file_and_line_in_lint_and_diagnose(tmp_path: Path) -> None:
    _dir_with(tmp_path, "bad.yaml", "rules:\n" + _rule(1, "    flags: 5\n") + _rule(2, "    fields: [a]\n"))
    done = run_oomwatch("rules", "lint", str(tmp_path))
    err = done.stderr.decode()
    assert done.returncode == 5, err
    assert "bad.yaml:2: flags must be a list" in err and "bad.yaml:10: fields must be a mapping" in err
    assert "Traceback" not in err
    log = tmp_path / "train.log"
    log.write_text("step 1\n")
    done = run_oomwatch("diagnose", "--rules", str(tmp_path), str(log))
    err = done.stderr.decode()
    assert done.returncode == 5, err
    assert "bad.yaml:2: flags must be a list" in err and "Traceback" not in err


# -- backtracking ----------------------------------------------------------------------------------------

# pattern: what the check says, and a worst case (the engine, the line as prefix + pump * n + tail, n long/short)
REJECTED: dict[str, tuple[str, Any, str, str, str, int, int]] = {
    r"(a+)+$": ("nested quantifier", re, "", "a", "!", 20, 16),
    r"(a*)*$": ("nested quantifier", re, "", "a", "!", 20, 16),
    r"(?:x+\s*)+$": ("nested quantifier", re, "", "x", "!", 20, 16),
    r"^(?:[0-9a-f]{8,16}\s*){2,}$": ("nested quantifier", re, "", "0", "!", 85, 70),
    r"Killed (a|a)*$": ("alternation under an unbounded repeat", regex, "Killed ", "a", "!", 18, 14),
    r"(?i:(?:x|X\d?)+)$": ("alternation under an unbounded repeat", regex, "", "x", "!", 18, 14),
    r"(?:\d|\d0)+$": ("alternation under an unbounded repeat", regex, "", "0", "!", 20, 16),
}


@pytest.mark.parametrize("pattern", sorted(REJECTED))
def test_patterns_prone_to_catastrophic_backtracking_are_rejected(pattern: str) -> None:
    said = REJECTED[pattern][0]
    problems = backtracking_problems(pattern)
    assert any(said in p for p in problems), problems


@pytest.mark.parametrize("pattern", sorted(REJECTED))
def test_each_rejected_shape_is_exponential_on_its_worst_line(pattern: str) -> None:
    """What the check stands for: four more characters of the worst line cost many times more."""
    _, engine, prefix, pump, tail, long, short = REJECTED[pattern]
    compiled = engine.compile(pattern)

    def cost(n: int, runs: int) -> float:
        best = 1e9
        for _ in range(runs):
            started = time.perf_counter()
            compiled.search(prefix + pump * n + tail)
            best = min(best, time.perf_counter() - started)
        return best

    assert cost(long, 1) > 4 * cost(short, 3), pattern


def test_the_check_reads_the_pattern_not_its_text() -> None:
    """Overlap is judged on what the branches can begin with, case folded where the pattern says so."""
    assert backtracking_problems(r"(?:X|x\d)+$", ignorecase=False) == []
    assert backtracking_problems(r"(?:X|x\d)+$", ignorecase=True)
    assert backtracking_problems(r"(?i)(?:X|x\d)+$")
    assert backtracking_problems(r"(?:[a-f]|[e-z]0)+") and not backtracking_problems(r"(?:[a-d]|[e-z]0)+")
    assert backtracking_problems(r"\((?:a+)+\)")  # under a group
    assert backtracking_problems(r"(?>(a+)+b)")  # an atomic group does not help inside itself
    assert "cannot be checked" in backtracking_problems(r"\p{L}+")[0]


@pytest.mark.parametrize(
    "pattern",
    [r"\d+(?:, \d++)*", r"(?:a|b)*", r"(a++)+", r"(?>a+)+", r"(?:\d+\.){3}\d+", r"x{2,8}y", r"(?:foo|bar)+",
     r".*?x", r"(?:\s+\S+){0,3}", r"(?P<n>a)|(?P<n>b)"],
)  # fmt: skip
def test_linear_shapes_pass(pattern: str) -> None:
    assert backtracking_problems(pattern) == []


def test_a_rule_that_backtracks_is_a_lint_error_at_its_line(tmp_path: Path) -> None:
    rule = _rule(1, pattern="'Killed (a|a)*$'", examples='{match: ["Killed aa"]}').replace('["zz1"]', '["Killed"]')
    errors = _errors(_dir_with(tmp_path, "slow.yaml", "rules:\n" + rule))
    assert any("slow.yaml:2: alternation under an unbounded repeat" in e for e in errors), errors


def test_every_shipped_pattern_passes_the_check() -> None:
    rules = load_rules()
    assert not rules.errors, rules.errors
    patterns = [fp.pattern for fp in rules.fingerprints] + [a.pattern for a in rules.activities]
    patterns += [s.pattern for s in rules.streams] + [s.pattern for s in rules.steps]
    patterns += [m.pattern for c in rules.code for m in c.matchers if m.pattern is not None]
    assert len(patterns) > 200
    bad = {p.pattern: backtracking_problems(p.pattern) for p in patterns if backtracking_problems(p.pattern)}
    assert bad == {}


@pytest.mark.parametrize(
    ("rule_id", "prefix", "suffix"),
    [
        ("OW-F-0805", "slurmstepd: error: Job 1", " exceeded memory limit (10 > "),
        ("OW-F-0806", "slurmstepd: error: *** JOB 1", " CANCELLED AT 2024 DUE TO TIME LIM"),
        ("OW-F-0801", "Detected 1 oom-kill events in StepId=1", "!"),
        ("OW-F-0205", "RuntimeError: DataLoader worker (pid(s) 1", ") exited"),
    ],
)
def test_a_shipped_pattern_on_its_worst_line_stays_linear(rule_id: str, prefix: str, suffix: str) -> None:
    """The patterns rewritten with a possessive inner repeat: a line that pumps the repeated part and then
    fails costs four times as much when it is four times as long (not 16 or 2**n times)."""
    fp = next(f for f in load_rules().fingerprints if f.id == rule_id)
    pump = ", 1" if "pid" in prefix else ".a1"

    lines = {n: prefix + pump * n + suffix for n in (10_000, 40_000)}
    best = dict.fromkeys(lines, 1e9)
    for _ in range(7):  # interleaved, the best of each: another process's burst falls on one run, not all
        for n, line in lines.items():
            started = time.perf_counter()
            fp.pattern.search(line, timeout=5)
            best[n] = min(best[n], time.perf_counter() - started)
    small, large = best[10_000], best[40_000]
    assert large < 8 * small, (small, large)


# -- merging ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    id: str
    name: str


def _reference_merge(items: list[Any], new: Any) -> None:
    """The merge's meaning, the slow way: the first rule with the same id or name is replaced."""
    for i, old in enumerate(items):
        if old.id == new.id or old.name == new.name:
            items[i] = new
            return
    items.append(new)


def test_the_merge_replaces_as_the_first_rule_with_the_id_or_name() -> None:
    rng = random.Random(12)
    rules, fast, slow = RuleSet(), [], []  # type: ignore[var-annotated]
    for _ in range(3000):
        new = _Rule(f"id{rng.randrange(400)}", f"name{rng.randrange(400)}")
        ruleset.replace_or_add(rules, fast, new)
        _reference_merge(slow, new)
        assert fast == slow


def _merge_seconds(n: int) -> float:
    best = 1e9
    for _ in range(3):
        rules, items = RuleSet(), []  # type: ignore[var-annotated]
        news = [_Rule(f"id{i}", f"name{i}") for i in range(n)] + [_Rule(f"id{i}", f"other{i}") for i in range(n)]
        gc.disable()  # a collection's cost grows with everything alive, not with the merge
        try:
            started = time.process_time()
            for new in news:
                ruleset.replace_or_add(rules, items, new)
            best = min(best, time.process_time() - started)
        finally:
            gc.enable()
    return best


def test_merging_four_times_the_rules_takes_about_four_times_the_time() -> None:
    """20k rules merged in 439 s when each replacement searched the list (n**2: 16 times for 4 times)."""
    small, large = _merge_seconds(5_000), _merge_seconds(20_000)
    assert large < 8 * small, (small, large)


def test_override_from_a_directory_still_replaces_by_id_and_name(tmp_path: Path) -> None:
    builtin = load_rules()
    first = builtin.fingerprints[0]
    text = textwrap.dedent(
        f"""\
        rules:
          - id: {first.id}
            name: replaced_by_id
            description: d
            event: {first.event}
            anchors: ["zzq"]
            pattern: 'zzq'
            examples: {{match: ["zzq"]}}
        """
    )
    rules = load_rules([_dir_with(tmp_path, "over.yaml", text)])
    assert not rules.errors, rules.errors
    assert len(rules.fingerprints) == len(builtin.fingerprints)
    assert rules.fingerprints[0].name == "replaced_by_id"


# -- every shape a value of the wrong kind ---------------------------------------------------------------

WRONG = [5, 1.5, True, None, "x", [1], [[1]], {"a": 1}, {"a": [1]}]
KINDS = {
    "activities.yaml": ("activities", "_load_activities"),
    "causes.yaml": ("causes", "_load_causes"),
    "code.yaml": ("code", "_load_code"),
    "verdicts.yaml": ("verdicts", "_load_verdicts"),
    "fingerprints/shm.yaml": ("rules", "_load_fingerprints"),
    "fingerprints/schedulers.yaml": ("rules", "_load_fingerprints"),
}


def _places(item: dict[str, Any]) -> list[tuple[str, ...]]:
    """Each key of a rule, and each key one level down (in a mapping, or in a list's first mapping)."""
    places: list[tuple[str, ...]] = []
    for key, value in item.items():
        places.append((key,))
        if isinstance(value, dict):
            places += [(key, sub) for sub in value]
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            places += [(key, "0", sub) for sub in value[0]]
    return places


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_value_of_the_wrong_kind_anywhere_in_a_shipped_rule_is_an_error_with_a_reason(
    tmp_path: Path, name: str
) -> None:
    """Seeded: 30 shipped rules of this file, each with one value replaced by one of the wrong kind. Loading
    and checking the examples never raise, and no error is the catch-all "malformed rule" (each has its reason)."""
    import yaml

    from oomwatch.engine.code import check_code_examples
    from oomwatch.engine.rules.activity_rules import check_activity_examples, check_stream_examples
    from oomwatch.engine.rules.lint import as_scanned, check_examples

    key, function = KINDS[name]
    doc = yaml.safe_load((loader.builtin_rules_dir() / name).read_text())
    rng = random.Random(f"12-{name}")
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(30):
        mutated = yaml.safe_load(yaml.safe_dump(doc))
        item = rng.choice(mutated[key])
        place = rng.choice(_places(item))
        target: Any = item
        for step in place[:-1]:
            target = target[int(step)] if step == "0" else target[step]
        target[place[-1]] = rng.choice(WRONG)
        path.write_text(yaml.safe_dump(mutated, sort_keys=False))
        rules = RuleSet()
        getattr(loader, function)(path, rules)
        for fp in rules.fingerprints:
            check_examples(fp)
        for act in rules.activities:
            check_activity_examples(act, as_scanned)
        for stream in rules.streams:
            check_stream_examples(stream, as_scanned)
        for code in rules.code:
            check_code_examples(code)
        assert not [e for e in rules.errors if "malformed rule" in e.message], (place, target)
