"""Micro-batches that cost rows x their widest row, or that hold at most N samples.

The sorted rule, its bound and cap-respecting balanced plans, on pure integer lists.

The planner (:mod:`seqlen_balancing.planner`) packs *groups* (``force_group_size``
consecutive samples, or single samples) into micro-batches. Its default rule is a sum: a
micro-batch fits when its groups' costs add up to at most the cap. This module holds the
two rules beyond it, as a :class:`BinRule`:

* ``padded``: a micro-batch of ``m`` groups of ``rows`` samples each costs
  ``rows * m * width``, its width being ``ceil((max left + max right) / p) * p``: each
  row spans ``left`` positions to the left of a column every row of the batch shares and
  ``right`` to its right (a right-padded row of ``s`` tokens: ``(0, s)``; verl's
  left-padded prompt plus right-padded response: ``(prompt, response)``), and the
  micro-batch, cut to the smallest window holding its rows, is that wide.
* ``max_groups``: at most this many groups per micro-batch
  (``max_samples_per_micro_batch // force_group_size``), with either rule.

Splitting a micro-batch never breaks either rule (fewer rows, no wider), so every count
from the fewest up to the number of groups is feasible, as for the sum.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from seqlen_balancing._checks import _integer_or_none, as_switch, describe
from seqlen_balancing.cost import aligned_length
from seqlen_balancing.errors import (
    Argument,
    BelowOne,
    MinAboveGroups,
    NotAnInteger,
    NotASwitch,
    OverCap,
    PaddedGroupOverCap,
    PaddedSampleOverCap,
    PlanError,
    SampleLimitBelowGroup,
)
from seqlen_balancing.partition import WORKLOAD_LINEAR_COEF

#: ``bound_name`` of the padded count's bound (:func:`padded_bound`).
SORTED_RULE = "padded sorted rule"

#: ``bound_name`` of ``ceil(groups / (max_samples_per_micro_batch // force_group_size))``.
SAMPLE_LIMIT = "samples per micro-batch"

__all__ = [
    "SAMPLE_LIMIT",
    "SORTED_RULE",
    "BinRule",
    "balanced_under_rule",
    "best_fit_decreasing_limited",
    "contiguous_balanced",
    "fewest_padded",
    "limit_samples",
    "lpt_under_rule",
    "padded_bound",
    "padded_options",
    "padded_rule",
    "plan_padded",
    "rebalance_under_rule",
    "sorted_rule",
    "split_under_rule",
]


@dataclass
class BinRule:
    """When a micro-batch (a list of group indices) fits.

    Attributes:
        cap: the usable cap (tokens, or token positions when ``padded``).
        sizes: per group, its summed cost (``padded``: the footprint of the group alone).
        padded: a micro-batch costs ``rows * groups * width`` instead of the sum.
        left: per group, its widest extent left of the common column (``padded`` only).
        right: per group, its widest extent right of it (``padded`` only).
        rows: samples per group (``force_group_size``).
        pad: a padded width is rounded up to a multiple of this (``pad_to_multiple_of``).
        max_groups: groups per micro-batch at most, or ``None`` (no limit).
    """

    cap: int
    sizes: list[int]
    padded: bool = False
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    rows: int = 1
    pad: int = 1
    max_groups: int | None = None

    def width(self, groups: Sequence[int]) -> int:
        """A padded micro-batch's width in tokens (0 for no groups)."""
        if not groups:
            return 0
        span = max(self.left[g] for g in groups) + max(self.right[g] for g in groups)
        return aligned_length(span, self.pad)

    def cost(self, groups: Sequence[int]) -> int:
        """What the micro-batch holds: ``rows * len(groups) * width`` when padded, else the
        summed costs (tokens)."""
        if self.padded:
            return self.rows * len(groups) * self.width(groups)
        return sum(self.sizes[g] for g in groups)

    def fits(self, groups: Sequence[int]) -> bool:
        """True when the micro-batch holds at most ``max_groups`` groups and costs at most
        the cap."""
        if self.max_groups is not None and len(groups) > self.max_groups:
            return False
        return self.cost(groups) <= self.cap


