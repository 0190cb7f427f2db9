"""The lock-step search's orders (lockstep.Grid's headroom, layer and gap bookkeeping),
against the plain rules they replace.

Issue 33 item 3: the search read every layer in every round (a sort of all layers per
target cell, the gap summed over all layers), O(count) per round and O(count^2) per step.
The grid now keeps those orders sorted as cells change. Two oracles, both written here:

* after every move of a random walk, each order equals the sort spelled out on the grid's
  loads (``sorted`` over every layer, as the search used to do it);
* whole plans: ``plan_step`` with the search's three readers replaced by the plain rules
  (every layer sorted in every round, the stuck layers in a set) plans exactly what it
  plans as shipped, on seeded steps of several shapes and options.
"""

from __future__ import annotations

import bisect
import math
import random
from typing import Any

import pytest

from seqlen_balancing.global_batch import lockstep
from seqlen_balancing.global_batch.lockstep import Grid
from seqlen_balancing.global_batch.step import plan_step
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import analyse


def lognormal(rng: random.Random, n: int, cap: int) -> list[int]:
    return [max(1, min(cap, int(rng.lognormvariate(math.log(cap / 8), 1.0)))) for _ in range(n)]


def top(grid: Grid, k: int) -> int:
    return max(grid.load[r][k] for r in range(grid.dp))


def plain_roomiest(grid: Grid, s: int, count: int, skip: int) -> list[tuple[int, int]]:
    layers = sorted((k for k in range(grid.count) if k != skip),
                    key=lambda k: (grid.load[s][k] - top(grid, k), k))
    return [(s, k) for k in layers[:count]]


def plain_rooms(grid: Grid, r: int, count: int, skip: int) -> list[tuple[int, int]]:
    rooms = sorted(((top(grid, k) - grid.load[r][k], k) for k in range(grid.count) if k != skip),
                   reverse=True)[:count]
    out = []
    for room, k in rooms:
        if room <= 0:
            break
        out.append((room, k))
    return out


def random_grid(rng: random.Random, dp: int, count: int, per_cell: int) -> Grid:
    n = dp * count * per_cell
    lengths = [rng.choice([1, 2, 3, 50, 51, 400]) for _ in range(n)]
    result = analyse(lengths, 10**9, PlanOptions())
    groups = list(range(n))
    rng.shuffle(groups)
    cells = [[groups[(r * count + k) * per_cell : (r * count + k + 1) * per_cell]
              for k in range(count)] for r in range(dp)]
    return Grid(result, cells)


def check_orders(grid: Grid) -> None:
    tops = [top(grid, k) for k in range(grid.count)]
    for r in range(grid.dp):
        assert grid.headroom[r] == sorted((grid.load[r][k] - tops[k], k) for k in range(grid.count))
    excess = [grid.dp * tops[k] - sum(grid.load[r][k] for r in range(grid.dp)) for k in range(grid.count)]
    assert grid.by_excess == sorted((-e, k) for k, e in enumerate(excess))
    assert grid.gap() == sum(excess)
    for r in range(grid.dp):
        for skip in {0, grid.count - 1, r % grid.count}:
            for want in (1, 2, 4):
                assert grid.roomiest(r, want, skip) == plain_roomiest(grid, r, want, skip)
                assert grid.rooms(r, want, skip) == plain_rooms(grid, r, want, skip)


@pytest.mark.parametrize("seed", range(12))
def test_the_orders_follow_every_move(seed: int) -> None:
    rng = random.Random(seed)
    grid = random_grid(rng, rng.choice([1, 2, 3, 8]), rng.choice([1, 2, 5, 9]), rng.choice([1, 2, 3]))
    check_orders(grid)
    for _ in range(40):
        r, k = rng.randrange(grid.dp), rng.randrange(grid.count)
        if not grid.cells[r][k]:
            continue
        g = rng.choice(grid.cells[r][k])
        grid.move(g, (r, k), (rng.randrange(grid.dp), rng.randrange(grid.count)))
        check_orders(grid)


def test_equal_rooms_take_the_larger_layer_first() -> None:
    # rank 1 sits 10 below the top in layers 0, 1 and 2 alike, and at the top in layer 3
    result = analyse([1] * 8, 100, PlanOptions())
    grid = Grid(result, [[[0], [1], [2], [3]], [[4], [5], [6], [7]]])
    grid.load = [[20, 20, 20, 5], [10, 10, 10, 9]]
    grid.rank_load = [sum(row) for row in grid.load]
    for k in range(4):
        grid.refresh(k)
    assert grid.rooms(1, 2, 3) == [(10, 2), (10, 1)]
    assert grid.rooms(1, 4, 1) == [(10, 2), (10, 0)]  # layer 3: no room (rank 1 is its top)
    assert grid.roomiest(1, 2, 0) == [(1, 1), (1, 2)]


