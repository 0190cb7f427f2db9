"""partition.py: exact messages, the edges of each range check, and the greedy rule.

Each assertion pins a value a one-token change would break (the ``mutmut`` survivors of
the property tests; README, Development). No torch.
"""

from __future__ import annotations

import itertools
import random
import re
import sys
import types
from typing import Any

import pytest

import seqlen_balancing.planning.partition as partition_module
from oracles import model_karmarkar_karp
from seqlen_balancing.planning.partition import (
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


# --- Issue 10: the survivors of the mutation run on partition.py -----------------------


def test_reverse_index_gives_back_a_tuple_an_array_and_a_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    assert get_reverse_idx((2, 0, 1)) == (1, 2, 0)
    array = get_reverse_idx(np.array([2, 0, 1], dtype=np.int16))
    assert type(array) is np.ndarray and array.dtype == np.int16 and array.tolist() == [1, 2, 0]
    assert get_reverse_idx(iter([1, 0])) == [1, 0]  # any other iterable: a list

    # A stand-in for torch (these tests run without it): a tensor comes back from
    # torch.tensor(inverse, dtype=<the input's>, device=<the input's>).
    fake_torch = types.ModuleType("torch")
    fake_torch.tensor = lambda data, *, dtype, device: ("tensor", data, dtype, device)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake_torch)

    class Tensor:
        ndim = 1
        dtype = "int16-of-the-input"
        device = "device-of-the-input"

        def tolist(self) -> list[int]:
            return [2, 0, 1]

    Tensor.__module__ = "torch"
    assert get_reverse_idx(Tensor()) == ("tensor", [1, 2, 0], "int16-of-the-input", "device-of-the-input")


def test_greedy_partition_k_partitions_type_message() -> None:
    with raises(TypeError, "k_partitions must be an integer, got 1.5 (float)"):
        greedy_partition([1, 2], 1.5, equal_size=False)


def test_greedy_equal_size_bias_outweighs_a_whole_sum() -> None:
    # [5, 0, 0, 0] into 2 equal halves: item 0 -> p0; item 1 -> p1 (fewer items); item 2 ->
    # p1 (same count, sum 0 < 5); item 3 -> p0 (fewer items), although p0 holds the whole
    # sum 5 and p1 nothing: the count wins over a difference as large as sum(values).
    assert greedy_partition([5, 0, 0, 0], 2, equal_size=True) == [[0, 3], [1, 2]]


UNDEALABLE = (
    "the uid groups cannot be dealt into {k} partitions of equal size ({why}; group sizes {sizes}); "
    "verl's trainer cuts the batch into {k} equal chunks, so make the number of samples per "
    "partition reachable (e.g. the same rollout.n for every uid)"
)


def test_group_partitions_without_an_exact_fill() -> None:
    # Groups of 3, 3 and 2 into 2 partitions of 4: no subset of {3, 3, 2} sums to 4.
    why = "no way to fill every partition exactly was found"
    with raises(ValueError, UNDEALABLE.format(k=2, why=why, sizes=[3, 3, 2])):
        get_group_balanced_partitions([1] * 8, list("aaabbbcc"), 2)


def test_group_partitions_message_shows_at_most_twelve_group_sizes() -> None:
    # 13 samples never split into 2 partitions; 12 groups are listed in full, 13 are cut.
    why = "13 samples do not split into 2 partitions"
    twelve = [1] * 11 + [2]
    with raises(ValueError, UNDEALABLE.format(k=2, why=why, sizes=twelve)):
        get_group_balanced_partitions([1] * 13, [*range(11), 11, 11], 2)
    cut = [*([1] * 12), "..."]
    with raises(ValueError, UNDEALABLE.format(k=2, why=why, sizes=cut)):
        get_group_balanced_partitions([1] * 13, list(range(13)), 2)


