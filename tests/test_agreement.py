"""agreement.py: the vector layout its docstring promises, written out by hand; the second
exchange made only when a rank failed or the settings differ; and the rules of
plan_data_parallel, each pinned by a value a one-token change would break. No torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from seqlen_balancing import plan_micro_batches
from seqlen_balancing.agreement import (
    LAYOUT,
    VECTOR_SIZE,
    Layout,
    Report,
    Slot,
    combine,
    decode,
    decode_rows,
    encode,
    encode_rows,
    fingerprint,
    needs_reports,
    plan_data_parallel,
    plan_ranks,
    report,
    settings_of,
)
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.errors import (
    CountAboveGroups,
    ModeMismatch,
    NegativeLength,
    OptionMismatch,
    PlanError,
    RowsOverCap,
    SampleOverCap,
    StaticCountMismatch,
)
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import RankAnalysis, analyse
from seqlen_balancing.planning.rows import rows_at

MASK = (1 << 20) - 1
NONE = -(1 << 62)  # a negated slot of a rank with nothing to say


def model_vector(rank: int, printed: int | None, error: bool = False, dynamic: tuple[int, int] | None = None,
                 static: int | None = None, largest: int = 0, dummies: bool = False) -> list[int]:
    """The slots as agreement.py's docstring lays them out, written out by hand: 0 failed,
    1-2 the fingerprint and its negation, 3 count, 4 groups, 5-6 mode, 7-8 static count,
    9 largest (capped at 2**62 + 1), 10 the dummies' groups."""
    tag = MASK - rank
    v = [0, 0, NONE, 0, NONE, 0, NONE, 0, NONE, min(largest, 2**62 + 1), NONE]
    if printed is not None:
        v[1], v[2] = printed, -printed
    if error:
        v[0] = 1
        return v
    if static is not None:
        v[5], v[6] = 2 * 2**20 + tag, -2 * 2**20 + tag
        v[7], v[8] = static * 2**20 + tag, -static * 2**20 + tag
        return v
    assert dynamic is not None
    needed, groups = dynamic
    v[3] = needed * 2**20 + tag
    v[10 if dummies else 4] = -groups * 2**20 + tag
    v[5], v[6] = 1 * 2**20 + tag, -1 * 2**20 + tag
    return v


def workload(s: int) -> int:
    return 24576 * s + s * s


def verdict(analyses: list[RankAnalysis], global_rank: Callable[[int], int] | None = None,
            divisor: int = 1) -> tuple[int, PlanError | None, int | None]:
    """What every rank reads: the MAX, then every rank's report only when the vector asks."""
    reduced = combine([encode(a, r) for r, a in enumerate(analyses)])
    reports = [report(a) for a in analyses] if needs_reports(reduced) else None
    return decode(reduced, divisor, reports, global_rank)


def over_cap(tokens: int, index: int, cap: int, over: int, largest: int, cost: int = 0) -> SampleOverCap:
    return SampleOverCap(tokens, index, cap, over, largest, cost, 1, 1, False)


def test_the_layout_is_small_and_declared_once() -> None:
    names = [slot.name for slot in LAYOUT.slots]
    assert names == ["failed", "fingerprint", "neg_fingerprint", "count", "groups", "mode", "neg_mode",
                     "static", "neg_static", "largest", "dummy_groups"]
    assert VECTOR_SIZE == 11 <= 16
    layout = Layout(Slot("a"), Slot("b", 3), Slot("c", idle=-1))
    assert (layout.start("c"), layout.size, layout.idle_vector()) == (4, 5, [0, 0, 0, 0, -1])
    with pytest.raises(ValueError, match="names are unique"):
        Layout(Slot("a"), Slot("a"))


