"""packing.py: split_to_count against a model of its docstring, and hand-checked edges.

These kill the ``mutmut`` mutants the property tests let through (README, Development).
"""

from __future__ import annotations

import random

import pytest

from seqlen_balancing.packing import best_fit_decreasing, minimum_bin_slack, split_to_count


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
