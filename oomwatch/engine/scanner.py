"""Turn a stream of bytes into Events and kernel OOM reports, touching few lines.

The scanner receives raw chunks (the edge opens files; this module does no I/O). It keeps
original line numbers, bounds the length of any line (a 200 MB line costs one chunk of
memory, is cut at `max_line` bytes and counted as truncated), asks the prefilter where
anchors occur, and decodes, prefix-strips and parses only those lines. When a line opens
a kernel OOM report, every following line goes to the report assembler until it says
the report is over (task tables and Mem-Info lines carry no anchors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from oomwatch.engine.kernel_report import KERNEL_ANCHORS, KernelReportAssembler
from oomwatch.engine.loader import Fingerprint, RuleSet
from oomwatch.engine.model import Event, InputInfo, Line, OomReport
from oomwatch.engine.prefilter import make_prefilter
from oomwatch.engine.prefix import strip_prefix
from oomwatch.engine.text import clean_text, split_cr

MAX_LINE = 1 << 20  # bytes of one line that are looked at; the rest is dropped and said
MATCH_TIMEOUT = 0.25  # seconds one pattern may spend on one line
SAMPLE_LINES = 200  # leading lines inspected to tell what kind of log a file is


@dataclass
class ScanResult:
    file: str
    events: list[Event] = field(default_factory=list)
    reports: list[OomReport] = field(default_factory=list)
    info: InputInfo | None = None
    kernel_share: float = 0.0  # share of the sampled leading lines that came from the kernel
    notes: list[str] = field(default_factory=list)


class Scanner:
    def __init__(self, rules: RuleSet, backend: str | None = None, max_line: int = MAX_LINE):
        self.max_line = max_line
        anchors: dict[str, list[Fingerprint]] = {}
        for fp in rules.fingerprints:
            for anchor in fp.anchors:
                anchors.setdefault(anchor, []).append(fp)
        self._by_anchor = list(anchors.items())
        self._order = {fp.id: i for i, fp in enumerate(rules.fingerprints)}
        all_anchors = [a.encode() for a in anchors] + [a.encode() for a in KERNEL_ANCHORS]
        self.prefilter = make_prefilter(all_anchors, backend)

    def scan(
        self,
        file: str,
        chunks: Iterable[bytes],
        progress: Callable[[int], None] | None = None,
    ) -> ScanResult:
        state = _State(file, KernelReportAssembler())
        tail = b""  # the start of a line that continues in the next chunk
        skipping = False  # inside an over-long line, dropping bytes until its newline
        for chunk in chunks:
            state.nbytes += len(chunk)
            if progress is not None:
                progress(len(chunk))
            if not state.sampled:
                state.sample(chunk)
            start = 0
            if skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    continue
                start, skipping = nl + 1, False
                state.lineno += 1
            first = chunk.find(b"\n", start)
            if first < 0:
                tail += chunk[start:]
            else:
                if tail:  # finish the line begun in the previous chunk (small: at most max_line)
                    joined = tail + chunk[start : first + 1]
                    self._region(joined, 0, len(joined), state)
                    start = first + 1
                cut = chunk.rfind(b"\n")
                if cut >= start:
                    self._region(chunk, start, cut + 1, state)  # in place: no copy of the chunk
                tail = chunk[cut + 1 :]
            if len(tail) > self.max_line:
                self._line(tail, state)
                tail = b""
                skipping = True
        if tail:
            self._line(tail, state)
            state.lineno += 1
        elif skipping:
            state.lineno += 1
        result = ScanResult(file, state.events, state.assembler.finish())
        result.kernel_share = state.kernel_share
        result.notes = state.notes
        result.info = InputInfo(file, state.lineno - 1, state.nbytes, state.truncated, tuple(state.notes))
        return result

    def _region(self, data: bytes, begin: int, stop: int, state: _State) -> None:
        """Process the whole lines in data[begin:stop] (stop is just after a newline)."""
        hits = [h for h in self.prefilter.hits(data) if begin <= h < stop]
        asm = state.assembler
        pos, hi = begin, 0
        while pos < stop:
            if asm.wants_more():
                end = data.index(b"\n", pos, stop)
                self._line(data[pos:end], state, block=True)
                state.lineno += 1
                pos = end + 1
                continue
            while hi < len(hits) and hits[hi] < pos:
                hi += 1
            if hi == len(hits):
                state.lineno += data.count(b"\n", pos, stop)
                return
            start = data.rfind(b"\n", pos, hits[hi]) + 1 or pos
            state.lineno += data.count(b"\n", pos, start)
            end = data.index(b"\n", hits[hi], stop)
            self._line(data[start:end], state)
            state.lineno += 1
            pos = end + 1

    def _line(self, raw: bytes, state: _State, block: bool = False) -> None:
        truncated = len(raw) > self.max_line
        if truncated:
            raw = raw[: self.max_line]
            state.truncated += 1
            if state.truncated == 1:
                state.notes.append(
                    f"line {state.lineno} is longer than {self.max_line} bytes: only its first part was read"
                )
        for segment in split_cr(clean_text(raw)):
            pre = strip_prefix(segment)
            line = Line(state.file, state.lineno, pre.time, pre.text, truncated, pre.kernel, pre.host)
            if block or any(a in pre.text for a in KERNEL_ANCHORS):
                state.assembler.feed(line)
            self._match(line, state)

    def _match(self, line: Line, state: _State) -> None:
        text = line.text
        candidates: dict[str, Fingerprint] = {}
        for anchor, fps in self._by_anchor:
            if anchor in text:
                for fp in fps:
                    candidates[fp.id] = fp
        best: dict[tuple[str, str], Event] = {}  # one event per kind (and hint) per line
        for fp in sorted(candidates.values(), key=lambda f: self._order[f.id]):
            try:
                m = fp.pattern.search(text, timeout=MATCH_TIMEOUT)
            except TimeoutError:
                state.notes.append(f"line {line.no}: rule {fp.name} gave up (match took too long)")
                continue
            if m is not None:
                fields = {**fp.fields, **{k: v for k, v in m.groupdict().items() if v is not None}}
                key = (fp.event, fields.get("hint", ""))
                # where several rules of a kind match a line, the one that says most wins
                if key not in best or len(fields) > len(best[key].fields):
                    best[key] = Event(fp.event, fp.id, line, fields)
        state.events.extend(best.values())


class _State:
    def __init__(self, file: str, assembler: KernelReportAssembler) -> None:
        self.file = file
        self.assembler = assembler
        self.events: list[Event] = []
        self.lineno = 1
        self.nbytes = 0
        self.truncated = 0
        self.notes: list[str] = []
        self.sampled = False
        self.kernel_share = 0.0

    def sample(self, chunk: bytes) -> None:
        """Look at the first lines to tell whether this input is a kernel log."""
        self.sampled = True
        lines = [ln for ln in chunk[: 1 << 16].split(b"\n")[:SAMPLE_LINES] if ln.strip()]
        if not lines:
            return
        kernel = sum(1 for ln in lines if strip_prefix(clean_text(ln)).kernel)
        self.kernel_share = kernel / len(lines)
