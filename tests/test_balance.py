"""balance.py: balancing at a fixed count under the one rule (LPT, the rebalance) and the order
of the micro-batches, against models of their docstrings and hand counts."""

from __future__ import annotations

import functools
import random

import pytest

from seqlen_balancing import plan_micro_batches
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.balance import (
    balanced,
    lpt,
    order_micro_batches,
    rebalance,
    sorted_slices,
    spread,
    workload_gap,
)
from seqlen_balancing.planning.packing import best_fit, split
from seqlen_balancing.planning.planner import (
    analyse,
    build_plan,
)
from seqlen_balancing.planning.rule import Rule
from test_rule import random_case, spelled_fits
from test_rule_algorithms import assert_plan


class _CountingBin(list[int]):
    """A micro-batch that counts the groups appended to it (one per move of ``_rebalance``)."""

    moves = 0

    def append(self, item: int) -> None:
        _CountingBin.moves += 1
        super().append(item)


def sum_lpt(sizes: list[int], work: list[int], cap: int, count: int) -> list[list[int]] | None:
    """The capacity-aware LPT under the summed-cost rule of ``sizes`` and ``cap``."""
    return lpt(Rule.sums(sizes, cap), work, count)


def sum_rebalance(bins: list[list[int]], sizes: list[int], work: list[int], cap: int) -> list[list[int]]:
    """The rebalance under the summed-cost rule of ``sizes`` and ``cap``."""
    return rebalance(Rule.sums(sizes, cap), bins, work)


def model_lpt(sizes: list[int], work: list[int], cap: int, count: int) -> list[list[int]] | None:
    """Heaviest group first (then larger, then lower index) into the lightest micro-batch by
    workload (then fewer groups, then lower index) that has room; None when none has."""
    bins: list[list[int]] = [[] for _ in range(count)]
    for g in sorted(range(len(sizes)), key=lambda g: (-work[g], -sizes[g], g)):
        state = sorted(
            (sum(work[i] for i in b), len(b), k) for k, b in enumerate(bins)
            if sum(sizes[i] for i in b) + sizes[g] <= cap
        )
        if not state:
            return None
        bins[state[0][2]].append(g)
    return bins