def test_karmarkar_karp_is_verls_index_list_for_index_list() -> None:
    # Issue 19, case 5: verl's sums are [23, 22, 22]; the old tie-breaks gave [24, 22, 21].
    values = [11, 10, 6, 3, 5, 10, 16, 6]
    parts = karmarkar_karp(values, 3, False)
    assert [sum(values[i] for i in part) for part in parts] == [23, 22, 22]
    assert parts == model_karmarkar_karp(values, 3, False)
    cases = [
        ([1, 2, 2, 1], 3, False),
        ([9, 9, 1, 11, 16, 7, 6, 7], 3, False),
        ([2, 7, 2, 2, 3, 5, 8, 2, 6], 3, False),
        ([1, 7, 7, 5, 9, 0, 3, 2, 2], 3, True),
        ([0, 0, 0, 0], 2, False),
        ([5], 1, False),
    ]
    rng = random.Random(29)
    for _ in range(600):  # small values: many ties in spread and in sums
        k = rng.randint(1, 5)
        equal_size = rng.random() < 0.4
        n = k * rng.randint(1, 4) if equal_size else rng.randint(k, 12)
        cases.append(([rng.randint(0, rng.choice([1, 2, 4, 9, 1000])) for _ in range(n)], k, equal_size))
    for values, k, equal_size in cases:
        assert karmarkar_karp(values, k, equal_size) == model_karmarkar_karp(values, k, equal_size), (
            values, k, equal_size
        )


def _workload(s: int) -> int:
    return 24576 * s + s * s  # verl's cost of one sequence


def brute_force_group_spread(lengths: list[int], uids: list[str], k: int) -> int:
    """Smallest max - min partition workload over every way of dealing whole groups into k
    partitions of len(lengths) / k samples."""
    groups: dict[str, list[int]] = {}
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    members = list(groups.values())
    per = len(lengths) // k
    best = None
    for choice in itertools.product(range(k), repeat=len(members)):
        counts, loads = [0] * k, [0] * k
        for group, p in zip(members, choice, strict=True):
            counts[p] += len(group)
            loads[p] += sum(_workload(lengths[i]) for i in group)
        if counts == [per] * k:
            spread = max(loads) - min(loads)
            best = spread if best is None else min(best, spread)
    assert best is not None
    return best


