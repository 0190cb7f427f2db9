"""rows.py: equal rows per micro-batch on the list API (issue 32 item 1), against oracles
written here: the one rule with the filler rows spelled out (summed costs: each filler row
is one token, so costs 1 aligned to pad_to_multiple_of (issue 45 item 4); padded: rows x
the aligned width of the real rows and the filler row), exact cover, the same rows in
every micro-batch of every rank, and a brute force over every set partition of a few
samples for the fewest micro-batches and then the fewest rows. No torch."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from seqlen_balancing import PlanOptions, plan_data_parallel, plan_micro_batches
from seqlen_balancing.errors import RowsOverCap
from seqlen_balancing.planning.rows import RowIndices, rows_rule


def aligned(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def partitions(items: list[int]) -> Iterator[list[list[int]]]:
    """Every set partition of ``items`` (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for smaller in partitions(rest):
        for j in range(len(smaller)):
            yield [*smaller[:j], [first, *smaller[j]], *smaller[j + 1 :]]
        yield [[first], *smaller]


def check_plan(
    lengths: Sequence[int], cap: int, plan: list[Any], rows: int, *, pad: int = 1, bucket: int = 1,
    padded: bool = False, limit: int | None = None, group: int = 1, alone: bool = False,
) -> None:
    """The rules of a filled plan of one rank, spelled out: real rows an exact cover, every
    micro-batch ``rows`` rows (real and filler), groups whole, the cap on real and filler
    rows together (but a micro-batch of one over-cap group under ``alone``)."""
    real = [i for part in plan for i in part]
    assert sorted(real) == list(range(len(lengths)))
    for part in plan:
        assert isinstance(part, RowIndices)
        assert list(part) == sorted(part)
        assert len(part) + part.filler == rows
        assert (part.filler_row == -1) == (part.filler == 0)
        assert part.filler == 0 or 0 <= part.filler_row < len(lengths)
        assert {i // group for i in part} == {i // group for i in part if i % group == 0}
        assert len({i // group for i in part}) * group == len(part)
        if limit is not None:
            assert rows <= limit
        held = list(part) + [part.filler_row] * part.filler
        if padded:
            width = aligned(max(lengths[i] for i in held), pad)
            cost = aligned(len(held) * width, bucket)
        else:  # a filler row: one token (none where its row has none)
            one = min(aligned(1, pad), min(aligned(n, pad) for n in lengths))
            cost = aligned(sum(aligned(lengths[i], pad) for i in part) + part.filler * one, bucket)
        over_alone = alone and len({i // group for i in part}) == 1 and (
            aligned(sum(aligned(lengths[i], pad) for i in part), bucket) > cap if not padded
            else aligned(len(part) * aligned(max(lengths[i] for i in part), pad), bucket) > cap)
        if not over_alone:
            assert cost <= cap, (part, held, cost, cap)


def fewest(lengths: list[int], cap: int) -> tuple[int, int]:
    """Brute force: the fewest micro-batches at which some plan holds equal rows under the
    cap with the filler rows (one token each) counted, then the fewest rows."""
    best: tuple[int, int] | None = None
    for blocks in partitions(list(range(len(lengths)))):
        rows = max(len(b) for b in blocks)
        if all(sum(lengths[i] for i in b) + (rows - len(b)) * 1 <= cap for b in blocks):
            key = (len(blocks), rows)
            best = key if best is None or key < best else best
    assert best is not None
    return best


def test_rows_rule_lowers_every_cost_by_its_filler() -> None:
    from seqlen_balancing.planning.planner import analyse

    rule = rows_rule(analyse([10, 4, 6], 20), 2)
    assert rule is not None
    # a filler row costs 1 token: each item 1 less, the cap 2 x 1 less, at most 2 rows
    assert (rule.sizes, rule.cap, rule.limit) == ([9, 3, 5], 18, 2)
    assert rows_rule(analyse([10, 4, 6], 20), 11) is not None  # [10] and 10 filler rows: 20
    assert rows_rule(analyse([10, 4, 6], 20), 12) is None  # [10] and 11: 21


def test_a_short_micro_batch_is_topped_up_with_the_cheapest_sample() -> None:
    plan = plan_micro_batches([10, 4, 6, 3, 3, 8, 9, 1], 20, equal_rows_per_micro_batch=True)
    assert sorted((list(p), p.filler, p.filler_row) for p in plan) == [
        ([0, 1], 1, 7), ([2, 5, 7], 0, -1), ([3, 4, 6], 0, -1)]
    check_plan([10, 4, 6, 3, 3, 8, 9, 1], 20, plan, 3)
    # off: plain lists, verl's behaviour
    assert all(type(p) is list for p in plan_micro_batches([10, 4, 6, 3, 3, 8, 9, 1], 20))


def test_the_filler_can_raise_the_count() -> None:
    # [100] and [50, 50] fit in 2 plain micro-batches, but [100] plus a 1-token filler row
    # does not: 3 micro-batches of one row each.
    plan = plan_micro_batches([100, 50, 50], 100, equal_rows_per_micro_batch=True)
    assert len(plan) == 3 and all(p.filler == 0 for p in plan)
    assert len(plan_micro_batches([100, 50, 50], 100)) == 2


def test_a_one_token_filler_row_keeps_the_plain_count() -> None:
    # issue 45 item 4: [99] + a copy of a 50-token row was over 100, so every micro-batch
    # held one row (3); a 1-token filler row fits: [99, filler], [50, 50] (2, as without)
    plan = plan_micro_batches([99, 50, 50], 100, equal_rows_per_micro_batch=True)
    assert sorted((list(p), p.filler) for p in plan) == [([0], 1), ([1, 2], 0)]
    assert len(plan_micro_batches([99, 50, 50], 100)) == 2
    # the real job's shape (issue 45): a long sample and short ones under cap 600
    lengths = [572, 25, 31, 40, 120, 200, 260, 90, 60, 33, 300, 28]
    plain = plan_micro_batches(lengths, 600)
    filled = plan_micro_batches(lengths, 600, equal_rows_per_micro_batch=True)
    assert len(filled) == len(plain) == 3  # L1: ceil(1759 / 600) = 3
    check_plan(lengths, 600, filled, len(filled[0]) + filled[0].filler)


def summed_fewest(lengths: list[int], cap: int, pad: int, bucket: int) -> int:
    """Brute force: the fewest micro-batches with equal rows under the summed rule, each
    filler row one token (aligned to ``pad``), each micro-batch's sum rounded to ``bucket``."""
    best = len(lengths) + 1
    for blocks in partitions(list(range(len(lengths)))):
        rows = max(len(b) for b in blocks)
        if all(aligned(sum(aligned(lengths[i], pad) for i in b) + (rows - len(b)) * pad, bucket) <= cap
               for b in blocks):
            best = min(best, len(blocks))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_fewest_micro_batches_with_aligned_one_token_fillers(seed: int) -> None:
    rng = random.Random(4500 + seed)
    n = rng.randint(1, 7)
    pad, bucket = rng.choice([1, 2, 4]), rng.choice([1, 1, 4])
    lengths = [rng.randint(1, 40) for _ in range(n)]
    cap = aligned(rng.randint(aligned(max(lengths), pad) + pad, 90), bucket)
    plan = plan_micro_batches(lengths, cap, equal_rows_per_micro_batch=True,
                              pad_to_multiple_of=pad, micro_batch_multiple_of=bucket)
    check_plan(lengths, cap, plan, len(plan[0]) + plan[0].filler, pad=pad, bucket=bucket)
    assert len(plan) == summed_fewest(lengths, cap, pad, bucket)


@pytest.mark.parametrize("seed", range(60))
def test_the_fewest_micro_batches_then_the_fewest_rows_on_few_samples(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 6)
    lengths = [rng.randint(1, 12) for _ in range(n)]
    cap = rng.randint(max(lengths), 30)
    plan = plan_micro_batches(lengths, cap, equal_rows_per_micro_batch=True)
    rows = len(plan[0]) + plan[0].filler
    check_plan(lengths, cap, plan, rows)
    assert (len(plan), rows) == fewest(lengths, cap)


def draw_options(rng: random.Random, n: int) -> dict[str, Any]:
    options: dict[str, Any] = {"equal_rows_per_micro_batch": True}
    if rng.random() < 0.3:
        options["pad_to_multiple_of"] = rng.choice([2, 4])
    if rng.random() < 0.3:
        options["micro_batch_multiple_of"] = rng.choice([2, 8])
    if rng.random() < 0.3:
        options["padded"] = True
    if rng.random() < 0.3:
        options["max_samples_per_micro_batch"] = rng.randint(2, 6)
    if rng.random() < 0.3:
        options["num_batches_divided_by"] = rng.choice([2, 3])
    if rng.random() < 0.3:
        options["min_num_micro_batch"] = rng.randint(1, 4)
    if rng.random() < 0.3:
        options["dummy_micro_batches"] = True
    if rng.random() < 0.2:
        options["over_cap"] = "alone"
    return options


@pytest.mark.parametrize("seed", range(80))
def test_every_rank_every_micro_batch_the_same_rows_under_the_rule(seed: int) -> None:
    rng = random.Random(1000 + seed)
    world = rng.randint(1, 4)
    group = rng.choice([1, 1, 2])
    base = rng.randint(1, 8)  # ranks of similar sizes, as a sampler deals them
    per_rank = [[rng.randint(1, 40) for _ in range(group * (base + rng.randint(0, 1)))]
                for _ in range(world)]
    options = draw_options(rng, len(per_rank[0]))
    limit = options.get("max_samples_per_micro_batch")
    if limit is not None:
        options["max_samples_per_micro_batch"] = max(limit, group)
    cap = rng.randint(60, 200)
    if options.get("over_cap") == "alone":
        per_rank[0][0] = cap + 5
    try:
        plans = plan_data_parallel(per_rank, cap, force_group_size=group, **options)
    except ValueError as error:
        # the only refusals: counts above a rank's samples (no dummies) or rows over a cap
        message = str(error)
        assert "micro-batch cannot be empty" in message or "equal_rows_per_micro_batch" in message \
            or "exceeds max_token_len" in message or "dummy" in message, message
        return
    given = PlanOptions(force_group_size=group, **options)
    rows = {len(p) + p.filler for plan in plans for p in plan}
    assert len(rows) == 1  # one row count for every micro-batch of every rank
    assert len({len(plan) for plan in plans}) == 1
    for lengths, plan in zip(per_rank, plans, strict=True):
        check_plan(lengths, cap, plan, next(iter(rows)),
                   pad=given.pad_to_multiple_of, bucket=given.micro_batch_multiple_of,
                   padded=given.padded, limit=given.max_samples_per_micro_batch, group=group,
                   alone=given.over_cap == "alone")


@pytest.mark.parametrize("seed", range(20))
def test_an_empty_rank_runs_dummies_of_the_groups_rows(seed: int) -> None:
    rng = random.Random(2000 + seed)
    per_rank = [[rng.randint(1, 40) for _ in range(rng.randint(2, 12))] for _ in range(rng.randint(1, 3))]
    cap = rng.randint(60, 200)
    try:
        plans = plan_data_parallel([*per_rank, []], cap, equal_rows_per_micro_batch=True,
                                   dummy_micro_batches=True)
    except ValueError as error:  # a real rank whose rows cannot take the group's; never the empty one
        assert "equal_rows_per_micro_batch: every micro-batch must hold" in str(error)
        assert not str(error).startswith(f"rank {len(per_rank)} ")
        return
    count = len(plans[0])
    rows = {len(p) + p.filler for plan in plans[:-1] for p in plan}
    assert len(rows) == 1 and {len(plan) for plan in plans} == {count}
    (held,) = rows
    # the empty rank: the agreed count of dummies, no real row, the group's rows of filler
    assert plans[-1] == [[]] * count
    assert [(p.filler, p.filler_row) for p in plans[-1]] == [(held, -1)] * count
    for lengths, plan in zip(per_rank, plans, strict=False):
        check_plan(lengths, cap, plan, held)
    # without equal rows the empty rank's dummies are plain empty lists, as before
    plain = plan_data_parallel([*per_rank, []], cap, dummy_micro_batches=True)
    assert [type(p) for p in plain[-1]] == [list] * len(plain[-1])


def test_a_rank_that_cannot_take_the_rows_fails_every_rank_alike() -> None:
    # rank 0: twelve 1-token rows, 6 per micro-batch at 2; rank 1: two full rows, which a
    # filler row would push over the cap
    with pytest.raises(ValueError, match="equal_rows_per_micro_batch") as raised:
        plan_data_parallel([[1] * 12, [12, 12]], 12, equal_rows_per_micro_batch=True)
    assert str(raised.value) == (
        "rank 1 of the DP group: equal_rows_per_micro_batch: every micro-batch must hold 6 "
        "rows, but this rank's micro-batches hold at most 1 row under max_token_len=12 once "
        "their filler rows (zero-weight rows of one token) are counted; raise "
        "max_token_len, give the ranks batches of similar sizes, or turn "
        "equal_rows_per_micro_batch off"
    )
    assert RowsOverCap(6, 1, 12).message(rank=1) == str(raised.value)


def test_a_rank_with_a_smaller_count_takes_the_rows_of_the_agreed_count() -> None:
    # rank 1 alone needs 1 micro-batch of 4 rows; at the agreed 3 it needs 2, and rank 0's 3
    # fit its micro-batches too (the window of counts each rank states)
    plans = plan_data_parallel([[10, 4, 6, 3, 3, 8, 9, 1], [5, 5, 5, 5]], 20,
                               equal_rows_per_micro_batch=True)
    assert [len(p) for p in plans] == [3, 3]
    assert {len(p) + p.filler for plan in plans for p in plan} == {3}
    check_plan([5, 5, 5, 5], 20, plans[1], 3)


def test_an_exact_count_is_held_to_the_equal_rows_count() -> None:
    # [100, 50, 50] under 100: 2 plain micro-batches, 3 with equal rows (module docstring)
    with pytest.raises(ValueError, match=r"num_micro_batches=2: with equal_rows_per_micro_batch "
                                         r"the fewest .* is 3; pass at least 3"):
        plan_micro_batches([100, 50, 50], 100, num_micro_batches=2, equal_rows_per_micro_batch=True)
    plan = plan_micro_batches([10, 4, 6, 3, 3, 8, 9, 1], 20, num_micro_batches=4,
                              equal_rows_per_micro_batch=True)
    assert len(plan) == 4
    check_plan([10, 4, 6, 3, 3, 8, 9, 1], 20, plan, len(plan[0]) + plan[0].filler)
    assert len(plan[0]) + plan[0].filler == 2  # ceil(8 / 4): the rows of 4 micro-batches


def test_the_rows_travel_in_a_second_vector_at_the_agreed_count() -> None:
    from seqlen_balancing.agreement import combine, decode, decode_rows, encode, encode_rows, needs_reports
    from seqlen_balancing.planning.planner import analyse
    from seqlen_balancing.planning.rows import rows_at

    mask, none = (1 << 20) - 1, -(1 << 62)
    options = PlanOptions(equal_rows_per_micro_batch=True)
    first = analyse([10, 4, 6, 3, 3, 8, 9, 1], 20, options)  # 3 micro-batches of 3 rows
    second = analyse([5, 5, 5, 5], 20, options)  # alone: 1 micro-batch of 4 rows
    # the fewest rows at each count: ceil(8 / count) where the tokens allow it, ceil(4 / count)
    assert [(w.count, w.rows) for w in (rows_at(first, c) for c in (3, 4, 5))] == [(3, 3), (4, 2), (5, 2)]
    assert [(w.count, w.rows) for w in (rows_at(second, c) for c in (1, 2, 3, 4))] == [
        (1, 4), (2, 2), (3, 2), (4, 1)]
    reduced = combine([encode(first, 0), encode(second, 1)])
    assert not needs_reports(reduced)
    count, error, _ = decode(reduced)
    assert (count, error) == (3, None)
    tag = mask - 1
    # at count 3 the second rank needs 2 rows: rows << 20 | tag and -tolerance << 20 | tag
    # the second rank's fullest of 3 micro-batches: 2 real rows of 10 tokens, + 10 filler rows
    assert rows_at(second, 3).tolerance == 2 + (20 - 10)
    assert encode_rows(second, 3, 1) == [2 << 20 | tag, -12 << 20 | tag]
    assert encode_rows(analyse([5, 5, 5, 5], 20), 3, 1) == [0, none]  # option off: idle
    rows_reduced = combine([encode_rows(first, 3, 0), encode_rows(second, 3, 1)])
    assert decode_rows(rows_reduced, 20) == (3, None, None)  # the most any rank needs at 3


def test_the_rows_are_found_at_the_agreed_count_however_far_above_the_ranks_own() -> None:
    # rank 0: forty samples of the whole cap, each alone with no room for a filler row (40
    # micro-batches of 1 row); rank 1: forty 10-token samples, 1 micro-batch on its own. At
    # the agreed 40 rank 1's samples run one each: 1 row, no filler, and nothing is over the cap.
    # (A window of 32 counts from rank 1's own count of 1 stated the rows of count 8 there.)
    plans = plan_data_parallel([[1000] * 40, [10] * 40], 1000, equal_rows_per_micro_batch=True)
    for lengths, plan in zip([[1000] * 40, [10] * 40], plans, strict=True):
        assert len(plan) == 40
        check_plan(lengths, 1000, plan, 1)
        assert all(part.filler == 0 for part in plan)


def test_rows_at_any_count_are_the_balanced_rows_where_the_tokens_allow() -> None:
    from seqlen_balancing.planning.planner import analyse
    from seqlen_balancing.planning.rows import rows_at

    # forty 10-token samples under 1000: at c micro-batches the fewest rows are ceil(40 / c),
    # each micro-batch at most 10 x ceil(40 / c) <= 400 tokens, so every balanced count fits;
    # the tolerance: the fullest micro-batch's real rows plus 1-token filler rows to the cap
    result = analyse([10] * 40, 1000, PlanOptions(equal_rows_per_micro_batch=True))
    assert result.min_count == 1 and result.equal_rows is not None
    for count in (1, 2, 3, 7, 13, 20, 33, 40):
        at = rows_at(result, count)
        rows = -(-40 // count)
        assert (at.count, at.rows) == (count, rows)
        assert at.tolerance >= rows + (1000 - 10 * rows)  # its fewest rows' plan alone


def test_a_count_above_a_ranks_groups_runs_them_alone_at_their_rows() -> None:
    # rank 1 holds 3 samples and serves the agreed 8 with 5 dummies: every micro-batch 1 row
    # (rank 0's 100-token samples take no filler row under 100), its own 3 rows at count 1
    # not carried over.
    plans = plan_data_parallel([[100] * 8, [10, 20, 30]], 100, equal_rows_per_micro_batch=True,
                               dummy_micro_batches=True)
    assert [len(plan) for plan in plans] == [8, 8]
    assert {len(part) + part.filler for plan in plans for part in plan} == {1}
    assert sorted(i for part in plans[1] for i in part) == [0, 1, 2]


def test_the_agreement_writes_nothing_onto_the_analyses() -> None:
    import dataclasses

    from seqlen_balancing.agreement import agree_in_process
    from seqlen_balancing.planning.planner import analyse

    options = PlanOptions(equal_rows_per_micro_batch=True)
    # 3 micro-batches of 3 rows (44 tokens and 8 rows under 20), and 4 rows at 2 per micro-batch
    analyses = [analyse([10, 4, 6, 3, 3, 8, 9, 1], 20, options), analyse([5, 5, 5, 5], 20, options)]
    copies = [dataclasses.replace(a) for a in analyses]
    assert agree_in_process(analyses) == (3, 3)  # the count, and the rows as a value
    assert analyses == copies
    with pytest.raises(dataclasses.FrozenInstanceError):
        analyses[0].min_count = 1  # type: ignore[misc]
