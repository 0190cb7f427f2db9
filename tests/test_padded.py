"""padded=True (a micro-batch costs rows x its widest row) and max_samples_per_micro_batch
(issue 26) through the planner, the DP agreement in one process and the messages, against
a brute-force oracle written here. No torch (the TensorDict side is test_padded_batch.py)."""

from __future__ import annotations

import random

import pytest

from oracles import oracle_count, partitions
from seqlen_balancing import lower_bound, plan_data_parallel, plan_micro_batches
from seqlen_balancing.cost import padded_micro_batch_cost
from seqlen_balancing.errors import PaddedSampleOverCap
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import analyse, build_plan


def up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def footprint(lengths: list[int], mb: list[int], pad: int = 1) -> int:
    """rows x the widest row, each row rounded up to ``pad``: the rule spelled out."""
    return len(mb) * max(up(lengths[i], pad) for i in mb)


def assert_cover(plan: list[list[int]], n: int) -> None:
    assert sorted(i for mb in plan for i in mb) == list(range(n))
    assert all(mb for mb in plan)


# ------------------------------------------------------------------------ the cases


def test_meta_pytorch_data_788_three_micro_batches_of_footprints_100_30_100() -> None:
    lengths = [100, 10, 10, 10, 100]
    plan = plan_micro_batches(lengths, 150, padded=True)
    assert_cover(plan, 5)
    assert sorted(map(sorted, plan)) == [[0], [1, 2, 3], [4]]
    assert sorted(footprint(lengths, mb) for mb in plan) == [30, 100, 100]
    # Today's (summed) rule: 2 micro-batches, whose padded footprints are 300 and 200.
    today = plan_micro_batches(lengths, 150)
    assert sorted(footprint(lengths, mb) for mb in today) == [200, 300]
    result = analyse(lengths, 150, PlanOptions(padded=True))
    assert (result.min_count, result.lower_bound, result.proven_optimal) == (3, 3, True)
    assert result.bound_name == "padded sorted rule"


def test_80_rows_of_200_tokens_one_micro_batch_at_16384_two_of_40_at_8000() -> None:
    assert plan_micro_batches([200] * 80, 16_384, padded=True) == [list(range(80))]
    plan = plan_micro_batches([200] * 80, 8_000, padded=True)
    assert sorted(map(len, plan)) == [40, 40]
    assert_cover(plan, 80)


def test_64_samples_of_100_tokens_at_most_16_per_micro_batch_make_4() -> None:
    for padded in (False, True):
        plan = plan_micro_batches([100] * 64, 16_384, max_samples_per_micro_batch=16,
                                  padded=padded)
        assert sorted(map(len, plan)) == [16] * 4
        result = analyse([100] * 64, 16_384, PlanOptions(max_samples_per_micro_batch=16, padded=padded))
        assert result.proven_optimal and result.lower_bound == 4
    assert analyse([100] * 64, 16_384, PlanOptions(max_samples_per_micro_batch=16)).bound_name == (
        "samples per micro-batch"
    )
    assert len(plan_micro_batches([100] * 64, 16_384)) == 1


# ------------------------------------------------------------------------ the oracle


