"""Lower bounds on the number of micro-batches (bins) a list of sizes needs under a cap.

L1 (``ceil(total / cap)``), the Martello-Toth L2 bound, a cardinality bound, a matching bound
on items above a third of the cap, the Martello-Toth reduction (dominant bins) and the dual
feasible functions of Fekete and Schepers, cheapest first (:func:`best_lower_bound`), on
plain lists of sizes against a cap. The bounds under the one rule (costs, padded rows, the
sample limit) and the cost-aware :func:`~seqlen_balancing.planning.rule.lower_bound` build on them
in :mod:`seqlen_balancing.planning.rule`. Pure integer arithmetic; none of it needs torch.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import accumulate
from math import inf

from seqlen_balancing._checks import as_list, non_negative_ints, positive_int

__all__ = [
    "BOUND_NAMES",
    "best_lower_bound",
    "dominant_bins",
    "l1_lower_bound",
    "l2_lower_bound",
]


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
    return _l2_sorted(ordered, list(accumulate(ordered, initial=0)), cap)


def _in_range(ordered: list[int], cap: int) -> list[int]:
    if ordered and ordered[-1] > cap:
        raise ValueError(f"item sizes must lie in 0..{cap}, got {ordered[0]}..{ordered[-1]}")
    return ordered


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


def _cardinality_sorted(ordered: list[int], prefix: list[int], cap: int) -> int:
    """``ceil(n / p)``, ``p`` the most items any bin can hold (the smallest ones that fit)."""
    if not ordered or not ordered[-1]:
        return 0  # no tokens: no bin needed (as L2 says)
    per_bin = bisect_right(prefix, cap) - 1  # >= 1: the smallest item fits (<= cap)
    return -(-len(ordered) // per_bin)


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
        candidates.add(min((-a) // b, pairs))
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
    half = bisect_right(ordered, cap // 2)
    distinct = _thresholds(ordered, half)
    counts = Counter(ordered)
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
            floors = sum(max(0, hi - max(start, lo)) for start in starts)
            # (k + 1) s counted where k s is the value
            total = (n - hi) * k * cap + floors * cap - sum(c * s for s, c in exact if e <= s <= cap - e)
            best = max(best, -(-total // (k * cap)))
        if e:
            q = cap // e
            big = n - half  # items above cap/2: q - floor((cap - s) / e) each
            pieces = (cap - cap // 2) // e + 1
            if pieces < big:
                # items above cap/2 with floor((cap - s) / e) >= p: s <= cap - p e
                lost = sum(max(0, bisect_right(ordered, cap - p * e) - half) for p in range(1, pieces + 1))
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
    if n >= 3 and max(sizes) + sum(heapq.nsmallest(2, sizes)) <= cap:
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
    sizes: list[int], cap: int, enough: int | None, upto: str,
    reduction: Callable[[], tuple[list[list[int]], list[int]]] | None = None,
) -> tuple[int, str]:
    """:func:`best_lower_bound` on sizes already checked to be ints (the planner's);
    ``reduction`` gives :func:`dominant_bins` of the same sizes and cap when already made."""
    last = BOUND_NAMES.index(upto)
    ordered = _in_range(sorted(sizes), cap)
    if not ordered:
        return 0, BOUND_NAMES[0]
    goal = inf if enough is None else enough
    prefix = list(accumulate(ordered, initial=0))
    best, name = _l2_sorted(ordered, prefix, cap), BOUND_NAMES[0]

    def better(value: int, label: str) -> bool:
        """Keep the larger bound; True when the evaluation can stop."""
        nonlocal best, name
        if value > best:
            best, name = value, label
        return best >= goal or BOUND_NAMES.index(label) >= last

    if last == 0 or better(_cardinality_sorted(ordered, prefix, cap), "cardinality"):
        return best, name
    if better(_matching_sorted(ordered, prefix, cap), "matching"):
        return best, name
    fixed, rest = dominant_bins(sizes, cap) if reduction is None else reduction()
    residual = sorted(sizes[i] for i in rest)
    residual_prefix = list(accumulate(residual, initial=0))
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
