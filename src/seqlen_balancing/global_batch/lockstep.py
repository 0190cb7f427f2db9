"""DP ranks in lock-step: the step-time model, and micro-batches lined up across ranks (no torch).

Under FSDP every micro-batch ends in a collective, so the DP ranks run their micro-batches
in lock-step: micro-batch ``k`` takes as long as the slowest rank's micro-batch ``k``. The
*lock-step model* of a step (:func:`lock_step_time`) is

    step time = sum over k of (max over ranks r of W(r, k)) + count x fixed cost

where ``W(r, k)`` is the workload of rank ``r``'s micro-batch ``k`` (verl's
``24576*s + s**2`` per sequence of ``s`` tokens, or the caller's ``workloads``) and the
fixed cost of one micro-batch is ``micro_batch_fixed_tokens x 24576``
(:func:`micro_batch_fixed_cost`: kernel launches, the parameter all-gather and the gradient
reduce-scatter, as the linear work of that many tokens; the same whatever the cap, and with a
``workload_model`` its linear coefficient instead of ``24576``). No plan beats its floor
(:func:`step_time_floor`): ``total workload / dp_size + count x fixed cost``.

:func:`plan_at` builds a :class:`Grid` of ``dp x count`` cells (rank, micro-batch index),
each a micro-batch under the rule of a whole-step :class:`~seqlen_balancing.planning.analysis.RankAnalysis`,
with the same number of samples on every rank when asked, and lowers its lock-step time
by a bounded local search; :mod:`seqlen_balancing.global_batch.step` chooses the count and turns the
grid into the plan. Every choice is made on integers with deterministic tie-breaks.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.analysis import RankAnalysis
from seqlen_balancing.planning.partition import WORKLOAD_LINEAR_COEF, karmarkar_karp
from seqlen_balancing.planning.planner import analyse, build_plan

__all__ = [
    "Grid",
    "layer_order",
    "lock_step_time",
    "micro_batch_fixed_cost",
    "plan_at",
    "step_time_floor",
]

#: Local-search rounds per group of the step (plus :data:`_SEARCH_BASE`).
_SEARCH_ROUNDS = 4
_SEARCH_BASE = 64
#: The local search stops at 1/_TOLERANCE of the floor above it, and ignores smaller gains.
_TOLERANCE = 1 << 14
#: Layers (by headroom) the search tries for one group of the heaviest micro-batch.
_HEADROOM_LAYERS = 4
#: Lightest micro-batches of a layer the search swaps with.
_LIGHTEST = 2
#: Groups of a micro-batch the two-for-one exchange pairs up (the smallest by cost).
_PAIR_GROUPS = 24


def micro_batch_fixed_cost(fixed_tokens: float, options: PlanOptions | None = None) -> float:
    """The fixed cost of one micro-batch in workload units: ``fixed_tokens`` tokens of linear
    work, ``fixed_tokens x 24576`` in verl's ``24576*s + s**2`` (with ``options.workload_model``,
    its linear coefficient instead of ``24576``). It does not depend on ``max_token_len``.

    Example:
        >>> micro_batch_fixed_cost(100.0)
        2457600.0
    """
    model = None if options is None else options.workload_model
    return fixed_tokens * (WORKLOAD_LINEAR_COEF if model is None else model.coefficients()[0])


def lock_step_time(
    rank_micro_batches: Sequence[Sequence[Sequence[int]]],
    workloads: Sequence[int],
    fixed_cost: float = 0.0,
) -> float:
    """The lock-step model of a step: ``sum_k max_r W(r, k) + count x fixed_cost``.

    Args:
        rank_micro_batches: for each DP rank, its micro-batches as lists of sample indices.
        workloads: the workload of each sample (indices into it), e.g. verl's
            ``24576*s + s**2``.
        fixed_cost: the fixed cost of one micro-batch (:func:`micro_batch_fixed_cost`).

    Returns:
        The modeled step time in workload units; ``count`` is the most micro-batches any
        rank has (a rank with fewer waits through the others' extra ones).

    Complexity: O(n + ranks x count).

    Example:
        >>> lock_step_time([[[0], [1]], [[2], [3]]], [5, 1, 2, 4], fixed_cost=1)
        11.0
    """
    count = max((len(plan) for plan in rank_micro_batches), default=0)
    return float(sum(
        max(sum(workloads[i] for i in plan[k]) for plan in rank_micro_batches if k < len(plan))
        for k in range(count)
    )) + count * fixed_cost


def step_time_floor(
    workloads: Sequence[int], dp_size: int, count: int, fixed_cost: float = 0.0
) -> float:
    """The lock-step time no assignment beats: ``sum(workloads) / dp_size + count x fixed_cost``.

    Example:
        >>> step_time_floor([5, 1, 2, 4], 2, 2, fixed_cost=1)
        8.0
    """
    return sum(workloads) / dp_size + count * fixed_cost


class Grid:
    """Groups per (rank, layer) cell, with their workloads and costs, each rank's total
    and each layer's three heaviest cells (a layer is one micro-batch index on every rank)."""

    def __init__(self, result: RankAnalysis, cells: list[list[list[int]]]) -> None:
        self.cells = cells
        self.dp, self.count = len(cells), len(cells[0])
        self.sizes, self.workloads = result.group_sizes, result.group_workloads
        self.cap = result.max_token_len
        rule = result.rule
        # the sample limit on a cell's rows (a group counts its samples)
        self.limit = rule.limit if rule is not None else None
        self.rows = rule.rows if rule is not None else [1] * len(self.sizes)
        self.fewest_rows = min(self.rows, default=1)  # the smallest group a cell could take
        self.padded = rule if rule is not None and rule.is_padded else None
        self.load = [[sum(self.workloads[g] for g in cell) for cell in row] for row in cells]
        self.tokens = [[sum(self.sizes[g] for g in cell) for cell in row] for row in cells]
        self.rank_load = [sum(row) for row in self.load]
        # each layer's three heaviest cells (load, -rank) and its total
        self.tops = [heapq.nlargest(3, ((row[k], -r) for r, row in enumerate(self.load)))
                     for k in range(self.count)]
        self.sums = [sum(row[k] for row in self.load) for k in range(self.count)]
        # the orders the local search reads, kept sorted by refresh(): per rank its layers by
        # (load - layer top, layer) (most headroom first), the layers by (-(dp x top - total),
        # layer) (furthest above their mean first), and the sum of dp x top - total (gap())
        tops = [self.tops[k][0][0] for k in range(self.count)]
        self.headroom = [sorted((row[k] - tops[k], k) for k in range(self.count)) for row in self.load]
        self._heads = [[row[k] - tops[k] for k in range(self.count)] for row in self.load]
        self._excess = [self.dp * tops[k] - self.sums[k] for k in range(self.count)]
        self.by_excess = sorted((-e, k) for k, e in enumerate(self._excess))
        self._gap = sum(self._excess)

    def refresh(self, k: int) -> None:
        """Recompute layer ``k``'s three heaviest cells (load, -rank) and its total, and its
        entries in the orders the local search reads (O(dp x (log count + count)), the count
        term a list's memmove)."""
        column = [(self.load[r][k], -r) for r in range(self.dp)]
        self.tops[k] = heapq.nlargest(3, column)
        self.sums[k] = sum(load for load, _ in column)
        top = self.tops[k][0][0]
        excess = self.dp * top - self.sums[k]
        if excess != self._excess[k]:
            _resort(self.by_excess, (-self._excess[k], k), (-excess, k))
            self._gap += excess - self._excess[k]
            self._excess[k] = excess
        for r in range(self.dp):
            head = self.load[r][k] - top
            if head != self._heads[r][k]:
                _resort(self.headroom[r], (self._heads[r][k], k), (head, k))
                self._heads[r][k] = head

    def top(self, k: int, skip: tuple[int, ...] = ()) -> int:
        """The heaviest load of layer ``k`` outside the ranks ``skip`` (at most two)."""
        return next((load for load, neg in self.tops[k] if -neg not in skip), 0)

    def fits(self, r: int, k: int, add: Sequence[int], remove: Sequence[int] = ()) -> bool:
        """Whether cell ``(r, k)`` with ``add`` in and ``remove`` out still fits the rule."""
        cell, rows = self.cells[r][k], self.rows
        if self.limit is not None and \
                sum(rows[g] for g in [*cell, *add]) - sum(rows[g] for g in remove) > self.limit:
            return False
        if self.padded is None:
            change = sum(self.sizes[g] for g in add) - sum(self.sizes[g] for g in remove)
            return self.tokens[r][k] + change <= self.cap
        return self.padded.fits([g for g in cell if g not in remove] + list(add))

    def move(self, g: int, source: tuple[int, int], target: tuple[int, int]) -> None:
        (r, k), (r2, k2) = source, target
        self.cells[r][k].remove(g)
        self.cells[r2][k2].append(g)
        for (q, j), sign in ((source, -1), (target, 1)):
            self.load[q][j] += sign * self.workloads[g]
            self.rank_load[q] += sign * self.workloads[g]
            self.tokens[q][j] += sign * self.sizes[g]
        for layer in dict.fromkeys((k, k2)):
            self.refresh(layer)

    def step_time(self) -> int:
        return sum(tops[0][0] for tops in self.tops)

    def gap(self) -> int:
        """The lock-step time above its floor, times ``dp``: ``sum_k (dp max_k - sum_k)``
        (kept up to date by :meth:`refresh`: O(1))."""
        return self._gap

    def roomiest(self, s: int, count: int, skip: int) -> list[tuple[int, int]]:
        """Rank ``s``'s ``count`` cells with the most headroom below their layer's top,
        layer ``skip`` left out: the first of ``sorted(layers, key=(load - top, layer))``.
        O(count)."""
        return list(itertools.islice(((s, k2) for _, k2 in self.headroom[s] if k2 != skip), count))

    def rooms(self, r: int, count: int, skip: int) -> list[tuple[int, int]]:
        """Rank ``r``'s ``count`` layers (``skip`` left out) where its load is furthest
        below the top, as ``(room, layer)`` by room then layer, largest first, those with
        room > 0 only: ``sorted(((top - load, layer) ...), reverse=True)[:count]`` cut at
        the first room <= 0."""
        found: list[tuple[int, int]] = []
        for head, k2 in self.headroom[r]:
            if head >= 0 or (len(found) >= count and -head < found[count - 1][0]):
                break
            if k2 != skip:
                found.append((-head, k2))
                found.sort(reverse=True)  # equal rooms: the larger layer first
        return found[:count]


def _resort(order: list[tuple[int, int]], old: tuple[int, int], new: tuple[int, int]) -> None:
    """Replace ``old`` by ``new`` in the sorted list ``order``, keeping it sorted."""
    del order[bisect.bisect_left(order, old)]
    bisect.insort(order, new)


def _even_layers(layers: list[list[tuple[int, int]]]) -> list[list[int]]:
    """Give each rank one micro-batch of every layer, evening the ranks' sample counts.

    ``layers[k]`` holds ``dp`` pairs ``(samples, micro-batch id)``. The largest
    differencing method (Karmarkar and Karp 1982) on these tuples: the two layers whose
    counts spread most are merged, the largest of one with the smallest of the other,
    until one remains. Returns, per rank, its micro-batch ids. O(K dp log dp + K log K).
    """
    heap = [_spread(k, [(n, [b]) for n, b in layer]) for k, layer in enumerate(layers)]
    heapq.heapify(heap)
    serial = itertools.count(len(heap))
    while len(heap) > 1:
        _, _, first = heapq.heappop(heap)
        _, _, second = heapq.heappop(heap)
        merged = [(a[0] + b[0], a[1] + b[1]) for a, b in zip(first, reversed(second), strict=True)]
        heapq.heappush(heap, _spread(next(serial), merged))
    return [ids for _, ids in heap[0][2]]


def _spread(key: int, parts: list[tuple[int, list[int]]]) -> tuple[int, int, list[tuple[int, list[int]]]]:
    """A heap entry of :func:`_even_layers`: the parts' spread of counts (their largest
    minus their smallest), ``key``, and the parts by count, largest first."""
    parts = sorted(parts, key=lambda p: (-p[0], p[1]))
    return parts[-1][0] - parts[0][0], key, parts


def _deal(result: RankAnalysis, dp: int, count: int) -> Grid:
    """The step's ``dp x count`` balanced micro-batches, dealt to ranks layer by layer."""
    owner = result.group_of()
    bins = [sorted({owner[i] for i in mb}) for mb in build_plan(result, dp * count, False)]
    order = sorted(range(len(bins)),
                   key=lambda b: (sum(result.group_workloads[g] for g in bins[b]), bins[b][0]))
    layers = [[(len(bins[b]), b) for b in order[k * dp : (k + 1) * dp]] for k in range(count)]
    layer_of = {b: k for k, layer in enumerate(layers) for _, b in layer}
    # each rank holds one micro-batch of every layer: by layer, they are its cells
    return Grid(result, [[list(bins[b]) for b in sorted(ids, key=layer_of.__getitem__)]
                         for ids in _even_layers(layers)])


def _gain(grid: Grid, source: tuple[int, int], target: tuple[int, int], d: int) -> int:
    """How much shifting workload ``d`` from cell ``source`` to cell ``target`` lowers the
    step time (negative: raises it)."""
    (r, k), (s, k2) = source, target
    top, load = grid.top(k), grid.load[r][k]
    if k2 == k:
        return top - max(grid.top(k, (r, s)), load - d, grid.load[s][k] + d)
    return top - max(grid.top(k, (r,)), load - d) - max(0, grid.load[s][k2] + d - grid.top(k2))


def _best_move(grid: Grid, a: int, b: int) -> tuple[int, int, int] | None:
    """The single group of rank ``a`` that moves to rank ``b`` at the least cost:
    ``(group, layer from, layer to)``, or ``None`` when none fits."""
    moves: list[tuple[int, int, int, int]] = []  # (cost, layer from, layer to, group)
    for k, cell in enumerate(grid.cells[a]):
        if len(cell) > 1:  # a micro-batch is never left empty
            # the cheapest group to place, and the lightest one
            picks = {min(cell, key=lambda g: (grid.sizes[g], grid.workloads[g], g)),
                     min(cell, key=lambda g: (grid.workloads[g], grid.sizes[g], g))}
            moves += [(-_gain(grid, (a, k), (b, k2), grid.workloads[g]), k, k2, g)
                      for g in sorted(picks) for k2 in range(grid.count) if grid.fits(b, k2, (g,))]
    best = min(moves, default=None)
    return None if best is None else (best[3], best[1], best[2])


def _exchange(grid: Grid, a: int, b: int) -> bool:
    """Rank ``a`` gives ``t + 1`` groups of one micro-batch for ``t`` groups of one of rank
    ``b``'s (``t`` = 1, then 2), where the rule allows it: the exchange closest in
    workload is applied. False when none fits (searched among each micro-batch's
    :data:`_PAIR_GROUPS` smallest groups)."""
    for t in (1, 2):
        found = [ways for k, k2 in itertools.product(range(grid.count), repeat=2)
                 if (ways := _exchange_between(grid, (a, k), (b, k2), t)) is not None]
        if found:
            _, k, k2, gives, takes = min(found)
            for g in gives:
                grid.move(g, (a, k), (b, k2))
            for g in takes:
                grid.move(g, (b, k2), (a, k))
            return True
    return False


def _exchange_between(
    grid: Grid, giver: tuple[int, int], taker: tuple[int, int], t: int
) -> tuple[int, int, int, tuple[int, ...], tuple[int, ...]] | None:
    """The ``t + 1`` for ``t`` exchange between two cells closest in workload:
    ``(workload difference, layer, layer, given groups, taken groups)``, or ``None``."""
    (a, k), (b, k2) = giver, taker
    size, work = grid.sizes, grid.workloads

    def smallest(cell: list[int]) -> list[int]:
        return sorted(cell, key=lambda g: (size[g], g))[:_PAIR_GROUPS]

    gives = sorted((sum(size[g] for g in c), c)
                   for c in itertools.combinations(smallest(grid.cells[a][k]), t + 1))
    sums = [total for total, _ in gives]
    room_a, room_b = grid.cap - grid.tokens[a][k], grid.cap - grid.tokens[b][k2]
    found = []
    for takes in itertools.combinations(smallest(grid.cells[b][k2]), t):
        taken = sum(size[g] for g in takes)
        lo = bisect.bisect_left(sums, taken - room_a)
        found += [(abs(sum(work[g] for g in given) - sum(work[g] for g in takes)), k, k2, given, takes)
                  for _, given in gives[lo : bisect.bisect_right(sums, taken + room_b)][:8]
                  if grid.fits(a, k, takes, given) and grid.fits(b, k2, given, takes)]
    return min(found, default=None)


def _equal_sizes(grid: Grid, per_rank: int) -> bool:
    """Move groups until every rank holds ``per_rank`` of them; False when stuck."""
    counts = [sum(len(cell) for cell in row) for row in grid.cells]
    while True:
        above = sorted((r for r in range(grid.dp) if counts[r] > per_rank), key=lambda r: (-counts[r], r))
        below = sorted((r for r in range(grid.dp) if counts[r] < per_rank), key=lambda r: (counts[r], r))
        if not above:
            return True
        rooms = {b: _room(grid, b) for b in below}
        found = next(((a, b, move) for a in above for b in below
                      if _smallest(grid, a) <= rooms[b] and (move := _best_move(grid, a, b)) is not None),
                     None)
        if found is not None:
            a, b, (g, k, k2) = found
            grid.move(g, (a, k), (b, k2))
        else:
            served = next(((a, b) for a, b in itertools.product(above, below) if _exchange(grid, a, b)),
                          None)
            if served is None:
                return False
            a, b = served
        counts[a] -= 1
        counts[b] += 1


def _smallest(grid: Grid, a: int) -> float:
    """The smallest cost of a group rank ``a`` can give (its micro-batch keeps one);
    ``-inf`` for padded micro-batches (their cost is not a sum: always tried)."""
    if grid.padded is not None:
        return -math.inf
    return min((grid.sizes[g] for cell in grid.cells[a] if len(cell) > 1 for g in cell), default=math.inf)


def _room(grid: Grid, b: int) -> int:
    """The most cost any micro-batch of rank ``b`` can still take (-1: none can)."""
    return max((grid.cap - grid.tokens[b][k] for k in range(grid.count)
                if grid.limit is None
                or sum(grid.rows[g] for g in grid.cells[b][k]) + grid.fewest_rows <= grid.limit),
               default=-1)


def _targets(grid: Grid, r: int, k: int) -> list[tuple[int, int]]:
    """Cells that may take load off cell ``(r, k)``: the same rank's micro-batches with
    the most headroom below their layer's top, the lightest of layer ``k``, and the
    roomiest micro-batches of the ranks with the least workload in all."""
    lightest = sorted(range(grid.dp), key=lambda s: (grid.load[s][k], s))[:_LIGHTEST]
    poorest = sorted(range(grid.dp), key=lambda s: (grid.rank_load[s], s))[:_LIGHTEST]
    return list(dict.fromkeys([*grid.roomiest(r, _HEADROOM_LAYERS, k), *[(s, k) for s in lightest if s != r],
                               *[cell for s in poorest if s != r for cell in grid.roomiest(s, 2, k)]]))


def _by_workload(grid: Grid, r: int, k: int) -> tuple[list[int], list[int]]:
    """Cell ``(r, k)``'s groups by workload (then index), and their workloads: where a
    group of another cell finds the one to swap with (:func:`bisect.bisect_left`)."""
    others = sorted(grid.cells[r][k], key=lambda g: (grid.workloads[g], g))
    return others, [grid.workloads[g] for g in others]


def _lower_heaviest(grid: Grid, k: int, least: int = 0) -> tuple[int, int, int, int, int] | None:
    """The best exchange that lowers layer ``k``'s heaviest cell ``(r, k)`` by more than
    ``least``: ``(gain, group, rank, layer, other group or -1)``: the group moves to the
    same rank's micro-batch in that layer (-1), or swaps with the other group there; or
    ``None``."""
    r = -grid.tops[k][0][1]
    cell, load = grid.cells[r][k], grid.load[r][k]
    best: tuple[int, int, int, int, int] | None = None
    for s, k2 in _targets(grid, r, k):
        others, loads = _by_workload(grid, s, k2)
        # the shift that would level best: half the gap within a layer, else the headroom
        aim = (load - grid.load[s][k]) // 2 if k2 == k else min(
            load - grid.top(k, (r,)), grid.top(k2) - grid.load[s][k2])
        for g in cell:
            w = grid.workloads[g]
            # (shift, other group): the move (to the same rank) is checked with the swaps below
            options: list[tuple[int, int]] = [(w, -1)] if s == r and len(cell) > 1 else []
            at = bisect.bisect_left(loads, w - aim)
            options += [(w - loads[j], others[j]) for j in (at - 1, at)
                        if 0 <= j < len(others) and loads[j] < w]
            for d, other in options:
                gain = _gain(grid, (r, k), (s, k2), d)
                if gain <= least or (best is not None
                                     and (gain, -g, -other) <= (best[0], -best[1], -best[4])):
                    continue
                takes = () if other < 0 else (other,)
                if grid.fits(s, k2, (g,), takes) and (other < 0 or grid.fits(r, k, takes, (g,))):
                    best = (gain, g, s, k2, other)
    return best