class _Loads:
    """Per micro-batch state for adding groups one at a time in O(1) per check."""

    def __init__(self, rule: BinRule, count: int) -> None:
        self.rule = rule
        self.members = [0] * count
        self.tokens = [0] * count
        self.left = [0] * count
        self.right = [0] * count

    def takes(self, b: int, g: int) -> bool:
        rule = self.rule
        if rule.max_groups is not None and self.members[b] >= rule.max_groups:
            return False
        if not rule.padded:
            return self.tokens[b] + rule.sizes[g] <= rule.cap
        span = max(self.left[b], rule.left[g]) + max(self.right[b], rule.right[g])
        return rule.rows * (self.members[b] + 1) * aligned_length(span, rule.pad) <= rule.cap

    def add(self, b: int, g: int) -> None:
        rule = self.rule
        self.members[b] += 1
        self.tokens[b] += rule.sizes[g]
        if rule.padded:
            self.left[b] = max(self.left[b], rule.left[g])
            self.right[b] = max(self.right[b], rule.right[g])


def sorted_rule(rule: BinRule, order: Sequence[int]) -> list[list[int]]:
    """Cut ``order`` into consecutive micro-batches, each as long as the rule allows.

    Args:
        rule: a :class:`BinRule` under which every single group fits.
        order: the group indices in the order to cut them.

    Returns:
        Consecutive slices of ``order`` (non-empty lists of group indices).

    Complexity: O(n).
    """
    bins: list[list[int]] = []
    loads = _Loads(rule, 1)
    for g in order:
        if not bins or not loads.takes(0, g):
            bins.append([])
            loads = _Loads(rule, 1)
        bins[-1].append(g)
        loads.add(0, g)
    return bins


def _widest_first(left: Sequence[int], right: Sequence[int]) -> list[int]:
    return sorted(range(len(right)), key=lambda g: (-(left[g] + right[g]), g))


def fewest_padded(rule: BinRule) -> list[list[int]]:
    """The fewest padded micro-batches: the sorted rule on the groups, widest first.

    **Optimal when the rows share one side** (``left`` all equal: right-padded rows,
    left-padded rows, or any list of lengths). Let the groups be sorted by width,
    widest first (ties by index), and let a bin's *head* be its earliest group in that
    order (its widest).

    1. *Some optimal packing cuts the order into consecutive slices.* Take any packing
       that fits, its bins ordered by their heads' positions ``h_1 < h_2 < ... < h_m``,
       with ``c_1, ..., c_m`` groups. Every group before ``h_j`` lies in one of the bins
       ``1..j-1`` (a bin whose head comes later holds nothing earlier than its head), so
       ``h_j <= c_1 + ... + c_{j-1} + 1``. Refill the bins with consecutive slices of
       the order, ``c_1`` groups, then ``c_2``, and so on: slice ``j`` starts at position
       ``c_1 + ... + c_{j-1} + 1 >= h_j``, so its widest group is no wider than bin
       ``j``'s head. Each bin keeps its number of groups (so its samples, for
       ``max_groups``) and gets no wider, so it still fits, and there are still ``m``.
    2. *Among slicings, each slice as long as it can be is optimal* (greedy stays ahead).
       A sub-slice of a slice that fits fits (fewer rows, no wider head). If the first
       ``j`` slices of an optimal slicing end at position ``o_j`` and the greedy's end at
       ``g_j >= o_j`` (true for ``j = 0``), the greedy's next slice may run at least to
       ``o_{j+1}``, since ``[g_j + 1, o_{j+1}]`` is a sub-slice of the optimal one; so
       ``g_{j+1} >= o_{j+1}``, and the greedy ends no later than the optimum: with no more
       slices.

    Greedy algorithms "stay ahead", and exchanges of this kind are the two classic proofs
    of a greedy rule's optimality (J. Kleinberg and E. Tardos, *Algorithm Design*,
    Addison-Wesley 2006, chapter 4, sections 4.1-4.2). The argument needs only that a
    bin's cost grows with its group count and its head's width, which holds for
    ``rows * count * width`` with any ``rows``, ``pad`` and ``max_groups``.

    Rows padded on both sides (``left`` not all equal) make the width of a bin a sum of
    two maxima, which no single order sorts: the widest-first order, the left-first and the
    right-first orders are each cut by the rule and the fewest bins kept (feasible, not
    proven optimal; :func:`padded_bound` is then a bound, not the count).

    Args:
        rule: a padded :class:`BinRule` under which every single group fits.

    Returns:
        Micro-batches as lists of group indices, consecutive in the order used.

    Complexity: O(n log n).

    Example:
        >>> rule = BinRule(150, [100, 10, 10, 10, 100], True, [0] * 5, [100, 10, 10, 10, 100])
        >>> fewest_padded(rule)
        [[0], [4], [1, 2, 3]]
    """
    left, right = rule.left, rule.right
    orders = [_widest_first(left, right)]
    if len(set(left)) > 1:
        n = len(right)
        orders.append(sorted(range(n), key=lambda g: (-left[g], -right[g], g)))
        orders.append(sorted(range(n), key=lambda g: (-right[g], -left[g], g)))
    return min((sorted_rule(rule, order) for order in orders), key=len)


