"""group_ids (groups of any size, in any order, kept whole) and an empty rank under
dummy_micro_batches, on the list API (no torch), judged by the rule spelled out here.

The oracle: a micro-batch is a set of sample indices; sample ``i`` costs
``ceil(c_i / p) * p`` (``c_i`` its given cost, else its length); summed, a micro-batch
costs the sum rounded up to ``b``; padded, its rows x ``ceil(max c_i / p) * p`` rounded up
to ``b``; it fits when that is at most the cap and its rows at most the sample limit. A
plan must be an exact cover of ``range(n)``, hold every group whole in one micro-batch and
fit every micro-batch (or hold one over-cap group alone under ``over_cap="alone"``). On
tiny inputs the count is checked against a brute-force search of every way to pack the
groups.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from seqlen_balancing import plan_data_parallel, plan_micro_batches
from seqlen_balancing.planning.groups import read_group_ids


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


class Oracle:
    """The rule on one rank's samples, written out."""

    def __init__(self, lengths: list[int], cap: int, ids: list[Any], costs: list[int] | None = None,
                 p: int = 1, b: int = 1, padded: bool = False, limit: int | None = None) -> None:
        self.lengths, self.cap, self.ids = lengths, cap, ids
        self.c = costs if costs is not None else lengths
        self.p, self.b, self.padded, self.limit = p, b, padded, limit
        groups: dict[Any, list[int]] = {}
        for i, g in enumerate(ids):
            groups.setdefault(g, []).append(i)
        self.groups = list(groups.values())

    def cost(self, rows: list[int]) -> int:
        if self.padded:
            width = max((ceil_to(self.c[i], self.p) for i in rows), default=0)
            return ceil_to(len(rows) * width, self.b)
        return ceil_to(sum(ceil_to(self.c[i], self.p) for i in rows), self.b)

    def fits(self, rows: list[int]) -> bool:
        return self.cost(rows) <= self.cap and (self.limit is None or len(rows) <= self.limit)

    def check(self, plan: list[list[int]], alone: bool = False) -> None:
        real = [part for part in plan if part]
        assert sorted(i for part in plan for i in part) == list(range(len(self.lengths)))
        for part in real:
            assert part == sorted(part)
            holding = [g for g in self.groups if set(g) & set(part)]
            assert all(set(g) <= set(part) for g in holding), (part, holding)  # groups whole
            assert self.fits(part) or (alone and len(holding) == 1 and not self.fits(holding[0])), part

    def fewest(self) -> int:
        """Brute force: the fewest micro-batches any packing of the groups needs."""
        groups = self.groups
        for count in range(1, len(groups) + 1):
            for labels in itertools.product(range(count), repeat=len(groups)):
                if labels[0] != 0 or len(set(labels)) != count:
                    continue
                bins = [[i for g, lab in zip(groups, labels, strict=True) if lab == k for i in g]
                        for k in range(count)]
                if all(self.fits(part) for part in bins):
                    return count
        raise AssertionError("no packing: a group is over the cap")


def draw_ids(rng: random.Random, n: int) -> list[Any]:
    """Random, non-contiguous ids of random sizes: ints, strings or tuples."""
    kinds = rng.choice(["int", "str", "tuple"])
    pool = list(range(rng.randint(1, n)))
    rng.shuffle(pool)
    raw = [rng.choice(pool) for _ in range(n)]
    if kinds == "str":
        return [f"uid-{g}" for g in raw]
    if kinds == "tuple":
        return [(g % 2, g) for g in raw]
    return [g * 7 - 3 for g in raw]


def test_groups_need_not_be_contiguous_nor_equal() -> None:
    plan = plan_micro_batches([60, 30, 50, 40, 10], 100, group_ids=["a", "b", "b", "a", "c"])
    Oracle([60, 30, 50, 40, 10], 100, ["a", "b", "b", "a", "c"]).check(plan)
    assert sorted(map(sorted, plan)) == [[0, 3], [1, 2, 4]]  # 100 and 90: two full ones


