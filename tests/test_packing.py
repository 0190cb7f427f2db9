"""Bin packing against a brute-force optimum: bounds, heuristics, search, splitting."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles import brute_force_optimum
from seqlen_balancing.planning.bounds import (
    l1_lower_bound,
    l2_lower_bound,
)
from seqlen_balancing.planning.packing import (
    best_fit_decreasing,
    closing_fit_decreasing,
    minimum_bin_slack,
    split,
    split_to_count,
)
from seqlen_balancing.planning.planner import analyse, plan_micro_batches
from seqlen_balancing.planning.rule import Rule


def assert_packing(bins: list[list[int]], sizes: list[int], cap: int) -> None:
    assert sorted(i for b in bins for i in b) == list(range(len(sizes)))  # exact cover
    assert all(b for b in bins)
    assert all(sum(sizes[i] for i in b) <= cap for b in bins)


small_instances = st.integers(1, 30).flatmap(
    lambda cap: st.tuples(st.lists(st.integers(0, cap), min_size=0, max_size=9), st.just(cap))
)


def test_brute_force_reference_on_hand_checked_cases() -> None:
    assert brute_force_optimum([6, 6, 6], 10) == 3
    assert brute_force_optimum([2, 6, 6, 5, 5], 12) == 2
    assert brute_force_optimum([3, 3, 3, 3, 2, 2, 2, 2], 10) == 2  # 3+3+2+2 twice
    assert brute_force_optimum([4, 4, 4, 3, 3, 3, 3, 3, 3], 10) == 3  # 4+3+3 three times
    assert brute_force_optimum([4, 4, 4, 4, 4, 4, 3, 3], 10) == 4  # volume 30 is not enough
    assert brute_force_optimum([], 5) == 1
    assert brute_force_optimum([0, 0], 5) == 1


@given(small_instances)
@settings(max_examples=300, deadline=None)
@pytest.mark.slow
def test_bounds_and_heuristics_bracket_the_optimum(instance: tuple[list[int], int]) -> None:
    sizes, cap = instance
    opt = brute_force_optimum(sizes, cap)
    l1, l2 = l1_lower_bound(sizes, cap), l2_lower_bound(sizes, cap)
    bfd = best_fit_decreasing(sizes, cap)
    closing = closing_fit_decreasing(sizes, cap)
    ours = analyse(sizes, cap).min_count if sizes else 1
    assert_packing(bfd, sizes, cap)
    assert_packing(closing, sizes, cap)
    assert l1 <= l2 <= opt <= ours <= max(1, len(bfd)) <= max(1, len(sizes))
    assert opt <= max(1, len(closing))
    if sizes:
        result = analyse(sizes, cap)
        assert_packing(result._packing, sizes, cap)
        assert len(result._packing) == result.min_count







@given(small_instances, st.sampled_from([None, 0, 1, 3]))
@settings(max_examples=300, deadline=None)
@pytest.mark.slow
def test_minimum_bin_slack_is_a_valid_packing_at_or_above_the_optimum(
    instance: tuple[list[int], int], budget: int | None
) -> None:
    sizes, cap = instance
    bins = minimum_bin_slack(sizes, cap, budget)
    assert_packing(bins, sizes, cap)
    assert brute_force_optimum(sizes, cap) <= max(1, len(bins))
    assert minimum_bin_slack(sizes, cap, budget) == bins  # deterministic


def test_minimum_bin_slack_closes_bins_exactly_where_best_fit_misses() -> None:
    sizes, cap = [49, 41, 34, 33, 29, 26, 26, 22, 20, 19], 100  # sum 299: 3 bins if perfect
    assert len(best_fit_decreasing(sizes, cap)) == 4
    bins = minimum_bin_slack(sizes, cap)
    assert_packing(bins, sizes, cap)
    assert len(bins) == 3
    # Multiples of 10 against a cap that is not: the gap of 8 per bin counts as full.
    scaled = [10 * s for s in sizes]
    assert len(minimum_bin_slack(scaled, 1008)) == 3
    assert len(best_fit_decreasing(scaled, 1008)) == 4
    assert minimum_bin_slack([0, 0], 5) == [[0, 1]]
    assert minimum_bin_slack([], 5) == []
    with pytest.raises(ValueError, match="larger than the capacity"):
        minimum_bin_slack([6], 5)


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=12), st.integers(50, 80), st.data()
)
@settings(max_examples=200, deadline=None)
@pytest.mark.slow
def test_split_to_count_gives_exactly_the_count(
    sizes: list[int], cap: int, data: st.DataObject
) -> None:
    bins = best_fit_decreasing(sizes, cap)
    count = data.draw(st.integers(len(bins), len(sizes)))
    split = split_to_count(sizes, bins, count)
    assert len(split) == count
    assert_packing(split, sizes, cap)
    with pytest.raises(ValueError, match="cannot split"):
        split_to_count(sizes, bins, len(sizes) + 1)
    if len(bins) > 1:
        with pytest.raises(ValueError, match="cannot split"):
            split_to_count(sizes, bins, len(bins) - 1)




def test_best_fit_decreasing_is_deterministic_and_best_fit() -> None:
    assert best_fit_decreasing([5, 7, 3, 5], 10) == [[1, 2], [0, 3]]
    # Rooms 3 ([7]) and 2 ([4, 4]) are open when the 1 comes: best fit takes room 2, where
    # first fit would take the older bin; equal rooms go to the newest bin ([6] [6] 1).
    assert best_fit_decreasing([7, 4, 4, 1], 10) == [[0], [1, 2, 3]]
    assert best_fit_decreasing([6, 6, 1], 10) == [[0], [1, 2]]
    rng = random.Random(7)
    sizes = [rng.randint(1, 900) for _ in range(500)]
    first = best_fit_decreasing(sizes, 1000)
    assert best_fit_decreasing(list(sizes), 1000) == first
    assert_packing(first, sizes, 1000)
    with pytest.raises(ValueError, match="larger than the capacity"):
        best_fit_decreasing([3, 11], 10)


def test_closing_fit_closes_bins_exactly() -> None:
    assert closing_fit_decreasing([6, 5, 4, 3, 2], 10) == [[0, 2], [1, 3, 4]]
    assert closing_fit_decreasing([0, 0, 3], 3) == [[2, 0, 1]]  # zeros join a full bin
    assert closing_fit_decreasing([], 3) == []


def test_plan_of_the_l2_example_has_two_micro_batches() -> None:
    plan = plan_micro_batches([2, 6, 6, 5, 5], 12)
    assert len(plan) == 2
    assert sorted(sum([2, 6, 6, 5, 5][i] for i in b) for b in plan) == [12, 12]


@pytest.mark.parametrize(
    ("sizes", "cap", "expected"),
    [
        ([7] * 512, 8, 512),
        ([7] * 65536, 8, 65536),
        ([0] * 65536, 5, 1),
        ([5000] * 65536, 16384, 21846),  # L2 says 20000; three per bin is the most
        ([3, 5] * 32768, 8, 32768),
    ],
)
def test_adversarial_inputs_reach_their_count(sizes: list[int], cap: int, expected: int) -> None:
    # Their speed (2 s each on the idle CI machine) is benchmarks/adversarial.py's to print.
    assert analyse(sizes, cap).min_count == expected
















@pytest.mark.slow
def test_split_to_count_many_splits_is_not_quadratic() -> None:
    # One bin of 20,000 items split to single items: the old rule re-summed every bin per split.
    n = 20_000
    result = split_to_count([1] * n, [list(range(n))], n)
    assert sorted(len(b) for b in result) == [1] * n
    assert sorted(i for b in result for i in b) == list(range(n))


def model_split(sizes: list[int], bins: list[list[int]], count: int) -> list[list[int]]:
    """Split until ``count`` bins: the heaviest bin with two or more items (lowest index on a
    tie) is halved; its items, largest first (then lowest index), go to the first half, the
    second half, then each to the lighter half (the first on a tie); the second half is
    appended."""
    result = [list(b) for b in bins]
    while len(result) < count:
        candidates = [b for b in range(len(result)) if len(result[b]) > 1]
        heaviest = max(candidates, key=lambda b: (sum(sizes[i] for i in result[b]), -b))
        ordered = sorted(result[heaviest], key=lambda i: (-sizes[i], i))
        halves: list[list[int]] = [[ordered[0]], [ordered[1]]]
        for i in ordered[2:]:
            loads = [sum(sizes[j] for j in half) for half in halves]
            halves[0 if loads[0] <= loads[1] else 1].append(i)
        result[heaviest] = halves[0]
        result.append(halves[1])
    return result


def test_split_to_count_follows_its_rule() -> None:
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(1, 12)
        sizes = [rng.choice([0, 1, rng.randint(0, 20)]) for _ in range(n)]
        n_bins = rng.randint(1, n)
        bins: list[list[int]] = [[] for _ in range(n_bins)]
        for i in range(n):
            bins[i % n_bins if i < n_bins else rng.randrange(n_bins)].append(i)
        count = rng.randint(n_bins, n)
        assert split_to_count(sizes, bins, count) == model_split(sizes, bins, count), (sizes, bins, count)


def test_split_to_count_hand_checked() -> None:
    # The heavier bin (12 tokens) splits: 5 and 4 seed the halves, 3 joins the lighter (4).
    assert split_to_count([5, 4, 3, 6, 6], [[0, 1, 2], [3], [4]], 4) == [[0], [3], [4], [1, 2]]
    # A single-item bin never splits, even when it is the heaviest.
    assert split_to_count([9, 1, 1], [[0], [1, 2]], 3) == [[0], [1], [2]]
    # Zero-size items: the tie goes to the lowest-index bin, which has two items.
    assert split_to_count([0, 0, 0, 0], [[0, 1], [2, 3]], 3) == [[0], [2, 3], [1]]
    with pytest.raises(ValueError, match=r"^cannot split 2 bins of 3 items into 4$"):
        split_to_count([1, 1, 1], [[0, 1], [2]], 4)
    with pytest.raises(ValueError, match=r"^cannot split 2 bins of 3 items into 1$"):
        split_to_count([1, 1, 1], [[0, 1], [2]], 1)


def test_minimum_bin_slack_budget_and_largest_item_first() -> None:
    sizes, cap = [49, 41, 34, 33, 29, 26, 26, 22, 20, 19], 100
    assert len(minimum_bin_slack(sizes, cap)) == 3
    # No budget: every item is packed by best-fit decreasing (4 bins here).
    assert minimum_bin_slack(sizes, cap, budget=0) == best_fit_decreasing(sizes, cap)
    rng = random.Random(3)
    for _ in range(200):
        items = [rng.randint(1, 30) for _ in range(rng.randint(1, 12))]
        bins = minimum_bin_slack(items, 40)
        for k, b in enumerate(bins):  # each bin opens with the largest item left
            assert items[b[0]] == max(items[i] for later in bins[k:] for i in later), (items, bins)


def test_minimum_bin_slack_falls_back_to_best_fit_on_wide_bitsets() -> None:
    # cap / gcd above 65,536 bits: best-fit decreasing, as documented.
    sizes, cap = [70_000, 30_001, 3, 99_999], 100_001
    assert minimum_bin_slack(sizes, cap) == best_fit_decreasing(sizes, cap) == [[3], [0, 1], [2]]


def test_checked_names_sizes_in_its_messages() -> None:
    with pytest.raises(ValueError, match=r"^sizes\[1\] is -1; lengths and workloads must be >= 0$"):
        l1_lower_bound([3, -1], 10)
    with pytest.raises(TypeError, match=r"^sizes must be a sequence, got 'abc' \(str\)$"):
        l2_lower_bound("abc", 10)  # type: ignore[arg-type]


def random_instance(rng: random.Random) -> tuple[list[int], int]:
    """Up to 12 sizes, crowded near cap/2, cap/3, 2 cap/3, cap/4, cap/5, 1 and cap, where a
    rounding mistake in a bound shows; a quarter of the cases uniform."""
    cap = rng.choice([rng.randint(1, 40), 60, 61, 99, 100, 101])
    n = rng.randint(0, 12)
    if rng.random() < 0.25:
        return [rng.randint(0, cap) for _ in range(n)], cap
    centres = [cap // 2, cap // 3, (cap + 2) // 3, 2 * cap // 3, cap // 4, cap // 5, cap, 1]
    return [min(cap, max(0, rng.choice(centres) + rng.randint(-3, 3))) for _ in range(n)], cap


def model_closing_fit(sizes: list[int], cap: int) -> list[list[int]]:
    """Closing fit decreasing as a rule on small inputs (the pair search never runs out of
    tries there): each bin opens with the largest remaining item (lowest index on ties);
    while a remaining item fits the room, take one of exactly the room, else the pair of
    total exactly the room whose smaller item is largest (larger item first), else the
    largest item that fits; a closed bin (room 0) still takes zero-size items."""
    remaining = list(range(len(sizes)))

    def take(size: int) -> int:
        i = min(j for j in remaining if sizes[j] == size)
        remaining.remove(i)
        return i

    bins = []
    while remaining:
        first = take(max(sizes[j] for j in remaining))
        current, room = [first], cap - sizes[first]
        while remaining and min(sizes[j] for j in remaining) <= room:
            count = {s: sum(1 for j in remaining if sizes[j] == s) for s in {sizes[j] for j in remaining}}
            if room in count:
                current.append(take(room))
                room = 0
                continue
            smalls = [s for s in count if 2 * s <= room and count.get(room - s, 0) > (room - s == s)]
            if smalls:
                small = max(smalls)
                current.append(take(room - small))
                current.append(take(small))
                room = 0
                continue
            size = max(s for s in count if s <= room)
            current.append(take(size))
            room -= size
        bins.append(current)
    return bins


def test_closing_fit_follows_its_rule() -> None:
    rng = random.Random(15)
    for _ in range(400):
        sizes, cap = random_instance(rng)
        assert closing_fit_decreasing(sizes, cap) == model_closing_fit(sizes, cap), (sizes, cap)
    # Room 4 after the 6: no 4 left, the pair 2 + 2 closes it (not the 3, which leaves 1).
    assert closing_fit_decreasing([6, 3, 2, 2], 10) == [[0, 2, 3], [1]]
    # Room 10 after the 10: pairs 7 + 3 and 6 + 4 both close it; the one with the larger
    # small item (6 + 4) is taken.
    assert closing_fit_decreasing([10, 7, 6, 4, 3], 20) == [[0, 2, 3], [1, 4]]
    with pytest.raises(ValueError, match=r"^an item is larger than the capacity 3$"):
        closing_fit_decreasing([2, 4], 3)


def closing_budget_instance(fillers: int, pair_bins: int, partner_small: int) -> list[int]:
    """``fillers`` bins of 9991 + 7 (room 9: no exact item, no pair, so a search that finds
    nothing), ``pair_bins`` bins of 9980 + 10 + 10 (room 20: closed by the pair 10 + 10), then
    the key bin 9700 (room 300): smalls 100..139 (the pair search walks down from 139), one
    partner 300 - ``partner_small``, and a decoy 250 that the bin takes when no pair is
    found (room 50 left, which nothing fits)."""
    sizes = [9991, 7] * fillers + [9980, 10, 10] * pair_bins + [9700, 250]
    return sizes + list(range(100, 140)) + [300 - partner_small]


def key_bin(sizes: list[int]) -> list[int]:
    bins = closing_fit_decreasing(sizes, 10_000)
    return next(sorted(sizes[i] for i in b) for b in bins if sizes[b[0]] == 9700)


def test_closing_fit_pair_search_stops_when_its_tries_run_out() -> None:
    # The budget is 16 n + 1024 tries; a search that finds no pair is charged the full
    # _CLOSING_TRIES (64), a found pair 1. 53 fillers, n = 2 * 53 + 43 = 149: the key bin
    # has 16 * 149 + 1024 - 53 * 64 = 16 tries left, so it tries the smalls 139 down to 124.
    assert key_bin(closing_budget_instance(53, 0, 123)) == [250, 9700]  # 123 + 177: not reached
    assert key_bin(closing_budget_instance(53, 0, 124)) == [124, 176, 9700]  # the 16th try
    # 54 fillers and one pair bin, n = 154: 16 * 154 + 1024 - 54 * 64 - 1 = 31 tries left.
    assert key_bin(closing_budget_instance(54, 1, 109)) == [109, 191, 9700]  # the 31st try
    assert key_bin(closing_budget_instance(54, 1, 108)) == [250, 9700]


def model_minimum_bin_slack(sizes: list[int], cap: int) -> list[list[int]]:
    """Minimum bin slack as its docstring states it, by brute force over subsets (small
    inputs, default budget never spent): each bin opens with the largest remaining positive
    item (lowest index on ties); the other remaining items that fit its room are added largest
    first until some subset of them fills the room exactly, in units of the gcd g of the
    positive sizes below the cap (room // g units); of the subsets of the added items with the
    largest total within the room, the one that keeps the larger items is taken (the last
    added item is left out whenever it can be); zero-size items join the first bin."""
    unit = 0
    for s in sizes:
        if s < cap:
            unit = math.gcd(unit, s)
    unit = unit or 1
    remaining = sorted((i for i in range(len(sizes)) if sizes[i]), key=lambda i: (-sizes[i], i))
    bins = []
    while remaining:
        first = remaining.pop(0)
        target = (cap - sizes[first]) // unit
        added: list[int] = []
        for i in remaining:
            if sizes[i] // unit > target:
                continue
            added.append(i)
            if any(sum(sizes[j] // unit for j in sub) == target for sub in subsets(added)):
                break
        best = max(t for sub in subsets(added) if (t := sum(sizes[j] // unit for j in sub)) <= target)
        # Of the subsets summing to ``best``, the one whose membership, read from the last
        # added item back, is smallest: leave the later (smaller) items out when possible.
        chosen = min(
            (sub for sub in subsets(added) if sum(sizes[j] // unit for j in sub) == best),
            key=lambda sub: [i in sub for i in reversed(added)],
        )
        bins.append([first, *chosen])
        remaining = [i for i in remaining if i not in chosen]
    zeros = [i for i in range(len(sizes)) if not sizes[i]]
    if zeros:
        if bins:
            bins[0].extend(zeros)
        else:
            bins.append(zeros)
    return bins


def subsets(items: list[int]) -> list[list[int]]:
    """Every subset of ``items``, each in the order of ``items``."""
    result: list[list[int]] = [[]]
    for i in items:
        result += [[*sub, i] for sub in result]
    return result


def test_minimum_bin_slack_follows_its_rule() -> None:
    rng = random.Random(16)
    for case in range(300):
        if case % 2:
            sizes, cap = random_instance(rng)
        else:  # multiples of a gcd against a cap that is not one (plus a cap-sized item)
            unit = rng.choice([2, 3, 10])
            cap = unit * rng.randint(3, 12) + rng.randint(1, unit - 1)
            sizes = [unit * rng.randint(0, cap // unit) for _ in range(rng.randint(0, 10))]
            sizes += [cap] * rng.randint(0, 1)
        if len(sizes) <= 10:
            assert minimum_bin_slack(sizes, cap) == model_minimum_bin_slack(sizes, cap), (sizes, cap)
    # Units of 10 against cap 1008: 49 + 29 + 22 (units) fills the room of 51 exactly.
    scaled = [10 * s for s in [49, 41, 34, 33, 29, 26, 26, 22, 20, 19]]
    assert minimum_bin_slack(scaled, 1008) == [[0, 4, 7], [1, 3, 5], [2, 6, 8, 9]]
    # A cap-sized item does not join the gcd (10 stays the unit, not gcd(10, 1008) = 2).
    assert minimum_bin_slack([1008, 500, 300, 200, 150, 40], 1008) == [[0], [1, 2, 3], [4, 5]]


def test_minimum_bin_slack_budget_counts_the_items_scanned() -> None:
    sizes, cap = [49, 41, 34, 33, 29, 26, 26, 22, 20, 19], 100
    # The 49 (room 51) scans 41, 34, 33, 29, 26, 26, 22: 29 + 22 closes it (7 steps). The
    # rest by best-fit decreasing: 41 + 34 + 20, 33 + 26 + 26, 19.
    for budget in (1, 7):
        assert minimum_bin_slack(sizes, cap, budget) == [[0, 4, 7], [1, 2, 8], [3, 5, 6], [9]]
    # 8 steps: the 41 (room 59) is packed too, scanning 34, 33, (29 taken), 26: 33 + 26.
    full = [[0, 4, 7], [1, 3, 5], [2, 6, 8, 9]]
    assert minimum_bin_slack(sizes, cap, 8) == full
    assert minimum_bin_slack(sizes, cap) == full
    # The 12 (room 1) fits nothing and scans nothing; the 9 scans only the items that fit its
    # room 4, the first 4 closes it: 1 step, then best fit: 9 + 4, 8.
    assert minimum_bin_slack([12, 9, 9, 8, 4, 4], 13, 1) == [[0], [1, 4], [2, 5], [3]]
    # The first 5 scans the second (1 step); the next 5 scans from the 4 on, 4, 3, 2 (3
    # steps): 3 + 2 closes it. Budget 2: the second bin is still packed by the bitset.
    assert minimum_bin_slack([5, 5, 5, 4, 3, 2, 1], 10, 2) == [[0, 1], [2, 4, 5], [3, 6]]


def test_minimum_bin_slack_scans_at_most_2_26_bits_per_bin() -> None:
    # cap / gcd = 65,536 bits: a bin scans at most 2**26 / 65,536 = 1,024 items.
    bins = minimum_bin_slack([1] * 1100, 65_536)
    assert bins == [list(range(1025)), list(range(1025, 1100))]
    # 2**26 / 65,535 = 1,024.02: again 1,024 items.
    assert minimum_bin_slack([1] * 1100, 65_535) == bins


def test_minimum_bin_slack_bitset_width_limit() -> None:
    # No size below the cap but 0: unit 1, 100,000 bits > 65,536: best-fit decreasing,
    # which puts the 0 into the newest of the bins with equal room.
    assert minimum_bin_slack([100_000, 100_000, 0], 100_000) == [[0], [1, 2]]
    # Even sizes, cap 131,073: 65,536 units of 2, just within the limit: the bitset packs
    # the 299 x 1310 tokens (and a 2) into 3 bins, where best fit needs 4.
    sizes = [1310 * s for s in [49, 41, 34, 33, 29, 26, 26, 22, 20, 19]] + [2]
    assert len(minimum_bin_slack(sizes, 131_073)) == 3
    assert len(best_fit_decreasing(sizes, 131_073)) == 4


def test_minimum_bin_slack_default_budget_is_20_n_plus_50000() -> None:
    # 600 items of 601 and 6,200 of 2, cap 1000: each 601 leaves room 399 (odd), which no
    # set of 2s fills exactly, so its bin scans all 6,200 positions of 2s (placed or not)
    # and takes 199 of them. The budget, 20 * 6,800 + 50,000 = 186,000 = 30 * 6,200, is
    # spent by exactly 30 such bins; best-fit decreasing packs the rest: the 570 other 601s
    # alone, then the 230 2s into the newest bin first (199 fill it to 999, 31 go to the
    # one before it).
    bins = minimum_bin_slack([601] * 600 + [2] * 6200, 1000)
    assert [len(b) for b in bins] == [200] * 30 + [1] * 568 + [32, 200]


def test_split_at_its_own_count_returns_copies_of_the_bins() -> None:
    bins = [[0, 2], [1], [3, 4]]
    out = split(Rule.sums([5, 6, 5, 3, 3], 12), bins, 3)
    assert out == [[0, 2], [1], [3, 4]]
    out[0].append(9)
    assert bins[0] == [0, 2]  # not modified (the caller rebalances the result in place)


# Eight items at caps whose bitset would be gigabytes (issue 45, item 6): best fit ends
# above the cheap bounds on each, so closing fit's pair search runs.
HUGE_CAPS = [
    ([240211157, 607701921, 87771155, 286392333, 391799587, 317347197, 606070171, 573694014], 2**30),
    ([460019475650, 684766200384, 339943420271, 738067512090, 155885034558, 188343991102,
      351025551192, 302705182381], 2**40),
]


@pytest.mark.parametrize(("costs", "cap"), HUGE_CAPS)
def test_a_huge_cap_plans_in_memory_and_time_bounded_by_the_items(
    costs: list[int], cap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time
    import tracemalloc

    from seqlen_balancing.planning import packing, search

    ran: list[int] = []
    real_closing_fit = packing._closing_fit

    def spied(*args: Any) -> Any:
        ran.append(1)
        return real_closing_fit(*args)

    monkeypatch.setattr(search, "_closing_fit", spied)
    start = time.process_time()
    plan = plan_micro_batches([1] * 8, cap, costs=costs)  # costs in bytes, say
    seconds = time.process_time() - start
    tracemalloc.start()
    try:
        plan_micro_batches([1] * 8, cap, costs=costs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ran  # closing fit (its pair search) ran
    assert len(plan) == brute_force_optimum(costs, cap) == 4
    assert_packing(plan, costs, cap)
    assert peak < 4 << 20, peak
    assert seconds < 1.0, seconds


def test_closing_fit_at_a_huge_cap_is_the_same_rule_as_on_bitsets() -> None:
    # Scaling every size and the cap by k keeps every comparison and every exact sum the
    # rule looks at, so the bins are those of the small cap (searched on bitsets); past
    # 2**16 the sizes are looked up instead (none of the cap's width is allocated).
    rng = random.Random(3)
    for trial in range(60):
        cap = rng.choice([100, 1000, 4096])
        sizes = [rng.randint(0, cap) for _ in range(rng.randint(1, 200))]
        if trial % 3 == 0:
            sizes = [rng.choice([cap // 2, cap // 4, rng.randint(0, cap)]) for _ in sizes]
        k = (1 << 50) + 1 if trial % 2 else 3**30
        assert closing_fit_decreasing([k * s for s in sizes], k * cap) == closing_fit_decreasing(sizes, cap)