def random_plan(rng: random.Random) -> tuple[list[list[int]], list[int], list[int], int]:
    n = rng.randint(2, 9)
    cap = rng.randint(4, 20)
    sizes = [rng.randint(0, cap // 2) for _ in range(n)]
    work = [rng.choice([0, rng.randint(1, 50)]) for _ in range(n)]
    count = rng.randint(1, n)
    bins: list[list[int]] = [[] for _ in range(count)]
    for g in range(n):
        fits = [k for k in range(count) if sum(sizes[i] for i in bins[k]) + sizes[g] <= cap]
        bins[rng.choice(fits) if fits else 0].append(g)
    return bins, sizes, work, cap


def _loads(bins: list[list[int]], values: list[int]) -> list[int]:
    return [sum(values[g] for g in b) for b in bins]


def _move_left(bins: list[list[int]], sizes: list[int], work: list[int], cap: int) -> bool:
    """The docstring's stopping rule, checked on a finished plan: the lightest micro-batch
    (lowest index on a tie) could still take a group from a heavier one that holds more
    than one group, has the tokens for it and whose workload is positive and below the
    gap between the two."""
    loads, tokens = _loads(bins, work), _loads(bins, sizes)
    light = loads.index(min(loads))
    return any(
        len(bins[b]) > 1 and 0 < work[g] < loads[b] - loads[light] and sizes[g] <= cap - tokens[light]
        for b in range(len(bins))
        for g in bins[b]
    )


def test_rebalance_keeps_its_contract_on_random_plans() -> None:
    # Oracle: the contract, not the rule. The plan is a rearrangement of the same groups into
    # the same number of micro-batches, every micro-batch stays within the cap, each move
    # narrows a gap (so the sum of squared loads falls: moving w from a load H to a load
    # L < H - w changes it by 2w(w - (H - L)) < 0; the lightest load only rises and the
    # heaviest only falls), and it stops either after 2 * count moves or when the lightest
    # micro-batch can take nothing more.
    rng = random.Random(7)
    moved = 0
    for _ in range(400):
        bins, sizes, work, cap = random_plan(rng)
        if any(sum(sizes[i] for i in b) > cap for b in bins):
            continue
        _CountingBin.moves = 0
        got = sum_rebalance([_CountingBin(b) for b in bins], sizes, work, cap)
        moves = _CountingBin.moves
        assert len(got) == len(bins)
        assert sorted(g for b in got for g in b) == sorted(g for b in bins for g in b)
        assert all(sum(sizes[g] for g in b) <= cap for b in got)
        before, after = _loads(bins, work), _loads(got, work)
        assert max(after) <= max(before) and min(after) >= min(before)
        if moves:
            assert sum(x * x for x in after) < sum(x * x for x in before)
        else:
            assert got == bins
        assert moves <= 2 * len(bins)
        assert moves == 2 * len(bins) or not _move_left(got, sizes, work, cap), (bins, sizes, work, cap)
        moved += moves > 0
    assert moved > 50  # the cases exercise the moves, not only the early exits


def test_rebalance_hand_checked() -> None:
    # Loads 60 and 5: the lightest bin takes group 0 (workload 30, closest to half of 55);
    # then no group of the heavier bin is below the gap of 5.
    assert sum_rebalance([[0, 1, 2], [3]], [3, 3, 3, 1], [30, 20, 10, 5], 10) == [[1, 2], [3, 0]]
    # Room limits the move: group 0 (6 tokens) cannot join a bin with 5 of 10 tokens.
    assert sum_rebalance([[0, 1], [2]], [6, 1, 5], [60, 40, 1], 10) == [[0], [2, 1]]


def test_rebalance_stops_after_two_rounds_per_micro_batch() -> None:
    # 20 groups of workload 1 in bin 0, bin 1 empty: each round moves one group (every group
    # is equally close to half the gap, so the lowest index goes) and the gap stays >= 12,
    # so only the limit of 2 * 2 = 4 rounds stops it: groups 0..3 move.
    bins: list[list[int]] = [list(range(20)), []]
    assert sum_rebalance(bins, [1] * 20, [1] * 20, 100) == [list(range(4, 20)), [0, 1, 2, 3]]


def test_rebalance_tries_the_next_heaviest_bin() -> None:
    # Loads 70, 35, 1 and tokens 18, 4, 10 of 18. The lightest bin (2) has room 8: the
    # 9-token groups of bin 0 do not fit, so bin 1 gives, with gap 34: group 3 (workload
    # 15, |30 - 34| = 4) beats group 2 (20, |40 - 34| = 6). Then loads 70, 20, 16, room 6:
    # bin 0 still cannot give, bin 1's only group (20) is not below its gap of 4, and bin
    # 2 is the lightest itself: stop.
    got = sum_rebalance([[0, 1], [2, 3], [4]], [9, 9, 2, 2, 10], [40, 30, 20, 15, 1], 18)
    assert got == [[0, 1], [2], [4, 3]]


def test_rebalance_leaves_zero_workload_groups() -> None:
    # Gap 49 between loads 50 and 1: group 1 (50) is not below it and group 0 has no
    # workload (moving it would narrow nothing), so nothing moves.
    assert sum_rebalance([[0, 1], [2]], [1, 1, 1], [0, 50, 1], 10) == [[0, 1], [2]]


def test_rebalance_breaks_ties_by_lowest_index() -> None:
    # Loads 10, 10, 1, 1. Round 1: lightest bin 2 (lowest index of the two), heaviest bin 0,
    # gap 9: groups 0 and 1 (5 each) are as close to 4.5, group 0 moves. Round 2: lightest
    # bin 3, heaviest bin 1 (10), gap 9: group 2 moves. Loads 5, 5, 6, 6: the lightest (bin
    # 0) is 1 below bins 2 and 3, and no group's workload is below 1: stop.
    got = sum_rebalance([[0, 1], [2, 3], [4], [5]], [1] * 6, [5, 5, 5, 5, 1, 1], 10)
    assert got == [[1], [3], [4, 0], [5, 2]]


def test_lpt_with_cap_follows_its_rule() -> None:
    rng = random.Random(11)
    for _ in range(400):
        _, sizes, work, cap = random_plan(rng)
        count = rng.randint(1, len(sizes))
        assert sum_lpt(sizes, work, cap, count) == model_lpt(sizes, work, cap, count)


def test_lpt_with_cap_hand_checked() -> None:
    # Equal workloads: larger groups first, and ties on load go to the bin with fewer groups.
    assert sum_lpt([5, 6, 4], [0, 0, 0], 10, 2) == [[1, 2], [0]]
    assert sum_lpt([0, 0, 0, 0], [0, 0, 0, 0], 10, 2) == [[0, 2], [1, 3]]
    assert sum_lpt([5, 5, 4, 3, 3], [5, 5, 4, 3, 3], 10, 2) is None


def model_order(micro_batches: list[list[int]], workloads: list[int], group: int = 1) -> list[list[int]]:
    """verl 0.9.1's balanced order, slowly (planner docstring): compare two micro-batches by
    workload (the sum over the forced groups they hold), then by first sample index (0 for
    an empty one), heaviest first; deal that list out, the 1st, 3rd, 5th... each to the
    front of the result, the 2nd, 4th, 6th... after them in turn."""

    def load(mb: list[int]) -> int:
        return sum(workloads[x] for x in {i // group for i in mb})

    def heavier_first(a: list[int], b: list[int]) -> int:
        ka, kb = (load(a), a[0] if a else 0), (load(b), b[0] if b else 0)
        return -1 if ka > kb else 1 if ka < kb else 0

    ranked = sorted(micro_batches, key=functools.cmp_to_key(heavier_first))
    front: list[list[int]] = []
    back: list[list[int]] = []
    for position, mb in enumerate(ranked):
        if position % 2 == 0:
            front.insert(0, mb)
        else:
            back.append(mb)
    return front + back


def test_order_micro_batches() -> None:
    # In order: by the smallest sample index, an empty micro-batch first.
    assert order_micro_batches([[2], [0, 3], [1]], [1, 1, 1, 1], False) == [[0, 3], [1], [2]]
    assert order_micro_batches([[1], []], [1, 1], False) == [[], [1]]
    # Balanced, hand-checked: by load descending [0] 4, [2] 3, [3] 2, [1] 1; positions 0, 2
    # reversed ([3], [0]), then positions 1, 3 ([2], [1]).
    assert order_micro_batches([[0], [1], [2], [3]], [4, 1, 3, 2], True) == [[3], [0], [2], [1]]
    # Five: [0] 9, [1] 7, [2] 5, [3] 3, [4] 1 -> [4], [2], [0] then [1], [3].
    assert order_micro_batches([[0], [1], [2], [3], [4]], [9, 7, 5, 3, 1], True) == [[4], [2], [0], [1], [3]]
    # Equal loads: the larger first index ranks heavier.
    assert order_micro_batches([[3], [1]], [0, 5, 0, 5], True) == [[3], [1]]
    assert order_micro_batches([[], [1]], [0, 0], True) == [[1], []]
    # Forced pairs: a micro-batch's load is that of its groups (workloads per group).
    mbs = [[0, 1], [2, 3, 4, 5], [6, 7]]
    assert order_micro_batches(mbs, [5, 1, 1, 5], True, 2) == [[2, 3, 4, 5], [6, 7], [0, 1]]
    assert model_order(mbs, [5, 1, 1, 5], 2) == [[2, 3, 4, 5], [6, 7], [0, 1]]


def test_order_micro_batches_matches_the_model() -> None:
    rng = random.Random(5)
    for _ in range(300):
        group = rng.choice([1, 1, 2, 3])
        n_groups = rng.randint(1, 9)
        workloads = [rng.randint(0, 4) for _ in range(n_groups)]  # small: many ties
        order = list(range(n_groups))
        rng.shuffle(order)
        cuts = sorted(rng.sample(range(1, n_groups), rng.randint(0, n_groups - 1))) if n_groups > 1 else []
        mbs = []
        for a, b in zip([0, *cuts], [*cuts, n_groups], strict=True):
            groups = sorted(order[a:b])
            mbs.append(sorted(i for g in groups for i in range(g * group, (g + 1) * group)))
        assert order_micro_batches(mbs, workloads, True, group) == model_order(mbs, workloads, group)


def test_default_order_is_balanced() -> None:
    lengths = [1, 2, 3, 4]
    in_order = [[0], [1], [2], [3]]
    balanced = model_order(in_order, [24576 * s + s * s for s in lengths])
    assert balanced == [[1], [3], [2], [0]]
    assert plan_micro_batches(lengths, 4, min_num_micro_batch=4) == balanced
    assert plan_micro_batches(lengths, 4, min_num_micro_batch=4, use_dynamic_bsz_balance=False) == in_order
    analysis = analyse(lengths, 4, PlanOptions(min_num_micro_batch=4))
    assert build_plan(analysis, 4) == balanced
    assert build_plan(analysis, 4, False) == in_order


def test_spread() -> None:
    assert spread([]) == 0.0
    assert spread([0, 0]) == 0.0
    assert spread([90, 100, 110]) == pytest.approx(0.2)
    assert spread([1, 3]) == 1.0
    assert spread([5]) == 0.0


def _skipping_case(skippers: int) -> tuple[list[int], list[int], int, int]:
    """A batch on which the capacity-aware LPT packing skips exactly ``9 * skippers`` full
    micro-batches (count 10, cap 5,000; see ``test_lpt_gives_up_after_8n_plus_4096_skips``)."""
    sizes = [1] + [5000] * 9 + [1] * skippers
    work = [3] + [2] * 9 + [1] * skippers
    return sizes, work, 5000, 10


@pytest.mark.parametrize(("skippers", "gives_up"), [(4176, False), (4177, True)])
def test_lpt_gives_up_after_8n_plus_4096_skips(skippers: int, gives_up: bool) -> None:
    # Hand count. Order: group 0 (workload 3), groups 1..9 (workload 2, 5,000 tokens, a full
    # micro-batch each), then the `skippers` groups of 1 token (workload 1). Group 0 takes
    # empty bin 0, groups 1..9 the empty bins 1..9 (an empty bin always heads the heap, so no
    # skip). Each 1-token group then finds bins 1..9 (load 2) ahead of bin 0 (load >= 3) and
    # full: 9 skips, then bin 0, which has room for all of them (1 + 4,177 <= 5,000).
    # With t = skippers, n = 10 + t and the skips are 9 t: 9 t = 8 n + 4096 gives t = 4176,
    # the last skip the budget allows; one group more makes 9 skips for 8 more allowed, so
    # the run skips 8 n + 4097 times and gives up on the last one.
    sizes, work, cap, count = _skipping_case(skippers)
    n = len(sizes)
    assert 9 * skippers == 8 * n + 4096 + (1 if gives_up else 0)
    got = sum_lpt(sizes, work, cap, count)
    if gives_up:
        assert got is None
    else:
        assert got == [[0, *range(10, n)]] + [[g] for g in range(1, 10)]


def test_lpt_rebalance_and_the_balanced_choice_fit_every_rule() -> None:
    rng = random.Random(15)
    for _ in range(300):
        n = rng.randint(2, 25)
        rule, case = random_case(rng, n)
        work = [rng.randint(0, 1000) for _ in range(n)]
        packed = best_fit(rule)
        count = rng.randint(len(packed), n)
        placed = lpt(rule, work, count)
        if placed is not None:
            assert sorted(i for b in placed for i in b) == list(range(n))
            assert all(spelled_fits(b, case) for b in placed)
        spread = split(rule, packed, count)
        before = workload_gap(spread, work)
        moved = rebalance(rule, [list(b) for b in spread], work)
        assert_plan(moved, n, case)
        assert workload_gap(moved, work) <= before
        plan = balanced(rule, work, packed, count)
        assert_plan(plan, n, case)
        assert len(plan) == count


def test_sorted_slices_are_consecutive_in_the_widest_first_order() -> None:
    rule = Rule.padded([0] * 6, [60, 50, 40, 30, 20, 10], 200)
    slices = sorted_slices(rule, [6, 5, 4, 3, 2, 1], 3)
    assert slices is not None and len(slices) == 3
    order = [0, 1, 2, 3, 4, 5]
    assert sorted(i for b in slices for i in b) == order
    assert all(b == list(range(min(b), max(b) + 1)) for b in slices)  # consecutive
    assert sorted_slices(Rule.padded([0, 1], [5, 5], 100), [1, 1], 2) is None  # two-sided