def test_force_group_size_is_group_ids_of_consecutive_samples() -> None:
    rng = random.Random(1)
    for _ in range(200):
        size = rng.choice([1, 2, 3, 4])
        n = size * rng.randint(1, 8)
        lengths = [rng.randint(1, 30) for _ in range(n)]
        cap = max(sum(lengths[g : g + size]) for g in range(0, n, size)) + rng.randint(0, 40)
        balance = rng.random() < 0.5
        forced = plan_micro_batches(lengths, cap, force_group_size=size, use_dynamic_bsz_balance=balance)
        ids = plan_micro_batches(lengths, cap, group_ids=[i // size for i in range(n)],
                                 use_dynamic_bsz_balance=balance)
        assert forced == ids


@pytest.mark.parametrize("seed", range(4))
def test_random_groups_are_whole_under_the_rule_and_the_count_is_the_fewest(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        n = rng.randint(1, 7)
        lengths = [rng.randint(0, 20) for _ in range(n)]
        ids = draw_ids(rng, n)
        p, b = rng.choice([1, 1, 2, 4]), rng.choice([1, 1, 2, 8])
        padded, limit = rng.random() < 0.3, rng.choice([None, None, 2, 3, 4])
        costs = [s + rng.randint(0, 3) for s in lengths] if rng.random() < 0.3 else None
        oracle = Oracle(lengths, 0, ids, costs, p, b, padded, limit)
        need = max(oracle.cost(g) for g in oracle.groups)
        oracle.cap = max(need, b, 1) + rng.choice([0, 0, 5, 20])
        limit_ok = limit is None or max(len(g) for g in oracle.groups) <= limit
        kwargs: dict[str, Any] = {"pad_to_multiple_of": p, "micro_batch_multiple_of": b,
                                  "padded": padded, "max_samples_per_micro_batch": limit}
        if not limit_ok:
            with pytest.raises(ValueError, match="more than max_samples_per_micro_batch"):
                plan_micro_batches(lengths, oracle.cap, group_ids=ids, costs=costs, **kwargs)
            continue
        plan = plan_micro_batches(lengths, oracle.cap, group_ids=ids, costs=costs, **kwargs)
        oracle.check(plan)
        if not padded:  # summed costs: the exhaustive search on few groups finds the fewest
            assert len(plan) == oracle.fewest(), (lengths, ids, oracle.cap, kwargs, plan)
        else:
            assert oracle.fewest() <= len(plan) <= len(oracle.groups)


def test_a_group_over_the_cap_is_named_by_its_id_or_runs_alone() -> None:
    lengths, ids = [40, 10, 45, 30, 20], ["x", "big", "x", "big", "y"]  # 'x' costs 85
    with pytest.raises(ValueError, match=r"^group 'x' \(group_ids\[0\], its first sample\) costs 85 "
                                         r"tokens .* exceeds max_token_len=80.* at least 85"):
        plan_micro_batches(lengths, 80, group_ids=ids)
    plan = plan_micro_batches(lengths, 80, group_ids=ids, over_cap="alone")
    Oracle(lengths, 80, ids).check(plan, alone=True)
    assert [0, 2] in plan and len(plan) == 2  # 'x' alone; 'big' (40) and 'y' (20) together
    # padded: rows 0 and 2, each 32 wide once aligned to 16, cost 2 x 32 = 64 positions
    with pytest.raises(ValueError, match=r"group 7 .* costs 64 token positions padded"):
        plan_micro_batches([30, 20, 32], 60, group_ids=[7, 8, 7], padded=True, pad_to_multiple_of=16)


@pytest.mark.parametrize(
    ("group_ids", "error", "words"),
    [
        ([0, 0], ValueError, "group_ids has 2 entries but the batch has 3 samples"),
        ("aab", TypeError, "got a value of type str"),
        ({0: 1, 1: 1, 2: 1}, TypeError, "got a value of type dict"),
        ([0, [1], 2], TypeError, r"group_ids\[1\] is a list, which cannot be hashed"),
        (iter([0, 1, 2]), TypeError, "got a value of type list_iterator"),
    ],
)
def test_bad_group_ids_are_refused_by_name(group_ids: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        plan_micro_batches([1, 2, 3], 10, group_ids=group_ids)


def test_group_ids_and_force_group_size_are_one_thing_given_once() -> None:
    with pytest.raises(ValueError, match="group_ids and force_group_size=2 were both given"):
        plan_micro_batches([1, 2], 10, group_ids=[0, 0], force_group_size=2)


def test_ids_are_read_whole_from_arrays() -> None:
    numpy = pytest.importorskip("numpy")
    ids = numpy.array(["u1", "u2", "u1"])
    assert read_group_ids(ids, 3)[1] == [[0, 2], [1]]
    assert read_group_ids(numpy.zeros((3, 1)), 3)[0] is not None  # not one id per sample


# -- on DP ranks, one process ---------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_rank_gets_the_same_count_of_whole_groups(world: int) -> None:
    rng = random.Random(world)
    for _ in range(40):
        ranks = [[rng.randint(1, 30) for _ in range(rng.randint(1, 9))] for _ in range(world)]
        ids = [draw_ids(rng, len(lens)) for lens in ranks]
        oracles = [Oracle(lens, 0, g) for lens, g in zip(ranks, ids, strict=True)]
        cap = max(o.cost(g) for o in oracles for g in o.groups) + rng.randint(0, 30)
        dummies = rng.random() < 0.5
        fewest = min(len(o.groups) for o in oracles)
        needed = max(-(-sum(lens) // cap) for lens in ranks)
        try:
            plans = plan_data_parallel(ranks, cap, group_ids=ids, dummy_micro_batches=dummies)
        except ValueError as error:
            assert not dummies and "samples/groups are available" in str(error)
            continue
        count = len(plans[0])
        assert all(len(plan) == count for plan in plans)
        assert needed <= count and (dummies or count <= fewest)
        for oracle, plan in zip(oracles, plans, strict=True):
            oracle.cap = cap
            oracle.check(plan)


def test_a_rank_holding_a_group_over_the_cap_fails_every_rank_naming_it() -> None:
    ranks, ids = [[10, 10], [50, 40, 5]], [[0, 1], ["g", "g", "h"]]
    with pytest.raises(ValueError, match=r"^rank 1 of the DP group: group 'g' \(group_ids\[0\], its "
                                         r"first sample\) costs 90 tokens"):
        plan_data_parallel(ranks, 60, group_ids=ids)


def test_ranks_must_all_or_none_use_group_ids() -> None:
    with pytest.raises(ValueError, match="the ranks passed different group_ids: rank 0 passes "
                                         "group_ids and rank 1 does not"):
        plan_data_parallel([[1, 2], [3, 4]], 10, group_ids=[[0, 0], None])


# -- an empty rank ---------------------------------------------------------------------------------


def test_an_empty_rank_runs_the_agreed_count_as_dummies() -> None:
    assert plan_data_parallel([[50], [60], [70], []], 1000, dummy_micro_batches=True) == \
        [[[0]], [[0]], [[0]], [[]]]
    plans = plan_data_parallel([[600, 600, 600], [], [700]], 1000, dummy_micro_batches=True,
                               num_batches_divided_by=2)
    assert [len(p) for p in plans] == [4, 4, 4]  # 3 needed on rank 0, rounded up to 4
    assert plans[1] == [[], [], [], []] and plans[2][1:] == [[], [], []]
    assert plan_micro_batches([], 8, dummy_micro_batches=True, min_num_micro_batch=3) == [[], [], []]


def test_an_empty_rank_without_dummies_is_todays_agreed_error() -> None:
    with pytest.raises(ValueError, match=r"^rank 3 of the DP group: the batch has no samples"):
        plan_data_parallel([[50], [60], [70], []], 1000)
    with pytest.raises(ValueError, match=r"^rank 0 of the DP group: the batch has no samples"):
        plan_data_parallel([[], [60]], 1000, group_ids=[[], [1]])


def test_every_rank_empty_runs_one_dummy_each() -> None:
    assert plan_data_parallel([[], []], 100, dummy_micro_batches=True) == [[[]], [[]]]


# -- the whole step across ranks -----------------------------------------------------------------


@pytest.mark.parametrize("dp", [2, 3, 4])
def test_plan_global_batch_never_splits_a_group_across_ranks(dp: int) -> None:
    from seqlen_balancing import plan_global_batch

    rng = random.Random(dp)
    for _ in range(25):
        n = rng.randint(dp, 30)
        lengths = [rng.randint(1, 200) for _ in range(n)]
        ids = draw_ids(rng, n)
        oracle = Oracle(lengths, 0, ids, limit=rng.choice([None, 6, 10]))
        if oracle.limit is not None and max(len(g) for g in oracle.groups) > oracle.limit:
            oracle.limit = None
        oracle.cap = max(oracle.cost(g) for g in oracle.groups) + rng.randint(0, 300)
        if len(oracle.groups) < dp:
            continue
        try:
            ranks, micro = plan_global_batch(lengths, dp, oracle.cap, equal_size=False, group_ids=ids,
                                             max_samples_per_micro_batch=oracle.limit)
        except ValueError as error:  # too few groups for the count the cap needs on every rank
            assert "a micro-batch is never empty" in str(error) or "no plan with the same" in str(error)
            continue
        assert len({len(m) for m in micro}) == 1  # the same count on every rank
        assert sorted(i for s in ranks for i in s) == list(range(n))
        for samples, plan in zip(ranks, micro, strict=True):
            assert samples == [i for part in plan for i in part]
            for part in plan:
                assert part and oracle.fits(part), part
        rank_of = {i: r for r, s in enumerate(ranks) for i in s}
        assert all(len({rank_of[i] for i in g}) == 1 for g in oracle.groups)  # one rank per group
        in_one = {i: k for plan in micro for k, part in enumerate(map(tuple, plan)) for i in part}
        assert all(len({(rank_of[i], in_one[i]) for i in g}) == 1 for g in oracle.groups)


def test_plan_global_batch_equal_size_needs_groups_of_one_size() -> None:
    from seqlen_balancing import plan_global_batch

    ranks, _ = plan_global_batch([5] * 8, 2, 20, group_ids=[i % 4 for i in range(8)])
    assert [len(s) for s in ranks] == [4, 4]
    with pytest.raises(ValueError, match="groups of 1 to 2 samples; pass equal_size=False"):
        plan_global_batch([5] * 3, 1, 20, group_ids=["a", "a", "b"])
