"""Number partitioning: Karmarkar-Karp, greedy, balanced and group partitions, helpers."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
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
@pytest.mark.slow
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


def in_order_greedy(values: list[int], k: int, equal_size: bool) -> list[list[int]]:
    """A model of verl's rule, written out plainly: each item, in input order, to the first
    partition with the smallest sum; with ``equal_size`` every item weighs sum + 1 more."""
    bias = sum(values) + 1 if equal_size else 0
    parts: list[list[int]] = [[] for _ in range(k)]
    sums = [0] * k
    for i, value in enumerate(values):
        best = 0
        for p in range(1, k):
            if sums[p] < sums[best]:
                best = p
        parts[best].append(i)
        sums[best] += value + bias
    return parts


# Issue 9, case 6: verl's in-order greedy, with its equal_size bias.
def test_greedy_partition_is_verls_in_order_greedy() -> None:
    assert greedy_partition([5, 1, 4, 2], 2, True) == [[0, 3], [1, 2]]
    assert greedy_partition([9, 1, 8, 2, 7, 3], 3, equal_size=True) == [[0, 5], [1, 3], [2, 4]]
    assert greedy_partition([5, 1, 4, 2, 3], 2, equal_size=False) == [[0, 3], [1, 2, 4]]
    # More partitions than items: the extra ones stay empty, as in verl.
    assert greedy_partition([3], 3, equal_size=False) == [[0], [], []]


@given(
    values=st.lists(st.integers(0, 1000), max_size=40),
    k=st.integers(1, 9),
    equal_size=st.booleans(),
)
@settings(max_examples=300, deadline=None)
@pytest.mark.slow
def test_greedy_partition_matches_the_model(values: list[int], k: int, equal_size: bool) -> None:
    if equal_size:
        values = values[: len(values) - len(values) % k]
    assert greedy_partition(values, k, equal_size) == in_order_greedy(values, k, equal_size)


def test_greedy_partition_refuses_indivisible_equal_size_and_zero_k() -> None:
    with pytest.raises(ValueError, match="5 items and k_partitions=2"):
        greedy_partition([1] * 5, 2, equal_size=True)
    with pytest.raises(ValueError, match="k_partitions must be >= 1, got 0"):
        greedy_partition([1], 0, equal_size=False)


@pytest.mark.torch
def test_partitions_accept_tensors() -> None:
    import torch

    parts = get_seqlen_balanced_partitions(torch.tensor([4, 1, 3, 2]), 2, equal_size=True)
    assert sorted(map(sorted, parts)) == [[0, 1], [2, 3]]


def test_negative_and_non_whole_items_are_refused() -> None:
    with pytest.raises(ValueError, match=r"seqlen_list\[1\] is -3"):
        karmarkar_karp([1, -3], 1, equal_size=False)
    with pytest.raises(ValueError, match=r"seqlen_list\[0\] is 1.5, not a whole number"):
        karmarkar_karp([1.5, 2], 1, equal_size=False)
    with pytest.raises(ValueError, match=r"seqlen_list\[2\] is 2.5, not a whole number"):
        greedy_partition(np.array([1.0, 2.0, 2.5]), 1, equal_size=False)
    with pytest.raises(ValueError, match=r"seqlen_list\[1\] is -4; lengths and workloads must be >= 0"):
        get_seqlen_balanced_partitions(np.array([1.0, -4.0]), 1, equal_size=False)
    with pytest.raises(ValueError, match=r"seqlen_list\[0\] is inf, not a whole number"):
        get_seqlen_balanced_partitions([float("inf")], 1, equal_size=False)
    with pytest.raises(TypeError, match=r"seqlen_list\[0\] must be a whole number"):
        karmarkar_karp(["7"], 1, equal_size=False)


@pytest.mark.torch
def test_a_non_whole_float_tensor_is_refused() -> None:
    import torch

    with pytest.raises(ValueError, match=r"seqlen_list\[2\] is 2.5, not a whole number"):
        greedy_partition(torch.tensor([1.0, 2.0, 2.5]), 1, equal_size=False)


# Issue 9, case 3: what verl's SFT trainer passes (float32 tensors of whole numbers).
@pytest.mark.torch
def test_whole_floats_tensors_and_numpy_are_accepted() -> None:
    import torch

    floats = torch.Tensor([5.0, 7.0, 3.0, 9.0])
    assert floats.dtype == torch.float32
    parts = get_seqlen_balanced_partitions(floats.tolist(), 2, equal_size=True)
    assert [len(part) for part in parts] == [2, 2]
    assert sorted(sum([5, 7, 3, 9][i] for i in part) for part in parts) == [12, 12]
    as_ints = get_seqlen_balanced_partitions([5, 7, 3, 9], 2, equal_size=True)
    assert get_seqlen_balanced_partitions(floats, 2, equal_size=True) == as_ints
    assert get_seqlen_balanced_partitions(np.array([5, 7, 3, 9]), 2, equal_size=True) == as_ints
    numpy_scalars = [np.int32(5), np.float64(7.0), np.int64(3), np.float32(9.0)]
    assert karmarkar_karp(numpy_scalars, 2, True) == karmarkar_karp([5, 7, 3, 9], 2, True)
    assert greedy_partition(np.array([5.0, 1.0, 4.0, 2.0]), 2, True) == [[0, 3], [1, 2]]


def float_karmarkar_karp(values: list[Any], k: int, equal_size: bool) -> list[list[int]]:
    """verl 0.9.1's largest differencing method on float items (NumPy scalars), spelled out
    with sums kept in the items' float type, as verl keeps them for a float tensor: a
    part's sum adds its items one at a time, in the order they joined it, each addition
    rounded; a state's spread is the rounded difference of its largest and smallest sum.

    A part is ``[sum, items]``; parts compare by (sum, number of items, first index), an
    empty part (sum 0) below every other. The state with the largest spread merges first
    (tie: the larger largest part); its i-th largest part takes the other's i-th smallest.
    """
    zero = type(values[0])(0)

    def order(part: list[Any]) -> tuple[Any, ...]:
        return (part[0], len(part[1]), part[1][0] if part[1] else -1)

    def state(parts: list[Any]) -> list[Any]:
        return sorted(parts, key=order, reverse=True)

    def joined(lead: list[Any], other: list[Any]) -> list[Any]:
        total = lead[0]
        for i in other[1]:
            total = total + values[i]  # one rounding per item, as verl's += on a tensor
        return [total, lead[1] + other[1]]

    def urgency(parts: list[Any]) -> tuple[Any, ...]:
        spread = parts[0][0] - parts[-1][0]  # rounded in the float type
        top = order(parts[0])
        return (-spread, -top[0], -top[1], -top[2])

    ascending = sorted(range(len(values)), key=lambda i: (values[i], i))
    if equal_size:
        states = [state([[values[i], [i]] for i in ascending[s : s + k]]) for s in range(0, len(values), k)]
    else:
        states = [state([[values[i], [i]]] + [[zero, []] for _ in range(k - 1)]) for i in ascending]
    while len(states) > 1:
        states.sort(key=urgency)
        first, second = states[0], states[1]
        states = [*states[2:], state([joined(first[i], second[k - 1 - i]) for i in range(k)])]
    return [part[1] for part in states[0]]


# Issue 46, item 3: verl's SFT trainer balances calculate_workload(torch.Tensor(lengths)),
# float32 workloads whose sums pass 2**24, where float32 sums round.
SFT_LENGTHS = [3765, 30817, 14350, 9825, 28544, 25697, 7113, 20034, 14106, 13834, 10, 7534, 3612,
               532, 32621, 15886]


def test_float32_workloads_partition_as_verl_sums_them() -> None:
    lengths = np.array(SFT_LENGTHS, dtype=np.float32)
    workloads = 24576 * lengths + lengths**2  # float32 arithmetic, as torch's on a float32 tensor
    assert workloads.dtype == np.float32 and float(workloads.sum(dtype=np.float64)) > 2**24
    expected = float_karmarkar_karp(list(workloads), 2, equal_size=True)
    exact = karmarkar_karp([int(w) for w in workloads], 2, equal_size=True)
    assert sorted(map(sorted, expected)) != sorted(map(sorted, exact))  # the sums' rounding decides
    assert karmarkar_karp(workloads, 2, equal_size=True) == expected
    # verl 0.9.1's own answer on this input (observed with verl installed):
    verls = [[0, 1, 4, 8, 9, 10, 11, 15], [2, 3, 5, 6, 7, 12, 13, 14]]
    assert get_seqlen_balanced_partitions(workloads, 2, equal_size=True) == verls
    assert [sorted(part) for part in expected] == verls


@pytest.mark.torch
def test_float32_tensor_workloads_partition_as_verl_sums_them() -> None:
    import torch

    from seqlen_balancing import calculate_workload

    lengths = np.array(SFT_LENGTHS, dtype=np.float32)
    workloads = calculate_workload(torch.Tensor(SFT_LENGTHS))
    assert workloads.dtype == torch.float32
    assert workloads.tolist() == (24576 * lengths + lengths**2).tolist()
    expected = float_karmarkar_karp(list(24576 * lengths + lengths**2), 2, equal_size=True)
    assert get_seqlen_balanced_partitions(workloads, 2, equal_size=True) == [sorted(p) for p in expected]


def test_float32_workload_sums_round_as_the_oracle_rounds() -> None:
    # Workloads of float32 lengths, as verl's SFT trainer makes them: sums near 2**37, where
    # float32 keeps multiples of 2**13, so late in the method the spreads meet the rounding.
    rng = random.Random(46)
    differs = 0
    for _ in range(40):
        n, k = rng.randint(32, 96), rng.randint(2, 4)
        equal_size = n % k == 0 and rng.random() < 0.5
        lengths = np.array([rng.randint(0, 32768) for _ in range(n)], dtype=np.float32)
        values = 24576 * lengths + lengths**2
        expected = float_karmarkar_karp(list(values), k, equal_size)
        assert karmarkar_karp(values, k, equal_size) == expected
        assert get_seqlen_balanced_partitions(values, k, equal_size) == [sorted(p) for p in expected]
        differs += karmarkar_karp([int(v) for v in values], k, equal_size) != expected
    assert differs >= 3  # the rounding decided some of them (5 of these 40)


def test_float64_sums_round_past_2_to_the_53() -> None:
    # 5 * 2**51 + 5 and + 3 are 2**53.3: float64 keeps even numbers there, and the two pairs'
    # rounded sums tie, which decides which one comes first.
    values = [(2 << 51) + 3, (2 << 51) + 1, (3 << 51) + 2, (3 << 51) + 2]
    floats = np.array(values, dtype=np.float64)
    assert [int(v) for v in floats] == values
    expected = float_karmarkar_karp(list(floats), 2, equal_size=True)
    assert expected == [[1, 3], [0, 2]]
    assert karmarkar_karp(values, 2, equal_size=True) == [[0, 2], [1, 3]]  # exact sums
    assert karmarkar_karp(floats, 2, equal_size=True) == expected
    assert karmarkar_karp([float(v) for v in floats], 2, equal_size=True) == expected  # Python floats
    rng = random.Random(48)
    for _ in range(150):
        n, k = rng.randint(2, 12), rng.randint(1, 3)
        k = min(k, n)
        equal_size = n % k == 0 and rng.random() < 0.5
        floats = np.array([(rng.randint(1, 3) << 51) + rng.randint(0, 3) for _ in range(n)], dtype=np.float64)
        assert karmarkar_karp(floats, k, equal_size) == float_karmarkar_karp(list(floats), k, equal_size)


def test_float32_greedy_sums_round_as_verls() -> None:
    # 2**24 + 1 rounds to 2**24 in float32: the third and fourth items meet a tie there,
    # where exact sums send the fourth to the other partition.
    values = np.array([2**24, 2**24, 1, 1, 1], dtype=np.float32)
    assert greedy_partition([2**24, 2**24, 1, 1, 1], 2, equal_size=False) == [[0, 2, 4], [1, 3]]
    assert in_order_greedy(list(values), 2, equal_size=False) == [[0, 2, 3, 4], [1]]
    assert greedy_partition(values, 2, equal_size=False) == [[0, 2, 3, 4], [1]]
    rng = random.Random(47)
    for _ in range(200):
        n, k = rng.randint(1, 24), rng.randint(1, 6)
        equal_size = rng.random() < 0.5
        n -= n % k if equal_size else 0
        floats = np.array([rng.randint(0, 40) << rng.randint(18, 22) for _ in range(n)], dtype=np.float32)
        assert greedy_partition(floats, k, equal_size) == in_order_greedy(list(floats), k, equal_size)


def workload(s: int) -> int:
    return 24576 * s + s * s


def group_spread(lengths: list[int], parts: list[list[int]]) -> int:
    sums = [sum(workload(lengths[i]) for i in part) for part in parts]
    return max(sums) - min(sums)


# Issue 9, case 1: equal sample counts (the trainer cuts the batch into k equal chunks).
def test_group_partitions_have_equal_sample_counts() -> None:
    parts = get_group_balanced_partitions([100, 100] + [1] * 14, [g for g in range(8) for _ in range(2)], 4)
    assert [len(part) for part in parts] == [4, 4, 4, 4]
    assert is_exact_cover(parts, 16)
    assert sum(1 for part in parts if {0, 1} <= set(part)) == 1
    for part in parts:  # every uid group (pairs 2g, 2g+1) stays whole
        assert all((i ^ 1) in part for i in part)


def deal_exists(sizes: list[int], k: int) -> bool:
    """Brute force: can the groups fill k partitions of sum(sizes) / k samples exactly?"""
    total = sum(sizes)
    if total % k:
        return False
    for labels in itertools.product(range(k), repeat=len(sizes)):
        counts = [0] * k
        for size, label in zip(sizes, labels, strict=True):
            counts[label] += size
        if all(count == total // k for count in counts):
            return True
    return False


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=7),
    k=st.integers(1, 3),
    seed=st.integers(0, 10**6),
)
@settings(max_examples=150, deadline=None)
def test_group_partitions_deal_equal_counts_exactly_when_possible(
    sizes: list[int], k: int, seed: int
) -> None:
    k = min(k, len(sizes))
    rng = random.Random(seed)
    uids = [g for g, size in enumerate(sizes) for _ in range(size)]
    rng.shuffle(uids)  # groups need not be contiguous
    lengths = [rng.randint(0, 500) for _ in uids]
    if not deal_exists(sizes, k):
        with pytest.raises(ValueError, match=f"cannot be dealt into {k} partitions of equal size"):
            get_group_balanced_partitions(lengths, uids, k)
        return
    parts = get_group_balanced_partitions(lengths, uids, k)
    assert [len(part) for part in parts] == [len(uids) // k] * k
    assert is_exact_cover(parts, len(uids))
    for part in parts:
        assert {uids[i] for i in part}.isdisjoint({uids[i] for i in range(len(uids)) if i not in part})


# Issue 9, case 2 (verl's own function is compared in tests/compat): GRPO batches.
def test_grpo_batches_get_sixteen_samples_per_partition() -> None:
    for seed in range(100):
        rng = random.Random(seed)
        lengths = [max(1, int(rng.lognormvariate(6, 1))) for _ in range(64)]
        uids = [f"prompt-{g}" for g in range(16) for _ in range(4)]
        parts = get_group_balanced_partitions(lengths, uids, 4)
        assert [len(part) for part in parts] == [16] * 4
        # Balanced on workload: no worse than equal-size Karmarkar-Karp over the groups.
        loads = [sum(workload(s) for s in lengths[4 * g : 4 * g + 4]) for g in range(16)]
        kk = karmarkar_karp(loads, 4, equal_size=True)
        kk_samples = [[4 * g + j for g in part for j in range(4)] for part in kk]
        assert group_spread(lengths, parts) <= group_spread(lengths, kk_samples)


def test_group_partitions_balance_on_workload_not_tokens() -> None:
    # Tokens alone tie {1000, 10, 10} with {340, 340, 340}; the s**2 term does not.
    lengths = [1000, 340, 10, 340, 10, 340]
    uids = ["a", "b", "c", "d", "e", "f"]
    parts = get_group_balanced_partitions(lengths, uids, 2)
    best = min(
        group_spread(lengths, [list(c), [i for i in range(6) if i not in c]])
        for c in itertools.combinations(range(6), 3)
    )
    assert group_spread(lengths, parts) == best


def test_group_partitions_join_non_contiguous_repeats() -> None:
    parts = get_group_balanced_partitions([3, 4, 3, 4], ["x", "y", "x", "y"], 2)
    assert sorted(parts) == [[0, 2], [1, 3]]


def test_group_partitions_errors() -> None:
    with pytest.raises(ValueError, match="uid_list has 1 entries but seqlen_list has 2"):
        get_group_balanced_partitions([1, 2], ["a"], 1)
    with pytest.raises(ValueError, match=r"k_partitions must be in 1\.\.2"):
        get_group_balanced_partitions([1, 2, 3], ["a", "a", "b"], 3)
    with pytest.raises(ValueError, match=r"cannot be dealt into 2 partitions of equal size \(a group of 3"):
        get_group_balanced_partitions([1] * 4, ["a", "a", "a", "b"], 2)
    with pytest.raises(ValueError, match=r"\(5 samples do not split into 2 partitions"):
        get_group_balanced_partitions([1] * 5, ["a", "a", "b", "b", "c"], 2)
    with pytest.raises(ValueError, match=r"\(3 groups of 2 do not split into 2 equal counts"):
        get_group_balanced_partitions([1] * 6, ["a", "a", "b", "b", "c", "c"], 2)


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


# Issue 9, case 7: the type given comes back.
@pytest.mark.torch
def test_reverse_index_keeps_the_type() -> None:
    import torch

    out = get_reverse_idx(torch.tensor([2, 0, 1]))
    assert isinstance(out, torch.Tensor) and torch.equal(out, torch.tensor([1, 2, 0]))
    as_int32 = get_reverse_idx(torch.tensor([2, 0, 1], dtype=torch.int32))
    assert as_int32.dtype == torch.int32 and as_int32.tolist() == [1, 2, 0]
    array = get_reverse_idx(np.array([1, 2, 0], dtype=np.int32))
    assert isinstance(array, np.ndarray) and array.dtype == np.int32 and array.tolist() == [2, 0, 1]
    assert get_reverse_idx((1, 0)) == (1, 0)


def test_reverse_index() -> None:
    assert get_reverse_idx([3, 0, 2, 1]) == [1, 3, 2, 0]
    with pytest.raises(ValueError, match="index 0 appears at positions 0 and 1"):
        get_reverse_idx([0, 0])
    with pytest.raises(ValueError, match=r"idx_map\[1\] = 5"):
        get_reverse_idx([0, 5])
