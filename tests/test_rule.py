"""rule.py: the one rule's costs, its O(1) per-bin state, its restriction, the sorted rule and
its bounds, each against the rule spelled out here and brute force on small inputs."""

from __future__ import annotations

import itertools
import random

import pytest

from oracles import partitions
from seqlen_balancing.planning.rule import (
    SAMPLE_LIMIT,
    SORTED_RULE,
    Loads,
    Rule,
    fewest_sorted,
    lower_bound,
    rule_bound,
    sorted_bound,
    sorted_cut,
    widest_first,
)


def up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def spelled_cost(items: list[int], case: dict) -> int:
    """A micro-batch's cost written plainly: padded, all its rows x (widest left + widest
    right, rounded up to pad); else the summed sizes."""
    if not items:
        return 0
    if case["padded"]:
        rows = sum(case["rows"][i] for i in items)
        width = max(case["left"][i] for i in items) + max(case["right"][i] for i in items)
        return rows * up(width, case["pad"])
    return sum(case["sizes"][i] for i in items)


def spelled_fits(items: list[int], case: dict) -> bool:
    if case["limit"] is not None and sum(case["rows"][i] for i in items) > case["limit"]:
        return False
    return spelled_cost(items, case) <= case["cap"]


def random_case(rng: random.Random, n: int, *, padded: bool | None = None,
                one_sided: bool = False, equal_rows: bool = False) -> tuple[Rule, dict]:
    padded = rng.random() < 0.5 if padded is None else padded
    rows = [1] * n if equal_rows else [rng.choice([1, 1, 2, 3]) for _ in range(n)]
    limit = rng.choice([None, None, 2, 3, 4, 6])
    if limit is not None:
        limit = max(limit, max(rows))
    pad = rng.choice([1, 1, 4, 8])
    if padded:
        left = [0] * n if one_sided else [rng.randint(0, 30) for _ in range(n)]
        right = [rng.randint(0, 40) for _ in range(n)]
        widest = max(k * up(a + b, pad) for k, a, b in zip(rows, left, right, strict=True))
        cap = rng.randint(max(widest, 1), max(widest, 1) * 4)
        rule = Rule.padded(left, right, cap, rows, pad, limit)
        case = {"padded": True, "left": left, "right": right, "rows": rows, "pad": pad,
                "cap": cap, "limit": limit}
    else:
        sizes = [rng.randint(0, 50) for _ in range(n)]
        cap = rng.randint(max(max(sizes), 1), max(max(sizes), 1) * 4)
        rule = Rule.sums(sizes, cap, rows, limit)
        case = {"padded": False, "sizes": sizes, "rows": rows, "cap": cap, "limit": limit}
    return rule, case


def fewest(rule: Rule, case: dict) -> int:
    """Brute force: the fewest blocks over every partition of the items that fit."""
    return min(len(p) for p in partitions(list(range(rule.n))) if all(spelled_fits(b, case) for b in p))


def test_cost_and_fits_are_the_rule_spelled_out() -> None:
    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(1, 8)
        rule, case = random_case(rng, n)
        for size in range(1, n + 1):
            for items in itertools.combinations(range(n), size):
                assert rule.cost(items) == spelled_cost(list(items), case)
                assert rule.fits(items) == spelled_fits(list(items), case)
        for i in range(n):
            assert rule.sizes[i] == spelled_cost([i], case)  # what an item costs alone
            assert rule.fits_alone(i) == spelled_fits([i], case)


def test_loads_answer_fits_in_one_step_as_the_rule_does() -> None:
    """Adding items one at a time, Loads.fits(b, i) is the rule's verdict on the bin with
    i added, and Loads.cost the bin's cost; removing brings both back."""
    rng = random.Random(2)
    for _ in range(300):
        n = rng.randint(1, 10)
        rule, case = random_case(rng, n)
        count = rng.randint(1, 3)
        loads = Loads(rule, count)
        bins: list[list[int]] = [[] for _ in range(count)]
        for i in rng.sample(range(n), n):
            b = rng.randrange(count)
            assert loads.fits(b, i) == spelled_fits([*bins[b], i], case)
            loads.add(b, i)
            bins[b].append(i)
            assert loads.cost[b] == spelled_cost(bins[b], case)
            assert loads.rows[b] == sum(case["rows"][j] for j in bins[b])
        for b, items in enumerate(bins):
            while items:
                gone = items.pop(rng.randrange(len(items)))
                loads.remove(b, gone, items)
                assert loads.cost[b] == spelled_cost(items, case)
                assert loads.rows[b] == sum(case["rows"][j] for j in items)
        rebuilt = Loads.of(rule, [[0], list(range(1, n))])
        assert rebuilt.cost == [spelled_cost([0], case), spelled_cost(list(range(1, n)), case)]


def test_restrict_is_the_same_rule_on_a_subset_renumbered() -> None:
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(2, 9)
        rule, case = random_case(rng, n)
        subset = sorted(rng.sample(range(n), rng.randint(1, n)))
        sub = rule.restrict(subset)
        assert sub.n == len(subset) and sub.cap == rule.cap and sub.limit == rule.limit
        for size in range(1, len(subset) + 1):
            for local in itertools.combinations(range(len(subset)), size):
                original = [subset[j] for j in local]
                assert sub.cost(local) == spelled_cost(original, case)
                assert sub.fits(local) == spelled_fits(original, case)


@pytest.mark.slow
def test_the_sorted_rule_is_optimal_on_one_sided_rows_of_equal_rows() -> None:
    """fewest_sorted meets the brute-force optimum (rows x width, any pad and limit) when
    every row is padded on one side and every item has the same rows; sorted_bound then
    equals it."""
    rng = random.Random(4)
    for _ in range(250):
        n = rng.randint(1, 7)
        rule, case = random_case(rng, n, padded=True, one_sided=True, equal_rows=True)
        best = fewest(rule, case)
        found = fewest_sorted(rule)
        assert sorted(i for b in found for i in b) == list(range(n))
        assert all(spelled_fits(b, case) for b in found)
        assert len(found) == best
        assert sorted_bound(rule) == best


