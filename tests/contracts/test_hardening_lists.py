"""Bad input to the list API is refused clearly; odd but valid input plans, in linear memory.

The torch-free half of test_hardening.py: these tests call no tensor code, so they run once
per Python (3.10, 3.11, 3.13) and not once per tensordict release (CI's td083 and verl lanes
run the modules marked torch).
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import pytest

from seqlen_balancing import (
    get_group_balanced_partitions,
    karmarkar_karp,
    plan_micro_batches,
)


@pytest.mark.parametrize(
    ("k", "error", "fragment"),
    [(0, ValueError, "k_partitions must be in 1..3"), (4, ValueError, "got 4"),
     (2.5, TypeError, "k_partitions must be an integer")],
)
def test_k_partitions_range(k: Any, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        karmarkar_karp([1, 2, 3], k, equal_size=False)
    assert fragment in str(info.value)


def test_uid_list_length_and_hashability() -> None:
    with pytest.raises(ValueError, match="uid_list has 3 entries but seqlen_list has 2"):
        get_group_balanced_partitions([1, 2], ["a", "b", "c"], 1)
    with pytest.raises(TypeError, match=r"uid_list\[0\] is not hashable"):
        get_group_balanced_partitions([1, 2], [["a"], ["b"]], 1)


def peak_planning_memory(n: int) -> tuple[list[int], list[list[int]], int]:
    lengths = [(i * 7919) % 4000 + 50 for i in range(n)]
    tracemalloc.start()
    plan = plan_micro_batches(lengths, 32768)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return lengths, plan, peak


@pytest.mark.slow
def test_65536_samples_plan_with_linear_memory() -> None:
    lengths, plan, peak = peak_planning_memory(65536)
    assert sorted(i for part in plan for i in part) == list(range(65536))
    assert max(sum(lengths[i] for i in part) for part in plan) <= 32768
    assert peak < 1024 * 65536  # bytes: under 1 KiB per sample
    _, _, quarter_peak = peak_planning_memory(16384)
    assert peak < 6 * quarter_peak  # 4x the samples, about 4x the memory: linear, not quadratic


def test_huge_caps_plan_quickly_and_strictly() -> None:
    lengths = [(i * 2654435761) % (2**30) + 2**29 for i in range(100)]
    plan = plan_micro_batches(lengths, 2**31)
    assert max(sum(lengths[i] for i in part) for part in plan) <= 2**31
    assert sorted(i for part in plan for i in part) == list(range(100))


def test_division_helpers_and_bounds_refuse_bad_input() -> None:
    from seqlen_balancing import (
        best_fit_decreasing,
        ceildiv,
        l1_lower_bound,
        l2_lower_bound,
        roundup_divisible,
    )

    with pytest.raises(ValueError, match="divisor must be non-zero"):
        ceildiv(1, 0)
    with pytest.raises(ValueError, match="divisor must be >= 1"):
        roundup_divisible(1, 0)
    with pytest.raises(ValueError, match="cap must be a positive integer"):
        l1_lower_bound([0], 0)
    with pytest.raises(TypeError, match=r"sizes\[0\] must be an integer"):
        l2_lower_bound([math.nan], 10)
    with pytest.raises(ValueError, match=r"sizes\[0\] is -5"):
        best_fit_decreasing([-5, 3], 4)


def test_agreement_carries_large_values_whole() -> None:
    from seqlen_balancing import plan_data_parallel

    with pytest.raises(ValueError, match=f"^rank 1 of the DP group: sample 0 has {2**41} tokens, "
                       f"which exceeds max_token_len={2**40}"):
        plan_data_parallel([[1], [2**41]], 2**40)


@pytest.mark.slow
def test_issue20_case7_absurd_k_partitions_is_refused_before_allocating() -> None:
    from seqlen_balancing import greedy_partition
    from seqlen_balancing.planning.partition import MAX_EMPTY_PARTITIONS

    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="k_partitions=1000000000 is above both the 3 items and 65536"):
            greedy_partition([1, 2, 3], 10**9, False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert MAX_EMPTY_PARTITIONS == 65536
    parts = greedy_partition([1, 2, 3], MAX_EMPTY_PARTITIONS, False)  # verl's empty partitions
    assert len(parts) == 65536 and parts[:3] == [[0], [1], [2]] and parts[3] == []
    with pytest.raises(ValueError, match="k_partitions=65537 is above both"):
        greedy_partition([1, 2, 3], MAX_EMPTY_PARTITIONS + 1, False)
    assert len(greedy_partition([1] * 70000, 70000, False)) == 70000  # k <= n: as many as items
    with pytest.raises(ValueError, match=r"k_partitions must be in 1\.\.3"):
        karmarkar_karp([1, 2, 3], 10**9, False)
