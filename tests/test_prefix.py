"""Shared prompts counted once (issue 47, item 3): ``prefix_lengths`` beside ``group_ids``.

The rule, written out here independently of the library: a micro-batch costs its samples'
tokens beyond their prefix plus each group's prefix once for every group present; a group
that fits the cap lands whole; a group over the cap is cut by first-fit decreasing (its
samples, most tokens beyond the prefix first, each join the first part that stays within
the cap with the prefix once, else open a new one), and each part pays the prefix. The
oracle enumerates every set partition of those parts and takes the fewest micro-batches
that fit.
"""

from __future__ import annotations

import random
import re

import pytest

from oracles import partitions
from seqlen_balancing import plan_data_parallel, plan_micro_batches
from seqlen_balancing.planning.prefix import shared_prefix_costs


def rule_cost(block: list[int], lengths: list[int], prefixes: list[int], ids: list[object]) -> int:
    """A micro-batch's cost: tokens beyond the prefix, plus one prefix per group present."""
    present = {ids[i]: prefixes[i] for i in block}
    return sum(lengths[i] - prefixes[i] for i in block) + sum(present.values())


def oracle_parts(lengths: list[int], prefixes: list[int], ids: list[object], cap: int) -> list[list[int]]:
    """Each group whole if it fits, else first-fit decreasing on its tokens beyond the prefix."""
    groups: dict[object, list[int]] = {}
    for i, g in enumerate(ids):
        groups.setdefault(g, []).append(i)
    parts: list[list[int]] = []
    for samples in groups.values():
        if rule_cost(samples, lengths, prefixes, ids) <= cap:
            parts.append(samples)
            continue
        cut: list[list[int]] = []
        for i in sorted(samples, key=lambda i: (prefixes[i] - lengths[i], i)):
            fitting = [part for part in cut if rule_cost([*part, i], lengths, prefixes, ids) <= cap]
            if fitting:
                fitting[0].append(i)
            else:
                cut.append([i])
        parts += cut
    return parts


def oracle_fewest(lengths: list[int], prefixes: list[int], ids: list[object], cap: int) -> int:
    parts = oracle_parts(lengths, prefixes, ids, cap)
    best = len(parts)
    for blocks in partitions(list(range(len(parts)))):
        samples = [[i for p in block for i in parts[p]] for block in blocks]
        if len(blocks) < best and all(rule_cost(s, lengths, prefixes, ids) <= cap for s in samples):
            best = len(blocks)
    return best


def random_case(rng: random.Random) -> tuple[list[int], list[int], list[object], int]:
    """2-8 samples in 1-4 groups (ids shuffled), a shared prefix per group, a cap every
    sample fits alone."""
    n = rng.randint(2, 8)
    n_groups = rng.randint(1, min(4, n))
    ids: list[object] = [f"p{rng.randint(0, n_groups - 1)}" for _ in range(n)]
    prefix_of = {g: rng.randint(0, 40) for g in ids}
    prefixes = [prefix_of[g] for g in ids]
    lengths = [p + rng.randint(0, 30) for p in prefixes]
    cap = max(lengths) + rng.randint(0, 80)
    return lengths, prefixes, ids, cap


def test_the_count_is_the_oracles_fewest_and_every_micro_batch_fits() -> None:
    rng = random.Random(47)
    split_seen = 0
    for _ in range(100):
        lengths, prefixes, ids, cap = random_case(rng)
        plan = plan_micro_batches(lengths, cap, group_ids=ids, prefix_lengths=prefixes)
        assert len(plan) == oracle_fewest(lengths, prefixes, ids, cap), (lengths, prefixes, ids, cap)
        assert sorted(i for part in plan for i in part) == list(range(len(lengths)))
        for part in plan:
            assert rule_cost(part, lengths, prefixes, ids) <= cap
        for samples in ({i for i, h in enumerate(ids) if h == g} for g in set(ids)):
            if rule_cost(sorted(samples), lengths, prefixes, ids) <= cap:  # fits: lands whole
                assert sum(1 for part in plan if samples & set(part)) == 1
            else:
                split_seen += 1
    assert split_seen >= 10  # the cases exercise the split, not only whole groups


