"""Issue 27 on plain lists: ``workloads=``, ``over_cap="alone"`` and ``dummy_micro_batches``,
alone and combined with every other option, on one rank and on a simulated DP group.

The oracle (:func:`expected`) spells the rules out: a sample costs its given cost or its
length rounded up to ``pad_to_multiple_of``; a group sums them; a group over
``cap // bucket * bucket`` runs alone (``over_cap="alone"``) or is an error; the count is
``max(over + OPT(rest), min_num_micro_batch)`` (OPT by brute force), the DP group's count the
largest of them rounded up to ``num_batches_divided_by``; a rank with fewer groups than it
runs the missing ones as empty dummy micro-batches at the end, or the group raises.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import replace
from typing import Any

import pytest

from oracles import brute_force_optimum, model_karmarkar_karp, workload
from seqlen_balancing import get_seqlen_balanced_partitions, plan_data_parallel, plan_micro_batches
from seqlen_balancing.agreement import combine, decode, encode
from seqlen_balancing.errors import MAX_DUMMY_MICRO_BATCHES
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import analyse, over_cap_messages

LOGGER = "seqlen_balancing"


# ---------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------


def test_over_cap_sample_runs_alone_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plan = plan_micro_batches([5000, 100, 200], 4096, over_cap="alone")
    assert plan == [[0], [1, 2]]
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert records[0].getMessage() == (
        "sample 0 costs 5000 tokens, over max_token_len=4096: it runs alone in a micro-batch "
        "of its own (over_cap='alone'), the only micro-batch over the cap; it may run out of "
        "memory"
    )


def test_over_cap_default_still_raises_as_verl() -> None:
    with pytest.raises(ValueError, match="sample 0 has 5000 tokens, which exceeds max_token_len=4096"):
        plan_micro_batches([5000, 100, 200], 4096)


def test_over_cap_on_two_ranks_agree_and_only_the_holder_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plans = plan_data_parallel([[100, 200, 300], [5000, 100, 200]], 4096, over_cap="alone")
    assert [len(p) for p in plans] == [2, 2]
    assert sorted(map(sorted, plans[1])) == [[0], [1, 2]]
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages == [
        "rank 1 of the DP group: sample 0 costs 5000 tokens, over max_token_len=4096: it runs "
        "alone in a micro-batch of its own (over_cap='alone'), the only micro-batch over the "
        "cap; it may run out of memory"
    ]


def test_over_cap_group_is_named_by_its_first_sample_and_counted_in_the_bound() -> None:
    result = analyse([10, 10, 3000, 2000, 5, 5], 4096, PlanOptions(force_group_size=2, over_cap="alone"))
    assert result.over_cap_groups == [1]
    assert result.min_count == result.lower_bound == 2
    assert over_cap_messages(result) == [
        "the forced group starting at sample 2 costs 5000 tokens, over max_token_len=4096: it "
        "runs alone in a micro-batch of its own (over_cap='alone'), the only micro-batch over "
        "the cap; it may run out of memory"
    ]
    plan = plan_micro_batches([10, 10, 3000, 2000, 5, 5], 4096, force_group_size=2, over_cap="alone")
    assert sorted(plan) == [[0, 1, 4, 5], [2, 3]]


def test_num_batches_divided_by_four_on_three_samples_gives_one_dummy() -> None:
    plan = plan_micro_batches([30, 10, 20], 1000, num_batches_divided_by=4,
                              dummy_micro_batches=True)
    assert len(plan) == 4
    assert plan[-1] == []
    assert sorted(plan[:3]) == [[0], [1], [2]]
    with pytest.raises(ValueError, match="4 micro-batches are needed but only 3"):
        plan_micro_batches([30, 10, 20], 1000, num_batches_divided_by=4)


def test_short_rank_gets_dummies_and_the_count_is_agreed() -> None:
    # Rank 0: 4 samples needing 4 micro-batches; rank 1: 2 samples.
    plans = plan_data_parallel([[90, 80, 70, 60], [50, 40]], 100, dummy_micro_batches=True)
    assert [len(p) for p in plans] == [4, 4]
    assert plans[1][2:] == [[], []]
    assert sorted(plans[1][:2]) == [[0], [1]]
    assert all(plans[0])  # the long rank needs none


def test_attention_weighted_workloads_put_the_long_sample_alone() -> None:
    lengths = [4096] + [1024] * 8
    verl_plan = plan_micro_batches(lengths, 16384, min_num_micro_batch=2)
    assert sorted(len(mb) for mb in verl_plan) == [3, 6]  # verl's formula pairs it with two
    attention = [s * s for s in lengths]
    plan = plan_micro_batches(lengths, 16384, min_num_micro_batch=2, workloads=attention)
    assert sorted(plan) == [[0], [1, 2, 3, 4, 5, 6, 7, 8]]


def test_workloads_reach_the_dp_partition_across_ranks() -> None:
    lengths = [4096, 1024, 1024, 1024, 1024, 1024]
    quadratic = [s * s for s in lengths]
    parts = get_seqlen_balanced_partitions(lengths, 2, False, workloads=quadratic)
    assert sorted(parts) == [[0], [1, 2, 3, 4, 5]]  # 4096**2 outweighs five 1024**2
    assert sorted(get_seqlen_balanced_partitions(lengths, 2, False)) == [[0, 1], [2, 3, 4, 5]]
    ours = get_seqlen_balanced_partitions(lengths, 3, True, workloads=[workload(s) for s in lengths])
    assert ours == get_seqlen_balanced_partitions([workload(s) for s in lengths], 3, True)
    with pytest.raises(ValueError, match="workloads has 2 entries but seqlen_list has 6"):
        get_seqlen_balanced_partitions(lengths, 2, False, workloads=[1, 2])


# ---------------------------------------------------------------------------------------
# Errors, before anything is planned
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"over_cap": "drop"}, ValueError, "over_cap must be 'raise' or 'alone', got another string"),
        ({"over_cap": None}, TypeError, "over_cap must be 'raise' or 'alone', got a value that is not"),
        ({"dummy_micro_batches": "yes"}, TypeError, "dummy_micro_batches must be a bool"),
        ({"workloads": [1, 2]}, ValueError, "workloads has 2 entries but the batch has 3 samples"),
        ({"workloads": [1, -2, 3]}, ValueError, "workloads[1] is -2; workloads must be >= 0"),
        ({"workloads": [1, 2.5, 3]}, TypeError, "workloads[1] is not an integer"),
        ({"min_num_micro_batch": MAX_DUMMY_MICRO_BATCHES + 4, "dummy_micro_batches": True},
         ValueError, f"more than the {MAX_DUMMY_MICRO_BATCHES} allowed"),
    ],
)
def test_bad_options_are_errors(kwargs: dict[str, Any], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as caught:
        plan_micro_batches([1, 2, 3], 10, **kwargs)
    assert fragment in str(caught.value)


def test_a_poisoned_rank_fails_every_rank_with_dummies_on() -> None:
    with pytest.raises(ValueError, match=r"^rank 1 of the DP group: workloads has 1 entries"):
        plan_data_parallel([[5, 5], [5, 5]], 10, workloads=[[1, 1], [1]],
                           dummy_micro_batches=True)


def test_too_many_dummies_through_the_agreement_names_the_short_rank() -> None:
    long_rank = replace(analyse([1, 1], 1, PlanOptions(dummy_micro_batches=True)),  # the same options
                        min_count=MAX_DUMMY_MICRO_BATCHES + 10,  # as if it held that many samples
                        group_sizes=[1] * (MAX_DUMMY_MICRO_BATCHES + 10))
    short_rank = analyse([1, 1], 1, PlanOptions(dummy_micro_batches=True))
    count, error, rank = decode(combine([encode(long_rank, 0), encode(short_rank, 1)]))
    assert (count, rank) == (0, 1)
    assert error is not None
    assert str(error.exception()).startswith(
        f"rank 1 of the DP group: {MAX_DUMMY_MICRO_BATCHES + 10} micro-batches would need "
        f"{MAX_DUMMY_MICRO_BATCHES + 8} dummy micro-batches on a rank of 2 samples/groups"
    )


def test_dummy_ranks_do_not_lift_a_non_dummy_rank_out_of_its_error() -> None:
    with pytest.raises(ValueError, match=r"^rank 1 of the DP group: Cannot satisfy"):
        plan_data_parallel([[9, 9, 9, 9], [9]], 10, dummy_micro_batches=False)


# ---------------------------------------------------------------------------------------
# The oracle, on random inputs, every option combined
# ---------------------------------------------------------------------------------------


def _costs(lengths: list[int], pad: int, costs: list[int] | None) -> list[int]:
    """The one cost rule (issue 25): the given cost, or else the length, rounded up to pad."""
    return [-(-n // pad) * pad for n in (lengths if costs is None else costs)]


def expected(
    ranks: list[list[int]], cap: int, opts: dict[str, Any], per_rank: dict[str, Any]
) -> tuple[str, list[int]] | tuple[str, str]:
    """("ok", [count per rank]) or ("error", message fragment) by the rules spelled out."""
    group, pad, bucket = opts["force_group_size"], opts["pad_to_multiple_of"], opts["micro_batch_multiple_of"]
    floor, divisor = opts["min_num_micro_batch"], opts["num_batches_divided_by"] or 1
    alone, dummies = opts["over_cap"] == "alone", opts["dummy_micro_batches"]
    usable = cap // bucket * bucket
    needs, groups_of = [], []
    for r, lengths in enumerate(ranks):
        costs = _costs(lengths, pad, None if per_rank["costs"] is None else per_rank["costs"][r])
        if len(lengths) % group:
            return "error", f"rank {r} of the DP group: batch size {len(lengths)} is not divisible"
        if not alone and any(c > usable for c in costs):
            return "error", f"rank {r} of the DP group: sample "
        sizes = [sum(costs[g : g + group]) for g in range(0, len(costs), group)]
        if not alone and any(s > usable for s in sizes):
            return "error", f"rank {r} of the DP group: forced group exceeds"
        if floor is not None and floor > len(sizes) and not dummies:
            return "error", f"rank {r} of the DP group: min_num_micro_batch={floor} asks"
        over = [s for s in sizes if s > usable]
        rest = [s for s in sizes if s <= usable]
        count = len(over) + (brute_force_optimum(rest, usable) if rest else 0)
        needs.append(max(count, floor or 0))
        groups_of.append(len(sizes))
    agreed = -(-max(needs) // divisor) * divisor
    short = [r for r, n in enumerate(groups_of) if n < agreed]
    if short and not dummies:
        return "error", f"rank {min(short, key=lambda r: (groups_of[r], r))} of the DP group: Cannot"
    return "ok", [agreed] * len(ranks)


def _order_oracle(micro_batches: list[list[int]], loads: list[int], group: int) -> list[list[int]]:
    """verl's balanced order: by (load, first index) descending, evens reversed then odds."""
    def key(mb: list[int]) -> tuple[int, int]:
        return sum(loads[i // group] for i in mb[::group]), mb[0]

    by_load = sorted(micro_batches, key=key, reverse=True)
    return by_load[::2][::-1] + by_load[1::2]


def _check_rank_plan(
    plan: list[list[int]], lengths: list[int], cap: int, count: int, opts: dict[str, Any],
    costs: list[int] | None, weights: list[int] | None,
) -> None:
    group, pad, bucket = opts["force_group_size"], opts["pad_to_multiple_of"], opts["micro_batch_multiple_of"]
    sample_costs = _costs(lengths, pad, costs)
    n_groups = len(lengths) // group
    assert len(plan) == count
    real = [mb for mb in plan if mb]
    dummies = len(plan) - len(real)
    assert dummies == max(0, count - n_groups)
    assert all(mb for mb in plan[: len(real)]), "dummies come last"
    assert sorted(i for mb in real for i in mb) == list(range(len(lengths)))
    for mb in real:
        assert mb == sorted(mb)
        assert all(g * group in mb for g in {i // group for i in mb}) and len(mb) % group == 0
        total = sum(sample_costs[i] for i in mb)
        if -(-total // bucket) * bucket > cap:
            # Over the cap only alone: exactly one group, and only with over_cap="alone".
            assert opts["over_cap"] == "alone"
            assert len(mb) == group
    sample_loads = weights if weights is not None else [workload(s) for s in lengths]
    loads = [sum(sample_loads[g * group : (g + 1) * group]) for g in range(n_groups)]
    if opts["use_dynamic_bsz_balance"]:
        assert real == _order_oracle(real, loads, group)
    # Balance: never wider than Karmarkar-Karp on the given workloads where that fits.
    if dummies == 0 and count <= n_groups and opts["over_cap"] == "raise":
        group_costs = [sum(sample_costs[g * group : (g + 1) * group]) for g in range(n_groups)]
        kk = model_karmarkar_karp(loads, count, False)
        if all(-(-sum(group_costs[g] for g in p) // bucket) * bucket <= cap for p in kk):
            def gap(parts: list[list[int]]) -> int:
                sums = [sum(loads[g] for g in p) for p in parts]
                return max(sums) - min(sums)

            ours = [sorted({i // group for i in mb}) for mb in real]
            assert gap(ours) <= gap(kk)


def _random_case(rng: random.Random) -> tuple[list[list[int]], int, dict[str, Any], dict[str, Any]]:
    group = rng.choice([1, 1, 2])
    n_ranks = rng.choice([1, 2, 3])
    cap = rng.randint(20, 60)
    ranks = []
    for _ in range(n_ranks):
        n = rng.randint(1, 7 // group) * group if rng.random() < 0.95 else rng.randint(1, 7)
        ranks.append([rng.randint(0, 90) if rng.random() < 0.15 else rng.randint(0, 30)
                      for _ in range(n)])
    bucket = rng.choice([1, 1, 8])
    opts = {
        "force_group_size": group,
        "pad_to_multiple_of": rng.choice([1, 1, 4]),
        "micro_batch_multiple_of": bucket,
        "min_num_micro_batch": rng.choice([None, None, 1, 3, 6]),
        "num_batches_divided_by": rng.choice([None, None, 2, 4]),
        "use_dynamic_bsz_balance": rng.random() < 0.7,
        "over_cap": rng.choice(["raise", "alone"]),
        "dummy_micro_batches": rng.random() < 0.5,
    }
    per_rank = {
        "costs": [[rng.randint(0, 70) for _ in r] for r in ranks] if rng.random() < 0.3 else None,
        "workloads": [[rng.randint(0, 10**6) for _ in r] for r in ranks] if rng.random() < 0.5 else None,
    }
    return ranks, cap, opts, per_rank


@pytest.mark.parametrize("seed", range(6))
def test_options_combined_match_the_oracle(seed: int) -> None:
    rng = random.Random(2700 + seed)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(250):
        ranks, cap, opts, per_rank = _random_case(rng)
        verdict, detail = expected(ranks, cap, opts, per_rank)
        outcomes[verdict] += 1
        logging.getLogger(LOGGER).disabled = True
        try:
            if verdict == "error":
                with pytest.raises(ValueError, match="^" + re.escape(str(detail))):
                    plan_data_parallel(ranks, cap, **opts, **per_rank)
                continue
            plans = plan_data_parallel(ranks, cap, **opts, **per_rank)
            if len(ranks) == 1:  # the one-rank API plans the same
                single = {k: (v[0] if v is not None else None) for k, v in per_rank.items()}
                alone = plan_micro_batches(ranks[0], cap, **opts, **single)
                if opts["use_dynamic_bsz_balance"]:
                    assert alone == plans[0]
                else:  # an agreeing group lines its micro-batches up heaviest first
                    assert sorted(alone) == sorted(plans[0])
        finally:
            logging.getLogger(LOGGER).disabled = False
        assert isinstance(detail, list)
        for r, plan in enumerate(plans):
            _check_rank_plan(
                plan, ranks[r], cap, detail[r], opts,
                None if per_rank["costs"] is None else per_rank["costs"][r],
                None if per_rank["workloads"] is None else per_rank["workloads"][r],
            )
    assert outcomes["ok"] > 100 and outcomes["error"] > 20  # both sides exercised


def test_not_agreeing_ranks_plan_alone_with_dummies() -> None:
    plans = plan_data_parallel([[5] * 3, [5]], 100, same_micro_num_in_dp=False,
                               num_batches_divided_by=2, dummy_micro_batches=True)
    assert [len(p) for p in plans] == [2, 2]
    assert plans[1] == [[0], []]


def test_num_micro_batches_above_the_samples_with_dummies() -> None:
    plan = plan_micro_batches([5, 6], 100, num_micro_batches=5, dummy_micro_batches=True)
    assert plan[2:] == [[], [], []] and sorted(plan[:2]) == [[0], [1]]
