"""Simulating one training step: which rows each DP rank gets, and planning every rank.

1. **Rows of the step** (:func:`make_step`): with the bundled data, or with ``--batch-size``,
   ``dp_size * batch_size`` positions drawn with ``random.Random(seed).sample`` (the bundled
   data, when too short, with ``.choices``), or the first ones with ``--in-order``. With
   ``--lengths`` and no ``--batch-size``, every row once, in file order.
2. **The trainer's dealing** (``--trainer``, :func:`~seqlen_balancing.cli.trainers.deal`):
   ``main_ppo`` and ``sft_trainer_ray`` balance (below) and then dispatch, rank ``r``
   getting the ``r``-th of ``dp_size`` equal contiguous chunks; ``sft_trainer`` never
   balances, and rank ``r`` gets the step's rows ``r, r + dp_size, ...``
   (``DistributedSampler``).
3. **verl's ``_balance_batch``** (on by default where the trainer has it,
   ``--no-balance-batch`` off), before dispatch:
   Karmarkar-Karp on the rows' workloads (``24576*s + s**2``) into ``dp_size`` parts of equal
   sample counts (:func:`~seqlen_balancing.planning.partition.get_seqlen_balanced_partitions`); each
   part is sorted by workload and laid out lightest at both ends
   (``part[::2] + part[1::2][::-1]``), as verl 0.9.1 does. With ``--force-group-size N``
   the groups of ``N`` consecutive rows are balanced instead, each kept whole and in order
   (verl's group-balanced path: equal group counts, Karmarkar-Karp on group workloads).
4. **Planning** (:func:`plan_step`): every rank with this library's own DP planning
   (:func:`~seqlen_balancing.agreement.plan_ranks`: the same encode/MAX/decode a real group
   runs, under the options of every flag, ``args.options``); with ``--compare-verl`` also
   verl 0.9.1's count (:mod:`seqlen_balancing.planning.verl_rule`).

The cap is ``max_token_len * sp_size`` (``prepare_micro_batches``), on what the GPU holds:
with ``--pad-to-multiple-of`` (or ``--tp``/``--cp``/``--fp8``) each sample costs its aligned
length, and with ``--micro-batch-multiple-of`` each micro-batch's total is rounded up to the
bucket (:mod:`seqlen_balancing.cost`). Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from itertools import groupby

from seqlen_balancing.agreement import RankPlan, plan_ranks
from seqlen_balancing.cli._text import CliError, plural
from seqlen_balancing.cli.inputs import Loaded
from seqlen_balancing.cli.modeled import model_step, workloads
from seqlen_balancing.cli.results import RankResult, Step, StepResult, VerlResult
from seqlen_balancing.cli.trainers import SYNTHETIC_ROW_TOKENS, deal, synthetic_rows
from seqlen_balancing.cost import (
    aligned_length,
    micro_batch_capacity,
    micro_batch_cost,
    padded_micro_batch_cost,
)
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.balance import spread
from seqlen_balancing.planning.bounds import l2_lower_bound
from seqlen_balancing.planning.rows import filler_cost
from seqlen_balancing.planning.verl_rule import VerlSearchLimit, verl_counts

__all__ = ["make_step", "plan_dp", "plan_step", "smallest_cap", "verl_result"]


def scale_lengths(lengths: Sequence[int], scale: float) -> list[int]:
    """Each length times ``scale``, rounded to the nearest integer (halves up)."""
    if scale == 1.0:
        return list(lengths)
    scaled = [n * scale + 0.5 for n in lengths]
    if not all(math.isfinite(x) and x < 2**62 for x in scaled):
        raise CliError(f"--scale {scale:g} makes a length too large (over 2**62 tokens)")
    return [math.floor(x) for x in scaled]


MAX_DRAWN_ROWS = 10_000_000  # a drawn step's rows (dp_size x batch_size): bounded memory


def make_step(args: argparse.Namespace, loaded: Loaded) -> Step:
    """The rows of the step (see the module docstring).

    Raises:
        CliError: (exit 2) too few lengths for the draw, or a whole file whose row count
            ``--dp-size`` does not divide (naming both, the rows to drop and divisors).
    """
    lengths = scale_lengths(loaded.lengths, args.scale)
    prefixes = None if loaded.prefixes is None else scale_lengths(loaded.prefixes, args.scale)
    n, dp = len(lengths), args.dp_size
    minis = tuple(getattr(args, "mini_batch_size", None) or ())
    if args.lengths is not None and args.batch_size is None:
        # verl's V1 trainer pads the batch to a multiple of lcm(dp, mini-batch sizes)
        if n % dp and not synthetic_rows(n, dp, args.trainer, minis):
            divisors = ", ".join(map(str, [d for d in range(2, min(n, 4096) + 1) if n % d == 0][:6]))
            raise CliError(
                f"{loaded.name} holds {plural(n, 'row')}, not divisible by --dp-size {dp} "
                "(verl's dispatch gives every rank an equal contiguous chunk): "
                + (f"drop {n % dp} (keep {n - n % dp}), " if n > dp else "")
                + (f"use a --dp-size that divides {n} ({divisors})" if divisors else "use --dp-size 1")
                + ", or pass --batch-size"
            )
        return _padded(Step(loaded.source, lengths, list(range(n)), "whole_file", dp, n // dp,
                            loaded.counted, prefixes=prefixes), args.trainer, minis)
    batch = args.batch_size or 256
    needed = dp * batch
    if needed > MAX_DRAWN_ROWS:
        raise CliError(
            f"--dp-size {dp} x --batch-size {batch} asks for {needed} rows; a drawn step holds "
            f"at most {MAX_DRAWN_ROWS:,}: lower --dp-size or --batch-size"
        )
    rng = random.Random(args.seed)
    if n >= needed and args.in_order:
        positions, sampling = list(range(needed)), "in_order"
    elif n >= needed:
        positions, sampling = rng.sample(range(n), needed), "without_replacement"
    elif args.lengths is None and not args.in_order:
        positions, sampling = rng.choices(range(n), k=needed), "with_replacement"
    else:
        raise CliError(
            f"{loaded.name} holds {n} lengths but --dp-size {dp} x --batch-size "
            f"{batch} needs {needed} "
            f"({'taken in input order' if args.in_order else 'drawn without replacement'}); pass at least "
            f"{needed} lengths or lower --dp-size/--batch-size"
        )
    return _padded(Step(loaded.source, lengths, positions, sampling, dp, batch, loaded.counted,
                        prefixes=prefixes), args.trainer, minis)


def _padded(step: Step, trainer: str, minis: tuple[int, ...]) -> Step:
    """A drawn step with the synthetic rows verl's V1 trainer adds where its
    ``dp_size x batch_size`` rows are not a multiple of the mini-batch sizes (rows of
    :data:`~seqlen_balancing.cli.trainers.SYNTHETIC_ROW_TOKENS` tokens, after the input's,
    sharing no prefix)."""
    extra = synthetic_rows(len(step.positions), step.dp_size, trainer, minis)
    n = len(step.lengths)
    return replace(step, lengths=step.lengths + [SYNTHETIC_ROW_TOKENS] * extra,
                   prefixes=step.prefixes and step.prefixes + [0] * extra,
                   positions=step.positions + list(range(n, n + extra)),
                   batch_size=(len(step.positions) + extra) // step.dp_size, synthetic=extra)


def _check_over_cap(drawn: list[int], cap: int, pad: int, bucket: int) -> None:
    """Raise (CliError, exit 1) where a drawn sample cannot fit the cap, or no micro-batch can."""
    usable = micro_batch_capacity(cap, bucket)
    if usable == 0:
        raise CliError(
            f"the micro-batch bucket {bucket} (--micro-batch-multiple-of, combined with --fp8's "
            f"total by least common multiple) is larger than the cap {cap}: every micro-batch is "
            f"rounded up to at least {bucket} tokens; raise --max-token-len or lower the bucket",
            1,
        )
    over = [n for n in drawn if aligned_length(n, pad) > usable]
    if not over:
        return
    largest = max(over)
    cost = aligned_length(largest, pad)
    raise CliError(
        f"{len(over)} of the {plural(len(drawn), 'drawn sample')} exceed{'s' if len(over) == 1 else ''} "
        f"max_token_len={cap}"
        + (f" (usable as {usable} with micro-batches rounded up to {bucket})" if bucket > 1 else "")
        + f" (the largest has {largest} tokens" + (f", {cost} aligned to {pad})" if pad > 1 else ")")
        + f"; raise --max-token-len to at least {aligned_length(cost, bucket)} or pass "
        "--truncate to clip lengths to the cap",
        1,
    )


def smallest_cap(step: Step, args: argparse.Namespace) -> int:
    """The smallest ``max_token_len`` (per GPU, tokens) at which no sample or group of the
    step is over the cap: below it the step cannot be planned at all (without
    ``--truncate``). Forced groups are the step's consecutive rows, as balancing keeps them;
    ``--group-sizes`` groups are each rank's consecutive rows as dealt to it. A group costs
    its first row and the others' tokens beyond the shared prefix (``--prefix-lengths``);
    with prefixes a group over the cap is cut into parts, so there each row stands alone.

    Complexity: O(rows) (with ``--group-sizes``, plus the deal).
    """
    options: PlanOptions = args.options
    pad, bucket = options.pad_to_multiple_of, options.micro_batch_multiple_of
    sizes = getattr(args, "group_sizes", None)
    rows = [(step.lengths[p], step.prefixes[p] if step.prefixes else 0) for p in step.positions]
    if sizes:
        ranks = [[rows[i] for i in part] for part in _dealt(step, args, [n for n, _ in rows])]
        groups = [[row for row, _ in members]  # a group's rows are consecutive
                  for mine in ranks
                  for _, members in groupby(zip(mine, group_ids_of(len(mine), sizes), strict=True),
                                            key=lambda row: row[1])]
    else:
        size = options.force_group_size
        groups = [rows[g : g + size] for g in range(0, len(rows), size)]
    if step.prefixes and options.over_cap != "alone":
        groups = [[row] for group in groups for row in group]
    # a group alone: its costs summed (padded: its rows x its widest row)
    largest = max((len(g) * max(aligned_length(n, pad) for n, _ in g) if options.padded
                   else aligned_length(g[0][0], pad) + sum(aligned_length(n - p, pad) for n, p in g[1:])
                   for g in groups if g), default=0)
    return -(-max(aligned_length(largest, bucket), bucket, 1) // int(args.sp_size))


def _dealt(step: Step, args: argparse.Namespace, clipped: list[int]) -> list[list[int]]:
    """The step's rows dealt to the ranks as the trainer deals them (balanced unless
    ``--no-balance-batch``): each rank's rows as indices into ``clipped``."""
    # A rank batch that force_group_size does not divide is the planner's error (exit 1).
    group = args.options.force_group_size
    return deal(clipped, step.dp_size, args.trainer, args.balance_batch and step.batch_size % group == 0,
                group, args.options.workload_model)


