"""cost.py and the cap on what the GPU holds (issue 21): aligned lengths, micro-batch
rounding and caller-given costs, through the planner, the bounds, the DP agreement in one
process and every message. No torch (the batch API's tests are in test_cost_batch.py)."""

from __future__ import annotations

import math
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles import brute_force_optimum_cost
from seqlen_balancing import lower_bound, plan_data_parallel, plan_micro_batches
from seqlen_balancing.cost import (
    aligned_length,
    megatron_alignment,
    micro_batch_capacity,
    micro_batch_cost,
    sample_costs,
)
from seqlen_balancing.errors import LengthNotAnInteger
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import analyse


def aligned_sums(lengths: list[int], plan: list[list[int]], pad: int) -> list[int]:
    return [sum(aligned_length(lengths[i], pad) for i in mb) for mb in plan]


def assert_cover(plan: list[list[int]], n: int) -> None:
    assert sorted(i for mb in plan for i in mb) == list(range(n))
    assert all(mb for mb in plan)


# --------------------------------------------------------------------------- cost.py


def test_aligned_length_and_micro_batch_rounding() -> None:
    assert [aligned_length(n, 32) for n in (0, 1, 31, 32, 33, 250, 256)] == [0, 32, 32, 32, 64, 256, 256]
    assert aligned_length(7, 1) == 7
    assert micro_batch_cost([256] * 64, 512) == 16_384
    assert micro_batch_cost([256] * 65, 512) == 16_896
    assert micro_batch_cost([1], 512) == 512 and micro_batch_cost([], 512) == 0


def test_the_bucket_is_the_same_as_a_usable_cap_of_cap_floor_bucket() -> None:
    # ceil(S / b) * b <= C  <=>  S <= (C // b) * b, checked on every S, b, C in a range.
    for cap in range(1, 70):
        for bucket in range(1, 20):
            usable = micro_batch_capacity(cap, bucket)
            for total in range(0, 80):
                assert (micro_batch_cost([total], bucket) <= cap) == (total <= usable), (cap, bucket, total)
    assert micro_batch_capacity(16_400, 512) == 16_384
    assert micro_batch_capacity(16_383, 512) == 15_872
    assert micro_batch_capacity(500, 512) == 0


def test_megatron_alignment_follows_verls_rule() -> None:
    # Issue 21's cases: tp*cp*2 with context parallelism, tp without; FP8: lcm(16, align)
    # per sequence and align*128 for the micro-batch's total.
    assert megatron_alignment(4, 2) == (16, 1)
    assert megatron_alignment(8, 1) == (8, 1)
    assert megatron_alignment(4, 2, fp8=True) == (math.lcm(16, 16), 16 * 128)
    assert megatron_alignment(8) == (8, 1)
    assert megatron_alignment(3, 2) == (12, 1)
    assert megatron_alignment(3, 2, fp8=True) == (48, 12 * 128)
    assert megatron_alignment(1, 1, fp8=True) == (16, 128)
    assert megatron_alignment(2, 4) == (16, 1)
    with pytest.raises(ValueError, match=r"tp must be a positive integer \(>= 1\), got 0"):
        megatron_alignment(0)
    with pytest.raises(TypeError, match="fp8 must be a bool"):
        megatron_alignment(4, 2, fp8=1)  # type: ignore[arg-type]


def test_sample_costs() -> None:
    assert sample_costs([250, 256, 0, 1], pad_to_multiple_of=32) == [256, 256, 0, 32]
    assert sample_costs([5, 6]) == [5, 6]
    assert sample_costs([5, 6], pad_to_multiple_of=4, costs=[100, 0]) == [100, 0]
    with pytest.raises(ValueError, match="costs has 1 entries but there are 2 samples"):
        sample_costs([5, 6], costs=[1])
    with pytest.raises(ValueError, match=r"costs\[1\] is -3; costs must be >= 0"):
        sample_costs([5, 6], costs=[1, -3])
    with pytest.raises(ValueError, match="pad_to_multiple_of must be a positive integer"):
        sample_costs([5], pad_to_multiple_of=0)


def _alignment(environ: dict[str, str]) -> tuple[int, int]:
    options = PlanOptions.from_env(environ)
    return options.pad_to_multiple_of, options.micro_batch_multiple_of


def test_the_alignment_from_the_environment() -> None:
    pad, bucket = "SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF", "SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF"
    assert _alignment({}) == (1, 1)
    assert _alignment({pad: "16", bucket: " 512 "}) == (16, 512)
    assert _alignment({pad: ""}) == (1, 1)
    for bad in ("0", "-4", "16.0", "tp4"):
        expected = re.escape(f"{pad}={bad!r} is not accepted: it takes a positive integer")
        with pytest.raises(ValueError, match=expected):
            _alignment({pad: bad})


