"""The compiled-rules cache: the same rules as a fresh load, never a stale or foreign file, and
`diagnose` carrying nothing of the agent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomwatch import rulecache
from oomwatch.engine.rules import loader, ruleset
from oomwatch.engine.rules.rules_yaml import parse_rules_yaml

ROOT = Path(__file__).resolve().parent.parent
RULE = """rules:
  - id: OW-F-9{n:03d}
    name: cache_test_{n}
    status: stable
    description: a rule of a test
    event: crash
    anchors: ["cache test {n}"]
    pattern: 'cache test {n}'
    examples:
      match:
        - text: "cache test {n}"
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("OOMWATCH_CACHE_DIR", str(where))
    monkeypatch.delenv("OOMWATCH_NO_CACHE", raising=False)
    return where


def _count_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = rulecache.load_rules

    def counting(extra=()):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(extra)

    monkeypatch.setattr(rulecache, "load_rules", counting)
    return calls


def _summary(rules: ruleset.RuleSet) -> tuple[object, ...]:
    return (
        [(f.id, f.pattern.pattern, f.anchors, f.fields) for f in rules.fingerprints],
        [(v.id, v.summary) for v in rules.verdicts],
        [c.id for c in rules.causes],
        sorted(rules.events),
    )


def test_second_load_comes_from_the_cache_and_equals_a_fresh_load(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_loads(monkeypatch)
    first = rulecache.load_rules_cached()
    again = rulecache.load_rules_cached()
    assert len(calls) == 1  # built once, then read
    assert len(list(cache.glob("rules-*.pickle"))) == 1
    assert _summary(again) == _summary(first) == _summary(loader.load_rules())
    fp = next(f for f in again.fingerprints if f.match)
    assert fp.pattern.search(fp.match[0].text)  # compiled patterns survive


def test_a_changed_rule_file_is_another_build(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "my-rules"
    (extra / "fingerprints").mkdir(parents=True)
    (extra / "fingerprints" / "x.yaml").write_text(RULE.format(n=1))
    calls = _count_loads(monkeypatch)
    assert any(f.id == "OW-F-9001" for f in rulecache.load_rules_cached([extra]).fingerprints)
    (extra / "fingerprints" / "x.yaml").write_text(RULE.format(n=2))
    ids = {f.id for f in rulecache.load_rules_cached([extra]).fingerprints}
    assert "OW-F-9002" in ids and "OW-F-9001" not in ids
    assert len(calls) == 2


def test_rules_with_errors_are_not_cached(cache: Path, tmp_path: Path) -> None:
    extra = tmp_path / "bad"
    (extra / "fingerprints").mkdir(parents=True)
    (extra / "fingerprints" / "x.yaml").write_text("rules: [")
    assert rulecache.load_rules_cached([extra]).errors
    assert not list(cache.glob("rules-*.pickle"))


@pytest.mark.parametrize("spoil", ["world-writable", "garbage", "not-a-ruleset", "symlink"])
def test_a_cache_file_that_is_not_ours_or_not_whole_is_not_read(
    spoil: str, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rulecache.load_rules_cached()
    (path,) = cache.glob("rules-*.pickle")
    if spoil == "world-writable":
        path.chmod(0o666)
    elif spoil == "garbage":
        path.write_bytes(b"\x80\x04not a pickle")
    elif spoil == "not-a-ruleset":
        import pickle

        path.write_bytes(pickle.dumps({"rules": 1}))
    else:
        other = tmp_path / "elsewhere.pickle"
        other.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(other)
    calls = _count_loads(monkeypatch)
    assert rulecache.load_rules_cached().fingerprints
    assert len(calls) == 1  # built again


def test_a_cache_directory_others_may_write_is_not_used(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rulecache.load_rules_cached()
    cache.chmod(0o777)
    calls = _count_loads(monkeypatch)
    rulecache.load_rules_cached()
    assert len(calls) == 1


def test_off_by_environment(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OOMWATCH_NO_CACHE", "1")
    rulecache.load_rules_cached()
    assert not cache.exists()


def test_old_builds_are_pruned(cache: Path, tmp_path: Path) -> None:
    for n in range(rulecache.KEEP + 3):
        extra = tmp_path / f"r{n}"
        (extra / "fingerprints").mkdir(parents=True)
        (extra / "fingerprints" / "x.yaml").write_text(RULE.format(n=n))
        rulecache.load_rules_cached([extra])
    assert len(list(cache.glob("rules-*.pickle"))) == rulecache.KEEP


def test_an_unwritable_cache_still_gives_the_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("OOMWATCH_CACHE_DIR", str(blocker / "cache"))  # under a file: cannot be made
    assert rulecache.load_rules_cached().fingerprints


def test_fast_parser_reads_the_shipped_rules_as_the_bounded_one_does() -> None:
    d = loader.builtin_rules_dir()
    files = [*d.glob("*.yaml"), *d.glob("fingerprints/*.yaml")]
    assert len(files) > 10
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert parse_rules_yaml(text, trusted=True) == parse_rules_yaml(text, trusted=False), f


def test_diagnose_imports_nothing_of_the_agent(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from oomwatch.cli import main\n"
        f"r = CliRunner().invoke(main, ['diagnose', {str(ROOT / 'examples/torchrun-rank-oom/torchrun.log')!r}])\n"
        "assert r.exit_code == 3, r.output\n"
        "print(sorted(m for m in sys.modules if m.startswith('oomwatch.agent') or m in ('yaml', 'oomwatch.cli.agent')))\n"
    )
    env = {**os.environ, "OOMWATCH_CACHE_DIR": str(tmp_path / "c")}
    subprocess.run([sys.executable, "-c", probe], check=True, env=env, capture_output=True)  # builds the cache
    out = subprocess.run([sys.executable, "-c", probe], check=True, env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout  # from the cache: not even the YAML parser


class _DictStore:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.puts = 0

    def get(self, key: str) -> bytes | None:
        return self.blobs.get(key)

    def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        self.blobs[key] = data


def _hits(store: _DictStore) -> list[tuple[str, int]]:
    from oomwatch.engine.scanner import Scanner

    data = b"step 1\n[ 9.1] Out of memory: Killed process 4242 (python3) total-vm:1kB, anon-rss:2048kB\nKilled\n"
    result = Scanner(loader.load_rules(), backend="hyperscan", store=store).scan("t.log", [data])
    return [(e.kind, e.line.no) for e in result.events] + [("report", r.victim_pid or 0) for r in result.reports]


def test_the_compiled_prefilter_is_kept_and_found_again() -> None:
    pytest.importorskip("hyperscan")
    store = _DictStore()
    first = _hits(store)
    assert store.puts == 1 and len(store.blobs) == 1
    assert _hits(store) == first and store.puts == 1  # loaded, not compiled again
    (key,) = store.blobs
    store.blobs[key] = b"not a database"
    assert _hits(store) == first and store.puts == 2  # compiled again, and kept


def test_cache_store_files_are_private(cache: Path) -> None:
    store = rulecache.CacheStore(cache)
    store.put("hs-abc", b"data")
    assert store.get("hs-abc") == b"data"
    assert (cache / "hs-abc.db").stat().st_mode & 0o777 == 0o600
    (cache / "hs-abc.db").chmod(0o644 | 0o022)
    assert store.get("hs-abc") is None
    assert store.get("../etc/passwd") is None