@pytest.mark.parametrize("seed", range(6))
def test_padded_count_is_the_brute_force_optimum_with_every_option(seed: int) -> None:
    rng = random.Random(seed)
    checked = 0
    for _ in range(60):
        group = rng.choice([1, 1, 2])
        n = group * rng.randint(1, 7 // group)
        lengths = [rng.choice([0, rng.randint(1, 40), rng.randint(1, 9)]) for _ in range(n)]
        pad = rng.choice([1, 1, 4])
        bucket = rng.choice([1, 1, 8])
        limit = rng.choice([None, None, group, 2 * group, 3])
        limit = None if limit is not None and limit < group else limit
        floor = rng.choice([None, None, 2, 3])
        divisor = rng.choice([None, None, 2])
        cap = rng.randint(20, 120)
        kwargs = dict(force_group_size=group, pad_to_multiple_of=pad, micro_batch_multiple_of=bucket,
                      max_samples_per_micro_batch=limit, min_num_micro_batch=floor,
                      num_batches_divided_by=divisor)
        want = oracle_count(lengths, cap, padded=True, group=group, pad=pad, bucket=bucket,
                            limit=limit, floor=floor, divisor=divisor)
        if want is None:
            with pytest.raises(ValueError, match=r"exceeds max_token_len|micro-batch"):
                plan_micro_batches(lengths, cap, padded=True, **kwargs)  # type: ignore[arg-type]
            continue
        plan = plan_micro_batches(lengths, cap, padded=True, **kwargs)  # type: ignore[arg-type]
        assert len(plan) == want, (lengths, cap, kwargs)
        assert_cover(plan, n)
        for mb in plan:
            assert up(footprint(lengths, mb, pad), bucket) <= cap
            assert limit is None or len(mb) <= limit
            assert all(set(range(i - i % group, i - i % group + group)) <= set(mb) for i in mb)
        checked += 1
    assert checked >= 30


def test_lower_bound_is_the_padded_optimum() -> None:
    rng = random.Random(11)
    for _ in range(80):
        n = rng.randint(1, 7)
        lengths = [rng.randint(0, 40) for _ in range(n)]
        pad, bucket = rng.choice([1, 4]), rng.choice([1, 8])
        limit = rng.choice([None, 1, 2, 3])
        cap = rng.randint(40, 120)
        want = oracle_count(lengths, cap, padded=True, pad=pad, bucket=bucket, limit=limit)
        got = lower_bound(lengths, cap, padded=True, pad_to_multiple_of=pad,
                          micro_batch_multiple_of=bucket, max_samples_per_micro_batch=limit)
        assert got == want, (lengths, cap, pad, bucket, limit)
        if limit is not None:
            plain = lower_bound(lengths, cap, max_samples_per_micro_batch=limit)
            assert plain >= -(-n // limit) and plain <= oracle_count(lengths, cap, padded=False,
                                                                      limit=limit)
    with pytest.raises(ValueError, match=r"item 1 has size 300 and, padded, a width of 320 \(1 row x "
                                         r"320 token positions\), larger than the usable capacity 256"):
        lower_bound([90, 300], 256, padded=True, pad_to_multiple_of=64)
    assert lower_bound([0, 0, 0], 5, padded=True) == 1 and lower_bound([], 5, padded=True) == 0


@pytest.mark.parametrize("seed", range(3))
def test_summed_count_with_a_sample_limit_is_never_below_the_optimum(seed: int) -> None:
    rng = random.Random(100 + seed)
    for _ in range(60):
        n = rng.randint(1, 7)
        lengths = [rng.randint(0, 30) for _ in range(n)]
        limit = rng.randint(1, 4)
        cap = rng.randint(30, 90)
        want = oracle_count(lengths, cap, padded=False, limit=limit)
        assert want is not None
        result = analyse(lengths, cap, PlanOptions(max_samples_per_micro_batch=limit))
        assert result.lower_bound <= want <= result.min_count
        if result.proven_optimal:
            assert result.min_count == want
        plan = plan_micro_batches(lengths, cap, max_samples_per_micro_batch=limit)
        assert all(len(mb) <= limit and sum(lengths[i] for i in mb) <= cap for mb in plan)
        assert_cover(plan, n)


def test_padded_with_costs_takes_each_cost_as_the_rows_width() -> None:
    rng = random.Random(7)
    for _ in range(40):
        n = rng.randint(1, 6)
        lengths = [rng.randint(1, 20) for _ in range(n)]
        costs = [rng.randint(0, 40) for _ in range(n)]
        cap, pad = rng.randint(40, 100), rng.choice([1, 8])
        want = oracle_count(lengths, cap, padded=True, costs=costs, pad=pad)
        assert want is not None
        plan = plan_micro_batches(lengths, cap, padded=True, costs=costs, pad_to_multiple_of=pad)
        assert len(plan) == want
        assert all(footprint(costs, mb, pad) <= cap for mb in plan)


# ------------------------------------------------------------------------ balance, DP, errors


def test_a_count_above_the_fewest_is_balanced() -> None:
    # 8 rows of 100 fit in one micro-batch; 4 asked for: 2 rows each, equal workloads.
    plan = plan_micro_batches([100] * 8, 1000, padded=True, min_num_micro_batch=4)
    assert sorted(map(len, plan)) == [2, 2, 2, 2]
    # 6 rows of 100 and 12 of 50 at 600 positions: 2 micro-batches at the fewest; at 3 each
    # can hold 2 long and 4 short rows (footprint 600) with the same workload, at 4 the
    # workloads differ by |w(100) - 2 w(50)| = 5,000 at most.
    rows = [100] * 6 + [50] * 12
    for count, gap in ((3, 0), (4, 5_000)):
        plan = plan_micro_batches(rows, 600, padded=True, min_num_micro_batch=count)
        loads = [sum(24_576 * rows[i] + rows[i] ** 2 for i in mb) for mb in plan]
        assert len(plan) == count and max(loads) - min(loads) <= gap
        assert all(footprint(rows, mb) <= 600 for mb in plan)
    # Long and short rows: the long ones together, the short ones together (fewest = 2).
    lengths = [500] * 4 + [50] * 40
    plan = plan_micro_batches(lengths, 2000, padded=True)
    assert sorted(sorted({lengths[i] for i in mb}) for mb in plan) == [[50], [500]]


def test_data_parallel_agrees_on_the_largest_padded_count() -> None:
    ranks = [[100, 10, 10, 10, 100], [10] * 15, [150] * 2 + [10]]
    plans = plan_data_parallel(ranks, 150, padded=True)
    assert [len(p) for p in plans] == [3, 3, 3]
    for lengths, plan in zip(ranks, plans, strict=True):
        assert_cover(plan, len(lengths))
        assert all(footprint(lengths, mb) <= 150 for mb in plan)
    alone = plan_data_parallel(ranks, 150, padded=True, same_micro_num_in_dp=False)
    assert [len(p) for p in alone] == [3, 1, 3]


def test_an_over_cap_row_names_its_length_and_its_padded_cost_on_every_rank() -> None:
    with pytest.raises(ValueError, match="exceeds max_token_len") as caught:
        plan_data_parallel([[10] * 4, [90, 300, 10]], 256, padded=True, pad_to_multiple_of=64)
    text = str(caught.value)
    assert text.startswith("rank 1 of the DP group: sample 1 has 300 tokens; padded=True holds "
                           "it as 1 row x 320 wide = 320 token positions")
    assert "exceeds max_token_len=256" in text and "to at least 320" in text
    result = analyse([90, 300, 10], 256, PlanOptions(padded=True, pad_to_multiple_of=64))
    assert result.error is not None and type(result.error) is PaddedSampleOverCap


def test_a_forced_group_over_the_cap_names_its_rows_and_width() -> None:
    with pytest.raises(ValueError, match=r"the group starting at sample 2 has a widest row of 90 "
                                         r"tokens; padded=True holds it as 2 rows x 90 wide = 180"):
        plan_micro_batches([10, 10, 20, 90], 150, padded=True, force_group_size=2)
    # Summed, the same group costs 110 and fits.
    assert len(plan_micro_batches([10, 10, 20, 90], 150, force_group_size=2)) == 1


def test_bad_padded_and_sample_limit_arguments() -> None:
    with pytest.raises(TypeError, match="padded must be a bool"):
        plan_micro_batches([1, 2], 10, padded="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_samples_per_micro_batch must be a positive integer"):
        plan_micro_batches([1, 2], 10, max_samples_per_micro_batch=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"max_samples_per_micro_batch must be a positive integer "
                                         r"\(>= 1\), got 0"):
        plan_micro_batches([1, 2], 10, max_samples_per_micro_batch=0)
    with pytest.raises(ValueError, match="max_samples_per_micro_batch=1 is below force_group_size=2"):
        plan_micro_batches([1, 2], 10, max_samples_per_micro_batch=1, force_group_size=2)


def test_the_footprint_helper_and_the_environment_variable() -> None:
    assert padded_micro_batch_cost([200] * 80) == 16_000
    assert padded_micro_batch_cost([250, 3], 32) == 512
    assert padded_micro_batch_cost([250, 3], 32, 100) == 600
    assert padded_micro_batch_cost([]) == 0
    variable = "SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH"
    assert PlanOptions.from_env({variable: " 16 "}).max_samples_per_micro_batch == 16
    assert PlanOptions.from_env({variable: ""}).max_samples_per_micro_batch is None
    with pytest.raises(ValueError, match="SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH='0' is not "
                                         "accepted: it takes a positive integer, or empty for none"):
        PlanOptions.from_env({variable: "0"})


def test_rows_padded_on_both_sides_plan_on_max_left_plus_max_right() -> None:
    # Rows around a shared column (verl's left-padded prompt + right-padded response): a
    # micro-batch is max(left) + max(right) wide. The count is feasible and between the
    # bound and the brute-force optimum's; equal to it when the bound meets it.
    rng = random.Random(5)
    for _ in range(60):
        n = rng.randint(1, 6)
        left = [rng.randint(0, 20) for _ in range(n)]
        right = [rng.randint(0, 20) for _ in range(n)]
        cap = rng.randint(40, 120)
        if max(a + b for a, b in zip(left, right, strict=True)) > cap:
            continue

        def cost(block: list[int], left: list[int] = left, right: list[int] = right) -> int:
            return len(block) * (max(left[i] for i in block) + max(right[i] for i in block))

        best = min(len(p) for p in partitions(list(range(n))) if all(cost(b) <= cap for b in p))
        result = analyse([a + b for a, b in zip(left, right, strict=True)], cap, PlanOptions(padded=True),
                         padded_extents=(left, right))
        assert result.lower_bound <= best <= result.min_count
        assert result.min_count == best or not result.proven_optimal
        bins = build_plan(result, result.min_count)
        assert all(cost(mb) <= cap for mb in bins)
        assert_cover(bins, n)
    # The left side constant (left-padded rows): the sorted rule is exact again.
    result = analyse([5, 9, 3, 9], 20, PlanOptions(padded=True), padded_extents=([4, 8, 2, 8], [1, 1, 1, 1]))
    assert (result.min_count, result.proven_optimal) == (2, True)
