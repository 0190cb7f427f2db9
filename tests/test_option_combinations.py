"""Where issue 26's and issue 27's options meet: every pair either composes (the cap holds on
the padded footprint, the plan covers every sample) or is refused by name, never ignored."""

from __future__ import annotations

import random

import pytest

from seqlen_balancing import plan_data_parallel, plan_micro_batches


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"padded": True, "over_cap": "alone"}, "padded cannot be combined with over_cap='alone'"),
        ({"padded": True, "dummy_micro_batches": True},
         "padded cannot be combined with dummy_micro_batches=True"),
        ({"max_samples_per_micro_batch": 4, "over_cap": "alone"},
         "max_samples_per_micro_batch cannot be combined with over_cap='alone'"),
    ],
)
def test_options_that_do_not_compose_are_refused_by_name(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        plan_micro_batches([10, 20, 30], 100, **kwargs)
    # the same on every rank of a DP plan (the agreement carries the error)
    with pytest.raises(ValueError, match=fragment):
        plan_data_parallel([[10, 20], [30, 40]], 100, **kwargs)


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
