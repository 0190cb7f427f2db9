"""The micro-batch plan of one rank, on plain integer lists (no torch).

Steps, each a function here:

1. :func:`analyse` checks the arguments and lengths, forms the ``force_group_size`` groups
   and finds the smallest micro-batch count this library can reach under the cap
   (between :func:`~seqlen_balancing.bounds.lower_bound` and a best-fit-decreasing
   packing); a count that meets the bound is proven optimal. It never raises
   for bad input: it records a :class:`~seqlen_balancing.errors.PlanError`, so that a DP
   group can agree on it before anyone raises.
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
rank's parts fit. :func:`~seqlen_balancing.partition.karmarkar_karp` returns verl's
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
from collections.abc import Sequence
from typing import Any

from seqlen_balancing._checks import _integer_or_none, as_list, as_switch, describe, switch
from seqlen_balancing.analysis import RankAnalysis
from seqlen_balancing.balance import _lpt_with_cap, _rebalance, _workload_gap, order_micro_batches
from seqlen_balancing.cost import aligned_length, micro_batch_capacity
from seqlen_balancing.errors import (
    MAX_DUMMY_MICRO_BATCHES,
    Argument,
    BelowOne,
    BucketAboveCap,
    CombinationRefused,
    CountAboveGroups,
    EmptyBatch,
    GroupOverCap,
    LengthNotAnInteger,
    LengthsNotASequence,
    LengthsNotOneDimensional,
    LengthSource,
    MinAboveGroups,
    NegativeLength,
    NotAnInteger,
    NotASwitch,
    NotDivisible,
    NotOnePerSample,
    OverCap,
    OverCapNotAString,
    PlanError,
    SampleOverCap,
    TooManyDummies,
    UnknownOverCap,
)
from seqlen_balancing.packing import exact_packing, reduce_bins, split_to_count
from seqlen_balancing.padded import (
    BinRule,
    balanced_under_rule,
    padded_options,
    plan_padded,
)
from seqlen_balancing.partition import WORKLOAD_LINEAR_COEF, roundup_divisible
from seqlen_balancing.search import (
    _EXACT_BUDGET,
    _EXACT_GROUPS,
    _fitting_kk,
    _search_count,
    _set_aside,
)

__all__ = [
    "OVER_CAP_CHOICES",
    "RankAnalysis",
    "agreed_count",
    "analyse",
    "build_plan",
    "local_count",
    "log_over_cap",
    "order_micro_batches",
    "over_cap_messages",
    "plan_micro_batches",
]

#: The values ``over_cap`` takes: ``"raise"`` (verl's behaviour: an over-cap sample is a
#: ``ValueError``) or ``"alone"`` (it runs in a micro-batch of its own, with a warning).
OVER_CAP_CHOICES = ("raise", "alone")

#: Where the over-cap warnings go (``over_cap="alone"``): logging rather than
#: ``warnings.warn``, since a warnings filter set to "error" would turn the warning into an
#: exception on one DP rank only, after its peers entered the agreement.
logger = logging.getLogger("seqlen_balancing")


def argument_error(value: Any, argument: Argument, optional: bool) -> tuple[PlanError | None, int]:
    """``(None, value as int)`` for a positive integer (or ``None`` when ``optional``: 1),
    else ``(error, 0)`` with the error every rank can agree on."""
    if value is None and optional:
        return None, 1
    as_int = _integer_or_none(value)
    if as_int is None:
        return NotAnInteger(argument, detail=describe(value)), 0
    if as_int < 1:
        return BelowOne(argument, as_int), 0
    return None, as_int


def _lengths(
    seq_lens: Sequence[Any], source: LengthSource = LengthSource.SEQ_LENS
) -> tuple[PlanError | None, list[int]]:
    out: list[int] = []
    try:
        values = as_list(seq_lens, source.name.lower())
    except (TypeError, ValueError) as exc:  # not a sequence, or not one-dimensional
        shape = LengthsNotOneDimensional if isinstance(exc, ValueError) else LengthsNotASequence
        return shape(source, detail=str(exc)), []
    for index, value in enumerate(values):
        as_int = value if type(value) is int else _integer_or_none(value)
        if as_int is None:
            return LengthNotAnInteger(source, index, detail=describe(value)), []
        if as_int < 0:
            return NegativeLength(source, index, as_int), []
        out.append(as_int)
    return None, out


def _longest(sizes: list[int], group: int | None) -> int:
    """The costliest forced group in tokens (its samples' costs summed; the costliest
    sample when the groups cannot be formed), 0 for no samples."""
    if not sizes:
        return 0
    if group is None or group <= 1 or len(sizes) % group:
        return max(sizes)
    return max(sum(sizes[g : g + group]) for g in range(0, len(sizes), group))


def _sample_costs(
    lengths: list[int], pad: int, costs: Any
) -> tuple[PlanError | None, list[int]]:
    """Each sample's cost (:func:`~seqlen_balancing.cost.sample_costs`: the given cost, or
    the effective length, rounded up to ``pad``), or the error to agree on."""
    if costs is None:
        return None, [aligned_length(n, pad) for n in lengths] if pad > 1 else lengths
    error, given = _lengths(costs, LengthSource.COSTS)
    if error is None and len(given) != len(lengths):
        error = NotOnePerSample(LengthSource.COSTS, len(given), len(lengths))
    if error is None and pad > 1:
        given = [aligned_length(c, pad) for c in given]
    return error, given


def _workloads_of(lengths: list[int], workloads: Any) -> tuple[PlanError | None, list[int]]:
    """Each sample's balance workload: the caller's (a list, or a callable of the
    effective lengths), or verl's ``24576*s + s**2``."""
    if workloads is None:
        return None, [(WORKLOAD_LINEAR_COEF + s) * s for s in lengths]
    if callable(workloads):
        try:
            workloads = workloads(list(lengths))
        except Exception as exc:  # agreed on as this rank's error, never raised here
            detail = f"the workloads callable raised {exc!r}"
            return LengthsNotASequence(LengthSource.WORKLOADS, detail=detail), []
    error, given = _lengths(workloads, LengthSource.WORKLOADS)
    if error is None and len(given) != len(lengths):
        error = NotOnePerSample(LengthSource.WORKLOADS, len(given), len(lengths))
    return error, given


