"""The rules, built once: a cache of the loaded RuleSet keyed by everything that built it.

Loading the rules (reading ~25 YAML files, checking every rule, compiling ~280 regexes, checking
each for catastrophic backtracking) costs more than reading a typical log. The result is kept in
the user's cache directory (``$OOMWATCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/oomwatch``, else
``~/.cache/oomwatch``) as a pickle named by a SHA-256 over:

* oomwatch's version, the Python version and the version of ``regex`` (its compiled patterns are
  pickled as they are);
* the source of every module of ``oomwatch.engine`` and its subpackages (the classes pickled, and
  the code that checks the rules);
* every rule file of the built-in rules and of each ``--rules`` directory: its path, its bytes.

Any change to any of them is another name, so a stale cache is never read; a new build replaces the
older files. Beside it, Hyperscan's compiled database of the prefilter's anchors (``hs-<SHA-256 of
its expressions and Hyperscan's version>.db``, CacheStore): compiling it costs ~50 ms, loading it
microseconds; one that does not load or scan on this machine is compiled again. The cache is the
user's own: a file is read only when it is a regular file owned by this user and writable by nobody
else, in a directory of the same kind. Anything odd (no home, a read-only disk, a file that does not
unpickle) makes it build the rules as if there were no cache. ``OOMWATCH_NO_CACHE=1`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from oomwatch import __version__
from oomwatch.engine.rules.loader import builtin_rules_dir, load_rules
from oomwatch.engine.rules.ruleset import RuleSet

KEEP = 4  # cache files kept: the newest builds (other --rules sets, other versions)
_PREFIX = "rules-"
_SUFFIX = ".pickle"  # and the prefilter's databases: hs-<key>.db (CacheStore)
_ENGINE = Path(__file__).resolve().parent / "engine"


def cache_dir() -> Path | None:
    """Where the cache lives, or None when no place can be named."""
    explicit = os.environ.get("OOMWATCH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "oomwatch"
    home = os.environ.get("HOME")
    return Path(home) / ".cache" / "oomwatch" if home else None


def _directory() -> Path | None:
    """The cache's directory, or None when it is off (OOMWATCH_NO_CACHE) or has no place."""
    return None if os.environ.get("OOMWATCH_NO_CACHE") else cache_dir()


def _rule_files(directory: Path) -> list[Path]:
    files = [directory / n for n in ("events.yaml", "verdicts.yaml", "causes.yaml", "activities.yaml", "code.yaml")]
    return [f for f in files if f.is_file()] + sorted(directory.glob("fingerprints/*.yaml"))


def rules_key(extra_dirs: Iterable[Path] = ()) -> str:
    """The SHA-256 (hex) of everything a RuleSet is built from."""
    import regex

    h = hashlib.sha256()
    for part in (__version__, sys.version, regex.__version__):
        h.update(part.encode() + b"\0")
    for source in sorted(_ENGINE.rglob("*.py")):
        h.update(source.relative_to(_ENGINE).as_posix().encode() + b"\0" + source.read_bytes() + b"\0")
    for directory in (builtin_rules_dir(), *extra_dirs):
        directory = Path(directory).resolve()
        h.update(b"dir\0" + str(directory).encode() + b"\0")
        for f in _rule_files(directory):
            h.update(str(f.relative_to(directory)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _private(st: os.stat_result, kind: int) -> bool:
    """Owned by this user, of the kind asked, and not writable by group or others."""
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _read_bytes(path: Path) -> bytes | None:
    """The file's bytes when it and its directory are this user's own and writable by nobody else."""
    try:
        if not _private(os.stat(path.parent), stat.S_IFDIR):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read() if _private(os.fstat(fd), stat.S_IFREG) else None
        except OSError:
            return None


def _read(path: Path) -> RuleSet | None:
    data = _read_bytes(path)
    if data is None:
        return None
    try:
        rules = pickle.loads(data)
    except Exception:  # noqa: BLE001 - a broken cache file is no cache
        return None
    return rules if isinstance(rules, RuleSet) and not rules.errors else None


def _write_bytes(path: Path, data: bytes) -> None:
    """Write atomically (a temporary file renamed), mode 0600, in a private directory; keep the
    KEEP newest files of its kind. Any failure leaves no file and is no error."""
    directory = path.parent
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(os.stat(directory), stat.S_IFDIR):
            return
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(directory, path)
    except OSError:
        return


def _write(path: Path, rules: RuleSet) -> None:
    try:
        data = pickle.dumps(rules, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, RecursionError, TypeError):
        return  # no cache this time: the rules were built all the same
    _write_bytes(path, data)


def _prune(directory: Path, newest: Path) -> None:
    """Keep the KEEP newest files of the newest's kind (its name up to the first `-`)."""
    kind = newest.name.split("-", 1)[0] + "-"
    found = []
    for p in directory.glob(f"{kind}*"):
        try:
            found.append((p.stat().st_mtime, p))
        except OSError:
            continue
    found.sort(reverse=True)
    for _, p in found[KEEP:]:
        if p != newest:
            with contextlib.suppress(OSError):
                p.unlink()


class CacheStore:
    """The prefilter's compiled database (engine.prefilter.BlobStore) kept beside the rules."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def get(self, key: str) -> bytes | None:
        return _read_bytes(self.directory / f"{key}.db") if key.isascii() and key.replace("-", "").isalnum() else None

    def put(self, key: str, data: bytes) -> None:
        if key.isascii() and key.replace("-", "").isalnum():
            _write_bytes(self.directory / f"{key}.db", data)


def cache_store() -> CacheStore | None:
    """The store of compiled databases, or None when the cache is off or has no place."""
    directory = _directory()
    return CacheStore(directory) if directory is not None else None


def load_rules_cached(extra_dirs: Iterable[Path] = ()) -> RuleSet:
    """The same RuleSet as `load_rules(extra_dirs)`, from the cache when it holds this build."""
    extra = tuple(Path(d) for d in extra_dirs)
    directory = _directory()
    if directory is None:
        return load_rules(extra)
    try:
        key = rules_key(extra)
    except (OSError, ValueError):  # a rule file that cannot be read: the loader says which
        return load_rules(extra)
    path = directory / f"{_PREFIX}{key}{_SUFFIX}"
    cached = _read(path)
    if cached is not None:
        return cached
    rules = load_rules(extra)
    if not rules.errors:
        _write(path, rules)
    return rules
