"""partition.py: exact messages, the edges of each range check, and the greedy rule.

Each assertion pins a value a one-token change would break (the ``mutmut`` survivors of
the property tests; README, Development). No torch.
"""

from __future__ import annotations

import itertools
import random
import re
from typing import Any

import pytest

from seqlen_balancing.partition import (
    ceildiv,
    get_group_balanced_partitions,
    get_reverse_idx,
    greedy_partition,
    karmarkar_karp,
    log_seqlen_unbalance,
    roundup_divisible,
)


def raises(error: type[Exception], message: str) -> Any:
    return pytest.raises(error, match="^" + re.escape(message) + "$")


def test_division_helpers_messages() -> None:
    with raises(ValueError, "ceildiv(1, 0): the divisor must be non-zero"):
        ceildiv(1, 0)
    with raises(ValueError, "roundup_divisible(5, 0): the divisor must be >= 1"):
        roundup_divisible(5, 0)
    assert (ceildiv(-7, 2), roundup_divisible(9, 1), roundup_divisible(0, 3)) == (-3, 9, 0)


def test_reverse_index_messages_and_the_last_index() -> None:
    assert get_reverse_idx([1, 0]) == [1, 0]
    with raises(TypeError, "idx_map must be a sequence, got 5 (int)"):
        get_reverse_idx(5)
    with raises(ValueError, "idx_map[1] is -1; indices must be >= 0"):
        get_reverse_idx([0, -1])
    with raises(TypeError, "idx_map[1] must be an integer, got 1.5 (float)"):
        get_reverse_idx([0, 1.5])
    with raises(ValueError, "idx_map is not a permutation of range(2): idx_map[1] = 2"):
        get_reverse_idx([0, 2])
    with raises(ValueError, "idx_map is not a permutation of range(3): index 1 appears at positions 0 and 2"):
        get_reverse_idx([1, 0, 1])


def test_partition_inputs_are_named() -> None:
    for call in (
        lambda: karmarkar_karp(5, 2, False),
        lambda: greedy_partition(5, 2, False),
        lambda: log_seqlen_unbalance(5, [[0]], "p"),
        lambda: get_group_balanced_partitions(5, [1], 1),
    ):
        with raises(TypeError, "seqlen_list must be a sequence, got 5 (int)"):
            call()
    with raises(ValueError, "seqlen_list[1] is -2; lengths and workloads must be >= 0"):
        get_group_balanced_partitions([1, -2], [1, 2], 1)
    with raises(ValueError, "seqlen_list[1] is -1; lengths and workloads must be >= 0"):
        log_seqlen_unbalance([1, -1], [[0]], "p")


def test_greedy_partition_rules() -> None:
    # Not equal-size: the lightest partition takes every item, however many it holds.
    assert greedy_partition([10, 1, 1, 1], 2, equal_size=False) == [[0], [1, 2, 3]]
    # Equal-size: a full partition (n / k items) takes no more.
    assert greedy_partition([10, 1, 1, 1], 2, equal_size=True) == [[0, 3], [1, 2]]
    with pytest.raises(ValueError, match="divisible"):
        greedy_partition([1, 2, 3], 2, equal_size=True)


def test_group_partitions_messages_and_unequal_group_counts() -> None:
    with raises(TypeError, "uid_list must be a sequence, got 5 (int)"):
        get_group_balanced_partitions([1, 2], 5, 1)
    with raises(ValueError, "uid_list has 1 entries but seqlen_list has 2; pass one uid per sample"):
        get_group_balanced_partitions([1, 2], [1], 1)
    with raises(TypeError, "uid_list[0] is not hashable: unhashable type: 'list'"):
        get_group_balanced_partitions([1, 2], [[1], [2]], 1)
    with raises(
        ValueError,
        "k_partitions must be in 1..2 (one partition needs at least one of the 2 uid groups), got 3",
    ):
        get_group_balanced_partitions([1, 2], [1, 2], 3)
    # Every partition holds exactly n / k samples (verl's trainer cuts k equal chunks).
    undealable = (
        "the uid groups cannot be dealt into 2 partitions of equal size ({}; group sizes {}); "
        "verl's trainer cuts the batch into 2 equal chunks, so make the number of samples per "
        "partition reachable (e.g. the same rollout.n for every uid)"
    )
    with raises(ValueError, undealable.format("3 samples do not split into 2 partitions", [1, 1, 1])):
        get_group_balanced_partitions([10, 1, 1], ["a", "b", "c"], 2)
    with raises(ValueError, undealable.format("a group of 3 samples exceeds 2", [3, 1])):
        get_group_balanced_partitions([1, 1, 1, 1], ["a", "a", "a", "b"], 2)
    with raises(ValueError, undealable.format("3 groups of 2 do not split into 2 equal counts", [2, 2, 2])):
        get_group_balanced_partitions([1] * 6, list("aabbcc"), 2)
    # Sizes 2, 1, 1 with 2 per partition: the pair alone (the largest group is dealt first,
    # into partition 0), the singles together.
    assert get_group_balanced_partitions([10, 10, 1, 1], ["a", "a", "b", "c"], 2) == [[0, 1], [2, 3]]
    assert get_group_balanced_partitions([1, 10, 10, 1], ["b", "a", "a", "c"], 2) == [[1, 2], [0, 3]]


