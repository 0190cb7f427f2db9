"""Equal rows per micro-batch (``equal_rows_per_micro_batch``), on plain integer lists (no torch).

Pipeline parallelism takes one micro-batch size for every micro-batch of a step
(Megatron's schedule; DeepSpeed's pipeline engine), while token-budget micro-batches hold
different numbers of rows. With the option on, every micro-batch of a plan holds the
same number of rows ``R``: the real rows, then ``R - real`` **filler rows**, zero-weight
rows of one token, built from a real row's first token (loss weights zero, as dummy
micro-batches' are, :mod:`seqlen_balancing.batch.dummies`). Filler rows reach the GPU, so
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
micro-batches gives one at every larger count. :func:`search_rows` finds a rank's
**window**: the fewest micro-batches ``K`` first (at least the count without the option),
then at ``K`` and at the next :data:`ROWS_WINDOW` - 1 multiples of
``num_batches_divided_by`` the fewest rows, from the balanced ``ceil(rows / K)`` up (the
capacity-aware LPT packing on the filled costs evens rows and tokens at once), each with
its **tolerance**: the most rows its plans' micro-batches can be topped up to under the
cap. A DP group agrees in its one collective on the largest ``K``, then at that count on
the largest ``R`` any rank needs; a rank whose tolerance there is below ``R`` is the
group's error (:class:`~seqlen_balancing.errors.RowsOverCap`).

Why: Megatron's pipeline schedule takes one ``micro_batch_size`` per step, so SkyRL pads
token-based micro-batches to the largest row count (SkyRL PR #1477); DeepSpeed's pipeline
engine needs the same batch size across micro-batches (DeepSpeedExamples PR #963).
Padding a plan afterwards breaks its cap; here the filler rows are planned.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from seqlen_balancing.cost import aligned_length
from seqlen_balancing.errors import RowsOverCap
from seqlen_balancing.planning.analysis import RankAnalysis
from seqlen_balancing.planning.balance import lpt
from seqlen_balancing.planning.partition import roundup_divisible
from seqlen_balancing.planning.rule import Rule
from seqlen_balancing.planning.search import _search_count

__all__ = [
    "ROWS_WINDOW",
    "UNBOUNDED_ROWS",
    "RowIndices",
    "RowsAt",
    "empty_rank_plan",
    "empty_rank_tolerance",
    "filled_plan",
    "most_rows",
    "rows_for",
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

#: Plans beyond the fewest rows' one that stretch an entry's tolerance (:func:`_extended`).
_STRETCH = 2

#: Counts of a rank's window (what the planner finds with equal rows), its own and the
#: next multiples of ``num_batches_divided_by``, each with its rows; the agreement carries
#: one pair of slots for each.
ROWS_WINDOW = 32

#: Counts of the window searched with several row counts; the later ones try one, while
#: items x (their place - 4) stays within _WINDOW_BUDGET (then they split the last plan).
_SEARCHED_COUNTS = 4
_WINDOW_BUDGET = 1 << 14


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

    filler: int
    filler_row: int

    def __init__(self, indices: Any = (), filler: int = 0, filler_row: int = -1) -> None:
        super().__init__(indices)
        self.filler, self.filler_row = filler, filler_row

    def __repr__(self) -> str:
        return f"RowIndices({list(self)!r}, filler={self.filler}, filler_row={self.filler_row})"


def filler_sample(result: RankAnalysis) -> int:
    """The sample a filler row is built from (its first token): the cheapest (then the
    lowest index)."""
    costs = result.sample_costs
    return min(range(len(costs)), key=lambda i: (costs[i], i))


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
    if result.custom_costs:
        return cheapest
    return min(cheapest, aligned_length(1, result.pad_to_multiple_of))


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
    core = _core(result)
    rule = core.rule
    if rule is None or rows > _limit(result, rule):
        return None  # every micro-batch, filler rows included, keeps to the sample limit
    limit = rows
    if rule.is_padded:
        out = Rule.padded(rule.left or [], rule.right or [], rule.cap, rule.rows, rule.pad, limit, rows)
    else:
        cost = filler_cost(result)
        if rows * cost > rule.cap:
            return None
        sizes = [size - k * cost for size, k in zip(rule.sizes, rule.rows, strict=True)]
        room = rule.cap - rows * cost
        if room == 0 and not any(sizes):
            room = 1  # the same rule (every size 0), and the bounds need a positive cap
        out = Rule.sums(sizes, room, rule.rows, limit)
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
    rule = result.rule
    cap = rule.cap if rule is not None else result.max_token_len
    aligned = aligned_length(row_cost, result.pad_to_multiple_of) if row_cost else 0
    most = cap // aligned if aligned else UNBOUNDED_ROWS
    limit = rule.limit if rule is not None else None
    return min(most, limit) if limit is not None else most


def empty_rank_plan(count: int, rows: int) -> list[RowIndices]:
    """The ``count`` dummies of a rank with no samples under equal rows: no real rows,
    ``rows`` filler rows each (copies of the template's row: ``filler_row`` -1)."""
    return [RowIndices([], rows) for _ in range(count)]


def _sub(core: RankAnalysis, rule: Rule) -> RankAnalysis:
    """``core`` with its rule replaced (the count search and the balancing read these)."""
    return replace(core, rule=rule, group_sizes=rule.sizes, max_token_len=rule.cap,
                   _packing=[], min_count=0, lower_bound=0, bound_name="")


@dataclass(frozen=True)
class RowsAt:
    """One count of a rank's equal-rows window: at ``count`` micro-batches (over-cap ones
    included) the fewest ``rows`` found, and plans for every row count from there up to
    ``tolerance``: ``plans`` holds ``(from_rows, upto, sub)``, ``sub`` the core analysis
    under :func:`rows_rule` for ``from_rows`` rows with a plan of at most ``count``
    micro-batches that takes any row count in ``from_rows..upto``; together they cover
    ``rows..tolerance``."""

    count: int
    rows: int
    tolerance: int
    plans: tuple[tuple[int, int, RankAnalysis], ...]

    def plan_for(self, rows: int) -> tuple[int, RankAnalysis]:
        """``(from_rows, sub)`` of a plan that takes ``rows`` rows (``rows`` within
        ``rows..tolerance``)."""
        start, _, sub = next(p for p in self.plans if p[0] <= rows <= p[1])
        return start, sub


def _rows_at(
    result: RankAnalysis, count: int, low: int, high: int, floor: int | None
) -> tuple[int, RankAnalysis] | None:
    """The fewest rows in ``low..high`` at which the core packs into ``count`` micro-batches
    (over-cap ones included), and its analysis, or ``None``."""
    core, over = _core(result), len(result.over_cap_groups)
    bins = count - over
    for wanted in range(low, high + 1):
        rule = rows_rule(result, wanted)
        if rule is None or bins < 1:
            continue
        sub = _sub(core, rule)
        # The capacity-aware LPT on the filled costs first (O(n log n)): it balances the
        # rows and the tokens at once; the count search only where it fails, on few items.
        quick = lpt(rule, rule.sizes, bins)
        if quick is not None:
            sub._packing = [items for items in quick if items]
            sub.min_count = len(sub._packing)
            return wanted, sub
        if core.n_groups > _SEARCHED_ITEMS:
            continue
        _search_count(sub, None if floor is None else max(1, floor - over))
        if sub.min_count <= bins:
            return wanted, sub
    return None


def _alone(result: RankAnalysis, least: int) -> tuple[int, RankAnalysis]:
    """Every core item alone, at the most rows one holds (at least ``least``)."""
    core = _core(result)
    wanted = max(max(core.rule.rows if core.rule else [], default=0), least, 1)
    rule = rows_rule(result, wanted)
    sub = _sub(core, rule or core.rule)  # type: ignore[arg-type]
    sub._packing, sub.min_count = [[g] for g in range(core.n_groups)], core.n_groups
    return wanted, sub


def search_rows(result: RankAnalysis, floor: int | None) -> None:
    """Find the rank's equal-rows window and store it in ``result``: at the count it plans
    alone ``K`` (the fewest micro-batches, a multiple of ``num_batches_divided_by``, at
    which some row count fits) and at the next :data:`ROWS_WINDOW` - 1 multiples, the
    fewest rows found and their tolerance (:class:`RowsAt`). ``min_count`` becomes ``K``,
    :attr:`~seqlen_balancing.planning.analysis.RankAnalysis.equal_rows` and ``rows_tolerance``
    those at ``K``; ``error`` a :class:`~seqlen_balancing.errors.RowsOverCap` when even
    every item alone cannot be topped up (items of different rows).

    Args:
        result: an error-free analysis after the plain count search.
        floor: ``min_num_micro_batch`` (``None``: none).

    Complexity: at most 8 counts of 3 row counts each for ``K``, 3 for each of the next 3
    counts of the window and 1 for the others, each an O(n log n) LPT packing under
    :func:`rows_rule` (and, on up to 64 items where it fails, a count search as
    :func:`~seqlen_balancing.planning.planner.analyse`'s), plus up to 2 more per count for its
    tolerance; the later counts of the window only while ``n x (place - 4) <= 2**14``.
    On up to 8 items every row count is tried instead of 3: exhaustive.
    """
    core, over, step = _core(result), len(result.over_cap_groups), result.num_batches_divided_by
    rows = core.rule.rows if core.rule is not None else []
    over_rows = max((result.rule.rows[g] for g in result.over_cap_groups), default=0) if result.rule else 0
    total = sum(rows)

    def low(count: int) -> int:
        return max(-(-total // max(count - over, 1)), max(rows, default=1), over_rows)

    # Few items: every row count is tried (the search is then exhaustive with the exact one).
    span = total if core.n_groups <= _EVERY_ROWS else _ROW_TRIES
    # The count this rank plans alone (rounded up to num_batches_divided_by): its rows there;
    # no fewer than its rows need at the most rows a micro-batch can take.
    most = most_rows(result)
    count = roundup_divisible(max(result.min_count, floor or 1, over + -(-total // max(most, 1))), step)
    found, tries = None, 0
    while rows and found is None and count - over <= core.n_groups and tries < _SEARCH_BUDGET * span:
        found = _rows_at(result, count, low(count), min(low(count) + span - 1, most), floor)
        tries += span
        count = count if found else count + step
    if found is None:
        count = max(count, over + core.n_groups) if rows else max(count, over)
        found = _alone(result, over_rows)
    window = [_extended(result, count, found, floor)]
    for j in range(1, ROWS_WINDOW):
        at, last = count + j * step, window[-1]
        better = None
        cheap = j < _SEARCHED_COUNTS or core.n_groups * (j - _SEARCHED_COUNTS) <= _WINDOW_BUDGET
        if cheap and at - over <= core.n_groups and low(at) < last.rows:
            tries_here = span if j < _SEARCHED_COUNTS else 1
            better = _rows_at(result, at, low(at), min(low(at) + tries_here, last.rows) - 1, floor)
        if better is None:  # the plans of one count fewer, split: the same rows fit
            window.append(RowsAt(at, last.rows, last.tolerance, last.plans))
        elif j < _SEARCHED_COUNTS:
            window.append(_extended(result, at, better, floor))
        else:  # the fewest rows' plan, joined to the last entry's plans where they meet
            held = _tolerance(result, better[1]._packing)
            mine = (better[0], held, better[1])
            if held + 1 >= last.rows:
                window.append(RowsAt(at, better[0], max(held, last.tolerance), (mine, *last.plans)))
            else:
                window.append(RowsAt(at, better[0], held, (mine,)))
    result.rows_window = window
    result.min_count = max(result.min_count, count)
    result.equal_rows, result.rows_tolerance = window[0].rows, window[0].tolerance
    if result.rows_tolerance < result.equal_rows:
        result.error = rows_error(result, result.equal_rows)


def _extended(
    result: RankAnalysis, count: int, found: tuple[int, RankAnalysis], floor: int | None
) -> RowsAt:
    """The entry at ``count`` from its fewest rows' plan, its tolerance stretched by up to
    :data:`_STRETCH` more plans, each found for one row more than the last one takes, so
    that a rank whose fewest rows' plan is tight can still take the rows a peer needs."""
    tolerance = _tolerance(result, found[1]._packing)
    plans = [(found[0], tolerance, found[1])]
    core = _core(result)
    for _ in range(_STRETCH):
        if tolerance >= UNBOUNDED_ROWS or core.rule is None:
            break
        more = _rows_at(result, count, tolerance + 1, tolerance + 1, floor)
        if more is None:
            break
        upto = max(tolerance + 1, _tolerance(result, more[1]._packing))
        plans.append((tolerance + 1, upto, more[1]))
        tolerance = upto
    return RowsAt(count, found[0], tolerance, tuple(plans))


def rows_for(result: RankAnalysis, count: int) -> RowsAt:
    """The entry of ``result``'s window that serves ``count`` micro-batches: the one at
    ``count``, or (above the window) at the window's count with the same place modulo
    :data:`ROWS_WINDOW` multiples of ``num_batches_divided_by``, whose plan split up to
    ``count`` keeps its rows (the agreement reads the same place)."""
    window: list[RowsAt] = result.rows_window
    step = result.num_batches_divided_by
    if count <= window[0].count:
        return window[0]
    return window[(count - window[0].count) // step % len(window)]


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
    most = _limit(result, rule)
    if rule.is_padded:
        spans = zip(rule.left or [], rule.right or [], strict=True)
        widths = [aligned_length(a + b, rule.pad) for a, b in spans]
        return min([most, *(rule.cap // w for w in widths if w > 0)])
    cost = filler_cost(result)
    if cost == 0:
        return most
    return max(0, min([most, *(k + (rule.cap - size) // cost for size, k in zip(rule.sizes, rule.rows,
                                                                                  strict=True))]))


def _limit(result: RankAnalysis, rule: Rule) -> int:
    """The most rows the sample limit lets any micro-batch hold (the option's, whatever the
    core's rule keeps), or :data:`UNBOUNDED_ROWS`."""
    limits = [n for n in (rule.limit, result.max_samples_per_micro_batch) if n is not None]
    return min(limits, default=UNBOUNDED_ROWS)


def rows_error(result: RankAnalysis, rows: int, tolerance: int | None = None) -> RowsOverCap:
    """The error of a rank whose tolerance is below ``rows``."""
    held = result.rows_tolerance if tolerance is None else tolerance
    return RowsOverCap(rows, held, result.requested_max_token_len)


def _tolerance(result: RankAnalysis, packing: list[list[int]]) -> int:
    """The most rows every micro-batch of ``packing`` (items of the core, real costs) and
    a dummy micro-batch can be topped up to under the cap (:data:`UNBOUNDED_ROWS` when a
    filler row costs nothing and no limit is set)."""
    core = _core(result)
    rule = core.rule
    if rule is None:
        return 0
    most = _limit(result, rule)
    cap = rule.cap
    if rule.is_padded:
        widths = [rule.width(items) for items in packing if items]
        if result.dummy_micro_batches:
            spans = [aligned_length(w, rule.pad) for w in result.sample_costs]
            widths.append(min(spans, default=0))
        return min([most, *(cap // w for w in widths if w > 0)])
    cost = filler_cost(result)
    if cost == 0:
        return most
    for items in packing:
        used = sum(rule.sizes[i] for i in items)
        held = sum(rule.rows[i] for i in items)
        most = min(most, held + (cap - used) // cost)
    return max(0, min(most, cap // cost))


def rows_view(result: RankAnalysis, at: RowsAt, rows: int) -> RankAnalysis:
    """``result`` under :func:`rows_rule` for ``rows`` rows, with the packing of ``at``
    that takes them (:meth:`RowsAt.plan_for`; ``rows`` is at least ``at.rows`` and at most
    its tolerance): what
    :func:`~seqlen_balancing.planning.planner.build_plan` balances.

    Raises:
        ValueError: ``rows`` outside ``at.rows..at.tolerance`` (the agreement rules it out).
    """
    if not at.rows <= rows <= at.tolerance:
        raise rows_error(result, rows, at.tolerance).exception()
    start, sub = at.plan_for(rows)
    if rows != start:
        rule = rows_rule(result, rows)
        if rule is None:
            raise rows_error(result, rows, at.tolerance).exception()
        plan = sub
        sub = _sub(_core(result), rule)
        sub._packing, sub.min_count = plan._packing, plan.min_count
    if result._rest is None:
        return replace(result, rule=sub.rule, group_sizes=sub.group_sizes,
                       max_token_len=sub.max_token_len, _packing=sub._packing,
                       min_count=sub.min_count, rows_window=[])
    return replace(result, _rest=sub, rows_window=[],
                   min_count=len(result.over_cap_groups) + sub.min_count)


def filled_plan(result: RankAnalysis, plan: list[list[int]], rows: int) -> list[RowIndices]:
    """Each micro-batch of ``plan`` (sample indices; dummies empty) as a
    :class:`RowIndices` topped up to ``rows`` rows: summed costs copy the rank's cheapest
    sample, padded the micro-batch's narrowest row (a dummy: the rank's narrowest)."""
    core = _core(result)
    padded = core.rule is not None and core.rule.is_padded
    costs = result.sample_costs
    cheapest = filler_sample(result)
    out = []
    for part in plan:
        row = min(part, key=lambda i: (costs[i], i)) if padded and part else cheapest
        extra = rows - len(part)
        out.append(RowIndices(part, extra, row if extra else -1))
    return out
