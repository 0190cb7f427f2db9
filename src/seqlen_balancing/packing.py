"""Cap-respecting bin packing on plain integer lists: lower bounds, best-fit decreasing,
bin-count reduction by exchange local search, and splitting up to a target count.

A *bin* here is a list of item indices whose sizes (tokens) sum to at most ``cap``. Every
function in this module returns bins that respect the cap; none of them needs torch.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from itertools import combinations

__all__ = [
    "best_fit_decreasing",
    "l1_lower_bound",
    "l2_lower_bound",
    "reduce_bins",
    "split_to_count",
]


def l1_lower_bound(sizes: Sequence[int], cap: int) -> int:
    """Continuous lower bound ``ceil(sum(sizes) / cap)`` on the number of bins.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        The L1 bound (0 for an empty list or all-zero sizes).

    Complexity: O(n).

    Example:
        >>> l1_lower_bound([6, 6, 6], 10)
        2
    """
    return -(sum(sizes) // -cap)


def l2_lower_bound(sizes: Sequence[int], cap: int) -> int:
    """Martello-Toth L2 lower bound on the number of bins of capacity ``cap``.

    For every threshold ``a`` in ``{0} ∪ {s : s <= cap/2}``: items larger than ``cap - a``
    (J1) and the other items larger than ``cap/2`` (J2) each need a bin of their own, and
    the items in ``[a, cap/2]`` (J3) need ``ceil((sum(J3) - free space in J2 bins) / cap)``
    more. L2 is the largest such count; it dominates ``ceil(sum / cap)``.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        The L2 bound (0 for an empty list or all-zero sizes).

    Raises:
        ValueError: an item is larger than ``cap`` or negative.

    Complexity: O(n log n) (one sort, then a bisect per distinct small size).

    References:
        S. Martello and P. Toth, "Lower bounds and reduction procedures for the bin packing
        problem", Discrete Applied Mathematics 28 (1990); Knapsack Problems, ch. 8 (1990).

    Example:
        >>> l2_lower_bound([6, 6, 6], 10)   # three items above cap/2: three bins
        3
    """
    ordered = sorted(sizes)
    if not ordered:
        return 0
    if ordered[0] < 0 or ordered[-1] > cap:
        raise ValueError(f"item sizes must lie in 0..{cap}, got {ordered[0]}..{ordered[-1]}")
    prefix = [0]
    for size in ordered:
        prefix.append(prefix[-1] + size)
    n = len(ordered)
    half = bisect_right(ordered, cap // 2)  # items [0, half) have 2*s <= cap
    best = l1_lower_bound(ordered, cap)
    thresholds = [0, *sorted(set(ordered[:half]))]
    for alpha in thresholds:
        j1_start = bisect_right(ordered, cap - alpha)  # items > cap - alpha
        j3_start = bisect_left(ordered, alpha)
        n_j2 = j1_start - half
        free_in_j2 = n_j2 * cap - (prefix[j1_start] - prefix[half])
        small = prefix[half] - prefix[j3_start]
        extra = max(0, -((free_in_j2 - small) // cap))
        best = max(best, (n - half) + extra)
    return best


def best_fit_decreasing(sizes: Sequence[int], cap: int) -> list[list[int]]:
    """Best-fit decreasing: each item, largest first, into the fullest bin it fits.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        Bins (lists of item indices, largest item first), each summing to at most ``cap``,
        together an exact cover of ``range(n)``. At most ``11/9 OPT + 6/9`` bins.

    Raises:
        ValueError: an item is larger than ``cap``.

    Complexity: O(n log n) comparisons (bisect on a sorted list of bin residuals), plus
    list insertions that move O(bins) pointers each.

    References:
        D. S. Johnson, "Fast algorithms for bin packing", JCSS 8 (1974);
        G. Dosa, "The tight bound of first fit decreasing bin-packing algorithm is
        FFD(I) <= 11/9 OPT(I) + 6/9", ESCAPE 2007.

    Example:
        >>> best_fit_decreasing([5, 7, 3, 5], 10)
        [[1, 2], [0, 3]]
    """
    residuals: list[int] = []  # ascending
    owners: list[int] = []  # bin of each residual, parallel to ``residuals``
    bins: list[list[int]] = []
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        size = sizes[i]
        if size > cap:
            raise ValueError(f"item {i} has size {size}, larger than the capacity {cap}")
        pos = bisect_left(residuals, size)
        if pos == len(residuals):
            owner = len(bins)
            bins.append([i])
            left = cap - size
        else:
            left = residuals.pop(pos) - size
            owner = owners.pop(pos)
            bins[owner].append(i)
        pos = bisect_left(residuals, left)
        residuals.insert(pos, left)
        owners.insert(pos, owner)
    return bins


def _best_exchange(
    bin_items: list[int], room: int, sizes: Sequence[int], free_sums: list[tuple[int, tuple[int, ...]]]
) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    """Best (gain, out, in) exchange of <= 2 bin items for <= 2 free items that fits ``room``."""
    keys = [s for s, _ in free_sums]
    best: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
    outs: list[tuple[int, ...]] = [()]
    outs.extend((i,) for i in bin_items)
    outs.extend(combinations(bin_items, 2))
    for out in outs:
        out_size = sum(sizes[i] for i in out)
        pos = bisect_right(keys, out_size + room) - 1
        if pos < 0:
            continue
        gain = keys[pos] - out_size
        if gain > 0 and (best is None or gain > best[0]):
            best = (gain, out, free_sums[pos][1])
            if gain == room:
                break
    return best


def _free_sums(free: list[int], sizes: Sequence[int]) -> list[tuple[int, tuple[int, ...]]]:
    sums: list[tuple[int, tuple[int, ...]]] = [(sizes[i], (i,)) for i in free]
    sums.extend((sizes[a] + sizes[b], (a, b)) for a, b in combinations(free, 2))
    sums.sort()
    return sums


def _drain_free(
    bins: list[list[int]], loads: list[int], free: list[int], sizes: Sequence[int], cap: int,
    max_passes: int,
) -> list[int]:
    """Move free items into ``bins`` by exchanges that fill bins more; returns what stays free.

    Every accepted exchange raises one bin's load and lowers the free weight, so the loop
    ends; ``max_passes`` bounds it anyway.
    """
    for _ in range(max_passes):
        if not free:
            break
        improved = False
        free_sums = _free_sums(free, sizes)
        for b in sorted(range(len(bins)), key=lambda b: (loads[b], b)):
            room = cap - loads[b]
            move = _best_exchange(bins[b], room, sizes, free_sums)
            if move is None:
                continue
            gain, out, into = move
            for i in out:
                bins[b].remove(i)
            bins[b].extend(into)
            loads[b] += gain
            free = [i for i in free if i not in into]
            free.extend(out)
            improved = True
            if not free:
                break
            free_sums = _free_sums(free, sizes)
        if not improved:
            break
    return free


def reduce_bins(
    sizes: Sequence[int], cap: int, bins: list[list[int]], target: int, max_rounds: int = 64
) -> list[list[int]]:
    """Try to repack ``bins`` into fewer bins, down to ``target``, by exchange local search.

    Each round empties the least-loaded bin and drains its items into the others with
    exchanges of up to two packed items for up to two free ones that fill a bin further
    (free items get smaller until they fit the gaps). A round that cannot place every free
    item is undone and the next-lightest bin is tried, up to ``max_rounds`` rounds in all.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens.
        bins: a packing that respects ``cap`` (not modified).
        target: stop once this many bins remain (e.g. a lower bound).
        max_rounds: bound on the number of emptied-bin attempts.

    Returns:
        A packing with at most ``len(bins)`` bins, each within ``cap``, exact cover of the
        same items.

    Complexity: O(max_rounds * passes * bins * m^2 * log f) for ``m`` items per bin and
    ``f`` free items; in practice a few milliseconds per 1,000 items.

    References:
        J. Levine and F. Ducatelle, "Ant colony optimization and local search for bin
        packing and cutting stock problems", JORS 55 (2004) (the exchange local search).
    """
    current = [list(b) for b in bins]
    rounds = 0
    skip = 0
    while len(current) > target and rounds < max_rounds and skip < len(current):
        rounds += 1
        loads = [sum(sizes[i] for i in b) for b in current]
        by_load = sorted(range(len(current)), key=lambda b: (loads[b], b))
        victim = by_load[skip]
        trial = [list(b) for j, b in enumerate(current) if j != victim]
        trial_loads = [loads[j] for j in range(len(current)) if j != victim]
        left = _drain_free(trial, trial_loads, list(current[victim]), sizes, cap, max_passes=16)
        if left:
            skip += 1
            continue
        current = [b for b in trial if b]
        skip = 0
    return current


def split_to_count(sizes: Sequence[int], bins: list[list[int]], count: int) -> list[list[int]]:
    """Split bins until there are exactly ``count`` (splitting never breaks a cap).

    The heaviest bin with at least two items is halved (items alternately by size) each
    step, so the extra bins go where they relieve the most load.

    Args:
        sizes: item sizes in tokens.
        bins: a packing (not modified).
        count: wanted number of bins, ``len(bins) <= count <= number of items``.

    Returns:
        ``count`` non-empty bins, an exact cover of the same items.

    Raises:
        ValueError: ``count`` is below ``len(bins)`` or above the number of items.

    Complexity: O((count - len(bins)) * (bins + m log m)).
    """
    result = [list(b) for b in bins]
    n_items = sum(len(b) for b in result)
    if not len(result) <= count <= n_items:
        raise ValueError(f"cannot split {len(result)} bins of {n_items} items into {count}")
    while len(result) < count:
        loads = [sum(sizes[i] for i in b) if len(b) > 1 else -1 for b in result]
        heaviest = max(range(len(result)), key=lambda b: (loads[b], -b))
        ordered = sorted(result[heaviest], key=lambda i: (-sizes[i], i))
        first: list[int] = []
        second: list[int] = []
        load_first = load_second = 0
        for position, i in enumerate(ordered):
            # The two largest items seed the halves so both stay non-empty.
            if position == 0 or (position > 1 and load_first <= load_second):
                first.append(i)
                load_first += sizes[i]
            else:
                second.append(i)
                load_second += sizes[i]
        result[heaviest] = first
        result.append(second)
    return result