# --------------------------------------------------------------------------- the cases


def test_65_samples_of_250_tokens_one_micro_batch_today_two_aligned_to_32() -> None:
    lengths = [250] * 65  # 16,250 tokens; 16,640 aligned to 32
    assert len(plan_micro_batches(lengths, 16_384)) == 1
    plan = plan_micro_batches(lengths, 16_384, pad_to_multiple_of=32)
    assert len(plan) == 2
    assert_cover(plan, 65)
    assert max(aligned_sums(lengths, plan, 32)) <= 16_384
    assert sum(aligned_sums(lengths, plan, 32)) == 16_640
    assert lower_bound(lengths, 16_384) == 1
    assert lower_bound(lengths, 16_384, pad_to_multiple_of=32) == 2
    result = analyse(lengths, 16_384, PlanOptions(pad_to_multiple_of=32))
    assert (result.min_count, result.lower_bound, result.proven_optimal) == (2, 2, True)
    assert result.group_sizes == [256] * 65 and result.max_token_len == 16_384


def test_bucket_512_no_micro_batch_rounds_up_above_the_cap() -> None:
    rng = random.Random(21)
    lengths = [rng.randint(1, 3000) for _ in range(400)]
    over_without = 0
    for cap in (16_384, 16_400, 16_895):
        plan = plan_micro_batches(lengths, cap, micro_batch_multiple_of=512)
        assert_cover(plan, len(lengths))
        totals = [micro_batch_cost([lengths[i] for i in mb], 512) for mb in plan]
        assert max(totals) <= cap
        assert max(totals) <= 16_384  # every cap here is usable as 16,384
        plain = plan_micro_batches(lengths, cap)
        over_without += sum(micro_batch_cost([lengths[i] for i in mb], 512) > cap for mb in plain)
    assert over_without > 0  # the rounding matters on this batch: the test can fail
    # A cap that is not a multiple of the bucket plans exactly as its usable part.
    assert plan_micro_batches(lengths, 16_895, micro_batch_multiple_of=512) == plan_micro_batches(
        lengths, 16_384, micro_batch_multiple_of=512
    )


def test_custom_costs_plan_as_the_lengths_tripled() -> None:
    rng = random.Random(3)
    for _ in range(20):
        lengths = [rng.randint(0, 900) for _ in range(rng.randint(1, 60))]
        cap = rng.choice([2700, 4000, 9000])
        tripled = [3 * n for n in lengths]
        with_costs = analyse(lengths, cap, costs=tripled)
        as_lengths = analyse(tripled, cap)
        assert with_costs.group_sizes == as_lengths.group_sizes
        assert (with_costs.min_count, with_costs.lower_bound, with_costs.bound_name) == (
            as_lengths.min_count, as_lengths.lower_bound, as_lengths.bound_name
        )
        assert with_costs._packing == as_lengths._packing
        plan = plan_micro_batches(lengths, cap, costs=tripled)
        assert len(plan) == len(plan_micro_batches(tripled, cap))
        assert max(sum(tripled[i] for i in mb) for mb in plan) <= cap
        assert lower_bound(lengths, cap, costs=tripled) == lower_bound(tripled, cap)


def test_balance_stays_on_the_lengths() -> None:
    # Two heavy and two light samples; costs make the light ones costly, but the
    # workload (verl's 24576*s + s**2) and so the order come from the lengths.
    lengths, costs = [900, 900, 10, 10], [10, 10, 900, 900]
    assert plan_micro_batches(lengths, 1000, costs=costs) == plan_micro_batches(lengths, 1000)