def test_group_partitions_of_mixed_sizes_reach_the_optimum() -> None:
    # Groups of sizes 2 and 1: the heaviest group first into the lightest partition with
    # room reaches the smallest spread here (checked by brute force).
    for lengths, uids, k in [
        ([46, 4, 42, 3, 2, 0], list("cdabed"), 3),
        ([39, 27, 0, 12, 1, 2, 34, 0, 2], list("ebfeaacad"), 3),
    ]:
        parts = get_group_balanced_partitions(lengths, uids, k)
        assert sorted(i for p in parts for i in p) == list(range(len(lengths)))
        assert all(len(p) == len(lengths) // k for p in parts)
        assert all(len({uids[i] for i in p} & {uids[i] for i in q}) == 0
                   for p, q in itertools.combinations(parts, 2))
        loads = [sum(_workload(lengths[i]) for i in p) for p in parts]
        assert max(loads) - min(loads) == brute_force_group_spread(lengths, uids, k)


def test_exact_fill_search_order_room_skip_and_budget() -> None:
    exact_fill = partition_module._exact_fill
    # Sizes 5, 5, 4, 4, 2, 2, 2, 2 (groups 1, 5, 3, 7, then 0, 2, 4, 6) into 2 partitions
    # of 13, depth first, largest group first, lowest partition first. Both 5s in
    # partition 0 leave 3 there and fail after 20 steps (one step per partition looked
    # at); the 20th skips partition 1 for the second 2, its room (3) being the room just
    # tried in partition 0. Then the second 5 goes to partition 1 and 5 + 4 + 4 | 5 + 2 +
    # 2 + 2 + 2 completes at step 31 (without the skip: step 35).
    sizes = [2, 5, 2, 4, 2, 5, 2, 4]
    assert exact_fill(sizes, 2, 13, budget=31) == [[1, 3, 7], [5, 0, 2, 4, 6]]
    assert exact_fill(sizes, 2, 13, budget=30) is None
    # 500 groups are searched, 501 are not (the recursion would go one level deeper per group).
    assert exact_fill([1] * 500, 1, 500) == [list(range(500))]
    assert exact_fill([1] * 501, 1, 501) is None


def test_exact_fill_default_budget_is_200000_steps() -> None:
    exact_fill = partition_module._exact_fill
    # 111 groups of 33 fill partitions 0..110 in 1 + 2 + ... + 111 = 6216 steps; the search
    # for the 17 smaller groups in the last 3 partitions then makes 1700 calls, each first
    # passing the 111 full partitions (188,700 steps), and 5085 steps of its own: the fill
    # is found at step 200,001, one past the default budget.
    core = [7, 8, 5, 5, 8, 6, 7, 8, 2, 3, 8, 4, 8, 7, 3, 6, 4]
    sizes = [33] * 111 + core
    assert exact_fill(sizes, 114, 33) is None
    parts = exact_fill(sizes, 114, 33, budget=200_001)
    assert parts is not None and [sum(sizes[g] for g in p) for p in parts] == [33] * 114


def model_swaps(parts: list[list[int]], sizes: list[int], loads: list[int]) -> list[list[int]]:
    """The swap rule, over every pair: at most 8 k times, take the heaviest and the lightest
    partition (lowest index on a tie); of the groups a (heaviest) and b (lightest) of one
    size with 0 < load a - load b < gap, swap the pair of least (|2 d - gap|, a, b)."""
    parts = [list(p) for p in parts]
    k = len(parts)
    for _ in range(8 * k):
        totals = [sum(loads[x] for x in p) for p in parts]
        heavy = min(range(k), key=lambda p: (-totals[p], p))
        light = min(range(k), key=lambda p: (totals[p], p))
        gap = totals[heavy] - totals[light]
        pairs = [
            (abs(2 * (loads[a] - loads[b]) - gap), a, b)
            for a in parts[heavy] for b in parts[light]
            if sizes[a] == sizes[b] and 0 < loads[a] - loads[b] < gap
        ]
        if not pairs:
            break
        _, a, b = min(pairs)
        parts[heavy][parts[heavy].index(a)] = b
        parts[light][parts[light].index(b)] = a
    return parts


def test_swaps_follow_the_rule_on_distinct_loads() -> None:
    swap = partition_module._swap_equal_sizes
    rng = random.Random(31)
    for _ in range(300):
        k = rng.randint(2, 4)
        g = rng.randint(k, 12)
        sizes = [rng.randint(1, 2) for _ in range(g)]
        loads = rng.sample(range(60), g)
        order = rng.sample(range(g), g)
        parts = [order[p::k] for p in range(k)]
        assert swap([list(p) for p in parts], sizes, loads) == model_swaps(parts, sizes, loads)


def test_swaps_hand_checked_ties_and_the_cap() -> None:
    swap = partition_module._swap_equal_sizes
    # Totals 4 | 11, gap 7: groups 0 (6) and 1 (5) against 3 and 2 (both 2) give |2d - 7| = 1
    # either way; the least (score, a, b) is a = 0, b = 2 (not 3): totals 8 | 7, gap 1, done.
    assert swap([[3, 2], [0, 1]], [1] * 4, [6, 5, 2, 2]) == [[3, 0], [2, 1]]
    # Totals 16 | 7: 0 (8) <-> 2 (7) narrows the gap to 7; then only equal loads (8, 8) or a
    # lighter group are left to swap, which would not narrow it.
    assert swap([[1, 0], [2]], [1] * 3, [8, 8, 7]) == [[1, 2], [0]]
    # Totals 6, 3, 6: the heaviest is partition 0 (lowest index of the tie): 0 (5) <-> 1 (3)
    # makes 4, 5, 6; then 3 (6) against 1 (3) or 2 (1) would move at least the gap (2).
    assert swap([[0, 2], [1], [3]], [1] * 4, [5, 3, 1, 6]) == [[1, 2], [0], [3]]
    # Loads 101, 201, ..., 4001 against 100, 200, ..., 4000: gap 40, and only the pairs
    # (i01, i00) move less than the gap, 1 each, so each swap narrows it by 2. The phase
    # stops after 8 k = 16 swaps with a gap of 40 - 32 = 8.
    loads = [100 * i + 1 for i in range(1, 41)] + [100 * i for i in range(1, 41)]
    parts = swap([list(range(40)), list(range(40, 80))], [1] * 80, loads)
    totals = [sum(loads[x] for x in p) for p in parts]
    assert totals[0] - totals[1] == 8