@pytest.mark.parametrize("rank", [0, 1, 5, MASK])
def test_the_whole_vector_matches_the_documented_layout(rank: int) -> None:
    fine = analyse([3, 5, 7, 2], 8)  # needs 3 micro-batches (7+... : 5+2, 3, 7 or so), 4 samples
    printed = fingerprint(settings_of(fine) or ())
    assert encode(fine, rank) == model_vector(rank, printed, dynamic=(fine.needed_count, 4), largest=7)
    assert fine.needed_count == 3
    dummy = analyse([3, 5], 8, PlanOptions(dummy_micro_batches=True))
    printed_dummy = fingerprint(settings_of(dummy) or ())
    assert encode(dummy, rank) == model_vector(rank, printed_dummy, dynamic=(1, 2), largest=5, dummies=True)
    failed = analyse([3, 9], 8)
    assert encode(failed, rank) == model_vector(rank, printed, error=True, largest=9)
    assert encode(RankAnalysis(None), rank, static_count=6) == model_vector(rank, None, static=6)
    assert all(-(2**63) <= v < 2**63 for v in encode(analyse([2**61], 2**62), rank))
    with pytest.raises(ValueError, match=r"DP rank must be in 0\.\.1048575, got -1"):
        encode(fine, -1)


def test_success_makes_no_second_exchange_and_failure_does() -> None:
    fine = [analyse([1, 2], 8), analyse([4, 4, 4], 8)]
    reduced = combine([encode(a, r) for r, a in enumerate(fine)])
    assert not needs_reports(reduced)
    assert decode(reduced) == (2, None, None)
    failing = [analyse([1, 2], 8), analyse([9], 8)]
    reduced = combine([encode(a, r) for r, a in enumerate(failing)])
    assert needs_reports(reduced)
    with pytest.raises(ValueError, match="pass every rank's report"):
        decode(reduced)


def test_lowest_failing_rank_wins_and_its_error_comes_whole() -> None:
    analyses = [
        analyse([1, 2], 4),
        RankAnalysis(over_cap(9, 1, 4, 1, 9)),
        RankAnalysis(over_cap(1 << 45, 1 << 40, 4, 2, (1 << 62) + 1)),
        RankAnalysis(NegativeLength("seq_lens", 3, -5)),
    ]
    count, error, rank = verdict(analyses)
    assert (count, rank) == (0, 1)
    assert error == replace(over_cap(9, 1, 4, 1, 9), rank=1)
    # Without rank 1, rank 2's huge values arrive whole.
    count, error, rank = verdict([analyses[0], analyses[3], analyses[2]], lambda r: 10 + r)
    assert (count, rank) == (0, 1)
    assert error == replace(NegativeLength("seq_lens", 3, -5), rank=1, global_rank=11)
    count, error, rank = verdict([analyses[0], analyses[2]], lambda r: 10 + r)
    assert error == replace(over_cap(1 << 45, 1 << 40, 4, 2, (1 << 62) + 1), rank=1, global_rank=11)
    # the detail stays with the rank that had it: every rank raises the same text
    detailed = RankAnalysis(replace(over_cap(9, 1, 4, 1, 9), detail="local"))
    assert verdict([analyses[0], detailed])[1] == replace(over_cap(9, 1, 4, 1, 9), rank=1)


def test_settings_that_differ_are_named_with_both_values_before_any_error() -> None:
    base = analyse([1, 2, 3], 8)
    odd = analyse([1, 2, 3], 8, PlanOptions(max_samples_per_micro_batch=2))
    failing = analyse([1, 9], 8)  # rank 2's own error: the difference comes first
    count, error, rank = verdict([base, odd, failing], lambda r: 4 + r)
    assert (count, rank) == (0, None)
    assert error == OptionMismatch("max_samples_per_micro_batch", False, 1, "2", 0, "None", 5, 4)
    assert error.message().startswith(
        "the ranks passed different max_samples_per_micro_batch: rank 1 (global rank 5) has "
        "max_samples_per_micro_batch=2 and rank 0 (global rank 4) has max_samples_per_micro_batch=None;"
    )
    costs = analyse([1, 2, 3], 8, costs=[1, 2, 3])
    _, error, _ = verdict([base, costs])
    assert error == OptionMismatch("costs", True, 1, "True", 0, "False")
    assert "rank 1 passes costs and rank 0 does not" in error.message()
    keys = analyse([1, 2], 8, PlanOptions(loss_weight_keys=("loss_mask",)))
    _, error, _ = verdict([base, keys])
    assert error == OptionMismatch("loss_weight_keys", False, 1, "('loss_mask',)", 0, "None")


