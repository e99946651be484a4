"""Turn a stream of bytes into Events and kernel OOM reports, touching few lines.

The scanner receives raw chunks (the edge opens files; this module does no I/O). It keeps
original line numbers, bounds the length of any line (a 200 MB line costs one chunk of
memory, is cut at `max_line` bytes and counted as truncated), asks the prefilter where
anchors occur, and decodes, prefix-strips and parses only those lines. When a line opens
a kernel OOM report, every following line goes to the report assembler until it says
the report is over (task tables and Mem-Info lines carry no anchors).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from oomwatch.engine.fields import match_fields
from oomwatch.engine.kept_events import KeptEvents
from oomwatch.engine.kernel_body import TASK_HEADER_PATTERN, TASK_ROW_PATTERN, is_table_line
from oomwatch.engine.kernel_lines import unquote
from oomwatch.engine.kernel_report import KEEP_FIRST, KERNEL_ANCHORS, KernelReportAssembler
from oomwatch.engine.model import Event, InputInfo, Line, OomReport
from oomwatch.engine.prefilter import ID_BITS, ID_MASK, BlobStore, make_prefilter
from oomwatch.engine.prefix import Prefixed, strip_prefix
from oomwatch.engine.rules.fingerprints import Fingerprint
from oomwatch.engine.rules.ruleset import RuleSet
from oomwatch.engine.text import clean_text, split_cr

MAX_LINE = 1 << 20  # bytes of one line that are looked at; the rest is dropped and said
WINDOW = 64 << 10  # bytes kept of what a file printed last before its failure, and at its end
MATCH_TIMEOUT = 0.25  # seconds one pattern may spend on one line
SAMPLE_LINES = 200  # leading lines inspected to tell what kind of log a file is
MATCH_CACHE = 4096  # distinct line texts whose rule matches are remembered (a repeated line is matched once)
# report lines (task tables, Mem-Info) read in full per input: ten reports of the biggest hosts
MAX_REPORT_LINES = 500_000
MAX_CACHED_LINE = 4096  # bytes (characters) of a line that may be remembered decoded and matched
MAX_GAVE_UP_NOTES = 5  # lines whose "rule gave up" is said one by one; the rest are counted in one note


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
    def __init__(
        self, rules: RuleSet, backend: str | None = None, max_line: int = MAX_LINE, store: BlobStore | None = None
    ):
        self.max_line = max_line
        anchors: dict[str, list[Fingerprint]] = {}
        for fp in rules.fingerprints:
            for anchor in fp.anchors:
                anchors.setdefault(anchor, []).append(fp)
        # the prefilter's ids: the rules' anchors (each with its rules), then the kernel's, then the patterns
        self._by_anchor = list(anchors.items())
        self._order = {fp.id: i for i, fp in enumerate(rules.fingerprints)}
        self._marks = frozenset(rules.kill_marks)
        self._kernel_ids = {len(anchors) + i: a for i, a in enumerate(KERNEL_ANCHORS)}
        all_anchors = [a.encode() for a in anchors] + [a.encode() for a in KERNEL_ANCHORS]
        self.prefilter = make_prefilter(all_anchors, backend, (TASK_ROW_PATTERN, TASK_HEADER_PATTERN), store)
        self._all_ids = frozenset(range(len(all_anchors) + 2))

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
        if state.gave_up > MAX_GAVE_UP_NOTES:
            state.notes.append(f"{state.gave_up - MAX_GAVE_UP_NOTES} more rule matches gave up (too long)")
        if state.report_lines >= MAX_REPORT_LINES:
            state.notes.append(
                f"more than {MAX_REPORT_LINES} lines of kernel OOM reports in this input: past them only their "
                "kill, header and summary lines were read (no task tables)"
            )
        reports = state.assembler.finish()
        if state.assembler.dropped:
            state.notes.append(
                f"{state.assembler.dropped + len(reports)} kernel OOM reports in this input: only the first "
                f"{KEEP_FIRST} and the latest {len(reports) - KEEP_FIRST} were kept"
            )
        events = state.kept.all(state.notes)
        result = ScanResult(file, events, reports)
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
        every = self.prefilter.hits(data)
        # hits are (offset << ID_BITS) | id: the region's are a slice, found by bisection
        hits = every[bisect_left(every, begin << ID_BITS) : bisect_left(every, stop << ID_BITS)]
        asm = state.assembler
        pos, hi, nhits = begin, 0, len(hits)
        while pos < stop:
            if asm.wants_more() and state.report_lines < MAX_REPORT_LINES:
                state.report_lines += 1
                end = data.index(b"\n", pos, stop)
                while hi < nhits and hits[hi] >> ID_BITS < pos:
                    hi += 1
                ids, hi = self._ids(data, pos, end, hits, hi)
                # a report line without an anchor (most of a task table) can match no rule
                self._line(data[pos:end], state, ids, block=True, anchored=bool(ids))
                if state.mark_seen and state.before_failure is None:
                    state.keep_before(at + pos)
                state.lineno += 1
                pos = end + 1
                continue
            while hi < nhits and hits[hi] >> ID_BITS < pos:
                hi += 1
            if hi == nhits:
                state.lineno += data.count(b"\n", pos, stop)
                return
            first = hits[hi] >> ID_BITS
            start = data.rfind(b"\n", pos, first) + 1 or pos
            state.lineno += data.count(b"\n", pos, start)
            end = data.index(b"\n", first, stop)
            ids, hi = self._ids(data, start, end, hits, hi)
            self._line(data[start:end], state, ids)
            if state.mark_seen and state.before_failure is None:
                state.keep_before(at + start)
            state.lineno += 1
            pos = end + 1

    def _ids(self, data: bytes, start: int, end: int, hits: list[int], hi: int) -> tuple[frozenset[int], int]:
        """The prefilter's ids found in the line data[start:end] (its hits from ``hits[hi]`` on), and the
        index of the first hit after it. A line whose bytes decoding may change (escapes, NULs) gets all."""
        n = len(hits)
        if hi == n or hits[hi] >> ID_BITS >= end:
            return frozenset(), hi
        stop = end << ID_BITS
        j = hi
        while j < n and hits[j] < stop:
            j += 1
        if b"\x1b" in data[start:end] or b"\x00" in data[start:end] or b"\xc2\x9b" in data[start:end]:
            return self._all_ids, j
        if not self.prefilter.exact:
            return self.prefilter.ids(data[start:end]), j
        return frozenset([h & ID_MASK for h in hits[hi:j]]), j

    def _line(
        self, raw: bytes, state: _State, ids: frozenset[int] | None = None, block: bool = False, anchored: bool = True
    ) -> None:
        """One line; ``ids`` are the prefilter's ids found in it (None: any)."""
        if ids is None:
            ids = self._all_ids
        truncated = len(raw) > self.max_line
        if truncated:
            raw = raw[: self.max_line]
            state.truncated += 1
            if state.truncated == 1:
                state.notes.append(
                    f"line {state.lineno} is longer than {self.max_line} bytes: only its first part was read"
                )
        for pre, kernel_anchor in state.segments(raw, [a for i, a in self._kernel_ids.items() if i in ids]):
            line = Line(state.file, state.lineno, pre.time, pre.text, truncated, pre.kernel, pre.host)
            if block or kernel_anchor:
                state.assembler.feed(line)
            if anchored:
                self._match(line, state, ids)

    def _match(self, line: Line, state: _State, ids: frozenset[int]) -> None:
        text = line.text
        found = state.matched.get(text)
        if found is None:
            found = self._rules_on(text, ids)
            if len(text) <= MAX_CACHED_LINE:  # a log repeats its lines (floods, retries): remember a few
                if len(state.matched) >= MATCH_CACHE:
                    state.matched.clear()
                state.matched[text] = found
        matches, gave_up = found
        for fp, fields in matches:
            state.kept.add(Event(fp.event, fp.id, line, dict(fields)))
            state.mark_seen = state.mark_seen or fp.event in state.marks
        for name in gave_up:
            state.gave_up += 1
            if state.gave_up <= MAX_GAVE_UP_NOTES:
                state.notes.append(f"line {line.no}: rule {name} gave up (match took too long)")

    def _rules_on(
        self, text: str, ids: frozenset[int]
    ) -> tuple[tuple[tuple[Fingerprint, dict[str, str]], ...], tuple[str, ...]]:
        """The rules that match ``text`` (one per kind and hint: the one that says most), and the names of
        those that gave up on it. Only the anchors of ``ids`` (those the prefilter found in the line's
        bytes) are tried: an anchor in the text is in the bytes (a line decoding changes gets all ids)."""
        candidates: dict[str, Fingerprint] = {}
        by_anchor, n = self._by_anchor, len(self._by_anchor)
        for i in ids:
            if i >= n:  # a kernel anchor or a pattern: no rule's
                continue
            anchor, fps = by_anchor[i]
            if anchor in text:
                for fp in fps:
                    candidates[fp.id] = fp
        best: dict[tuple[str, str], tuple[Fingerprint, dict[str, str]]] = {}
        gave_up: list[str] = []
        for fp in sorted(candidates.values(), key=lambda f: self._order[f.id]):
            try:
                m = fp.pattern.search(text, timeout=MATCH_TIMEOUT)
            except TimeoutError:
                gave_up.append(fp.name)
                continue
            if m is not None:
                fields = match_fields(fp.fields, m.groupdict())
                key = (fp.event, fields.get("hint", ""))
                # where several rules of a kind match a line, the one that says most wins
                if key not in best or len(fields) > len(best[key][1]):
                    best[key] = (fp, fields)
        return tuple(best.values()), tuple(gave_up)