def _lock_step_search(grid: Grid, rounds: int) -> None:
    """Lower the heaviest cell of the layer furthest above its mean, while one can be
    lowered by more than :data:`_TOLERANCE` of the floor and the step is further above
    its floor than that; at most ``rounds`` exchanges. Sample counts and the rule hold
    throughout."""
    # moves keep the total workload: sum(grid.sums) is the same in every round
    total = sum(grid.sums)
    enough = total // _TOLERANCE  # in gap() units: dp x (floor / _TOLERANCE)
    least = total // (grid.dp * _TOLERANCE)  # a smaller gain is too small to matter
    # the stuck layers: the first of grid.by_excess (the grid is unchanged while they
    # accumulate, each the layer furthest above its mean among those left; a move frees all)
    stuck = 0
    for _ in range(rounds):
        if stuck == grid.count or grid.gap() <= enough:
            return
        k = grid.by_excess[stuck][1]
        found = _lower_heaviest(grid, k, least)
        if found is not None:
            _, g, other_rank, layer, other = found
            r = -grid.tops[k][0][1]
            grid.move(g, (r, k), (other_rank, layer))
            if other >= 0:
                grid.move(other, (other_rank, layer), (r, k))
        # a move (or the layer lowered) frees every stuck layer
        stuck = 0 if found is not None or _lower_layer(grid, k, least) else stuck + 1