@pytest.mark.slow
def test_the_sorted_bound_never_exceeds_the_optimum() -> None:
    """Two-sided rows and items of different rows: the bound is a bound, the sorted rule a
    feasible packing (neither proven exact)."""
    rng = random.Random(5)
    for _ in range(250):
        n = rng.randint(1, 7)
        rule, case = random_case(rng, n, padded=True)
        best = fewest(rule, case)
        assert sorted_bound(rule) <= best
        found = fewest_sorted(rule)
        assert all(spelled_fits(b, case) for b in found) and len(found) >= best


@pytest.mark.slow
def test_rule_bound_never_exceeds_the_optimum_and_names_its_source() -> None:
    rng = random.Random(6)
    for _ in range(250):
        n = rng.randint(1, 7)
        rule, case = random_case(rng, n)
        bound, name = rule_bound(rule)
        assert bound <= fewest(rule, case)
        if rule.is_padded:
            assert name in (SORTED_RULE, SAMPLE_LIMIT)
    # the limit's bound: 64 rows of 100 tokens, at most 16 rows: 4, by the rows
    assert rule_bound(Rule.sums([100] * 64, 16384, limit=16)) == (4, SAMPLE_LIMIT)
    # groups of 5 rows under a limit of 8 cannot share: 3 micro-batches, not ceil(15 / 8)
    assert rule_bound(Rule.sums([1, 1, 1], 100, [5, 5, 5], limit=8)) == (3, SAMPLE_LIMIT)


def test_widest_first_and_sorted_cut_by_hand() -> None:
    rule = Rule.padded([0, 5, 0], [10, 10, 3], 60, [1, 2, 1])
    assert widest_first(rule) == [1, 0, 2]  # spans 10, 15, 3
    # 1 alone costs 2 x 15 = 30; with 0: 3 x 15 = 45; with 2 as well: 4 x 15 = 60
    assert sorted_cut(rule, [1, 0, 2]) == [[1, 0, 2]]
    assert sorted_cut(Rule.padded([0, 5, 0], [10, 10, 3], 44, [1, 2, 1]), [1, 0, 2]) == [[1], [0, 2]]


def test_lower_bound_under_the_sample_limit_counts_rows() -> None:
    assert lower_bound([100] * 64, 16384, max_samples_per_micro_batch=16) == 4
    assert lower_bound([100] * 65, 16384, max_samples_per_micro_batch=16) == 5
    with pytest.raises(ValueError, match="item 1 has size 9 and cost 16, larger than the usable"):
        lower_bound([3, 9], 10, pad_to_multiple_of=8)


def test_the_summed_rule_is_inclusive() -> None:
    assert Rule.sums([3, 5], 8).fits([0, 1])
    assert not Rule.sums([3, 6], 8).fits([0, 1])


def test_a_filled_padded_rule_pays_every_micro_batch_at_its_filled_rows() -> None:
    # equal_rows_per_micro_batch: every micro-batch 3 rows (real ones topped up), as wide as
    # its widest, and at most 3 real rows
    rule = Rule.padded([0, 0, 0, 0], [10, 4, 6, 3], 29, limit=3, filled=3)
    assert rule.sizes == [30, 12, 18, 9]  # 3 x each width, alone
    assert rule.cost([1, 3]) == 12 and rule.cost([0]) == 30 and rule.cost([]) == 0
    assert rule.fits([1, 2, 3]) and not rule.fits([0]) and not rule.fits_alone(0)
    loads = Loads.of(rule, [[1, 3], [2]])
    assert loads.cost == [12, 18]
    assert loads.fits(0, 2) and not loads.fits(1, 0)  # 3 x 6 <= 29; 3 x 10 > 29
    loads.add(0, 2)
    assert loads.cost[0] == 18 and not loads.fits(0, 3)  # a fourth row: over the limit
    loads.remove(0, 2, [1, 3])
    assert loads.cost[0] == 12
    rest = rule.restrict([1, 2, 3])
    assert rest.filled == 3 and rest.sizes == [12, 18, 9]
    assert sorted_bound(rest) == 1  # all three: 3 x 6 = 18 <= 29
    # the bound pays the filled rows too: 3 rows x 6 = 18 > 15 on their own, 2 x 6 = 12 filled
    assert sorted_bound(Rule.padded([0] * 3, [4, 6, 3], 15)) == 2
    assert sorted_bound(Rule.padded([0] * 3, [4, 6, 3], 15, filled=2)) == 1


def test_by_workload_is_lpts_order_spelled_out() -> None:
    # LPT takes items by (-workload, -cost, index); Rule.by_workload makes that order from the
    # rule's order by cost, sorting again only where the workloads do not fall along it
    rng = random.Random(3)
    for _ in range(2000):
        n = rng.randint(0, 12)
        sizes = [rng.randint(0, 5) for _ in range(n)]
        kind = rng.randrange(3)
        if kind == 0:
            works = [24576 * s + s * s for s in sizes]  # grows with the size
        elif kind == 1:
            works = [10 - s for s in sizes]  # falls with the size: LPT's order is reversed
        else:
            works = [rng.randint(0, 30) for _ in sizes]
        order, resorted = Rule.sums(sizes, 5).by_workload(works)
        expected = sorted(range(n), key=lambda i: (-works[i], -sizes[i], i))
        assert order == expected
        assert resorted == (expected != sorted(range(n), key=lambda i: (-sizes[i], i)))
