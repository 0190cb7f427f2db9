"""search.py: the count search's packers, the rules each serves, and that the search stops
at the bound."""

from __future__ import annotations

import random

import pytest

from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning import search
from seqlen_balancing.planning.planner import (
    analyse,
)
from seqlen_balancing.planning.rule import Rule
from seqlen_balancing.planning.search import _close_gap


def served(rule: Rule) -> list[str]:
    return [packer.name for packer in search.PACKERS if packer.serves(rule)]


def test_each_rule_gets_the_packers_that_serve_it_in_order() -> None:
    # Plain sums: exactly the search the library always ran (the never-worse-than-verl
    # guarantee rests on Karmarkar-Karp being among them).
    assert served(Rule.sums([5] * 10, 10)) == [
        "best fit decreasing", "closing fit decreasing", "minimum bin slack",
        "exchange search", "exact search", "Karmarkar-Karp",
    ]
    assert "minimum bin slack" not in served(Rule.sums([5] * 5000, 10))  # over 4,096 items
    assert "exact search" not in served(Rule.sums([5] * 41, 10))  # over 40 items
    assert served(Rule.sums([5] * 10, 10, limit=3)) == [
        "best fit decreasing", "row filling", "randomized best fit",
        "the summed plan cut to the limit", "exchange search", "exact search", "Karmarkar-Karp",
    ]
    assert served(Rule.padded([0] * 10, [5] * 10, 50)) == [
        "sorted rule", "best fit decreasing", "randomized best fit",
    ]