def padded_bound(rule: BinRule) -> int:
    """A lower bound on the padded micro-batch count: the sorted rule's count when every
    row is taken as spanning ``left + right`` on one side (a bin of two-sided rows is at
    least as wide as its widest row's span, so that count is no larger). Equal to
    :func:`fewest_padded`'s count, hence exact, when the rows share one side.

    Complexity: O(n log n).

    Example:
        >>> padded_bound(BinRule(150, [100, 10, 10, 10, 100], True, [0] * 5, [100, 10, 10, 10, 100]))
        3
    """
    spans = [a + b for a, b in zip(rule.left, rule.right, strict=True)]
    flat = BinRule(rule.cap, rule.sizes, True, [0] * len(spans), spans, rule.rows, rule.pad,
                   rule.max_groups)
    return len(sorted_rule(flat, _widest_first(flat.left, spans)))


def best_fit_decreasing_limited(sizes: Sequence[int], cap: int, max_groups: int) -> list[list[int]]:
    """Best-fit decreasing with at most ``max_groups`` items per bin: each item, largest
    first, into the fullest bin that has room for it and fewer than ``max_groups`` items.

    Args:
        sizes: item sizes in tokens, each at most ``cap``.
        cap: bin capacity in tokens.
        max_groups: items per bin at most, >= 1.

    Returns:
        Bins as lists of item indices.

    Complexity: O(n log n) comparisons (list insertions move O(bins) pointers).

    Example:
        >>> len(best_fit_decreasing_limited([100] * 64, 16384, 16))
        4
    """
    bins: list[list[int]] = []
    rooms: list[tuple[int, int]] = []  # (room left, bin) of bins that can take more, sorted
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        at = bisect.bisect_left(rooms, (sizes[i], -1))
        if at < len(rooms):
            room, b = rooms.pop(at)
        else:
            room, b = cap, len(bins)
            bins.append([])
        bins[b].append(i)
        if len(bins[b]) < max_groups:
            bisect.insort(rooms, (room - sizes[i], b))
    return bins


def lpt_under_rule(
    rule: BinRule, workloads: Sequence[int], count: int
) -> list[list[int]] | None:
    """Heaviest group first (by workload) into the lightest micro-batch that takes it
    under ``rule``, or ``None`` when one finds no room (after skipping ``8 n + 4096``
    micro-batches in all, which bounds the cost to O(n log count)).

    Complexity: O(n log n + n log count).
    """
    n = len(workloads)
    bins: list[list[int]] = [[] for _ in range(count)]
    loads = _Loads(rule, count)
    heap = [(0, 0, b) for b in range(count)]
    budget = 8 * n + 4096
    for g in sorted(range(n), key=lambda g: (-workloads[g], -rule.sizes[g], g)):
        skipped = []
        while heap and not loads.takes(heap[0][2], g):
            skipped.append(heapq.heappop(heap))
            budget -= 1
            if budget < 0:
                return None
        if not heap:
            return None
        load, members, b = heapq.heappop(heap)
        bins[b].append(g)
        loads.add(b, g)
        heapq.heappush(heap, (load + workloads[g], members + 1, b))
        for entry in skipped:
            heapq.heappush(heap, entry)
    return bins


