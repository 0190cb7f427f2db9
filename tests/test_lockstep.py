"""The lock-step model of a step (lockstep.py), on hand-checked values."""

from __future__ import annotations

import pytest

from seqlen_balancing.cost import WorkloadModel
from seqlen_balancing.global_batch.lockstep import lock_step_time, micro_batch_fixed_cost, step_time_floor
from seqlen_balancing.global_batch.step import plan_step
from seqlen_balancing.options import PlanOptions


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


def test_the_fixed_cost_is_tokens_of_linear_work_whatever_the_cap() -> None:
    # issue 47: T tokens cost 24576 x T workload units, at cap 3,000 as at 16,384
    assert micro_batch_fixed_cost(819.2) == pytest.approx(24576 * 819.2)
    assert micro_batch_fixed_cost(0.0) == 0.0
    # a workload model prices a token at its own linear coefficient: a*s + b*s**2 per sequence
    model = WorkloadModel(hidden_size=64, num_layers=2)
    # W(1) = a + b, W(2) = 2a + 4b: b = (W(2) - 2 W(1)) / 2, a = W(1) - b
    one, two = model.workloads([1, 2])
    linear = one - (two - 2 * one) // 2
    assert micro_batch_fixed_cost(100.0, PlanOptions(workload_model=model)) == 100.0 * linear


def test_plans_at_two_caps_charge_the_same_fixed_cost() -> None:
    # the old share charged 5.46x more per micro-batch at 16,384 than at 3,000
    lengths = [700, 500, 300, 900, 1200, 100, 640, 880]
    fixed = [plan_step(lengths, 2, cap, micro_batch_fixed_tokens=500).fixed_cost for cap in (3000, 16384)]
    assert fixed == [500 * 24576, 500 * 24576]
    assert plan_step(lengths, 2, 3000).fixed_cost == pytest.approx(819.2 * 24576)  # the default


