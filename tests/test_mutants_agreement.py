"""agreement.py: the vector layout its docstring promises, exact round trips, and the rules
of plan_data_parallel, each pinned by a value a one-token change would break (the mutants
that survived ``mutmut`` before these tests; see README, Development)."""

from __future__ import annotations

import pytest

from seqlen_balancing.agreement import VECTOR_SIZE, combine, decode, encode, plan_data_parallel
from seqlen_balancing.errors import N_ERROR_VALUES, ErrorCode, PlanError
from seqlen_balancing.planner import RankAnalysis, analyse

MASK = (1 << 20) - 1
INT64 = (-(1 << 63), (1 << 63) - 1)


def error_analysis(code: ErrorCode, values: tuple[int, ...]) -> RankAnalysis:
    return RankAnalysis(PlanError(code, values))


def test_rank_range_is_inclusive_of_the_last_rank() -> None:
    assert len(encode(analyse([1], 4), MASK)) == VECTOR_SIZE
    for rank in (MASK + 1, -1):
        with pytest.raises(ValueError, match=f"DP rank must be in 0..{MASK}, got {rank}"):
            encode(analyse([1], 4), rank)


@pytest.mark.parametrize("rank", [0, 1, 4096, 5000, 70000, MASK])
@pytest.mark.parametrize("code", list(ErrorCode))
def test_error_key_layout(rank: int, code: ErrorCode) -> None:
    """Slot 0 is ``1 << 24 | (2**20-1-rank) << 4 | code`` (module docstring)."""
    vector = encode(error_analysis(code, (1, 2, 3, 4, 5)), rank)
    key = vector[0]
    assert key >> 24 == 1
    assert (key >> 4) & MASK == MASK - rank
    assert key & 15 == int(code)
    count, error, at_fault = decode(vector)
    assert (count, at_fault) == (0, rank)
    assert error is not None and error.code is code and error.values == (1, 2, 3, 4, 5)


def test_every_slot_is_int64_even_for_huge_values() -> None:
    big = (1 << 63) - 1
    vectors = [
        encode(error_analysis(ErrorCode.SAMPLE_OVER_CAP, (big, big, big, big, big)), MASK),
        encode(error_analysis(ErrorCode.SAMPLE_OVER_CAP, (1 << 70, 0, 3, 1, 1 << 70)), 0),
        encode(analyse([1, 2], 4, num_batches_divided_by=(1 << 63) + 5), 3),
        encode(analyse([1, 2], 4, num_batches_divided_by=1 << 62), 3),
    ]
    for vector in vectors:
        assert all(INT64[0] <= value <= INT64[1] for value in vector), vector
    assert vectors[3][13] == 1 << 62 and vectors[3][14] == -(1 << 62)


@pytest.mark.parametrize(
    "values",
    [
        (0, 0, 0, 0, 0),
        (1, 2, 3, 4, 5),
        ((1 << 38) - 1, 1 << 38, (1 << 38) + 1, (1 << 62) + 12345, (1 << 63) - 1),
        (7, 0, 9, 0, (1 << 50) + 3),
    ],
)
def test_error_values_round_trip_whole(values: tuple[int, ...]) -> None:
    for code in (ErrorCode.SAMPLE_OVER_CAP, ErrorCode.BAD_ARGUMENT, ErrorCode.MIN_ABOVE_GROUPS):
        fine = encode(analyse([1, 2, 3], 8), 0)
        faulty = encode(error_analysis(code, values), 1)
        count, error, rank = decode(combine([fine, faulty]))
        assert (count, rank) == (0, 1)
        assert error == PlanError(code, values)
        assert len(error.values) == N_ERROR_VALUES


def test_short_error_values_are_padded_with_zeros_not_clipped_up() -> None:
    _, error, _ = decode(encode(error_analysis(ErrorCode.NOT_DIVISIBLE, (7, 2)), 0))
    assert error is not None and error.values == (7, 2, 0, 0, 0)
    assert error.message() == PlanError(ErrorCode.NOT_DIVISIBLE, (7, 2)).message()