def test_force_group_size_forms_the_groups_that_share_a_prefix() -> None:
    """Without group_ids, force_group_size=g's groups (samples [k*g, (k+1)*g)) share the
    prefix: the oracle plans the same ids written out, and a batch g does not divide is
    refused as without prefixes."""
    rng = random.Random(48)
    for _ in range(60):
        g = rng.randint(2, 3)
        n = g * rng.randint(1, 3)
        prompt = [rng.randint(0, 40) for _ in range(n // g)]
        prefixes = [prompt[i // g] for i in range(n)]
        lengths = [p + rng.randint(0, 30) for p in prefixes]
        cap = max(lengths) + rng.randint(0, 80)
        ids: list[object] = [i // g for i in range(n)]
        plan = plan_micro_batches(lengths, cap, force_group_size=g, prefix_lengths=prefixes)
        assert len(plan) == oracle_fewest(lengths, prefixes, ids, cap), (lengths, prefixes, g, cap)
        assert all(rule_cost(part, lengths, prefixes, ids) <= cap for part in plan)
        assert sorted(i for part in plan for i in part) == list(range(n))
    with pytest.raises(ValueError, match="batch size 5 is not divisible by force_group_size=2"):
        plan_micro_batches([5] * 5, 100, force_group_size=2, prefix_lengths=[1] * 5)
    with pytest.raises(ValueError, match="group_ids and force_group_size=2 were both given"):
        plan_micro_batches([5] * 4, 100, force_group_size=2, group_ids=[0, 0, 1, 1], prefix_lengths=[1] * 4)


def test_a_sample_over_the_cap_is_named_as_without_prefixes() -> None:
    """The parts' costs are the rule's, not the caller's: no "costs given" in the message."""
    with pytest.raises(ValueError, match=r"^sample 3 has 650 tokens, which exceeds max_token_len") as raised:
        plan_micro_batches([450, 450, 450, 650], 600, group_ids=["q"] * 4, prefix_lengths=[400] * 4)
    assert "costs given" not in str(raised.value)


def test_a_rank_short_of_parts_needs_dummies_even_at_a_larger_cap() -> None:
    """Rank 0 needs 2 micro-batches at caps 250 and 300. Rank 1's one prompt (100 tokens, two
    responses of 100 beyond it, 300 in all) is cut in two parts at 250 and stays whole at
    300: one part cannot make two micro-batches, so the larger cap is refused unless
    dummies may make up the count."""
    lengths, ids, prefixes = [[200, 200], [200, 200]], [["a", "b"], ["q", "q"]], [[0, 0], [100, 100]]
    plans = plan_data_parallel(lengths, 250, group_ids=ids, prefix_lengths=prefixes)
    assert [len(plan) for plan in plans] == [2, 2]
    with pytest.raises(ValueError, match="2 micro-batches are needed but only 1 samples/groups"):
        plan_data_parallel(lengths, 300, group_ids=ids, prefix_lengths=prefixes)
    plans = plan_data_parallel(lengths, 300, group_ids=ids, prefix_lengths=prefixes,
                               dummy_micro_batches=True)
    assert plans[1] == [[0, 1], []]


def test_equal_rows_fill_with_one_token_rows_as_without_prefixes() -> None:
    """A prompt of 100 tokens, three responses of 50 beyond it (250 shared), and a 260-token
    sample: under 300, two micro-batches of 3 rows; the second takes two filler rows of one
    token (262), as docs/pipeline.md says, not of the cheapest response's 50 (360)."""
    lengths, ids, prefixes = [150, 150, 150, 260], ["q", "q", "q", "r"], [100, 100, 100, 0]
    plan = plan_micro_batches(lengths, 300, group_ids=ids, prefix_lengths=prefixes,
                              equal_rows_per_micro_batch=True)
    assert [sorted(part) for part in plan] == [[0, 1, 2], [3]]
    assert [getattr(part, "filler", 0) for part in plan] == [0, 2]
    alone = rule_cost([3], lengths, prefixes, ids)
    assert alone + 2 * 1 <= 300 < alone + 2 * 50


def test_sharing_saves_micro_batches_that_counting_every_prompt_would_need() -> None:
    # 4 responses of 50 tokens beyond a 400-token prompt: 600 tokens shared, 1,800 counted flat.
    lengths, ids, prefixes = [450] * 4, ["q"] * 4, [400] * 4
    assert plan_micro_batches(lengths, 600, group_ids=ids, prefix_lengths=prefixes) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="costs 1800 tokens"):
        plan_micro_batches(lengths, 600, group_ids=ids)


def test_a_group_over_the_cap_is_cut_first_fit_decreasing_each_part_paying_the_prompt() -> None:
    # prompt 100, responses 60, 70, 80, 90 beyond it: 400 in all, over 250. 90 opens a part
    # (190), 80 another (180), 70 joins the second (250), 60 the first (250).
    lengths, ids, prefixes = [160, 170, 180, 190], ["q"] * 4, [100] * 4
    parts = shared_prefix_costs(lengths, ids, prefixes, 250)
    assert parts.error is None and parts.costs == [60, 70, 180, 190]
    assert [repr(g) for g in parts.group_ids] == [
        "'q' (part 1 of 2)", "'q' (part 2 of 2)", "'q' (part 2 of 2)", "'q' (part 1 of 2)"]
    plan = plan_micro_batches(lengths, 250, group_ids=ids, prefix_lengths=prefixes)
    assert sorted(plan) == [[0, 3], [1, 2]]


def test_over_cap_alone_runs_the_group_whole_costing_its_prompt_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lengths, ids, prefixes = [160, 170, 180, 190, 30], ["q"] * 4 + ["r"], [100] * 4 + [10]
    plan = plan_micro_batches(lengths, 250, group_ids=ids, prefix_lengths=prefixes, over_cap="alone")
    assert sorted(plan) == [[0, 1, 2, 3], [4]]
    assert "group 'q' (first sample 0) costs 400 tokens" in caplog.text


def test_the_sample_limit_cuts_a_group_as_the_cap_does() -> None:
    plan = plan_micro_batches([20] * 5, 1000, group_ids=[0] * 5, prefix_lengths=[10] * 5,
                              max_samples_per_micro_batch=2)
    assert sorted(plan) == [[0, 1], [2, 3], [4]]


def test_alignment_rounds_each_piece() -> None:
    # pad 8: 13 -> 16 for the head, 13 - 10 = 3 -> 8 for each other response.
    parts = shared_prefix_costs([13, 13, 13], [0, 0, 0], [10] * 3, 100, None)
    assert parts.costs == [13, 3, 3]
    from seqlen_balancing import PlanOptions

    padded = shared_prefix_costs([13, 13, 13], [0, 0, 0], [10] * 3, 31, PlanOptions(pad_to_multiple_of=8))
    assert padded.costs == [16, 8, 16] and len({g.part for g in padded.group_ids}) == 2


@pytest.mark.parametrize(("keywords", "message"), [
    ({"costs": [5, 5]}, "prefix_lengths and costs were both given"),
    ({"padded": True}, "prefix_lengths and padded=True were both given"),
    ({"group_ids": None}, "prefix_lengths was given without group_ids: a prefix is shared by the samples "
     "of one group (the responses of one prompt); pass group_ids (e.g. verl's uid) or a force_group_size "
     "above 1 too"),
    ({"prefix_lengths": [3, 9]}, "prefix_lengths[1] is 9 but sample 1 has 6 tokens"),
    ({"prefix_lengths": [3, 2]}, "group 'a' has prefix_lengths 3 (sample 0) and 2 (sample 1)"),
    ({"prefix_lengths": [3]}, "prefix_lengths has 1 entries but the batch has 2 samples"),
    ({"prefix_lengths": [3, -1]}, "prefix_lengths[1] is -1"),
])
def test_refusals_name_both_settings_or_the_sample(keywords: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"group_ids": ["a", "a"], "prefix_lengths": [3, 3], **keywords}
    with pytest.raises(ValueError, match=re.escape(message)):
        plan_micro_batches([5, 6], 100, **arguments)  # type: ignore[arg-type]


def test_ranks_in_one_process_agree_and_must_all_pass_prefixes() -> None:
    lengths = [[450] * 4, [300] * 2 + [50] * 2]
    ids = [["q"] * 4, ["r", "r", "s", "s"]]
    prefixes: list[list[int] | None] = [[400] * 4, [250, 250, 0, 0]]
    plans = plan_data_parallel(lengths, 600, group_ids=ids, prefix_lengths=prefixes)  # type: ignore[arg-type]
    assert [len(p) for p in plans] == [1, 1]
    with pytest.raises(ValueError, match="rank 0 passes prefix_lengths and rank 1 does not"):
        plan_data_parallel(lengths, 600, group_ids=ids, prefix_lengths=[prefixes[0], None])  # type: ignore[list-item]
