"""Equal rows per micro-batch (``equal_rows_per_micro_batch``), on plain integer lists (no torch).

Pipeline parallelism takes one micro-batch size for every micro-batch of a step
(Megatron's schedule; DeepSpeed's pipeline engine), while token-budget micro-batches hold
different numbers of rows. With the option on, every micro-batch of a plan holds the
same number of rows ``R``: the real rows, then ``R - real`` **filler rows**, zero-weight
rows of one token, built from a real row's first token (loss weights zero, as dummy
micro-batches' are, :mod:`seqlen_balancing.batch.filler`). Filler rows reach the GPU, so
the cap counts them, at what the rule allows them to cost and no more:

* **summed costs**: a filler row costs one token ``c`` (aligned to ``pad_to_multiple_of``;
  with the caller's ``costs``, the cheapest sample's cost: :func:`filler_cost`): a
  micro-batch of real cost ``C`` and ``k`` rows costs ``C + (R - k) c``. That is the
  summed rule with each item's cost lowered by ``rows x c`` and the cap by ``R x c``, and
  at most ``R`` rows (:func:`rows_rule`), so every algorithm of the plan runs on it
  unchanged; a filler row of one token keeps the count within a few of the count without
  the option (a copy of a real row made a long sample's micro-batch hold one row);
* **padded** (``padded=True``): a filler row, padded to the micro-batch's width as every
  row is, costs that width: the micro-batch costs ``R x width``
  (:attr:`~seqlen_balancing.planning.rule.Rule.filled`).

Splitting a micro-batch keeps it within that rule (each row taken out costs at least a
filler row's ``c``; a padded part is no wider), so a plan for ``R`` rows at ``K``
micro-batches gives one at every larger count. :func:`search_rows` finds a rank's own
count: the fewest micro-batches ``K`` (at least the count without the option) at which
some row count fits, from the balanced ``ceil(rows / K)`` up (the capacity-aware LPT
packing on the filled costs evens rows and tokens at once). A DP group agrees in its one
collective on the largest ``K``; then :func:`rows_at` finds each rank's fewest rows at that
count, with its **tolerance** (the most rows its plans' micro-batches can be topped up to
under the cap), and a second small collective agrees on the largest ``R`` any rank needs;
a rank whose tolerance is below ``R`` is the group's error
(:class:`~seqlen_balancing.errors.RowsOverCap`).

Why: Megatron's pipeline schedule takes one ``micro_batch_size`` per step, so SkyRL pads
token-based micro-batches to the largest row count (SkyRL PR #1477); DeepSpeed's pipeline
engine needs the same batch size across micro-batches (DeepSpeedExamples PR #963).
Padding a plan afterwards breaks its cap; here the filler rows are planned.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from seqlen_balancing.cost import aligned_length
from seqlen_balancing.errors import RowsOverCap
from seqlen_balancing.planning.analysis import RankAnalysis, RowsAt
from seqlen_balancing.planning.balance import lpt
from seqlen_balancing.planning.partition import roundup_divisible
from seqlen_balancing.planning.rule import Rule
from seqlen_balancing.planning.search import search_count

__all__ = [
    "UNBOUNDED_ROWS",
    "RowIndices",
    "RowsAt",
    "empty_rank_plan",
    "empty_rank_tolerance",
    "filled_plan",
    "most_rows",
    "rows_at",
    "rows_rule",
    "rows_view",
    "search_rows",
]

#: The tolerance of a rank whose filler rows cost nothing (any number of rows fits).
UNBOUNDED_ROWS = 1 << 40

#: Row counts tried per micro-batch count, from the balanced one up.
_ROW_TRIES = 3

#: Counts one rank tries at most before it falls back to every item alone.
_SEARCH_BUDGET = 8

#: Up to this many items, every row count is tried at each count.
_EVERY_ROWS = 8

#: Up to this many items, the count search runs where the LPT packing fails.
_SEARCHED_ITEMS = 64

#: Plans beyond the fewest rows' one that stretch a count's tolerance (:func:`_extended`).
_STRETCH = 2


class RowIndices(list):  # type: ignore[type-arg]
    """The real sample indices of one micro-batch (a ``list`` of ints, unchanged for code
    that iterates it) and how many filler rows follow them.

    Attributes:
        filler: filler rows the micro-batch holds after its real rows (zero-weight copies).
        filler_row: the sample index each filler row copies (-1 without filler).

    Example:
        >>> part = RowIndices([0, 3], filler=2, filler_row=1)
        >>> part == [0, 3], len(part) + part.filler
        (True, 4)
    """

    def __init__(self, indices: Any = (), filler: int = 0, filler_row: int = -1) -> None:
        super().__init__(indices)
        self.filler, self.filler_row = filler, filler_row

    def __repr__(self) -> str:
        return f"RowIndices({list(self)!r}, filler={self.filler}, filler_row={self.filler_row})"


def filler_cost(result: RankAnalysis) -> int:
    """What one summed-cost filler row costs: a 1-token row, aligned to
    ``pad_to_multiple_of`` (no more than the cheapest sample: a 0-token sample gives a
    0-token row); with the caller's ``costs``, the cheapest sample's cost (what a 1-token
    row costs is the caller's to say, and it is at most that).

    Example:
        >>> from seqlen_balancing.planning.planner import analyse
        >>> from seqlen_balancing import PlanOptions
        >>> aligned = PlanOptions(pad_to_multiple_of=8)
        >>> filler_cost(analyse([10, 4, 6], 20)), filler_cost(analyse([10, 4, 6], 24, aligned))
        (1, 8)
    """
    cheapest = min(result.sample_costs, default=0)
    own_costs = result.request is not None and result.request.costs  # the caller's units
    return cheapest if own_costs else min(cheapest, aligned_length(1, result.pad_to_multiple_of))


def _core(result: RankAnalysis) -> RankAnalysis:
    """The analysis whose items are packed together (the rest, with over-cap items alone)."""
    return result._rest if result._rest is not None else result


def rows_rule(result: RankAnalysis, rows: int) -> Rule | None:
    """The rule of micro-batches topped up to ``rows`` rows (the module docstring), on the
    items of ``result`` (its rest under ``over_cap="alone"``), or ``None`` when no
    micro-batch of that many rows fits (an item's filled cost is over the cap, or the
    filler rows alone are).

    Example:
        >>> from seqlen_balancing.planning.planner import analyse
        >>> rule = rows_rule(analyse([10, 4, 6], 20), 2)
        >>> rule.sizes, rule.cap, rule.limit  # a filler row: 1 token
        ([9, 3, 5], 18, 2)
    """
    rule = _core(result).rule
    if rule is None or rows > _limit(result):
        return None  # every micro-batch, filler rows included, keeps to the sample limit
    if rule.is_padded:
        out = Rule.padded(rule.left or [], rule.right or [], rule.cap, rule.rows, rule.pad, rows, rows)
    else:
        cost = filler_cost(result)
        if rows * cost > rule.cap:
            return None
        sizes = [size - k * cost for size, k in zip(rule.sizes, rule.rows, strict=True)]
        # no room left with every size 0: the same rule, and the bounds need a positive cap
        out = Rule.sums(sizes, max(rule.cap - rows * cost, 0 if any(sizes) else 1), rule.rows, rows)
    return out if all(out.fits_alone(i) for i in range(out.n)) else None


def empty_rank_tolerance(result: RankAnalysis, row_cost: int) -> int:
    """The most rows a dummy of a rank with no samples can hold under the cap, its rows all
    copies of one row costing ``row_cost`` tokens (its effective tokens; with ``padded`` its
    width), aligned to ``pad_to_multiple_of``; the sample limit bounds it too.

    Example:
        >>> from seqlen_balancing.planning.planner import analyse
        >>> empty_rank_tolerance(analyse([], 100), 7), empty_rank_tolerance(analyse([], 100), 0)
        (14, 1099511627776)
    """
    aligned = aligned_length(row_cost, result.pad_to_multiple_of) if row_cost else 0
    return min(result.max_token_len // aligned if aligned else UNBOUNDED_ROWS, _limit(result))


def empty_rank_plan(count: int, rows: int) -> list[RowIndices]:
    """The ``count`` dummies of a rank with no samples under equal rows: no real rows,
    ``rows`` filler rows each (copies of the template's row: ``filler_row`` -1)."""
    return [RowIndices([], rows) for _ in range(count)]


def _sub(core: RankAnalysis, rule: Rule, packing: list[list[int]]) -> RankAnalysis:
    """``core`` with its rule replaced and ``packing`` its plan (what the balancing reads)."""
    return replace(core, rule=rule, group_sizes=rule.sizes, max_token_len=rule.cap,
                   _packing=packing, min_count=len(packing), lower_bound=0, bound_name="")


def _rows_at(
    result: RankAnalysis, count: int, low: int, high: int
) -> tuple[int, RankAnalysis] | None:
    """The fewest rows in ``low..high`` at which the core packs into ``count`` micro-batches
    (over-cap ones included), and its analysis, or ``None``."""
    core, over = _core(result), len(result.over_cap_groups)
    bins, floor = count - over, _floor(result)
    for wanted in range(low, high + 1):
        rule = rows_rule(result, wanted)
        if rule is None or bins < 1:
            continue
        # The capacity-aware LPT on the filled costs first (O(n log n)): it balances the
        # rows and the tokens at once; the count search only where it fails, on few items.
        quick = lpt(rule, rule.sizes, bins)
        if quick is not None:
            return wanted, _sub(core, rule, [items for items in quick if items])
        if core.n_groups > _SEARCHED_ITEMS:
            continue
        found = search_count(rule, core.group_workloads, result.num_batches_divided_by,
                             None if floor is None else max(1, floor - over))
        if found.min_count <= bins:
            return wanted, _sub(core, rule, found.packing)
    return None


def _floor(result: RankAnalysis) -> int | None:
    """``min_num_micro_batch`` within the rank's groups (``None``: none)."""
    floor = result.given.min_num_micro_batch
    return None if floor is None else min(floor, result.n_groups)


def _low(result: RankAnalysis, count: int) -> int:
    """The fewest rows a plan of ``count`` micro-batches can hold: the balanced
    ``ceil(rows / count)``, and no fewer than any item's (over-cap ones included)."""
    rule = _core(result).rule
    rows = rule.rows if rule is not None else []
    over_rows = max((result.rule.rows[g] for g in result.over_cap_groups), default=0) if result.rule else 0
    return max(-(-sum(rows) // max(count - len(result.over_cap_groups), 1)), max(rows, default=1), over_rows)


def _span(result: RankAnalysis) -> int:
    """Row counts tried per count: every one on a few items (the search is then exhaustive
    with the exact one), else :data:`_ROW_TRIES`."""
    core = _core(result)
    return sum(core.rule.rows) if core.n_groups <= _EVERY_ROWS and core.rule else _ROW_TRIES


def search_rows(result: RankAnalysis) -> RowsAt:
    """The rank's own equal rows: at the fewest micro-batches ``K`` (a multiple of
    ``num_batches_divided_by``, at least the count without the option) at which some row
    count fits, the fewest rows found and their tolerance (:class:`RowsAt`). Where even
    every item alone cannot be topped up (items of different rows), its tolerance is
    below its rows: the rank's :class:`~seqlen_balancing.errors.RowsOverCap`.

    Args:
        result: an error-free analysis after the plain count search.

    Complexity: at most 8 counts of 3 row counts each, each an O(n log n) LPT packing
    under :func:`rows_rule` (and, on up to 64 items where it fails, a count search as
    :func:`~seqlen_balancing.planning.planner.analyse`'s), plus up to 2 more for its
    tolerance. On up to 8 items every row count is tried instead of 3: exhaustive.
    """
    core, over, step = _core(result), len(result.over_cap_groups), result.num_batches_divided_by
    rows = core.rule.rows if core.rule is not None else []
    span = _span(result)
    # The count this rank plans alone (rounded up to num_batches_divided_by): its rows there;
    # no fewer than its rows need at the most rows a micro-batch can take.
    most = most_rows(result)
    count = roundup_divisible(
        max(result.min_count, _floor(result) or 1, over + -(-sum(rows) // max(most, 1))), step)
    found, tries = None, 0
    while rows and found is None and count - over <= core.n_groups and tries < _SEARCH_BUDGET * span:
        low = _low(result, count)
        found = _rows_at(result, count, low, min(low + span - 1, most))
        tries += span
        count = count if found else count + step
    if found is None:  # every core item alone, at the most rows one holds
        count = max(count, over + core.n_groups) if rows else max(count, over)
        alone = max(max(rows, default=0), _low(result, count), 1)
        found = alone, _sub(core, rows_rule(result, alone) or core.rule,  # type: ignore[arg-type]
                            [[g] for g in range(core.n_groups)])
    return _extended(result, count, found)


def rows_at(result: RankAnalysis, count: int) -> RowsAt:
    """The rank's equal rows at ``count`` micro-batches (at least its own count): the fewest
    rows found there, from the balanced ``ceil(rows / count)`` up to the rows of its own
    count (whose plans, split up to ``count``, keep their rows: ``search_rows``), and
    the tolerance of both plans together. Above its items (dummies), every item alone. What
    the DP group agrees on after the count (the agreement's ``encode_rows``) and what the
    planner's ``build_plan`` plans.

    Complexity: as ``search_rows`` at one count: up to 3 LPT packings and 2 more for the
    tolerance.
    """
    own = result.equal_rows
    if own is None:
        raise ValueError("rows_at needs an analysis made with equal_rows_per_micro_batch=True")
    real = min(count, len(result.over_cap_groups) + _core(result).n_groups)  # the rest are dummies
    low = _low(result, real)
    better = None if real <= own.count or low >= own.rows else _rows_at(
        result, real, low, min(low + _span(result), own.rows) - 1)
    if better is None:  # the plans of the own count, split: the same rows fit
        return replace(own, count=max(count, own.count))
    mine = _extended(result, real, better)
    if mine.tolerance + 1 < own.rows:
        return replace(mine, count=count)
    return RowsAt(count, mine.rows, max(mine.tolerance, own.tolerance), mine.plans + own.plans)


def _extended(result: RankAnalysis, count: int, found: tuple[int, RankAnalysis]) -> RowsAt:
    """The rows at ``count`` from its fewest rows' plan, its tolerance stretched by up to
    :data:`_STRETCH` more plans, each found for one row more than the last one takes, so
    that a rank whose fewest rows' plan is tight can still take the rows a peer needs."""
    tolerance = _tolerance(result, found[1]._packing)
    plans = [(found[0], tolerance, found[1])]
    for _ in range(_STRETCH):
        # nothing to stretch past an unbounded tolerance
        more = None if tolerance >= UNBOUNDED_ROWS else _rows_at(result, count, tolerance + 1, tolerance + 1)
        if more is None:
            break
        upto = max(tolerance + 1, _tolerance(result, more[1]._packing))
        plans.append((tolerance + 1, upto, more[1]))
        tolerance = upto
    return RowsAt(count, found[0], tolerance, tuple(plans))


def most_rows(result: RankAnalysis) -> int:
    """The most rows any micro-batch of the rank can be topped up to: every item of the core
    must fit a micro-batch of that many rows with nothing else but filler rows (summed: its
    cost plus the filler rows', padded: the rows x its width, within the cap; and the
    sample limit). :data:`~seqlen_balancing.planning.rows.UNBOUNDED_ROWS` when filler rows cost
    nothing and no limit is set.

    Example:
        >>> from seqlen_balancing.planning.planner import analyse
        >>> most_rows(analyse([8645, 302, 500], 10240))  # 8645 + 1595 1-token rows <= 10240
        1596
    """
    rule = _core(result).rule
    if rule is None or not rule.n:
        return UNBOUNDED_ROWS
    return _tolerance(result, [[i] for i in range(rule.n)])  # every item alone


def _limit(result: RankAnalysis) -> int:
    """The most rows the sample limit lets any micro-batch hold (the option's, whatever the
    core's rule keeps), or :data:`UNBOUNDED_ROWS`."""
    rule, option = _core(result).rule, result.given.max_samples_per_micro_batch
    return min((n for n in (rule.limit if rule else None, option) if n is not None), default=UNBOUNDED_ROWS)


def _tolerance(result: RankAnalysis, packing: list[list[int]]) -> int:
    """The most rows every micro-batch of ``packing`` (items of the core, real costs) and
    a dummy micro-batch can be topped up to under the cap (:data:`UNBOUNDED_ROWS` when a
    filler row costs nothing and no limit is set)."""
    rule = _core(result).rule
    if rule is None:
        return 0
    most = _limit(result)
    if rule.is_padded:
        widths = [rule.width(items) for items in packing if items]
        if result.given.dummy_micro_batches:  # a dummy copies the narrowest row
            widths.append(min((aligned_length(w, rule.pad) for w in result.sample_costs), default=0))
        return min([most, *(rule.cap // w for w in widths if w > 0)])
    cost = filler_cost(result)
    if cost == 0:
        return most
    for items in packing:  # its rows, and as many filler rows as its room under the cap takes
        most = min(most, sum(rule.rows[i] for i in items) + (rule.cap - rule.cost(items)) // cost)
    return max(0, min(most, rule.cap // cost))


def rows_view(result: RankAnalysis, at: RowsAt, rows: int) -> RankAnalysis:
    """``result`` under :func:`rows_rule` for ``rows`` rows, with the packing of ``at``
    that takes them (:meth:`RowsAt.plan_for`; ``rows`` is at least ``at.rows`` and at most
    its tolerance): what
    :func:`~seqlen_balancing.planning.planner.build_plan` balances.

    Raises:
        ValueError: ``rows`` outside ``at.rows..at.tolerance`` (the agreement rules it out).
    """
    over = RowsOverCap(rows, at.tolerance, result.requested_max_token_len)
    if not at.rows <= rows <= at.tolerance:
        raise over.exception()
    start, sub = at.plan_for(rows)
    if rows != start:
        rule = rows_rule(result, rows)
        if rule is None:
            raise over.exception()
        sub = _sub(_core(result), rule, sub._packing)
    if result._rest is None:
        return replace(result, rule=sub.rule, group_sizes=sub.group_sizes,
                       max_token_len=sub.max_token_len, _packing=sub._packing,
                       min_count=sub.min_count, equal_rows=None)
    return replace(result, _rest=sub, equal_rows=None,
                   min_count=len(result.over_cap_groups) + sub.min_count)


def filled_plan(result: RankAnalysis, plan: list[list[int]], rows: int) -> list[RowIndices]:
    """Each micro-batch of ``plan`` (sample indices; dummies empty) as a
    :class:`RowIndices` topped up to ``rows`` rows: summed costs copy the rank's cheapest
    sample, padded the micro-batch's narrowest row (a dummy: the rank's narrowest)."""
    rule = _core(result).rule
    costs = result.sample_costs

    def copied(part: list[int]) -> int:  # the cheapest row of the part (padded) or of the rank
        return min(part if rule is not None and rule.is_padded and part else range(len(costs)),
                   key=lambda i: (costs[i], i))

    return [RowIndices(part, rows - len(part), copied(part) if rows > len(part) else -1) for part in plan]