def split_under_rule(rule: BinRule, bins: list[list[int]], count: int) -> list[list[int]]:
    """Split micro-batches until there are ``count``: the one with the most groups (the
    costliest on a tie) is cut in two, its wider half and its narrower half when padded,
    its groups dealt alternately by cost otherwise. A part of a micro-batch that fits
    fits, so the result does.

    Raises:
        ValueError: ``count`` is below ``len(bins)`` or above the number of groups.

    Complexity: O((count - len(bins)) * (bins + m log m)), m the size of a split bin.
    """
    result = [list(b) for b in bins]
    n_items = sum(len(b) for b in result)
    if not len(result) <= count <= n_items:
        raise ValueError(f"cannot split {len(result)} micro-batches of {n_items} groups into {count}")
    while len(result) < count:
        k = max(range(len(result)), key=lambda k: (len(result[k]), rule.cost(result[k]), -k))
        if rule.padded:
            ordered = sorted(result[k], key=lambda g: (-(rule.left[g] + rule.right[g]), g))
            half = len(ordered) // 2
            first, second = ordered[:half], ordered[half:]
        else:
            ordered = sorted(result[k], key=lambda g: (-rule.sizes[g], g))
            first, second = ordered[0::2], ordered[1::2]
        result[k] = sorted(first)
        result.append(sorted(second))
    return result


def rebalance_under_rule(
    rule: BinRule, bins: list[list[int]], workloads: Sequence[int]
) -> list[list[int]]:
    """Move groups from the heaviest micro-batch (by workload) into the lightest while the
    move narrows their gap and the lightest still fits ``rule``; at most ``2 * count``
    moves, each O(n) to check. Never makes a micro-batch empty.

    Complexity: O(count * n).
    """
    loads = [sum(workloads[g] for g in b) for b in bins]
    ids = range(len(bins))
    for _ in range(2 * len(bins)):
        light = min(ids, key=loads.__getitem__)
        move = None
        for heavy in sorted(ids, key=lambda b: (-loads[b], b)):
            gap = loads[heavy] - loads[light]
            if gap <= 0:
                break
            if len(bins[heavy]) < 2:
                continue
            movable = sorted(
                (g for g in bins[heavy] if 0 < workloads[g] < gap),
                key=lambda g: (abs(2 * workloads[g] - gap), g),
            )
            for g in movable[:8]:
                if rule.fits([*bins[light], g]):
                    move = heavy, g
                    break
            if move is not None:
                break
        if move is None:
            break
        heavy, g = move
        bins[heavy].remove(g)
        bins[light].append(g)
        loads[heavy] -= workloads[g]
        loads[light] += workloads[g]
    return bins


def padded_rule(
    lengths: list[int],
    costs: list[int] | None,
    extents: tuple[Sequence[int], Sequence[int]] | None,
    group: int,
    pad: int,
    cap: int,
    max_groups: int | None,
    given: tuple[int, int],
) -> tuple[BinRule, list[int], PlanError | None]:
    """The padded :class:`BinRule` of a batch, each row's width, and the error for a row or
    forced group whose footprint alone is over the cap.

    Each row spans ``extents`` (``(left, right)`` per sample) or, by default, ``(0, its
    cost)``, its cost being its length or the ``costs`` given; a group spans its rows'
    widest left and right; alone it costs ``group * ceil((left + right) / pad) * pad``.

    Args:
        lengths: effective length of each sample in tokens.
        costs: the caller's costs (each row's width), or ``None``.
        extents: ``(left, right)`` lists, or ``None``.
        group: ``force_group_size``.
        pad: ``pad_to_multiple_of``.
        cap: the usable cap in token positions.
        max_groups: groups per micro-batch at most, or ``None``.
        given: ``(max_token_len, micro_batch_multiple_of)`` as given, for the message.

    Returns:
        ``(rule, widths, error)``: ``widths`` per sample (its span rounded up to ``pad``),
        ``error`` a :class:`~seqlen_balancing.errors.PaddedSampleOverCap` or
        :class:`~seqlen_balancing.errors.PaddedGroupOverCap`, or ``None``.

    Complexity: O(n).
    """
    if extents is not None:
        left, right = list(extents[0]), list(extents[1])
    else:
        left, right = [0] * len(lengths), list(costs if costs is not None else lengths)
    spans = [a + b for a, b in zip(left, right, strict=True)]
    widths = [aligned_length(span, pad) for span in spans]
    starts = range(0, len(lengths), group)
    group_left = [max(left[g : g + group]) for g in starts]
    group_right = [max(right[g : g + group]) for g in starts]
    group_spans = [a + b for a, b in zip(group_left, group_right, strict=True)]
    footprints = [group * aligned_length(span, pad) for span in group_spans]
    rule = BinRule(cap, footprints, True, group_left, group_right, group, pad, max_groups)
    checks: list[tuple[type[OverCap], list[int], list[int], int]] = [(PaddedSampleOverCap, spans, widths, 1)]
    if group > 1:
        checks.append((PaddedGroupOverCap, group_spans, footprints, group))
    for kind, items, footprint, stride in checks:
        over = [i for i, cost in enumerate(footprint) if cost > cap]
        if over:
            first = over[0]
            return rule, widths, kind(items[first], first * stride, given[0], len(over),
                                      max(footprint[i] for i in over), footprint[first], given[1],
                                      pad, costs is not None)
    return rule, widths, None


