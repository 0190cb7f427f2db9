"""Balancing micro-batches at a fixed count under the cap, and their order (no torch).

Pure functions on lists of group sizes (tokens) and workloads: the capacity-aware
longest-processing-time packing, the exchange that narrows the workload gap of a packing
made for the count, the gap itself, verl 0.9.1's order of micro-batches, and the relative
spread the reports print. :mod:`seqlen_balancing.planner` chooses among them.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

__all__ = ["order_micro_batches", "spread"]


def _rebalance(
    bins: list[list[int]], sizes: list[int], workloads: list[int], cap: int
) -> list[list[int]]:
    """Move groups from the heaviest micro-batch into the lightest while it narrows the gap.

    For a packing made for the count, not for balance (every bin nearly full, the last one
    light): each round moves the group of the heaviest bin whose workload is closest to
    half the gap, if the lightest bin has the tokens for it (the next heaviest bin is tried
    when one cannot give). At most ``2 * count`` rounds, each O(count) at worst (the bins
    are kept sorted by workload, not sorted again each round); the cap holds throughout.
    """
    loads = [sum(workloads[g] for g in b) for b in bins]
    tokens = [sum(sizes[g] for g in b) for b in bins]
    # (-load, bin) ascending: heaviest first, ties by index; kept sorted as loads change, so
    # a round costs O(count) memory moves instead of a sort (large counts: a whole step)
    keys = sorted((-load, b) for b, load in enumerate(loads))
    for _ in range(2 * len(bins)):
        if not keys:
            break
        # the lightest bin, the smallest index among equals (what min() over the ids gives)
        light = keys[bisect.bisect_left(keys, (keys[-1][0], -1))][1]
        room = cap - tokens[light]
        move = None
        # The heaviest bin that can give: groups too big are skipped. A bin of one group
        # never gives: its group's workload is the gap plus the lightest load, not below it.
        for _, heavy in keys:
            gap = loads[heavy] - loads[light]
            if gap <= 0:
                break
            movable = [g for g in bins[heavy] if sizes[g] <= room and 0 < workloads[g] < gap]
            if movable:
                move = heavy, min(movable, key=lambda g: (abs(2 * workloads[g] - gap), g))
                break
        if move is None:
            break
        heavy, g = move
        bins[heavy].remove(g)
        bins[light].append(g)
        for b, sign in ((heavy, -1), (light, 1)):
            del keys[bisect.bisect_left(keys, (-loads[b], b))]
            loads[b] += sign * workloads[g]
            tokens[b] += sign * sizes[g]
            bisect.insort(keys, (-loads[b], b))
    return bins


def _lpt_with_cap(
    sizes: list[int], workloads: list[int], cap: int, count: int
) -> list[list[int]] | None:
    """Heaviest group first into the lightest micro-batch (by workload) that has room.

    Gives up (``None``) after skipping ``8 n + 4096`` full micro-batches in all: on tight
    counts it would fail anyway, and this bounds its cost to O(n log count).
    """
    bins: list[list[int]] = [[] for _ in range(count)]
    room = [cap] * count
    heap = [(0, 0, b) for b in range(count)]  # (workload, groups, bin): empty bins first
    budget = 8 * len(sizes) + 4096  # full bins skipped over the whole run
    for g in sorted(range(len(sizes)), key=lambda g: (-workloads[g], -sizes[g], g)):
        skipped = []
        while heap and room[heap[0][2]] < sizes[g]:
            skipped.append(heapq.heappop(heap))
            budget -= 1
            if budget < 0:
                return None
        if not heap:
            return None
        load, members, b = heapq.heappop(heap)
        bins[b].append(g)
        room[b] -= sizes[g]
        heapq.heappush(heap, (load + workloads[g], members + 1, b))
        for entry in skipped:
            heapq.heappush(heap, entry)
    return bins


def _workload_gap(bins: list[list[int]], workloads: list[int]) -> int:
    """Heaviest minus lightest micro-batch workload (the spread at a fixed count)."""
    loads = [sum(workloads[g] for g in b) for b in bins]
    return max(loads) - min(loads)


def order_micro_batches(
    micro_batches: list[list[int]],
    workloads: Sequence[int],
    use_dynamic_bsz_balance: bool,
    force_group_size: int = 1,
) -> list[list[int]]:
    """Order micro-batches (lists of sample indices) exactly as verl 0.9.1 does.

    With ``use_dynamic_bsz_balance``: sort by ``(workload, first sample index)``
    descending, then take the even positions reversed followed by the odd positions, so
    the lightest micro-batches sit at both ends and the heaviest in the middle (short
    pipeline-parallel warm-up and cool-down). For the same micro-batches the result is
    verl's list, for any count, even or odd, ties included. Without it: by the smallest
    sample index (verl keeps Karmarkar-Karp's order there; docs/differences.md).

    Args:
        micro_batches: lists of sample indices, each sorted ascending.
        workloads: with ``force_group_size == 1``, the workload of each sample; otherwise
            that of each group of ``force_group_size`` consecutive samples, and a
            micro-batch's workload is that of the groups starting at its positions
            ``0, force_group_size, 2 * force_group_size, ...`` (verl's rule).
        use_dynamic_bsz_balance: verl's balanced order, or the smallest-index order.
        force_group_size: samples per forced group.

    Returns:
        The same lists, reordered.

    Complexity: O(n + m log m) for ``m`` micro-batches.

    References:
        verl 0.9.1 ``rearrange_micro_batches`` (its ordering step).

    Example:
        >>> order_micro_batches([[0], [1], [2], [3]], [60, 50, 40, 30], True)
        [[2], [0], [1], [3]]
        >>> order_micro_batches([[0], [1], [2], [3]], [5, 5, 5, 5], True)  # ties: by index
        [[1], [3], [2], [0]]
    """
    if not use_dynamic_bsz_balance:
        return sorted(micro_batches, key=lambda mb: mb[0] if mb else -1)
    group = force_group_size

    def key(mb: list[int]) -> tuple[int, int]:
        if group == 1:
            load = sum(workloads[i] for i in mb)
        else:
            load = sum(workloads[i // group] for i in mb[::group])
        return load, mb[0] if mb else 0

    by_load = sorted(micro_batches, key=key, reverse=True)
    return by_load[::2][::-1] + by_load[1::2]


def spread(values: Sequence[int]) -> float:
    """Relative spread ``(max - min) / mean`` of ``values`` (0.0 for an empty or zero list).

    Example:
        >>> spread([90, 100, 110])
        0.2
    """
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return 0.0 if mean == 0 else (max(values) - min(values)) / mean
