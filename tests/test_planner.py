"""planner.py: plan_micro_batches on plain lists (properties over random inputs, the simulated
DP rule), and its pieces (agreed_count, build_plan, local_count, the argument and length
errors) pinned by exact values (the mutants that survived ``mutmut`` before them)."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqlen_balancing.planning.search as search
from oracles import brute_force_optimum
from seqlen_balancing import (
    best_fit_decreasing,
    l2_lower_bound,
    plan_data_parallel,
    plan_micro_batches,
    roundup_divisible,
)
from seqlen_balancing.errors import (
    BelowOne,
    CountAboveGroups,
    EmptyBatch,
    LengthNotAnInteger,
    LengthsNotASequence,
    NegativeLength,
    NotAnInteger,
)
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.balance import spread
from seqlen_balancing.planning.planner import (
    RankAnalysis,
    agreed_count,
    analyse,
    argument_error,
    build_plan,
    local_count,
)
from seqlen_balancing.planning.rule import Rule


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

    from seqlen_balancing.data import load_champ_lengths
    from seqlen_balancing.planning.partition import karmarkar_karp, workload

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
    from seqlen_balancing.planning.planner import analyse

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

    from seqlen_balancing.planning import planner, search

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("search ran although the count met the bound")

    rng = random.Random(3)
    sizes = [rng.randint(100, 600) for _ in range(512)]
    sizes += [rng.randint(6000, 9000) for _ in range(512)]
    assert len(best_fit_decreasing(sizes, 16384)) > l2_lower_bound(sizes, 16384)
    for name in ("_closing_fit", "minimum_bin_slack", "repack",
                 "randomized_best_fit", "exact_packing"):
        monkeypatch.setattr(search, name, forbidden)  # the count search's room
    monkeypatch.setattr(Rule, "dominant", property(forbidden))  # the reduction, made once
    result = planner.analyse(sizes, 16384)
    assert result.proven_optimal and result.bound_name == "matching"
    assert result.min_count == len(best_fit_decreasing(sizes, 16384))


def test_proven_counts_on_real_batches_are_optimal_by_a_slow_check() -> None:
    """Real CHAMP x10 batches at cap 16,384: wherever the count is proven, the brute-force
    optimum of small draws agrees; the count is never below any bound."""

    from seqlen_balancing.data import load_champ_lengths
    from seqlen_balancing.planning.planner import analyse
    from seqlen_balancing.planning.rule import lower_bound

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

    from seqlen_balancing.data import load_champ_lengths
    from seqlen_balancing.planning.planner import analyse
    from seqlen_balancing.planning.rule import lower_bound

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


def test_agreed_count() -> None:
    assert agreed_count(5, 8) == (5, None)
    assert agreed_count(5, 8, 4) == (8, None)
    count, error = agreed_count(9, 8)
    assert count == 0 and error == CountAboveGroups(9, 8, 9, None)
    assert "the cap needs 9" in error.message()


def test_build_plan_count_range_message() -> None:
    analysis = analyse([3, 3, 3], 4)
    with pytest.raises(ValueError, match=r"^count must be in 3\.\.3 for this batch, got 5$"):
        build_plan(analysis, 5)


def test_local_count_raises_the_error_with_the_rank() -> None:
    analysis = RankAnalysis(EmptyBatch())
    with pytest.raises(ValueError, match=r"^rank 2 of the DP group\b.*: the batch has no samples"):
        local_count(analysis, 2)
    with pytest.raises(ValueError, match=r"^the batch has no samples"):
        local_count(analysis)
    assert local_count(analyse([3, 3, 3, 1], 4, PlanOptions(num_batches_divided_by=2))) == 4


def test_num_micro_batches_is_checked() -> None:
    with pytest.raises(ValueError, match=r"num_micro_batches must be a positive integer \(>= 1\), got 0"):
        plan_micro_batches([1, 2], 4, num_micro_batches=0)
    with pytest.raises(ValueError, match=(
        r"num_micro_batches=1 is below the lower bound of 2 micro-batches \(L2\) for this batch "
        r"under max_token_len=4: no plan with fewer exists; pass at least 2"
    )):
        plan_micro_batches([3, 3], 4, num_micro_batches=1)
    assert len(plan_micro_batches([1, 1, 1], 4, num_micro_batches=2)) == 2
    # An exact count must already be a multiple of the divisor (issue 19, case 8) ...
    with pytest.raises(ValueError, match="num_micro_batches=3 is not a multiple of num_batches_divided_by=2"):
        plan_micro_batches([1, 1, 1], 4, num_micro_batches=3, num_batches_divided_by=2)
    # ... and at most the samples.
    with pytest.raises(ValueError, match="4 micro-batches are needed but only 3"):
        plan_micro_batches([1, 1, 1], 4, num_micro_batches=4, num_batches_divided_by=2)


def test_num_micro_batches_is_exact_never_rounded_to_the_divisor() -> None:
    # Issue 19, case 8: "exactly this count" is exact; a count the divisor does not divide
    # is an error naming both (it used to be rounded up silently).
    assert len(plan_micro_batches([1, 1, 1, 1], 4, num_micro_batches=4, num_batches_divided_by=2)) == 4
    with pytest.raises(ValueError, match="num_micro_batches=3 is not a multiple of num_batches_divided_by=2"):
        plan_micro_batches([1, 1, 1, 1], 4, num_micro_batches=3, num_batches_divided_by=2)


class _SubInt(int):
    """An int subclass: not ``type(v) is int``, still a whole number."""


@pytest.mark.parametrize(
    ("lengths", "cap", "kwargs", "error", "message"),
    [
        (["x"], 8, {}, TypeError,
         "seq_lens[0] is not an integer; lengths are whole numbers of tokens ('x' (str))"),
        (5, 8, {}, TypeError, "seq_lens must be a sequence of whole numbers of tokens, one per sample "
         "(a list, a tuple, a 1-D tensor or array), got a value of type int"),
        ([1, 1.5], 8, {}, TypeError,
         "seq_lens[1] is not an integer; lengths are whole numbers of tokens (1.5 (float))"),
        ([1, -3], 8, {}, ValueError, "seq_lens[1] is -3; lengths must be >= 0 tokens"),
        ([1], 1.5, {}, TypeError,
         "max_token_len must be a positive integer, got a value that is not an integer (1.5 (float))"),
        ([1], 0, {}, ValueError, "max_token_len must be a positive integer (>= 1), got 0"),
        ([1], -5, {}, ValueError, "max_token_len must be a positive integer (>= 1), got -5"),
        ([1], 8, {"force_group_size": 0}, ValueError,
         "force_group_size must be a positive integer (>= 1), got 0"),
        ([1], 8, {"force_group_size": 2.0}, TypeError,
         "force_group_size must be a positive integer, got a value that is not an integer (2.0 (float))"),
        ([1], 8, {"min_num_micro_batch": -1}, ValueError,
         "min_num_micro_batch must be a positive integer (>= 1), got -1"),
        ([1], 8, {"num_batches_divided_by": "a"}, TypeError,
         "num_batches_divided_by must be a positive integer, got a value that is not an integer ('a' (str))"),
        ([1, 9, 9, 2], 8, {}, ValueError,
         "sample 1 has 9 tokens, which exceeds max_token_len=8 (2 samples over the cap in this batch); "
         "raise max_token_len to at least 9 (the longest sample of the call, on every DP rank of the "
         "group when they agree) or truncate the sequences"),
    ],
)
def test_input_errors_exactly(
    lengths: object, cap: object, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        plan_micro_batches(lengths, cap, **kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_whole_numbers_of_any_int_type_are_lengths() -> None:
    assert plan_micro_batches([_SubInt(3), 5], 8) == [[0, 1]]


def test_argument_error_returns_the_error_and_zero() -> None:
    # The docstring: (None, the int) for a positive integer, else (error, 0): NotAnInteger
    # (wrong type, None included) or BelowOne (the value given).
    assert argument_error(7, "max_token_len") == (None, 7)
    assert argument_error(1.5, "max_token_len") == (
        NotAnInteger("max_token_len", detail="1.5 (float)"), 0)
    assert argument_error(None, "force_group_size") == (
        NotAnInteger("force_group_size", detail="None (NoneType)"), 0)
    assert argument_error(-3, "num_batches_divided_by") == (
        BelowOne("num_batches_divided_by", -3), 0)


def test_length_errors_are_recorded_exactly() -> None:
    # Every rank raises the record the rank at fault holds, so its fields must be exact.
    lens = "seq_lens"
    assert analyse(["x"], 8).error == LengthNotAnInteger(lens, 0, detail="'x' (str)")
    assert analyse(5, 8).error == LengthsNotASequence(lens, "int")  # type: ignore[arg-type]
    assert analyse({3: 1}, 8).error == LengthsNotASequence(lens, "dict")  # never read as its keys
    assert analyse({3, 1}, 8).error == LengthsNotASequence(lens, "set")
    assert analyse([1, 2, -3], 8).error == NegativeLength(lens, 2, -3)


def test_cap_and_group_size_cannot_be_none() -> None:
    # Only min_num_micro_batch and num_batches_divided_by are optional.
    with pytest.raises(TypeError) as caught:
        plan_micro_batches([1], None)  # type: ignore[arg-type]
    assert str(caught.value) == (
        "max_token_len must be a positive integer, got a value that is not an integer (None (NoneType))")
    assert PlanOptions.parse({"force_group_size": None})[1] == NotAnInteger(
        "force_group_size", detail="None (NoneType)")


def test_local_count_names_the_rank_when_the_count_exceeds_the_groups() -> None:
    # 3 samples of 3 tokens under 4 need 3 micro-batches, rounded up to 4 > 3 samples.
    analysis = analyse([3, 3, 3], 4, PlanOptions(num_batches_divided_by=2))
    with pytest.raises(ValueError, match=(
        r"^rank 1 of the DP group: Cannot satisfy max_token_len while keeping forced groups atomic: "
        r"4 micro-batches are needed but only 3 samples/groups are "
        r"available and a micro-batch cannot be empty \(the cap needs 3, rounded up to 4 for "
        r"num_batches_divided_by\)"
    )):
        local_count(analysis, 1)


def test_karmarkar_karp_only_up_to_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lengths 8, 7, 6, 5, 4 (workload 24576 s + s^2) into 2 micro-batches of at most 17
    # tokens; n * count = 10. Hand-traced, both fit the cap and differ:
    # - Karmarkar-Karp: 8-7 and 6-5 leave differences 24591 and 24587 beside w(4) = 98320;
    #   98320 - 24591 puts 4 with 7 against 8, then 6 joins 8 and 5 joins 7: {8, 6} | {7, 5, 4}.
    # - LPT: 8 -> A, 7 -> B, 6 -> B (lighter), 5 -> A (lighter), then 4 -> B, as
    #   w(7) + w(6) = 24576 * 13 + 85 < w(8) + w(5) = 24576 * 13 + 89: {8, 5} | {7, 6, 4}.
    lengths = [8, 7, 6, 5, 4]
    karmarkar_karp_plan, lpt_plan = [[0, 2], [1, 3, 4]], [[0, 3], [1, 2, 4]]
    for budget, expected in ((10, karmarkar_karp_plan), (9, lpt_plan)):
        monkeypatch.setattr(search, "_KK_BUDGET", budget)
        got = plan_micro_batches(lengths, 17, num_micro_batches=2, use_dynamic_bsz_balance=False)
        assert got == expected, budget