def limit_samples(
    sizes: Sequence[int], cap: int, most: int, packing: list[list[int]]
) -> tuple[list[list[int]], int]:
    """A packing with at most ``most`` groups per bin: the given packing (made without the
    limit) with its bins cut into runs of ``most``, or best-fit decreasing under the
    limit, whichever has fewer bins; and the bound ``ceil(groups / most)``.

    Complexity: O(n log n).
    """
    cut = [b[i : i + most] for b in packing for i in range(0, len(b), most)]
    limited = best_fit_decreasing_limited(sizes, cap, most)
    return min((cut, limited), key=len), -(-len(sizes) // most)


def _gap(bins: list[list[int]], workloads: Sequence[int]) -> int:
    loads = [sum(workloads[g] for g in b) for b in bins]
    return max(loads) - min(loads)


def balanced_under_rule(
    rule: BinRule,
    workloads: Sequence[int],
    packing: list[list[int]],
    count: int,
    extra: list[list[int]] | None = None,
) -> list[list[int]]:
    """The best-balanced plan of ``count`` micro-batches under ``rule``: the smallest
    workload gap among ``extra`` (e.g. verl's Karmarkar-Karp partition) when it fits, the
    rule-aware LPT (:func:`lpt_under_rule`) and ``packing`` split up to ``count`` and
    rebalanced (:func:`split_under_rule`, :func:`rebalance_under_rule`; always fits).

    Args:
        rule: when a micro-batch fits.
        workloads: per group.
        packing: a packing under ``rule`` with at most ``count`` bins.
        count: micro-batches, at most the number of groups.
        extra: one more candidate, or ``None``.

    Returns:
        ``count`` non-empty lists of group indices, each fitting ``rule``.

    Complexity: O(n log n + count * n).
    """
    candidates = []
    if extra is not None and all(rule.fits(b) for b in extra):
        candidates.append(extra)
    lpt = lpt_under_rule(rule, workloads, count)
    if lpt is not None:
        candidates.append(lpt)
    candidates.append(rebalance_under_rule(rule, split_under_rule(rule, packing, count), workloads))
    if rule.padded:
        sliced = contiguous_balanced(rule, workloads, count)
        if sliced is not None:
            candidates.append(rebalance_under_rule(rule, sliced, workloads))
    return min(candidates, key=lambda bins: _gap(bins, workloads))


def contiguous_balanced(
    rule: BinRule, workloads: Sequence[int], count: int, rounds: int = 48
) -> list[list[int]] | None:
    """Consecutive slices of the widest-first order (as :func:`fewest_padded` cuts it),
    exactly ``count`` of them, whose heaviest workload is as small as slices allow (to
    within 0.4%): a binary search on that limit ``T``, each step cutting every slice as long as both the
    rule and ``T`` allow (a slice's sub-slices keep both, so the greedy count is the
    fewest for that ``T``, as in :func:`fewest_padded`'s proof), then the longest slices
    split until there are ``count``. ``None`` when the rule's rows are not one-sided (the
    order is then no better than another) or no ``T`` reaches ``count``.

    Complexity: O(rounds * n) plus the sort.
    """
    order = _widest_first(rule.left, rule.right)
    if len(set(rule.left)) > 1 or count > len(order):
        return None

    # One-sided rows, widest first: a slice is as wide as its first group.
    widths = [aligned_length(rule.left[g] + rule.right[g], rule.pad) for g in order]
    most = len(order) if rule.max_groups is None else rule.max_groups

    def cut(limit: int) -> list[list[int]]:
        bins: list[list[int]] = []
        size = head = load = 0
        for position, g in enumerate(order):
            work = workloads[g]
            if bins and size < most and rule.rows * (size + 1) * head <= rule.cap and load + work <= limit:
                bins[-1].append(g)
                size, load = size + 1, load + work
            else:
                bins.append([g])
                size, head, load = 1, widths[position], work
        return bins

    low, high = max(workloads, default=0), sum(workloads)
    best = None
    for _ in range(rounds):
        if low > high or (best is not None and high - low <= low // 256):
            break  # within 0.4% of the smallest limit: as good as balance needs
        mid = (low + high) // 2
        bins = cut(mid)
        if len(bins) <= count:
            best, high = bins, mid - 1
        else:
            low = mid + 1
    if best is None:
        return None
    return split_under_rule(rule, best, count)


def padded_options(
    padded: object, max_samples_per_micro_batch: object, group: int
) -> tuple[PlanError | None, bool, int | None]:
    """``(error, padded, limit)``: ``padded`` as a bool and ``max_samples_per_micro_batch``
    as a positive int (``None``: no limit), at least ``force_group_size`` (``group``), or
    the error every DP rank can agree on."""
    on = as_switch(padded)
    if on is None:
        return NotASwitch(Argument.PADDED, detail=describe(padded)), False, None
    if max_samples_per_micro_batch is None:
        return None, on, None
    limit = _integer_or_none(max_samples_per_micro_batch)
    name = Argument.MAX_SAMPLES_PER_MICRO_BATCH
    if limit is None:
        error = NotAnInteger(name, detail=describe(max_samples_per_micro_batch))
        return error, on, None
    if limit < 1:
        return BelowOne(name, limit), on, None
    if limit < group:
        return SampleLimitBelowGroup(limit, group), on, None
    return None, on, limit


@dataclass
class PaddedPlan:
    """:func:`plan_padded`'s result: the rule, each row's width, the error (or ``None``),
    the fewest micro-batches (at least the floor), the bound and its name."""

    rule: BinRule
    widths: list[int]
    error: PlanError | None
    workloads: list[int] = field(default_factory=list)
    packing: list[list[int]] = field(default_factory=list)
    bound: int = 0
    bound_name: str = ""


def plan_padded(
    lengths: list[int],
    costs: list[int] | None,
    extents: tuple[Sequence[int], Sequence[int]] | None,
    group: int,
    pad: int,
    cap: int,
    max_groups: int | None,
    given: tuple[int, int],
    floor: int | None,
) -> PaddedPlan:
    """The padded count of one rank: :func:`padded_rule`'s checks, then the fewest
    micro-batches (:func:`fewest_padded`, split up to ``floor`` when it is higher) and the
    bound (:func:`padded_bound`, or ``floor``: ``min_num_micro_batch``, ``None`` for none).

    Complexity: O(n log n).
    """
    rule, widths, error = padded_rule(lengths, costs, extents, group, pad, cap, max_groups, given)
    if error is None and floor is not None and floor > len(rule.sizes):
        error = MinAboveGroups(floor, len(rule.sizes))
    if error is not None:
        return PaddedPlan(rule, widths, error)
    packing = fewest_padded(rule)
    bound, name = padded_bound(rule), SORTED_RULE
    if (floor or 1) > bound:
        bound, name = floor or 1, ("one" if floor is None else "min_num_micro_batch")
    if len(packing) < bound:
        packing = split_under_rule(rule, packing, bound)
    loads = [(WORKLOAD_LINEAR_COEF + s) * s for s in lengths]
    workloads = [sum(loads[g : g + group]) for g in range(0, len(lengths), group)]
    return PaddedPlan(rule, widths, None, workloads, packing, bound, name)
