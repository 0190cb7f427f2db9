"""planner.py: ordering, the balancing fallbacks and the count rules, pinned exactly.

The rebalancing and the capacity-aware LPT packing are compared with slow models written
here from their docstrings, on random small inputs; the rest with hand-checked values.
These kill the ``mutmut`` mutants that the property tests let through (README, Development).
"""

from __future__ import annotations

import functools
import random

import pytest

from seqlen_balancing.errors import ErrorCode, PlanError
from seqlen_balancing.planner import (
    RankAnalysis,
    _fits,
    _lpt_with_cap,
    _rebalance,
    agreed_count,
    analyse,
    build_plan,
    local_count,
    order_micro_batches,
    plan_micro_batches,
    spread,
)


def model_rebalance(bins: list[list[int]], sizes: list[int], work: list[int], cap: int) -> list[list[int]]:
    """The docstring's rule, slowly: each round, the lightest bin takes from the heaviest bin
    that can give (more than one group, a group with positive workload below the gap that
    fits the lightest bin's room) the group whose workload is closest to half the gap
    (lowest index on a tie); at most 2 * count rounds."""
    bins = [list(b) for b in bins]
    for _ in range(2 * len(bins)):
        loads = [sum(work[g] for g in b) for b in bins]
        light = min(range(len(bins)), key=lambda b: (loads[b], b))
        room = cap - sum(sizes[g] for g in bins[light])
        move = None
        for heavy in sorted(range(len(bins)), key=lambda b: (-loads[b], b)):
            gap = loads[heavy] - loads[light]
            if gap <= 0:
                break
            can = [g for g in bins[heavy] if sizes[g] <= room and 0 < work[g] < gap]
            if can and len(bins[heavy]) > 1:
                move = heavy, min(can, key=lambda g: (abs(2 * work[g] - gap), g))
                break
        if move is None:
            break
        bins[move[0]].remove(move[1])
        bins[light].append(move[1])
    return bins


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


def test_rebalance_follows_its_rule() -> None:
    rng = random.Random(7)
    moved = 0
    for _ in range(400):
        bins, sizes, work, cap = random_case(rng)
        if any(sum(sizes[i] for i in b) > cap for b in bins):
            continue
        want = model_rebalance(bins, sizes, work, cap)
        got = _rebalance([list(b) for b in bins], sizes, work, cap)
        assert got == want, (bins, sizes, work, cap)
        moved += got != bins
    assert moved > 50  # the cases exercise the moves, not only the early exits


def test_rebalance_hand_checked() -> None:
    # Loads 60 and 5: the lightest bin takes group 0 (workload 30, closest to half of 55);
    # then no group of the heavier bin is below the gap of 5.
    assert _rebalance([[0, 1, 2], [3]], [3, 3, 3, 1], [30, 20, 10, 5], 10) == [[1, 2], [3, 0]]
    # Room limits the move: group 0 (6 tokens) cannot join a bin with 5 of 10 tokens.
    assert _rebalance([[0, 1], [2]], [6, 1, 5], [60, 40, 1], 10) == [[0], [2, 1]]


def test_lpt_with_cap_follows_its_rule() -> None:
    rng = random.Random(11)
    for _ in range(400):
        _, sizes, work, cap = random_case(rng)
        count = rng.randint(1, len(sizes))
        assert _lpt_with_cap(sizes, work, cap, count) == model_lpt(sizes, work, cap, count)


def test_lpt_with_cap_hand_checked() -> None:
    # Equal workloads: larger groups first, and ties on load go to the bin with fewer groups.
    assert _lpt_with_cap([5, 6, 4], [0, 0, 0], 10, 2) == [[1, 2], [0]]
    assert _lpt_with_cap([0, 0, 0, 0], [0, 0, 0, 0], 10, 2) == [[0, 2], [1, 3]]
    assert _lpt_with_cap([5, 5, 4, 3, 3], [5, 5, 4, 3, 3], 10, 2) is None


def test_fits_is_inclusive() -> None:
    assert _fits([[0, 1]], [3, 5], 8)
    assert not _fits([[0, 1]], [3, 6], 8)


def test_agreed_count() -> None:
    assert agreed_count(5, 8) == (5, None)
    assert agreed_count(5, 8, 4) == (8, None)
    count, error = agreed_count(9, 8)
    assert count == 0 and error == PlanError(ErrorCode.COUNT_ABOVE_GROUPS, (9, 8, 9, -1))
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
    analysis = analyse(lengths, 4, min_num_micro_batch=4)
    assert build_plan(analysis, 4) == balanced
    assert build_plan(analysis, 4, False) == in_order


def test_build_plan_count_range_message() -> None:
    analysis = analyse([3, 3, 3], 4)
    with pytest.raises(ValueError, match=r"^count must be in 3\.\.3 for this batch, got 5$"):
        build_plan(analysis, 5)


def test_local_count_raises_the_error_with_the_rank() -> None:
    analysis = RankAnalysis(PlanError(ErrorCode.EMPTY_BATCH))
    with pytest.raises(ValueError, match=r"^rank 2 of the DP group\b.*: the batch has no samples"):
        local_count(analysis, 2)
    with pytest.raises(ValueError, match=r"^the batch has no samples"):
        local_count(analysis)
    assert local_count(analyse([3, 3, 3, 1], 4, num_batches_divided_by=2)) == 4


def test_num_micro_batches_is_checked() -> None:
    with pytest.raises(ValueError, match=r"num_micro_batches must be a positive integer \(>= 1\), got 0"):
        plan_micro_batches([1, 2], 4, num_micro_batches=0)
    with pytest.raises(ValueError, match="num_micro_batches=1 is below the 2 micro-batches"):
        plan_micro_batches([3, 3], 4, num_micro_batches=1)
    assert len(plan_micro_batches([1, 1, 1], 4, num_micro_batches=2)) == 2
    with pytest.raises(ValueError, match="4 micro-batches are needed but only 3"):
        plan_micro_batches([1, 1, 1], 4, num_micro_batches=3, num_batches_divided_by=2)



def test_spread() -> None:
    assert spread([]) == 0.0
    assert spread([0, 0]) == 0.0
    assert spread([90, 100, 110]) == pytest.approx(0.2)
    assert spread([1, 3]) == 1.0
    assert spread([5]) == 0.0


def test_num_micro_batches_is_rounded_to_the_divisor() -> None:
    assert len(plan_micro_batches([1, 1, 1, 1], 4, num_micro_batches=3, num_batches_divided_by=2)) == 4


class _SubInt(int):
    """An int subclass: not ``type(v) is int``, still a whole number."""


@pytest.mark.parametrize(
    ("lengths", "cap", "kwargs", "error", "message"),
    [
        (["x"], 8, {}, TypeError,
         "seq_lens[0] is not an integer; lengths are whole numbers of tokens ('x' (str))"),
        (5, 8, {}, TypeError, "seq_lens[0] is not an integer; lengths are whole numbers of tokens "
         "(seq_lens must be a sequence, got 5 (int))"),
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
         "sample 1 has 9 tokens, which exceeds max_token_len=8 (2 samples over the cap, the largest 9 "
         "tokens); raise max_token_len to at least 9 or truncate the sequences"),
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
    assert analyse([6, 6, 6], 10, min_num_micro_batch=3).lower_bound == 3
    assert analyse([1, 1, 1], 10, min_num_micro_batch=2).lower_bound == 2
