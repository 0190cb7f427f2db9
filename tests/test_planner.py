"""plan_micro_batches on plain lists: properties over random inputs, and the simulated DP rule."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles import brute_force_optimum
from seqlen_balancing import (
    best_fit_decreasing,
    l2_lower_bound,
    plan_data_parallel,
    plan_micro_batches,
    roundup_divisible,
)
from seqlen_balancing.options import PlanOptions


def group_sizes(lengths: list[int], group: int) -> list[int]:
    return [sum(lengths[g : g + group]) for g in range(0, len(lengths), group)]


@given(
    lengths=st.lists(st.integers(0, 120), min_size=0, max_size=40),
    cap=st.integers(1, 300),
    group=st.sampled_from([1, 1, 2, 3]),
    divisor=st.one_of(st.none(), st.integers(1, 5)),
    minimum=st.one_of(st.none(), st.integers(1, 6)),
    balance=st.booleans(),
)
@settings(max_examples=400, deadline=None)
@pytest.mark.slow
def test_plan_is_strict_exact_divisible_and_deterministic(
    lengths: list[int], cap: int, group: int, divisor: int | None, minimum: int | None,
    balance: bool,
) -> None:
    kwargs = {
        "force_group_size": group,
        "num_batches_divided_by": divisor,
        "min_num_micro_batch": minimum,
        "use_dynamic_bsz_balance": balance,
    }
    try:
        plan = plan_micro_batches(lengths, cap, **kwargs)
    except ValueError as error:
        message = str(error)
        if not lengths:
            assert "no samples" in message
        elif len(lengths) % group:
            assert f"batch size {len(lengths)} is not divisible by force_group_size={group}" in message
        elif max(lengths) > cap:
            assert "exceeds max_token_len" in message and "forced group" not in message
        elif max(group_sizes(lengths, group)) > cap:
            assert "forced group exceeds max_token_len" in message
        elif minimum is not None and minimum > len(lengths) // group:
            assert f"min_num_micro_batch={minimum}" in message
        else:
            found = re.search(r"(\d+) micro-batches are needed but only (\d+) samples", message)
            assert found, message
            count, groups = int(found.group(1)), int(found.group(2))
            assert groups == len(lengths) // group and count > groups
            assert count % (divisor or 1) == 0
        return
    sizes = group_sizes(lengths, group)
    n_groups = len(sizes)
    assert sorted(i for part in plan for i in part) == list(range(len(lengths)))
    assert all(part and part == sorted(part) for part in plan)
    assert max(sum(lengths[i] for i in part) for part in plan) <= cap
    for part in plan:  # forced groups are never split
        assert all(part.count(g * group) == 1 and set(range(g * group, g * group + group)) <= set(part)
                   for g in {i // group for i in part})
    assert len(plan) % (divisor or 1) == 0
    assert len(plan) >= max(l2_lower_bound(sizes, cap), minimum or 1)
    ceiling = roundup_divisible(max(len(best_fit_decreasing(sizes, cap)), minimum or 1), divisor or 1)
    assert len(plan) <= ceiling and len(plan) <= n_groups
    assert plan_micro_batches(list(lengths), cap, **kwargs) == plan


def test_best_fit_count_is_a_ceiling_on_real_shapes() -> None:
    lengths = [2, 6, 6, 5, 5]
    assert len(plan_micro_batches(lengths, 12)) == 2


def test_num_micro_batches_forces_a_larger_count() -> None:
    plan = plan_micro_batches([1] * 8, 8, num_micro_batches=8)
    assert len(plan) == 8
    with pytest.raises(ValueError, match="num_micro_batches=1 is below the lower bound of 2 micro-batches"):
        plan_micro_batches([5, 5], 8, num_micro_batches=1)


def test_simulated_data_parallel_agreement() -> None:
    plans = plan_data_parallel([[95] * 5, [20] * 5], 100)
    assert [len(p) for p in plans] == [5, 5]
    assert all(len(mb) == 1 for mb in plans[1])
    solo = plan_data_parallel([[95] * 5, [20] * 5], 100, same_micro_num_in_dp=False)
    assert [len(p) for p in solo] == [5, 1]


def test_simulated_agreement_names_the_rank_with_too_few_samples() -> None:
    with pytest.raises(ValueError, match=(
        r"^rank 1 of the DP group: Cannot satisfy max_token_len while keeping forced groups "
        r"atomic: 3 micro-batches are needed but only 2"
    )):
        plan_data_parallel([[100] * 8, [100] * 2], 300)


@given(
    loads=st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=12), min_size=1, max_size=4),
    cap=st.integers(20, 120),
    divisor=st.one_of(st.none(), st.integers(1, 3)),
)
@settings(max_examples=150, deadline=None)
@pytest.mark.slow
def test_agreed_counts_are_equal_or_everyone_fails(
    loads: list[list[int]], cap: int, divisor: int | None
) -> None:
    try:
        plans = plan_data_parallel(loads, cap, num_batches_divided_by=divisor)
    except ValueError as error:
        assert str(error).startswith("rank ")
        return
    counts = {len(plan) for plan in plans}
    assert len(counts) == 1
    for lengths, plan in zip(loads, plans, strict=True):
        assert sorted(i for part in plan for i in part) == list(range(len(lengths)))
        assert max(sum(lengths[i] for i in part) for part in plan) <= cap


@pytest.mark.slow
def test_karmarkar_karp_is_returned_wherever_it_fits_on_real_batches() -> None:
    """The balance promise: where plain Karmarkar-Karp at our count respects the cap, our
    plan has its workload spread (we return it); checked on real CHAMP batches, tight and
    loose counts alike."""
    import random

    from seqlen_balancing.balance import spread
    from seqlen_balancing.data import load_champ_lengths
    from seqlen_balancing.partition import karmarkar_karp, workload

    lengths = load_champ_lengths()
    checked = 0
    for seed in range(40):
        rng = random.Random(seed)
        scale, n = rng.choice([1, 2, 4, 10]), rng.choice([64, 256, 512])
        cap = rng.choice([8192, 16384, 32768, 65536])
        sizes = [min(cap, x * scale) for x in rng.sample(lengths, n)]
        work = [workload(x) for x in sizes]
        smallest = len(plan_micro_batches(sizes, cap))
        for count in range(smallest, min(smallest + 3, n) + 1):
            kk = karmarkar_karp(work, count, equal_size=False)
            if max(sum(sizes[i] for i in part) for part in kk) > cap:
                continue
            ours = plan_micro_batches(sizes, cap, num_micro_batches=count)
            loads = [sum(work[i] for i in part) for part in ours]
            assert spread(loads) == spread([sum(work[i] for i in part) for part in kk])
            checked += 1
    assert checked > 40  # enough cases where Karmarkar-Karp fits


def test_rank_analysis_reports_the_bound_and_whether_the_count_is_proven() -> None:
    from seqlen_balancing.planner import analyse

    # 62 and 58 each leave room for one of 32, 27, 16: L2 says 2, the matching bound 3.
    result = analyse([62, 58, 32, 27, 16], 100)
    assert (result.min_count, result.lower_bound, result.bound_name) == (3, 3, "matching")
    assert result.proven_optimal
    floored = analyse([1] * 6, 10, PlanOptions(min_num_micro_batch=4))
    assert (floored.lower_bound, floored.bound_name, floored.min_count) == (4, "min_num_micro_batch", 4)
    assert floored.proven_optimal
    empty_tokens = analyse([0, 0, 0], 10)
    assert (empty_tokens.lower_bound, empty_tokens.bound_name, empty_tokens.min_count) == (1, "one", 1)
    failed = analyse([11], 10)
    assert failed.error is not None and not failed.proven_optimal and failed.bound_name == ""


def test_count_search_stops_once_the_bound_is_met(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where best-fit decreasing meets the bound, no further packing or search runs."""
    import random

    from seqlen_balancing import planner, search

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("search ran although the count met the bound")

    rng = random.Random(3)
    sizes = [rng.randint(100, 600) for _ in range(512)]
    sizes += [rng.randint(6000, 9000) for _ in range(512)]
    assert len(best_fit_decreasing(sizes, 16384)) > l2_lower_bound(sizes, 16384)
    for name in ("closing_fit_decreasing", "minimum_bin_slack", "repack", "dominant_bins",
                 "randomized_best_fit", "exact_packing"):
        monkeypatch.setattr(search, name, forbidden)  # the count search's room
    result = planner.analyse(sizes, 16384)
    assert result.proven_optimal and result.bound_name == "matching"
    assert result.min_count == len(best_fit_decreasing(sizes, 16384))


