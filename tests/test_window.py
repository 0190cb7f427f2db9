"""The lock-step choice of a DP group (window.py), against a brute force written here.

For tiny random steps on 2-3 ranks the oracle spells the rule out: each rank's own count
(its plan alone), the agreed ``K`` (the largest), verl 0.9.1's count ``V`` (from
``max ceil(total / cap)`` up, the first count at which Karmarkar-Karp fits on every rank),
the candidates (the library's plans at ``K`` and, where ``V > K``, at ``K + 1``; verl's
partitions at ``V``), each one's lock-step time (sum over index of the slowest rank's
micro-batch, each rank's micro-batches heaviest first, plus count x fixed cost), and the
fastest wins (the library's lowest count on a tie). Where the rule makes no choice (a rank's
own count more than one below ``K``, or ``K + 1`` above 16), the plans are the library's at
``K``. The plans ``plan_data_parallel`` returns must have that count and, in the order they
come, that lock-step time.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from seqlen_balancing import karmarkar_karp, plan_data_parallel, plan_micro_batches
from seqlen_balancing.agreement import LAYOUT, VECTOR_SIZE
from seqlen_balancing.window import PROFILE, WINDOW


def workload(s: int) -> int:
    return 24576 * s + s * s


def lock_step(plans: Sequence[Sequence[Sequence[int]]], lengths: Sequence[Sequence[int]], fixed: float,
              sort: bool) -> float:
    """Sum over index k of the slowest rank's micro-batch k (each rank's micro-batches
    sorted heaviest first when ``sort``, else as given), plus count x fixed."""
    loads = []
    for plan, lens in zip(plans, lengths, strict=True):
        rank = [sum(workload(lens[i]) for i in mb) for mb in plan]
        loads.append(sorted(rank, reverse=True) if sort else rank)
    count = len(plans[0])
    return sum(max(rank[k] for rank in loads) for k in range(count)) + count * fixed


def verl_count(lengths: Sequence[Sequence[int]], cap: int) -> int | None:
    """verl 0.9.1's count with DP agreement, the rule spelled out (None: it fails)."""
    count = max(min(len(lens), -(-sum(lens) // cap)) for lens in lengths)
    while count <= min(len(lens) for lens in lengths):
        parts = [karmarkar_karp([workload(s) for s in lens], count, equal_size=False) for lens in lengths]
        if all(sum(lens[i] for i in part) <= cap for lens, rank in zip(lengths, parts, strict=True)
               for part in rank):
            return count
        count += 1
    return None


def expected(lengths: list[list[int]], cap: int, overhead: float) -> tuple[int, float]:
    fixed = overhead * 24576 * cap
    own = [len(plan_micro_batches(lens, cap)) for lens in lengths]
    top = max(own)
    ours = {c: [plan_micro_batches(lens, cap, num_micro_batches=c) for lens in lengths]
            for c in (top, top + 1) if c <= min(len(lens) for lens in lengths)}
    base = lock_step(ours[top], lengths, fixed, True)
    v = verl_count(lengths, cap)
    assert v is not None and v >= top  # never more micro-batches than verl
    if top + 1 > PROFILE or min(own) < top - 1:
        return top, base  # no choice: the library's plans at K, lined up
    candidates = [(base, top)]
    known = v == top or (v == top + 1 and min(own) == top)
    if v > top and min(own) == top and top + 1 in ours:
        candidates.append((lock_step(ours[top + 1], lengths, fixed, True), top + 1))
    best, count = min(candidates)
    if known:
        theirs = [[sorted(p) for p in karmarkar_karp([workload(s) for s in lens], v, equal_size=False)]
                  for lens in lengths]
        verl_time = lock_step(theirs, lengths, fixed, True)
        if verl_time < best:
            return v, verl_time
    return count, best


def draw(rng: random.Random) -> tuple[list[list[int]], int]:
    cap = rng.choice([20, 50, 100])
    ranks = rng.choice([2, 3])
    n = rng.randint(3, 12)
    low = rng.choice([1, cap // 5])  # lengths of 1/5 to 3/4 of the cap pack tightly
    return [[rng.randint(low, cap * 3 // 4 if low > 1 else cap) for _ in range(n)] for _ in range(ranks)], cap


@pytest.mark.parametrize("overhead", [0.0, 0.05, 0.2])
def test_choice_is_the_brute_force_fastest_candidate(overhead: float) -> None:
    rng = random.Random(31)
    fixed = overhead * 24576
    for _ in range(300):
        lengths, cap = draw(rng)
        count, time = expected(lengths, cap, overhead)
        plans = plan_data_parallel(lengths, cap, micro_batch_overhead=overhead)
        assert [len(p) for p in plans] == [count] * len(lengths)
        # in the order returned, the ranks' micro-batches are lined up: the modeled time stands
        assert lock_step(plans, lengths, fixed * cap, False) == time


def test_without_balance_every_rank_runs_heaviest_first() -> None:
    lengths, cap = [[90, 10, 40, 50, 5, 60], [30, 30, 30, 80, 20, 70]], 100
    plans = plan_data_parallel(lengths, cap, use_dynamic_bsz_balance=False)
    for plan, lens in zip(plans, lengths, strict=True):
        loads = [sum(workload(lens[i]) for i in mb) for mb in plan]
        assert loads == sorted(loads, reverse=True)


def test_with_balance_the_ranks_share_verl_s_pipeline_order() -> None:
    lengths, cap = [[90, 10, 40, 50, 5, 60, 30], [30, 30, 30, 80, 20, 70, 10]], 100
    plans = plan_data_parallel(lengths, cap)
    for plan, lens in zip(plans, lengths, strict=True):
        loads = [sum(workload(lens[i]) for i in mb) for mb in plan]
        heaviest_first = sorted(loads, reverse=True)
        positions = list(range(len(loads)))
        # verl's order: the even sorted positions reversed, then the odd ones
        assert loads == [heaviest_first[j] for j in positions[::2][::-1] + positions[1::2]]


def test_an_extra_micro_batch_when_it_saves_more_than_it_costs() -> None:
    # each rank alone needs 5 micro-batches of 50 tokens; lined up, 6 are faster
    lengths = [[20, 34, 28, 15, 27, 30, 34, 18, 12, 16], [26, 15, 17, 37, 28, 15, 32, 19, 21, 20]]
    assert [len(plan_micro_batches(lens, 50)) for lens in lengths] == [5, 5]
    for overhead, count in ((0.0, 6), (0.2, 5)):
        plans = plan_data_parallel(lengths, 50, micro_batch_overhead=overhead)
        assert [len(p) for p in plans] == [count, count]
        modeled = lock_step(plans, lengths, overhead * 24576 * 50, False)
        assert expected(lengths, 50, overhead) == (count, modeled)
    at_five = [plan_micro_batches(lens, 50, num_micro_batches=5) for lens in lengths]
    at_six = plan_data_parallel(lengths, 50, micro_batch_overhead=0.0)
    assert lock_step(at_six, lengths, 0.0, False) < lock_step(at_five, lengths, 0.0, True)


def test_the_vector_is_bounded_and_its_window_declared() -> None:
    # 59 values before issue 31's item 2; micro_batch_overhead's pair of request slots, and
    # the window's WINDOW x (3 + 2 x PROFILE); equal_rows_per_micro_batch's pair and its rows
    # window of 2 x 32 (rows.py)
    assert (WINDOW, PROFILE) == (2, 16)
    assert VECTOR_SIZE == 59 + 2 + 2 * (3 + 2 * 16) + 2 + 2 * 32 == 197
    widths = {s.name: s.width for s in LAYOUT.slots}
    assert [widths[name] for name in ("window_count", "neg_window_count", "window_fits", "profile",
                                      "verl_profile")] == [2, 2, 2, 32, 32]
