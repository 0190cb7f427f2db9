"""When a micro-batch fits and what it costs: the one rule every algorithm takes (no torch).

The planner packs *items*: single samples, or groups of samples that must share a
micro-batch (``force_group_size`` consecutive samples today; any group later). A
:class:`Rule` says, for any set of items, what the micro-batch costs and whether it fits:

* **summed costs** (the default): a micro-batch costs the sum of its items' costs, each
  the summed effective lengths, aligned lengths (``pad_to_multiple_of``) or given
  ``costs`` of its samples; with ``micro_batch_multiple_of = b`` the sum is rounded up to
  ``b`` before it meets ``max_token_len``, which is the same as a usable cap of
  ``max_token_len // b * b`` (:func:`~seqlen_balancing.cost.micro_batch_capacity`), so
  :attr:`Rule.cap` is that usable cap;
* **padded** (``padded=True``): every row of a micro-batch is as wide as its widest row, so
  it costs ``rows x width``, ``width = ceil((max left + max right) / p) * p`` where each
  item spans ``left`` columns to the left of a column every row shares and ``right`` to
  its right (a right-padded row of ``s`` tokens: ``(0, s)``; verl's left-padded prompt
  and right-padded response: ``(prompt, response)``; a row that ends before that column,
  as a right-padded row beside left-padded ones, has a negative ``right``, so the width is
  still the hull of the rows' columns), rounded up to ``b`` like the sum;
* **at most N samples** (``max_samples_per_micro_batch``): the rows of a micro-batch (its
  samples, not its items) number at most :attr:`Rule.limit`;

and any combination of them. Splitting a micro-batch never breaks any of them (fewer rows,
no wider, a smaller sum), so every count from the fewest up to the number of items is
feasible.

:class:`Loads` is the rule's per-micro-batch state: adding an item or asking whether it
fits costs O(1), whatever the rule. :meth:`Rule.restrict` gives the rule of a subset of
the items (the rest of a batch once its over-cap items are set aside).

The rule's lower bounds (:func:`rule_bound`) are the bin-packing bounds of
:mod:`seqlen_balancing.planning.bounds` on the summed costs, the same bounds on the rows against the
sample limit, and, for padded micro-batches, the **sorted rule** (:func:`fewest_sorted`):
consecutive slices of the items sorted widest first, each as long as the rule allows,
which is the fewest padded micro-batches when the rows share one side (proof there).
:func:`lower_bound` is the public, cost-aware bound built on them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import islice

from seqlen_balancing._checks import positive_int, switch
from seqlen_balancing.cost import aligned_length, micro_batch_capacity, sample_costs
from seqlen_balancing.planning.bounds import BOUND_NAMES, _best_lower_bound, best_lower_bound, dominant_bins

__all__ = [
    "SAMPLE_LIMIT",
    "SORTED_RULE",
    "Loads",
    "Rule",
    "fewest_sorted",
    "lower_bound",
    "rule_bound",
    "sorted_bound",
    "sorted_cut",
    "widest_first",
]

#: ``bound_name`` of the padded count's bound (:func:`sorted_bound`).
SORTED_RULE = "padded sorted rule"

#: ``bound_name`` of the bound on the rows against ``max_samples_per_micro_batch``.
SAMPLE_LIMIT = "samples per micro-batch"


@dataclass(frozen=True, eq=False)
class Rule:
    """When a micro-batch of items fits, and what it costs.

    Build one with :meth:`sums` or :meth:`padded`.

    Attributes:
        cap: the usable cap: tokens (summed costs) or token positions (padded), already
            rounded down to ``micro_batch_multiple_of``.
        sizes: per item, what it costs alone: its summed cost in tokens, or (padded) its
            footprint ``rows x its own width``. Adding the item to any micro-batch raises
            its cost by at least this much (a padded width never shrinks).
        rows: per item, its samples (1 for a single sample); what the sample limit counts
            and what a padded width is multiplied by.
        limit: rows per micro-batch at most (``max_samples_per_micro_batch``), or ``None``.
        left, right: padded only: per item, its widest extent left and right of the shared
            column (``None`` for summed costs).
        pad: padded only: a width is rounded up to a multiple of this
            (``pad_to_multiple_of``).
        filled: padded only: every non-empty micro-batch holds this many rows, its real
            rows topped up with filler rows as wide as it (``equal_rows_per_micro_batch``),
            so it costs ``filled x width``; ``None``: its own rows.

    Items may have different rows (groups of different sizes): nothing here assumes they
    are equal. Every method is O(len(items)); :class:`Loads` answers for one more item in
    O(1).

    Example:
        >>> rule = Rule.sums([300, 500, 200], 800, rows=[1, 2, 1], limit=3)
        >>> rule.fits([0, 1]), rule.fits([1, 2]), rule.fits([0, 1, 2])
        (True, True, False)
    """

    cap: int
    sizes: list[int]
    rows: list[int]
    limit: int | None = None
    left: list[int] | None = None
    right: list[int] | None = None
    pad: int = 1
    filled: int | None = None

    @classmethod
    def sums(
        cls, sizes: list[int], cap: int, rows: list[int] | None = None, limit: int | None = None
    ) -> Rule:
        """The summed-cost rule: a micro-batch fits when its items' ``sizes`` add up to at
        most ``cap`` (and, with ``limit``, its ``rows`` to at most ``limit``).

        Example:
            >>> Rule.sums([5, 7, 3], 10).fits([0, 2]), Rule.sums([5, 7, 3], 10, limit=1).fits([0, 2])
            (True, False)
        """
        return cls(cap, sizes, [1] * len(sizes) if rows is None else rows, limit)

    @classmethod
    def padded(
        cls, left: list[int], right: list[int], cap: int, rows: list[int] | None = None,
        pad: int = 1, limit: int | None = None, filled: int | None = None,
    ) -> Rule:
        """The padded rule: a micro-batch costs its rows times ``ceil((max left + max
        right) / pad) * pad`` and fits when that is at most ``cap`` (and, with ``limit``,
        its rows are at most ``limit``).

        Example:
            >>> rule = Rule.padded([0, 0, 0], [100, 10, 10], 150)
            >>> rule.cost([1, 2]), rule.cost([0, 1]), rule.fits([0, 1])
            (20, 200, False)
        """
        counts = [1] * len(right) if rows is None else rows
        sizes = [
            (filled or k) * aligned_length(a + b, pad)
            for k, a, b in zip(counts, left, right, strict=True)
        ]
        return cls(cap, sizes, counts, limit, left, right, pad, filled)

    @property
    def is_padded(self) -> bool:
        """True when a micro-batch costs rows x its widest row."""
        return self.left is not None

    @property
    def plain(self) -> bool:
        """True for summed costs with no sample limit: the fast paths' case."""
        return self.left is None and self.limit is None

    @property
    def n(self) -> int:
        """Number of items."""
        return len(self.sizes)

    @cached_property
    def dominant(self) -> tuple[list[list[int]], list[int]]:
        """:func:`~seqlen_balancing.planning.bounds.dominant_bins` of the sizes under the cap, made
        once for the bound and the exchange search (callers copy before changing it)."""
        return dominant_bins(self.sizes, self.cap)

    @cached_property
    def unit_rows(self) -> bool:
        """True when every item is one row (single samples). O(n), once."""
        return all(k == 1 for k in self.rows)

    def width(self, items: Sequence[int]) -> int:
        """A padded micro-batch's width in token positions (0 for no items)."""
        if not items or self.left is None or self.right is None:
            return 0
        return aligned_length(max(self.left[i] for i in items) + max(self.right[i] for i in items), self.pad)

    def cost(self, items: Sequence[int]) -> int:
        """What the micro-batch of ``items`` holds: rows x width when padded, else the
        summed costs (before the bucket: the cap is already the usable one)."""
        if self.left is None:
            return sum(map(self.sizes.__getitem__, items))
        if self.filled and items:
            return self.filled * self.width(items)
        return sum(self.rows[i] for i in items) * self.width(items)

    def fits(self, items: Sequence[int]) -> bool:
        """True when the micro-batch of ``items`` costs at most the cap and holds at most
        ``limit`` rows. O(len(items))."""
        if self.limit is not None and sum(self.rows[i] for i in items) > self.limit:
            return False
        return self.cost(items) <= self.cap

    def fits_alone(self, item: int) -> bool:
        """True when ``item`` fits a micro-batch of its own."""
        return self.sizes[item] <= self.cap and (self.limit is None or self.rows[item] <= self.limit)

    def restrict(self, items: Sequence[int]) -> Rule:
        """The same rule on ``items`` only, renumbered ``0..len(items)-1`` in that order."""
        left = None if self.left is None else [self.left[i] for i in items]
        right = None if self.right is None else [self.right[i] for i in items]
        return Rule(self.cap, [self.sizes[i] for i in items], [self.rows[i] for i in items], self.limit,
                    left, right, self.pad, self.filled)

    @cached_property
    def by_size(self) -> list[int]:
        """The items by decreasing cost alone (:attr:`sizes`), ties by index: the order of
        best fit decreasing and, for workloads that grow with the cost, of LPT. Made once
        per rule (O(n log n)); callers never change it."""
        sizes = self.sizes
        return sorted(range(len(sizes)), key=sizes.__getitem__, reverse=True)  # stable: index

    def by_workload(self, workloads: Sequence[int]) -> tuple[list[int], bool]:
        """The items by ``(-workload, -cost alone, index)`` (LPT's order) and whether it
        differs from :attr:`by_size` (False where the workloads fall along it, as verl's
        of the lengths do: O(n) then). Callers change neither the list nor the order."""
        order = self.by_size
        if falls(list(map(workloads.__getitem__, order))):
            return order, False
        return sorted(order, key=workloads.__getitem__, reverse=True), True