# The search's readers as they were: every layer sorted in every round.
def reference_targets(grid: Grid, r: int, k: int) -> list[tuple[int, int]]:
    lightest = sorted(range(grid.dp), key=lambda s: (grid.load[s][k], s))[:lockstep._LIGHTEST]
    poorest = sorted(range(grid.dp), key=lambda s: (grid.rank_load[s], s))[:lockstep._LIGHTEST]
    found = plain_roomiest(grid, r, lockstep._HEADROOM_LAYERS, k) + [(s, k) for s in lightest if s != r]
    for s in poorest:
        if s != r:
            found += plain_roomiest(grid, s, 2, k)
    return list(dict.fromkeys(found))


def reference_shed(grid: Grid, r: int, k: int) -> list[tuple[int, int, int, int]]:
    cell, load = grid.cells[r][k], grid.load[r][k]
    found: list[tuple[int, int, int, int]] = []
    for room, k2 in plain_rooms(grid, r, lockstep._HEADROOM_LAYERS, k):
        others = sorted(grid.cells[r][k2], key=lambda g: (grid.workloads[g], g))
        loads = [grid.workloads[g] for g in others]
        for g in cell:
            w = grid.workloads[g]
            if w <= room and len(cell) > 1 and grid.fits(r, k2, (g,)):
                found.append((load - w, g, k2, -1))
            at = bisect.bisect_left(loads, w - room)
            if at < len(others) and loads[at] < w and grid.fits(r, k2, (g,), (others[at],)) \
                    and grid.fits(r, k, (others[at],), (g,)):
                found.append((load - w + loads[at], g, k2, others[at]))
    return sorted(found)


def reference_search(grid: Grid, rounds: int) -> None:
    stuck: set[int] = set()
    tolerance = lockstep._TOLERANCE
    for _ in range(rounds):
        open_layers = [k for k in range(grid.count) if k not in stuck]
        gap = sum(grid.dp * top(grid, k) - grid.sums[k] for k in range(grid.count))
        if not open_layers or gap <= sum(grid.sums) // tolerance:
            return
        k = max(open_layers, key=lambda j: (grid.dp * top(grid, j) - grid.sums[j], -j))
        found = lockstep._lower_heaviest(grid, k)
        if found is not None and found[0] * grid.dp * tolerance <= sum(grid.sums):
            found = None
        if found is not None:
            _, g, other_rank, layer, other = found
            r = -grid.tops[k][0][1]
            grid.move(g, (r, k), (other_rank, layer))
            if other >= 0:
                grid.move(other, (other_rank, layer), (r, k))
        elif not lockstep._lower_layer(grid, k, sum(grid.sums) // (grid.dp * tolerance)):
            stuck.add(k)
            continue
        stuck.clear()


def planned(lengths: list[int], dp: int, cap: int, options: dict[str, Any]) -> Any:
    try:
        plan = plan_step(lengths, dp, cap, **options)
    except ValueError as error:
        return str(error)
    return plan.rank_micro_batches, plan.count, plan.step_time, plan.tried


STEPS = [
    (seed, dp, per_rank, cap, options)
    for seed, (dp, per_rank, cap, options) in enumerate([
        (2, 64, 4096, {}), (4, 128, 16384, {}), (8, 256, 4096, {}), (8, 500, 16384, {}),
        (16, 64, 2048, {}), (4, 200, 4096, {"equal_size": False}),
        (8, 128, 4096, {"micro_batch_fixed_tokens": 0.0}), (4, 256, 8192, {"num_batches_divided_by": 2}),
        (8, 96, 4096, {"pad_to_multiple_of": 64}), (4, 64, 4096, {"max_samples_per_micro_batch": 6}),
        (4, 64, 8192, {"padded": True}), (8, 2500, 16384, {}),
    ])
]


@pytest.mark.parametrize(("seed", "dp", "per_rank", "cap", "options"), STEPS)
def test_plans_are_those_of_the_plain_search(
    seed: int, dp: int, per_rank: int, cap: int, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    lengths = lognormal(random.Random(seed), dp * per_rank, cap)
    shipped = planned(lengths, dp, cap, options)
    with monkeypatch.context() as patched:
        patched.setattr(lockstep, "_targets", reference_targets)
        patched.setattr(lockstep, "_shed", reference_shed)
        patched.setattr(lockstep, "_lock_step_search", reference_search)
        reference = planned(lengths, dp, cap, options)
    assert shipped == reference
    assert not isinstance(shipped, str)
