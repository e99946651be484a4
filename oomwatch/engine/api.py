"""The one road to a Diagnosis: rules, scanner and diagnosis loaded once, used by every front end.

``oomwatch diagnose`` (logs), ``oomwatch run`` (the command's output, its kernel reports, its
samples) and the agent's incidents (the kernel's report or what the agent saw, the job's output,
its history) all hand their evidence to :meth:`Engine.diagnose`; rules/verdicts.yaml and
rules/causes.yaml decide on every path, so the same evidence gives the same verdict, victim and
cause wherever it comes from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.errors import RulesError
from oomwatch.engine.grouping import Grouping, group_inputs
from oomwatch.engine.model import LiveEvidence, Observed, Program
from oomwatch.engine.prefilter import BlobStore
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.rules.ruleset import RuleSet
from oomwatch.engine.scanner import Scanner, ScanResult


class Engine:
    def __init__(self, rules: RuleSet, backend: str | None = None, store: BlobStore | None = None) -> None:
        self.rules = rules
        self.scanner = Scanner(rules, backend=backend, store=store)

    @classmethod
    def load(
        cls,
        rules_dirs: Iterable[Path] = (),
        backend: str | None = None,
        loader: Callable[[Iterable[Path]], RuleSet] = load_rules,
        store: BlobStore | None = None,
    ) -> Engine:
        """The built-in rules plus ``rules_dirs``; :class:`RulesError` if any does not load.
        ``loader`` builds the RuleSet and ``store`` keeps the prefilter's compiled database (the
        command line keeps both in a cache: oomwatch.rulecache)."""
        rules = loader(rules_dirs)
        if rules.errors:
            first = rules.errors[0]
            more = f" (and {len(rules.errors) - 1} more; run `oomwatch rules lint`)" if len(rules.errors) > 1 else ""
            raise RulesError(f"rules cannot be loaded: {first}{more}")
        return cls(rules, backend, store)

    def scan(
        self, name: str, data: bytes | Iterable[bytes], progress: Callable[[int], None] | None = None
    ) -> ScanResult:
        """One input: ``data`` is its bytes, or its chunks (a file read piece by piece)."""
        chunks = [data] if isinstance(data, bytes) else data
        return self.scanner.scan(name, chunks, progress=progress)

    def group(self, scans: Sequence[ScanResult]) -> Grouping:
        """Which inputs are about one failure (engine.grouping), each input's own verdict weighed."""
        if len(scans) <= 1:
            return Grouping(tuple(range(len(scans))))
        return group_inputs(scans, [diagnose([s], self.rules).verdict for s in scans])

    def diagnose(
        self,
        scans: Sequence[ScanResult],
        *,
        known: Mapping[int, tuple[str, int | None]] | None = None,
        live: LiveEvidence | None = None,
        observed: Observed | None = None,
        program: Program | None = None,
    ) -> Diagnosis:
        """All the evidence of one failure: scanned inputs, roles seen live, the live analyzers'
        facts, what the agent observed itself, and the code that ran."""
        return diagnose(scans, self.rules, known=known, live=live, observed=observed, program=program)