def _shed(grid: Grid, r: int, k: int) -> list[tuple[int, int, int, int]]:
    """Ways cell ``(r, k)`` can pass workload to the same rank's micro-batch of another
    layer without raising that layer's top: ``(load after, group, layer, other group or
    -1)``, lowest load after first; among the :data:`_HEADROOM_LAYERS` layers where the
    rank is furthest below the top (at most two ways per group and layer)."""
    cell, load = grid.cells[r][k], grid.load[r][k]
    found: list[tuple[int, int, int, int]] = []
    for room, k2 in grid.rooms(r, _HEADROOM_LAYERS, k):
        others, loads = _by_workload(grid, r, k2)
        for g in cell:
            w = grid.workloads[g]
            if w <= room and len(cell) > 1 and grid.fits(r, k2, (g,)):
                found.append((load - w, g, k2, -1))
            at = bisect.bisect_left(loads, w - room)  # the largest shift that fits the room
            if at < len(others) and loads[at] < w and grid.fits(r, k2, (g,), (others[at],)) \
                    and grid.fits(r, k, (others[at],), (g,)):
                found.append((load - w + loads[at], g, k2, others[at]))
    return sorted(found)


def _lower_layer(grid: Grid, k: int, least: int) -> bool:
    """Lower the top of layer ``k`` when several ranks share it: every cell above the
    level the others can reach passes workload to its own rank's micro-batches of other
    layers, none of which rises above its layer's top. Applied (True) when the top falls
    by more than ``least``."""
    level, ways = 0, {}
    # heaviest first: a rank whose load is at or below the level reached cannot raise it
    for r in sorted(range(grid.dp), key=lambda q: (-grid.load[q][k], q)):
        if grid.load[r][k] <= level:
            break
        ways[r] = _shed(grid, r, k)
        level = max(level, min([grid.load[r][k]] + [w[0] for w in ways[r]]))
        if grid.top(k) - level <= least:
            return False
    for r, found in ways.items():
        if grid.load[r][k] > level:
            # the way that passes the least workload and still reaches the level
            _, g, k2, other = max(w for w in found if w[0] <= level)
            grid.move(g, (r, k), (r, k2))
            if other >= 0:
                grid.move(other, (r, k2), (r, k))
    return True


