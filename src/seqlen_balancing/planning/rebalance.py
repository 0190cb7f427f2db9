"""Narrowing the workload gap of a packing made for the count: the rebalance (no torch).

:func:`rebalance` moves items from the heaviest micro-batch into the lightest, one per
round. Each round asks two things of the bins: the lightest one, and, heaviest first, the
ones that may give it an item: whose smallest item fits the lightest bin's room and whose
lightest item weighs less than their gap to it. :class:`_Sorted` answers both from a list
of the bins sorted by load, with each bin's smallest item and its load less its lightest
item beside it, so the bins that cannot give are passed over at C speed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from itertools import compress, islice

from seqlen_balancing.planning.rule import Loads, Rule

__all__ = ["rebalance"]

def rebalance(rule: Rule, bins: list[list[int]], workloads: Sequence[int]) -> list[list[int]]:
    """Move items from the heaviest micro-batch (by workload) into the lightest while it
    narrows their gap and the lightest still fits ``rule``.

    For a packing made for the count, not for balance (every bin nearly full, the last one
    light): each round takes the lightest bin (the smallest index among equals) and moves,
    from the heaviest bin that can give (ties by index), the item whose workload is
    closest to half their gap (ties by index) among those the light bin can take under the
    rule with a workload in ``(0, gap)``. A bin of one item never gives (its workload is
    the gap plus the lightest load, not below it). At
    most ``2 * count`` rounds; a round that finds no move ends it. The rule holds
    throughout and no bin is emptied. A bin whose lightest item weighs at least its gap
    to the light bin, or (plain sums) whose smallest item is above the light bin's room,
    cannot give and is passed over without a look.

    Args:
        rule: the :class:`~seqlen_balancing.planning.rule.Rule` the bins fit.
        bins: micro-batches (lists of items), changed in place.
        workloads: per item.

    Returns:
        ``bins``.

    Complexity: O(n + count log count) to start; per round O(count) C-level steps (the
    list's moves and the pass over the bins that cannot give), plus the items of the
    bins that may give (padded: the O(m) width of a bin after a move).
    """
    loads = [sum(map(workloads.__getitem__, b)) for b in bins]
    fit = _Fit(rule, bins)
    order = _Sorted(loads, bins, rule.sizes, workloads, rule.cap + 1)
    for _ in range(2 * len(bins)):
        light = order.lightest()
        move = _move(fit, bins, order, loads, workloads, light)
        if move is None:
            break
        heavy, g = move
        was = ((heavy, loads[heavy]), (light, loads[light]))
        bins[heavy].remove(g)
        bins[light].append(g)
        fit.moved(heavy, light, g)
        loads[heavy] -= workloads[g]
        loads[light] += workloads[g]
        for b, load in was:
            order.update(b, load, loads[b])
    return bins


class _Fit:
    """Whether an item fits the light bin: plain sums, its cost against the bin's room
    (each bin's cost worked out when first asked: a few moves fill the light bin, most
    bins are never asked); other rules, their :class:`~seqlen_balancing.planning.rule.Loads`."""

    def __init__(self, rule: Rule, bins: list[list[int]]) -> None:
        self.rule, self.bins, self.plain = rule, bins, rule.plain
        self.state = None if rule.plain else Loads.of(rule, bins)
        self.costs: dict[int, int] = {}
        self.least = min(rule.sizes, default=0)

    def room(self, b: int) -> int | float:
        """Plain sums: the cap less bin ``b``'s cost; other rules: no bound (``inf``)."""
        if self.state is not None:
            return math.inf
        cost = self.costs.get(b)
        if cost is None:
            cost = self.costs[b] = sum(map(self.rule.sizes.__getitem__, self.bins[b]))
        return self.rule.cap - cost

    def fits(self, b: int, g: int) -> bool:
        """Other rules than plain sums: item ``g`` fits bin ``b``."""
        return self.state is not None and self.state.fits(b, g)

    def moved(self, heavy: int, light: int, g: int) -> None:
        """Item ``g`` went from ``heavy`` to ``light`` (the bins already changed)."""
        if self.state is not None:
            self.state.remove(heavy, g, self.bins[heavy])
            self.state.add(light, g)
            return
        size = self.rule.sizes[g]
        for b, delta in ((heavy, -size), (light, size)):
            if b in self.costs:
                self.costs[b] += delta


def _move(
    fit: _Fit, bins: list[list[int]], order: _Sorted, loads: list[int],
    workloads: Sequence[int], light: int,
) -> tuple[int, int] | None:
    """:func:`rebalance`'s next move into ``light``: ``(heavy bin, item)``, or ``None``."""
    room, sizes = fit.room(light), fit.rule.sizes
    if room < fit.least:
        return None  # no item fits the room: no bin can give
    for heavy in order.givers(room, loads[light]):  # heaviest first, each heavier than light
        gap = loads[heavy] - loads[light]
        if fit.plain:
            movable = [g for g in bins[heavy] if sizes[g] <= room and 0 < workloads[g] < gap]
        else:
            movable = [g for g in bins[heavy] if 0 < workloads[g] < gap and fit.fits(light, g)]
        if movable:
            return heavy, min(movable, key=lambda g: (abs(2 * workloads[g] - gap), g))
    return None


class _Sorted:
    """The bins by ``(-load, bin)`` in a sorted list and beside it each bin's smallest
    item's cost, worked out for a prefix of the list only, grown as the passes need it
    (most rounds stop within the heaviest bins): O(count) C-level moves per update, a
    C-level pass over the bins whose smallest item does not fit; of the others, each
    bin's load less its lightest item's workload (its ``reach``), kept until it moves."""

    def __init__(
        self, loads: list[int], bins: list[list[int]], sizes: Sequence[int],
        workloads: Sequence[int], empty: int,
    ) -> None:
        self.keys = sorted((-load, b) for b, load in enumerate(loads))
        self.loads, self.bins, self.empty = loads, bins, empty  # (an empty bin's smallest
        self.cost, self.work = sizes.__getitem__, workloads.__getitem__  # item: above the cap)
        self.smallest: list[int] = []  # of keys[:len(smallest)]
        self.reaches: dict[int, int] = {}

    def _least(self, b: int) -> int:
        return min(map(self.cost, self.bins[b]), default=self.empty)

    def lightest(self) -> int:
        """The lightest bin, the smallest index among equals."""
        keys = self.keys
        return keys[bisect.bisect_left(keys, (keys[-1][0], -1))][1]

    def givers(self, room: int | float, floor: int) -> Iterator[int]:
        """Heaviest first (ties by index), the bins that may give an item to a bin of
        load ``floor`` and room ``room``: their smallest item fits the room and their
        lightest item weighs less than their gap (their reach is above ``floor``). Every
        bin that can give is among them; none no heavier than ``floor`` is."""
        keys, start, reaches = self.keys, 0, self.reaches
        while True:
            known = len(self.smallest)
            fits = map(room.__ge__, islice(self.smallest, start, known))
            for _, b in compress(islice(keys, start, known), fits):
                reach = reaches.get(b)
                if reach is None:
                    reach = reaches[b] = self.loads[b] - min(map(self.work, self.bins[b]), default=0)
                if reach > floor:
                    yield b
            if known == len(keys):
                return
            start = known
            grown = keys[known : max(1024, 2 * known)]
            self.smallest += [min(map(self.cost, self.bins[b]), default=self.empty) for _, b in grown]

    def update(self, b: int, load: int, new_load: int) -> None:
        """Bin ``b`` went from ``load`` to ``new_load`` (its items already changed)."""
        keys, known = self.keys, len(self.smallest)
        self.reaches.pop(b, None)
        at = bisect.bisect_left(keys, (-load, b))
        del keys[at]
        if at < known:
            del self.smallest[at]
            known -= 1
        at = bisect.bisect_left(keys, (-new_load, b))
        keys.insert(at, (-new_load, b))
        if at <= known:
            self.smallest.insert(at, self._least(b))
