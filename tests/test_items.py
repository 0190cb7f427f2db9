"""items.py: one rank's force groups under the one rule, from plain inputs: each sample's
cost, each group's size, rows and workload, the over-cap error of the first group that does
not fit (summed and padded), the group a dummy copies. Hand counts throughout."""

from __future__ import annotations

from dataclasses import replace

from seqlen_balancing.cost import WorkloadModel
from seqlen_balancing.errors import GroupOverCap, NotOnePerSample, PaddedGroupOverCap, WorkloadsAndModel
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.items import (
    Cap,
    dummy_group,
    group_rule,
    longest,
    sample_costs_of,
    workloads_of,
)
from seqlen_balancing.planning.rule import Rule

#: force_group_size=2 and pad 4, summed or (limit 3) padded.
SUMMED = PlanOptions(force_group_size=2, pad_to_multiple_of=4)
PADDED = PlanOptions(force_group_size=2, pad_to_multiple_of=4, max_samples_per_micro_batch=3, padded=True)


def test_sample_costs_are_the_given_or_effective_lengths_aligned() -> None:
    assert sample_costs_of([3, 5], 4, None) == (None, [4, 8])
    assert sample_costs_of([3, 5], 4, [9, 1]) == (None, [12, 4])  # given costs are aligned too
    error, _ = sample_costs_of([3, 5], 1, [9])
    assert isinstance(error, NotOnePerSample) and (error.entries, error.samples) == (1, 2)


def test_workloads_are_verls_the_callers_or_the_models_never_two() -> None:
    assert workloads_of([1, 2], None) == (None, [24577, 49156])  # 24576*s + s**2
    assert workloads_of([1, 2], [5, 6]) == (None, [5, 6])
    model = WorkloadModel(hidden_size=64)
    assert workloads_of([10], None, model) == (None, model.workloads([10]))
    assert isinstance(workloads_of([1, 2], [1, 1], model)[0], WorkloadsAndModel)


def test_longest_is_the_costliest_group_or_sample() -> None:
    assert longest([3, 5, 2, 4], 2) == 8  # groups 3+5 and 2+4
    assert longest([3, 5, 2], 2) == 5  # groups cannot form: the costliest sample
    assert longest([], 1) == 0


def test_summed_groups_their_sizes_rows_and_workloads() -> None:
    # force_group_size=2, pad 4: sample costs [4, 8, 4, 4] -> groups of 12 and 8 tokens
    built = group_rule([3, 5, 2, 4], [4, 8, 4, 4], [1, 2, 3, 4], SUMMED, Cap(12, 12),
                       None, False)
    assert (built.rule.sizes, built.rule.rows, built.workloads) == ([12, 8], [2, 2], [3, 7])
    assert built.error is None
    # a cap of 11: the first group is over it, named by its first sample and its aligned cost
    over = group_rule([3, 5, 2, 4], [4, 8, 4, 4], [1, 2, 3, 4], SUMMED, Cap(11, 11),
                      None, False)
    assert isinstance(over.error, GroupOverCap)
    assert over.error.message().startswith(
        "forced group exceeds max_token_len: the group starting at sample 0 has 8 tokens and costs "
        "12 tokens aligned to a multiple of pad_to_multiple_of=4, which exceeds max_token_len=11")
    # over_cap="alone": the same groups, no error (the planner sets the over-cap one apart)
    alone = group_rule([3, 5, 2, 4], [4, 8, 4, 4], [1, 2, 3, 4], replace(SUMMED, over_cap="alone"),
                       Cap(11, 11), None, False)
    assert (alone.error, alone.rule.sizes) == (None, [12, 8])


def test_padded_groups_cost_rows_times_their_widest_aligned_row() -> None:
    # rows [3, 5] and [2, 4], pad 4: widths 8 and 4, so 2 x 8 = 16 and 2 x 4 = 8
    built = group_rule([3, 5, 2, 4], [3, 5, 2, 4], [1, 2, 3, 4], PADDED,
                       Cap(16, 16), None, False)
    assert (built.rule.sizes, built.rule.left, built.rule.right) == ([16, 8], [0, 0], [5, 4])
    assert (built.sample_costs, built.rule.limit, built.error) == ([4, 8, 4, 4], 3, None)
    over = group_rule([3, 5, 2, 4], [3, 5, 2, 4], [1, 2, 3, 4], PADDED,
                      Cap(15, 15), None, False)
    assert isinstance(over.error, PaddedGroupOverCap)
    assert "padded=True holds it as 2 rows x 8 wide = 16 token positions" in over.error.message()
    # two-sided extents (a left-padded prompt, a right-padded response): widest left + widest right
    sided = group_rule([3, 5], [3, 5], [1, 1], PlanOptions(force_group_size=2, padded=True), Cap(100, 100),
                       ([1, 4], [2, 1]), False)
    assert (sided.rule.left, sided.rule.right, sided.rule.sizes) == ([4], [2], [12])


def test_a_dummy_copies_the_cheapest_group_that_fits_alone() -> None:
    assert dummy_group(Rule.sums([8, 8, 16], 100), [5, 3, 9]) == 1  # tie on cost: fewer tokens
    assert dummy_group(Rule.sums([120, 8, 16], 100), [2, 3, 9]) == 1  # group 0 is over the cap
    assert dummy_group(Rule.sums([6, 6], 100), [3, 3]) == 0  # then the lowest index