def test_proven_counts_on_real_batches_are_optimal_by_a_slow_check() -> None:
    """Real CHAMP x10 batches at cap 16,384: wherever the count is proven, the brute-force
    optimum of small draws agrees; the count is never below any bound."""
    import random

    from seqlen_balancing.data import load_champ_lengths
    from seqlen_balancing.planner import analyse
    from seqlen_balancing.rule import lower_bound

    lengths = load_champ_lengths()
    proven = 0
    for seed in range(60):
        sizes = [min(16384, 10 * x) for x in random.Random(seed).sample(lengths, 9)]
        result = analyse(sizes, 16384)
        opt = brute_force_optimum(sizes, 16384)
        assert lower_bound(sizes, 16384) <= opt <= result.min_count
        if result.proven_optimal:
            assert result.min_count == opt
            proven += 1
    assert proven > 30


def test_unproven_counts_report_the_strongest_bound() -> None:
    """Where a gap remains every bound was tried: ``lower_bound`` is the full
    :func:`lower_bound`; where the count is proven it equals the count (and the full bound)."""
    import random

    from seqlen_balancing.data import load_champ_lengths
    from seqlen_balancing.planner import analyse
    from seqlen_balancing.rule import lower_bound

    lengths = load_champ_lengths()
    outcomes = set()
    for seed in range(12):
        sizes = [min(16384, 10 * x) for x in random.Random(seed).sample(lengths, 256)]
        result = analyse(sizes, 16384)
        full = lower_bound(sizes, 16384)
        assert l2_lower_bound(sizes, 16384) <= result.lower_bound == full <= result.min_count
        assert result.proven_optimal == (result.min_count == full)
        outcomes.add(result.proven_optimal)
    assert outcomes == {True, False}  # both kinds occur in this setting


