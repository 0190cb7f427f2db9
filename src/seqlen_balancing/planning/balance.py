"""Balancing micro-batches at a fixed count under the one rule, and their order (no torch).

Pure functions on items, their workloads and a :class:`~seqlen_balancing.planning.rule.Rule`: the
capacity-aware longest-processing-time packing, the exchange that narrows the workload gap
of a packing made for the count, the sorted slices of padded rows, the gap itself, the
choice among them (:func:`balanced`), verl 0.9.1's order of micro-batches, and the relative
spread the reports print. Each algorithm exists once and takes the rule.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

from seqlen_balancing.native import Twinned
from seqlen_balancing.planning.packing import split
from seqlen_balancing.planning.rebalance import rebalance
from seqlen_balancing.planning.rule import Loads, Rule, falls, sorted_cut, widest_first

__all__ = [
    "balanced",
    "heaviest_first",
    "lpt",
    "order_micro_batches",
    "rebalance",
    "sorted_slices",
    "spread",
    "workload_gap",
]


def lpt(rule: Rule, workloads: Sequence[int], count: int) -> list[list[int]] | None:
    """Heaviest item first into the lightest micro-batch (by workload) that it fits under
    ``rule`` (longest processing time first, with the rule as the bins' capacity).

    Gives up (``None``) after skipping ``8 n + 4096`` micro-batches that it does not fit,
    in all, or when an item fits no micro-batch: on tight counts it would fail anyway.
    Items are taken by ``(-workload, -cost alone, index)``; bins by
    ``(workload, items, index)``, empty bins first. An item skips every micro-batch
    before the one it takes in that order.

    For plain sums whose costs do not grow along that order (verl's workloads of the
    lengths) the skipped micro-batches are set aside once, not popped for every item
    (:func:`_lpt_plain`): the same bins, and a failure found at the item where the skips
    run out instead of after paying for each of them.

    Args:
        rule: a :class:`~seqlen_balancing.planning.rule.Rule` under which every item fits alone.
        workloads: per item.
        count: micro-batches.

    Returns:
        ``count`` lists of items (some may be empty when ``count`` is large), each fitting
        ``rule``, or ``None``.

    Complexity: O(n log n + n log count) (plain sums of non-growing costs); otherwise
    O(n log n + (n + skips) log count), skips at most ``8 n + 4096``.

    References:
        R. L. Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 17
        (1969) (LPT).
    """
    sizes = rule.sizes
    budget = 8 * len(sizes) + 4096  # bins skipped over the whole run
    # (-workload, -cost, index): the rule's order by cost, sorted again by workload only
    # where the workloads do not already fall along it (verl's, of the lengths, do)
    order, resorted = rule.by_workload(workloads)
    if len(sizes) >= _TRIAL_ITEMS and _trial_fails(rule, workloads, count, order):
        return None
    if rule.plain and (not resorted or falls([sizes[g] for g in order])):
        return _lpt_plain(sizes, rule.cap, workloads, count, order, budget)
    bins: list[list[int]] = [[] for _ in range(count)]
    state = Loads(rule, count)
    fits, add = state.fits, state.add
    heap = [(0, 0, b) for b in range(count)]  # (workload, items, bin): empty bins first
    for g in order:
        skipped = []
        while heap and not fits(heap[0][2], g):
            skipped.append(heapq.heappop(heap))
            budget -= 1
            if budget < 0:
                return None
        if not heap:
            return None
        load, members, b = heapq.heappop(heap)
        bins[b].append(g)
        add(b, g)
        heapq.heappush(heap, (load + workloads[g], members + 1, b))
        for entry in skipped:
            heapq.heappush(heap, entry)
    return bins


#: Batches of at least this many items try LPT on a scaled-down copy first (:func:`_trial_fails`).
_TRIAL_ITEMS = 1 << 15

#: Items of that copy, at least; more where it would hold fewer than _TRIAL_BINS micro-batches.
_TRIAL_SAMPLE = 1 << 12
_TRIAL_BINS = 256

#: The copy holds at most one item in this many.
_TRIAL_STEP = 8


def _trial_fails(rule: Rule, workloads: Sequence[int], count: int, order: list[int]) -> bool:
    """True when LPT fails on a scaled-down copy of the batch at every one of three counts
    around the scaled count: every ``m``-th item in LPT's order (``m = n // 4096``, from
    the middle of each run of ``m``, so the copy has the batch's mix of sizes) into
    ``round(count / m)``, one more and two more micro-batches (up to 0.5% more room each
    than the batch has). LPT on the whole batch is then not tried.

    On tight counts LPT runs through 80-95% of the items before its skip budget runs out
    (issue 33: 3.2 s of 8.4 at 10^6 samples), and the copy fails the same way for 0.03 s.
    A heuristic, not a proof: on 1,100 random batches of 4,096-32,768 items (lognormal,
    uniform, bimodal lengths; caps 8k-64k; counts from the lower bound to twice it) it
    never failed where LPT on the whole batch succeeded, and caught 276 of its 409 failures
    (``benchmarks/lpt_trial.py``).
    """
    # enough items for _TRIAL_BINS micro-batches, so that one more is a small step
    wanted = max(_TRIAL_SAMPLE, _TRIAL_BINS * len(order) // max(1, count))
    step = len(order) // wanted
    if step < _TRIAL_STEP:
        return False  # the copy would cost about as much as the batch
    picked = order[step // 2 :: step]
    sample = rule.restrict(picked)
    weights = [workloads[g] for g in picked]
    scaled = max(1, round(count * len(picked) / len(order)))
    return all(lpt(sample, weights, c) is None for c in range(scaled, min(scaled + 3, len(picked) + 1)))


def _lpt_plain_python(
    sizes: Sequence[int],
    cap: int,
    workloads: Sequence[int],
    count: int,
    order: list[int],
    budget: int,
) -> list[list[int]] | None:
    """:func:`lpt` for plain sums, the items in ``order`` of non-growing cost.

    A micro-batch too full for one item is too full for every later one until the items
    get smaller than its room (rooms only shrink; costs never grow): it waits aside,
    keyed by its room, and comes back once the items fit it. The micro-batches an item
    skips are exactly those whose key comes before the one it takes, all waiting aside, so
    their number is a bisect in the sorted keys of those waiting.
    """
    bins: list[list[int]] = [[] for _ in range(count)]
    room = [cap] * count
    # The key (workload, items, bin) as one int, ordered as the tuple is: heaps and bisects
    # then compare machine-sized ints, not tuples. A bin aside is keyed by (-room, key) the
    # same way, the room counted down from the cap.
    per_item, per_load = count, (len(sizes) + 1) * count
    wide = (sum(workloads) + 1) * per_load
    heap = list(range(count))  # workload 0, no items: ordered by bin
    aside: list[int] = []  # sorted keys of the bins set aside
    by_room: list[int] = []  # (cap - room) * wide + key: the roomiest first
    for g in order:
        size = sizes[g]
        while by_room and cap - by_room[0] // wide >= size:  # fits again: back in line
            key = heapq.heappop(by_room) % wide
            del aside[bisect.bisect_left(aside, key)]
            heapq.heappush(heap, key)
        while heap and room[heap[0] % count] < size:
            key = heapq.heappop(heap)
            bisect.insort(aside, key)
            heapq.heappush(by_room, (cap - room[key % count]) * wide + key)
        if not heap:
            return None
        key = heap[0]
        budget -= bisect.bisect_left(aside, key)  # the bins before it, all skipped
        if budget < 0:
            return None
        b = key % count
        bins[b].append(g)
        room[b] -= size
        heapq.heapreplace(heap, key + workloads[g] * per_load + per_item)
    return bins


#: :func:`_lpt_plain_python`'s micro-batches (or ``None``), from its compiled twin where it is
#: in use and takes the input (``_c_balance.c``; :class:`~seqlen_balancing.native.Twinned`).
_lpt_plain = Twinned(_lpt_plain_python, "_c_balance", "lpt_plain")


def workload_gap(bins: list[list[int]], workloads: Sequence[int]) -> int:
    """Heaviest minus lightest micro-batch workload (the spread at a fixed count)."""
    loads = [sum(map(workloads.__getitem__, b)) for b in bins]
    return max(loads) - min(loads)


def sorted_slices(
    rule: Rule, workloads: Sequence[int], count: int, rounds: int = 48
) -> list[list[int]] | None:
    """Consecutive slices of the widest-first order (as the sorted rule cuts it,
    :func:`~seqlen_balancing.planning.rule.fewest_sorted`), exactly ``count`` of them, whose
    heaviest workload is as small as slices allow (to within 0.4%): a binary search on
    that limit ``T``, each step cutting every slice as long as both the rule and ``T``
    allow (a slice's sub-slices keep both, so the greedy count is the fewest for that
    ``T``, as in the sorted rule's proof), then the longest slices split until there are
    ``count``. ``None`` when the rule is not padded with one-sided rows of equal rows (the
    order is then no better than another) or no ``T`` reaches ``count``.

    Complexity: O(rounds * n) plus the sort.
    """
    if rule.left is None or len(set(rule.left)) > 1 or len(set(rule.rows)) > 1 or count > rule.n:
        return None
    order = widest_first(rule)
    low, high = max(workloads, default=0), sum(workloads)
    best = None
    for _ in range(rounds):
        if low > high or (best is not None and high - low <= low // 256):
            break  # within 0.4% of the smallest limit: as good as balance needs
        mid = (low + high) // 2
        bins = sorted_cut(rule, order, workloads, mid)
        if len(bins) <= count:
            best, high = bins, mid - 1
        else:
            low = mid + 1
    return None if best is None else split(rule, best, count)


def balanced(
    rule: Rule,
    workloads: Sequence[int],
    packing: list[list[int]],
    count: int,
    verl: list[list[int]] | None = None,
) -> list[list[int]]:
    """The best-balanced plan of ``count`` micro-batches under ``rule``: the smallest
    workload gap among the candidates, the earliest on a tie.

    Candidates, in order: ``verl`` (verl's Karmarkar-Karp partition at this count) when
    it fits ``rule``; the capacity-aware LPT (:func:`lpt`); for padded rules, the sorted
    slices (:func:`sorted_slices`) rebalanced; and ``packing`` split up to ``count`` and
    rebalanced (:func:`~seqlen_balancing.planning.packing.split`, :func:`rebalance`), which always
    fits: for summed costs without a limit only when no other candidate fits (the plain
    path's cost), for every other rule always (the rule may refuse LPT's moves).

    Args:
        rule: when a micro-batch fits.
        workloads: per item.
        packing: a packing under ``rule`` with at most ``count`` bins.
        count: micro-batches, at most the number of items.
        verl: one more candidate, or ``None``.

    Returns:
        ``count`` non-empty lists of items, each fitting ``rule``.

    Complexity: O(n log n + count * n).
    """
    candidates = []
    if verl is not None and (rule.plain or all(rule.fits(b) for b in verl)):
        candidates.append(verl)
    found = lpt(rule, workloads, count)
    if found is not None:
        candidates.append(found)
    if not candidates or not rule.plain:
        candidates.append(rebalance(rule, split(rule, packing, count), workloads))
    sliced = sorted_slices(rule, workloads, count) if rule.is_padded else None
    if sliced is not None:
        candidates.append(rebalance(rule, sliced, workloads))
    return min(candidates, key=lambda bins: workload_gap(bins, workloads))


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
    def key(mb: list[int]) -> tuple[int, int]:  # a forced group's workload once, at its first sample
        load = (sum(map(workloads.__getitem__, mb)) if force_group_size == 1  # the common case, fast
                else sum(workloads[i // force_group_size] for i in mb[::force_group_size]))
        return load, mb[0] if mb else 0

    by_load = sorted(micro_batches, key=key, reverse=True)
    return by_load[::2][::-1] + by_load[1::2]


def heaviest_first(micro_batches: list[list[int]], workloads: Sequence[int]) -> list[list[int]]:
    """Micro-batches by workload descending, ties by the smallest first sample index: the
    heaviest runs first, so a micro-batch that runs the GPU out of memory does so at the first
    step, and ranks that agreed on the count line up index ``k`` by the same rule. Empty
    lists (dummies) weigh 0 and go last.

    Args:
        micro_batches: lists of sample indices, each sorted ascending.
        workloads: the workload of each sample (a micro-batch weighs their sum).

    Returns:
        The same lists, reordered.

    Complexity: O(n + m log m) for ``m`` micro-batches.

    Example:
        >>> heaviest_first([[0], [1], [2, 3]], [5, 9, 2, 2])
        [[1], [0], [2, 3]]
    """
    return sorted(
        micro_batches, key=lambda mb: (-sum(map(workloads.__getitem__, mb)), mb[0] if mb else len(workloads))
    )


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