def plan_dp(per_rank: list[list[int]], cap: int, args: argparse.Namespace,
            prefixes: list[list[int]] | None = None) -> list[RankPlan]:
    """Every rank planned by the library's own DP planning
    (:func:`~seqlen_balancing.agreement.plan_ranks`, as :func:`~seqlen_balancing.plan_data_parallel`)
    under ``args.options``; ``--group-sizes``: each rank's rows, as dealt to it, in consecutive
    groups of these sizes, cycled (:func:`group_ids_of`), each whole in one micro-batch;
    ``prefixes`` (``--prefix-lengths``): each rank's rows' prefix lengths, as dealt to it,
    shared within those groups or ``--force-group-size``'s."""
    sizes = getattr(args, "group_sizes", None)
    return plan_ranks(per_rank, cap, args.options, prefix_lengths=prefixes,
                      group_ids=None if not sizes else [group_ids_of(len(lens), sizes) for lens in per_rank])


def group_ids_of(n: int, sizes: tuple[int, ...]) -> list[int]:
    """``--group-sizes``: ``n`` rows in consecutive groups of ``sizes``, cycled (the last
    group takes what is left), as group ids.

    Example:
        >>> group_ids_of(7, (3, 1))
        [0, 0, 0, 1, 2, 2, 2]
    """
    ids: list[int] = []
    group = 0
    while len(ids) < n:
        ids.extend([group] * min(sizes[group % len(sizes)], n - len(ids)))
        group += 1
    return ids