def test_values_that_compare_equal_agree() -> None:
    # -0.0 and 0.0 plan alike (micro_batch_fixed_tokens set to "-0" on one rank): no mismatch
    zero, negative = PlanOptions(micro_batch_fixed_tokens=0.0), PlanOptions(micro_batch_fixed_tokens=-0.0)
    analyses = [analyse([1, 2], 8, zero), analyse([3, 4], 8, negative)]
    assert verdict(analyses) == (1, None, None)
    one, one_float = PlanOptions(micro_batch_fixed_tokens=1), PlanOptions(micro_batch_fixed_tokens=1.0)
    assert verdict([analyse([1], 8, one), analyse([1], 8, one_float)]) == (1, None, None)
    half = PlanOptions(micro_batch_fixed_tokens=0.5)
    _, error, _ = verdict([analyse([1], 8, zero), analyse([1], 8, half)])
    assert error == OptionMismatch("micro_batch_fixed_tokens", False, 1, "0.5", 0, "0.0")


def test_the_balance_step_setting_is_agreed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each "rank" reads its own environment when it states its settings.
    monkeypatch.setenv("SEQLEN_BALANCING_BALANCE_STEP", "1")
    on = analyse([1, 2], 8)
    vector_on, report_on = encode(on, 0), report(on)
    monkeypatch.setenv("SEQLEN_BALANCING_BALANCE_STEP", " TRUE ")  # the same switch, spelt otherwise
    same = encode(analyse([1, 2], 8), 1)
    assert not needs_reports(combine([vector_on, same]))
    monkeypatch.delenv("SEQLEN_BALANCING_BALANCE_STEP")
    off = analyse([1, 2], 8)
    reduced = combine([vector_on, encode(off, 1)])
    assert needs_reports(reduced)
    _, error, _ = decode(reduced, 1, [report_on, report(off)])
    assert error == OptionMismatch("SEQLEN_BALANCING_BALANCE_STEP", False, 0, "True", 1, "False")
    words = "rank 0 has SEQLEN_BALANCING_BALANCE_STEP=True and rank 1 has SEQLEN_BALANCING_BALANCE_STEP=False"
    assert words in error.message()


def test_a_rank_that_states_no_settings_is_not_a_mismatch() -> None:
    # A rank whose options could not be read states none: its own error speaks.
    broken = RankAnalysis(NegativeLength("seq_lens", 0, -1))
    assert report(broken) == Report(broken.error, None)
    count, error, rank = verdict([analyse([1], 8), broken])
    assert (count, rank) == (0, 1) and isinstance(error, NegativeLength)


def test_equal_rows_agree_in_a_second_vector_of_two_values() -> None:
    options = PlanOptions(equal_rows_per_micro_batch=True)
    # rank 0: 3 rows fit easily; rank 1: its 9-token sample and 2 filler rows of 1 exceed 10
    a, b = analyse([1, 1, 1, 1, 1, 1], 10, options), analyse([9, 1, 1, 1, 1, 1], 10, options)
    count, error, _ = verdict([a, b])
    assert error is None
    reduced = combine([encode_rows(a, count, 0), encode_rows(b, count, 1)])
    assert len(reduced) == 2
    # each rank's (rows, -tolerance) under its tag; the MAX takes the most rows, the least tolerance
    wants = [rows_at(x, count) for x in (a, b)]
    assert reduced == [max(w.rows * 2**20 + MASK - r for r, w in enumerate(wants)),
                       max(-w.tolerance * 2**20 + MASK - r for r, w in enumerate(wants))]
    assert decode_rows(reduced, 10)[0] == max(w.rows for w in wants)
    assert decode_rows([5 * 2**20 + MASK, -2 * 2**20 + MASK - 1], 10, lambda r: 7 + r) == (
        0, RowsOverCap(5, 2, 10, rank=1, global_rank=8), 1)
    assert decode_rows([5 * 2**20 + MASK, -5 * 2**20 + MASK], 10) == (5, None, None)
    assert decode_rows([0, NONE], 10) == (0, None, None)


def test_combine_refuses_vectors_of_different_lengths() -> None:
    assert combine([[1, 5], [3, 2]]) == [3, 5]
    with pytest.raises(ValueError, match=r"shorter|longer"):  # zip(strict=True)
        combine([[1, 2, 3], [1, 2]])


