"""Where issue 26's and issue 27's options meet: every pair composes through the one rule (the
cap holds on the stated rule, the plan covers every sample, an over-cap sample runs alone,
dummies come last), checked against oracles spelled out here."""

from __future__ import annotations

import random

import pytest

from oracles import oracle_count
from seqlen_balancing import plan_data_parallel, plan_micro_batches


def over_cap_alone_oracle(
    lengths: list[int], cap: int, *, padded: bool, limit: int | None, group: int = 1
) -> tuple[list[int], int | None]:
    """The over-cap rule spelled out: the groups that do not fit alone (padded: rows x
    their widest row over the cap; else their summed tokens over it), and the fewest
    micro-batches of the plan: one for each of them, plus the brute-force optimum of the
    others under the same rule (``None`` when there are no others)."""
    groups = [list(range(g, g + group)) for g in range(0, len(lengths), group)]
    def alone(rows: list[int]) -> int:
        return len(rows) * max(lengths[i] for i in rows) if padded else sum(lengths[i] for i in rows)
    over = [g for g, rows in enumerate(groups) if alone(rows) > cap]
    rest = [i for g, rows in enumerate(groups) if g not in over for i in rows]
    if not rest:
        return over, None
    return over, oracle_count([lengths[i] for i in rest], cap, padded=padded, group=group,
                              limit=limit)


@pytest.mark.parametrize(("padded", "limit"), [(True, None), (True, 3), (False, 3), (False, 2)])
def test_over_cap_alone_composes_with_padded_and_the_sample_limit(padded: bool, limit: int | None) -> None:
    """The refused pairs of issue 27 plan: each over-cap sample alone (the only micro-batch
    allowed over the cap), every other micro-batch within the cap on the stated rule and
    the limit, an exact cover, and the count the oracle gives (the rest is planned under
    the same rule, to its optimum on these small batches)."""
    rng = random.Random(31 + (limit or 0) + padded)
    for _ in range(120):
        n = rng.randint(1, 8)
        cap = rng.randint(40, 200)
        lengths = [rng.randint(1, cap // 2) if rng.random() < 0.7 else rng.randint(cap + 1, 2 * cap)
                   for _ in range(n)]
        plan = plan_micro_batches(lengths, cap, padded=padded, max_samples_per_micro_batch=limit,
                                  over_cap="alone")
        over, rest_count = over_cap_alone_oracle(lengths, cap, padded=padded, limit=limit)
        assert sorted(i for mb in plan for i in mb) == list(range(n))
        for mb in plan:
            if len(mb) == 1 and mb[0] in over:
                continue  # an over-cap sample alone
            assert not set(mb) & set(over)
            assert (footprint(lengths, mb) if padded else sum(lengths[i] for i in mb)) <= cap
            assert limit is None or len(mb) <= limit
        assert len(plan) == len(over) + (rest_count or 0)


def test_over_cap_alone_with_padded_forced_groups() -> None:
    # groups of 2: (50, 60) costs 2 x 60 = 120 > 100 alone; (10, 20) and (30, 5) fit,
    # together 4 x 30 = 120 > 100: apart
    lengths = [50, 60, 10, 20, 30, 5]
    plan = plan_micro_batches(lengths, 100, padded=True, force_group_size=2, over_cap="alone")
    assert sorted(map(sorted, plan)) == [[0, 1], [2, 3], [4, 5]]
    over, rest = over_cap_alone_oracle(lengths, 100, padded=True, limit=None, group=2)
    assert over == [0] and rest == 2


@pytest.mark.parametrize("limit", [None, 2])
def test_padded_with_dummies_serves_a_count_above_the_samples(limit: int | None) -> None:
    """Padded with dummies: a count above the samples (min_num_micro_batch or
    num_batches_divided_by) runs each sample alone and the rest as dummies, last, empty."""
    plan = plan_micro_batches([100, 10, 10], 150, padded=True, min_num_micro_batch=5,
                              dummy_micro_batches=True, max_samples_per_micro_batch=limit)
    assert len(plan) == 5 and plan[3:] == [[], []]
    assert sorted(i for mb in plan for i in mb) == [0, 1, 2]
    plan = plan_micro_batches([100, 10, 10, 10, 100], 150, padded=True, num_batches_divided_by=4,
                              dummy_micro_batches=True, max_samples_per_micro_batch=limit)
    # the fewest padded count is 3 ([0], [4], [1, 2, 3]; with 2 rows at most, 4): 4 either way
    assert len(plan) == 4 and all(mb for mb in plan)
    assert all(footprint([100, 10, 10, 10, 100], mb) <= 150 for mb in plan)


def test_the_refused_pairs_plan_on_every_rank_of_a_dp_group() -> None:
    """plan_data_parallel with each pair: one agreed count on every rank, every rank's plan
    an exact cover within the rule (over-cap samples alone, dummies empty and last)."""
    ranks = [[10, 20, 300, 40], [60, 70, 5]]
    for kwargs in ({"padded": True, "over_cap": "alone"},
                   {"max_samples_per_micro_batch": 2, "over_cap": "alone"},
                   {"padded": True, "dummy_micro_batches": True, "min_num_micro_batch": 5,
                    "over_cap": "alone"}):
        plans = plan_data_parallel(ranks, 100, **kwargs)
        assert len({len(plan) for plan in plans}) == 1, kwargs
        for lengths, plan in zip(ranks, plans, strict=True):
            assert sorted(i for mb in plan for i in mb) == list(range(len(lengths)))
            real = [mb for mb in plan if mb]
            assert plan[len(real):] == [[]] * (len(plan) - len(real))
            for mb in real:
                cost = footprint(lengths, mb) if kwargs.get("padded") else sum(lengths[i] for i in mb)
                assert cost <= 100 or (len(mb) == 1 and lengths[mb[0]] > 100), (kwargs, mb)
                assert len(mb) <= kwargs.get("max_samples_per_micro_batch", len(mb))
    # the over-cap sample (300) is alone on rank 0: 2 micro-batches there at least
    assert len(plan_data_parallel(ranks, 100, padded=True, over_cap="alone")[0]) >= 2


def footprint(lengths: list[int], mb: list[int]) -> int:
    """Rows x the widest row: the padded rule spelled out."""
    return len(mb) * max(lengths[i] for i in mb)


def test_padded_with_workloads_keeps_the_cap_and_the_count_and_balances_on_them() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 30)
        lengths = [rng.randint(1, 300) for _ in range(n)]
        cap = rng.randint(max(lengths), 2000)
        work = [rng.randint(0, 10**6) for _ in range(n)]
        plain = plan_micro_batches(lengths, cap, padded=True)
        weighted = plan_micro_batches(lengths, cap, padded=True, workloads=work)
        assert len(weighted) == len(plain)  # the count is the cap's, not the objective's
        assert sorted(i for mb in weighted for i in mb) == list(range(n))
        assert all(footprint(lengths, mb) <= cap for mb in weighted)


