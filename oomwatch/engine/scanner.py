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
WINDOW = 64 << 10  # bytes kept of what a file printed last before its failure, and at its end
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
    # the lines just before the first failure line (a kill_marks event, rules/activities.yaml), and the
    # file's last lines: what each process was doing when it died (engine.activity)
    before_failure: tuple[Line, ...] | None = None
    last_lines: tuple[Line, ...] = ()
    whole_window: bool = False  # the window above (before_failure, else last_lines) starts at the input's start


class Scanner:
    def __init__(self, rules: RuleSet, backend: str | None = None, max_line: int = MAX_LINE):
        self.max_line = max_line
        anchors: dict[str, list[Fingerprint]] = {}
        for fp in rules.fingerprints:
            for anchor in fp.anchors:
                anchors.setdefault(anchor, []).append(fp)
        self._by_anchor = list(anchors.items())
        self._order = {fp.id: i for i, fp in enumerate(rules.fingerprints)}
        self._marks = frozenset(rules.kill_marks)
        all_anchors = [a.encode() for a in anchors] + [a.encode() for a in KERNEL_ANCHORS]
        self.prefilter = make_prefilter(all_anchors, backend)

    def scan(
        self,
        file: str,
        chunks: Iterable[bytes],
        progress: Callable[[int], None] | None = None,
    ) -> ScanResult:
        state = _State(file, KernelReportAssembler(), self._marks)
        tail = b""  # the start of a line that continues in the next chunk
        skipping = False  # inside an over-long line, dropping bytes until its newline
        for chunk in chunks:
            state.chunk, state.chunk_at = chunk, state.nbytes
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
                    self._region(joined, 0, len(joined), state, state.chunk_at + start - len(tail))
                    start = first + 1
                cut = chunk.rfind(b"\n")
                if cut >= start:
                    self._region(chunk, start, cut + 1, state, state.chunk_at)  # in place: no copy of the chunk
                tail = chunk[cut + 1 :]
            if len(tail) > self.max_line:
                self._line(tail, state)
                tail = b""
                skipping = True
            state.history = (state.history + chunk[-WINDOW:])[-WINDOW:]
        if tail:
            self._line(tail, state)
            state.lineno += 1
        elif skipping:
            state.lineno += 1
        result = ScanResult(file, state.events, state.assembler.finish())
        result.kernel_share = state.kernel_share
        result.notes = state.notes
        result.before_failure = state.before_failure
        result.last_lines = _window_lines(file, state.history, state.lineno - 1, state.nbytes <= WINDOW)
        result.whole_window = state.before_whole if state.before_failure is not None else state.nbytes <= WINDOW
        result.info = InputInfo(file, state.lineno - 1, state.nbytes, state.truncated, tuple(state.notes))
        return result

    def _region(self, data: bytes, begin: int, stop: int, state: _State, at: int) -> None:
        """Process the whole lines in data[begin:stop] (stop is just after a newline); ``at`` is the
        offset of data[0] in the whole input."""
        hits = [h for h in self.prefilter.hits(data) if begin <= h < stop]
        asm = state.assembler
        pos, hi = begin, 0
        while pos < stop:
            if asm.wants_more():
                end = data.index(b"\n", pos, stop)
                self._line(data[pos:end], state, block=True)
                if state.mark_seen and state.before_failure is None:
                    state.keep_before(at + pos)
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
            if state.mark_seen and state.before_failure is None:
                state.keep_before(at + start)
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
                    state.mark_seen = state.mark_seen or fp.event in state.marks
        state.events.extend(best.values())


def _window_lines(file: str, data: bytes, last_no: int, from_start: bool) -> tuple[Line, ...]:
    """The whole lines of ``data`` (the end of what was read), the last numbered ``last_no``; a line
    cut at the start is dropped (unless ``data`` starts at the input's start). A tqdm bar's redraws
    count as its last one."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    if not from_start:
        parts = parts[1:]  # the first may be cut: only whole lines
    out = []
    first_no = last_no - len(parts) + 1
    for i, raw in enumerate(parts):
        segments = split_cr(clean_text(raw))
        if not segments:
            continue
        pre = strip_prefix(segments[-1])
        if pre.text.strip():
            out.append(Line(file, first_no + i, pre.time, pre.text, False, pre.kernel, pre.host))
    return tuple(out)


class _State:
    def __init__(self, file: str, assembler: KernelReportAssembler, marks: frozenset[str] = frozenset()) -> None:
        self.file = file
        self.assembler = assembler
        self.marks = marks
        self.mark_seen = False  # a kill_marks event has been seen
        self.before_failure: tuple[Line, ...] | None = None
        self.before_whole = False
        self.history = b""  # the last WINDOW bytes before the current chunk
        self.chunk = b""
        self.chunk_at = 0  # offset of the current chunk in the input
        self.events: list[Event] = []
        self.lineno = 1
        self.nbytes = 0
        self.truncated = 0
        self.notes: list[str] = []
        self.sampled = False
        self.kernel_share = 0.0

    def keep_before(self, offset: int) -> None:
        """The lines before the failure line that starts at ``offset`` of the input (the current line)."""
        have = self.history + self.chunk
        have_at = self.chunk_at - len(self.history)
        window = have[max(0, offset - WINDOW - have_at) : max(0, offset - have_at)]
        self.before_whole = offset <= WINDOW
        self.before_failure = _window_lines(self.file, window, self.lineno - 1, self.before_whole)

    def sample(self, chunk: bytes) -> None:
        """Look at the first lines to tell whether this input is a kernel log."""
        self.sampled = True
        lines = [ln for ln in chunk[: 1 << 16].split(b"\n")[:SAMPLE_LINES] if ln.strip()]
        if not lines:
            return
        kernel = sum(1 for ln in lines if strip_prefix(clean_text(ln)).kernel)
        self.kernel_share = kernel / len(lines)