def _rank_first(result: RankAnalysis, dp: int, count: int, memo: dict[Any, Any]) -> Grid | None:
    """The other way round, for steps too tight to even out after the fact: equal-size
    parts of near-equal cost first (Karmarkar-Karp), then each part planned alone with
    ``count`` micro-batches, its micro-batches lined up lightest first. ``None`` where a
    part needs more (or the rule is padded: a part is planned on its groups' summed costs).
    ``memo`` keeps the parts and their analyses for the next count tried."""
    rule = result.rule
    if rule is not None and rule.is_padded:
        return None
    # groups per micro-batch at most under the sample limit (its rows over the groups' rows:
    # all of one size where ranks get equal parts)
    limit = None if rule is None or rule.limit is None or not rule.rows else rule.limit // max(rule.rows)
    loads = result.group_workloads
    if "parts" not in memo:
        # even the parts' workloads (the cost comes next, per count)
        memo["parts"] = _level_parts(karmarkar_karp(loads, dp, equal_size=True), loads,
                                     sum(loads) * (_TOLERANCE + 1) // (_TOLERANCE * dp))
    parts = _level_parts([list(p) for p in memo["parts"]], result.group_sizes, count * result.max_token_len)
    analyses = []
    for part in map(sorted, parts):
        key = tuple(part)
        if key not in memo:
            # each group is one item of its summed cost: the same rule, on the usable cap
            # at least ``count``: the search stops once a packing fits in that many
            memo[key] = analyse([result.group_sizes[g] for g in part], result.max_token_len,
                                PlanOptions(max_samples_per_micro_batch=limit,
                                            min_num_micro_batch=min(count, len(part))),
                                workloads=[loads[g] for g in part])
        alone = memo[key]
        if alone.error is not None or alone.min_count > count:
            return None  # before any part is cut: the next count reuses these analyses
        analyses.append((part, alone))
    return Grid(result, [
        sorted(([part[i] for i in mb] for mb in build_plan(alone, count, False)),
               key=lambda b: (sum(loads[g] for g in b), b[0]))
        for part, alone in analyses
    ])


def _level_parts(parts: list[list[int]], sizes: list[int], most: int) -> list[list[int]]:
    """Swap groups between the largest and the smallest part by ``sizes`` (one for one,
    the pair closest to half their difference) until no part is above ``most``, or no
    swap narrows them; at most ``4 n`` swaps of O(m log m)."""
    sums = [sum(sizes[g] for g in part) for part in parts]
    for _ in range(4 * len(sizes)):
        high = max(range(len(parts)), key=lambda p: (sums[p], -p))
        low = min(range(len(parts)), key=lambda p: (sums[p], p))
        gap = sums[high] - sums[low]
        if sums[high] <= most or gap <= 1:
            break
        cheap = sorted(parts[low], key=lambda g: (sizes[g], g))
        cheap_sizes = [sizes[g] for g in cheap]
        swaps: list[tuple[int, int, int]] = []  # (distance from half the gap, x, y)
        for x in parts[high]:
            at = bisect.bisect_left(cheap_sizes, sizes[x] - gap // 2)
            swaps += [(abs(2 * (sizes[x] - cheap_sizes[j]) - gap), x, cheap[j]) for j in (at - 1, at)
                      if 0 <= j < len(cheap) and 0 < sizes[x] - cheap_sizes[j] < gap]
        if not swaps:
            break
        _, x, y = min(swaps)
        parts[high][parts[high].index(x)], parts[low][parts[low].index(y)] = y, x
        sums[high] -= sizes[x] - sizes[y]
        sums[low] += sizes[x] - sizes[y]
    return parts


def plan_at(
    result: RankAnalysis, dp: int, count: int, per_rank: int | None, memo: dict[Any, Any],
    whole: Callable[[], RankAnalysis],
) -> Grid | None:
    """The lock-step plan with ``count`` micro-batches per rank, or ``None`` when the
    ranks' sample counts cannot be made equal (``per_rank`` groups each) at this count.

    ``result`` is the whole step's analysis (its groups, costs, workloads and rule);
    ``whole`` gives it with its count search done, which only cutting the whole step's
    micro-batches first needs; ``memo`` (one dict per step) carries work from one count to
    the next."""
    grid = None if per_rank is None else _rank_first(result, dp, count, memo)
    if grid is None:  # the whole step's micro-batches first
        full = whole()
        if dp * count < full.min_count:
            return None  # the whole step's packings need more micro-batches
        grid = _deal(full, dp, count)
        if per_rank is not None and not _equal_sizes(grid, per_rank):
            return None
    _lock_step_search(grid, _SEARCH_ROUNDS * result.n_groups + _SEARCH_BASE)
    return grid


def layer_order(grid: Grid, balance: bool) -> list[int]:
    """Layers by lock-step workload, heaviest first; with ``balance`` verl's order (the
    even positions reversed, then the odd ones: lightest at both ends)."""
    by_load = sorted(range(grid.count), key=lambda k: (grid.tops[k][0][0], -k), reverse=True)
    return by_load[::2][::-1] + by_load[1::2] if balance else by_load
