"""The smaps_rollup budget: priorities, staleness, huge processes less often, debt."""

from __future__ import annotations

import pytest

from oomwatch.agent.sample.pss import Candidate, SmapsBudget

MB = 1 << 20


def C(pid, prio, last=None, cost=None, rss=50 * MB):  # noqa: N802 - reads like a table row
    return Candidate(pid, prio, rss, last, cost)


def test_workers_and_ranks_first_then_stalest_never_read_first_of_all():
    b = SmapsBudget(fraction=0.05)
    order = b.order(100.0, [C(1, 3), C(2, 0, last=90.0, cost=0.001), C(3, 0), C(4, 1), C(5, 0, last=80.0, cost=0.001)])
    assert [c.pid for c in order] == [3, 5, 2, 4, 1]


def test_a_huge_process_is_read_less_often():
    b = SmapsBudget(fraction=0.05, share=0.1)
    small = C(1, 0, last=99.0, cost=0.001)  # 1 ms: at most every 0.2 s
    huge = C(2, 0, last=95.0, cost=0.05)  # 50 ms: at most every 10 s
    assert b.min_interval(small) == pytest.approx(0.2)
    assert b.min_interval(huge) == pytest.approx(10.0)
    assert [c.pid for c in b.order(100.0, [small, huge])] == [1]
    assert [c.pid for c in b.order(105.1, [small, huge])] == [2, 1]


def test_tokens_accrue_cap_and_debt():
    b = SmapsBudget(fraction=0.05, burst=5.0)
    b.refill(0.0)
    assert b.tokens == b.capacity == 0.25
    assert b.affordable(C(1, 0, cost=0.2))
    b.spend(0.2)
    assert not b.affordable(C(1, 0, cost=0.2))  # 0.05 left
    b.refill(1.0)  # +0.05
    assert abs(b.tokens - 0.1) < 1e-9
    b.refill(100.0)
    assert b.tokens == b.capacity  # capped
    # a read costing more than a full bucket goes through when the bucket is full, then is paid as debt
    giant = C(9, 0, cost=2.5)
    assert b.affordable(giant)
    b.spend(2.5)
    assert b.tokens < 0 and not b.affordable(C(1, 0, cost=0.0001))
    b.refill(100.0 + 2.25 / 0.05)  # debt repaid after 45 s
    assert b.tokens >= 0


def test_first_read_cost_is_guessed_from_rss_once_learned():
    b = SmapsBudget(fraction=0.05)
    assert b.estimate(C(1, 0, rss=4096 * MB)) == 0.001  # nothing learned yet
    b.spend(0.01, rss=100 * MB)
    assert abs(b.estimate(C(2, 0, rss=4000 * MB)) - 0.4) < 1e-9
    assert b.spent_total == 0.01


def test_zero_budget_reads_nothing():
    b = SmapsBudget(fraction=0.0)
    b.refill(0.0)
    assert not b.affordable(C(1, 0))
    assert b.order(10.0, [C(1, 0, last=1.0, cost=0.001)]) == []