@pytest.mark.parametrize("seed", range(12))
def test_counts_are_optimal_under_each_cost_model(seed: int) -> None:
    """The brute-force oracle (rounding checked literally, no shortcut) on small batches:
    the count is the optimum, and the lower bound never exceeds it."""
    rng = random.Random(1000 + seed)
    for _ in range(12):
        n = rng.randint(1, 8)
        lengths = [rng.randint(0, 40) for _ in range(n)]
        pad = rng.choice([1, 3, 8])
        bucket = rng.choice([1, 4, 16])
        costs = [rng.randint(0, 60) for _ in range(n)] if rng.random() < 0.3 else None
        weights = [aligned_length(x, pad) for x in (costs if costs is not None else lengths)]
        cap = max(bucket, aligned_length(max(weights), bucket)) + rng.randint(0, 50)
        kwargs = {"pad_to_multiple_of": pad, "micro_batch_multiple_of": bucket, "costs": costs}
        plan = plan_micro_batches(lengths, cap, **kwargs)  # type: ignore[arg-type]
        best = brute_force_optimum_cost(lengths, cap, pad, bucket, costs)
        assert len(plan) == best, (lengths, cap, kwargs)
        assert all(micro_batch_cost([weights[i] for i in mb], bucket) <= cap for mb in plan)
        bound = lower_bound(lengths, cap, **kwargs)  # type: ignore[arg-type]
        assert bound <= best


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5000), min_size=1, max_size=120),
    st.sampled_from([1, 8, 16, 32]),
    st.sampled_from([1, 128, 512]),
    st.integers(4096, 20000),
)
def test_every_micro_batch_costs_at_most_the_cap(
    lengths: list[int], pad: int, bucket: int, cap: int
) -> None:
    cap = max(cap, aligned_length(aligned_length(max(lengths), pad), bucket))  # every sample fits
    plan = plan_micro_batches(lengths, cap, pad_to_multiple_of=pad, micro_batch_multiple_of=bucket)
    assert_cover(plan, len(lengths))
    costs = [aligned_length(n, pad) for n in lengths]
    assert all(micro_batch_cost([costs[i] for i in mb], bucket) <= cap for mb in plan)
    result = analyse(lengths, cap, PlanOptions(pad_to_multiple_of=pad, micro_batch_multiple_of=bucket))
    assert result.lower_bound <= len(plan)


# --------------------------------------------------------------------------- messages


def test_an_oversized_aligned_sample_names_its_tokens_and_its_cost() -> None:
    with pytest.raises(ValueError, match=r"^sample 1 ") as info:
        plan_micro_batches([100, 250, 40], 255, pad_to_multiple_of=32)
    assert str(info.value) == (
        "sample 1 has 250 tokens and costs 256 tokens aligned to a multiple of "
        "pad_to_multiple_of=32, which exceeds max_token_len=255 (1 sample over the cap in this "
        "batch); raise max_token_len to at least 256 (the longest sample of the call, on every "
        "DP rank of the group when they agree, in aligned tokens), lower the alignment or "
        "truncate the sequences"
    )
    # Unaligned, the same batch plans: the message is about alignment, not length.
    assert len(plan_micro_batches([100, 250, 40], 255)) == 2


def test_plain_over_cap_message_is_unchanged() -> None:
    with pytest.raises(ValueError, match=r"^sample 1 has 300 tokens, which exceeds max_token_len=255 \("):
        plan_micro_batches([100, 300], 255)


def test_given_costs_and_a_bucket_in_the_message() -> None:
    with pytest.raises(ValueError, match=r"^sample 1 ") as info:
        plan_micro_batches([10, 20], 1000, costs=[5, 1200])
    assert str(info.value).startswith(
        "sample 1 has 20 tokens and costs 1200 tokens (the costs given), which exceeds max_token_len=1000"
    )
    assert "at least 1200" in str(info.value) and "lower the costs" in str(info.value)
    with pytest.raises(ValueError, match=r"^sample 0 ") as info:
        plan_micro_batches([600, 20], 1000, micro_batch_multiple_of=512)
    message = str(info.value)
    assert message.startswith(
        "sample 0 has 600 tokens, which exceeds max_token_len=1000, usable as 512 tokens since each "
        "micro-batch is rounded up to a multiple of micro_batch_multiple_of=512"
    ), message
    assert "raise max_token_len to at least 1024 " in message


def test_a_forced_group_over_the_cap_after_alignment() -> None:
    with pytest.raises(ValueError, match=r"^forced group") as info:
        plan_micro_batches([100, 100, 10, 10], 220, force_group_size=2, pad_to_multiple_of=64)
    assert str(info.value).startswith(
        "forced group exceeds max_token_len: the group starting at sample 0 has 200 tokens and "
        "costs 256 tokens aligned to a multiple of pad_to_multiple_of=64, which exceeds max_token_len=220"
    )


