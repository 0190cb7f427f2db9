"""Issue 19: never more micro-batches than verl 0.9.1's rule, never less balanced at the same
count, on random batches against a plain model of verl's rule (``tests/oracles.py``; CI also
compares with verl itself in ``tests/compat/_differential.py``), and the cases found."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from oracles import brute_force_optimum, model_verl_plan, workload
from seqlen_balancing import lower_bound, plan_data_parallel, plan_micro_batches
from seqlen_balancing.planning.planner import _exact_count, analyse

CASE_14 = [2049] * 3 + [1366] * 5 + [1025] * 2 + [819] * 4
CASE_30 = [2049] * 9 + [1366] * 7 + [1025] * 6 + [819] * 8


def gap(lengths: list[int], parts: list[list[int]]) -> int:
    loads = [sum(workload(lengths[i]) for i in part) for part in parts]
    return max(loads) - min(loads)


def tokens(lengths: list[int], parts: list[list[int]]) -> list[int]:
    return [sum(lengths[i] for i in part) for part in parts]


def test_case1_the_count_meets_verls_where_the_packing_missed_it() -> None:
    # Karmarkar-Karp at 5 fits (largest part 3,893 tokens); the packings stopped at 6.
    assert lower_bound(CASE_14, 4096) == 5
    assert len(model_verl_plan(CASE_14, 4096) or []) == 5
    plan = plan_micro_batches(CASE_14, 4096)
    assert len(plan) == 5 and max(tokens(CASE_14, plan)) <= 4096
    plan = plan_micro_batches(CASE_30, 4096)
    assert len(plan) == lower_bound(CASE_30, 4096) == 11
    assert len(plan) <= len(model_verl_plan(CASE_30, 4096) or [])


def test_case2_a_divisor_rounds_the_verl_count_not_a_worse_one() -> None:
    plan = plan_micro_batches(CASE_14, 4096, num_batches_divided_by=5)
    assert len(plan) == 5 and max(tokens(CASE_14, plan)) <= 4096


def test_case3_an_exact_count_that_fits_is_planned() -> None:
    plan = plan_micro_batches(CASE_14, 4096, num_micro_batches=5)
    assert len(plan) == 5 and max(tokens(CASE_14, plan)) <= 4096
    # Below the lower bound it is refused as impossible, naming the bound.
    with pytest.raises(ValueError, match=r"num_micro_batches=4 is below the lower bound of 5 micro-batches"):
        plan_micro_batches(CASE_14, 4096, num_micro_batches=4)


def test_exact_count_below_the_analysis_count_is_searched_for() -> None:
    # An analysis left with a poor packing (one group per micro-batch): asking for 3 makes
    # the planner search for 3 (optimum 3: 30 tokens in bins of 10) and keep what it finds.
    lengths = [6, 5, 5, 4, 4, 3, 3]
    assert brute_force_optimum(lengths, 10) == 3
    result = replace(analyse(lengths, 10), _packing=[[g] for g in range(len(lengths))],
                     min_count=len(lengths))
    count, reached = _exact_count(result, 3)
    assert count == 3 and reached.min_count == 3 and max(tokens(lengths, reached._packing)) <= 10
    assert result.min_count == len(lengths)  # a new analysis: the one given is left as it was
    # Many groups (no exhaustive search): verl's Karmarkar-Karp or the exchange search.
    many = [30, 30, 40] * 20
    result = replace(analyse(many, 100), _packing=[[g] for g in range(len(many))], min_count=len(many))
    count, reached = _exact_count(result, 20)
    assert count == 20 and reached.min_count == 20 and max(tokens(many, reached._packing)) <= 100
    # A count no search reaches, above the bound, is refused with what was found.
    tight = replace(analyse([51, 51, 51, 49, 49, 49], 100), _packing=[[g] for g in range(6)], min_count=6,
                    lower_bound=2)  # pretend a weaker bound: 3 is the optimum
    with pytest.raises(ValueError, match=(
        r"num_micro_batches=2: no plan with 2 micro-batches under max_token_len=100 was found "
        r"\(the fewest found is 6; the lower bound, 2, does not rule 2 out\); pass at least 6"
    )):
        _exact_count(tight, 2)


def test_case4_at_verls_count_at_least_as_balanced_as_verl() -> None:
    lengths = [32, 31, 48, 45, 50, 58, 66, 40, 53]
    verl = model_verl_plan(lengths, 128)
    assert verl is not None and sorted(tokens(lengths, verl)) == [101, 103, 106, 113]
    plan = plan_micro_batches(lengths, 128)
    assert len(plan) == 4
    assert gap(lengths, plan) <= gap(lengths, verl)
    assert max(tokens(lengths, plan)) <= 128


def test_case8_an_exact_count_must_be_a_multiple_of_the_divisor() -> None:
    with pytest.raises(ValueError, match=(
        r"num_micro_batches=3 is not a multiple of num_batches_divided_by=4; pass a multiple "
        r"\(e.g. 4\)"
    )):
        plan_micro_batches([1] * 8, 8, num_micro_batches=3, num_batches_divided_by=4)
    assert len(plan_micro_batches([1] * 8, 8, num_micro_batches=4, num_batches_divided_by=4)) == 4


def test_case9_small_batches_are_solved_exactly() -> None:
    lengths = [4518, 6216, 6640, 7026, 5602, 5314, 4588, 7161, 5106, 5699, 4882]
    assert brute_force_optimum(lengths, 16_384) == 4
    plan = plan_micro_batches(lengths, 16_384)
    assert len(plan) == 4 and max(tokens(lengths, plan)) <= 16_384
    assert analyse(lengths, 16_384).proven_optimal


@pytest.mark.slow
def test_exhaustive_search_proves_a_bound_the_cheap_bounds_miss() -> None:
    # Small batches of items between a fifth and three fifths of the cap: the count is the
    # optimum on every one, and where the closed-form bounds fall short of it the
    # exhaustive search proves it.
    rng = random.Random(7)
    proved = 0
    for _ in range(300):
        lengths = [rng.randint(20, 60) for _ in range(rng.randint(5, 12))]
        result = analyse(lengths, 100)
        optimum = brute_force_optimum(lengths, 100)
        assert result.min_count == optimum  # small batches: the optimum, always
        assert result.lower_bound <= optimum
        if result.bound_name == "exhaustive search":
            proved += 1
            assert result.lower_bound == optimum
    assert proved > 0  # the search proved some bound the closed-form bounds did not


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.slow
def test_never_more_nor_less_balanced_than_the_model_of_verls_rule(seed: int) -> None:
    rng = random.Random(1900 + seed)
    fewer = equal = 0
    for _ in range(600):
        cap = rng.choice([8, 16, 50, 100, 128, 1000])
        group = rng.choice([1, 1, 1, 2, 3])
        n = group * rng.randint(1, 14 // group + 1)
        kind = rng.random()
        if kind < 0.3:  # near a half and a third of the cap
            centres = [cap // 2, cap // 3]
            lengths = [max(0, min(cap, rng.choice(centres) + rng.randint(-2, 2))) for _ in range(n)]
        elif kind < 0.5:  # repeated lengths (GRPO-like truncation)
            lengths = [rng.choice([cap // 3, cap // 2 + 1, cap // 5]) for _ in range(n)]
        else:
            lengths = [rng.randint(0, cap) for _ in range(n)]
        divisor = rng.choice([None, None, 2, 3])
        floor = rng.choice([None, None, 1, 2, 3])
        verl = model_verl_plan(lengths, cap, divisor, floor, group)
        if verl is None:
            continue
        plan = plan_micro_batches(lengths, cap, num_batches_divided_by=divisor,
                                  min_num_micro_batch=floor, force_group_size=group)
        where = (lengths, cap, divisor, floor, group)
        assert len(plan) <= len(verl), where
        assert max(tokens(lengths, plan)) <= cap, where
        if len(plan) == len(verl):
            equal += 1
            verl_samples = [[s for g in part for s in range(g * group, (g + 1) * group)] for part in verl]
            assert gap(lengths, plan) <= gap(lengths, verl_samples), where
        else:
            fewer += 1
    assert fewer > 0 and equal > 0


@pytest.mark.slow
def test_data_parallel_never_above_the_model_of_verls_rule() -> None:
    rng = random.Random(1919)
    for _ in range(300):
        cap = rng.choice([16, 100, 1000])
        ranks = [[rng.randint(0, cap) for _ in range(rng.randint(6, 10))] for _ in range(rng.randint(2, 3))]
        # verl's agreed count: the first count (from the largest start) at which every
        # rank's Karmarkar-Karp fits, as its MIN all-reduce of "fits" decides.
        starts = [min(len(r), -(-sum(r) // cap)) for r in ranks]
        count, fewest = max(starts), min(len(r) for r in ranks)
        agreed = None
        while count <= fewest:
            fits = [model_verl_plan_at(r, cap, count) for r in ranks]
            if all(f is not None for f in fits):
                agreed = count
                break
            count += 1
        if agreed is None or max(starts) == 0:
            continue
        plans = plan_data_parallel(ranks, cap)
        assert len({len(p) for p in plans}) == 1
        assert len(plans[0]) <= agreed, (ranks, cap)


def model_verl_plan_at(lengths: list[int], cap: int, count: int) -> list[list[int]] | None:
    from oracles import model_karmarkar_karp

    parts = model_karmarkar_karp([workload(s) for s in lengths], count, False)
    return parts if all(sum(lengths[i] for i in p) <= cap for p in parts) else None