def falls(values: Sequence[int]) -> bool:
    """True when ``values`` never grow along the sequence."""
    return all(map(operator.ge, values, islice(values, 1, None)))


class Loads:
    """The per-micro-batch state of a :class:`Rule`: items are added one at a time and
    :attr:`fits` answers in O(1) whether one more fits, whatever the rule.

    Attributes:
        rule: the rule.
        cost: per micro-batch, what it costs now (summed costs, or rows x width).
        rows: per micro-batch, its rows.
        left, right: padded only: per micro-batch, its widest extents.
        fits: ``fits(b, i)``: True when item ``i`` fits micro-batch ``b``. O(1).
        add: ``add(b, i)``: put item ``i`` into micro-batch ``b``. O(1).
    """

    __slots__ = ("add", "cost", "fits", "left", "right", "rows", "rule")

    def __init__(self, rule: Rule, count: int) -> None:
        self.rule = rule
        self.cost = [0] * count
        self.rows = [0] * count
        self.left = [0] * count if rule.is_padded else []
        self.right = [_NO_RIGHT] * count if rule.is_padded else []
        self.fits, self.add = _summed(self) if rule.left is None else _padded(self)

    @classmethod
    def of(cls, rule: Rule, bins: Sequence[Sequence[int]]) -> Loads:
        """The state of the micro-batches ``bins`` (lists of items). O(n)."""
        loads = cls(rule, len(bins))
        for b, items in enumerate(bins):
            loads.rows[b] = len(items) if rule.unit_rows else sum(map(rule.rows.__getitem__, items))
            loads._price(b, items)
        return loads

    def open(self) -> int:
        """Add an empty micro-batch; return its index."""
        self.cost.append(0)
        self.rows.append(0)
        if self.rule.is_padded:
            self.left.append(0)
            self.right.append(_NO_RIGHT)
        return len(self.cost) - 1

    def remove(self, b: int, item: int, rest: Sequence[int]) -> None:
        """Take ``item`` out of micro-batch ``b``, whose items are now ``rest``. O(1) for
        summed costs, O(len(rest)) padded (its widest extents are recomputed)."""
        self.rows[b] -= self.rule.rows[item]
        if self.rule.is_padded:
            self._price(b, rest)
        else:
            self.cost[b] -= self.rule.sizes[item]

    def _price(self, b: int, items: Sequence[int]) -> None:
        """Micro-batch ``b``'s cost (padded: and widest extents) from its ``items``, its
        rows already counted."""
        rule = self.rule
        if rule.left is None or rule.right is None:
            self.cost[b] = sum(map(rule.sizes.__getitem__, items))
            return
        self.left[b] = max((rule.left[i] for i in items), default=0)
        self.right[b] = max((rule.right[i] for i in items), default=_NO_RIGHT)
        rows = rule.filled if rule.filled and self.rows[b] else self.rows[b]  # filler rows cost too
        self.cost[b] = rows * aligned_length(self.left[b] + self.right[b], rule.pad) if rows else 0