def _bare_row(text: str) -> bool:
    """A kernel task table's row or re-spaced header: no anchor is in it."""
    return is_table_line(unquote(text.strip()))


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
        self.kept = KeptEvents()  # the events, bounded
        self.matched: dict[str, tuple[tuple[tuple[Fingerprint, dict[str, str]], ...], tuple[str, ...]]] = {}
        self.gave_up = 0  # rule matches that took too long
        self.decoded: dict[bytes, tuple[tuple[Prefixed, bool], ...]] = {}
        self.report_lines = 0  # lines given to the report assembler because a report was open
        self.lineno = 1
        self.nbytes = 0
        self.truncated = 0
        self.notes: list[str] = []
        self.sampled = False
        self.kernel_share = 0.0

    def segments(self, raw: bytes, kernel: Sequence[str] = KERNEL_ANCHORS) -> tuple[tuple[Prefixed, bool], ...]:
        """The segments of one line's bytes, prefix stripped, each with whether it holds a kernel anchor
        (of ``kernel``: those the prefilter found in the bytes); a line seen a moment ago (a flood, a retry
        loop) is not decoded again."""
        found = self.decoded.get(raw)
        if found is None:
            found = tuple(
                (pre, any(a in pre.text for a in kernel) or _bare_row(pre.text))
                for pre in map(strip_prefix, split_cr(clean_text(raw)))
            )
            if len(raw) <= MAX_CACHED_LINE:
                if len(self.decoded) >= MATCH_CACHE:
                    self.decoded.clear()
                self.decoded[raw] = found
        return found

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