def _option_error(over_cap: Any, dummy_micro_batches: Any) -> PlanError | None:
    """The error for a bad ``over_cap`` or ``dummy_micro_batches``, else ``None``."""
    if not isinstance(over_cap, str):
        return OverCapNotAString(detail=describe(over_cap))
    if over_cap not in OVER_CAP_CHOICES:
        return UnknownOverCap(detail=repr(over_cap)[:60])
    if as_switch(dummy_micro_batches) is None:
        return NotASwitch(Argument.DUMMY_MICRO_BATCHES, detail=describe(dummy_micro_batches))
    return None


def _cost_over_cap(
    result: RankAnalysis, lengths: list[int], costs: list[int], kind: type[OverCap], stride: int
) -> PlanError | None:
    """The error for items (samples or groups) whose cost exceeds the usable cap, naming
    the first one's tokens and cost, the cap given, how many and the largest cost."""
    cap = result.max_token_len
    over = [i for i, cost in enumerate(costs) if cost > cap]
    if not over:
        return None
    first = over[0]
    largest = max(costs[i] for i in over)
    return kind(lengths[first], first * stride, result.requested_max_token_len, len(over), largest,
                costs[first], result.micro_batch_multiple_of, result.pad_to_multiple_of,
                result.custom_costs)


def analyse(
    seq_lens: Sequence[Any],
    max_token_len: Any,
    *,
    force_group_size: Any = 1,
    min_num_micro_batch: Any = None,
    num_batches_divided_by: Any = None,
    pad_to_multiple_of: Any = 1,
    micro_batch_multiple_of: Any = 1,
    costs: Any = None,
    padded: Any = False,
    max_samples_per_micro_batch: Any = None,
    padded_extents: tuple[Sequence[int], Sequence[int]] | None = None,
    workloads: Any = None,
    over_cap: Any = "raise",
    dummy_micro_batches: Any = False,
) -> RankAnalysis:
    """Check one rank's input and find its smallest micro-batch count under the cap.

    Never raises for bad input; the reason is returned in ``error`` so that the DP group
    can agree on it first (see :mod:`seqlen_balancing.agreement`).

    Count search: best-fit decreasing gives ``U``; ``L = max(lower bound,
    min_num_micro_batch, 1)``, the bounds of
    :func:`~seqlen_balancing.bounds.best_lower_bound` tried cheapest first until one meets
    ``U``. Only if ``U > L`` do stronger packings and an exchange local search
    (:func:`~seqlen_balancing.packing.reduce_bins`) work from ``U`` down towards ``L``,
    stopping as soon as they meet it. Every count between the result and the number of
    groups is feasible, since splitting a micro-batch never breaks the cap.

    The cap holds on what the GPU holds (:mod:`seqlen_balancing.cost`): each sample costs
    its given cost (``costs``) or else its effective length, rounded up to
    ``pad_to_multiple_of``, and a
    micro-batch's summed cost, rounded up to ``micro_batch_multiple_of``, is at most
    ``max_token_len``; that is, the summed cost is at most ``max_token_len //
    micro_batch_multiple_of * micro_batch_multiple_of`` (``result.max_token_len``). The
    search above runs on those costs and that cap.

    Args:
        seq_lens: effective length in tokens of each sample on this rank.
        max_token_len: cap in tokens per micro-batch.
        force_group_size: consecutive samples that must share a micro-batch.
        min_num_micro_batch: lower limit on the count, or ``None``.
        num_batches_divided_by: the final count must be a multiple of this, or ``None``.
        pad_to_multiple_of: per-sequence alignment in tokens (``None`` or 1: none).
        micro_batch_multiple_of: per-micro-batch rounding in tokens (``None`` or 1: none).
        costs: one non-negative cost in tokens per sample, replacing the effective lengths
            and rounded up to ``pad_to_multiple_of`` like them, or ``None``.
        padded, max_samples_per_micro_batch: as in :func:`plan_micro_batches`.
        padded_extents: with ``padded``, each sample's ``(left, right)`` span around a
            column every row shares (:func:`~seqlen_balancing.padded.padded_rule`).
        workloads: one non-negative integer per sample, the balance objective (summed per
            group) instead of verl's ``24576*s + s**2``, or a callable taking the list of
            effective lengths and returning them (e.g. ``functools.partial(
            transformer_workloads, hidden_size=8192)``; what it raises becomes this rank's
            error), or ``None``. The cap is untouched.
        over_cap: ``"raise"`` (an over-cap sample or group is an error) or ``"alone"``
            (each runs in a micro-batch of its own; the rest is planned as usual).
        dummy_micro_batches: serve counts above ``n_groups`` (``min_num_micro_batch``,
            ``num_batches_divided_by``, a DP group's count) with dummy micro-batches.

    Returns:
        A :class:`RankAnalysis`.

    Complexity: O(n log n) for the bounds and best-fit decreasing, plus the bounded local
    search when best-fit decreasing misses the bound.
    """
    checks = (
        (max_token_len, Argument.MAX_TOKEN_LEN, False),
        (force_group_size, Argument.FORCE_GROUP_SIZE, False),
        (min_num_micro_batch, Argument.MIN_NUM_MICRO_BATCH, True),
        (num_batches_divided_by, Argument.NUM_BATCHES_DIVIDED_BY, True),
        (pad_to_multiple_of, Argument.PAD_TO_MULTIPLE_OF, True),
        (micro_batch_multiple_of, Argument.MICRO_BATCH_MULTIPLE_OF, True),
    )
    length_error, lengths = _lengths(seq_lens)
    as_pad = _integer_or_none(pad_to_multiple_of) if pad_to_multiple_of is not None else 1
    cost_error, sizes_of = (
        (length_error, []) if length_error else _sample_costs(lengths, max(as_pad or 1, 1), costs)
    )
    # Read even when an argument is bad: the DP group's advice on the cap counts this rank.
    largest = _longest(lengths if cost_error else sizes_of, _integer_or_none(force_group_size))
    ints: list[int] = []
    for value, argument, optional in checks:
        error, as_int = argument_error(value, argument, optional)
        if error is not None:
            return RankAnalysis(error, largest=largest)
        ints.append(as_int)
    option_error = _option_error(over_cap, dummy_micro_batches)
    if option_error is not None:
        return RankAnalysis(option_error, largest=largest)
    alone, dummies = over_cap == "alone", bool(as_switch(dummy_micro_batches))
    cap, group, floor, divisor, pad, bucket = ints
    usable = micro_batch_capacity(cap, bucket)
    if usable == 0:
        # The advised cap holds a bucket and the costliest group, rounded up to the bucket.
        needed = max(bucket, -(-largest // bucket) * bucket)
        return RankAnalysis(BucketAboveCap(bucket, cap, needed), largest=largest)
    error, padded_on, limit = padded_options(padded, max_samples_per_micro_batch, group)
    if error is None:
        error = _combination_error(padded_on, limit, alone, dummies)
    if error is not None:
        return RankAnalysis(error, largest=largest)
    result = RankAnalysis(None, usable, group, divisor, largest=largest)
    result.requested_max_token_len = cap
    result.pad_to_multiple_of, result.micro_batch_multiple_of = pad, bucket
    result.custom_costs = costs is not None
    result.padded, result.max_samples_per_micro_batch = padded_on, limit
    result.custom_workloads = workloads is not None
    result.dummy_micro_batches = dummies
    result.min_num_micro_batch = floor if min_num_micro_batch is not None else 0
    error = cost_error
    sample_workloads: list[int] = []
    if error is None:
        error, sample_workloads = _workloads_of(lengths, workloads)
    if error is None and not lengths:
        error = EmptyBatch()
    if error is None and len(lengths) % group:
        error = NotDivisible(len(lengths), group)
    if error is None and not padded_on and not alone:
        error = _cost_over_cap(result, lengths, sizes_of, SampleOverCap, 1)
    if error is not None:
        result.error = error
        return result
    if padded_on:
        floor_given = None if min_num_micro_batch is None else floor
        return _analyse_padded(result, lengths, sizes_of, floor_given, padded_extents, sample_workloads)
    result.n_samples = len(lengths)
    result.sample_costs = sizes_of
    if group == 1:  # the common case, without a slice per sample
        sizes = sizes_of
        result.group_workloads = sample_workloads
    else:
        sizes = [sum(sizes_of[g : g + group]) for g in range(0, len(lengths), group)]
        result.group_workloads = [
            sum(sample_workloads[g : g + group]) for g in range(0, len(lengths), group)
        ]
    result.group_sizes = sizes
    if limit is not None:
        result.rule = BinRule(usable, sizes, max_groups=limit // group)
    if group > 1 and not alone:
        tokens = [sum(lengths[g : g + group]) for g in range(0, len(lengths), group)]
        result.error = _cost_over_cap(result, tokens, sizes, GroupOverCap, group)
    if result.error is None and min_num_micro_batch is not None and floor > len(sizes):
        if not dummies:
            result.error = MinAboveGroups(floor, len(sizes))
        elif floor - len(sizes) > MAX_DUMMY_MICRO_BATCHES:
            result.error = TooManyDummies(floor - len(sizes), len(sizes), floor)
    if result.error is not None:
        return result
    own_floor = min(floor, len(sizes)) if min_num_micro_batch is not None else None
    over = [g for g, size in enumerate(sizes) if size > usable] if alone else []
    if not over:
        _search_count(result, own_floor)
        return result
    _set_aside(result, over, own_floor)
    return result


def _combination_error(padded: bool, limit: int | None, alone: bool, dummies: bool) -> PlanError | None:
    """The error for options that do not compose yet, else ``None``: ``padded=True`` with
    ``over_cap="alone"`` or ``dummy_micro_batches=True``, and ``max_samples_per_micro_batch``
    with ``over_cap="alone"`` (the padded planner and the sample limit do not model a
    micro-batch set aside over the cap, nor the dummies' copied rows). Refused rather than
    ignored (DESIGN section 3: no setting is ever silently ignored)."""
    pairs = ((padded and alone, Argument.PADDED, Argument.OVER_CAP),
             (padded and dummies, Argument.PADDED, Argument.DUMMY_MICRO_BATCHES),
             (limit is not None and alone, Argument.MAX_SAMPLES_PER_MICRO_BATCH, Argument.OVER_CAP))
    for clash, argument, other in pairs:
        if clash:
            return CombinationRefused(argument, other)
    return None


def _analyse_padded(
    result: RankAnalysis, lengths: list[int], costs: list[int], floor: int | None,
    extents: tuple[Sequence[int], Sequence[int]] | None, sample_workloads: list[int],
) -> RankAnalysis:
    """:func:`analyse` under ``padded=True``: :func:`~seqlen_balancing.padded.plan_padded`;
    the caller's ``workloads`` (when given) replace verl's as the balance objective."""
    limit, group = result.max_samples_per_micro_batch, result.force_group_size
    found = plan_padded(lengths, costs if result.custom_costs else None, extents, group,
                        result.pad_to_multiple_of, result.max_token_len,
                        None if limit is None else limit // group,
                        (result.requested_max_token_len, result.micro_batch_multiple_of), floor)
    result.largest, result.error, result.rule = max(found.rule.sizes), found.error, found.rule
    if found.error is None:
        result.n_samples, result.sample_costs = len(lengths), found.widths
        result.group_sizes, result.group_workloads = found.rule.sizes, found.workloads
        if result.custom_workloads:
            result.group_workloads = [
                sum(sample_workloads[g : g + group]) for g in range(0, len(lengths), group)
            ]
        result.lower_bound, result.bound_name = found.bound, found.bound_name
        result.min_count, result._packing = len(found.packing), found.packing
    return result


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
        needing = None if rank_needing < 0 else rank_needing
        return 0, CountAboveGroups(count, n_groups, needed, needing)
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
                                result.num_batches_divided_by, dummies=result.dummy_micro_batches)
    if error is not None:
        raise error.exception(rank)
    return count



def _balanced_bins(result: RankAnalysis, count: int) -> list[list[int]]:
    if result._rest is not None:  # over-cap groups alone, the others balanced around them
        over, index = result.over_cap_groups, result._rest_index
        left = count - len(over)
        rest = _balanced_bins(result._rest, left) if left else []
        return [[g] for g in over] + [[index[j] for j in b] for b in rest]
    sizes, workloads, cap = result.group_sizes, result.group_workloads, result.max_token_len
    if count == len(sizes):
        return [[g] for g in range(count)]
    if result.rule is not None:  # padded or a sample limit; verl's partition for the sum
        kk = None if result.rule.padded else _fitting_kk(result, count)
        return balanced_under_rule(result.rule, workloads, result._packing, count, kk)
    # verl's own partition at this count whenever it fits the cap: at verl's count it
    # always does, so the plan is never less balanced than verl's.
    candidates = [kk] if (kk := _fitting_kk(result, count)) is not None else []
    lpt = _lpt_with_cap(sizes, workloads, cap, count)
    if lpt is not None:
        candidates.append(lpt)
    if not candidates:
        # A tight count where neither balancer fits: the count's packing, rebalanced.
        return _rebalance(split_to_count(sizes, result._packing, count), sizes, workloads, cap)
    return min(candidates, key=lambda bins: _workload_gap(bins, workloads))  # verl's on a tie


def build_plan(
    result: RankAnalysis, count: int, use_dynamic_bsz_balance: bool = True
) -> list[list[int]]:
    """The best-balanced plan with exactly ``count`` micro-batches, ordered.

    Karmarkar-Karp on workloads when its plan respects the cap; otherwise a capacity-aware
    longest-processing-time (LPT) packing; otherwise the analysis' packing split up to
    ``count`` and rebalanced by moving groups from the heaviest micro-batch to the
    lightest. All three respect the cap. Karmarkar-Karp is tried only when LPT fits (on
    tight counts neither does: in 600 random CHAMP trials Karmarkar-Karp never fitted
    where LPT did not, and ``tests/test_planner.py`` keeps checking it on real batches)
    and when ``n * count <= 2**22``, which bounds its O(n * count) cost.

    Args:
        result: an error-free :class:`RankAnalysis`.
        count: micro-batches, ``result.min_count <= count <= result.n_groups``.
        use_dynamic_bsz_balance: order as :func:`order_micro_batches` describes.

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
    top = count if result.dummy_micro_batches else result.n_groups
    if not result.min_count <= count <= top:
        raise ValueError(
            f"count must be in {result.min_count}..{result.n_groups} for this batch, got {count}"
        )
    group = result.force_group_size
    real = min(count, result.n_groups)
    bins = _balanced_bins(result, real)
    micro_batches = [sorted(s for g in b for s in range(g * group, (g + 1) * group)) for b in bins]
    ordered = order_micro_batches(micro_batches, result.group_workloads, use_dynamic_bsz_balance,
                                  group)
    return ordered + [[] for _ in range(count - real)]


def plan_micro_batches(
    seq_lens: Sequence[int],
    max_token_len: int,
    *,
    num_batches_divided_by: int | None = None,
    min_num_micro_batch: int | None = None,
    force_group_size: int = 1,
    use_dynamic_bsz_balance: bool = True,
    num_micro_batches: int | None = None,
    pad_to_multiple_of: int = 1,
    micro_batch_multiple_of: int = 1,
    costs: Sequence[int] | None = None,
    padded: bool = False,
    max_samples_per_micro_batch: int | None = None,
    workloads: Sequence[int] | None = None,
    over_cap: str = "raise",
    dummy_micro_batches: bool = False,
) -> list[list[int]]:
    """Plan one rank's micro-batches on a plain list of lengths (no torch needed).

    The same plan :func:`~seqlen_balancing.rearrange_micro_batches` makes for a TensorDict
    with these effective lengths and no DP group. Never more micro-batches than verl
    0.9.1's rule on the same lengths, and at the same count never a larger workload spread
    (the module docstring says why).

    Args:
        seq_lens: effective length in tokens of each of the ``n`` samples.
        max_token_len: hard cap in tokens on every micro-batch.
        num_batches_divided_by: the count is rounded up to a multiple of this.
        min_num_micro_batch: at least this many micro-batches.
        force_group_size: consecutive samples ``[g*size, (g+1)*size)`` stay together.
        use_dynamic_bsz_balance: lightest micro-batches at both ends (verl's order).
        num_micro_batches: use exactly this count (e.g. agreed by a DP group) instead of
            the smallest: a multiple of ``num_batches_divided_by``, at most the number of
            samples/groups, and a count this library can plan (where its own count is
            higher, it searches for a plan with this many: verl's Karmarkar-Karp at that
            count, an exhaustive search on up to 40 groups, the exchange search).
        pad_to_multiple_of: each sample costs its length rounded up to a multiple of this
            (Megatron's per-sequence THD alignment, see
            :func:`~seqlen_balancing.cost.megatron_alignment`); 1 (verl's rule): its length.
        micro_batch_multiple_of: a micro-batch's summed cost is rounded up to a multiple of
            this before it meets the cap (verl's ``pad_to_length_bucket``; FP8's total
            alignment); a cap that is not a multiple of it is usable as
            ``max_token_len // micro_batch_multiple_of * micro_batch_multiple_of``.
        costs: one non-negative cost in tokens per sample instead of the effective
            lengths, e.g. image plus text tokens or a memory estimate, rounded up to
            ``pad_to_multiple_of`` as the lengths are (one rule: a sample costs its given
            cost or length, aligned); ``None``: none.
        workloads: one non-negative integer per sample, the balance objective (what
            Karmarkar-Karp, the capacity-aware balancing, the rebalancing and the order of
            micro-batches weigh) instead of verl's ``24576*s + s**2``; e.g.
            :func:`~seqlen_balancing.cost.transformer_workloads` of the lengths. The cap,
            the count and the bounds are untouched. ``None``: verl's workload (and the
            "never worse than verl" guarantee, which is stated for it).
        over_cap: ``"raise"`` (default, verl's behaviour) or ``"alone"``: a sample (or
            forced group) whose cost is over the cap runs in a micro-batch of its own, the
            only micro-batches allowed over the cap, and a warning naming its index, its
            cost and the cap is logged on the ``seqlen_balancing`` logger
            (``over_cap_messages``). The count and the lower bound count one
            micro-batch for each.
        dummy_micro_batches: when the count (``min_num_micro_batch``,
            ``num_batches_divided_by``, ``num_micro_batches``) is above the number of
            samples/groups, each runs alone and the missing micro-batches are dummies:
            empty lists at the end of the plan (the caller runs a copy of a real row with
            zero loss weight there). Default False: that is an error, as in verl.
        padded: for models that run padded tensors: a micro-batch costs rows x its widest
            row (:func:`~seqlen_balancing.cost.padded_micro_batch_cost`), with the fewest
            micro-batches possible (:func:`~seqlen_balancing.padded.fewest_padded`).
        max_samples_per_micro_batch: samples per micro-batch at most (a forced group
            counts all its samples); ``None``: no limit.

    Returns:
        Micro-batches as lists of sample indices (each sorted, non-empty, its cost at most
        ``max_token_len`` tokens: ``micro_batch_cost`` of its samples' costs), together an
        exact cover of ``range(n)``; with ``over_cap="alone"`` an over-cap sample or group
        is a micro-batch of its own, and with ``dummy_micro_batches`` the dummies are empty
        lists, last. Balance and order use the effective lengths (or ``workloads``).

    Raises:
        TypeError: an argument or length is not an integer, or ``use_dynamic_bsz_balance``
            is not a bool (or 0/1).
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
    """
    balance = switch(use_dynamic_bsz_balance, "use_dynamic_bsz_balance")
    result = analyse(
        seq_lens,
        max_token_len,
        force_group_size=force_group_size,
        min_num_micro_batch=min_num_micro_batch,
        num_batches_divided_by=num_batches_divided_by,
        pad_to_multiple_of=pad_to_multiple_of,
        micro_batch_multiple_of=micro_batch_multiple_of,
        costs=costs,
        padded=padded,
        max_samples_per_micro_batch=max_samples_per_micro_batch,
        workloads=workloads,
        over_cap=over_cap,
        dummy_micro_batches=dummy_micro_batches,
    )
    count = local_count(result)
    if num_micro_batches is not None:
        count = _exact_count(result, num_micro_batches)
    plan = build_plan(result, count, balance)
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
        >>> result = analyse([5000, 100, 200], 4096, over_cap="alone")
        >>> over_cap_messages(result, rank=1)[0][:51]
        'rank 1 of the DP group: sample 0 costs 5000 tokens,'
    """
    prefix = "" if rank is None else f"rank {rank} of the DP group: "
    group = result.force_group_size
    what = "sample" if group == 1 else "the forced group starting at sample"
    return [
        f"{prefix}{what} {g * group} costs {result.group_sizes[g]} tokens, over "
        f"max_token_len={result.requested_max_token_len}: it runs alone in a micro-batch of "
        "its own (over_cap='alone'), the only micro-batch over the cap; it may run out of memory"
        for g in result.over_cap_groups
    ]


def log_over_cap(result: RankAnalysis, rank: int | None = None) -> None:
    """Log :func:`over_cap_messages` as warnings on the ``seqlen_balancing`` logger (which
    never raises, so it is safe on any rank at any point of an agreement)."""
    for message in over_cap_messages(result, rank):
        logger.warning(message)


def _exact_count(result: RankAnalysis, num_micro_batches: Any) -> int:
    """``num_micro_batches`` checked against the batch, searching for a packing with that
    many micro-batches where the analysis stopped above it (``result`` then holds it)."""
    error, wanted = argument_error(num_micro_batches, Argument.NUM_MICRO_BATCHES, False)
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
                                dummies=result.dummy_micro_batches)
    if error is not None:
        raise error.exception()
    if wanted < result.lower_bound:
        raise ValueError(
            f"num_micro_batches={wanted} is below the lower bound of {result.lower_bound} "
            f"micro-batches ({result.bound_name}) for this batch under max_token_len={cap}: no "
            f"plan with fewer exists; pass at least {result.lower_bound}"
        )
    if wanted < result.min_count and not _reach(result, wanted):
        raise ValueError(
            f"num_micro_batches={wanted}: no plan with {wanted} micro-batches under "
            f"max_token_len={cap} was found (the fewest found is {result.min_count}; the "
            f"lower bound, {result.lower_bound}, does not rule {wanted} out); pass at least "
            f"{result.min_count}"
        )
    return count


def _reach(result: RankAnalysis, count: int) -> bool:
    """Look for a packing with at most ``count`` micro-batches (``count`` below the
    analysis' own): verl's Karmarkar-Karp at ``count``, the exhaustive search on few
    groups, then the exchange search; store it in ``result`` when found."""
    if result._rest is not None:
        over = len(result.over_cap_groups)
        if count <= over or not _reach(result._rest, count - over):
            return False
        index = result._rest_index
        result.min_count = over + result._rest.min_count
        result._packing = [[g] for g in result.over_cap_groups] + [
            [index[j] for j in b] for b in result._rest._packing
        ]
        return True
    sizes, cap = result.group_sizes, result.max_token_len
    if result.rule is not None:
        return False  # the searches below know the summed cost only
    found = _fitting_kk(result, count)
    if found is None and len(sizes) <= _EXACT_GROUPS:
        found, _ = exact_packing(sizes, cap, count, _EXACT_BUDGET)
    if found is None:
        packed = reduce_bins(sizes, cap, result._packing, target=count)
        found = packed if len(packed) <= count else None
    if found is None:
        return False
    result._packing, result.min_count = found, len(found)
    return True