def test_agreed_count_and_the_ranks_named() -> None:
    # Rank 2 needs the most (3), rank 1 has the fewest samples (2): 3 > 2 is an error.
    analyses = [analyse([8, 8], 8), analyse([8, 1], 8), analyse([8, 8, 8], 8)]
    count, error, rank = verdict(analyses)
    assert count == 0 and rank == 0  # ranks 0 and 1 both have 2; the lowest is named
    assert error == CountAboveGroups(3, 2, 3, 2, None, rank=0)
    assert error.message().startswith(
        "rank 0 of the DP group: Cannot satisfy max_token_len while keeping forced groups atomic: "
        "3 micro-batches are needed but only 2"
    )
    assert "(rank 2 needs 3)" in error.message()
    # With global ranks (group rank r is global rank 5 + 2r): both ranks named with theirs.
    count, error, rank = verdict(analyses, lambda r: 5 + 2 * r)
    assert (count, rank) == (0, 0)
    assert error == CountAboveGroups(3, 2, 3, 2, 9, rank=0, global_rank=5)
    assert error.message().startswith("rank 0 of the DP group (global rank 5): ")
    assert "(rank 2 (global rank 9) needs 3)" in error.message()
    analyses = [analyse([8, 8, 8], 8), analyse([1, 1, 1, 1], 8, PlanOptions(num_batches_divided_by=1))]
    assert verdict(analyses) == (3, None, None)


def test_rounding_to_the_divisor_and_the_divisor_mismatch() -> None:
    two = PlanOptions(num_batches_divided_by=2)
    same = [analyse([8, 8, 8, 1], 9, two), analyse([1] * 6, 9, two)]
    assert verdict(same, divisor=2) == (4, None, None)
    differ = [analyse([1] * 4, 8, two), analyse([1] * 4, 8, PlanOptions(num_batches_divided_by=3))]
    count, error, rank = verdict(differ, divisor=2)
    assert (count, rank) == (0, None)
    assert error == OptionMismatch("num_batches_divided_by", False, 1, "3", 0, "2")
    assert "rank 1 has num_batches_divided_by=3 and rank 0 has num_batches_divided_by=2" in error.message()
    # None and 1 plan alike, and agree
    ones = [analyse([1] * 4, 8), analyse([1] * 4, 8, PlanOptions(num_batches_divided_by=1))]
    assert verdict(ones) == (1, None, None)


def test_plan_data_parallel_passes_every_setting_on() -> None:
    lengths = [[5, 5, 1, 1, 6, 2], [3, 3, 3, 3, 3, 3]]
    plans = plan_data_parallel(lengths, 10, force_group_size=2)
    for plan in plans:  # forced pairs stay together
        assert all(set(part) in ({0, 1}, {2, 3}, {4, 5}, {0, 1, 2, 3}, {2, 3, 4, 5}) for part in plan)
    assert [len(p) for p in plan_data_parallel(lengths, 10, min_num_micro_batch=4)] == [4, 4]
    assert [len(p) for p in plan_data_parallel(lengths, 10, num_batches_divided_by=4)] == [4, 4]


#: CHAMP steps (whole conversations, clipped to the cap) as (ranks, samples per rank, cap,
#: num_batches_divided_by, first row): the 2 x 32 ones are where the ranks' plans once ran
#: at more micro-batches than any rank needed alone (8 -> 9, 10 -> 11, 11 -> 12, 8 -> 9).
CHAMP_STEPS = [(2, 32, 4096, 1, 384), (2, 32, 4096, 1, 512), (2, 32, 4096, 1, 1280),
               (2, 32, 4096, 1, 1984), (4, 32, 4096, 3, 3200), (4, 24, 8192, 2, 6000)]


def champ_step(ranks: int, per: int, cap: int, first: int) -> list[list[int]]:
    rows = [min(cap, s) for s in load_champ_lengths()[first : first + ranks * per]]
    return [rows[r * per : (r + 1) * per] for r in range(ranks)]