def verl_result(per_rank: list[list[int]], cap: int, args: argparse.Namespace) -> VerlResult:
    """verl 0.9.1's counts on the ranks' rows (:func:`~seqlen_balancing.planning.verl_rule.verl_counts`),
    or where its search stopped, or its error."""
    try:
        return VerlResult(verl_counts(
            per_rank,
            cap,
            same_micro_num_in_dp=args.options.same_micro_num_in_dp,
            num_batches_divided_by=args.options.num_batches_divided_by,
            min_num_micro_batch=args.options.min_num_micro_batch,
            force_group_size=args.options.force_group_size,
            max_tries=args.verl_max_tries,
        ).counts)
    except VerlSearchLimit as exc:
        return VerlResult(None, above=exc.last_tried)
    except ValueError as exc:
        return VerlResult(None, error=str(exc))


def plan_step(step: Step, cap: int, args: argparse.Namespace) -> StepResult:
    """Balance (unless ``--no-balance-batch``), dispatch and plan every rank at ``cap``.

    Raises:
        CliError: (exit 1) a sample is over the cap without ``--truncate``, or the library
            cannot plan the step (its message, naming the rank at fault).
    """
    drawn = [step.lengths[p] for p in step.positions]
    pad, bucket = args.options.pad_to_multiple_of, args.options.micro_batch_multiple_of
    usable = micro_batch_capacity(cap, bucket)
    if (not args.truncate and args.options.over_cap == "raise") or usable == 0:
        _check_over_cap(drawn, cap, pad, bucket)
    # the longest length whose aligned cost fits; without --truncate (--over-cap alone) all run whole
    clip = usable // pad * pad if args.truncate else max(drawn, default=0)
    truncated = sum(n > clip for n in drawn)
    pre_deal = [min(n, clip) for n in drawn]
    dealt = _dealt(step, args, pre_deal)
    per_rank = [[pre_deal[i] for i in part] for part in dealt]
    # a prefix clipped as its row is: equal in a group still, and never longer than the row
    prefixes = None if step.prefixes is None else [[min(step.prefixes[step.positions[i]], clip) for i in part]
                                                   for part in dealt]
    start = time.perf_counter()
    try:
        planned = plan_dp(per_rank, cap, args, prefixes)
    except (ValueError, TypeError) as exc:
        raise CliError(f"{exc}", 1) from None
    seconds = time.perf_counter() - start
    # each rank's groups, as the planner formed them (--force-group-size 1: single rows)
    sizes = getattr(args, "group_sizes", None) or (args.options.force_group_size,)
    ids = [group_ids_of(len(lens), sizes) for lens in per_rank]
    shared = prefixes or [[0] * len(lens) for lens in per_rank]
    ranks = [_rank_result(rank, lens, planned[rank], [step.positions[i] for i in dealt[rank]],
                          shared[rank], ids[rank], args)
             for rank, lens in enumerate(per_rank)]
    verl = verl_result(per_rank, cap, args) if args.compare_verl else None
    modeled = []
    if (getattr(args, "command", None) in ("plan", "sweep") and not getattr(args, "group_sizes", None)
            and prefixes is None):
        modeled = model_step(pre_deal, dealt, [[[dealt[r][i] for i in mb] for mb in ranked.plan]
                                               for r, ranked in enumerate(planned)],
                             cap, args.options, None if verl is None else verl.counts)
    return StepResult(cap, ranks, truncated, seconds, args.options, verl, modeled=modeled)