def test_issue19_case6_advice_names_the_longest_sample_of_the_group() -> None:
    # Rank 0 is named (the lowest rank at fault); the cap it advises must also hold rank 1's
    # 12,000-token sample, which a cap of 10,987 would refuse again.
    with pytest.raises(ValueError, match="exceeds max_token_len=9216") as caught:
        plan_data_parallel([[10_987, 500], [12_000, 700]], 9_216)
    message = str(caught.value)
    assert message.startswith("rank 0 of the DP group: sample 0 has 10987 tokens")
    assert "raise max_token_len to at least 12000 " in message
    # Forced groups: the advice is the longest group's tokens (7,000 + 6,000), not a sample's.
    with pytest.raises(ValueError, match="at least 13000 "):
        plan_data_parallel([[10_000, 100], [7_000, 6_000]], 9_216, force_group_size=2)
    # Alone, a rank is advised its own longest.
    with pytest.raises(ValueError, match="at least 10987 "):
        plan_micro_batches([10_987, 500], 9_216)


def test_advice_beyond_what_the_agreement_carries_says_so() -> None:
    # A peer's sample above 2**62 tokens saturates its slot: no exact figure is known, and
    # a figure that is too small would fail again on that peer.
    with pytest.raises(ValueError, match=r"raise max_token_len beyond 2\*\*62 tokens \(the longest"):
        plan_data_parallel([[20], [2**63]], 16)
    # Exactly at the limit the figure is exact and enough.
    with pytest.raises(ValueError, match=f"raise max_token_len to at least {2**62} "):
        plan_data_parallel([[20], [2**62]], 16)
