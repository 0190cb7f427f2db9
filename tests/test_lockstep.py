"""The lock-step model of a step (lockstep.py), on hand-checked values."""

from __future__ import annotations

import pytest

from seqlen_balancing.global_batch.lockstep import lock_step_time, micro_batch_fixed_cost, step_time_floor


def test_each_index_waits_for_its_slowest_rank() -> None:
    # index 0: max(5, 2) = 5; index 1: max(1, 4) = 4; two fixed costs of 10
    assert lock_step_time([[[0], [1]], [[2], [3]]], [5, 1, 2, 4], fixed_cost=10) == 29.0
    # swapping rank 1's micro-batches pairs the heavy ones: max(5, 4) + max(1, 2)
    assert lock_step_time([[[0], [1]], [[3], [2]]], [5, 1, 2, 4]) == 7.0


def test_a_rank_with_fewer_micro_batches_waits_through_the_others() -> None:
    assert lock_step_time([[[0, 1]], [[2], [3], [4]]], [1, 1, 3, 3, 3], fixed_cost=1) == 12.0


def test_the_floor_is_the_mean_rank_plus_the_fixed_costs() -> None:
    assert step_time_floor([5, 1, 2, 4], 2, 2, fixed_cost=10) == 26.0
    assert step_time_floor([5, 1, 2, 4], 4, 1) == 3.0


def test_the_fixed_cost_is_a_share_of_a_full_micro_batch_linear_term() -> None:
    assert micro_batch_fixed_cost(8192, 0.05) == pytest.approx(0.05 * 24576 * 8192)
    assert micro_batch_fixed_cost(8192, 0.0) == 0.0
