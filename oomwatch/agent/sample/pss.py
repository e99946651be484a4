"""The CPU budget for ``smaps_rollup`` reads (PSS, USS, SwapPss).

Reading ``/proc/PID/smaps_rollup`` makes the kernel walk the process's page tables: ~1 ms for a
50 MB process, ~50 ms for 4 GB (measured on the issue's machine), and a 200 GB process can stall
a scrape for seconds. So the sampler never reads it for everyone every tick; this module decides
whom to read, with a token bucket:

- tokens accrue at ``fraction`` CPU-seconds per second (0.05: 5% of one core), up to ``burst``
  seconds' worth; a read spends its measured cost; a read that costs more than is left is paid as
  debt, which later reads wait out;
- candidates are taken by priority (DataLoader workers and ranks first: their USS is what tells
  copy-on-write defeat and per-rank duplication apart; then managers; then launchers and other job
  members; then processes outside jobs), and, within a priority, the stalest first (never read
  comes first of all);
- a process is read at most once per ``cost / (fraction * share)`` seconds: one process gets at most
  ``share`` of the budget on average, so huge processes are sampled less often, small ones every
  tick.

Pure: the clock is an argument and costs are reported back by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PRIORITY = {"dataloader_worker": 0, "rank": 0, "manager": 1, "launcher": 2, "unknown": 2}
OUTSIDE_JOBS = 3
DEFAULT_COST = 0.001  # seconds, before anything was measured


@dataclass(frozen=True)
class Candidate:
    pid: int
    priority: int  # 0 first
    rss: int | None
    last_read: float | None  # clock time of the last read; None = never
    cost: float | None  # seconds the last read took; None = never read


@dataclass
class SmapsBudget:
    fraction: float = 0.05
    burst: float = 5.0  # seconds of accrual the bucket holds
    share: float = 0.1
    tokens: float = 0.0
    refilled_at: float | None = None
    seconds_per_byte: float | None = None  # learned: cost / RSS, to guess a first read's cost
    spent_total: float = 0.0

    @property
    def capacity(self) -> float:
        return self.fraction * self.burst

    def refill(self, now: float) -> None:
        if self.refilled_at is None:
            self.tokens = self.capacity  # start full: the first tick reads what it can
        else:
            self.tokens = min(self.capacity, self.tokens + self.fraction * max(0.0, now - self.refilled_at))
        self.refilled_at = now

    def estimate(self, c: Candidate) -> float:
        if c.cost is not None:
            return c.cost
        if self.seconds_per_byte is not None and c.rss:
            return self.seconds_per_byte * c.rss
        return DEFAULT_COST

    def min_interval(self, c: Candidate) -> float:
        if self.fraction <= 0:
            return float("inf")
        return self.estimate(c) / (self.fraction * self.share)

    def order(self, now: float, candidates: Iterable[Candidate]) -> list[Candidate]:
        """The candidates due for a read, in the order to read them."""
        due = [c for c in candidates if c.last_read is None or now - c.last_read >= self.min_interval(c)]
        due.sort(key=lambda c: (c.priority, -1.0 if c.last_read is None else c.last_read, c.pid))
        return due

    def affordable(self, c: Candidate) -> bool:
        """Whether to read ``c`` now: the tokens cover its estimated cost, or the bucket is full and it
        costs more than a full bucket (a huge process: read it, and pay the debt afterwards)."""
        if self.fraction <= 0 or self.tokens <= 0:
            return False
        cost = self.estimate(c)
        return cost <= self.tokens or (cost > self.capacity and self.tokens >= self.capacity)

    def spend(self, seconds: float, rss: int | None = None) -> None:
        self.tokens -= seconds
        self.spent_total += seconds
        if rss and rss > 0:
            per_byte = seconds / rss
            prev = self.seconds_per_byte
            self.seconds_per_byte = per_byte if prev is None else 0.8 * prev + 0.2 * per_byte