def test_negative_error_values_travel_as_zero() -> None:
    # COUNT_ABOVE_GROUPS keeps -1 ("no rank") in its last slot; the vector carries 0.
    vector = encode(error_analysis(ErrorCode.COUNT_ABOVE_GROUPS, (4, 3, 4, -1)), 2)
    _, error, rank = decode(vector)
    assert rank == 2 and error is not None and error.values == (4, 3, 4, 0, 0)


def test_lowest_failing_rank_wins_and_its_values_come_whole() -> None:
    vectors = [
        encode(analyse([1, 2], 4), 0),
        encode(error_analysis(ErrorCode.SAMPLE_OVER_CAP, (9, 1, 4, 1, 9)), 1),
        encode(error_analysis(ErrorCode.SAMPLE_OVER_CAP, (1 << 45, 1 << 40, 4, 2, (1 << 62) + 1)), 2),
        encode(error_analysis(ErrorCode.BAD_LENGTH, (3, 1, 5)), 3),
    ]
    count, error, rank = decode(combine(vectors))
    assert (count, rank) == (0, 1)
    assert error == PlanError(ErrorCode.SAMPLE_OVER_CAP, (9, 1, 4, 1, 9))


def test_combine_refuses_vectors_of_different_lengths() -> None:
    assert combine([[1, 5], [3, 2]]) == [3, 5]
    with pytest.raises(ValueError, match=r"shorter|longer"):  # zip(strict=True)
        combine([[1, 2, 3], [1, 2]])


def test_agreed_count_and_the_ranks_named() -> None:
    # Rank 2 needs the most (3), rank 1 has the fewest samples (2): 3 > 2 is an error.
    analyses = [analyse([8, 8], 8), analyse([8, 1], 8), analyse([8, 8, 8], 8)]
    count, error, rank = decode(combine([encode(a, r) for r, a in enumerate(analyses)]))
    assert count == 0 and rank == 0  # ranks 0 and 1 both have 2; the lowest is named
    assert error == PlanError(ErrorCode.COUNT_ABOVE_GROUPS, (3, 2, 3, 2))
    assert "rank 2 needs 3" in error.message()
    analyses = [analyse([8, 8, 8], 8), analyse([1, 1, 1, 1], 8, num_batches_divided_by=1)]
    assert decode(combine([encode(a, r) for r, a in enumerate(analyses)])) == (3, None, None)


def test_rounding_to_the_divisor_and_the_divisor_mismatch() -> None:
    same = [analyse([8, 8, 8, 1], 9, num_batches_divided_by=2), analyse([1] * 6, 9, num_batches_divided_by=2)]
    assert decode(combine([encode(a, r) for r, a in enumerate(same)])) == (4, None, None)
    differ = [analyse([1] * 4, 8, num_batches_divided_by=2), analyse([1] * 4, 8, num_batches_divided_by=3)]
    count, error, rank = decode(combine([encode(a, r) for r, a in enumerate(differ)]))
    assert (count, rank) == (0, None)
    assert error == PlanError(ErrorCode.DIVISOR_MISMATCH, (2, 3))
    assert "from 2 to 3" in error.message()


def test_plan_data_parallel_passes_every_setting_on() -> None:
    lengths = [[5, 5, 1, 1, 6, 2], [3, 3, 3, 3, 3, 3]]
    plans = plan_data_parallel(lengths, 10, force_group_size=2)
    for plan in plans:  # forced pairs stay together
        assert all(set(part) in ({0, 1}, {2, 3}, {4, 5}, {0, 1, 2, 3}, {2, 3, 4, 5}) for part in plan)
    assert [len(p) for p in plan_data_parallel(lengths, 10, min_num_micro_batch=4)] == [4, 4]
    assert [len(p) for p in plan_data_parallel(lengths, 10, num_batches_divided_by=4)] == [4, 4]


def test_plan_data_parallel_orders_as_verl_by_default() -> None:
    # Workloads grow with the index: balanced order puts the lightest at both ends.
    lengths = [[1, 2, 3, 4], [1, 2, 3, 4]]
    balanced = [[[0], [2], [3], [1]]] * 2
    in_order = [[[0], [1], [2], [3]]] * 2
    assert plan_data_parallel(lengths, 4, min_num_micro_batch=4) == balanced
    assert plan_data_parallel(lengths, 4, min_num_micro_batch=4, use_dynamic_bsz_balance=False) == in_order
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