#: The right extent of an empty padded micro-batch: below any row's (a row's ``right`` is
#: negative when it ends before the shared column), so the first row sets it.
_NO_RIGHT = -(1 << 62)


_Check = Callable[[int, int], bool]
_Add = Callable[[int, int], None]


def _summed(loads: Loads) -> tuple[_Check, _Add]:
    """``(fits, add)`` of summed costs; without a limit, one comparison per check."""
    rule, cost, rows = loads.rule, loads.cost, loads.rows
    sizes, counts, cap, limit = rule.sizes, rule.rows, rule.cap, rule.limit

    def fits_plain(b: int, i: int) -> bool:
        return cost[b] + sizes[i] <= cap

    def fits_limited(b: int, i: int) -> bool:
        return cost[b] + sizes[i] <= cap and rows[b] + counts[i] <= limit  # type: ignore[operator]

    def add(b: int, i: int) -> None:
        cost[b] += sizes[i]
        rows[b] += counts[i]

    return (fits_plain if limit is None else fits_limited), add


def _padded(loads: Loads) -> tuple[_Check, _Add]:
    """``(fits, add)`` of the padded rule: rows x the aligned width of the widest extents."""
    rule, cost, rows, left, right = loads.rule, loads.cost, loads.rows, loads.left, loads.right
    item_left, item_right = rule.left or [], rule.right or []
    counts, cap, pad = rule.rows, rule.cap, rule.pad
    limit, filled = rule.limit, rule.filled

    # Comparisons rather than max(): these run once per check, in every padded algorithm.
    def fits(b: int, i: int) -> bool:
        total = rows[b] + counts[i]
        if limit is not None and total > limit:
            return False
        a, x = left[b], item_left[i]
        c, y = right[b], item_right[i]
        span = (a if a > x else x) + (c if c > y else y)
        return (filled or total) * (-(-span // pad) * pad) <= cap

    def add(b: int, i: int) -> None:
        total = rows[b] = rows[b] + counts[i]
        a, x = left[b], item_left[i]
        c, y = right[b], item_right[i]
        if x > a:
            left[b] = a = x
        if y > c:
            right[b] = c = y
        cost[b] = (filled or total) * (-(-(a + c) // pad) * pad)

    return fits, add


def widest_first(rule: Rule) -> list[int]:
    """The items widest first (``left + right``; summed costs: largest first), then more
    rows first, ties by index. O(n log n)."""
    if rule.left is None or rule.right is None:
        return list(rule.by_size)
    left, right, rows = rule.left, rule.right, rule.rows
    return sorted(range(len(right)), key=lambda i: (-(left[i] + right[i]), -rows[i], i))


def sorted_cut(
    rule: Rule, order: Sequence[int], workloads: Sequence[int] = (), most: float = math.inf
) -> list[list[int]]:
    """Cut ``order`` into consecutive micro-batches, each as long as ``rule`` allows.

    Args:
        rule: a :class:`Rule` under which every item fits alone.
        order: the items in the order to cut them.
        workloads: per item, or empty: with ``most``, a micro-batch also ends before its
            workload would pass ``most``.
        most: the workload a micro-batch may reach (default: no limit).

    Returns:
        Consecutive slices of ``order`` (non-empty lists of items), each fitting ``rule``.

    Complexity: O(n).

    Example:
        >>> sorted_cut(Rule.padded([0] * 5, [100, 100, 10, 10, 10], 150), [0, 1, 2, 3, 4])
        [[0], [1], [2, 3, 4]]
    """
    bins: list[list[int]] = []
    loads = Loads(rule, 0)
    load = 0
    for i in order:
        work = workloads[i] if workloads else 0
        if not bins or load + work > most or not loads.fits(len(bins) - 1, i):
            bins.append([])
            loads.open()
            load = 0
        load += work
        bins[-1].append(i)
        loads.add(len(bins) - 1, i)
    return bins


def fewest_sorted(rule: Rule) -> list[list[int]]:
    """The fewest padded micro-batches: the sorted rule on the items, widest first.

    **Optimal when the rows share one side** (``left`` all equal: right-padded rows,
    left-padded rows, or any list of lengths) **and every item has the same rows**. Let
    the items be sorted by width, widest first (ties by index), and let a bin's *head* be
    its earliest item in that order (its widest).

    1. *Some optimal packing cuts the order into consecutive slices.* Take any packing
       that fits, its bins ordered by their heads' positions ``h_1 < h_2 < ... < h_m``,
       with ``c_1, ..., c_m`` items. Every item before ``h_j`` lies in one of the bins
       ``1..j-1`` (a bin whose head comes later holds nothing earlier than its head), so
       ``h_j <= c_1 + ... + c_{j-1} + 1``. Refill the bins with consecutive slices of
       the order, ``c_1`` items, then ``c_2``, and so on: slice ``j`` starts at position
       ``c_1 + ... + c_{j-1} + 1 >= h_j``, so its widest item is no wider than bin
       ``j``'s head. Each bin keeps its number of items (so its rows, the items having
       equal rows) and gets no wider, so it still fits, and there are still ``m``.
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
    bin's cost grows with its item count and its head's width, which holds for
    ``rows x width`` with any ``pad`` and sample limit.

    Rows padded on both sides (``left`` not all equal) make the width of a bin a sum of
    two maxima, which no single order sorts: the widest-first order, the left-first and the
    right-first orders are each cut by the rule and the fewest bins kept (feasible, not
    proven optimal; :func:`sorted_bound` is then a bound, not the count). Items of
    different rows break step 1's refill (a slice may hold more rows than the bin it
    replaces): the cut is then feasible, not proven optimal either.

    Args:
        rule: a padded :class:`Rule` under which every item fits alone.

    Returns:
        Micro-batches as lists of items, consecutive in the order used.

    Complexity: O(n log n).

    Example:
        >>> fewest_sorted(Rule.padded([0] * 5, [100, 10, 10, 10, 100], 150))
        [[0], [4], [1, 2, 3]]
    """
    orders = [widest_first(rule)]
    if rule.left is not None and rule.right is not None and len(set(rule.left)) > 1:
        left, right, n = rule.left, rule.right, rule.n
        orders.append(sorted(range(n), key=lambda i: (-left[i], -right[i], i)))
        orders.append(sorted(range(n), key=lambda i: (-right[i], -left[i], i)))
    return min((sorted_cut(rule, order) for order in orders), key=len)


def sorted_bound(rule: Rule) -> int:
    """A lower bound on the padded micro-batch count: the sorted rule's count on a
    relaxation with one-sided rows of equal rows, which :func:`fewest_sorted` solves
    exactly. Each item is taken as spanning ``left + right`` on one side (a bin of
    two-sided rows is at least as wide as its widest row's span); items of different rows
    are taken row by row (groups split apart can only pack tighter). Exact when the rows
    share one side and the items have equal rows.

    Complexity: O(n log n) (O(samples log samples) for items of different rows).

    Example:
        >>> sorted_bound(Rule.padded([0] * 5, [100, 10, 10, 10, 100], 150))
        3
    """
    if rule.left is None or rule.right is None:
        raise ValueError("sorted_bound needs a padded rule")
    spans = [a + b for a, b in zip(rule.left, rule.right, strict=True)]
    rows = rule.rows
    if len(set(rows)) > 1:  # split every item into its rows
        spans = [span for span, k in zip(spans, rows, strict=True) for _ in range(k)]
        rows = [1] * len(spans)
    flat = Rule.padded([0] * len(spans), spans, rule.cap, rows, rule.pad, rule.limit, rule.filled)
    return len(sorted_cut(flat, widest_first(flat)))


def rule_bound(
    rule: Rule, enough: int | None = None, upto: str = BOUND_NAMES[-1]
) -> tuple[int, str]:
    """The best lower bound on the micro-batch count under ``rule``, and its name.

    * summed costs: ``best_lower_bound`` (``seqlen_balancing.planning.bounds``) on the sizes and the
      cap (its names: ``"L2"``, ``"cardinality"``, ...), evaluated up to ``upto`` and only
      until it reaches ``enough``;
    * padded: :func:`sorted_bound` (``"padded sorted rule"``);
    * with a sample limit, also the same bounds on the items' rows against the limit
      (``"samples per micro-batch"``; with single samples, ``ceil(n / limit)``).

    Args:
        rule: a :class:`Rule` under which every item fits alone.
        enough: stop once a bound reaches this (``None``: evaluate all).
        upto: the last of ``BOUND_NAMES`` (``seqlen_balancing.planning.bounds``) to evaluate.

    Returns:
        ``(bound, name)``; ``(0, "L2")`` for no items (or only zero-cost ones).

    Complexity: O(n log n), as ``best_lower_bound`` (``seqlen_balancing.planning.bounds``).

    Example:
        >>> rule_bound(Rule.sums([100] * 64, 16384, limit=16))
        (4, 'samples per micro-batch')
    """
    if rule.is_padded:
        bound, name = sorted_bound(rule), SORTED_RULE
    else:
        bound, name = _best_lower_bound(rule.sizes, rule.cap, enough, upto, lambda: rule.dominant)
    if rule.limit is not None and (enough is None or bound < enough) and rule.rows:
        by_rows, _ = _best_lower_bound(rule.rows, rule.limit, enough, upto)
        if by_rows > bound:
            bound, name = by_rows, SAMPLE_LIMIT
    return bound, name


def lower_bound(
    sizes: Sequence[int],
    cap: int,
    *,
    pad_to_multiple_of: int = 1,
    micro_batch_multiple_of: int = 1,
    costs: Sequence[int] | None = None,
    padded: bool = False,
    max_samples_per_micro_batch: int | None = None,
) -> int:
    """Lower bound on the number of micro-batches of at most ``cap`` under the one rule:
    the best of L2, the cardinality bound, the large-item matching bound, the Martello-Toth
    reduction and the Fekete-Schepers dual feasible functions (see
    ``best_lower_bound`` (``seqlen_balancing.planning.bounds``) for each) on the costs.

    Every packing of ``sizes`` into bins of ``cap`` tokens uses at least this many bins, so
    a packing with this many is optimal. Never below
    :func:`~seqlen_balancing.l2_lower_bound`.

    With the costs of :mod:`seqlen_balancing.cost`, the bound is on micro-batches whose
    cost is at most ``cap``: item ``i`` weighs ``costs[i]`` when given, else ``sizes[i]``,
    rounded up to ``pad_to_multiple_of``, and a bin's total rounded up to
    ``micro_batch_multiple_of`` must stay within ``cap``, that is its plain total within
    ``cap // micro_batch_multiple_of * micro_batch_multiple_of``. The defaults give the
    plain bound.

    With ``padded=True`` a bin costs its number of items times its widest item (each
    item's width its cost or size rounded up to ``pad_to_multiple_of``), and the bound is
    the fewest such bins exactly: the sorted rule of
    :func:`~seqlen_balancing.planning.rule.fewest_sorted`, optimal by the
    argument given there (1 for a non-empty list of zero widths: rows take room even when
    empty). With ``max_samples_per_micro_batch = N`` no bin holds more than ``N`` items,
    and the bound is at least ``ceil(n / N)``.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).
        pad_to_multiple_of: per-item alignment in tokens (>= 1).
        micro_batch_multiple_of: per-bin rounding in tokens (>= 1).
        costs: one non-negative cost per item, replacing the sizes (and rounded up to
            ``pad_to_multiple_of`` like them), or ``None``.
        padded: a bin costs items x its widest item instead of the sum.
        max_samples_per_micro_batch: items per bin at most (>= 1), or ``None``.

    Returns:
        The bound (0 for an empty list, or all-zero sizes when not ``padded``).

    Raises:
        TypeError: a size, a cost, ``cap`` or a multiple is not an integer.
        ValueError: a negative size or cost, ``costs`` not one per item, a multiple below
            1, ``cap < 1``, or an item whose cost exceeds the usable cap (the message gives
            its size, its cost and that cap).

    Complexity: as ``best_lower_bound``: O(n log n) for a bounded family of bounds,
    plus the reduction's O(n) list removals.

    References:
        S. Martello and P. Toth, "Lower bounds and reduction procedures for the bin packing
        problem", Discrete Applied Mathematics 28 (1990);
        S. P. Fekete and J. Schepers, "New classes of fast lower bounds for bin packing
        problems", Mathematical Programming 91 (2001).

    Example:
        >>> lower_bound([66, 46, 37, 25, 18], 100)   # 66 takes one more item, 46 too
        3
        >>> lower_bound([250] * 65, 16384), lower_bound([250] * 65, 16384, pad_to_multiple_of=32)
        (1, 2)
        >>> lower_bound([100, 10, 10, 10, 100], 150, padded=True)
        3
        >>> lower_bound([100] * 64, 16384, max_samples_per_micro_batch=16)
        4
    """
    pad = positive_int(pad_to_multiple_of, "pad_to_multiple_of")
    bucket = positive_int(micro_batch_multiple_of, "micro_batch_multiple_of")
    on = switch(padded, "padded")
    most = (
        None if max_samples_per_micro_batch is None
        else positive_int(max_samples_per_micro_batch, "max_samples_per_micro_batch")
    )
    if not on and most is None and pad == 1 and bucket == 1 and costs is None:
        return best_lower_bound(sizes, cap)[0]
    lengths = sample_costs(sizes)
    given = positive_int(cap, "cap")
    usable = micro_batch_capacity(given, bucket)
    if on:  # each row's width: its cost or size, aligned by the rule
        rule = Rule.padded([0] * len(lengths), sample_costs(sizes, costs=costs), usable, pad=pad, limit=most)
    else:
        rule = Rule.sums(sample_costs(sizes, pad_to_multiple_of=pad, costs=costs), usable, limit=most)
    _refuse_over_cap(rule, lengths, given, bucket, on)
    if not rule.n or not (usable or on):
        return 0
    return rule_bound(rule)[0]


def _refuse_over_cap(rule: Rule, lengths: list[int], cap: int, bucket: int, padded: bool) -> None:
    """:func:`lower_bound`'s ``ValueError`` for the first item whose cost is over the
    usable cap (the sample limit is at least 1, so one item always fits it)."""
    i = next((i for i, cost in enumerate(rule.sizes) if cost > rule.cap), None)
    if i is None:
        return
    where = f"cap {cap} rounded down to a multiple of micro_batch_multiple_of={bucket}"
    if padded:
        raise ValueError(
            f"item {i} has size {lengths[i]} and, padded, a width of {rule.sizes[i]} (1 row x "
            f"{rule.sizes[i]} token positions), larger than the usable capacity {rule.cap} "
            f"({where})"
        )
    raise ValueError(
        f"item {i} has size {lengths[i]} and cost {rule.sizes[i]}, larger than the usable "
        f"capacity {rule.cap} ({where})"
    )
