"""repack.py: the exchange search (reduce_bins, its moves and budgets) and the exact search,
against their docstrings' rules, hand-checked cases and the brute-force optimum."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles import brute_force_optimum
from seqlen_balancing.planning.packing import (
    best_fit,
    best_fit_decreasing,
)
from seqlen_balancing.planning.planner import analyse
from seqlen_balancing.planning.repack import _FixedCount, exact_packing, reduce_bins, repack
from seqlen_balancing.planning.rule import Rule
from test_packing import assert_packing, small_instances
from test_rule import fewest, random_case
from test_rule_algorithms import assert_plan


def test_reduce_bins_is_deterministic_where_its_kicks_matter() -> None:
    # Documented: the random kicks use a seed derived from the input, so equal inputs give
    # equal packings (here the kicks run until the budget is spent).
    sizes = [31, 26, 36, 33, 21, 36, 37, 32, 30, 39, 38, 60, 43, 25, 58, 41]
    start = [[i] for i in range(len(sizes))]
    first = reduce_bins(sizes, 100, start, 1, budget=10_000)
    assert sorted(i for b in first for i in b) == list(range(len(sizes)))
    assert all(sum(sizes[i] for i in b) <= 100 for b in first)
    assert brute_force_optimum(sorted(sizes, reverse=True), 100) <= len(first) < len(start)
    for _ in range(2):
        assert reduce_bins(sizes, 100, start, 1, budget=10_000) == first


def test_free_sums_offers_every_sum_of_one_to_three_free_items() -> None:
    rng = random.Random(17)
    for f in (1, 2, 3, 15, 16, 17, 63, 64, 65):
        sizes = [rng.randint(1, 10_000) for _ in range(f + 3)]
        free = rng.sample(range(len(sizes)), f)
        search = _FixedCount(Rule.sums(sizes, 20_000), [], list(free), seed=0)
        keys, codes = search._free_sums()
        # Documented: pairs for pools of up to 64 items, triples for up to 16.
        most = 3 if f <= 16 else 2 if f <= 64 else 1
        expected = {
            sum(sizes[i] for i in subset)
            for r in range(1, most + 1)
            for subset in itertools.combinations(free, r)
        }
        assert keys == sorted(expected), f
        for key, code in zip(keys, codes, strict=True):
            subset = search._decode(code)
            assert 1 <= len(subset) <= most and len(set(subset)) == len(subset)
            assert set(subset) <= set(free) and sum(sizes[i] for i in subset) == key


def test_outs_offers_every_set_of_up_to_two_items_of_a_bin() -> None:
    rng = random.Random(18)
    for m in (0, 1, 2, 5, 12, 13):
        sizes = [rng.randint(1, 100) for _ in range(m + 2)]
        items = rng.sample(range(len(sizes)), m)
        search = _FixedCount(Rule.sums(sizes, 10_000), [list(items)], [], seed=0)
        out_sizes, out_codes = search._outs(0)
        most = 2 if m <= 12 else 1  # documented: pairs for bins of up to 12 items
        expected = sorted(
            (sum(sizes[i] for i in subset), tuple(sorted(subset)))
            for r in range(most + 1)
            for subset in itertools.combinations(items, r)
        )
        got = sorted(
            (size, tuple(sorted(search._decode(code))))
            for size, code in zip(out_sizes, out_codes, strict=True)
        )
        assert got == expected, m
        assert search._outs(0) == (out_sizes, out_codes)  # cached until the bin changes


def test_best_move_gains_the_most_load() -> None:
    rng = random.Random(19)
    for _ in range(300):
        cap = rng.randint(10, 60)
        sizes = [rng.randint(1, cap // 2) for _ in range(rng.randint(2, 9))]
        order = list(range(len(sizes)))
        rng.shuffle(order)
        cut = rng.randint(1, len(order) - 1)
        packed, free = order[:cut], order[cut:]
        while sum(sizes[i] for i in packed) > cap:
            free.append(packed.pop())
        search = _FixedCount(Rule.sums(sizes, cap), [packed], free, seed=0)
        keys, codes = search._free_sums()
        gain, out_code, in_code = search._best_move(0, keys, codes)
        load = sum(sizes[i] for i in packed)
        best = 0  # every exchange of up to two packed items for one to three free ones
        for r_out in range(3):
            for out in itertools.combinations(packed, r_out):
                for r_in in range(1, 4):
                    for into in itertools.combinations(free, r_in):
                        delta = sum(sizes[i] for i in into) - sum(sizes[i] for i in out)
                        if load + delta <= cap:
                            best = max(best, delta)
        assert gain == best, (sizes, cap, packed, free)
        if gain:
            given, taken = search._decode(out_code), search._decode(in_code)
            assert set(given) <= set(packed) and set(taken) <= set(free)
            assert sum(sizes[i] for i in taken) - sum(sizes[i] for i in given) == gain


def test_best_move_of_a_full_bin_charges_every_evaluation_it_skips() -> None:
    # A bin at the cap gains nothing; the work charged is what listing its subsets costs:
    # the empty set, each item, and (bins of up to 12 items) each pair: 1 + m + m(m-1)/2.
    for m, expected in ((1, 2), (4, 1 + 4 + 6), (12, 1 + 12 + 66), (13, 1 + 13)):
        sizes = [10] * m + [3, 5]
        search = _FixedCount(Rule.sums(sizes, 10 * m), [list(range(m))], [m, m + 1], seed=0)
        keys, codes = search._free_sums()
        before = search.work
        assert search._best_move(0, keys, codes) == (0, 0, 0)
        assert search.work - before == expected, m
        search.outs[0] = None
        search.loads[0] -= 3  # room 3: the free item of size 3 now fits
        assert search._best_move(0, keys, codes)[0] == 3


def best_exchange_gain(sizes: list[int], cap: int, packed: list[int], free: list[int]) -> int:
    """Largest load increase of a bin by swapping up to two of its items for one to three
    free items (0: none), trying every such exchange."""
    load = sum(sizes[i] for i in packed)
    best = 0
    for r_out in range(3):
        for out in itertools.combinations(packed, r_out):
            for r_in in range(1, 4):
                for into in itertools.combinations(free, r_in):
                    delta = sum(sizes[i] for i in into) - sum(sizes[i] for i in out)
                    if load + delta <= cap:
                        best = max(best, delta)
    return best


def test_descend_stops_only_where_no_exchange_gains() -> None:
    rng = random.Random(20)
    for _ in range(300):
        cap = rng.randint(10, 40)
        sizes = [rng.randint(1, rng.choice([cap // 4, cap // 2, cap])) for _ in range(rng.randint(3, 12))]
        n_bins = rng.randint(1, 5)
        bins: list[list[int]] = [[] for _ in range(n_bins)]
        free: list[int] = []
        for i in rng.sample(range(len(sizes)), len(sizes)):
            b = rng.randrange(n_bins + 1)
            if b < n_bins and sum(sizes[j] for j in bins[b]) + sizes[i] <= cap:
                bins[b].append(i)
            else:
                free.append(i)
        weight = sum(sizes[i] for i in free)
        search = _FixedCount(Rule.sums(sizes, cap), [list(b) for b in bins], list(free), seed=0)
        search.descend(10**9)
        placed = sorted(i for b in search.bins for i in b)
        assert sorted(placed + search.free) == list(range(len(sizes)))
        assert all(sum(sizes[i] for i in b) <= cap for b in search.bins)
        assert sum(sizes[i] for i in search.free) <= weight
        if search.free:  # a local optimum: no bin gains from any exchange
            for packed in search.bins:
                assert best_exchange_gain(sizes, cap, packed, search.free) == 0, (sizes, bins, free)


def test_descend_spends_no_more_than_its_budget() -> None:
    # Two bins with room and three free items: several exchanges would gain.
    sizes, cap = [5, 5, 3, 4, 2], 10
    search = _FixedCount(Rule.sums(sizes, cap), [[0], [1]], [2, 3, 4], seed=0)
    search.descend(0)  # no budget: no exchange
    assert (search.bins, search.free) == ([[0], [1]], [2, 3, 4])
    # Budget 1: the budget is checked after each exchange, so exactly one is applied (the
    # lighter-or-first bin [0] takes the free pair of the largest total that fits: 3 + 2).
    search.descend(1)
    assert [sorted(b) for b in search.bins] == [[0, 2, 4], [1]]
    assert search.free == [3]


def test_reduce_bins_honours_a_small_budget() -> None:
    # Budget 0: no move is evaluated, the packing comes back as given (empty bins dropped).
    assert reduce_bins([5, 5], 10, [[0], [], [1]], 1, budget=0) == [[0], [1]]
    # Budget 1: one descent step, enough to move the lighter (here: the later) bin's one
    # item into the other bin.
    assert [sorted(b) for b in reduce_bins([5, 5], 10, [[0], [1]], 1, budget=1)] == [[0, 1]]
    assert reduce_bins([5, 5], 10, [[0], [1]], 1) == [[0, 1]]
    # The search stops at the target even where fewer bins would do (1 here).
    assert len(reduce_bins([1, 1, 1], 10, [[0], [1], [2]], 2)) == 2


# A target below the optimum spends the whole budget (100,000 moves by default, 20-80 ms on
# these 9 items): half the examples run the default, half a budget of 2,000 moves.
@given(small_instances, st.integers(0, 9), st.sampled_from([None, 2_000]))
@settings(max_examples=200, deadline=None)
@pytest.mark.slow
def test_reduce_bins_reaches_a_valid_packing_between_opt_and_its_input(
    instance: tuple[list[int], int], target: int, budget: int | None
) -> None:
    sizes, cap = instance
    start = [[i] for i in range(len(sizes))]  # one item per bin: the worst start
    reduced = reduce_bins(sizes, cap, start, target, budget)
    assert_packing(reduced, sizes, cap)
    assert len(reduced) <= len(start)
    if sizes:
        assert brute_force_optimum(sizes, cap) <= len(reduced)
    assert reduce_bins(sizes, cap, start, target, budget) == reduced  # deterministic


def test_reduce_bins_finds_the_perfect_packing_best_fit_misses() -> None:
    sizes, cap = [49, 41, 34, 33, 29, 26, 26, 22, 20, 19], 100  # sum 299: 3 bins if perfect
    bfd = best_fit_decreasing(sizes, cap)
    assert len(bfd) == 4
    assert brute_force_optimum(sizes, cap) == 3
    reduced = reduce_bins(sizes, cap, bfd, target=3)
    assert_packing(reduced, sizes, cap)
    assert len(reduced) == 3
    assert analyse(sizes, cap).min_count == 3


@pytest.mark.slow
def test_repack_and_exact_search_under_a_sample_limit() -> None:
    """The exchange search never breaks the limit; the exact search finds the optimum or
    proves a count impossible, exactly as brute force says."""
    rng = random.Random(14)
    for _ in range(200):
        n = rng.randint(1, 8)
        rule, case = random_case(rng, n, padded=False)
        best = fewest(rule, case)
        packed = best_fit(rule)
        assert_plan(repack(rule, packed, best), n, case)
        for count in range(1, n + 1):
            found, impossible = exact_packing(rule, count, 10**6)
            if count < best:
                assert found is None and impossible
            else:
                assert found is not None and len(found) <= count
                assert_plan(found, n, case)
