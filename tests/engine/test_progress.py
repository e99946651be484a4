"""A training loop's step counter read from its timed output (rules/activities.yaml `steps`): the bars and
step lines of common trainers, epochs that start their bar again, ranks printing the same steps, and the
bars of other work that are not steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.engine.progress import lines_of, progress
from oomwatch.engine.rules.loader import load_rules

STEPS = load_rules(()).steps


def timed(lines: list[str], every: float = 0.5) -> list[tuple[float, str]]:
    return [(100.0 + i * every, line) for i, line in enumerate(lines)]


def test_step_lines_of_two_ranks_count_each_step_once():
    lines = [f"[rank {r}] step {s} loss 2.{s} rss=800MiB" for s in range(0, 50, 5) for r in (0, 1)]
    p = progress(timed(lines), STEPS)
    assert p is not None and p.rule == "step_word"
    assert [n for _, n in p.points] == list(range(0, 50, 5))
    assert p.rate() == pytest.approx(5 / 1.0, rel=0.05)  # 5 steps a second (two lines of 0.5 s per 5 steps)


def test_an_epoch_bar_that_starts_again_goes_on_from_where_it_stood():
    bar = "Epoch {e}: {pct}%|███▌      | {n}/40 [00:02<00:06,  4.9it/s, v_num=0, train_loss=0.5]"
    lines = [bar.format(e=e, pct=n * 100 // 40, n=n) for e in range(2) for n in range(0, 41, 4)]
    lines.insert(8, "Validation DataLoader 0:  50%|█████     | 5/10 [00:00<00:00, 12.3it/s]")
    p = progress(timed(lines), STEPS)
    assert p is not None and p.rule == "progress_bar" and p.total == 40 and p.restarts == 1
    assert p.points[-1][1] == 80 and all(b[1] > a[1] for a, b in zip(p.points, p.points[1:], strict=False))


def test_bars_of_other_work_are_not_steps():
    lines = [
        "Map: 100%|██████████| 20000/20000 [00:03<00:00, 5800.12 examples/s]",
        "Loading checkpoint shards:  50%|█████     | 1/2 [00:03<00:03,  3.1s/it]",
        "Tokenizing: 40%|████      | 400/1000 [00:01<00:02, 300it/s]",
        "Saving checkpoint at step 1000 to /ckpt/step_1000.pt",
    ]
    assert progress(timed(lines), STEPS) is None


def test_a_bare_trainer_bar_counts_its_steps_and_the_most_stepped_counter_wins():
    main = [f" {n * 2}%|▏         | {n}/50 [00:{n:02d}<00:50,  1.0it/s]" for n in range(1, 20)]
    evaluation = [f"100%|██████████| {n}/8 [00:01<00:00, 8.0it/s]" for n in range(1, 4)]
    p = progress(timed(main[:10] + evaluation + main[10:]), STEPS)
    assert p is not None and p.total == 50 and p.last_step == 19


def test_output_pieces_are_timed_by_when_they_came_and_split_at_carriage_returns():
    data = b"step 1 loss 0.9\n" + "\r 10%|█         | 10/100 [".encode() + "\r 20%|██        | 20/100 [".encode()
    first = len(b"step 1 loss 0.9\n")
    marks = [(first, 10.0), (len(data) - 10, 11.0), (len(data), 12.0)]  # bytes written by each time
    got = lines_of(data, marks)
    assert got == [(10.0, "step 1 loss 0.9"), (11.0, " 10%|█         | 10/100 ["), (12.0, " 20%|██        | 20/100 [")]
    assert lines_of(b"step 1 loss 2\n", []) == []


def test_a_bar_drawn_for_a_terminal_counts_its_steps_past_the_escapes():
    # Lightning's rich bar on a pseudo-terminal (tests/fixtures/terminal/README.md): colours, line erases and
    # cursor moves around each frame; read as the same bar written to a file
    data = (Path(__file__).parents[1] / "fixtures" / "terminal" / "lightning_rich_bar.tty").read_bytes()
    assert b"\x1b[2K" in data and b"\x1b[90m" in data
    marks = [(len(data) * i // 40, 100.0 + i * 0.1) for i in range(1, 41)]
    p = progress(lines_of(data, marks), STEPS)
    assert p is not None and p.rule == "rich_bar" and p.total == 40
    assert [n for _, n in p.points] == list(range(13))
