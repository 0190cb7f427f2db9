"""planner.py: ordering, the balancing fallbacks and the count rules, pinned exactly.

The capacity-aware LPT packing is compared with a slow model written here from its
docstring, on random small inputs. The rebalancing is checked against its contract (a
rearrangement within the cap that narrows gaps and stops by its stated rule) on random
inputs and against hand-traced cases; counts and bounds against brute force or the volume
bound ``ceil(total / cap)``; the rest with hand-checked values. These kill the ``mutmut``
mutants that the property tests let through (README, Development).
"""

from __future__ import annotations

import functools
import random

import pytest

import seqlen_balancing.search as search
from seqlen_balancing.balance import lpt, order_micro_batches, rebalance, spread
from seqlen_balancing.errors import (
    Argument,
    BelowOne,
    CountAboveGroups,
    EmptyBatch,
    LengthNotAnInteger,
    LengthsNotASequence,
    LengthSource,
    NegativeLength,
    NotAnInteger,
)
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planner import (
    RankAnalysis,
    agreed_count,
    analyse,
    argument_error,
    build_plan,
    local_count,
    plan_micro_batches,
)
from seqlen_balancing.rule import Rule
from seqlen_balancing.search import _close_gap


def sum_lpt(sizes: list[int], work: list[int], cap: int, count: int) -> list[list[int]] | None:
    """The capacity-aware LPT under the summed-cost rule of ``sizes`` and ``cap``."""
    return lpt(Rule.sums(sizes, cap), work, count)


def sum_rebalance(bins: list[list[int]], sizes: list[int], work: list[int], cap: int) -> list[list[int]]:
    """The rebalance under the summed-cost rule of ``sizes`` and ``cap``."""
    return rebalance(Rule.sums(sizes, cap), bins, work)


def sum_close_gap(sizes: list[int], cap: int, packing: list[list[int]], lower: int) -> list[list[int]]:
    """The exchange search step under the summed-cost rule of ``sizes`` and ``cap``."""
    return _close_gap(Rule.sums(sizes, cap), packing, lower)


def model_lpt(sizes: list[int], work: list[int], cap: int, count: int) -> list[list[int]] | None:
    """Heaviest group first (then larger, then lower index) into the lightest micro-batch by
    workload (then fewer groups, then lower index) that has room; None when none has."""
    bins: list[list[int]] = [[] for _ in range(count)]
    for g in sorted(range(len(sizes)), key=lambda g: (-work[g], -sizes[g], g)):
        state = sorted(
            (sum(work[i] for i in b), len(b), k) for k, b in enumerate(bins)
            if sum(sizes[i] for i in b) + sizes[g] <= cap
        )
        if not state:
            return None
        bins[state[0][2]].append(g)
    return bins