def test_a_packing_at_the_bound_ends_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a sample limit, where best fit meets the bound (here the rows': 64 samples, 8
    per micro-batch), no other packer runs."""
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a packer ran although the count met the bound")

    for name in ("row_filling", "randomized_best_fit", "repack", "exact_packing", "_cut_summed"):
        monkeypatch.setattr(search, name, forbidden)
    result = analyse([100] * 64, 16384, PlanOptions(max_samples_per_micro_batch=8))
    assert (result.min_count, result.lower_bound, result.bound_name) == (8, 8, "samples per micro-batch")


def test_the_count_is_at_the_bound_where_the_limit_and_the_cap_both_bind() -> None:
    """Lengths whose tokens fill about as many micro-batches as their rows do: the count meets
    the larger of ceil(tokens / cap) and ceil(samples / limit) (both spelled out here) on
    these seeds, where best fit alone is well above it."""
    for seed in range(6):
        rng = random.Random(seed)
        lengths = [rng.randint(100, 1900) for _ in range(256)]
        limit = 16
        floor = max(-(-sum(lengths) // 16384), -(-len(lengths) // limit))
        result = analyse(lengths, 16384, PlanOptions(max_samples_per_micro_batch=limit))
        assert result.min_count == floor == result.lower_bound, seed


def sum_close_gap(sizes: list[int], cap: int, packing: list[list[int]], lower: int) -> list[list[int]]:
    """The exchange search step under the summed-cost rule of ``sizes`` and ``cap``."""
    return _close_gap(Rule.sums(sizes, cap), packing, lower)


def fewest_bins(sizes: list[int], cap: int) -> int:
    """Brute force: the fewest bins of ``cap`` for ``sizes`` (dynamic programming over the
    subsets packed so far, keeping the fewest bins and then the lightest open bin)."""
    n = len(sizes)
    best: list[tuple[int, int] | None] = [None] * (1 << n)
    best[0] = (1, 0)
    for mask in range(1 << n):
        state = best[mask]
        if state is None:
            continue
        bins, load = state
        for i in range(n):
            if not mask >> i & 1:
                step = (bins, load + sizes[i]) if load + sizes[i] <= cap else (bins + 1, sizes[i])
                seen = best[mask | 1 << i]
                if seen is None or step < seen:
                    best[mask | 1 << i] = step
    last = best[-1]
    assert last is not None
    return last[0]


def _is_packing(bins: list[list[int]], sizes: list[int], cap: int) -> bool:
    return sorted(g for b in bins for g in b) == list(range(len(sizes))) and all(
        b and sum(sizes[g] for g in b) <= cap for b in bins
    )


@pytest.mark.parametrize(
    ("sizes", "cap"),
    [
        # One dominant bin (39 + 37); the search reaches 4 only from the reduced items.
        ([22, 37, 23, 28, 31, 28, 39, 35, 35, 19], 77),
        # The closing-fit packing of the reduced items is the one the search completes.
        ([47, 60, 34, 39, 49, 30, 31, 54, 50, 55, 31, 34, 44, 30, 50, 40, 50, 41, 55, 33,
          59, 54, 30, 45, 30, 54, 42, 33, 38, 35, 45, 29, 37, 49, 43, 33, 50, 31], 116),
        # The minimum-bin-slack packing wins the tie with best fit (its waste sits last).
        ([26, 25, 42, 35, 27, 30, 29, 41, 39, 32, 39, 34, 28, 16, 41, 38, 17, 21, 25, 22,
          22, 29, 30, 18, 43, 41, 44, 16, 30, 33, 28, 15, 32, 22, 40, 34, 16, 18], 75),
        # Closing fit is kept only when strictly better than best fit.
        ([31, 24, 23, 27, 28, 17, 16, 32, 32, 24, 15, 31, 22, 18, 28, 15, 22, 29, 26, 27,
          19, 31, 30, 25, 21, 27, 28, 33, 22, 19, 31, 33, 33, 21, 24, 17, 23, 15, 23, 15], 63),
    ],
)
def test_count_reaches_the_volume_bound(sizes: list[int], cap: int) -> None:
    # Oracle: ceil(total / cap) bins are needed by volume alone; these batches fit exactly
    # that many, which best fit decreasing alone misses.
    volume = -(-sum(sizes) // cap)
    analysis = analyse(sizes, cap)
    assert (analysis.min_count, analysis.lower_bound, analysis.proven_optimal) == (volume, volume, True)
    assert len(analysis._packing) == volume and _is_packing(analysis._packing, sizes, cap)


def test_minimum_bin_slack_runs_up_to_4096_groups() -> None:
    # 4,084 empty samples and twelve that need 4 micro-batches by volume (ceil(526 / 133)),
    # which minimum-bin-slack packing reaches and best fit and closing fit miss (5 each).
    # 4,096 groups is the largest batch that packing runs on; the empty samples cost it
    # nothing.
    sizes = [0] * 4084 + [51, 23, 27, 54, 63, 24, 58, 41, 58, 35, 47, 45]
    analysis = analyse(sizes, 133)
    assert (analysis.n_groups, analysis.min_count, analysis.proven_optimal) == (4096, 4, True)
    assert _is_packing(analysis._packing, sizes, 133)


def test_count_without_dominant_bins_matches_brute_force() -> None:
    # No item is too large to share a bin with two others, so the search runs on the whole
    # batch; it cannot prove its count (the volume bound is ceil(90 / 23) = 4) but reaches
    # the optimum of 5 that brute force finds.
    sizes, cap = [9, 8, 10, 11, 11, 7, 5, 11, 10, 8], 23
    analysis = analyse(sizes, cap)
    assert fewest_bins(sizes, cap) == 5
    assert analysis.min_count == 5 and _is_packing(analysis._packing, sizes, cap)


def test_close_gap_never_returns_more_bins_than_it_was_given() -> None:
    # 48 cannot share a bin with two others (48 + 13 + 13 > 61), so the reduction fixes the
    # bin 48 + 13 (item 11, the last 13) and searches the other ten items, where it finds 4
    # bins (their optimum is 3: 13+16+17+15, 19+21+18, 23+18+18, but the search misses it).
    # The given packing (hand-checked loads 61, 58, 59, 61) pairs 48 with the other 13 and
    # has 4 bins, the volume bound ceil(239 / 61): the result must not be worse.
    sizes, cap = [13, 16, 19, 21, 23, 17, 15, 18, 18, 18, 48, 13], 61
    given = [[11, 1, 5, 6], [2, 3, 7], [4, 8, 9], [10, 0]]
    assert [sum(sizes[g] for g in b) for b in given] == [61, 58, 59, 61]
    got = sum_close_gap(sizes, cap, [list(b) for b in given], 4)
    assert len(got) == 4 and _is_packing(got, sizes, cap)


def test_close_gap_starts_from_the_given_packing_restricted() -> None:
    # Same batch; the given packing holds an optimal packing of the ten items besides the
    # reduction's bin (loads 61, 58, 59) and 48 and 13 alone: 5 bins. Restricted to those
    # ten items it has 3 bins, which the fresh packings of them miss, so with the reduction's
    # bin 48 + 13 the result has 4, the volume bound ceil(239 / 61).
    sizes, cap = [13, 16, 19, 21, 23, 17, 15, 18, 18, 18, 48, 13], 61
    given = [[0, 1, 5, 6], [2, 3, 7], [4, 8, 9], [10], [11]]
    got = sum_close_gap(sizes, cap, [list(b) for b in given], 4)
    assert len(got) == 4 and _is_packing(got, sizes, cap)


def test_close_gap_starts_from_the_best_fresh_packing() -> None:
    # 110 cannot share a bin with two others (110 + 23 + 23 > 133): the reduction fixes the
    # bin 110 + 23 and packs the twelve other items (526 tokens) afresh; the given packing
    # (one item per bin) restricts to nothing useful. The twelve fit the 4 bins their volume
    # needs (the minimum-bin-slack packing reaches it where best fit and closing fit leave
    # 5 the search cannot close), so the result has 5 bins, the volume bound ceil(659 / 133).
    sizes = [51, 23, 27, 54, 63, 24, 58, 41, 58, 35, 47, 45, 110, 23]
    cap = 133
    got = sum_close_gap(sizes, cap, [[g] for g in range(len(sizes))], 5)
    assert len(got) == 5 and _is_packing(got, sizes, cap)


def test_the_reduction_is_made_once_for_the_bound_and_the_exchange_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The Martello-Toth reduction of the whole batch serves both the bound (level
    # "reduction") and the exchange search's start: one call per analysis.
    import seqlen_balancing.planning.bounds as bounds_module
    import seqlen_balancing.planning.rule as rule_module

    original = rule_module.dominant_bins
    calls: list[int] = []

    def counted(sizes: list[int], cap: int) -> tuple[list[list[int]], list[int]]:
        calls.append(len(sizes))
        return original(sizes, cap)

    monkeypatch.setattr(rule_module, "dominant_bins", counted)
    monkeypatch.setattr(bounds_module, "dominant_bins", counted)
    searched = 0
    for seed in range(40):
        rng = random.Random(seed)
        sizes = [rng.choice([rng.randint(100, 2000), rng.randint(5000, 8000)]) for _ in range(150)]
        calls.clear()
        analyse(sizes, 16384)
        assert calls in ([], [150]), seed  # at most once, on the whole batch
        searched += len(calls)
    assert searched > 0


def _bfd_count(sizes: list[int], cap: int) -> int:
    """Best fit decreasing spelled out: each item, largest first, into the fullest bin it fits."""
    rooms: list[int] = []
    for size in sorted(sizes, reverse=True):
        fitting = [b for b, room in enumerate(rooms) if room >= size]
        if fitting:
            b = min(fitting, key=lambda b: rooms[b])
            rooms[b] -= size
        else:
            rooms.append(cap - size)
    return len(rooms)


# Best fit, closing fit and minimum bin slack all end at 6; the exchange and exhaustive
# searches reach 5 = ceil(99 / 20), the volume bound.
HARD = [11, 7, 12, 5, 9, 11, 4, 12, 3, 8, 10, 7]


def test_a_large_batch_runs_only_the_packers_bounded_in_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from seqlen_balancing import plan_micro_batches

    assert len(plan_micro_batches(HARD, 20)) == -(-sum(HARD) // 20) == 5
    # As if the 12 items were a large batch (over _SEARCH_ALWAYS) and n x count over
    # Karmarkar-Karp's budget: the exchange and exhaustive searches do not run, whatever
    # the gap (here one in 6), and the search stops at best fit's count, reporting the
    # cheap bound it stopped above.
    monkeypatch.setattr(search, "_SEARCH_ALWAYS", 4)
    monkeypatch.setattr(search, "_KK_BUDGET", 12 * 5 - 1)
    assert len(plan_micro_batches(HARD, 20)) == _bfd_count(HARD, 20) == 6
    result = analyse(HARD, 20)
    assert (result.min_count, result.lower_bound, result.bound_name) == (6, 5, "L2")


# Best fit, closing fit and minimum bin slack end at 6; verl 0.9.1's Karmarkar-Karp at
# ceil(245 / 50) = 5 fits
VERL_WINS = [8, 10, 15, 28, 8, 30, 22, 27, 12, 17, 24, 17, 27]


def test_a_large_batch_keeps_verls_karmarkar_karp_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from seqlen_balancing import plan_micro_batches
    from seqlen_balancing.planning.verl_rule import verl_counts

    def refused(*args: object, **kwargs: object) -> list[list[int]]:
        raise AssertionError("the exchange search ran")

    monkeypatch.setattr(search, "_SEARCH_ALWAYS", 4)
    monkeypatch.setattr(search, "_close_gap", refused)
    assert _bfd_count(VERL_WINS, 50) == 6
    plan = plan_micro_batches(VERL_WINS, 50)
    assert len(plan) == verl_counts([VERL_WINS], 50).counts[0] == 5
    assert sorted(i for mb in plan for i in mb) == list(range(13))
    assert max(sum(VERL_WINS[i] for i in mb) for mb in plan) <= 50


def test_a_large_batch_one_micro_batch_above_its_bound_skips_the_exchange_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 70,000 lognormal lengths at cap 4,096 (over _SEARCH_ALWAYS): closing fit ends one
    # micro-batch above the cheap bounds (24,113 against 24,112); the exchange search, which
    # does not close that gap either (issue 33), is not run
    import math

    from seqlen_balancing import lower_bound, plan_micro_batches

    def refused(*args: object, **kwargs: object) -> list[list[int]]:
        raise AssertionError("the exchange search ran")

    rng = random.Random(0)
    sizes = [max(1, min(4096, int(rng.lognormvariate(math.log(1000), 1.0)))) for _ in range(70_000)]
    monkeypatch.setattr(search, "_close_gap", refused)
    plan = plan_micro_batches(sizes, 4096)
    gap = len(plan) - lower_bound(sizes, 4096)
    assert gap == 1
    assert sorted(i for mb in plan for i in mb) == list(range(70_000))
    assert max(sum(sizes[i] for i in mb) for mb in plan) <= 4096
    # the same batch as a small one (every search while a gap remains): the search runs
    monkeypatch.setattr(search, "_SEARCH_ALWAYS", 70_000)
    with pytest.raises(AssertionError, match="the exchange search ran"):
        plan_micro_batches(sizes, 4096)


def test_the_count_search_returns_a_frozen_count_and_writes_nothing() -> None:
    # over_cap="alone" on a 4-cap: 9 alone; the rest [3, 2, 2, 1, 1, 1, 1, 1] fill 3 bins of 4
    sizes, cap = [3, 9, 2, 2, 1, 1, 1, 1, 1], 4
    rule = Rule.sums(sizes, cap)
    found = search._set_aside(rule, sizes, 1, [1], None)
    rest = [3, 2, 2, 1, 1, 1, 1, 1]
    assert found.min_count == 1 + fewest_bins(rest, cap) == 4 == len(found.packing)
    assert (found.lower_bound, found.over, found.packing[0]) == (4, [1], [1])
    assert sorted(i for b in found.packing for i in b) == list(range(9))
    assert all(sum(sizes[i] for i in b) <= cap for b in found.packing[1:])
    assert found.rest is not None and found.rest.index == [0, 2, 3, 4, 5, 6, 7, 8]
    assert rule.sizes == sizes  # the rule is read, not changed
    with pytest.raises(AttributeError):  # frozen: a step's result is never written into
        found.min_count = 3  # type: ignore[misc]
