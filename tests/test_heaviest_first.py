"""heaviest_first on the list API (issue 47, item 4): each rank's micro-batches heaviest first.

The oracle is the rule spelled out here: a micro-batch weighs the sum of verl's
``24576*s + s**2`` over its samples, summed by hand below; the order is workload descending,
ties by the smallest first index, whatever ``use_dynamic_bsz_balance`` says. Only the order
changes: the micro-batches are those planned without the option. No torch.
"""

from __future__ import annotations

import random

import pytest

from seqlen_balancing import PlanOptions, plan_data_parallel, plan_global_batch, plan_micro_batches
from seqlen_balancing.planning.balance import heaviest_first


def workload(s: int) -> int:
    return 24576 * s + s * s


def oracle(plan: list[list[int]], lengths: list[int]) -> list[list[int]]:
    """``plan`` heaviest first: workload summed by hand, descending; ties by first index."""
    return sorted(plan, key=lambda mb: (-sum(workload(lengths[i]) for i in mb), mb[0]))


#: Each sample alone (min_num_micro_batch = n): two of 5 tokens tie.
ALONE = [2, 5, 5, 1, 3]
#: By hand: 5 tokens (122,905) at 1 then 2 (the tie by first index), 3 (73,737) at 4,
#: 2 (49,156) at 0, 1 (24,577) at 3.
ALONE_HEAVIEST = [[1], [2], [4], [0], [3]]
#: verl's balanced order of the same: by (workload, index) descending [2], [1], [4], [0], [3];
#: the even positions reversed ([3], [4], [2]) then the odd ones ([1], [0]).
ALONE_VERL = [[3], [4], [2], [1], [0]]


def test_the_rule_on_a_hand_made_plan() -> None:
    lengths = [4, 1, 6, 2, 3, 2]
    micro_batches = [[0, 1], [2], [3, 4], [5]]  # 5, 6, 5 and 2 tokens: a tie between 0 and 2
    loads = [workload(s) for s in lengths]
    assert heaviest_first(micro_batches, loads) == [[2], [0, 1], [3, 4], [5]]
    assert heaviest_first([[3, 4], [0, 1], [], [5]], loads) == [[0, 1], [3, 4], [5], []]


@pytest.mark.parametrize("balance", [True, False])
def test_plan_micro_batches_each_alone_written_out(balance: bool) -> None:
    kwargs = {"min_num_micro_batch": 5, "use_dynamic_bsz_balance": balance}
    assert plan_micro_batches(ALONE, 5, heaviest_first=True, **kwargs) == ALONE_HEAVIEST
    assert plan_micro_batches(ALONE, 5, options=PlanOptions(heaviest_first=True), **kwargs) == ALONE_HEAVIEST
    # without it: verl's order, or (alone, without verl's) by first index
    assert plan_micro_batches(ALONE, 5, **kwargs) == (ALONE_VERL if balance else [[i] for i in range(5)])


@pytest.mark.parametrize("seed", range(6))
def test_plan_micro_batches_orders_heaviest_first_and_plans_the_same(seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.choice([1, 2, 3, 5, 8, 8, 13, 20]) for _ in range(rng.randint(8, 40))]
    options = {"max_samples_per_micro_batch": rng.choice([None, 3]), "force_group_size": rng.choice([1, 2])}
    if len(lengths) % 2:
        lengths.append(4)
    for balance in (True, False):
        plain = plan_micro_batches(lengths, 48, use_dynamic_bsz_balance=balance, **options)
        heavy = plan_micro_batches(lengths, 48, use_dynamic_bsz_balance=balance, heaviest_first=True,
                                   **options)
        assert heavy == oracle(plain, lengths)  # the same micro-batches, heaviest first
        assert sorted(heavy) == sorted(plain)


def test_plan_data_parallel_each_rank_heaviest_first() -> None:
    ranks = [ALONE, [5, 1, 1, 4, 4]]
    plans = plan_data_parallel(ranks, 5, min_num_micro_batch=5, heaviest_first=True)
    assert plans[0] == ALONE_HEAVIEST
    assert plans[1] == [[0], [3], [4], [1], [2]]  # 5; 4 and 4 (tie: 3 first); 1 and 1
    # over verl's order, also alone (same_micro_num_in_dp=False)
    alone = plan_data_parallel(ranks, 5, min_num_micro_batch=5, heaviest_first=True,
                               same_micro_num_in_dp=False)
    assert alone == plans
    rng = random.Random(7)
    lengths = [[rng.randint(1, 30) for _ in range(30)] for _ in range(3)]
    for rank, plan in zip(lengths, plan_data_parallel(lengths, 40, heaviest_first=True), strict=True):
        assert plan == oracle(plan, rank)
        assert sorted(plan) == sorted(plan_micro_batches(rank, 40, num_micro_batches=len(plan)))


def test_dummies_and_over_cap_alone_keep_the_rule() -> None:
    # the short rank's dummies (empty lists, weight 0) last; an over-cap sample alone weighs most
    plans = plan_data_parallel([[3, 3, 3, 3], [2]], 3, heaviest_first=True, dummy_micro_batches=True)
    assert plans == [[[0], [1], [2], [3]], [[0], [], [], []]]
    alone = plan_micro_batches([2, 9, 1, 2], 4, heaviest_first=True, over_cap="alone")
    assert alone[0] == [1] and alone == oracle(alone, [2, 9, 1, 2])


@pytest.mark.parametrize("seed", range(4))
def test_plan_global_batch_heaviest_index_first_on_every_rank(seed: int) -> None:
    # one permutation for every rank: index k weighs its heaviest micro-batch over the ranks
    rng = random.Random(seed)
    lengths = [rng.randint(1, 900) for _ in range(64)]
    for balance in (True, False):
        _, plans = plan_global_batch(lengths, 4, 1024, heaviest_first=True, use_dynamic_bsz_balance=balance)
        tops = [max(sum(workload(lengths[i]) for i in plan[k]) for plan in plans)
                for k in range(len(plans[0]))]
        assert tops == sorted(tops, reverse=True), tops
        _, plain = plan_global_batch(lengths, 4, 1024, use_dynamic_bsz_balance=balance)
        # the same micro-batches on the same ranks, reordered by one permutation
        assert [sorted(plan) for plan in plans] == [sorted(plan) for plan in plain]
        assert tops[0] == max(sum(workload(lengths[i]) for i in mb) for plan in plain for mb in plan)


def test_plan_global_batch_with_equal_rows_orders_each_rank() -> None:
    lengths = [100, 900, 300, 700, 500, 500, 200, 800, 50, 60, 70, 80]
    _, plans = plan_global_batch(lengths, 2, 1000, heaviest_first=True, equal_rows_per_micro_batch=True)
    for plan in plans:
        real = [[i for i in mb] for mb in plan]
        assert real == oracle(real, lengths)