def _rank_result(rank: int, lens: list[int], planned: RankPlan, mine: list[int], prefixes: list[int],
                 ids: Sequence[int], args: argparse.Namespace) -> RankResult:
    """One rank's figures: its plan in input positions (``mine``), tokens per micro-batch
    (each group's prefix once: ``prefixes`` shared within ``ids``), costs, bound, fill."""
    analysis, plan, options = planned.analysis, planned.plan, args.options
    cap, bucket = analysis.requested_max_token_len, options.micro_batch_multiple_of
    costs = analysis.sample_costs
    # no micro-batch holds two parts of one group: a group present pays its prefix once
    mb_tokens = [sum(lens[i] - prefixes[i] for i in mb) + sum({ids[i]: prefixes[i] for i in mb}.values())
                 for mb in plan]
    # what the GPU holds: the real rows and (equal rows) the filler rows, one token each
    # (padded: as wide as the row they are built from)
    rows_held = [list(mb) + [getattr(mb, "filler_row", 0)] * getattr(mb, "filler", 0) for mb in plan]
    one = filler_cost(analysis) if costs else 0
    mb_costs = [micro_batch_cost([costs[i] for i in mb] + [one] * getattr(mb, "filler", 0), bucket)
                for mb in plan]
    held = sum(costs)
    if options.padded:  # rows x the widest row (costs: aligned widths)
        footprints = [padded_micro_batch_cost([costs[i] for i in mb]) for mb in rows_held]
        mb_costs = [aligned_length(f, bucket) for f in footprints]
        held = sum(footprints)
    tokens, usable = sum(mb_tokens), micro_batch_capacity(cap, bucket)
    loads = workloads(lens, options)
    alone = {i for g in analysis.over_cap_groups for i in analysis.samples_of(g)}
    return RankResult(
        rank=rank, analysis=analysis, samples=len(lens), tokens=tokens,
        # an over-cap sample or group (--over-cap alone) is a micro-batch of its own
        l2_lower_bound=len(analysis.over_cap_groups)
        + l2_lower_bound([c for i, c in enumerate(costs) if i not in alone], usable),
        micro_batches=[[mine[i] for i in mb] for mb in plan],
        micro_batch_tokens=mb_tokens, largest=max(mb_tokens, default=0),
        fill=tokens / (len(plan) * cap) if plan else 0.0,
        workload_spread=spread([sum(loads[i] for i in mb) for mb in plan]),
        aligned_tokens=held, micro_batch_costs=mb_costs, largest_cost=max(mb_costs, default=0),
        over_cap_alone=[(mine[analysis.samples_of(g)[0]], analysis.group_sizes[g])
                        for g in analysis.over_cap_groups],
        rows=len(rows_held[0]) if options.equal_rows_per_micro_batch and plan else 0,
        filler=[getattr(mb, "filler", 0) for mb in plan],
    )