def test_padded_balances_on_the_given_workloads() -> None:
    # four rows of one width, two micro-batches of two rows each: verl's workload is equal
    # for all, so only the given workloads can pair the heavy row with the lightest
    lengths = [100] * 4
    plan = plan_micro_batches(lengths, 200, padded=True, workloads=[1000, 10, 400, 500])
    loads = sorted(sum([1000, 10, 400, 500][i] for i in mb) for mb in plan)
    assert loads == [900, 1010]


def test_sample_limit_with_workloads_and_dummies_composes() -> None:
    # 6 samples, at most 2 per micro-batch: 3, rounded up to 4 (no dummy: 4 <= 6 samples);
    # 3 samples into 4: each alone and one dummy, last
    plan = plan_micro_batches([10] * 6, 1000, max_samples_per_micro_batch=2, num_batches_divided_by=4,
                              workloads=[6, 5, 4, 3, 2, 1])
    assert len(plan) == 4 and all(1 <= len(mb) <= 2 for mb in plan)
    assert sorted(i for mb in plan for i in mb) == list(range(6))
    plan = plan_micro_batches([10] * 3, 1000, max_samples_per_micro_batch=2, num_batches_divided_by=4,
                              dummy_micro_batches=True, workloads=[3, 2, 1])
    assert len(plan) == 4 and plan[-1] == [] and all(len(mb) == 1 for mb in plan[:3])
    assert sorted(i for mb in plan for i in mb) == [0, 1, 2]


def test_a_padded_row_alone_is_named_in_token_positions(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from seqlen_balancing.options import PlanOptions
    from seqlen_balancing.planning.planner import analyse, over_cap_messages

    result = analyse([300, 40, 30], 100, PlanOptions(padded=True, over_cap="alone"))
    assert over_cap_messages(result) == [
        "sample 0 costs 300 token positions padded (rows x its widest row), over "
        "max_token_len=100: it runs alone in a micro-batch of its own (over_cap='alone'), the "
        "only micro-batch over the cap; it may run out of memory"
    ]
    with caplog.at_level(logging.WARNING, logger="seqlen_balancing"):
        plan = plan_micro_batches([300, 40, 30], 100, padded=True, over_cap="alone")
    assert sorted(map(sorted, plan)) == [[0], [1, 2]]  # 2 rows x 40 = 80 fit together
    assert len([r for r in caplog.records if r.name == "seqlen_balancing"]) == 1