def test_bad_alignment_arguments() -> None:
    with pytest.raises(ValueError, match=r"^micro_batch_multiple_of=512 is larger than max_token_len=300"):
        plan_micro_batches([10], 300, micro_batch_multiple_of=512)
    with pytest.raises(ValueError, match=r"^pad_to_multiple_of must be a positive integer \(>= 1\), got 0"):
        plan_micro_batches([10], 300, pad_to_multiple_of=0)
    with pytest.raises(TypeError, match="micro_batch_multiple_of must be a positive integer, got a value"):
        plan_micro_batches([10], 300, micro_batch_multiple_of=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^costs has 1 entries but the batch has 2 samples"):
        plan_micro_batches([10, 20], 300, costs=[5])
    with pytest.raises(ValueError, match=r"^costs\[0\] is -5; costs must be >= 0 tokens"):
        plan_micro_batches([10], 300, costs=[-5])
    with pytest.raises(TypeError, match=r"^costs\[0\] is not an integer"):
        plan_micro_batches([10], 300, costs=[1.5])  # type: ignore[list-item]
    assert type(analyse([10], 300, costs=[1.5]).error) is LengthNotAnInteger  # type: ignore[list-item]
    # None means "no alignment", as 1 does.
    assert plan_micro_batches([10, 20], 30, pad_to_multiple_of=None, micro_batch_multiple_of=None) == [  # type: ignore[arg-type]
        [0, 1]
    ]


# --------------------------------------------------------------------------- DP agreement (one process)


def test_data_parallel_agrees_in_aligned_tokens() -> None:
    per_rank = [[250] * 65, [100] * 10]
    assert [len(p) for p in plan_data_parallel(per_rank, 16_384)] == [1, 1]
    plans = plan_data_parallel(per_rank, 16_384, pad_to_multiple_of=32)
    assert [len(p) for p in plans] == [2, 2]
    for lengths, plan in zip(per_rank, plans, strict=True):
        assert_cover(plan, len(lengths))
        assert max(aligned_sums(lengths, plan, 32)) <= 16_384
    costs = [[3 * n for n in lengths] for lengths in per_rank]
    # 750 each: 21 fit 16,384, so 65 samples need 4 (as 65 x 750 tokens would).
    assert [len(p) for p in plan_data_parallel(per_rank, 16_384, costs=costs)] == [4, 4]
    with pytest.raises(ValueError, match="costs has 1 lists but seq_lens_per_rank has 2 ranks"):
        plan_data_parallel(per_rank, 16_384, costs=costs[:1])


def test_data_parallel_over_cap_advice_covers_the_groups_costliest_sample() -> None:
    # Rank 0 is at fault (its 1,000 tokens cost 1,024); rank 1's 1,100 cost 1,152: the advice
    # must suit both.
    with pytest.raises(ValueError, match=r"^rank 0 ") as info:
        plan_data_parallel([[1000, 10], [1100]], 1010, pad_to_multiple_of=64)
    message = str(info.value)
    assert message.startswith("rank 0 of the DP group: sample 0 has 1000 tokens and costs 1024 tokens")
    assert "raise max_token_len to at least 1152 " in message


def test_a_bucket_above_the_cap_advises_a_cap_that_holds_every_group() -> None:
    # Issue 21 follow-up: the bucket (64) alone is too small for a 100-token sample; the
    # advice is the costliest sample of the group rounded up to the bucket, then it plans.
    with pytest.raises(ValueError, match="raise max_token_len to at least 128 or lower"):
        plan_data_parallel([[100]], 50, micro_batch_multiple_of=64)
    with pytest.raises(ValueError, match="raise max_token_len to at least 320 or lower"):
        plan_data_parallel([[100], [300]], 50, micro_batch_multiple_of=64)
    assert [len(p) for p in plan_data_parallel([[100], [300]], 320, micro_batch_multiple_of=64)] == [1, 1]
    with pytest.raises(ValueError, match="raise max_token_len to at least 64 or lower"):
        plan_data_parallel([[10]], 50, micro_batch_multiple_of=64)


@pytest.mark.parametrize("value", [True, 1.0, 1 + 0j, "1"])
def test_lower_bound_checks_its_cost_parameters_like_the_planner(value: object) -> None:
    for name in ("pad_to_multiple_of", "micro_batch_multiple_of"):
        with pytest.raises(TypeError, match=f"{name} must be a positive integer"):
            lower_bound([3, 5, 7, 2], 16, **{name: value})
        with pytest.raises(TypeError, match=name):
            plan_micro_batches([3, 5, 7, 2], 16, **{name: value})


@pytest.mark.parametrize(
    ("costs", "error", "fragment"),
    [
        ("abcd", TypeError, "costs must be a sequence of whole numbers of tokens, one per sample"),
        (5, TypeError, "costs must be a sequence of whole numbers of tokens, one per sample"),
        ([[1], [2], [3], [4]], TypeError, "costs[0] is not an integer"),
    ],
)
def test_badly_shaped_costs_are_named_as_such(costs: object, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as caught:
        plan_micro_batches([1, 2, 3, 4], 16, costs=costs)
    assert fragment in str(caught.value)
    with pytest.raises(error) as caught:
        plan_data_parallel([[1, 2, 3, 4]], 16, costs=[costs])
    assert str(caught.value).startswith("rank 0 of the DP group: ") and fragment in str(caught.value)
