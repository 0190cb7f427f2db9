"""The lock-step choice of a DP group (window.py), against a brute force written here.

For tiny random steps on 2-3 ranks the oracle spells the rule out: each rank's own count
(its plan alone), the agreed ``K`` (the largest), verl 0.9.1's count ``V`` (from
``max ceil(total / cap)`` up, the first count at which Karmarkar-Karp fits on every rank),
the candidates (the library's plans at ``K`` and at ``K + 1``, each where every rank
planned it before the agreement and it is at most ``V``), each one's lock-step time (sum
over index of the slowest rank's micro-batch, each rank's micro-batches heaviest first,
plus count x fixed cost). The fastest candidate wins (the lowest count on a tie) unless
verl's own plans at ``V`` are known faster (both in the vector), or the candidate's time
cannot be shown at most ``max over ranks of its total workload + V x fixed cost`` (no
plan of verl's is faster): then verl's plans at ``V`` run. The plans ``plan_data_parallel``
returns must have that count and, in the order they come, that lock-step time; and on
every step verl does not fail, at most verl's count and verl's plans' lock-step time.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from seqlen_balancing import karmarkar_karp, plan_data_parallel, plan_micro_batches
from seqlen_balancing.agreement import LAYOUT, VECTOR_SIZE
from seqlen_balancing.window import FLAGS, PROFILE, WINDOW


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


def verl_plans(lengths: Sequence[Sequence[int]], count: int) -> list[list[list[int]]]:
    return [[sorted(p) for p in karmarkar_karp([workload(s) for s in lens], count, equal_size=False)]
            for lens in lengths]


def expected(lengths: list[list[int]], cap: int, overhead: float) -> tuple[int, float]:
    """The choice spelled out (module docstring), with each rank's window: its own count
    ``c0`` and ``c0 + 1`` where ``c0 + 1 <= PROFILE``, and the fit flags of every count up
    to ``FLAGS`` (all known on these tiny steps)."""
    fixed = overhead * 24576 * cap
    own = [len(plan_micro_batches(lens, cap)) for lens in lengths]
    top, fewest = max(own), min(len(lens) for lens in lengths)

    def planned_everywhere(c: int) -> bool:
        return c <= fewest and all(o + 1 <= PROFILE and c in (o, o + 1) for o in own)

    ours_at = {c: [plan_micro_batches(lens, cap, num_micro_batches=c) for lens in lengths]
               for c in (top, top + 1) if c <= fewest}
    v = verl_count(lengths, cap)
    assert v is None or v >= top  # never more micro-batches than verl
    limit = fewest if v is None else v
    candidates = [(lock_step(ours_at[c], lengths, fixed, True), c) for c in (top, top + 1)
                  if c <= limit and planned_everywhere(c)]
    ours = min(candidates, default=None)
    if v is None:  # verl raises: the library's fastest candidate, else its plans at K
        return (top, lock_step(ours_at[top], lengths, fixed, True)) if ours is None else (ours[1], ours[0])
    verl_time = lock_step(verl_plans(lengths, v), lengths, fixed, True)
    if ours is not None and planned_everywhere(v):  # verl's profile in the vector
        return (v, verl_time) if verl_time < ours[0] else (ours[1], ours[0])
    bound = max(sum(workload(s) for s in lens) for lens in lengths) + v * fixed
    if ours is not None and ours[0] <= bound:
        return (ours[1], ours[0])
    assert v <= FLAGS
    return v, verl_time


def draw(rng: random.Random) -> tuple[list[list[int]], int]:
    cap = rng.choice([20, 50, 100])
    ranks = rng.choice([2, 3])
    n = rng.randint(3, 12)
    low = rng.choice([1, cap // 5])  # lengths of 1/5 to 3/4 of the cap pack tightly
    return [[rng.randint(low, cap * 3 // 4 if low > 1 else cap) for _ in range(n)] for _ in range(ranks)], cap


# Draws 0-39 in the quick loop (`-m "not slow"`, CI's Python 3.10 and 3.13), 40-299 beside
# them where the slow tests run: the 300 draws of one seed, each checked once.
@pytest.mark.parametrize("overhead", [0.0, 0.05, 0.2])
@pytest.mark.parametrize(("first", "end"), [(0, 40), pytest.param(40, 300, marks=pytest.mark.slow)])
def test_choice_is_the_brute_force_fastest_candidate(overhead: float, first: int, end: int) -> None:
    rng = random.Random(31)
    fixed = overhead * 24576
    for drawn in range(end):
        lengths, cap = draw(rng)
        if drawn < first:
            continue
        count, time = expected(lengths, cap, overhead)
        plans = plan_data_parallel(lengths, cap, micro_batch_overhead=overhead)
        assert [len(p) for p in plans] == [count] * len(lengths)
        # in the order returned, the ranks' micro-batches are lined up: the modeled time stands
        modeled = lock_step(plans, lengths, fixed * cap, False)
        assert modeled == time
        v = verl_count(lengths, cap)
        if v is not None:  # never above verl's plans (in verl's order: heaviest first)
            assert count <= v
            assert modeled <= lock_step(verl_plans(lengths, v), lengths, fixed * cap, True)


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
    # the window's WINDOW x (2 + 2 x PROFILE); equal_rows_per_micro_batch's pair and its rows
    # window of 2 x 32 (rows.py); the fit flags of FLAGS counts and the largest rank workload
    assert (WINDOW, PROFILE, FLAGS) == (2, 16, 32)
    assert VECTOR_SIZE == 59 + 2 + 2 * (2 + 2 * 16) + 2 + 2 * 32 + 32 + 1 == 228
    widths = {s.name: s.width for s in LAYOUT.slots}
    assert [widths[name] for name in ("window_count", "neg_window_count", "profile", "verl_profile",
                                      "fit_flags", "rank_workload")] == [2, 2, 32, 32, 32, 1]


@pytest.mark.slow
def test_a_fit_proven_without_running_karmarkar_karp_is_one() -> None:
    # window.py skips Karmarkar-Karp at a count where (W + (c - 1) w_max) <= c x 24576 x cap:
    # run it anyway on random batches and check every part fits the cap there
    from seqlen_balancing.planner import analyse
    from seqlen_balancing.window import _fit_proof

    rng = random.Random(7)
    proven = 0
    for _ in range(150):
        cap = rng.choice([50, 1000, 16384])
        longest = rng.choice([cap, cap // 4])
        lengths = [rng.randint(1, longest) for _ in range(rng.randint(2, 30))]
        proof = _fit_proof(analyse(lengths, cap))
        assert proof is not None
        for c in range(1, len(lengths) + 1):
            if proof(c):
                proven += 1
                parts = karmarkar_karp([workload(s) for s in lengths], c, equal_size=False)
                assert all(sum(lengths[i] for i in part) <= cap for part in parts), (lengths, cap, c)
    assert proven > 300
    # custom workloads below 24576 x cost: no proof
    assert _fit_proof(analyse([5, 6], 10, workloads=[1, 1])) is None


def test_a_proven_fit_over_the_karmarkar_karp_budget_is_not_known(monkeypatch: pytest.MonkeyPatch) -> None:
    # settle runs Karmarkar-Karp after the agreement where every rank flagged FITS; over its
    # budget it would not run, so the proof must not flag FITS there (UNKNOWN: V not known)
    import seqlen_balancing.window as window_module
    from seqlen_balancing.planner import analyse

    lengths, cap = [100] * 40, 1000  # needs 4; the proof holds from 5 on
    within = window_module.window_of(analyse(lengths, cap))
    assert within is not None and within.fits[6] == window_module.FITS
    monkeypatch.setattr(window_module, "_KK_BUDGET", 40 * 5)  # Karmarkar-Karp runs up to 5 parts
    over = window_module.window_of(analyse(lengths, cap))
    assert over is not None
    assert over.fits[5] == window_module.FITS and over.fits[6] == window_module.UNKNOWN

