"""The whole step planned at once: which samples each DP rank gets, and its micro-batches (no torch).

DP ranks run their micro-batches in lock-step (:mod:`seqlen_balancing.global_batch.lockstep` has the
model: step time = sum over index ``k`` of the slowest rank's micro-batch ``k``, plus a
fixed cost per micro-batch). When the caller decides which samples land on which rank (a
sampler, PPO's balance step), :func:`~seqlen_balancing.plan_global_batch` plans the whole step at once:

1. **Count.** The whole step is analysed as one batch under the one rule
   (``seqlen_balancing.planning.planner.analyse``: costs, alignment, padded, sample limit,
   force groups). Its best lower bound ``B`` says that no plan with the same count on
   every rank has fewer than ``K = ceil(B / dp_size)`` micro-batches per rank; planning
   starts there (raised to ``min_num_micro_batch``, rounded up to
   ``num_batches_divided_by``) and tries the next count only where ``K`` cannot be
   planned.
2. **Ranks first** (``equal_size``, the default). The groups are split into ``dp_size``
   parts of equal size by Karmarkar-Karp on workloads (the construction of verl's
   ``_balance_batch``), one-for-one swaps between the heaviest and the lightest part then
   even their workloads, and further swaps bring every part's cost within ``K`` caps.
   Each part is planned alone with exactly ``K`` micro-batches
   (``seqlen_balancing.planning.planner.build_plan``, balanced on workload), and the ranks'
   micro-batches are lined up lightest first: index ``k`` holds every rank's ``k``-th
   lightest.
3. **Micro-batches first** (where a part needs more than ``K``, for padded micro-batches,
   and without ``equal_size``). The whole step is cut into ``dp_size x K`` micro-batches
   balanced on workload; sorted by workload they form ``K`` layers of ``dp_size``
   neighbours, and the largest differencing method on the layers' sample counts deals
   each layer's micro-batches to the ranks. With ``equal_size``, groups then move (or two
   go for one, three for two) from ranks above ``n / dp_size`` to ranks below it, each
   move the one that raises the lock-step time least.
4. **Lock-step.** A bounded local search lowers the top of the layer furthest above its
   mean: one group moves or two swap (to the same rank's micro-batch of a layer with
   headroom, with the lightest micro-batches of the layer, or with the least loaded
   ranks), or, where several ranks share the top, each of them passes workload to its own
   micro-batches of other layers. Sample counts and the rule hold throughout.
5. **One more?** Where ``K`` met the bound, ``K + d`` (``d`` = ``num_batches_divided_by``
   or 1) is kept only where it *saves more than the margin*: its modeled step time, its
   ``d`` extra fixed costs (``micro_batch_fixed_tokens``) included, is below the plan at
   ``K``'s by more than 2% of ``total workload / dp_size`` (issue 31's tolerance on the
   step time: a saving within it does not buy a micro-batch per rank). ``K + d`` is planned
   only where the plan at ``K`` is further above its floor than ``d`` fixed costs plus the
   margin (no plan at ``K + d`` beats that floor, so none could save more); never two
   above the bound.
6. **Order.** With ``use_dynamic_bsz_balance`` the indices take verl's pipeline-parallel
   order (sorted by lock-step workload, lightest at both ends), the same on every rank;
   without it, or with ``heaviest_first`` (which wins), the heaviest lock-step index first.

Everything is integer arithmetic with deterministic tie-breaks (no ``hash()``, no
randomness): every rank that calls it with the same input gets the same plan, with no
collective.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence, Sized
from dataclasses import dataclass, replace
from typing import Any

from seqlen_balancing._checks import positive_int, switch
from seqlen_balancing.agreement.vector import plan_ranks
from seqlen_balancing.collector import paused_collector
from seqlen_balancing.global_batch.lockstep import (
    layer_order,
    lock_step_time,
    micro_batch_fixed_cost,
    plan_at,
    step_time_floor,
)
from seqlen_balancing.options import PlanOptionKeywords, PlanOptions, Unpack
from seqlen_balancing.planning.analysis import RankAnalysis
from seqlen_balancing.planning.bounds import best_lower_bound
from seqlen_balancing.planning.partition import roundup_divisible
from seqlen_balancing.planning.planner import analyse
from seqlen_balancing.planning.rows import RowIndices

__all__ = [
    "DEFAULT_MICRO_BATCH_FIXED_TOKENS",
    "StepPlan",
    "lock_step_time",
    "micro_batch_fixed_cost",
    "plan_global_batch",
    "plan_step",
    "step_options",
    "step_time_floor",
]

#: One more micro-batch per rank is kept only where it saves more than 1/_MARGIN of
#: ``total workload / dp_size`` beyond its fixed costs: 2%, issue 31's tolerance on the step
#: time, so that free micro-batches (``micro_batch_fixed_tokens=0``) do not buy savings within
#: it with a micro-batch per rank (costs the model does not charge: launches, a pass's
#: fixed work) and the count stays at the bound.
_MARGIN = 50

#: The fixed cost of one micro-batch in tokens of linear work (``24576 x`` this in verl's
#: workload), whatever the cap: 0.05 x 16,384, the former default share at that cap;
#: docs/step-time.md says how to measure it on one GPU.
DEFAULT_MICRO_BATCH_FIXED_TOKENS = 819.2


@dataclass(frozen=True)
class StepPlan:
    """A step planned across its DP ranks (:func:`plan_step`).

    Attributes:
        rank_samples: for each rank, the global sample indices it gets, micro-batch by
            micro-batch (``rank_micro_batches[r]`` concatenated).
        rank_micro_batches: for each rank, its ``count`` micro-batches as sorted lists of
            global sample indices.
        count: micro-batches per rank (the same on every rank).
        lower_bound: the best lower bound of the whole step in micro-batches (under the
            rule); no plan has fewer than ``ceil(lower_bound / dp_size)`` per rank.
        step_time: the modeled lock-step time
            (:func:`~seqlen_balancing.global_batch.lockstep.lock_step_time`), fixed costs included.
        floor: :func:`~seqlen_balancing.global_batch.lockstep.step_time_floor` at ``count``.
        fixed_cost: the fixed cost of one micro-batch used
            (:func:`~seqlen_balancing.global_batch.lockstep.micro_batch_fixed_cost`).
        tried: each count fully planned, with its plan's modeled step time (fixed costs
            included), in the order planned: the first count that could be planned, then
            ``count + d`` where it was weighed against it (the module docstring's step 5).
    """

    rank_samples: list[list[int]]
    rank_micro_batches: list[list[list[int]]]
    count: int
    lower_bound: int
    step_time: float
    floor: float
    fixed_cost: float
    tried: tuple[tuple[int, float], ...] = ()



def step_options(options: PlanOptions | None, keywords: Mapping[str, Any]) -> PlanOptions:
    """The options of one call of the global planner: ``options`` (``None``: verl's
    behaviour) with ``keywords`` laid over it, as :func:`~seqlen_balancing.plan_micro_batches`
    takes them (:meth:`~seqlen_balancing.PlanOptions.from_keywords`).

    Raises:
        TypeError, ValueError: what :class:`~seqlen_balancing.PlanOptions` refuses (an
            unknown name, a value of the wrong type or range, ``options`` not a
            ``PlanOptions``), or an option the global planner cannot honour: it gives every
            rank the same count (``same_micro_num_in_dp=False``) and every micro-batch real
            samples (``dummy_micro_batches``). ``over_cap="alone"`` plans a sample over the
            cap in a micro-batch of its own.
    """
    given, error = PlanOptions.from_keywords(options, None, keywords)
    if error is not None:
        raise error.exception()
    refused = [text for on, text in (
        (given.dummy_micro_batches, "dummy_micro_batches=True (every rank gets real samples for "
                                    "every micro-batch)"),
        (not given.same_micro_num_in_dp, "same_micro_num_in_dp=False (every rank gets the same count)"),
    ) if on]
    if refused:
        raise ValueError(f"the global planner (plan_global_batch) cannot take {'; '.join(refused)}; "
                         "leave these options at their defaults for it")
    return given


def _count_range(
    result: RankAnalysis, lower: int, dp: int, equal: bool, floor: int | None, divisor: int
) -> tuple[int, int]:
    """The first count per rank to try (the bound, raised to ``floor`` and rounded up to
    ``divisor``), and the most any rank can hold."""
    n_groups, group = result.n_groups, result.force_group_size
    sizes = {len(m) for m in result.members or []}
    if equal and len(sizes) > 1:
        raise ValueError(
            f"equal_size=True needs groups of one size to give every rank as many samples, but "
            f"the group_ids form groups of {min(sizes)} to {max(sizes)} samples; pass "
            "equal_size=False (ranks may then get different sample counts, each group whole on "
            "one rank)"
        )
    if sizes:
        group = sizes.pop()
    if equal and n_groups % dp:
        what = "samples" if group == 1 else \
            f"{'groups' if result.custom_groups else 'forced groups'} of {group} samples"
        raise ValueError(
            f"equal_size=True needs the step's {n_groups} {what} to split equally over "
            f"dp_size={dp} ranks; pass a multiple of {dp * group} samples (verl's dispatch cuts "
            "the batch into equal contiguous chunks) or equal_size=False"
        )
    most = n_groups // dp
    first = roundup_divisible(max(-(-lower // dp), floor or 1), divisor)
    if first > most:
        raise ValueError(
            f"the step needs {first} micro-batches per rank under max_token_len="
            f"{result.requested_max_token_len}, but each of the dp_size={dp} ranks gets only "
            f"{most} {'samples' if group == 1 else 'forced groups'} and a micro-batch is never "
            "empty; pass more samples, a larger max_token_len or a smaller dp_size"
        )
    return first, most


def _whole_step(
    seq_lens: Sequence[int], max_token_len: int, rule: PlanOptions, data: dict[str, Any]
) -> tuple[RankAnalysis, int, Callable[[], RankAnalysis]]:
    """The whole step's analysis, its best lower bound, and the analysis with its count
    search done (what cutting the whole step first needs), computed on first call.

    For summed costs without a sample limit the first analysis skips the count search (its
    ``min_num_micro_batch`` is the number of groups, so the packings meet it at once) and
    the bound is :func:`~seqlen_balancing.planning.bounds.best_lower_bound` of the groups' costs:
    the search is most of the time on a large step, and planning the ranks first does not
    need it. Otherwise the analysis is ``seqlen_balancing.planning.planner.analyse`` as it is.

    Args:
        rule: the options of the rule (the step's count options left to the caller).
        data: the per-sample data, ``costs``, ``workloads`` and ``group_ids``.

    Raises:
        TypeError, ValueError: the analysis' error (a sample over the cap, ...).
    """
    whole = functools.cache(functools.partial(_analysed, seq_lens, max_token_len, rule, data))
    n = len(seq_lens) if isinstance(seq_lens, Sized) else None
    if rule.padded or rule.max_samples_per_micro_batch is not None or not n or \
            data.get("group_ids") is not None or rule.over_cap == "alone":  # over-cap groups: once
        full = whole()
        return full, full.lower_bound, whole
    quick = _analysed(seq_lens, max_token_len,
                      replace(rule, min_num_micro_batch=max(1, n // rule.force_group_size)), data)
    return quick, max(1, best_lower_bound(quick.group_sizes, quick.max_token_len)[0]), whole


def _analysed(
    seq_lens: Sequence[int], max_token_len: int, rule: PlanOptions, data: dict[str, Any]
) -> RankAnalysis:
    """``analyse`` of the whole step under ``rule``, its error raised."""
    result = analyse(seq_lens, max_token_len, rule, **data)
    if result.error is not None:
        raise result.error.exception()
    return result


def _equal_rows(
    rank_samples: list[list[int]], seq_lens: Sequence[int], max_token_len: int,
    options: PlanOptions, costs: Sequence[int] | None, workloads: Sequence[int] | None,
    group_ids: Sequence[Hashable] | None = None,
) -> list[list[list[int]]]:
    """Each rank's samples planned again with equal rows, as a DP group plans them
    (:func:`~seqlen_balancing.agreement.plan_ranks`: the largest count, then at that count
    the largest rows any rank needs, within every rank's tolerance; the ranks lined up), the
    micro-batches in global indices."""

    def pick(values: Sequence[Any] | None) -> list[list[Any]] | None:
        return None if values is None else [[values[i] for i in samples] for samples in rank_samples]

    planned = plan_ranks(pick(seq_lens) or [], max_token_len, options, costs=pick(costs),
                         workloads=pick(workloads), group_ids=pick(group_ids))
    return [[_global(part, samples) for part in ranked.plan]
            for samples, ranked in zip(rank_samples, planned, strict=True)]


def _global(part: list[int], samples: list[int]) -> RowIndices:
    """A rank's micro-batch (local indices, a :class:`RowIndices`) in global indices."""
    filler, row = getattr(part, "filler", 0), getattr(part, "filler_row", -1)
    return RowIndices([samples[i] for i in part], filler, samples[row] if filler else -1)


@paused_collector
def plan_step(
    seq_lens: Sequence[int],
    dp_size: int,
    max_token_len: int,
    *,
    options: PlanOptions | None = None,
    equal_size: bool = True,
    costs: Sequence[int] | None = None,
    workloads: Sequence[int] | None = None,
    group_ids: Sequence[Hashable] | None = None,
    **option_keywords: Unpack[PlanOptionKeywords],
) -> StepPlan:
    """:func:`~seqlen_balancing.plan_global_batch` with what it measured: the count, the whole step's lower
    bound, the modeled step time and its floor (a :class:`StepPlan`).

    Takes the arguments of :func:`~seqlen_balancing.plan_global_batch` (``options=`` and
    the options as keywords laid over it, ``seqlen_balancing.global_batch.step.step_options``).

    Example:
        >>> plan = plan_step([600, 500, 400, 300, 200, 100, 50, 50], 2, 1000)
        >>> plan.count, plan.lower_bound, [len(s) for s in plan.rank_samples]
        (2, 3, [4, 4])
    """
    dp = positive_int(dp_size, "dp_size")
    equal = switch(equal_size, "equal_size")
    given = step_options(options, option_keywords)
    floor, divisor = given.min_num_micro_batch, given.num_batches_divided_by or 1
    # the count options shape the step here; the analysis sees the rule alone
    rule = replace(given, num_batches_divided_by=None, min_num_micro_batch=None,
                   use_dynamic_bsz_balance=True, equal_rows_per_micro_batch=False,
                   heaviest_first=False)
    result, lower, whole = _whole_step(seq_lens, max_token_len, rule,
                                       {"costs": costs, "workloads": workloads, "group_ids": group_ids})
    first, most = _count_range(result, lower, dp, equal, floor, divisor)
    per_rank = result.n_groups // dp if equal else None
    fixed = micro_batch_fixed_cost(given.micro_batch_fixed_tokens, given)
    memo: dict[Any, Any] = {}
    count, grid = first, plan_at(result, dp, first, per_rank, memo, whole)
    while grid is None:  # one group per micro-batch (count == most) always evens out
        count += divisor
        if count > most:
            raise ValueError(
                f"no plan with the same micro-batch count on the dp_size={dp} ranks (each "
                f"holding {most} {'samples' if result.force_group_size == 1 else 'groups'} or "
                f"more) was found with {first}..{most} micro-batches per rank (multiples of "
                f"num_batches_divided_by={divisor}); pass more samples, a larger max_token_len "
                "or a smaller dp_size"
            )
        grid = plan_at(result, dp, count, per_rank, memo, whole)
    tried = [(count, grid.step_time() + count * fixed)]
    margin = sum(result.group_workloads) / dp / _MARGIN
    # no plan at count + d beats its floor: planned only where it could save more than the margin
    if count == first and count + divisor <= most and grid.gap() > dp * (divisor * fixed + margin):
        more = plan_at(result, dp, count + divisor, per_rank, memo, whole)
        if more is not None:
            tried.append((count + divisor, more.step_time() + (count + divisor) * fixed))
            if tried[1][1] < tried[0][1] - margin:
                count, grid = count + divisor, more
    # each rank's micro-batches as sorted sample indices, layers in the final order
    order = layer_order(grid, given.use_dynamic_bsz_balance and not given.heaviest_first)
    plans = [[sorted(i for g in grid.cells[r][k] for i in result.samples_of(g)) for k in order]
             for r in range(dp)]
    if given.equal_rows_per_micro_batch:
        plans = _equal_rows([[i for mb in plan for i in mb] for plan in plans], seq_lens,
                            max_token_len, given, costs, workloads, group_ids)
    return StepPlan(
        rank_samples=[[i for mb in plan for i in mb] for plan in plans],
        rank_micro_batches=plans,
        count=len(plans[0]),
        lower_bound=lower,
        step_time=grid.step_time() + count * fixed,
        floor=step_time_floor(result.group_workloads, dp, count, fixed),
        fixed_cost=fixed,
        tried=tuple(tried),
    )


def plan_global_batch(
    seq_lens: Sequence[int],
    dp_size: int,
    max_token_len: int,
    *,
    options: PlanOptions | None = None,
    equal_size: bool = True,
    costs: Sequence[int] | None = None,
    workloads: Sequence[int] | None = None,
    group_ids: Sequence[Hashable] | None = None,
    **option_keywords: Unpack[PlanOptionKeywords],
) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Plan a whole step across its DP ranks: which samples each rank gets, and its
    micro-batches, so that the ranks' lock-step time is close to its floor.

    The algorithm is the module docstring's: the count from the whole step's lower bound
    under the one rule, equal-size parts of even workload each planned at that count (or
    the whole step's micro-batches dealt in layers), a bounded local search on the
    lock-step time, verl's order.

    Args:
        seq_lens: effective length in tokens of each of the step's ``n`` samples (global
            indices ``0..n-1``).
        dp_size: DP ranks.
        max_token_len: hard cap in tokens on every micro-batch (under the rule below).
        options: the plan's options (:class:`~seqlen_balancing.PlanOptions`,
            docs/options.md); ``None``: verl's behaviour. What each means for the whole step
            is under ``**option_keywords``.
        equal_size: every rank gets ``n / dp_size`` samples (verl's dispatch cuts the
            reordered batch into equal contiguous chunks; ``DistributedSampler`` gives every
            rank as many). False: ranks may get different sample counts.
        costs: one cost in tokens per sample instead of its length, or ``None``.
        workloads: one balance workload per sample instead of verl's ``24576*s + s**2``
            (what the lock-step model weighs), or ``None``.
        group_ids: one hashable id per sample of the step, or ``None``: each group (equal
            ids, any size, any positions) lands whole in one micro-batch of one rank, never
            split across ranks. With groups of different sizes ``equal_size`` must be
            False (equal group counts would not be equal sample counts); not with
            ``force_group_size > 1``.
        **option_keywords: any option of :class:`~seqlen_balancing.PlanOptions` by name,
            laid over ``options`` (as :func:`~seqlen_balancing.plan_micro_batches` takes
            them):

            * ``micro_batch_fixed_tokens``: the fixed cost of one micro-batch in tokens of
              linear work, whatever ``max_token_len``
              (:func:`~seqlen_balancing.global_batch.lockstep.micro_batch_fixed_cost`), a number >= 0.
              The count stays at the bound ``ceil(B / dp_size)`` unless one more
              micro-batch per rank (``num_batches_divided_by`` more) lowers the modeled
              step time, its extra fixed costs included, by more than 2% of ``total
              workload / dp_size`` (the module docstring's step 5).
            * ``use_dynamic_bsz_balance``: verl's pipeline-parallel order of micro-batches
              (lightest at both ends), the same on every rank; else heaviest first.
            * ``heaviest_first``: heaviest first whatever ``use_dynamic_bsz_balance`` says:
              index ``k`` by its lock-step workload (the heaviest micro-batch of any rank at
              that index) descending, the same on every rank, so the step's heaviest
              micro-batch runs first (with ``equal_rows_per_micro_batch``, each rank's own
              micro-batches by their workload, as the per-rank planner orders them).
            * ``num_batches_divided_by``: the count is a multiple of this, or ``None``;
              ``min_num_micro_batch``: at least this many micro-batches per rank, or
              ``None``.
            * ``force_group_size``: consecutive global indices ``[g*size, (g+1)*size)``
              that share a micro-batch (and a rank, contiguous in its batch).
            * ``pad_to_multiple_of``, ``micro_batch_multiple_of``, ``padded``,
              ``max_samples_per_micro_batch``, ``workload_model``: the one rule and the
              balance objective of :func:`~seqlen_balancing.plan_micro_batches`, applied
              to the whole step (with ``costs`` and ``workloads``).
            * ``equal_rows_per_micro_batch``: every micro-batch of every rank holds the
              same rows (pipeline parallelism, docs/pipeline.md): the ranks keep the
              samples planned above, and each rank's micro-batches are planned again as
              :func:`~seqlen_balancing.plan_data_parallel` plans them with the option (the
              count the ranks agree on, rows balanced, short micro-batches topped up with
              filler rows counted under the cap); each micro-batch is then a
              :class:`~seqlen_balancing.planning.rows.RowIndices` whose ``filler_row`` is a global
              index. The lock-step search does not see the filler rows.
            * ``same_micro_num_in_dp`` (True), ``over_cap`` (``"raise"``) and
              ``dummy_micro_batches`` (False) must keep their defaults: the plan gives
              every rank the same count of real, within-cap micro-batches.
              ``loss_weight_keys`` names TensorDict entries and does not touch a plan.

    Returns:
        ``(rank_samples, rank_micro_batches)``: ``rank_micro_batches[r][k]`` the sorted
        global indices of rank ``r``'s micro-batch ``k`` (the same number on every rank,
        each non-empty and within the cap under the rule, index ``k`` about the same
        workload on every rank), and ``rank_samples[r]`` the global indices rank ``r``
        gets in the order to hand them over: its micro-batches one after another, so that
        micro-batch ``k`` is a contiguous run of the rank's batch (force groups stay
        contiguous and aligned). Every sample is in exactly one micro-batch.

    Raises:
        TypeError: an argument or length is not an integer, a switch not a bool, an unknown
            option name, or ``options`` not a :class:`~seqlen_balancing.PlanOptions`.
        ValueError: an option value :class:`~seqlen_balancing.PlanOptions` refuses, or one
            the global planner cannot honour (``seqlen_balancing.global_batch.step.step_options``); what
            :func:`~seqlen_balancing.plan_micro_batches` refuses (a sample or
            group over the cap: ``exceeds max_token_len``), ``n`` (or its force groups)
            not divisible by ``dp_size`` with ``equal_size`` (or groups of different sizes
            with it), or a rank left fewer samples than micro-batches; with
            ``equal_rows_per_micro_batch``, a rank whose micro-batches cannot take the rows
            another needs (``every micro-batch must hold``).

    Complexity: ``seqlen_balancing.planning.planner.analyse`` on the whole step and on each
    part (O(n log n) together, plus their bounded searches), Karmarkar-Karp's
    O(n log n + n dp), at most ``4 n`` swaps of O(m log m) for parts of ``m`` groups, and
    at most ``4 n + 64`` rounds of the local search, each O(dp log dp) plus the groups of
    the few cells it weighs and O(dp (log K + K)) per move (the grid's sorted orders, the
    ``K`` a list's memmove); once more where ``K + 1`` is tried. 10^5 samples on 64 ranks plan in seconds
    (``benchmarks/step_time.py``).

    Example:
        >>> ranks, micro = plan_global_batch([600, 500, 400, 300, 200, 100, 50, 50], 2, 1000)
        >>> [len(s) for s in ranks], [len(m) for m in micro]
        ([4, 4], [2, 2])
        >>> sorted(i for s in ranks for i in s)
        [0, 1, 2, 3, 4, 5, 6, 7]

    References:
        N. Karmarkar and R. M. Karp, "The differencing method of set partitioning" (1982);
        verl 0.9.1 ``rearrange_micro_batches`` (the order of micro-batches) and
        ``RayPPOTrainer._balance_batch`` (equal-size parts for its dispatch).
    """
    plan = plan_step(seq_lens, dp_size, max_token_len, options=options, equal_size=equal_size,
                     costs=costs, workloads=workloads, group_ids=group_ids, **option_keywords)
    return plan.rank_samples, plan.rank_micro_batches
