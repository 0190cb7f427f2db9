"""verl 0.9.1's count rule (seqlen_balancing.planning.verl_rule) against a literal model of its loop."""

from __future__ import annotations

import math
import random

import pytest

from seqlen_balancing.planning.partition import karmarkar_karp, workload
from seqlen_balancing.planning.verl_rule import VerlSearchLimit, verl_counts


def model(
    per_rank: list[list[int]],
    cap: int,
    agree: bool = True,
    divisor: int | None = None,
    floor: int | None = None,
    group: int = 1,
) -> list[int] | str:
    """verl 0.9.1's rearrange_micro_batches count, step by step, without shortcuts."""
    sizes = [[sum(r[g : g + group]) for g in range(0, len(r), group)] for r in per_rank]
    loads = [[sum(workload(s) for s in r[g : g + group]) for g in range(0, len(r), group)] for r in per_rank]
    step = divisor or 1

    def start(i: int) -> int:
        k = min(len(sizes[i]), math.ceil(sum(sizes[i]) / cap))
        return k if floor is None else max(floor, k)

    def search(ranks: list[int], k: int) -> int | str:
        k = -(-k // step) * step
        if max(max(sizes[i]) for i in ranks) > cap:
            return "error"
        while True:
            if k > min(len(sizes[i]) for i in ranks):
                return "error"
            fit = True
            for i in ranks:
                parts = karmarkar_karp(loads[i], k, equal_size=False)
                fit &= all(sum(sizes[i][j] for j in p) <= cap for p in parts)
            if fit:
                return k
            k += step

    if agree:
        found = search(list(range(len(per_rank))), max(start(i) for i in range(len(per_rank))))
        return found if isinstance(found, str) else [found] * len(per_rank)
    counts = [search([i], start(i)) for i in range(len(per_rank))]
    return "error" if "error" in counts else [int(c) for c in counts]


def ours(per_rank: list[list[int]], cap: int, **kw: object) -> list[int] | str:
    try:
        return verl_counts(per_rank, cap, max_tries=10_000, **kw).counts  # type: ignore[arg-type]
    except VerlSearchLimit:
        raise
    except ValueError:
        return "error"


def test_examples_by_hand() -> None:
    # ceil(18 / 10) = 2 parts: 6+6 = 12 > 10, so 3
    assert verl_counts([[6, 6, 6]], 10).counts == [3]
    # 512 samples of 7 tokens at cap 8: every part holds one sample; the L2 skip finds it
    # in one round (verl 0.9.1 itself runs 65 rounds here)
    found = verl_counts([[7] * 512], 8)
    assert (found.counts, found.tries) == ([512], 1)
    # agreement: the ranks move together to the larger need
    assert verl_counts([[6, 6, 6], [1, 1, 1]], 10).counts == [3, 3]
    assert verl_counts([[6, 6, 6], [1, 1, 1]], 10, same_micro_num_in_dp=False).counts == [3, 1]
    # num_batches_divided_by rounds the start and is the step
    assert verl_counts([[6, 6, 6, 6, 1, 1]], 10, num_batches_divided_by=3).counts == [6]
    # ... and can overshoot the groups: 3 does not fit, 6 > 4 samples, so verl raises
    with pytest.raises(ValueError, match="more than 3 micro-batches but a rank has only 4 forced groups"):
        verl_counts([[6, 6, 6, 6]], 10, num_batches_divided_by=3)


@pytest.mark.parametrize("seed", range(60))
def test_matches_the_literal_loop_on_random_steps(seed: int) -> None:
    rng = random.Random(seed)
    dp = rng.choice([1, 2, 3])
    group = rng.choice([1, 1, 2])
    n = group * rng.randint(1, 12)
    cap = rng.randint(8, 60)
    per_rank = [[rng.randint(0, cap // group) for _ in range(n)] for _ in range(dp)]
    kw = {
        "divisor": rng.choice([None, None, 2, 3]),
        "floor": rng.choice([None, None, 1, 3]),
        "group": group,
        "agree": rng.random() < 0.7,
    }
    expected = model(per_rank, cap, **kw)  # type: ignore[arg-type]
    got = ours(
        per_rank,
        cap,
        same_micro_num_in_dp=kw["agree"],
        num_batches_divided_by=kw["divisor"],
        min_num_micro_batch=kw["floor"],
        force_group_size=group,
    )
    assert got == expected


def test_search_limit_names_the_last_count_tried() -> None:
    lengths = [2] * 9 + [3] * 6  # L2 = 6, Karmarkar-Karp fits only at 7
    assert verl_counts([lengths], 6).counts == [7]
    with pytest.raises(VerlSearchLimit, match="count is above 6") as caught:
        verl_counts([lengths], 6, max_tries=1)
    assert (caught.value.last_tried, caught.value.tries) == (6, 1)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("per_rank", "cap", "kw", "fragment"),
    [
        ([[5, 11]], 10, {}, "a sample of 11 tokens exceeds max_token_len 10"),
        ([[5, 6, 1, 1]], 10, {"force_group_size": 2}, "a forced group of 11 tokens exceeds"),
        ([[5, 5, 5]], 10, {"force_group_size": 2}, "batch size 3 is not divisible by force_group_size 2"),
        ([[1, 1], [1, 1, 1, 1]], 10, {"min_num_micro_batch": 3}, "a rank has only 2 forced groups"),
        ([], 10, {}, "seq_lens_per_rank is empty"),
        ([[1], []], 10, {}, "rank 1 has no samples"),
    ],
)
def test_where_verl_fails(per_rank: list[list[int]], cap: int, kw: dict[str, int], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        verl_counts(per_rank, cap, **kw)  # type: ignore[arg-type]


def test_bad_settings_are_type_and_value_errors() -> None:
    with pytest.raises(ValueError, match="max_tries must be a positive integer"):
        verl_counts([[1]], 10, max_tries=0)
    with pytest.raises(TypeError, match="max_token_len must be a positive integer"):
        verl_counts([[1]], 1.5)  # type: ignore[arg-type]
