"""Find lines worth parsing: one pass over bytes for many literal anchors.

A training log is mostly progress bars and loss lines; only a handful of lines carry a
fingerprint. So the scanner never looks at most lines: a multi-literal matcher reports
where anchors occur in a whole chunk, and only those lines are decoded and parsed.

Backends, fastest first (measured on a 64 MiB slice of a synthetic training log on this
machine kind, 28 anchors: Hyperscan 0.44 s/GB, google-re2 alternation 2.1 s/GB, stdlib
`re` alternation 24 s/GB, against `grep -F -f` 2.0 s/GB). All find the same lines (a test
compares them). The scanner tries on a line only the rules of the anchors found in it:
Hyperscan names the anchor of every hit, RE2's Set names those of one line in one pass,
and with stdlib `re` the scanner tries every anchor (the agent's few lines).
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Sequence
from types import ModuleType
from typing import Protocol

_loaded: dict[str, ModuleType | None] = {}


def _optional(name: str) -> ModuleType | None:
    """Import a backend on first use only: the agent uses the ``re`` backend and should not map
    Hyperscan's and RE2's libraries into its memory."""
    if name not in _loaded:
        try:
            _loaded[name] = importlib.import_module(name)
        except ImportError:  # pragma: no cover - depends on the platform
            _loaded[name] = None
    return _loaded[name]


ID_BITS = 16  # a hit is (offset << ID_BITS) | id: one int, sorted by offset
ID_MASK = (1 << ID_BITS) - 1


class BlobStore(Protocol):
    """Where a compiled database may be kept between runs (the caller's; the engine does no I/O)."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


class Prefilter(Protocol):
    name: str
    # hits() names every anchor of every line it reports (Hyperscan); otherwise ids() says
    exact: bool

    def hits(self, data: bytes) -> list[int]:
        """Sorted hits in `data`, each ``(offset << ID_BITS) | id``: the offset of any byte inside
        the match, the id of the anchor (its index in the anchors, then the patterns) where
        ``exact``, else of some anchor or pattern."""
        ...

    def ids(self, line: bytes) -> frozenset[int]:
        """The ids of every anchor and pattern that occurs in one line (none where ``exact``
        backends are used: their hits say it)."""
        ...


class _HyperscanPrefilter:
    name = "hyperscan"
    exact = True

    def __init__(
        self, anchors: Sequence[bytes], patterns: Sequence[bytes] = (), store: BlobStore | None = None
    ) -> None:
        hs = _optional("hyperscan")
        assert hs is not None
        exprs = [re.escape(a) for a in anchors] + list(patterns)
        self._all = frozenset(range(len(exprs)))
        # compiling takes ~50 ms; a database compiled before for the same expressions is loaded in
        # microseconds (the store's key names the expressions and Hyperscan's version; a database
        # that does not load or scan here, as one built on another CPU, is compiled again)
        key = "hs-" + hashlib.sha256(b"\0".join([str(getattr(hs, "__version__", "")).encode(), *exprs])).hexdigest()
        blob = store.get(key) if store is not None else None
        if blob is not None:
            try:
                self._db = hs.loadb(blob, hs.HS_MODE_BLOCK)
                self._db.scratch = hs.Scratch(self._db)
                self._db.scan(b"", match_event_handler=lambda *_: None)
                return
            except Exception:  # noqa: BLE001 - not a usable database: compile it
                pass
        self._db = hs.Database(mode=hs.HS_MODE_BLOCK)
        self._db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs))
        if store is not None:
            store.put(key, hs.dumpb(self._db))

    def hits(self, data: bytes) -> list[int]:
        found: list[int] = []
        add = found.append

        def on_match(id_: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            add(((end - 1) << ID_BITS) | id_)

        self._db.scan(data, match_event_handler=on_match)
        found.sort()
        return found

    def ids(self, line: bytes) -> frozenset[int]:
        return self._all


class _RegexPrefilter:
    exact = False

    def __init__(self, anchors: Sequence[bytes], module: object, name: str, patterns: Sequence[bytes] = ()) -> None:
        self.name = name
        # longest first, so an alternation never stops at a shorter anchor's prefix
        literal = [re.escape(a) for a in sorted(set(anchors), key=len, reverse=True)]
        pattern = b"|".join(literal + [b"(?:" + p + b")" for p in patterns])
        self._re = module.compile(pattern)  # type: ignore[attr-defined]
        self._all = frozenset(range(len(anchors) + len(patterns)))
        self._set = None
        if name == "re2":  # RE2::Set names every expression that occurs in a line, in one pass
            exprs = [re.escape(a) for a in anchors] + list(patterns)
            self._set = module.Set.SearchSet()  # type: ignore[attr-defined]
            for expr in exprs:
                self._set.Add(expr)
            self._set.Compile()

    def hits(self, data: bytes) -> list[int]:
        return [m.start() << ID_BITS for m in self._re.finditer(data)]

    def ids(self, line: bytes) -> frozenset[int]:
        if self._set is None:
            return self._all  # stdlib re: the caller tries every anchor on the line
        return frozenset(self._set.Match(line) or ())


def available_backends() -> list[str]:
    names = []
    if _optional("hyperscan") is not None:  # Linux x86_64 wheels
        names.append("hyperscan")
    if _optional("re2") is not None:  # google-re2: wheels for most platforms
        names.append("re2")
    names.append("re")
    return names


def make_prefilter(
    anchors: Sequence[bytes],
    backend: str | None = None,
    patterns: Sequence[bytes] = (),
    store: BlobStore | None = None,
) -> Prefilter:
    """The fastest available backend, or the one named. `patterns` are a few regular expressions
    (in the syntax all three backends share: classes, `\\d`, `+`) for lines no literal can find.
    `store` keeps Hyperscan's compiled database between runs."""
    if not anchors:
        raise ValueError("a prefilter needs at least one anchor")
    if len(anchors) + len(patterns) > ID_MASK:
        raise ValueError(f"a prefilter takes at most {ID_MASK} anchors and patterns")
    backend = backend or available_backends()[0]
    if backend == "hyperscan" and _optional("hyperscan") is not None:
        return _HyperscanPrefilter(anchors, patterns, store)
    re2 = _optional("re2") if backend == "re2" else None
    if re2 is not None:
        return _RegexPrefilter(anchors, re2, "re2", patterns)
    if backend == "re":
        return _RegexPrefilter(anchors, re, "re", patterns)
    raise ValueError(f"prefilter backend {backend!r} is not available here")
