"""Number partitioning: Karmarkar-Karp, greedy, balanced and group partitions, helpers."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlen_balancing import (
    ceildiv,
    get_group_balanced_partitions,
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    greedy_partition,
    karmarkar_karp,
    log_seqlen_unbalance,
    roundup_divisible,
)


def is_exact_cover(parts: list[list[int]], n: int) -> bool:
    return sorted(i for part in parts for i in part) == list(range(n))


def spread(values: list[int], parts: list[list[int]]) -> int:
    sums = [sum(values[i] for i in part) for part in parts]
    return max(sums) - min(sums)


# Case 9.
def test_more_partitions_than_items() -> None:
    with pytest.raises(ValueError, match=r"k_partitions must be in 1..2"):
        get_seqlen_balanced_partitions([5, 5], 3, equal_size=False)


def test_equal_size_needs_divisibility() -> None:
    with pytest.raises(ValueError, match="160 items and k_partitions=64"):
        get_seqlen_balanced_partitions(list(range(160)), 64, equal_size=True)


def test_equal_size_partitions_hold_the_same_count() -> None:
    values = [random.Random(3).randint(1, 4000) for _ in range(160)]
    parts = get_seqlen_balanced_partitions(values, 32, equal_size=True)
    assert len(parts) == 32
    assert [len(part) for part in parts] == [5] * 32
    assert is_exact_cover(parts, 160)
    assert all(part == sorted(part) for part in parts)


@pytest.mark.parametrize(("values", "k"), [([1, 2, 3], 0), ([], 1), ([], 0)])
def test_zero_partitions_or_empty_list(values: list[int], k: int) -> None:
    with pytest.raises(ValueError, match=r"k_partitions|empty list"):
        get_seqlen_balanced_partitions(values, k, equal_size=False)


@given(
    values=st.lists(st.integers(0, 10_000), min_size=1, max_size=60),
    data=st.data(),
    equal_size=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_balanced_partitions_contract(values: list[int], data: st.DataObject, equal_size: bool) -> None:
    n = len(values)
    divisors = [k for k in range(1, n + 1) if n % k == 0] if equal_size else list(range(1, n + 1))
    k = data.draw(st.sampled_from(divisors))
    parts = get_seqlen_balanced_partitions(values, k, equal_size=equal_size)
    assert len(parts) == k
    assert all(parts) and all(part == sorted(part) for part in parts)
    assert is_exact_cover(parts, n)
    if equal_size:
        assert {len(part) for part in parts} == {n // k}


def brute_force_best_spread(values: list[int], k: int) -> int:
    best = None
    for labels in itertools.product(range(k), repeat=len(values)):
        if len(set(labels)) < k:
            continue
        sums = [0] * k
        for value, label in zip(values, labels, strict=True):
            sums[label] += value
        gap = max(sums) - min(sums)
        best = gap if best is None else min(best, gap)
    assert best is not None
    return best


@given(values=st.lists(st.integers(0, 50), min_size=2, max_size=7), k=st.integers(2, 3))
@settings(max_examples=80, deadline=None)
def test_two_way_karmarkar_karp_never_beats_the_optimum(values: list[int], k: int) -> None:
    k = min(k, len(values))
    parts = karmarkar_karp(values, k, equal_size=False)
    assert spread(values, parts) >= brute_force_best_spread(values, k)


def test_karmarkar_karp_two_way_is_the_differencing_result() -> None:
    # 8-7=1, 6-5=1, 4-1=3, 3-1=2: the method ends with a difference of 2 (the optimum is 0).
    parts = karmarkar_karp([8, 7, 6, 5, 4], 2, equal_size=False)
    assert spread([8, 7, 6, 5, 4], parts) == 2


def test_karmarkar_karp_balances_large_k_better_than_greedy() -> None:
    rng = random.Random(11)
    values = [rng.randint(100, 8000) for _ in range(4096)]
    kk = karmarkar_karp(values, 256, equal_size=False)
    greedy = greedy_partition(values, 256, equal_size=False)
    assert len(kk) == 256 and all(kk) and is_exact_cover(kk, 4096)
    assert spread(values, kk) <= spread(values, greedy)


def test_greedy_partition_equal_size() -> None:
    parts = greedy_partition([9, 1, 8, 2, 7, 3], 3, equal_size=True)
    assert sorted(len(part) for part in parts) == [2, 2, 2]
    assert sorted(sum([9, 1, 8, 2, 7, 3][i] for i in part) for part in parts) == [10, 10, 10]


@pytest.mark.torch
def test_partitions_accept_tensors() -> None:
    import torch

    parts = get_seqlen_balanced_partitions(torch.tensor([4, 1, 3, 2]), 2, equal_size=True)
    assert sorted(map(sorted, parts)) == [[0, 1], [2, 3]]


def test_negative_and_float_items_are_refused() -> None:
    with pytest.raises(ValueError, match=r"seqlen_list\[1\] is -3"):
        karmarkar_karp([1, -3], 1, equal_size=False)
    with pytest.raises(TypeError, match=r"seqlen_list\[0\] must be an integer"):
        karmarkar_karp([1.5, 2], 1, equal_size=False)


def test_group_partitions_keep_uid_groups_together() -> None:
    lengths = [5, 5, 5, 1, 1, 1, 9, 9]
    uids = ["a", "a", "a", "b", "b", "b", "c", "c"]
    parts = get_group_balanced_partitions(lengths, uids, 2)
    assert is_exact_cover(parts, 8)
    assert sorted(parts) == [[0, 1, 2, 3, 4, 5], [6, 7]]


def test_group_partitions_join_non_contiguous_repeats() -> None:
    parts = get_group_balanced_partitions([3, 4, 3, 4], ["x", "y", "x", "y"], 2)
    assert sorted(parts) == [[0, 2], [1, 3]]


def test_group_partitions_errors() -> None:
    with pytest.raises(ValueError, match="uid_list has 1 entries but seqlen_list has 2"):
        get_group_balanced_partitions([1, 2], ["a"], 1)
    with pytest.raises(ValueError, match=r"k_partitions must be in 1\.\.2"):
        get_group_balanced_partitions([1, 2, 3], ["a", "a", "b"], 3)


def test_log_seqlen_unbalance_keys_and_values() -> None:
    metrics = log_seqlen_unbalance([1, 2, 3, 4], [[0, 3], [1, 2]], "global_seqlen")
    assert metrics == {
        "global_seqlen/min": 3,
        "global_seqlen/max": 7,
        "global_seqlen/minmax_diff": 4,
        "global_seqlen/balanced_min": 5,
        "global_seqlen/balanced_max": 5,
        "global_seqlen/mean": 5.0,
    }


def test_ceildiv_and_roundup() -> None:
    assert [ceildiv(a, 4) for a in (0, 1, 4, 5)] == [0, 1, 1, 2]
    assert [roundup_divisible(a, 3) for a in (1, 3, 4, 6)] == [3, 3, 6, 6]


def test_reverse_index() -> None:
    assert get_reverse_idx([3, 0, 2, 1]) == [1, 3, 2, 0]
    with pytest.raises(ValueError, match="index 0 appears at positions 0 and 1"):
        get_reverse_idx([0, 0])
    with pytest.raises(ValueError, match=r"idx_map\[1\] = 5"):
        get_reverse_idx([0, 5])