@pytest.mark.parametrize(("ranks", "per", "cap", "divisor", "first"), CHAMP_STEPS)
def test_the_agreed_count_is_the_largest_count_a_rank_needs_alone(
    ranks: int, per: int, cap: int, divisor: int, first: int
) -> None:
    lengths = champ_step(ranks, per, cap, first)
    # the oracle: each rank planned alone, the largest count rounded up to the divisor
    own = max(len(plan_micro_batches(rank, cap)) for rank in lengths)
    expected = -(-own // divisor) * divisor
    options = PlanOptions(num_batches_divided_by=divisor)
    planned = plan_ranks(lengths, cap, options)
    assert [len(rank.plan) for rank in planned] == [expected] * ranks
    assert [len(plan) for plan in plan_data_parallel(lengths, cap, options=options)] == [expected] * ranks
    # without verl's order the agreed ranks run their micro-batches heaviest first
    off = plan_data_parallel(lengths, cap, options=options, use_dynamic_bsz_balance=False)
    for rank, plan in zip(lengths, off, strict=True):
        assert len(plan) == expected
        loads = [sum(workload(rank[i]) for i in part) for part in plan]
        assert loads == sorted(loads, reverse=True)
        assert sorted(i for part in plan for i in part) == list(range(per))


def test_plan_data_parallel_orders_as_verl_by_default() -> None:
    # Workloads grow with the index: balanced order puts the lightest at both ends.
    # verl 0.9.1: by workload descending [3], [2], [1], [0]; positions 0, 2 reversed
    # ([1], [3]), then positions 1, 3 ([2], [0]).
    lengths = [[1, 2, 3, 4], [1, 2, 3, 4]]
    balanced = [[[1], [3], [2], [0]]] * 2
    in_order = [[[0], [1], [2], [3]]] * 2
    assert plan_data_parallel(lengths, 4, min_num_micro_batch=4) == balanced
    # without verl's order, ranks that agree line their micro-batches up heaviest first
    # (index k about the same workload on every rank); alone, by first index
    heaviest_first = [[[3], [2], [1], [0]]] * 2
    assert plan_data_parallel(lengths, 4, min_num_micro_batch=4,
                              use_dynamic_bsz_balance=False) == heaviest_first
    alone = plan_data_parallel(lengths, 4, min_num_micro_batch=4, same_micro_num_in_dp=False)
    assert alone == balanced
    alone = plan_data_parallel(
        lengths, 4, min_num_micro_batch=4, same_micro_num_in_dp=False, use_dynamic_bsz_balance=False
    )
    assert alone == in_order


def test_plan_data_parallel_errors_name_the_rank() -> None:
    empty = r"^seq_lens_per_rank is empty; pass one list of lengths per DP rank$"
    with pytest.raises(ValueError, match=empty):
        plan_data_parallel([], 8)
    for same in (True, False):
        with pytest.raises(ValueError, match=r"^rank 1 of the DP group\b.*: sample 0 has 9 tokens"):
            plan_data_parallel([[1], [9]], 8, same_micro_num_in_dp=same)


def test_static_counts_agree_or_name_the_largest_and_smallest() -> None:
    static = RankAnalysis(None)
    same = [encode(static, r, static_count=4) for r in range(3)]
    assert decode(combine(same)) == (4, None, None)
    counts = {0: 3, 1: 5, 2: 3, 3: 5, 4: 2}
    vectors = [encode(static, r, static_count=c) for r, c in counts.items()]
    assert vectors == [model_vector(r, None, static=c) for r, c in counts.items()]
    count, error, rank = decode(combine(vectors), global_rank=lambda r: 100 + r)
    assert (count, rank) == (0, None)
    # Largest 5 (lowest rank 1), smallest 2 (rank 4), and their global ranks.
    assert error == StaticCountMismatch(1, 5, 4, 2, 101, 104)
    assert "rank 1 (global rank 101) has 5 and rank 4 (global rank 104) has 2" in error.message()


def test_a_group_mixing_modes_names_one_rank_of_each() -> None:
    vectors = [
        encode(analyse([1, 1], 4), 0),
        encode(RankAnalysis(None), 1, static_count=2),
        encode(analyse([1, 1], 4), 2),
        encode(RankAnalysis(None), 3, static_count=2),
    ]
    count, error, rank = decode(combine(vectors))
    assert (count, rank) == (0, None)
    # The static rank is the lowest one with mode 2, the dynamic one the lowest with mode 1.
    assert error == ModeMismatch(1, 0, None, None)
    assert "rank 1 cuts its batch statically" in error.message()
    assert "but rank 0 dynamically" in error.message()
    _, error, _ = decode(combine(vectors[1:]), global_rank=lambda r: 7 * r)
    assert error == ModeMismatch(1, 2, 7, 14)
