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
    state = Loads.of(rule, bins)
    least = min(rule.sizes, default=0)
    order = _Sorted(loads, bins, rule.sizes, workloads, rule.cap + 1)
    for _ in range(2 * len(bins)):
        light = order.lightest()
        move = _move(rule, state, bins, order, loads, workloads, light, least)
        if move is None:
            break
        heavy, g = move
        was = ((heavy, loads[heavy]), (light, loads[light]))
        bins[heavy].remove(g)
        bins[light].append(g)
        state.remove(heavy, g, bins[heavy])
        state.add(light, g)
        loads[heavy] -= workloads[g]
        loads[light] += workloads[g]
        for b, load in was:
            order.update(b, load, loads[b])
    return bins


def _move(
    rule: Rule, state: Loads, bins: list[list[int]], order: _Sorted, loads: list[int],
    workloads: Sequence[int], light: int, least: int,
) -> tuple[int, int] | None:
    """:func:`rebalance`'s next move into ``light``: ``(heavy bin, item)``, or ``None``.
    Plain sums bound the givers by the light bin's room (none when below the ``least``
    cost of an item); other rules ask ``state``."""
    room = rule.cap - state.cost[light] if rule.plain else math.inf
    if room < least:
        return None  # no item fits the room: no bin can give
    for heavy in order.givers(room, loads[light]):  # heaviest first, each heavier than light
        gap = loads[heavy] - loads[light]
        movable = [g for g in bins[heavy] if 0 < workloads[g] < gap and state.fits(light, g)]
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
            self.smallest += [self._least(b) for _, b in grown]

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