def test_group_partitions_are_equal_size_and_as_balanced_as_brute_force_on_small_cases() -> None:
    # Four single-sample groups into two: 2 + 2 samples; with one heavy sample every 2 + 2
    # split has the same spread, the heavy one with a light one.
    parts = get_group_balanced_partitions([10, 1, 1, 1], ["a", "b", "c", "d"], 2)
    assert sorted(len(p) for p in parts) == [2, 2] and any(0 in p and len(p) == 2 for p in parts)
    # Workloads 24576*s + s**2 (verl's): 8 samples in 2 partitions of 4, spread as small as brute force.
    lengths = [100, 90, 60, 50, 40, 30, 10, 5]
    w = [24576 * s + s * s for s in lengths]
    best = min(
        abs(sum(w[i] for i in c) - (sum(w) - sum(w[i] for i in c)))
        for c in itertools.combinations(range(8), 4)
    )
    parts = get_group_balanced_partitions(lengths, list(range(8)), 2)
    assert [len(p) for p in parts] == [4, 4] and sorted(parts[0] + parts[1]) == list(range(8))
    assert abs(sum(w[i] for i in parts[0]) - sum(w[i] for i in parts[1])) == best


def test_log_seqlen_unbalance_edges() -> None:
    one = log_seqlen_unbalance([3, 5], [[0, 1]], "p")
    assert one == {"p/min": 8, "p/max": 8, "p/minmax_diff": 0, "p/balanced_min": 8,
                   "p/balanced_max": 8, "p/mean": 8.0}
    as_many = log_seqlen_unbalance([3, 5], [[1], [0]], "q")
    assert as_many["q/min"] == 3 and as_many["q/max"] == 5 and as_many["q/mean"] == 4.0
    message = "need at least one partition and no more partitions than items, got {} partitions for {} items"
    with raises(ValueError, message.format(0, 1)):
        log_seqlen_unbalance([1], [], "p")
    with raises(ValueError, message.format(3, 2)):
        log_seqlen_unbalance([1, 2], [[0], [1], [0]], "p")
    with raises(ValueError, "partition index 2 is outside range(2)"):
        log_seqlen_unbalance([1, 2], [[0], [2]], "p")
    with raises(ValueError, "partition index -1 is outside range(2)"):
        log_seqlen_unbalance([1, 2], [[0], [-1]], "p")


def model_karmarkar_karp_sums(values: list[int], k: int, equal_size: bool = False) -> list[int]:
    """The largest differencing method on k-tuples of sums (Karmarkar & Karp 1982), slowly:
    every item is the state (v, 0, ..., 0) (equal size: every k consecutive items of the
    descending order form one state); the two states of largest spread (max - min) merge,
    the largest sum of one joining the smallest of the other; the last state's sums."""
    if equal_size:
        ordered = sorted(values, reverse=True)
        states = [sorted(ordered[s : s + k]) for s in range(0, len(values), k)]
    else:
        states = [sorted([v] + [0] * (k - 1)) for v in values]
    while len(states) > 1:
        states.sort(key=lambda s: s[-1] - s[0])
        first, second = states.pop(), states.pop()
        states.append(sorted(a + b for a, b in zip(first, reversed(second), strict=True)))
    return states[0]


def test_karmarkar_karp_sums_match_the_method() -> None:
    rng = random.Random(19)
    for _ in range(300):
        k = rng.randint(2, 5)
        values = rng.sample(range(1, 10**6), rng.randint(k, 14))  # distinct: no spread ties
        parts = karmarkar_karp(values, k, equal_size=False)
        assert sorted(sum(values[i] for i in part) for part in parts) == model_karmarkar_karp_sums(values, k)
        assert sorted(i for part in parts for i in part) == list(range(len(values)))


def test_equal_size_karmarkar_karp_sums_match_the_method() -> None:
    rng = random.Random(23)
    for _ in range(300):
        k = rng.randint(2, 5)
        values = rng.sample(range(1, 10**6), k * rng.randint(1, 4))
        parts = karmarkar_karp(values, k, equal_size=True)
        assert sorted(sum(values[i] for i in part) for part in parts) == model_karmarkar_karp_sums(
            values, k, equal_size=True
        )
        assert sorted(len(part) for part in parts) == [len(values) // k] * k