def random_case(rng: random.Random) -> tuple[list[list[int]], list[int], list[int], int]:
    n = rng.randint(2, 9)
    cap = rng.randint(4, 20)
    sizes = [rng.randint(0, cap // 2) for _ in range(n)]
    work = [rng.choice([0, rng.randint(1, 50)]) for _ in range(n)]
    count = rng.randint(1, n)
    bins: list[list[int]] = [[] for _ in range(count)]
    for g in range(n):
        fits = [k for k in range(count) if sum(sizes[i] for i in bins[k]) + sizes[g] <= cap]
        bins[rng.choice(fits) if fits else 0].append(g)
    return bins, sizes, work, cap


class _CountingBin(list[int]):
    """A micro-batch that counts the groups appended to it (one per move of ``_rebalance``)."""

    moves = 0

    def append(self, item: int) -> None:
        _CountingBin.moves += 1
        super().append(item)


def _loads(bins: list[list[int]], values: list[int]) -> list[int]:
    return [sum(values[g] for g in b) for b in bins]


def _move_left(bins: list[list[int]], sizes: list[int], work: list[int], cap: int) -> bool:
    """The docstring's stopping rule, checked on a finished plan: the lightest micro-batch
    (lowest index on a tie) could still take a group from a heavier one that holds more
    than one group, has the tokens for it and whose workload is positive and below the
    gap between the two."""
    loads, tokens = _loads(bins, work), _loads(bins, sizes)
    light = loads.index(min(loads))
    return any(
        len(bins[b]) > 1 and 0 < work[g] < loads[b] - loads[light] and sizes[g] <= cap - tokens[light]
        for b in range(len(bins))
        for g in bins[b]
    )


def test_rebalance_keeps_its_contract_on_random_plans() -> None:
    # Oracle: the contract, not the rule. The plan is a rearrangement of the same groups into
    # the same number of micro-batches, every micro-batch stays within the cap, each move
    # narrows a gap (so the sum of squared loads falls: moving w from a load H to a load
    # L < H - w changes it by 2w(w - (H - L)) < 0; the lightest load only rises and the
    # heaviest only falls), and it stops either after 2 * count moves or when the lightest
    # micro-batch can take nothing more.
    rng = random.Random(7)
    moved = 0
    for _ in range(400):
        bins, sizes, work, cap = random_case(rng)
        if any(sum(sizes[i] for i in b) > cap for b in bins):
            continue
        _CountingBin.moves = 0
        got = sum_rebalance([_CountingBin(b) for b in bins], sizes, work, cap)
        moves = _CountingBin.moves
        assert len(got) == len(bins)
        assert sorted(g for b in got for g in b) == sorted(g for b in bins for g in b)
        assert all(sum(sizes[g] for g in b) <= cap for b in got)
        before, after = _loads(bins, work), _loads(got, work)
        assert max(after) <= max(before) and min(after) >= min(before)
        if moves:
            assert sum(x * x for x in after) < sum(x * x for x in before)
        else:
            assert got == bins
        assert moves <= 2 * len(bins)
        assert moves == 2 * len(bins) or not _move_left(got, sizes, work, cap), (bins, sizes, work, cap)
        moved += moves > 0
    assert moved > 50  # the cases exercise the moves, not only the early exits


def test_rebalance_hand_checked() -> None:
    # Loads 60 and 5: the lightest bin takes group 0 (workload 30, closest to half of 55);
    # then no group of the heavier bin is below the gap of 5.
    assert sum_rebalance([[0, 1, 2], [3]], [3, 3, 3, 1], [30, 20, 10, 5], 10) == [[1, 2], [3, 0]]
    # Room limits the move: group 0 (6 tokens) cannot join a bin with 5 of 10 tokens.
    assert sum_rebalance([[0, 1], [2]], [6, 1, 5], [60, 40, 1], 10) == [[0], [2, 1]]


def test_rebalance_stops_after_two_rounds_per_micro_batch() -> None:
    # 20 groups of workload 1 in bin 0, bin 1 empty: each round moves one group (every group
    # is equally close to half the gap, so the lowest index goes) and the gap stays >= 12,
    # so only the limit of 2 * 2 = 4 rounds stops it: groups 0..3 move.
    bins: list[list[int]] = [list(range(20)), []]
    assert sum_rebalance(bins, [1] * 20, [1] * 20, 100) == [list(range(4, 20)), [0, 1, 2, 3]]


def test_rebalance_tries_the_next_heaviest_bin() -> None:
    # Loads 70, 35, 1 and tokens 18, 4, 10 of 18. The lightest bin (2) has room 8: the
    # 9-token groups of bin 0 do not fit, so bin 1 gives, with gap 34: group 3 (workload
    # 15, |30 - 34| = 4) beats group 2 (20, |40 - 34| = 6). Then loads 70, 20, 16, room 6:
    # bin 0 still cannot give, bin 1's only group (20) is not below its gap of 4, and bin
    # 2 is the lightest itself: stop.
    got = sum_rebalance([[0, 1], [2, 3], [4]], [9, 9, 2, 2, 10], [40, 30, 20, 15, 1], 18)
    assert got == [[0, 1], [2], [4, 3]]


def test_rebalance_leaves_zero_workload_groups() -> None:
    # Gap 49 between loads 50 and 1: group 1 (50) is not below it and group 0 has no
    # workload (moving it would narrow nothing), so nothing moves.
    assert sum_rebalance([[0, 1], [2]], [1, 1, 1], [0, 50, 1], 10) == [[0, 1], [2]]


def test_rebalance_breaks_ties_by_lowest_index() -> None:
    # Loads 10, 10, 1, 1. Round 1: lightest bin 2 (lowest index of the two), heaviest bin 0,
    # gap 9: groups 0 and 1 (5 each) are as close to 4.5, group 0 moves. Round 2: lightest
    # bin 3, heaviest bin 1 (10), gap 9: group 2 moves. Loads 5, 5, 6, 6: the lightest (bin
    # 0) is 1 below bins 2 and 3, and no group's workload is below 1: stop.
    got = sum_rebalance([[0, 1], [2, 3], [4], [5]], [1] * 6, [5, 5, 5, 5, 1, 1], 10)
    assert got == [[1], [3], [4, 0], [5, 2]]


def test_lpt_with_cap_follows_its_rule() -> None:
    rng = random.Random(11)
    for _ in range(400):
        _, sizes, work, cap = random_case(rng)
        count = rng.randint(1, len(sizes))
        assert sum_lpt(sizes, work, cap, count) == model_lpt(sizes, work, cap, count)


def test_lpt_with_cap_hand_checked() -> None:
    # Equal workloads: larger groups first, and ties on load go to the bin with fewer groups.
    assert sum_lpt([5, 6, 4], [0, 0, 0], 10, 2) == [[1, 2], [0]]
    assert sum_lpt([0, 0, 0, 0], [0, 0, 0, 0], 10, 2) == [[0, 2], [1, 3]]
    assert sum_lpt([5, 5, 4, 3, 3], [5, 5, 4, 3, 3], 10, 2) is None


def test_the_summed_rule_is_inclusive() -> None:
    assert Rule.sums([3, 5], 8).fits([0, 1])
    assert not Rule.sums([3, 6], 8).fits([0, 1])


def test_agreed_count() -> None:
    assert agreed_count(5, 8) == (5, None)
    assert agreed_count(5, 8, 4) == (8, None)
    count, error = agreed_count(9, 8)
    assert count == 0 and error == CountAboveGroups(9, 8, 9, None)
    assert "the cap needs 9" in error.message()


def model_order(micro_batches: list[list[int]], workloads: list[int], group: int = 1) -> list[list[int]]:
    """verl 0.9.1's balanced order, slowly (planner docstring): compare two micro-batches by
    workload (the sum over the forced groups they hold), then by first sample index (0 for
    an empty one), heaviest first; deal that list out, the 1st, 3rd, 5th... each to the
    front of the result, the 2nd, 4th, 6th... after them in turn."""

    def load(mb: list[int]) -> int:
        return sum(workloads[x] for x in {i // group for i in mb})

    def heavier_first(a: list[int], b: list[int]) -> int:
        ka, kb = (load(a), a[0] if a else 0), (load(b), b[0] if b else 0)
        return -1 if ka > kb else 1 if ka < kb else 0

    ranked = sorted(micro_batches, key=functools.cmp_to_key(heavier_first))
    front: list[list[int]] = []
    back: list[list[int]] = []
    for position, mb in enumerate(ranked):
        if position % 2 == 0:
            front.insert(0, mb)
        else:
            back.append(mb)
    return front + back


def test_order_micro_batches() -> None:
    # In order: by the smallest sample index, an empty micro-batch first.
    assert order_micro_batches([[2], [0, 3], [1]], [1, 1, 1, 1], False) == [[0, 3], [1], [2]]
    assert order_micro_batches([[1], []], [1, 1], False) == [[], [1]]
    # Balanced, hand-checked: by load descending [0] 4, [2] 3, [3] 2, [1] 1; positions 0, 2
    # reversed ([3], [0]), then positions 1, 3 ([2], [1]).
    assert order_micro_batches([[0], [1], [2], [3]], [4, 1, 3, 2], True) == [[3], [0], [2], [1]]
    # Five: [0] 9, [1] 7, [2] 5, [3] 3, [4] 1 -> [4], [2], [0] then [1], [3].
    assert order_micro_batches([[0], [1], [2], [3], [4]], [9, 7, 5, 3, 1], True) == [[4], [2], [0], [1], [3]]
    # Equal loads: the larger first index ranks heavier.
    assert order_micro_batches([[3], [1]], [0, 5, 0, 5], True) == [[3], [1]]
    assert order_micro_batches([[], [1]], [0, 0], True) == [[1], []]
    # Forced pairs: a micro-batch's load is that of its groups (workloads per group).
    mbs = [[0, 1], [2, 3, 4, 5], [6, 7]]
    assert order_micro_batches(mbs, [5, 1, 1, 5], True, 2) == [[2, 3, 4, 5], [6, 7], [0, 1]]
    assert model_order(mbs, [5, 1, 1, 5], 2) == [[2, 3, 4, 5], [6, 7], [0, 1]]


def test_order_micro_batches_matches_the_model() -> None:
    rng = random.Random(5)
    for _ in range(300):
        group = rng.choice([1, 1, 2, 3])
        n_groups = rng.randint(1, 9)
        workloads = [rng.randint(0, 4) for _ in range(n_groups)]  # small: many ties
        order = list(range(n_groups))
        rng.shuffle(order)
        cuts = sorted(rng.sample(range(1, n_groups), rng.randint(0, n_groups - 1))) if n_groups > 1 else []
        mbs = []
        for a, b in zip([0, *cuts], [*cuts, n_groups], strict=True):
            groups = sorted(order[a:b])
            mbs.append(sorted(i for g in groups for i in range(g * group, (g + 1) * group)))
        assert order_micro_batches(mbs, workloads, True, group) == model_order(mbs, workloads, group)


def test_default_order_is_balanced() -> None:
    lengths = [1, 2, 3, 4]
    in_order = [[0], [1], [2], [3]]
    balanced = model_order(in_order, [24576 * s + s * s for s in lengths])
    assert balanced == [[1], [3], [2], [0]]
    assert plan_micro_batches(lengths, 4, min_num_micro_batch=4) == balanced
    assert plan_micro_batches(lengths, 4, min_num_micro_batch=4, use_dynamic_bsz_balance=False) == in_order
    analysis = analyse(lengths, 4, PlanOptions(min_num_micro_batch=4))
    assert build_plan(analysis, 4) == balanced
    assert build_plan(analysis, 4, False) == in_order


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



def test_spread() -> None:
    assert spread([]) == 0.0
    assert spread([0, 0]) == 0.0
    assert spread([90, 100, 110]) == pytest.approx(0.2)
    assert spread([1, 3]) == 1.0
    assert spread([5]) == 0.0


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


def test_analysis_records_its_lower_bound() -> None:
    assert analyse([6, 6, 6], 10).lower_bound == 3
    assert analyse([6, 6, 6], 10, PlanOptions(min_num_micro_batch=3)).lower_bound == 3
    assert analyse([1, 1, 1], 10, PlanOptions(min_num_micro_batch=2)).lower_bound == 2


def fewest_bins(sizes: list[int], cap: int) -> int:
    """Brute force: the fewest bins of ``cap`` for ``sizes`` (dynamic programming over the
    subsets packed so far, keeping the fewest bins and then the lightest open bin)."""
    n = len(sizes)
    best: list[tuple[int, int] | None] = [None] * (1 << n)
    best[0] = (1, 0)
    for mask in range(1 << n):
        state = best[mask]
        if state is None:
            continue
        bins, load = state
        for i in range(n):
            if not mask >> i & 1:
                step = (bins, load + sizes[i]) if load + sizes[i] <= cap else (bins + 1, sizes[i])
                seen = best[mask | 1 << i]
                if seen is None or step < seen:
                    best[mask | 1 << i] = step
    last = best[-1]
    assert last is not None
    return last[0]


def _is_packing(bins: list[list[int]], sizes: list[int], cap: int) -> bool:
    return sorted(g for b in bins for g in b) == list(range(len(sizes))) and all(
        b and sum(sizes[g] for g in b) <= cap for b in bins
    )


def test_argument_error_returns_the_error_and_zero() -> None:
    # The docstring: (None, the int) for a positive integer, (None, 1) for an allowed None,
    # else (error, 0): NotAnInteger (wrong type) or BelowOne (the value given).
    assert argument_error(7, Argument.MAX_TOKEN_LEN, False) == (None, 7)
    assert argument_error(None, Argument.MIN_NUM_MICRO_BATCH, True) == (None, 1)
    assert argument_error(1.5, Argument.MAX_TOKEN_LEN, False) == (
        NotAnInteger(Argument.MAX_TOKEN_LEN, detail="1.5 (float)"), 0)
    assert argument_error(None, Argument.FORCE_GROUP_SIZE, False) == (
        NotAnInteger(Argument.FORCE_GROUP_SIZE, detail="None (NoneType)"), 0)
    assert argument_error(-3, Argument.NUM_BATCHES_DIVIDED_BY, True) == (
        BelowOne(Argument.NUM_BATCHES_DIVIDED_BY, -3), 0)


def test_length_errors_are_recorded_exactly() -> None:
    # The agreement carries these records' fields, so they must be exact, not only the message.
    lens = LengthSource.SEQ_LENS
    assert analyse(["x"], 8).error == LengthNotAnInteger(lens, 0, detail="'x' (str)")
    assert analyse(5, 8).error == LengthsNotASequence(lens, "int")  # type: ignore[arg-type]
    assert analyse({3: 1}, 8).error == LengthsNotASequence(lens, "dict")  # never read as its keys
    assert analyse({3, 1}, 8).error == LengthsNotASequence(lens, "set")
    assert analyse([1, 2, -3], 8).error == NegativeLength(lens, 2, -3)
    assert NegativeLength(lens, 2, -3).values() == (0, 2, 3)  # the value travels negated


def test_cap_and_group_size_cannot_be_none() -> None:
    # Only min_num_micro_batch and num_batches_divided_by are optional.
    with pytest.raises(TypeError) as caught:
        plan_micro_batches([1], None)  # type: ignore[arg-type]
    assert str(caught.value) == (
        "max_token_len must be a positive integer, got a value that is not an integer (None (NoneType))")
    assert PlanOptions.parse({"force_group_size": None})[1] == NotAnInteger(
        Argument.FORCE_GROUP_SIZE, detail="None (NoneType)")


def test_analysis_counts_samples_and_groups() -> None:
    analysis = analyse([1, 2, 3, 4, 5, 6], 20, PlanOptions(force_group_size=3))
    assert (analysis.n_samples, analysis.n_groups, analysis.group_sizes) == (6, 2, [6, 15])


def test_bound_name_on_a_tie_with_the_floor() -> None:
    # bound_name is the floor only when the floor is larger than the bound. [1, 1] under 10:
    # L2 = ceil(2 / 10) = 1 equals the floor of 1 ("one" is for zero-length batches).
    assert (analyse([1, 1], 10).lower_bound, analyse([1, 1], 10).bound_name) == (1, "L2")
    assert (analyse([0, 0], 10).lower_bound, analyse([0, 0], 10).bound_name) == (1, "one")
    # Three items above half the cap: L2 = 3, equal to min_num_micro_batch=3.
    tie = analyse([6, 6, 6], 10, PlanOptions(min_num_micro_batch=3))
    assert (tie.lower_bound, tie.bound_name) == (3, "L2")


def test_a_floor_at_the_packing_count_stops_the_bounds_early() -> None:
    # Best-fit decreasing packs [6, 6, 2, 2, 2] under 9 into 3 bins (6+2, 6+2, 2); with
    # min_num_micro_batch=3 the floor decides the count, so only L2 (ceil(18 / 9) = 2) and
    # the cardinality bound (the 3 smallest items fit a bin: ceil(5 / 3) = 2) are evaluated.
    # Both are below 3, so the floor is named, although the matching bound (each 6 takes at
    # most one 2, the third 2 needs a bin: 3) would have met it.
    analysis = analyse([6, 6, 2, 2, 2], 9, PlanOptions(min_num_micro_batch=3))
    assert (analysis.min_count, analysis.lower_bound, analysis.bound_name) == (
        3, 3, "min_num_micro_batch")


def test_the_strongest_bound_proves_a_count() -> None:
    # Brute force: 4 bins; the volume bound says only ceil(113 / 38) = 3. The library's
    # bound (Fekete-Schepers here) must reach the optimum to prove it.
    sizes, cap = [7, 21, 14, 20, 14, 11, 18, 8], 38
    analysis = analyse(sizes, cap)
    assert fewest_bins(sizes, cap) == 4
    assert (analysis.min_count, analysis.lower_bound, analysis.proven_optimal) == (4, 4, True)


@pytest.mark.parametrize(
    ("sizes", "cap"),
    [
        # One dominant bin (39 + 37); the search reaches 4 only from the reduced items.
        ([22, 37, 23, 28, 31, 28, 39, 35, 35, 19], 77),
        # The closing-fit packing of the reduced items is the one the search completes.
        ([47, 60, 34, 39, 49, 30, 31, 54, 50, 55, 31, 34, 44, 30, 50, 40, 50, 41, 55, 33,
          59, 54, 30, 45, 30, 54, 42, 33, 38, 35, 45, 29, 37, 49, 43, 33, 50, 31], 116),
        # The minimum-bin-slack packing wins the tie with best fit (its waste sits last).
        ([26, 25, 42, 35, 27, 30, 29, 41, 39, 32, 39, 34, 28, 16, 41, 38, 17, 21, 25, 22,
          22, 29, 30, 18, 43, 41, 44, 16, 30, 33, 28, 15, 32, 22, 40, 34, 16, 18], 75),
        # Closing fit is kept only when strictly better than best fit.
        ([31, 24, 23, 27, 28, 17, 16, 32, 32, 24, 15, 31, 22, 18, 28, 15, 22, 29, 26, 27,
          19, 31, 30, 25, 21, 27, 28, 33, 22, 19, 31, 33, 33, 21, 24, 17, 23, 15, 23, 15], 63),
    ],
)
def test_count_reaches_the_volume_bound(sizes: list[int], cap: int) -> None:
    # Oracle: ceil(total / cap) bins are needed by volume alone; these batches fit exactly
    # that many, which best fit decreasing alone misses.
    volume = -(-sum(sizes) // cap)
    analysis = analyse(sizes, cap)
    assert (analysis.min_count, analysis.lower_bound, analysis.proven_optimal) == (volume, volume, True)
    assert len(analysis._packing) == volume and _is_packing(analysis._packing, sizes, cap)


def test_minimum_bin_slack_runs_up_to_4096_groups() -> None:
    # 4,084 empty samples and twelve that need 4 micro-batches by volume (ceil(526 / 133)),
    # which minimum-bin-slack packing reaches and best fit and closing fit miss (5 each).
    # 4,096 groups is the largest batch that packing runs on; the empty samples cost it
    # nothing.
    sizes = [0] * 4084 + [51, 23, 27, 54, 63, 24, 58, 41, 58, 35, 47, 45]
    analysis = analyse(sizes, 133)
    assert (analysis.n_groups, analysis.min_count, analysis.proven_optimal) == (4096, 4, True)
    assert _is_packing(analysis._packing, sizes, 133)


def test_count_without_dominant_bins_matches_brute_force() -> None:
    # No item is too large to share a bin with two others, so the search runs on the whole
    # batch; it cannot prove its count (the volume bound is ceil(90 / 23) = 4) but reaches
    # the optimum of 5 that brute force finds.
    sizes, cap = [9, 8, 10, 11, 11, 7, 5, 11, 10, 8], 23
    analysis = analyse(sizes, cap)
    assert fewest_bins(sizes, cap) == 5
    assert analysis.min_count == 5 and _is_packing(analysis._packing, sizes, cap)


def test_close_gap_never_returns_more_bins_than_it_was_given() -> None:
    # 48 cannot share a bin with two others (48 + 13 + 13 > 61), so the reduction fixes the
    # bin 48 + 13 (item 11, the last 13) and searches the other ten items, where it finds 4
    # bins (their optimum is 3: 13+16+17+15, 19+21+18, 23+18+18, but the search misses it).
    # The given packing (hand-checked loads 61, 58, 59, 61) pairs 48 with the other 13 and
    # has 4 bins, the volume bound ceil(239 / 61): the result must not be worse.
    sizes, cap = [13, 16, 19, 21, 23, 17, 15, 18, 18, 18, 48, 13], 61
    given = [[11, 1, 5, 6], [2, 3, 7], [4, 8, 9], [10, 0]]
    assert [sum(sizes[g] for g in b) for b in given] == [61, 58, 59, 61]
    got = sum_close_gap(sizes, cap, [list(b) for b in given], 4)
    assert len(got) == 4 and _is_packing(got, sizes, cap)


def test_close_gap_starts_from_the_given_packing_restricted() -> None:
    # Same batch; the given packing holds an optimal packing of the ten items besides the
    # reduction's bin (loads 61, 58, 59) and 48 and 13 alone: 5 bins. Restricted to those
    # ten items it has 3 bins, which the fresh packings of them miss, so with the reduction's
    # bin 48 + 13 the result has 4, the volume bound ceil(239 / 61).
    sizes, cap = [13, 16, 19, 21, 23, 17, 15, 18, 18, 18, 48, 13], 61
    given = [[0, 1, 5, 6], [2, 3, 7], [4, 8, 9], [10], [11]]
    got = sum_close_gap(sizes, cap, [list(b) for b in given], 4)
    assert len(got) == 4 and _is_packing(got, sizes, cap)


def test_close_gap_starts_from_the_best_fresh_packing() -> None:
    # 110 cannot share a bin with two others (110 + 23 + 23 > 133): the reduction fixes the
    # bin 110 + 23 and packs the twelve other items (526 tokens) afresh; the given packing
    # (one item per bin) restricts to nothing useful. The twelve fit the 4 bins their volume
    # needs (the minimum-bin-slack packing reaches it where best fit and closing fit leave
    # 5 the search cannot close), so the result has 5 bins, the volume bound ceil(659 / 133).
    sizes = [51, 23, 27, 54, 63, 24, 58, 41, 58, 35, 47, 45, 110, 23]
    cap = 133
    got = sum_close_gap(sizes, cap, [[g] for g in range(len(sizes))], 5)
    assert len(got) == 5 and _is_packing(got, sizes, cap)


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


def _skipping_case(skippers: int) -> tuple[list[int], list[int], int, int]:
    """A batch on which the capacity-aware LPT packing skips exactly ``9 * skippers`` full
    micro-batches (count 10, cap 5,000; see ``test_lpt_gives_up_after_8n_plus_4096_skips``)."""
    sizes = [1] + [5000] * 9 + [1] * skippers
    work = [3] + [2] * 9 + [1] * skippers
    return sizes, work, 5000, 10


@pytest.mark.parametrize(("skippers", "gives_up"), [(4176, False), (4177, True)])
def test_lpt_gives_up_after_8n_plus_4096_skips(skippers: int, gives_up: bool) -> None:
    # Hand count. Order: group 0 (workload 3), groups 1..9 (workload 2, 5,000 tokens, a full
    # micro-batch each), then the `skippers` groups of 1 token (workload 1). Group 0 takes
    # empty bin 0, groups 1..9 the empty bins 1..9 (an empty bin always heads the heap, so no
    # skip). Each 1-token group then finds bins 1..9 (load 2) ahead of bin 0 (load >= 3) and
    # full: 9 skips, then bin 0, which has room for all of them (1 + 4,177 <= 5,000).
    # With t = skippers, n = 10 + t and the skips are 9 t: 9 t = 8 n + 4096 gives t = 4176,
    # the last skip the budget allows; one group more makes 9 skips for 8 more allowed, so
    # the run skips 8 n + 4097 times and gives up on the last one.
    sizes, work, cap, count = _skipping_case(skippers)
    n = len(sizes)
    assert 9 * skippers == 8 * n + 4096 + (1 if gives_up else 0)
    got = sum_lpt(sizes, work, cap, count)
    if gives_up:
        assert got is None
    else:
        assert got == [[0, *range(10, n)]] + [[g] for g in range(1, 10)]


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
