"""agreement.py: the vector layout its docstring promises, exact round trips, and the rules
of plan_data_parallel, each pinned by a value a one-token change would break (the mutants
that survived ``mutmut`` before these tests; see README, Development)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import seqlen_balancing.agreement as agreement
from error_examples import EXAMPLES
from seqlen_balancing import plan_micro_batches
from seqlen_balancing.agreement import (
    LAYOUT,
    VECTOR_SIZE,
    Layout,
    Slot,
    combine,
    decode,
    encode,
    plan_data_parallel,
    plan_ranks,
)
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.errors import (
    RECORDS,
    Argument,
    BelowOne,
    CountAboveGroups,
    LengthSource,
    MinAboveGroups,
    ModeMismatch,
    NegativeLength,
    NotDivisible,
    OptionMismatch,
    PlanError,
    SampleOverCap,
    Shown,
    StaticCountMismatch,
)
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planner import RankAnalysis, analyse

MASK = (1 << 20) - 1
INT64 = (-(1 << 63), (1 << 63) - 1)
HALF = 38  # bits in each half of an error value (module docstring)
TOP = (1 << 76) - 1  # "out of range"; values 0..TOP-1 travel whole
NONE = -(1 << 62)  # a negated slot of a rank with nothing to say
CODE_BITS = 7  # codes 1..66 (module docstring: N.bit_length() bits)


#: The request's quantities in slot order (agreement.py's docstring): the agreed options of
#: PlanOptions (same_micro_num_in_dp decides whether ranks agree, so it is not one), the cap,
#: whether costs, workloads and group_ids are given.
REQUEST_NAMES = [
    "force_group_size", "num_batches_divided_by", "min_num_micro_batch", "use_dynamic_bsz_balance",
    "pad_to_multiple_of", "micro_batch_multiple_of", "padded", "max_samples_per_micro_batch",
    "over_cap", "dummy_micro_batches", "loss_weight_keys", "workload_model",
    "equal_rows_per_micro_batch", "micro_batch_overhead", "max_token_len", "costs", "workloads",
    "group_ids",
]
ROWS_WINDOW = 32  # equal_rows_per_micro_batch: the rows (27-58) and tolerances (59-90) of 32 counts
FIXED = 91  # slots before the request's pairs
SIZE = FIXED + 2 * len(REQUEST_NAMES)  # the request's pairs are the last slots
#: micro_batch_overhead=0.05 (the default) travels hashed, as any float does
OVERHEAD = agreement.request_value(0.05)


def workload(s: int) -> int:
    return 24576 * s + s * s


def request(cap: int | None, **changed: int) -> list[int | None]:
    """The request of a rank asked for verl's defaults under ``cap``, by hand: the positive
    integers 1 (None counts as 1 for the divisor and the floor), switches and over_cap 0,
    keys and model None (0), the cap, nothing given; ``changed`` overrides by name."""
    values = dict(zip(REQUEST_NAMES, [1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, OVERHEAD, cap, 0, 0, 0],
                      strict=True))
    values.update(changed)
    return [values[name] for name in REQUEST_NAMES]


def model_vector(
    rank: int,
    error: PlanError | None = None,
    dynamic: tuple[int, int] | None = None,
    static: int | None = None,
    largest: int = 0,
    dummies: bool = False,
    asked: list[int | None] | None = None,
) -> list[int]:
    """The slots as agreement.py's docstring lays them out, written out by hand: 0 the error
    key, 1-18 the error's 9 values in halves, then count (19), groups (20), mode (21, 22),
    static count (23, 24), largest (25), the dummies' groups (26), the equal rows' window
    (27-58 rows, 59-90 tolerances; idle here), then a pair per quantity of the request (91
    on: ``value << 20 | tag`` and ``-value << 20 | tag``). ``dynamic`` is
    (needed count, groups); ``largest`` the longest sample or group (capped at 2**62 + 1,
    which stands for "above 2**62"); ``dummies``: the rank may run dummy micro-batches, so
    its groups go to slot 26, not 20; ``asked``: the request's values (``None``: the rank
    states none, every pair idle)."""
    tag = MASK - rank
    v = [0] * SIZE
    v[25] = min(largest, 2**62 + 1)
    v[26] = NONE
    v[27 + ROWS_WINDOW : 27 + 2 * ROWS_WINDOW] = [NONE] * ROWS_WINDOW
    for j in range(len(REQUEST_NAMES)):
        value = None if asked is None else asked[j]
        v[FIXED + 2 * j] = 0 if value is None else value * 2**20 + tag
        v[FIXED + 2 * j + 1] = NONE if value is None else -value * 2**20 + tag
    if error is not None:
        v[0] = tag << CODE_BITS | error.code
        padded = list(error.values()) + [0] * (9 - len(error.values()))
        for j, value in enumerate(padded):
            value = value if 0 <= value < TOP else TOP
            v[1 + 2 * j] = tag * 2**HALF + value // 2**HALF
            v[2 + 2 * j] = tag * 2**HALF + value % 2**HALF
        v[20] = v[22] = v[24] = NONE
    elif static is not None:
        v[21], v[22] = 2 * 2**20 + tag, -2 * 2**20 + tag
        v[23], v[24] = static * 2**20 + tag, -static * 2**20 + tag
        v[20] = NONE
    else:
        assert dynamic is not None
        needed, groups = dynamic
        v[19], v[20] = needed * 2**20 + tag, -groups * 2**20 + tag
        if dummies:
            v[20], v[26] = NONE, v[20]
        v[21], v[22] = 1 * 2**20 + tag, -1 * 2**20 + tag
        v[24] = NONE
    return v


def over_cap(tokens: int, index: int, cap: int, over: int, largest: int, cost: int = 0) -> SampleOverCap:
    return SampleOverCap(tokens, index, cap, over, largest, cost, 1, 1, False)


def error_analysis(error: PlanError) -> RankAnalysis:
    return RankAnalysis(error)


def test_the_layout_is_declared_once_and_documented_by_name() -> None:
    names = [slot.name for slot in LAYOUT.slots]
    fixed = ["error_key", "error_values", "count", "groups", "mode", "neg_mode", "static",
             "neg_static", "largest", "dummy_groups", "rows", "neg_rows_tolerance"]
    pairs = [f"{neg}option_{name}" for name in REQUEST_NAMES for neg in ("", "neg_")]
    assert names == fixed + pairs
    assert VECTOR_SIZE == LAYOUT.size == sum(slot.width for slot in LAYOUT.slots) == SIZE == 127
    assert [LAYOUT.start(n) for n in fixed] == [0, 1, 19, 20, 21, 22, 23, 24, 25, 26, 27, 59]
    assert [LAYOUT.start(n) for n in pairs] == list(range(FIXED, SIZE))
    assert [name for name, _, _ in agreement.REQUEST] == REQUEST_NAMES
    doc = agreement.__doc__ or ""
    assert [n for n in fixed if f"``{n}``" not in doc] == []  # every slot named as declared
    assert "``option_<name>``" in doc and "``neg_option_<name>``" in doc
    assert len(RECORDS).bit_length() == CODE_BITS
    # Appending a slot is one more Slot: the earlier indices stay, the size grows.
    longer = Layout(*LAYOUT.slots, Slot("option", 2, idle=NONE))
    assert longer.start("option") == VECTOR_SIZE and longer.size == VECTOR_SIZE + 2
    assert longer.idle_vector()[:VECTOR_SIZE] == LAYOUT.idle_vector()
    assert longer.idle_vector()[VECTOR_SIZE:] == [NONE, NONE]
    for bad in ((Slot("a"), Slot("a")), (Slot("a", 0),)):
        with pytest.raises(ValueError, match="names are unique and widths at least 1"):
            Layout(*bad)


def test_rank_range_is_inclusive_of_the_last_rank() -> None:
    assert len(encode(analyse([1], 4), MASK)) == VECTOR_SIZE == SIZE
    for rank in (MASK + 1, -1):
        with pytest.raises(ValueError, match=f"DP rank must be in 0..{MASK}, got {rank}"):
            encode(analyse([1], 4), rank)


@pytest.mark.parametrize("rank", [0, 1, 4096, 70000, MASK])
def test_the_whole_vector_matches_the_documented_layout(rank: int) -> None:
    # Dynamic: [8, 8, 1] under a cap of 9 needs 2 micro-batches of 3 samples.
    assert encode(analyse([8, 8, 1], 9), rank) == model_vector(
        rank, dynamic=(2, 3), largest=8, asked=request(9))
    five = analyse([1] * 5, 9, PlanOptions(num_batches_divided_by=3))
    assert encode(five, rank) == model_vector(
        rank, dynamic=(1, 5), largest=1, asked=request(9, num_batches_divided_by=3))
    # the static path states no request (its options do not act there)
    assert encode(analyse([1], 4), rank, static_count=7) == model_vector(rank, static=7, largest=1)
    grouped = analyse([3, 4, 9, 1], 20, PlanOptions(force_group_size=2))  # groups of 7 and 10 tokens
    assert encode(grouped, rank) == model_vector(
        rank, dynamic=(1, 2), largest=10, asked=request(20, force_group_size=2))
    every = PlanOptions(min_num_micro_batch=2, use_dynamic_bsz_balance=False, pad_to_multiple_of=4,
                        micro_batch_multiple_of=8, over_cap="alone", dummy_micro_batches=True)
    costly = analyse([3, 4, 9], 40, every, costs=[1, 2, 3], workloads=[5, 6, 7])
    asked = request(40, min_num_micro_batch=2, use_dynamic_bsz_balance=0, pad_to_multiple_of=4,
                    micro_batch_multiple_of=8, over_cap=1, dummy_micro_batches=1, costs=1,
                    workloads=1)
    assert encode(costly, rank) == model_vector(rank, dynamic=(2, 3), largest=4, dummies=True,
                                                asked=asked)
    limited = analyse([3, 4, 9], 40, PlanOptions(max_samples_per_micro_batch=2, padded=True))
    assert encode(limited, rank) == model_vector(
        rank, dynamic=(2, 3), largest=9, asked=request(40, max_samples_per_micro_batch=2, padded=1))
    over = analyse([3, 40, 9], 20)  # the longest sample (40) travels with the error
    assert over.error is not None
    assert encode(over, rank) == model_vector(rank, error=over.error, largest=40, asked=request(20))
    no_cap = analyse([1, 2], 0)  # a cap that is not one: its slots idle, its error speaks
    assert no_cap.error is not None
    assert encode(no_cap, rank) == model_vector(rank, error=no_cap.error, largest=2,
                                                asked=request(None))
    huge = analyse([2**63], 2**64)  # a cap of 2**41 or more travels as a hash
    assert encode(huge, rank)[25] == 2**62 + 1
    assert encode(huge, rank)[FIXED + 2 * REQUEST_NAMES.index("max_token_len")] >> 20 >= 2**41
    assert encode(analyse([2**62], 2**64), rank)[25] == 2**62  # exact up to 2**62
    error = SampleOverCap(1 << 40, (1 << 38) - 1, 3, TOP - 1, 1 << 80, 7, 8, 16, True)
    assert encode(error_analysis(error), rank) == model_vector(rank, error=error)


@pytest.mark.parametrize("rank", [0, 1, 4096, 5000, 70000, MASK])
@pytest.mark.parametrize("error", EXAMPLES[::3], ids=lambda e: type(e).__name__)
def test_error_key_layout(rank: int, error: PlanError) -> None:
    """Slot 0 is ``(2**20-1-rank) << 7 | code`` (module docstring)."""
    error = replace(error, detail="")
    vector = encode(error_analysis(error), rank)
    key = vector[0]
    assert key >> (20 + CODE_BITS) == 0
    assert (key >> CODE_BITS) & MASK == MASK - rank
    assert key & (2**CODE_BITS - 1) == error.code
    assert vector == model_vector(rank, error=error)
    for global_rank in (None, lambda r: 3 * r + 7):
        count, decoded, at_fault = decode(vector, global_rank)
        assert (count, at_fault) == (0, rank)
        assert decoded is not None and type(decoded) is type(error)
        assert decoded.values() == error.values() or isinstance(error, CountAboveGroups)
        assert decoded.rank == rank
        assert decoded.global_rank == (None if global_rank is None else 3 * rank + 7)


@pytest.mark.parametrize("global_rank", [None, 4])
def test_count_above_groups_names_the_rank_needing_by_its_global_rank(global_rank: int | None) -> None:
    # The error names the rank needing the count; decode fills in its global rank.
    vector = encode(error_analysis(CountAboveGroups(5, 2, 5, 3)), 1)
    mapping = None if global_rank is None else (lambda r: r + global_rank)
    _, error, _ = decode(vector, mapping)
    if global_rank is None:
        assert error == CountAboveGroups(5, 2, 5, 3, None, rank=1)
    else:
        assert error == CountAboveGroups(5, 2, 5, 3, 3 + global_rank, rank=1, global_rank=1 + global_rank)


def test_every_slot_is_int64_even_for_huge_values() -> None:
    big = (1 << 63) - 1
    vectors = [
        encode(error_analysis(over_cap(big, big, big, big, big, big)), MASK),
        encode(error_analysis(over_cap(1 << 70, 0, 3, 1, 1 << 70)), 0),
        encode(error_analysis(over_cap(TOP - 1, TOP, 1 << 90, 0, 1)), MASK),
        encode(analyse([1, 2], 4, PlanOptions(num_batches_divided_by=(1 << 63) + 5)), 3),
        encode(analyse([1, 2], 4, PlanOptions(num_batches_divided_by=(1 << 41) - 1)), 3),
        encode(analyse([1, 2], 4, PlanOptions(num_batches_divided_by=1 << 41)), 3),
        encode(analyse([1, 2], 4), 0, static_count=1 << 42),
        encode(analyse([1, 2], 2**70), MASK),
    ]
    for vector in vectors:
        assert all(INT64[0] <= value <= INT64[1] for value in vector), vector
    # 2**41 - 1 is the largest divisor the vector carries; one more is the rank's own error.
    assert vectors[4] == model_vector(3, dynamic=(1, 2), largest=2,
                                      asked=request(4, num_batches_divided_by=(1 << 41) - 1))
    assert vectors[5][0] == (MASK - 3) << CODE_BITS | CountAboveGroups.code
    _, error, rank = decode(vectors[5])
    assert rank == 3 and error is not None
    # (agreed count, groups, count before rounding, rank needing it, its global rank)
    assert error == CountAboveGroups(1 << 41, 2, 1, 3, None, rank=3)


@pytest.mark.parametrize(
    "values",
    [
        (0, 0, 0, 0, 0),
        (1, 2, 3, 4, 5),
        ((1 << 38) - 1, 1 << 38, (1 << 38) + 1, (1 << 62) + 12345, (1 << 63) - 1),
        (7, 0, 9, 0, (1 << 50) + 3),
        (TOP - 1, (1 << 75) + 1, (1 << 64) + (1 << 38) - 1, 1 << 76 - 38, 2),
    ],
)
def test_error_values_round_trip_whole(values: tuple[int, ...]) -> None:
    a, b, c, d, e = values
    every = SampleOverCap(a, b, c, d, e, 11, (1 << 40) + 1, 13, True)  # all 9 value slots in use
    for sent in (every, MinAboveGroups(values[0], values[4]), BelowOne(Argument.SP_SIZE, -values[3])):
        fine = encode(analyse([1, 2, 3], 8), 0)
        faulty = encode(error_analysis(sent), 1)
        count, error, rank = decode(combine([fine, faulty]))
        # An over-cap error's largest becomes the longest sample of the group (the fine
        # rank's 3 where the faulty rank's own is smaller); the others travel whole.
        want = sent
        if isinstance(sent, SampleOverCap):
            want = replace(sent, largest=max(values[4], 3))
        assert (count, rank) == (0, 1)
        assert error == replace(want, rank=1)
        assert error.values() == want.values()
        _, error, _ = decode(combine([faulty, fine]), lambda r: r + 40)
        assert error == replace(want, rank=1, global_rank=41)


def test_values_beyond_the_range_arrive_out_of_range_not_clipped() -> None:
    sent = over_cap(TOP, TOP + 1, 1 << 100, TOP - 1, 0)
    _, error, _ = decode(encode(error_analysis(sent), 0))
    assert error is not None and error.values() == (TOP, TOP, TOP, TOP - 1, 0, 0, 1, 1, 0)
    assert "sample out of range has out of range tokens" in error.message()
    assert "to at least 0 (the longest sample" in error.message() and str(TOP - 1) in error.message()


def test_short_error_values_are_padded_with_zeros_not_clipped_up() -> None:
    vector = encode(error_analysis(NotDivisible(7, 2)), 0)
    assert vector[5:19] == [(MASK << HALF)] * 14  # the unused value slots: the tag, zero parts
    _, error, _ = decode(vector)
    assert error == NotDivisible(7, 2, rank=0) and error.values() == (7, 2)
    local = NotDivisible(7, 2).message()
    assert error.message() == "rank 0 of the DP group: " + local


def test_negative_error_values_travel_as_out_of_range() -> None:
    # Only 0..2**76-2 travel; a negative value arrives as "out of range", never 0 or clipped.
    vector = encode(error_analysis(over_cap(4, -1, 4, 1, 4)), 2)
    assert vector == model_vector(2, error=over_cap(4, TOP, 4, 1, 4))
    _, error, rank = decode(vector)
    assert rank == 2 and error is not None and error.values() == (4, TOP, 4, 1, 4, 0, 1, 1, 0)
    assert "sample out of range has 4 tokens" in error.message()


def test_lowest_failing_rank_wins_and_its_values_come_whole() -> None:
    vectors = [
        encode(analyse([1, 2], 4), 0),
        encode(error_analysis(over_cap(9, 1, 4, 1, 9)), 1),
        encode(error_analysis(over_cap(1 << 45, 1 << 40, 4, 2, (1 << 62) + 1)), 2),
        encode(error_analysis(NegativeLength(LengthSource.SEQ_LENS, 3, -5)), 3),
    ]
    count, error, rank = decode(combine(vectors))
    assert (count, rank) == (0, 1)
    assert error == replace(over_cap(9, 1, 4, 1, 9), rank=1)
    # Without rank 1, rank 2's huge values arrive whole (not mixed with rank 3's).
    count, error, rank = decode(combine([vectors[0], vectors[3], vectors[2]]), lambda r: 10 + r)
    assert (count, rank) == (0, 2)
    assert error == replace(over_cap(1 << 45, 1 << 40, 4, 2, (1 << 62) + 1), rank=2, global_rank=12)


def test_combine_refuses_vectors_of_different_lengths() -> None:
    assert combine([[1, 5], [3, 2]]) == [3, 5]
    with pytest.raises(ValueError, match=r"shorter|longer"):  # zip(strict=True)
        combine([[1, 2, 3], [1, 2]])


def test_agreed_count_and_the_ranks_named() -> None:
    # Rank 2 needs the most (3), rank 1 has the fewest samples (2): 3 > 2 is an error.
    analyses = [analyse([8, 8], 8), analyse([8, 1], 8), analyse([8, 8, 8], 8)]
    vectors = [encode(a, r) for r, a in enumerate(analyses)]
    count, error, rank = decode(combine(vectors))
    assert count == 0 and rank == 0  # ranks 0 and 1 both have 2; the lowest is named
    assert error == CountAboveGroups(3, 2, 3, 2, None, rank=0)
    assert error.message().startswith(
        "rank 0 of the DP group: Cannot satisfy max_token_len while keeping forced groups atomic: "
        "3 micro-batches are needed but only 2"
    )
    assert "(rank 2 needs 3)" in error.message()
    # With global ranks (group rank r is global rank 5 + 2r): both ranks named with theirs.
    count, error, rank = decode(combine(vectors), lambda r: 5 + 2 * r)
    assert (count, rank) == (0, 0)
    assert error == CountAboveGroups(3, 2, 3, 2, 9, rank=0, global_rank=5)
    assert error.message().startswith("rank 0 of the DP group (global rank 5): ")
    assert "(rank 2 (global rank 9) needs 3)" in error.message()
    analyses = [analyse([8, 8, 8], 8), analyse([1, 1, 1, 1], 8, PlanOptions(num_batches_divided_by=1))]
    assert decode(combine([encode(a, r) for r, a in enumerate(analyses)])) == (3, None, None)


def test_rounding_to_the_divisor_and_the_divisor_mismatch() -> None:
    two = PlanOptions(num_batches_divided_by=2)
    same = [analyse([8, 8, 8, 1], 9, two), analyse([1] * 6, 9, two)]
    assert decode(combine([encode(a, r) for r, a in enumerate(same)])) == (4, None, None)
    differ = [analyse([1] * 4, 8, two), analyse([1] * 4, 8, PlanOptions(num_batches_divided_by=3))]
    count, error, rank = decode(combine([encode(a, r) for r, a in enumerate(differ)]))
    assert (count, rank) == (0, None)
    assert error == OptionMismatch(Argument.NUM_BATCHES_DIVIDED_BY, Shown.NUMBER, 1, 3, 0, 2)
    assert "rank 1 has num_batches_divided_by=3 and rank 0 has num_batches_divided_by=2" in error.message()
    # None and 1 plan alike, and agree
    ones = [analyse([1] * 4, 8), analyse([1] * 4, 8, PlanOptions(num_batches_divided_by=1))]
    assert decode(combine([encode(a, r) for r, a in enumerate(ones)])) == (1, None, None)


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
    assert vectors == [model_vector(r, static=c) for r, c in counts.items()]
    count, error, rank = decode(combine(vectors), lambda r: 100 + r)
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
    _, error, _ = decode(combine(vectors[1:]), lambda r: 7 * r)
    assert error == ModeMismatch(1, 2, 7, 14)
