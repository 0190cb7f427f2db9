"""The micro-batch plan of one rank, on plain integer lists (no torch).

Steps, each a function here:

1. :func:`analyse` checks the arguments and lengths, forms the ``force_group_size`` groups
   and finds the smallest micro-batch count this library can reach under the cap
   (between :func:`~seqlen_balancing.planning.bounds.lower_bound` and a best-fit-decreasing
   packing); a count that meets the bound is proven optimal. Pure steps, each from the
   last one's frozen result: the :class:`~seqlen_balancing.planning.analysis.Request` and the
   checked :class:`~seqlen_balancing.planning.items.Cap`, the items under one rule
   (:func:`~seqlen_balancing.planning.items.group_rule`), the count
   (:class:`~seqlen_balancing.planning.search.Count`); the :class:`RankAnalysis` is made once from
   them. It never raises for bad input: it records a
   :class:`~seqlen_balancing.errors.PlanError`, so that a DP group can agree on it before
   anyone raises.
2. :func:`agreed_count` rounds a needed count up to ``num_batches_divided_by`` and checks
   that every micro-batch can get a sample.
3. :func:`build_plan` builds the best-balanced plan with exactly that many micro-batches and
   orders it.

:func:`plan_micro_batches` runs all three for one rank.

**Keep training (issue 27), each option off by default.** ``workloads`` replaces verl's
workload as the balance objective (the cap and the count are untouched);
``over_cap="alone"`` sets each over-cap group apart as a micro-batch of its own (counted in
the count and the lower bound, logged by :func:`log_over_cap`); ``dummy_micro_batches``
lets a count above the groups stand, each group alone and the rest empty dummy
micro-batches at the end (:func:`build_plan`). The guarantee below is stated for the
defaults.

**Never worse than verl 0.9.1, by construction.** verl's rule tries Karmarkar-Karp on the
groups' workloads at ``k = start, start + d, ...`` (``d = num_batches_divided_by`` or 1)
and stops at the first ``k`` where every part fits the cap; with a DP group, where every
rank's parts fit. :func:`~seqlen_balancing.planning.partition.karmarkar_karp` returns verl's
partitions exactly, and this module uses it twice:

* *Count.* Where the packings stop at ``U`` above the lower bound ``L``, Karmarkar-Karp is
  tried at every multiple of ``d`` in ``[L, U)`` (:func:`_verl_candidates`), and the first
  that fits becomes the count. verl's count ``V`` is a multiple of ``d`` at which
  Karmarkar-Karp fits on this rank and ``V >= L`` (nothing below ``L`` fits), so either
  ``V >= U`` or ``V`` was among the tries: this rank's count, rounded up to ``d``, is at
  most ``V``, and so is the largest over a DP group. The tries are bounded:
  ``(U - L) / d + 1`` of them (``U - L`` is 0-2 on real batches; best-fit decreasing is
  within ``11/9 OPT + 6/9``), each O(n log n + n k).
* *Balance.* At the count finally used, verl's partition is a candidate whenever it fits
  the cap, and the plan with the smaller workload gap (heaviest minus lightest micro-batch)
  wins, verl's on a tie. At verl's own count it always fits, so the spread is never above
  verl's at the same count.

Both hold where ``n * k <= 2**22`` (:data:`_KK_BUDGET`: 2,048 samples into 2,048
micro-batches, 16,384 into 256); above it Karmarkar-Karp is not run (verl's own
implementation needs over 10 s per count there) and the cap-aware packings alone decide.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from seqlen_balancing._checks import _integer_or_none
from seqlen_balancing.collector import paused_collector
from seqlen_balancing.cost import micro_batch_capacity
from seqlen_balancing.errors import (
    MAX_DUMMY_MICRO_BATCHES,
    BucketAboveCap,
    CountAboveGroups,
    EmptyBatch,
    GroupIdsAndForceGroupSize,
    MinAboveGroups,
    NotDivisible,
    PlanError,
    RowsOverCap,
    TooManyDummies,
)
from seqlen_balancing.options import (
    OVER_CAP_CHOICES,
    PlanOptionKeywords,
    PlanOptions,
    Unpack,
    argument_error,
)
from seqlen_balancing.planning.analysis import RankAnalysis, Request
from seqlen_balancing.planning.balance import balanced, heaviest_first, order_micro_batches
from seqlen_balancing.planning.groups import read_group_ids, uniform_members
from seqlen_balancing.planning.items import (
    Cap,
    dummy_group,
    group_rule,
    longest,
    sample_costs_of,
    workloads_of,
)
from seqlen_balancing.planning.packing import randomized_best_fit
from seqlen_balancing.planning.partition import roundup_divisible
from seqlen_balancing.planning.per_sample import read_numbers
from seqlen_balancing.planning.prefix import shared_prefix_costs
from seqlen_balancing.planning.repack import exact_packing, repack
from seqlen_balancing.planning.rows import (
    empty_rank_plan,
    filled_plan,
    rows_at,
    rows_view,
    search_rows,
)
from seqlen_balancing.planning.rule import Rule
from seqlen_balancing.planning.search import (
    _EXACT_BUDGET,
    _EXACT_GROUPS,
    Count,
    _fitting_kk,
    _set_aside,
    search_count,
)

__all__ = [
    "OVER_CAP_CHOICES",
    "RankAnalysis",
    "agreed_count",
    "analyse",
    "analyse_with_prefixes",
    "balanced_bins",
    "build_plan",
    "failed_analysis",
    "local_count",
    "log_over_cap",
    "order_micro_batches",
    "over_cap_messages",
    "plan_micro_batches",
]

#: Where the over-cap warnings go (``over_cap="alone"``): logging rather than
#: ``warnings.warn``, since a warnings filter set to "error" would turn the warning into an
#: exception on one DP rank only, after its peers entered the agreement.
logger = logging.getLogger("seqlen_balancing")


@paused_collector
def analyse(
    seq_lens: Sequence[Any],
    max_token_len: Any,
    options: PlanOptions | None = None,
    *,
    costs: Any = None,
    workloads: Any = None,
    padded_extents: tuple[Sequence[int], Sequence[int]] | None = None,
    group_ids: Any = None,
) -> RankAnalysis:
    """Check one rank's input and find its smallest micro-batch count under the cap.

    Never raises for bad input; the reason is returned in ``error`` so that the DP group
    can agree on it first (see :mod:`seqlen_balancing.agreement`).

    Count search (:func:`~seqlen_balancing.planning.search.search_count`): the packers of
    :data:`~seqlen_balancing.planning.search.PACKERS` that serve the batch's rule run in order, the
    first (best-fit decreasing, or the sorted rule for padded rows) giving ``U``; ``L =
    max(lower bound, min_num_micro_batch, 1)``, the bounds of
    :func:`~seqlen_balancing.planning.rule.rule_bound` tried cheapest first until one meets ``U``.
    Only if ``U > L`` do stronger packings and an exchange local search
    (:func:`~seqlen_balancing.planning.repack.repack`) work from ``U`` down towards ``L``, stopping
    as soon as they meet it. Every count between the result and the number of groups is
    feasible, since splitting a micro-batch never breaks the rule.

    The cap holds on what the GPU holds (:mod:`seqlen_balancing.cost`): each sample costs
    its given cost (``costs``) or else its effective length, rounded up to
    ``pad_to_multiple_of``, and a
    micro-batch's summed cost, rounded up to ``micro_batch_multiple_of``, is at most
    ``max_token_len``; that is, the summed cost is at most ``max_token_len //
    micro_batch_multiple_of * micro_batch_multiple_of`` (``result.max_token_len``). The
    search above runs on those costs and that cap.

    Args:
        seq_lens: effective length in tokens of each sample on this rank (read whole,
            :func:`~seqlen_balancing.planning.per_sample.read_numbers`).
        max_token_len: cap in tokens per micro-batch.
        options: the options of the plan, already checked (:class:`~seqlen_balancing.
            options.PlanOptions`; ``None``: ``PlanOptions()``, verl's behaviour).
        costs: one non-negative cost in tokens per sample (or a callable of the effective
            lengths returning them), replacing the effective lengths and rounded up to
            ``pad_to_multiple_of`` like them, or ``None``. Read whole.
        workloads: one non-negative integer per sample, the balance objective (summed per
            group) instead of verl's ``24576*s + s**2`` (or ``options.workload_model``'s),
            or a callable taking the list of effective lengths and returning them (e.g.
            ``functools.partial(transformer_workloads, hidden_size=8192)``), or ``None``.
            Read whole: whatever reading them raises becomes this rank's error. The cap is
            untouched.
        padded_extents: with ``padded``, each sample's ``(left, right)`` span around a
            column every row shares (:func:`~seqlen_balancing.planning.items.group_rule`).
        group_ids: one hashable id per sample, or ``None``: samples of equal id form a
            group that lands whole in one micro-batch (any size, not necessarily
            contiguous; :func:`~seqlen_balancing.planning.groups.read_group_ids`). Read whole;
            ``force_group_size=g`` is ``group_ids=[i // g for i in range(n)]``, and giving
            both is an error.

    Returns:
        A :class:`RankAnalysis`. With ``dummy_micro_batches`` an empty batch is no error:
        the rank has no groups and needs one micro-batch (a dummy), or its
        ``min_num_micro_batch``.

    Complexity: O(n log n) for the bounds and best-fit decreasing, plus the bounded local
    search when best-fit decreasing misses the bound.
    """
    options = PlanOptions() if options is None else options
    request = _request(max_token_len, options, costs is not None, workloads is not None,
                       group_ids is not None)
    return _analyse(seq_lens, max_token_len, request, costs, workloads, padded_extents, group_ids)


def failed_analysis(
    error: PlanError, max_token_len: Any = None, options: PlanOptions | None = None,
    costs_given: bool = False, workloads_given: bool = False, groups_given: bool = False,
    prefixes_given: bool = False,
) -> RankAnalysis:
    """The analysis of a rank that failed before :func:`analyse` (a bad batch, a bad
    option), holding its error and what it was asked to do (``options`` ``None``: the
    options themselves could not be read), so that the DP group still checks the request."""
    request = None if options is None else _request(max_token_len, options, costs_given,
                                                    workloads_given, groups_given, prefixes_given)
    return RankAnalysis(error, request=request)


def analyse_with_prefixes(
    seq_lens: Sequence[Any], max_token_len: Any, options: PlanOptions, prefix_lengths: Any, *,
    costs: Any = None, workloads: Any = None, padded_extents: Any = None, group_ids: Any = None,
) -> RankAnalysis:
    """``analyse`` for a rank that may share prompts: ``prefix_lengths`` (``None``: ``analyse``
    itself) first turned into the costs and part ids that plan each group's shared prefix once
    (:func:`~seqlen_balancing.planning.prefix.shared_prefix_costs`), a refusal into this rank's
    error (``local_count`` raises it on a rank planning alone); the request records what the
    caller gave (prefixes; costs only its own), so the DP group checks every rank gave the same."""
    if prefix_lengths is None:
        return analyse(seq_lens, max_token_len, options, costs=costs, workloads=workloads,
                       padded_extents=padded_extents, group_ids=group_ids)
    parts = shared_prefix_costs(seq_lens, group_ids, prefix_lengths, max_token_len, options,
                                costs_given=costs is not None)
    # what the caller gave (its own costs, and prefixes), whatever the analysis planned with
    request = _request(max_token_len, options, costs is not None, workloads is not None,
                       group_ids is not None, prefixes_given=True)
    if parts.error is not None:
        return RankAnalysis(parts.error, request=request)
    # the parts' costs are the rule's, not the caller's: planned under a request that says so
    # (messages, filler rows of one token); force_group_size's groups are now the parts' ids
    planned = options if group_ids is not None else replace(options, force_group_size=1)
    result = _analyse(seq_lens, max_token_len, replace(request, options=planned), parts.costs, workloads,
                      None, parts.group_ids)
    return replace(result, request=request)


def _request(
    max_token_len: Any, options: PlanOptions, costs_given: bool, workloads_given: bool, groups_given: bool,
    prefixes_given: bool = False,
) -> Request:
    """What the rank was asked, kept error or not: the DP group checks that every rank
    was asked for the same (:mod:`seqlen_balancing.agreement`)."""
    cap = _integer_or_none(max_token_len)
    return Request(options, cap if cap is not None and cap >= 1 else 0, costs_given,
                   workloads_given or options.workload_model is not None, groups_given, prefixes_given)


#: The count of an analysis that failed before its count search.
_NO_COUNT = Count(0, 0, "", [])


def _analyse(
    seq_lens: Sequence[Any], max_token_len: Any, request: Request, costs: Any, workloads: Any,
    padded_extents: tuple[Sequence[int], Sequence[int]] | None, group_ids: Any = None,
) -> RankAnalysis:
    """:func:`analyse` once the request is read: the inputs read and checked, the items
    under one rule, their count; the analysis made once from them."""
    options = request.options
    length_error, lengths = read_numbers(seq_lens, "seq_lens")
    cost_error, sizes_of = ((length_error, []) if length_error
                            else sample_costs_of(lengths, options.pad_to_multiple_of, costs))
    group_error, members, labels = _groups(group_ids, lengths, options, length_error)
    # Read even when the cap is bad: the DP group's advice on the cap counts this rank.
    largest = longest(lengths if cost_error else sizes_of, options.force_group_size, members or None)
    error, cap = _cap(max_token_len, options, largest)
    if cap is None:
        return RankAnalysis(error, largest=largest, request=request)
    sample_workloads: list[int] = []
    error = cost_error or group_error
    if error is None:
        error, sample_workloads = workloads_of(lengths, workloads, options.workload_model)
    if error is None and not lengths:
        if options.dummy_micro_batches:  # a rank with nothing to do runs the agreed count as dummies
            # no groups, at least one micro-batch (every one a dummy), its floor as asked
            return RankAnalysis(
                _floor_error(0, request.options), cap.usable, lower_bound=1, bound_name="one",
                min_count=1, request=request,
                rule=Rule.sums([], cap.usable, [], request.options.max_samples_per_micro_batch))
        error = EmptyBatch()
    if error is None and group_ids is None and len(lengths) % options.force_group_size:
        error = NotDivisible(len(lengths), options.force_group_size)
    if error is not None:
        return RankAnalysis(error, cap.usable, largest=largest, request=request)
    built = group_rule(lengths, sizes_of, sample_workloads, options, cap, padded_extents,
                       request.costs, members or None, labels if group_ids is not None else None)
    rule = built.rule
    error = built.error or _floor_error(rule.n, options)
    count = _count(rule, built.workloads, options) if error is None else _NO_COUNT
    dummy = (dummy_group(rule, lengths, members or None)  # the group a dummy copies
             if error is None and options.dummy_micro_batches else 0)
    aside = count.rest
    rest = None if aside is None else RankAnalysis(
        None, cap.usable, len(aside.index), aside.rule.sizes, aside.workloads,
        aside.count.lower_bound, aside.count.bound_name, aside.count.min_count,
        _packing=aside.count.packing, rule=aside.rule, request=request)
    result = RankAnalysis(
        error, cap.usable, len(lengths), rule.sizes, built.workloads, count.lower_bound,
        count.bound_name, count.min_count, max(rule.sizes) if options.padded else largest,
        count.packing, built.sample_costs, rule, count.over, dummy, rest,
        [] if aside is None else aside.index, request, members or None, labels)
    if error is None and options.equal_rows_per_micro_batch:  # the count its rows need
        own = search_rows(result)
        over = None if own.tolerance >= own.rows else RowsOverCap(own.rows, own.tolerance,
                                                                  request.max_token_len)
        return replace(result, error=over, min_count=own.count, equal_rows=own)
    return result


def _groups(
    group_ids: Any, lengths: list[int], options: PlanOptions, length_error: PlanError | None
) -> tuple[PlanError | None, list[list[int]], list[str]]:
    """The groups of the batch: ``group_ids``' (read whole), or ``force_group_size``'s
    consecutive ones, the same thing (``[i // g for i in range(n)]``); ``[]`` for single
    samples. Both given is an error; so is a batch ``force_group_size`` does not divide
    (reported by the caller, after the other checks, as verl orders them)."""
    size, n = options.force_group_size, len(lengths)
    if group_ids is None:  # forced groups are named by their first sample, not an id
        return None, [] if size == 1 or n % size else uniform_members(n, size), []
    if size > 1:
        return GroupIdsAndForceGroupSize(size), [], []
    return (None, [], []) if length_error is not None else read_group_ids(group_ids, n)


def _cap(max_token_len: Any, options: PlanOptions, largest: int) -> tuple[PlanError | None, Cap | None]:
    """``(None, the checked cap)``, or ``(error, None)`` for a bad cap or a bucket above
    it (the options themselves were checked by :class:`~seqlen_balancing.PlanOptions`)."""
    error, given = argument_error(max_token_len, "max_token_len")
    if error is not None:
        return error, None
    bucket = options.micro_batch_multiple_of
    usable = micro_batch_capacity(given, bucket)
    if usable == 0:
        # The advised cap holds a bucket and the costliest group, rounded up to the bucket.
        return BucketAboveCap(bucket, given, max(bucket, -(-largest // bucket) * bucket)), None
    return None, Cap(given, usable, bucket)


def _floor_error(groups: int, options: PlanOptions) -> PlanError | None:
    """The error for ``min_num_micro_batch`` above the groups (without dummies, or with
    more dummies than allowed), else ``None``."""
    floor = options.min_num_micro_batch
    if floor is None or floor <= groups:
        return None
    if not options.dummy_micro_batches:
        return MinAboveGroups(floor, groups)
    return TooManyDummies(floor - groups, groups, floor) if floor - groups > MAX_DUMMY_MICRO_BATCHES else None


def _count(rule: Rule, workloads: list[int], options: PlanOptions) -> Count:
    """The smallest count under the rule, with the over-cap items set apart first under
    ``over_cap="alone"`` (the floor counts the groups, not the dummies)."""
    floor = options.min_num_micro_batch
    own_floor = None if floor is None else min(floor, rule.n)
    divisor = options.num_batches_divided_by or 1
    over = [g for g in range(rule.n) if not rule.fits_alone(g)] if options.over_cap == "alone" else []
    return (_set_aside(rule, workloads, divisor, over, own_floor) if over
            else search_count(rule, workloads, divisor, own_floor))


def agreed_count(
    needed: int,
    n_groups: int,
    num_batches_divided_by: int = 1,
    rank_needing: int = -1,
    dummies: bool = False,
) -> tuple[int, PlanError | None]:
    """Round ``needed`` up to a multiple of ``num_batches_divided_by`` and check it.

    Args:
        needed: micro-batches the cap (and ``min_num_micro_batch``) needs; on a DP group,
            the largest over the ranks.
        n_groups: samples/groups available (on a DP group, the fewest over the ranks).
        num_batches_divided_by: the count must be a multiple of this.
        rank_needing: DP rank that needed ``needed``, named in the error (-1: none).
        dummies: the micro-batches above ``n_groups`` are dummies
            (``dummy_micro_batches=True``), at most
            :data:`~seqlen_balancing.errors.MAX_DUMMY_MICRO_BATCHES` of them.

    Returns:
        ``(count, None)``, or ``(0, error)`` when the count exceeds ``n_groups`` (a
        micro-batch cannot be empty) and no dummies may serve it, or needs too many.

    Example:
        >>> agreed_count(5, 8, 4)
        (8, None)
        >>> agreed_count(1, 3, 4, dummies=True)
        (4, None)
    """
    count = roundup_divisible(needed, num_batches_divided_by)
    if count > n_groups and not dummies:
        return 0, CountAboveGroups(count, n_groups, needed, None if rank_needing < 0 else rank_needing)
    if count - n_groups > MAX_DUMMY_MICRO_BATCHES:
        return 0, TooManyDummies(count - n_groups, n_groups, count)
    return count, None


def local_count(result: RankAnalysis, rank: int | None = None) -> int:
    """The count one rank plans alone (no DP agreement), or its error raised.

    Args:
        result: this rank's :func:`analyse` result.
        rank: DP rank named in the error, or ``None``.

    Returns:
        ``result.needed_count`` rounded up to ``num_batches_divided_by``.

    Raises:
        TypeError, ValueError: ``result``'s error, or more micro-batches than groups
            (without dummies).
    """
    if result.error is not None:
        raise result.error.exception(rank)
    count, error = agreed_count(result.needed_count, result.n_groups,
                                result.num_batches_divided_by, dummies=result.given.dummy_micro_batches)
    if error is not None:
        raise error.exception(rank)
    return count


def balanced_bins(result: RankAnalysis, count: int) -> list[list[int]]:
    """The groups of each of ``count`` best-balanced micro-batches (unordered), verl's
    Karmarkar-Karp partition at ``count`` among the candidates where it fits."""
    if result._rest is not None:  # over-cap groups alone, the others balanced around them
        left = count - len(result.over_cap_groups)
        return _around_over(result, balanced_bins(result._rest, left) if left else [])
    if count == result.n_groups:
        return [[g] for g in range(count)]
    if result.rule is None:
        raise ValueError("an analysis without a rule has no plan")
    # verl's own partition at this count whenever it fits: at verl's count it always does,
    # so the plan is never less balanced than verl's (its candidate wins ties).
    return balanced(result.rule, result.group_workloads, result._packing, count,
                    _fitting_kk(result.rule, result.group_workloads, count))


def _around_over(result: RankAnalysis, rest: list[list[int]]) -> list[list[int]]:
    """Each over-cap group alone, then ``rest``'s bins (over the rest's groups) renumbered."""
    return [[g] for g in result.over_cap_groups] + [[result._rest_index[j] for j in b] for b in rest]


@paused_collector
def build_plan(
    result: RankAnalysis, count: int, use_dynamic_bsz_balance: bool = True,
    rows: int | None = None, *, agreed: bool = False,
) -> list[list[int]]:
    """The best-balanced plan with exactly ``count`` micro-batches, ordered.

    The smallest workload gap among :func:`~seqlen_balancing.planning.balance.balanced`'s
    candidates under the analysis' rule: Karmarkar-Karp on workloads (verl's partition)
    when it fits the rule, the capacity-aware longest-processing-time (LPT) packing, and
    the analysis' packing split up to ``count`` and rebalanced by moving groups from the
    heaviest micro-batch to the lightest (for plain sums only when neither of the others
    fits; padded rules add the sorted slices). All respect the rule. Karmarkar-Karp is
    tried only when ``n * count <= 2**22``, which bounds its O(n * count) cost.

    With ``over_cap="alone"`` each over-cap group takes a micro-batch of its own and the
    others fill the remaining ``count - len(over_cap_groups)`` as above. With
    ``dummy_micro_batches`` and ``count > n_groups``, every group runs alone and the
    ``count - n_groups`` dummies follow, last, as empty lists: concatenating the outputs
    of the micro-batches in order then puts the dummies' rows after every real row, so
    the reverse index of the real rows (verl's restore) never reads them.

    Args:
        result: an error-free :class:`RankAnalysis`.
        count: micro-batches, ``result.min_count <= count <= result.n_groups`` (or above
            ``n_groups`` with ``dummy_micro_batches``).
        use_dynamic_bsz_balance: order as :func:`order_micro_batches` describes.
        agreed: ``count`` was agreed with a DP group, whose ranks run their micro-batches
            in lock-step: without ``use_dynamic_bsz_balance`` they go heaviest first, so
            that index ``k`` weighs about the same on every rank (verl's balanced order
            already sorts by workload the same way on every rank). The analysis' option
            ``heaviest_first`` orders them so whatever this flag and
            ``use_dynamic_bsz_balance`` say (:func:`~seqlen_balancing.planning.balance.heaviest_first`).
        rows: with ``equal_rows_per_micro_batch``, the rows of every micro-batch (the DP
            group's agreed rows; ``None`` or 0: the rank's own at ``count``,
            :func:`~seqlen_balancing.planning.rows.rows_at`); the plan is then balanced
            under :func:`~seqlen_balancing.planning.rows.rows_rule` and each list is a
            :class:`~seqlen_balancing.planning.rows.RowIndices` holding its filler count.

    Returns:
        ``count`` lists of sample indices, each sorted ascending, together an exact cover of
        ``range(result.n_samples)``; each real one non-empty and at most
        ``result.max_token_len`` tokens (but an over-cap group alone); dummies empty, last.

    Raises:
        ValueError: ``result`` holds an error or ``count`` is out of range.

    Complexity: O(n log n + min(n * count, 2**22)).
    """
    if result.error is not None:
        raise result.error.exception()
    if result.equal_rows is not None:
        at = rows_at(result, count)
        wanted = rows or at.rows
        plan = build_plan(rows_view(result, at, wanted), count, use_dynamic_bsz_balance, agreed=agreed)
        return list(filled_plan(result, plan, wanted))
    if rows and not result.n_samples and result.given.dummy_micro_batches:
        return list(empty_rank_plan(count, rows))  # the group's rows, as dummies
    top = count if result.given.dummy_micro_batches else result.n_groups
    if not result.min_count <= count <= top:
        raise ValueError(
            f"count must be in {result.min_count}..{result.n_groups} for this batch, got {count}"
        )
    real = min(count, result.n_groups)
    bins, members = balanced_bins(result, real), result.members
    if members is None:  # every sample its own group (the common case: no copies)
        micro_batches, loads = [sorted(b) for b in bins], result.group_workloads
    else:  # a group's workload at its first sample: a micro-batch weighs its groups' sum
        micro_batches = [sorted(s for g in b for s in members[g]) for b in bins]
        loads = [0] * result.n_samples
        for g, m in enumerate(members):
            loads[m[0]] = result.group_workloads[g]
    # asked for (an out-of-memory shows at the first), or lined up with the DP group's ranks
    ordered = (heaviest_first(micro_batches, loads)
               if result.given.heaviest_first or (agreed and not use_dynamic_bsz_balance)
               else order_micro_batches(micro_batches, loads, use_dynamic_bsz_balance))
    return ordered + [[] for _ in range(count - real)]


def plan_micro_batches(
    seq_lens: Sequence[int],
    max_token_len: int,
    *,
    options: PlanOptions | None = None,
    num_micro_batches: int | None = None,
    costs: Sequence[int] | Callable[[list[int]], Iterable[int]] | None = None,
    workloads: Sequence[int] | Callable[[list[int]], Iterable[int]] | None = None,
    group_ids: Sequence[Hashable] | None = None,
    prefix_lengths: Sequence[int] | None = None,
    **option_keywords: Unpack[PlanOptionKeywords],
) -> list[list[int]]:
    """Plan one rank's micro-batches on a plain list of lengths (no torch needed).

    The same plan :func:`~seqlen_balancing.rearrange_micro_batches` makes for a TensorDict
    with these effective lengths and no DP group. Never more micro-batches than verl
    0.9.1's rule on the same lengths, and at the same count never a larger workload spread
    (the module docstring says why).

    Args:
        seq_lens: effective length in tokens of each of the ``n`` samples.
        max_token_len: hard cap in tokens on every micro-batch.
        options: the plan's options (:class:`~seqlen_balancing.PlanOptions`;
            docs/options.md says what each does); ``None``: verl's behaviour.
        num_micro_batches: use exactly this count (e.g. agreed by a DP group) instead of
            the smallest: a multiple of ``num_batches_divided_by``, at most the number of
            samples/groups, and a count this library can plan (where its own count is
            higher, it searches for a plan with this many: verl's Karmarkar-Karp at that
            count, an exhaustive search on up to 40 groups, the exchange search).
        costs: one non-negative cost in tokens per sample instead of the effective
            lengths (or a callable of the lengths returning them), e.g. image plus text
            tokens or a memory estimate, rounded up to ``pad_to_multiple_of`` as the
            lengths are (one rule: a sample costs its given cost or length, aligned);
            ``None``: none. Read whole; a mapping, a set or a string is refused.
        workloads: one non-negative integer per sample (or a callable of the lengths),
            the balance objective (what Karmarkar-Karp, the capacity-aware balancing, the
            rebalancing and the order of micro-batches weigh) instead of verl's ``24576*s
            + s**2``; e.g. :func:`~seqlen_balancing.cost.transformer_workloads` of the
            lengths. The cap, the count and the bounds are untouched. ``None``: verl's
            workload (or the ``workload_model``'s), and the "never worse than verl"
            guarantee, which is stated for it.
        group_ids: one hashable id per sample (ints, strings such as verl's ``uid``,
            tuples; a list, a tuple or a 1-D array), or ``None``: samples with equal ids
            form a group that lands whole in one micro-batch. Groups may be of any size
            and need not be contiguous; a group costs its samples' summed cost under the
            rule (padded: its rows x the widest), and one over the cap (or over
            ``max_samples_per_micro_batch``) is an error naming its id, or runs alone under
            ``over_cap="alone"``. ``force_group_size=g`` is ``group_ids=[i // g for i in
            range(n)]``; pass one of them (docs/shapes.md).
        prefix_lengths: with ``group_ids`` or ``force_group_size``, the tokens each sample
            shares with its group (GRPO's prompt), counted once per micro-batch; a group over
            the cap is split into
            parts that each pay it
            (:func:`~seqlen_balancing.planning.prefix.shared_prefix_costs`, docs/prefix.md).
        **option_keywords: any option of :class:`~seqlen_balancing.PlanOptions`
            by name (laid over ``options``): ``num_batches_divided_by``,
            ``min_num_micro_batch``, ``force_group_size``, ``use_dynamic_bsz_balance``,
            ``pad_to_multiple_of``, ``micro_batch_multiple_of``, ``padded``,
            ``max_samples_per_micro_batch``, ``over_cap`` (``"alone"``: a sample or group
            over the cap runs in a micro-batch of its own, with a warning on the
            ``seqlen_balancing`` logger), ``dummy_micro_batches`` (a count above the
            samples/groups is served by empty dummy lists at the end),
            ``loss_weight_keys``, ``workload_model`` and ``equal_rows_per_micro_batch``
            (every micro-batch holds the same rows, its real rows topped up with filler
            rows counted under the cap: docs/pipeline.md), ``heaviest_first`` (the
            micro-batches by workload descending, ties by first index, over
            ``use_dynamic_bsz_balance``).

    Returns:
        Micro-batches as lists of sample indices (each sorted, non-empty, its cost at most
        ``max_token_len`` tokens: ``micro_batch_cost`` of its samples' costs), together an
        exact cover of ``range(n)``; with ``over_cap="alone"`` an over-cap sample or group
        is a micro-batch of its own, and with ``dummy_micro_batches`` the dummies are empty
        lists, last. With ``equal_rows_per_micro_batch`` each list is a
        :class:`~seqlen_balancing.planning.rows.RowIndices` (its ``filler`` rows, copies of sample
        ``filler_row``, make ``len + filler`` the same for all; the cost counts them).
        Balance and order use the effective lengths (or ``workloads``).

    Raises:
        TypeError: an argument or length is not an integer, a switch is not a bool (or
            0/1), an unknown option name, or per-sample data that is not a sequence.
        ValueError: empty input, a negative length or cost, ``costs`` not one per sample,
            a sample or forced group whose cost is over the cap (``exceeds
            max_token_len``, giving its tokens and its cost), a ``micro_batch_multiple_of``
            above the cap, ``n`` not divisible by ``force_group_size``, or more
            micro-batches needed than samples/groups.

    Complexity: O(n log n) plus Karmarkar-Karp's O(n * count), once per count tried between
    the lower bound and the packings' count (none when they meet; see the module
    docstring), plus an exhaustive search of at most 50,000 steps per count between the
    bound and the packings' count, on up to 40 groups, when a gap remains.

    Example:
        >>> plan_micro_batches([7] * 4, 8)
        [[1], [3], [2], [0]]
        >>> plan_micro_batches([2, 6, 6, 5, 5], 12)
        [[1, 2], [0, 3, 4]]
        >>> len(plan_micro_batches([250] * 65, 16384)), len(plan_micro_batches([250] * 65, 16384,
        ...                                                                    pad_to_multiple_of=32))
        (1, 2)
        >>> sorted(plan_micro_batches([100, 10, 10, 10, 100], 150, padded=True))
        [[0], [1, 2, 3], [4]]
        >>> len(plan_micro_batches([100] * 64, 16384, max_samples_per_micro_batch=16))
        4
        >>> len(plan_micro_batches([250] * 65, 16384, costs=[250] * 65, pad_to_multiple_of=8))
        2
        >>> plan_micro_batches([5000, 100, 200], 4096, over_cap="alone")
        [[0], [1, 2]]
        >>> plan_micro_batches([10, 20, 30], 100, num_batches_divided_by=4, dummy_micro_batches=True)
        [[0], [2], [1], []]
        >>> plan = plan_micro_batches([10, 4, 6, 3, 3, 8, 9, 1], 20, equal_rows_per_micro_batch=True)
        >>> [(list(part), part.filler) for part in plan]
        [([0, 1], 1), ([2, 5, 7], 0), ([3, 4, 6], 0)]
        >>> plan_micro_batches([60, 30, 50, 40], 100, group_ids=["a", "b", "b", "a"])
        [[0, 3], [1, 2]]
    """
    given, error = PlanOptions.from_keywords(options, None, option_keywords)
    if error is not None:
        raise error.exception()
    result = analyse_with_prefixes(seq_lens, max_token_len, given, prefix_lengths, costs=costs,
                                   workloads=workloads, group_ids=group_ids)
    count = local_count(result)
    if num_micro_batches is not None:
        count, result = _exact_count(result, num_micro_batches)
    plan = build_plan(result, count, given.use_dynamic_bsz_balance)
    log_over_cap(result)
    return plan


def over_cap_messages(result: RankAnalysis, rank: int | None = None) -> list[str]:
    """The warning for each over-cap sample or group that runs alone (``over_cap="alone"``).

    Args:
        result: an error-free :class:`RankAnalysis`.
        rank: the DP rank that holds them, named in the text, or ``None``.

    Returns:
        One line per over-cap sample/group, in index order, naming its first sample's
        index, its cost in tokens and the cap, e.g. ``sample 0 costs 5000 tokens, over
        max_token_len=4096: it runs alone in a micro-batch of its own (over_cap='alone'),
        the only micro-batch over the cap; it may run out of memory`` (prefixed with
        ``rank R of the DP group: `` when ``rank`` is given).

    Example:
        >>> result = analyse([5000, 100, 200], 4096, PlanOptions(over_cap="alone"))
        >>> over_cap_messages(result, rank=1)[0][:51]
        'rank 1 of the DP group: sample 0 costs 5000 tokens,'
    """
    prefix = "" if rank is None else f"rank {rank} of the DP group: "
    members = result.members
    unit = "token positions padded (rows x its widest row)" if result.given.padded else "tokens"

    def what(g: int) -> str:
        if members is None:
            return f"sample {g}"
        if result.custom_groups:
            return f"group {result.group_labels[g]} (first sample {members[g][0]})"
        return f"the forced group starting at sample {members[g][0]}"

    limit = result.given.max_samples_per_micro_batch

    def over(g: int) -> str:
        if result.group_sizes[g] <= result.max_token_len and limit is not None:
            samples = len(result.samples_of(g))  # a group of ids over the sample limit
            return (f"holds {samples} samples, over max_samples_per_micro_batch={limit}: it runs "
                    "alone in a micro-batch of its own (over_cap='alone'), the only micro-batch "
                    "over the limit")
        return (f"costs {result.group_sizes[g]} {unit}, over "
                f"max_token_len={result.requested_max_token_len}: it runs alone in a micro-batch of "
                "its own (over_cap='alone'), the only micro-batch over the cap; it may run out of memory")

    return [f"{prefix}{what(g)} {over(g)}" for g in result.over_cap_groups]


def log_over_cap(result: RankAnalysis, rank: int | None = None) -> None:
    """Log :func:`over_cap_messages` as warnings on the ``seqlen_balancing`` logger (which
    never raises, so it is safe on any rank at any point of an agreement)."""
    for message in over_cap_messages(result, rank):
        logger.warning(message)


def _exact_count(result: RankAnalysis, num_micro_batches: Any) -> tuple[int, RankAnalysis]:
    """``num_micro_batches`` checked against the batch, and the analysis to plan it from:
    ``result``, or where the analysis stopped above it, one holding a packing with that
    many micro-batches (:func:`_reach`)."""
    error, wanted = argument_error(num_micro_batches, "num_micro_batches")
    if error is not None:
        raise error.exception()
    divisor, cap = result.num_batches_divided_by, result.requested_max_token_len
    if wanted % divisor:
        raise ValueError(
            f"num_micro_batches={wanted} is not a multiple of num_batches_divided_by={divisor}; "
            f"pass a multiple (e.g. {roundup_divisible(wanted, divisor)}) or drop "
            "num_batches_divided_by"
        )
    count, error = agreed_count(wanted, result.n_groups, divisor,
                                dummies=result.given.dummy_micro_batches)
    if error is not None:
        raise error.exception()
    if result.equal_rows is not None and wanted < result.equal_rows.count:
        raise ValueError(
            f"num_micro_batches={wanted}: with equal_rows_per_micro_batch the fewest "
            f"micro-batches found whose rows all fit max_token_len={cap} with their filler "
            f"rows is {result.equal_rows.count}; pass at least {result.equal_rows.count}"
        )
    if wanted < result.lower_bound:
        raise ValueError(
            f"num_micro_batches={wanted} is below the lower bound of {result.lower_bound} "
            f"micro-batches ({result.bound_name}) for this batch under max_token_len={cap}: no "
            f"plan with fewer exists; pass at least {result.lower_bound}"
        )
    reached = _reach(result, wanted) if wanted < result.min_count else result
    if reached is None:
        raise ValueError(
            f"num_micro_batches={wanted}: no plan with {wanted} micro-batches under "
            f"max_token_len={cap} was found (the fewest found is {result.min_count}; the "
            f"lower bound, {result.lower_bound}, does not rule {wanted} out); pass at least "
            f"{result.min_count}"
        )
    return count, reached


def _reach(result: RankAnalysis, count: int) -> RankAnalysis | None:
    """Look for a packing with at most ``count`` micro-batches (``count`` below the
    analysis' own): verl's Karmarkar-Karp at ``count``, then (summed costs) the exhaustive
    search on few groups and the exchange search, then (any other rule) the randomized
    best fit; ``result`` with it when found, else ``None``."""
    if result._rest is not None:
        over = len(result.over_cap_groups)
        rest = _reach(result._rest, count - over) if count > over else None
        return None if rest is None else replace(result, _rest=rest, min_count=over + rest.min_count,
                                                 _packing=_around_over(result, rest._packing))
    rule = result.rule
    if rule is None:
        return None
    found = _fitting_kk(rule, result.group_workloads, count)
    if found is None and not rule.is_padded and rule.n <= _EXACT_GROUPS:
        found, _ = exact_packing(rule, count, _EXACT_BUDGET)
    if found is None and not rule.is_padded:
        packed = repack(rule, result._packing, target=count)
        found = packed if len(packed) <= count else None
    if found is None and not rule.plain:
        packed = randomized_best_fit(rule, count, result._packing)
        found = packed if len(packed) <= count else None
    return None if found is None else replace(result, _packing=found, min_count=len(found))
