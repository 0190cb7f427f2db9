"""Cap-respecting bin packing on plain integer lists: lower bounds, best-fit decreasing,
bin-count reduction by exchange local search, and splitting up to a target count.

A *bin* here is a list of item indices whose sizes (tokens) sum to at most ``cap``. Every
function in this module returns bins that respect the cap; none of them needs torch.
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from math import gcd, inf

from seqlen_balancing._checks import as_list, non_negative_ints, positive_int
from seqlen_balancing.cost import micro_batch_capacity, sample_costs

__all__ = [
    "BOUND_NAMES",
    "best_fit_decreasing",
    "best_lower_bound",
    "closing_fit_decreasing",
    "dominant_bins",
    "l1_lower_bound",
    "l2_lower_bound",
    "lower_bound",
    "minimum_bin_slack",
    "reduce_bins",
    "split_to_count",
]

_MAX_FREE_PAIRS = 64  # free pools up to this size also offer pairs of items
_MAX_FREE_TRIPLES = 16  # ... and triples
_CLOSING_TRIES = 64  # sizes tried per exact-pair search in closing_fit_decreasing
_MAX_OUT_PAIRS = 12  # bins with up to this many items may give up two at once
_KICK_BINS = 2  # bins emptied into the pool per kick
_MAX_BITSET_BITS = 1 << 16  # minimum_bin_slack: widest subset-sum bitset (cap / gcd)
_MAX_STORED_BITS = 1 << 26  # minimum_bin_slack: bitsets kept per bin (8 MiB)


def _checked(sizes: Sequence[int], cap: int) -> tuple[list[int], int]:
    """Sizes as non-negative ints and the cap as a positive int (TypeError/ValueError)."""
    return non_negative_ints(as_list(sizes, "sizes"), "sizes"), positive_int(cap, "cap")


def l1_lower_bound(sizes: Sequence[int], cap: int) -> int:
    """Continuous lower bound ``ceil(sum(sizes) / cap)`` on the number of bins.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        The L1 bound (0 for an empty list or all-zero sizes).

    Raises:
        TypeError: a size or ``cap`` is not an integer.
        ValueError: a negative size or ``cap < 1``.

    Complexity: O(n).

    Example:
        >>> l1_lower_bound([6, 6, 6], 10)
        2
    """
    sizes, cap = _checked(sizes, cap)
    return -(sum(sizes) // -cap)


def l2_lower_bound(sizes: Sequence[int], cap: int) -> int:
    """Martello-Toth L2 lower bound on the number of bins of capacity ``cap``.

    For every threshold ``a`` in ``{0}`` and every ``s <= cap/2``: items larger than ``cap - a``
    (J1) and the other items larger than ``cap/2`` (J2) each need a bin of their own, and
    the items in ``[a, cap/2]`` (J3) need ``ceil((sum(J3) - free space in J2 bins) / cap)``
    more. L2 is the largest such count; it dominates ``ceil(sum / cap)``.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        The L2 bound (0 for an empty list or all-zero sizes).

    Raises:
        TypeError: a size or ``cap`` is not an integer.
        ValueError: a negative size, a size above ``cap``, or ``cap < 1``.

    Complexity: O(n log n) (one sort, then a bisect per distinct small size).

    References:
        S. Martello and P. Toth, "Lower bounds and reduction procedures for the bin packing
        problem", Discrete Applied Mathematics 28 (1990); Knapsack Problems, ch. 8 (1990).

    Example:
        >>> l2_lower_bound([6, 6, 6], 10)   # three items above cap/2: three bins
        3
    """
    sizes, cap = _checked(sizes, cap)
    ordered = _in_range(sorted(sizes), cap)
    return _l2_sorted(ordered, _prefix(ordered), cap)


def _in_range(ordered: list[int], cap: int) -> list[int]:
    if ordered and ordered[-1] > cap:
        raise ValueError(f"item sizes must lie in 0..{cap}, got {ordered[0]}..{ordered[-1]}")
    return ordered


def _prefix(ordered: list[int]) -> list[int]:
    prefix = [0]
    for size in ordered:
        prefix.append(prefix[-1] + size)
    return prefix


#: Dual feasible functions u_k of Fekete and Schepers are tried for k = 1.._MAX_DFF_K.
_MAX_DFF_K = 12
#: Threshold bounds (Fekete-Schepers epsilon, matching alpha) try at most this many
#: thresholds, evenly spread over the distinct candidate sizes: O(1) bisections each.
_MAX_THRESHOLDS = 256


def _thresholds(ordered: list[int], stop: int) -> list[int]:
    """At most ``_MAX_THRESHOLDS`` of the distinct positive sizes in ``ordered[:stop]``,
    evenly spread, the smallest and largest included."""
    distinct = sorted(set(ordered[:stop]) - {0})
    if len(distinct) <= _MAX_THRESHOLDS:
        return distinct
    last = len(distinct) - 1
    return sorted({distinct[t * last // (_MAX_THRESHOLDS - 1)] for t in range(_MAX_THRESHOLDS)})


def _l2_sorted(ordered: list[int], prefix: list[int], cap: int) -> int:
    """L2 on ascending sizes with prefix sums (see :func:`l2_lower_bound`)."""
    n = len(ordered)
    half = bisect_right(ordered, cap // 2)  # items [0, half) have 2*s <= cap
    best = 0  # alpha = 0 gives max(|J2|, ceil(sum / cap)), so L2 >= L1 needs no start value
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


def _cardinality_sorted(ordered: list[int], cap: int) -> int:
    """``ceil(n / p)``, ``p`` the most items any bin can hold (the smallest ones that fit)."""
    if not ordered or not ordered[-1]:
        return 0  # no tokens: no bin needed (as L2 says)
    per_bin = total = 0
    for size in ordered:
        if total + size > cap:
            break
        total += size
        per_bin += 1
    return -(-len(ordered) // per_bin)  # per_bin >= 1: the smallest item fits (<= cap)


def _matching_sorted(ordered: list[int], prefix: list[int], cap: int) -> int:
    """Large-item matching bound on ascending sizes with prefix sums.

    Items above ``cap/3`` ("large", set L) fit at most two to a bin, so the bins holding
    them number at least ``|L| - M``, with ``M`` a maximum matching of pairs of L that fit
    (greedy two pointers: the largest item pairs with the smallest when they fit, else it
    can pair with nothing). For each threshold ``a <= cap/3``: the items above ``cap - a``
    (J1, all in L and unmatched) take bins where nothing of size ``>= a`` fits; the other
    bins hold the rest of L, whose own bins number at least ``|L| - M - |J1|``, and the
    items of ``[a, cap/3]``, so they number at least
    ``max(|L| - M - |J1|, ceil((sum(L - J1) + sum([a, cap/3])) / cap))``. By counts:
    beside ``t`` large items a bin holds at most ``q_t`` items of ``[a, cap/3]`` (the
    smallest ones that fit beside the ``t`` smallest large ones), and at most ``M`` bins hold
    two large items (:func:`_fewest_bins`). Thresholds: 0 and at most ``_MAX_THRESHOLDS``
    distinct sizes up to ``cap/3``; O(log n) each.
    """
    n = len(ordered)
    large = bisect_right(ordered, cap // 3)  # items [large, n) have 3*s > cap
    matched, i, j = 0, large, n - 1
    while i < j:
        if ordered[i] + ordered[j] <= cap:
            matched += 1
            i += 1
        j -= 1
    n_large = n - large
    best = n_large - matched
    # Room beside the t smallest large items, t = 0, 1, 2. q_t is only used when there are
    # t large items that fit together (t <= n_large, and t = 2 only when they pair), so a
    # room for fewer items, or a negative one (q_2 = -1), changes no count.
    rooms = [cap - sum(ordered[large : large + t]) for t in range(3)]
    for alpha in [0, *_thresholds(ordered, large)]:
        lo = bisect_left(ordered, alpha)
        j1_start = bisect_right(ordered, cap - alpha)
        n_j1 = n - j1_start
        volume = prefix[j1_start] - prefix[lo]
        best = max(best, n_j1 + max(n_large - matched - n_j1, -(volume // -cap)))
        # Counts: beside t large items a bin holds at most q_t items of [alpha, cap/3]
        # (zero-size items left out: they need no bin of their own).
        lo = lo or bisect_left(ordered, 1)
        q0, q1, q2 = (bisect_right(prefix, prefix[lo] + room, lo, large + 1) - 1 - lo for room in rooms)
        best = max(best, _fewest_bins(n_large, large - lo, matched, q0, q1, q2))
    return best


def _fewest_bins(n_large: int, n_small: int, pairs: int, q0: int, q1: int, q2: int) -> int:
    """Fewest bins ``n1 + n2 + n0`` with ``n2 <= pairs`` bins of two large items, ``n1 >=
    n_large - 2 n2`` bins of one and ``n0`` of none, when a bin with ``t`` large items holds
    at most ``q_t`` small ones (``q0 >= q1 >= q2``, ``q0 >= 1`` when ``n_small > 0``).

    With ``n1 = n_large - 2 n2`` the count is ``n_large - n2 + ceil(max(0, A + n2 B) / q0)``,
    ``A = n_small - n_large q1``, ``B = 2 q1 - q2 >= 0``: it falls with ``n2`` while
    ``A + n2 B <= 0``, and beyond that it never rises when ``B < q0`` and never falls when
    ``B >= q0`` (and ``n* + 1`` is never below ``n*``: its ceiling is at least 1). So the
    least value is at ``n2`` in ``{0, pairs, min(n*, pairs)}``, ``n* = floor(-A / B)``.
    """
    if not n_small:
        return n_large - pairs
    a, b = n_small - n_large * q1, 2 * q1 - q2
    candidates = {0, pairs}
    if b > 0 and a < 0:
        star = (-a) // b
        candidates.add(min(star, pairs))
    return min(
        n_large - n2 + max(0, -(-(a + n2 * b) // q0)) for n2 in candidates
    )


def _dff_sorted(ordered: list[int], cap: int) -> int:
    """Best bound ``ceil(sum f(size / cap))`` over dual feasible functions ``f`` of the
    Fekete-Schepers family, on ascending sizes (integer arithmetic throughout).

    ``u_k o U_e`` for ``k = 1.._MAX_DFF_K``: ``U_e`` maps sizes above ``cap - e`` to
    ``cap`` and below ``e`` to 0; ``u_k(x) = x`` when ``(k + 1) x`` is an integer, else
    ``floor((k + 1) x) / k``. ``phi_e``: ``1 - floor((1 - x) / e) / floor(1 / e)`` above
    1/2, ``1 / floor(1 / e)`` on ``[e, 1/2]``, 0 below ``e``. Thresholds ``e``: at most
    ``_MAX_THRESHOLDS`` of the distinct sizes up to ``cap/2``. Each ``(e, k)`` costs
    O(k) from precomputed bisections, each ``phi_e`` O(min(n, cap / e)).
    """
    n = len(ordered)
    if n == 0:
        return 0
    half = bisect_right(ordered, cap // 2)
    distinct = _thresholds(ordered, half)
    counts: dict[int, int] = {}
    for size in ordered:
        counts[size] = counts.get(size, 0) + 1
    # Per k: the first position of each step of floor((k + 1) s / cap), and the sizes s with
    # (k + 1) s a multiple of cap (u_k maps them to s / cap, not to the floor).
    steps: list[tuple[int, list[int], list[tuple[int, int]]]] = []
    for k in range(1, _MAX_DFF_K + 1):
        starts = [bisect_left(ordered, -(-q * cap // (k + 1))) for q in range(1, k + 2)]
        multiples = [q * cap // (k + 1) for q in range(1, k + 2) if (q * cap) % (k + 1) == 0]
        steps.append((k, starts, [(s, counts[s]) for s in multiples if s in counts]))
    best = 0
    for e in [0, *distinct]:
        lo = bisect_left(ordered, e)
        hi = bisect_right(ordered, cap - e)  # items [hi, n) map to cap
        for k, starts, exact in steps:
            # Value of each item scaled by k * cap: k * cap above cap - e, else
            # floor((k + 1) s / cap) * cap, or k * s when (k + 1) s is a multiple of cap.
            floors = 0
            for start in starts:
                floors += max(0, hi - max(start, lo))
            total = (n - hi) * k * cap + floors * cap
            for size, count in exact:
                if e <= size <= cap - e:
                    total -= count * size  # (k + 1) s counted, k s is the value
            best = max(best, -(-total // (k * cap)))
        if e:
            q = cap // e
            big = n - half  # items above cap/2: q - floor((cap - s) / e) each
            pieces = (cap - cap // 2) // e + 1
            if pieces < big:
                lost = 0
                for p in range(1, pieces + 1):
                    # items above cap/2 with floor((cap - s) / e) >= p: s <= cap - p e
                    lost += max(0, bisect_right(ordered, cap - p * e) - half)
            else:
                lost = sum((cap - ordered[i]) // e for i in range(half, n))
            total = big * q - lost + (half - lo)
            best = max(best, -(-total // q))
    return best


def dominant_bins(sizes: Sequence[int], cap: int) -> tuple[list[list[int]], list[int]]:
    """Bins that some optimal packing contains (Martello-Toth reduction, first criterion).

    Largest item first: while the largest remaining item ``i`` cannot share its bin with
    two other items (it and the two smallest others exceed ``cap``), some optimal packing
    puts it with the largest other item ``j`` that fits (or alone when none fits): in any
    optimal packing, ``i``'s bin holds at most one other item, no larger than ``j``, and
    swapping that item with ``j`` keeps both bins within the cap. Items must lie in
    ``0..cap``; zero-size items stay with the remaining ones (they fit anywhere).

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        ``(fixed bins, remaining item indices)``: the bins (lists of item indices, largest
        item first) and the other items, ascending; ``OPT = len(fixed) +
        OPT(remaining)``, so a packing of the remaining items with the fixed bins added is
        as good as the remaining packing is.

    Complexity: O(n log n) comparisons plus O(n) list removals of O(n) pointer moves.

    References:
        S. Martello and P. Toth, Knapsack Problems, ch. 8.3 (1990) (reduction procedure
        MTRP; this is its criterion for items that can take at most one other).

    Example:
        >>> dominant_bins([66, 46, 37, 25, 18], 100)   # 66+25, 46+37, then 18 alone
        ([[0, 3], [1, 2], [4]], [])
        >>> dominant_bins([50, 30, 20, 10], 100)   # 50 can take 20 and 10 as well
        ([], [0, 1, 2, 3])
    """
    n = len(sizes)
    if n >= 3:
        largest, low = max(sizes), heapq.nsmallest(2, sizes)
        if largest + low[0] + low[1] <= cap:
            return [], list(range(n))  # the usual case, in O(n): nothing to reduce
    order = sorted(range(n), key=sizes.__getitem__)  # stable: ties by index
    alive = [sizes[i] for i in order]  # ascending
    fixed: list[list[int]] = []
    while alive:
        top = len(alive) - 1
        largest = alive[top]
        if not largest or (top >= 2 and largest + alive[0] + alive[1] <= cap):
            break  # the largest item can hold two others: no more dominant bins here
        first = order.pop()
        alive.pop()
        pos = bisect_right(alive, cap - largest) - 1
        if pos < 0:
            fixed.append([first])
        else:
            fixed.append([first, order.pop(pos)])
            alive.pop(pos)
    return fixed, sorted(order)


#: Names of the bounds :func:`best_lower_bound` reports, cheapest first.
BOUND_NAMES = ("L2", "cardinality", "matching", "reduction", "Fekete-Schepers")


def best_lower_bound(
    sizes: Sequence[int], cap: int, enough: int | None = None, upto: str = "Fekete-Schepers"
) -> tuple[int, str]:
    """The strongest of this module's lower bounds on the bin count, and its name.

    The bounds are evaluated cheapest first, and the evaluation stops as soon as one
    reaches ``enough`` (e.g. the bin count of a packing already found, which no bound can
    exceed): a count that meets the bound needs no further proof.

    - ``"L2"``: Martello-Toth L2 (:func:`l2_lower_bound`), which includes ``ceil(sum / cap)``.
    - ``"cardinality"``: ``ceil(n / p)``, ``p`` the number of smallest items that fit in
      one bin (no bin holds more).
    - ``"matching"``: items above ``cap/3`` fit at most two to a bin; their count minus a
      maximum matching of pairs that fit (greedy two pointers on sorted sizes, optimal on
      this threshold graph) bounds the bins holding them; for every threshold ``a`` up to
      ``cap/3``, the items above ``cap - a`` have bins of their own that no item of size
      ``>= a`` can join, and the rest of the large items and the items in ``[a, cap/3]``
      need at least ``max(large-item bins, ceil(their volume / cap))`` other bins; and,
      by counts, a bin beside ``t`` large items (t = 0, 1, 2) holds at most ``q_t`` items
      of ``[a, cap/3]`` (the smallest ones that fit beside the smallest large ones), at
      most "matching" bins hold two large items, and the fewest bins that hold every item
      under these limits is a bound.
    - ``"reduction"``: the bins of the Martello-Toth reduction (an item that cannot share
      its bin with two others goes with the largest item that fits it; some optimal packing
      contains these bins) plus the best of the bounds above on the remaining items.
    - ``"Fekete-Schepers"``: ``ceil(sum f(size / cap))`` for the dual feasible functions
      ``u_k o U_e`` (k = 1..12) and ``phi_e`` of Fekete and Schepers, with at most 256
      thresholds ``e`` from the distinct sizes up to ``cap/2``, on all items and on the
      items left by the reduction (plus its bins).

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).
        enough: stop as soon as a bound reaches this value (``None``: evaluate all).
        upto: the last bound to evaluate, a name from :data:`BOUND_NAMES` (e.g.
            ``"matching"`` for the O(n log n) bounds only).

    Returns:
        ``(bound, name)``: the largest bound found and the name of the first bound (in the
        order above) that reached it. ``(0, "L2")`` for an empty or all-zero list.

    Raises:
        TypeError: a size or ``cap`` is not an integer.
        ValueError: a negative size, a size above ``cap``, ``cap < 1``, or ``upto`` not
            in :data:`BOUND_NAMES`.

    Complexity: O(n log n) for each bound but the reduction's list removals (O(n) pointer
    moves each, O(n^2) moves at worst, fast in practice) and the Fekete-Schepers family,
    which costs O(256 * 12^2 + 256 * min(n, 2 cap / e)) beyond the sort.

    References:
        S. Martello and P. Toth, "Lower bounds and reduction procedures for the bin packing
        problem", Discrete Applied Mathematics 28 (1990) (L2, reduction);
        S. P. Fekete and J. Schepers, "New classes of fast lower bounds for bin packing
        problems", Mathematical Programming 91 (2001) (dual feasible functions u_k, U_e,
        phi_e).

    Example:
        >>> best_lower_bound([6, 6, 6], 10)
        (3, 'L2')
        >>> l2_lower_bound([62, 58, 32, 27, 16], 100)
        2
        >>> best_lower_bound([62, 58, 32, 27, 16], 100)   # 62 and 58 leave room for one each
        (3, 'matching')
    """
    sizes, cap = _checked(sizes, cap)
    if upto not in BOUND_NAMES:
        raise ValueError(f"upto must be one of {', '.join(BOUND_NAMES)}, got {upto!r}")
    return _best_lower_bound(sizes, cap, enough, upto)


def _best_lower_bound(
    sizes: list[int], cap: int, enough: int | None, upto: str
) -> tuple[int, str]:
    """:func:`best_lower_bound` on sizes already checked to be ints (the planner's)."""
    last = BOUND_NAMES.index(upto)
    ordered = _in_range(sorted(sizes), cap)
    if not ordered:
        return 0, BOUND_NAMES[0]
    goal = inf if enough is None else enough
    prefix = _prefix(ordered)
    best, name = _l2_sorted(ordered, prefix, cap), BOUND_NAMES[0]

    def better(value: int, label: str) -> bool:
        """Keep the larger bound; True when the evaluation can stop."""
        nonlocal best, name
        if value > best:
            best, name = value, label
        return best >= goal or BOUND_NAMES.index(label) >= last

    if last == 0 or better(_cardinality_sorted(ordered, cap), "cardinality"):
        return best, name
    if better(_matching_sorted(ordered, prefix, cap), "matching"):
        return best, name
    fixed, rest = dominant_bins(sizes, cap)
    residual = sorted(sizes[i] for i in rest)
    residual_prefix = _prefix(residual)
    reduced = len(fixed)
    if fixed and residual:
        # No cardinality bound: the matching bound's counts at alpha = 0 dominate ceil(n / p)
        # (a bin with t large items holds at most q_t + t <= p nonzero items).
        reduced += max(
            _l2_sorted(residual, residual_prefix, cap),
            _matching_sorted(residual, residual_prefix, cap),
        )
    if better(reduced, "reduction"):
        return best, name
    value = _dff_sorted(ordered, cap)
    if fixed and residual:
        value = max(value, len(fixed) + _dff_sorted(residual, cap))
    better(value, "Fekete-Schepers")
    return best, name


def lower_bound(
    sizes: Sequence[int],
    cap: int,
    *,
    pad_to_multiple_of: int = 1,
    micro_batch_multiple_of: int = 1,
    costs: Sequence[int] | None = None,
) -> int:
    """Lower bound on the number of bins of capacity ``cap``: the best of L2, the
    cardinality bound, the large-item matching bound, the Martello-Toth reduction and the
    Fekete-Schepers dual feasible functions (see :func:`best_lower_bound` for each).

    Every packing of ``sizes`` into bins of ``cap`` tokens uses at least this many bins, so
    a packing with this many is optimal. Never below :func:`l2_lower_bound`.

    With the costs of :mod:`seqlen_balancing.cost`, the bound is on micro-batches whose
    cost is at most ``cap``: item ``i`` weighs ``costs[i]`` when given, else ``sizes[i]``
    rounded up to ``pad_to_multiple_of``, and a bin's total rounded up to
    ``micro_batch_multiple_of`` must stay within ``cap``, that is its plain total within
    ``cap // micro_batch_multiple_of * micro_batch_multiple_of``. The defaults give the
    plain bound.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).
        pad_to_multiple_of: per-item alignment in tokens (>= 1).
        micro_batch_multiple_of: per-bin rounding in tokens (>= 1).
        costs: one non-negative cost per item, replacing the aligned sizes, or ``None``.

    Returns:
        The bound (0 for an empty list or all-zero sizes).

    Raises:
        TypeError: a size, a cost, ``cap`` or a multiple is not an integer.
        ValueError: a negative size or cost, ``costs`` not one per item, a multiple below
            1, ``cap < 1``, or an item whose cost exceeds the usable cap (the message gives
            its size, its cost and that cap).

    Complexity: as :func:`best_lower_bound`: O(n log n) for a bounded family of bounds,
    plus the reduction's O(n) list removals.

    References:
        S. Martello and P. Toth, "Lower bounds and reduction procedures for the bin packing
        problem", Discrete Applied Mathematics 28 (1990);
        S. P. Fekete and J. Schepers, "New classes of fast lower bounds for bin packing
        problems", Mathematical Programming 91 (2001).

    Example:
        >>> l2_lower_bound([66, 46, 37, 25, 18], 100)
        2
        >>> lower_bound([66, 46, 37, 25, 18], 100)   # 66 takes one more item, 46 too
        3
        >>> lower_bound([250] * 65, 16384), lower_bound([250] * 65, 16384, pad_to_multiple_of=32)
        (1, 2)
    """
    pad = positive_int(pad_to_multiple_of, "pad_to_multiple_of")
    bucket = positive_int(micro_batch_multiple_of, "micro_batch_multiple_of")
    if pad == 1 and bucket == 1 and costs is None:
        return best_lower_bound(sizes, cap)[0]
    weights = sample_costs(sizes, pad_to_multiple_of=pad, costs=costs)
    given = positive_int(cap, "cap")
    usable = micro_batch_capacity(given, bucket)
    over = [i for i, w in enumerate(weights) if w > usable]
    if over:
        i = over[0]
        size = sample_costs(sizes)[i]
        raise ValueError(
            f"item {i} has size {size} and cost {weights[i]}, larger than the usable capacity "
            f"{usable} (cap {given} rounded down to a multiple of micro_batch_multiple_of="
            f"{micro_batch_multiple_of})"
        )
    return best_lower_bound(weights, usable)[0] if usable else 0


def best_fit_decreasing(sizes: Sequence[int], cap: int) -> list[list[int]]:
    """Best-fit decreasing: each item, largest first, into the fullest bin it fits.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        Bins (lists of item indices, largest item first), each summing to at most ``cap``,
        together an exact cover of ``range(n)``. At most ``11/9 OPT + 6/9`` bins.

    Raises:
        TypeError: a size or ``cap`` is not an integer.
        ValueError: a negative size, a size above ``cap``, or ``cap < 1``.

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
    sizes, cap = _checked(sizes, cap)
    residuals: list[int] = []  # ascending
    owners: list[int] = []  # bin of each residual, parallel to ``residuals``
    bins: list[list[int]] = []
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    smallest = sizes[order[-1]] if order else 0
    for i in order:
        size = sizes[i]
        if size > cap:
            raise ValueError(f"item {i} has size {size}, larger than the capacity {cap}")
        pos = bisect_left(residuals, size)
        if pos == len(residuals):
            owner = len(bins)
            bins.append([i])
            left = cap - size
        else:
            # The newest of the bins with this residual (the end of the run): popping there
            # is O(1) when all residuals are equal.
            pos = bisect_right(residuals, residuals[pos]) - 1
            left = residuals.pop(pos) - size
            owner = owners.pop(pos)
            bins[owner].append(i)
        if left < smallest:
            continue  # no item left fits this bin: keep it out of the index
        pos = bisect_right(residuals, left)  # after equal residuals: O(1) on equal sizes
        residuals.insert(pos, left)
        owners.insert(pos, owner)
    return bins


def closing_fit_decreasing(sizes: Sequence[int], cap: int) -> list[list[int]]:
    """Bin-by-bin packing that closes each bin exactly when it can.

    Each bin opens with the largest remaining item; then, while some item fits the room
    ``r``, it is closed by one remaining item of size exactly ``r``, else by two of total
    exactly ``r`` (the most even such pair: the smaller item as large as possible, so
    ``[10, 7, 6, 4, 3]`` at cap 20 closes ``10`` with ``6 + 4``), else it takes the largest
    item that fits and tries again. Early bins are thus filled to the token, and the waste
    piles up in the last bins, which suits many-items-per-bin batches where best-fit
    decreasing leaves a small gap in every bin. The pair search tries at most
    ``_CLOSING_TRIES`` sizes per step and ``16 n + 1024`` in all, so it stays O(n log n).

    It is a cheap variant of the Minimum Bin Slack idea (fill one bin at a time as fully
    as possible), restricted to closing sets of one or two items.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        Bins (lists of item indices), each summing to at most ``cap``, together an exact
        cover of ``range(n)``. Deterministic.

    Raises:
        ValueError: an item is larger than ``cap``.

    References:
        J. N. D. Gupta and J. C. Ho, "A new heuristic algorithm for the one-dimensional
        bin-packing problem", Production Planning & Control 10 (1999) (Minimum Bin Slack);
        K. Fleszar and K. S. Hindi, "New heuristics for one-dimensional bin-packing",
        Computers & OR 29 (2002).

    Example:
        >>> closing_fit_decreasing([6, 5, 4, 3, 2], 10)
        [[0, 2], [1, 3, 4]]
    """
    if not sizes:
        return []
    if max(sizes) > cap:
        raise ValueError(f"an item is larger than the capacity {cap}")
    holders: dict[int, list[int]] = {}  # size -> indices, the smallest index last
    for i in range(len(sizes) - 1, -1, -1):
        holders.setdefault(sizes[i], []).append(i)
    distinct = sorted(holders)
    tries_left = 16 * len(sizes) + 1024

    def take(size: int) -> int:
        owners = holders[size]
        i = owners.pop()
        if not owners:
            del holders[size]
            distinct.pop(bisect_left(distinct, size))
        return i

    bins: list[list[int]] = []
    while distinct:
        first = take(distinct[-1])
        current = [first]
        room = cap - sizes[first]
        while distinct and distinct[0] <= room:
            if room in holders:
                current.append(take(room))
                room = 0  # zero-size items may still join
                continue
            pos = bisect_right(distinct, room // 2) - 1
            stop = max(-1, pos - min(_CLOSING_TRIES, tries_left))
            pair = None
            while pos > stop:
                small = distinct[pos]
                large = room - small
                if large in holders and (large != small or len(holders[small]) > 1):
                    pair = (large, small)
                    break
                pos -= 1
            tries_left -= _CLOSING_TRIES if pair is None else 1
            if pair is not None:
                current.append(take(pair[0]))
                current.append(take(pair[1]))
                room = 0
                continue
            size = distinct[bisect_right(distinct, room) - 1]
            current.append(take(size))
            room -= size
        bins.append(current)
    return bins


def minimum_bin_slack(
    sizes: Sequence[int], cap: int, budget: int | None = None
) -> list[list[int]]:
    """Bin-by-bin packing that fills each bin as fully as any subset of the remaining items can.

    Each bin opens with the largest remaining item; the room left is filled by the subset of
    the other remaining items with the largest total that fits (an exact subset-sum, so a
    bin is closed to the token whenever some subset allows it). The subset sums are Python
    int bitsets (bit ``t`` set: some subset sums to ``t``), in units of the gcd of the sizes
    below the cap, so multiples of 10 against a cap such as 32768 cost a tenth of the bits
    and the unavoidable ``cap mod 10`` gap counts as full. Items are added largest first and
    the scan stops once the room can be filled exactly; the subset is read back from the
    stored bitsets preferring the larger items. Waste thus piles up in the last bins, which
    suits batches with few items per bin and little slack, where best fit leaves a small
    gap in every bin.

    This is the MBS' variant of Fleszar and Hindi (each bin keeps the largest remaining
    item), with the search over subsets replaced by an exact bitset subset-sum.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).
        budget: bound on bitset steps (items scanned) over the whole call, default
            ``20 n + 50000``; once it is spent, the remaining items are packed by best-fit
            decreasing. Deterministic.

    Returns:
        Bins (lists of item indices, largest item first), each summing to at most ``cap``,
        together an exact cover of ``range(n)``.

    Raises:
        ValueError: an item is larger than ``cap``.

    Complexity: O(budget) bitset shifts of ``cap / gcd`` bits each, plus O(n log n). When
    ``cap / gcd`` exceeds 65,536 bits it returns best-fit decreasing instead, and a bin
    scans at most ``2**26 / (cap / gcd)`` items, so time and memory stay bounded.

    References:
        J. N. D. Gupta and J. C. Ho, "A new heuristic algorithm for the one-dimensional
        bin-packing problem", Production Planning & Control 10 (1999) (Minimum Bin Slack);
        K. Fleszar and K. S. Hindi, "New heuristics for one-dimensional bin-packing",
        Computers & OR 29 (2002) (MBS', the bin keeps its largest item).

    Example:
        >>> minimum_bin_slack([6, 5, 4, 3, 2], 10)
        [[0, 2], [1, 3, 4]]
    """
    if not sizes:
        return []
    if max(sizes) > cap:
        raise ValueError(f"an item is larger than the capacity {cap}")
    n = len(sizes)
    limit = 20 * n + 50_000 if budget is None else budget
    order = sorted((i for i in range(n) if sizes[i] > 0), key=lambda i: (-sizes[i], i))
    zeros = [i for i in range(n) if sizes[i] == 0]
    negated = [-sizes[i] for i in order]  # ascending, for bisect
    unit = 0
    for size in sizes:
        if size < cap:
            unit = gcd(unit, size)
    unit = unit or 1
    if cap // unit > _MAX_BITSET_BITS:
        # A bitset that wide costs too much time and memory per step: plain best fit.
        return best_fit_decreasing(sizes, cap)
    m = len(order)
    alive = [True] * m
    bins: list[list[int]] = []
    head = work = 0
    while head < m and work < limit:
        if not alive[head]:
            head += 1
            continue
        first = order[head]
        alive[head] = False
        current = [first]
        room = cap - sizes[first]
        target = room // unit
        max_scan = max(1, _MAX_STORED_BITS // (target + 1))
        mask = (1 << (target + 1)) - 1
        reach = 1
        stored: list[int] = []  # bitset before each scanned item
        scanned: list[int] = []  # positions in ``order``
        for pos in range(max(bisect_left(negated, -room), head + 1), m):
            work += 1
            if not alive[pos]:
                continue
            if len(scanned) == max_scan:
                break  # bounds the stored bitsets to about _MAX_STORED_BITS bits
            stored.append(reach)
            scanned.append(pos)
            reach = (reach | (reach << (sizes[order[pos]] // unit))) & mask
            if reach >> target:
                break  # the room can be filled exactly
        total = reach.bit_length() - 1
        taken: list[int] = []
        for k in range(len(scanned) - 1, -1, -1):
            if not total:
                break
            if not (stored[k] >> total) & 1:  # this sum needs item k
                pos = scanned[k]
                taken.append(order[pos])
                alive[pos] = False
                total -= sizes[order[pos]] // unit
        current.extend(reversed(taken))
        bins.append(current)
    rest = [order[pos] for pos in range(m) if alive[pos]]
    if rest:
        tail = best_fit_decreasing([sizes[i] for i in rest], cap)
        bins.extend([rest[j] for j in b] for b in tail)
    if zeros:
        if bins:
            bins[0].extend(zeros)
        else:
            bins.append(zeros)
    return bins


class _FixedCount:
    """A packing into a fixed number of bins plus a pool of unplaced ("free") items.

    Every bin respects the cap at all times; the search tries to empty the free pool.
    ``work`` counts elementary steps (bisections, subset sums, copied items) so that the
    search is bounded by a deterministic budget rather than by wall-clock time. A subset
    of up to three items is encoded as one int (digits ``i + 1`` in base ``n + 1``), so
    the search allocates no tuples that the cyclic garbage collector would have to scan.
    """

    def __init__(
        self, sizes: Sequence[int], cap: int, bins: list[list[int]], free: list[int],
        seed: int,
    ) -> None:
        self.sizes = sizes
        self.cap = cap
        self.base = len(sizes) + 1
        self.bins = bins
        self.loads = [sum(sizes[i] for i in b) for b in bins]
        self.free = free
        self.work = 0
        self.rng = random.Random(seed)
        # Per bin: sorted-by-nothing parallel lists (sizes, codes) of the subsets it may
        # give up, or None when stale.
        self.outs: list[tuple[list[int], list[int]] | None] = [None] * len(bins)

    def free_weight(self) -> int:
        sizes = self.sizes
        return sum(sizes[i] for i in self.free)

    def _decode(self, code: int) -> list[int]:
        items = []
        while code:
            code, digit = divmod(code, self.base)
            items.append(digit - 1)
        return items

    def _free_sums(self) -> tuple[list[int], list[int]]:
        """Sorted distinct sums of 1-3 free items (pairs and triples only for small pools),
        with the code of one subset per sum."""
        sizes, free, base = self.sizes, self.free, self.base
        by_sum: dict[int, int] = {}
        for i in free:
            by_sum.setdefault(sizes[i], i + 1)
        f = len(free)
        if f <= _MAX_FREE_PAIRS:
            for x in range(f):
                a = free[x]
                size_a, code_a = sizes[a], (a + 1) * base
                for y in range(x + 1, f):
                    b = free[y]
                    by_sum.setdefault(size_a + sizes[b], code_a + b + 1)
            self.work += f * f // 2
        if f <= _MAX_FREE_TRIPLES:
            square = base * base
            for x in range(f):
                a = free[x]
                for y in range(x + 1, f):
                    b = free[y]
                    size_ab = sizes[a] + sizes[b]
                    code_ab = (a + 1) * square + (b + 1) * base
                    for z in range(y + 1, f):
                        c = free[z]
                        by_sum.setdefault(size_ab + sizes[c], code_ab + c + 1)
            self.work += f * f * f // 6
        keys = sorted(by_sum)
        self.work += f + len(keys)
        return keys, [by_sum[k] for k in keys]

    def _outs(self, b: int) -> tuple[list[int], list[int]]:
        outs = self.outs[b]
        if outs is None:
            sizes, base = self.sizes, self.base
            items = self.bins[b]
            out_sizes = [0]
            out_codes = [0]
            out_sizes.extend(sizes[i] for i in items)
            out_codes.extend(i + 1 for i in items)
            if len(items) <= _MAX_OUT_PAIRS:
                m = len(items)
                for x in range(m):
                    i = items[x]
                    for y in range(x + 1, m):
                        j = items[y]
                        out_sizes.append(sizes[i] + sizes[j])
                        out_codes.append((i + 1) * base + j + 1)
            outs = (out_sizes, out_codes)
            self.outs[b] = outs
        return outs

    def _best_move(self, b: int, keys: list[int], codes: list[int]) -> tuple[int, int, int]:
        """Largest load increase ``(gain, out code, in code)`` of bin ``b`` by swapping up to
        two of its items for one to three free ones (gain 0: no move)."""
        room = self.cap - self.loads[b]
        best = (0, 0, 0)
        out_sizes, out_codes = self._outs(b)
        self.work += len(out_sizes)
        for k, out_size in enumerate(out_sizes):
            pos = bisect_right(keys, out_size + room) - 1
            if pos < 0:
                continue
            gain = keys[pos] - out_size
            if gain > best[0]:
                best = (gain, out_codes[k], codes[pos])
                if gain == room:
                    break
        return best

    def _apply(self, b: int, gain: int, out_code: int, in_code: int) -> None:
        items = self.bins[b]
        out = self._decode(out_code)
        into = self._decode(in_code)
        for i in out:
            items.remove(i)
        items.extend(into)
        self.loads[b] += gain
        self.outs[b] = None
        for i in into:
            self.free.remove(i)
        self.free.extend(out)

    def descend(self, budget: int) -> None:
        """Apply load-increasing exchanges until none is left (each lowers the free weight)."""
        while self.free and self.work < budget:
            keys, codes = self._free_sums()
            moved = False
            loads = self.loads
            for b in sorted(range(len(self.bins)), key=lambda b: (loads[b], b)):
                gain, out_code, in_code = self._best_move(b, keys, codes)
                if not gain:
                    continue
                self._apply(b, gain, out_code, in_code)
                moved = True
                if not self.free or self.work >= budget:
                    return
                keys, codes = self._free_sums()
            if not moved:
                return

    def run(self, budget: int) -> bool:
        """Descend, then kick (empty random bins into the pool, descend again) while the
        budget lasts, keeping a kick unless it leaves more free weight. True on success."""
        self.descend(budget)
        weight = self.free_weight()
        n_bins = len(self.bins)
        while self.free and self.work < budget:
            saved = ([list(b) for b in self.bins], list(self.loads), list(self.free))
            for _ in range(min(_KICK_BINS, n_bins)):
                victim = self.rng.randrange(n_bins)
                self.free.extend(self.bins[victim])
                self.bins[victim] = []
                self.loads[victim] = 0
                self.outs[victim] = None
            self.work += n_bins + len(self.sizes)
            self.descend(budget)
            new_weight = self.free_weight()
            if new_weight <= weight:
                weight = new_weight
            else:
                self.bins, self.loads, self.free = saved
                self.outs = [None] * n_bins
        return not self.free


def reduce_bins(
    sizes: Sequence[int], cap: int, bins: list[list[int]], target: int,
    budget: int | None = None,
) -> list[list[int]]:
    """Try to repack ``bins`` into fewer bins, down to ``target``, by exchange local search.

    One bin at a time: the least-loaded bin is emptied into a pool of free items, and an
    iterated local search tries to place the pool into the remaining bins. Its descent
    applies, bin by bin, the exchange of up to two packed items for up to three free ones
    that raises the bin's load the most (so the free weight strictly falls and free items
    get smaller until they fit the gaps); when it stalls, a kick empties a random bin into
    the pool and descends again, and the kick is kept unless the free weight grew
    (non-improving rounds are accepted, which lets the search cross plateaus). The first
    count that cannot be reached within the budget ends the search.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens.
        bins: a packing that respects ``cap`` (not modified).
        target: stop once this many bins remain (e.g. a lower bound).
        budget: bound on move evaluations over the whole call (default ``20 n + 100000``),
            which bounds the time on any input; the search is deterministic (its random
            kicks use a seed derived from the input).

    Returns:
        A packing with at most ``len(bins)`` bins, each within ``cap``, exact cover of the
        same items.

    Complexity: O(budget) evaluations, each a bisection in the sorted sums of the pool,
    plus O(n) per kick; in practice a few milliseconds per 1,000 items.

    References:
        J. Levine and F. Ducatelle, "Ant colony optimization and local search for bin
        packing and cutting stock problems", JORS 55 (2004) (the exchange moves);
        K. Fleszar and K. S. Hindi, "New heuristics for one-dimensional bin-packing",
        Computers & OR 29 (2002) (perturbation of a fixed-count packing);
        M. Buljubasic and M. Vasquez, "Consistent neighborhood search for one-dimensional
        bin packing and two-dimensional vector packing", Computers & OR 76 (2016) (search
        over partial packings with a pool of unplaced items).
    """
    current = [list(b) for b in bins if b]
    n = sum(len(b) for b in current)
    limit = 20 * n + 100_000 if budget is None else budget
    spent = 0
    seed = (n * 1_000_003 + cap * 7919 + sum(sizes)) & 0xFFFFFFFF
    while len(current) > max(target, 1) and spent < limit:
        loads = [sum(sizes[i] for i in b) for b in current]
        victim = min(range(len(current)), key=lambda b: (loads[b], -b))
        trial = [list(b) for j, b in enumerate(current) if j != victim]
        search = _FixedCount(sizes, cap, trial, list(current[victim]), seed + len(current))
        ok = search.run(limit - spent)
        spent += search.work
        if not ok:
            break
        current = [b for b in search.bins if b]
    return current


def exact_packing(
    sizes: Sequence[int], cap: int, count: int, budget: int = 50_000
) -> tuple[list[list[int]] | None, bool]:
    """Depth-first search for a packing of ``sizes`` into at most ``count`` bins of ``cap``.

    Items go in decreasing size, each into every bin it fits in turn; bins with the same
    load are tried once per item (they are interchangeable), and a branch stops when the
    room no remaining item can use (bins whose free space is below the smallest item left)
    leaves too little for the items left. Exhausting the search proves that no packing
    into ``count`` bins exists: a lower bound of ``count + 1`` bins.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).
        count: bins available (>= 1).
        budget: items placed over the whole search before it gives up.

    Returns:
        ``(packing, False)`` with at most ``count`` non-empty bins (an exact cover of the
        items) when one is found; ``(None, True)`` when none exists; ``(None, False)``
        when the budget ran out first.

    Complexity: O(budget * count).

    References:
        S. Martello and P. Toth, "Knapsack problems" (1990), ch. 8 (branch and bound for
        bin packing: first-fit order, dominance of equal bins).
    """
    items = sorted((i for i in range(len(sizes)) if sizes[i] > 0), key=lambda i: (-sizes[i], i))
    zeros = [i for i in range(len(sizes)) if sizes[i] == 0]
    if sum(sizes[i] for i in items) > count * cap:
        return None, True
    loads = [0] * count
    where = [0] * len(items)
    left = [0] * (len(items) + 1)  # tokens of items[j:]
    for j in range(len(items) - 1, -1, -1):
        left[j] = left[j + 1] + sizes[items[j]]
    spent = 0

    def place(j: int) -> bool | None:
        """True: all placed; False: no way from here; None: the budget ran out."""
        nonlocal spent
        if j == len(items):
            return True
        size, smallest = sizes[items[j]], sizes[items[-1]]
        usable = sum(cap - load for load in loads if cap - load >= smallest)
        if usable < left[j]:
            return False
        tried: set[int] = set()
        for b in range(count):
            if loads[b] + size > cap or loads[b] in tried:
                continue
            tried.add(loads[b])
            spent += 1
            if spent > budget:
                return None
            loads[b] += size
            where[j] = b
            found = place(j + 1)
            loads[b] -= size
            if found is not False:
                return found
        return False

    outcome = place(0)
    if outcome is not True:
        return None, outcome is False
    bins: list[list[int]] = [[] for _ in range(count)]
    for j, i in enumerate(items):
        bins[where[j]].append(i)
    packing = [b for b in bins if b]
    if zeros:
        if packing:
            packing[0].extend(zeros)
        else:
            packing = [zeros]
    return packing, False


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

    Complexity: O(bins + (count - len(bins)) * log(count) + sum of m log m over the split
    bins), with m a split bin's item count: O(n log^2 n) at worst, when one bin of n items
    is split down to single items.
    """
    result = [list(b) for b in bins]
    n_items = sum(len(b) for b in result)
    if not len(result) <= count <= n_items:
        raise ValueError(f"cannot split {len(result)} bins of {n_items} items into {count}")
    # Splittable bins keyed by (-load, index): the heaviest first, the lowest index on ties.
    heap = [(-sum(sizes[i] for i in b), k) for k, b in enumerate(result) if len(b) > 1]
    heapq.heapify(heap)
    while len(result) < count:
        heaviest = heapq.heappop(heap)[1]
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
        for k, load in ((heaviest, load_first), (len(result) - 1, load_second)):
            if len(result[k]) > 1:
                heapq.heappush(heap, (-load, k))
    return result
