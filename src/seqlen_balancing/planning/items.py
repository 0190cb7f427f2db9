"""One rank's items under the one rule, from its plain inputs (no torch).

Its costs and workloads read (whole, by :func:`~seqlen_balancing.planning.per_sample.read_numbers`),
the force groups formed, the rule built and its over-cap items named.
Everything here reads plain values and never raises for bad input: it returns the
:class:`~seqlen_balancing.errors.PlanError` the DP group agrees on, as
:func:`~seqlen_balancing.planning.planner.analyse` needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seqlen_balancing.cost import WorkloadModel, aligned_length
from seqlen_balancing.errors import (
    GroupIdsOverCap,
    GroupOverCap,
    GroupOverSampleLimit,
    NotOnePerSample,
    OverCap,
    PaddedGroupOverCap,
    PaddedSampleOverCap,
    PlanError,
    SampleOverCap,
    WorkloadsAndModel,
)
from seqlen_balancing.planning.groups import uniform_members
from seqlen_balancing.planning.partition import WORKLOAD_LINEAR_COEF
from seqlen_balancing.planning.per_sample import read_numbers
from seqlen_balancing.planning.rule import Rule

if TYPE_CHECKING:
    from seqlen_balancing.options import PlanOptions

__all__ = ["Cap", "GroupRule", "group_rule"]


@dataclass(frozen=True)
class Cap:
    """The checked cap: the ``max_token_len`` ``given``, ``micro_batch_multiple_of``
    (``bucket``) and what a micro-batch's summed cost may reach, ``usable`` (the cap
    rounded down to the bucket: :func:`~seqlen_balancing.cost.micro_batch_capacity`)."""

    given: int
    usable: int
    bucket: int = 1


def longest(sizes: list[int], group: int | None, members: list[list[int]] | None = None) -> int:
    """The costliest group in tokens (its samples' costs summed; the costliest sample when
    the groups cannot be formed), 0 for no samples. ``members``: the groups of
    ``group_ids`` (:mod:`seqlen_balancing.planning.groups`), else ``force_group_size=group``'s."""
    if not sizes:
        return 0
    if members is not None:
        return max(sum(sizes[i] for i in m) for m in members) if members else max(sizes)
    if group is None or group <= 1 or len(sizes) % group:
        return max(sizes)
    return max(sum(sizes[g : g + group]) for g in range(0, len(sizes), group))


def sample_costs_of(lengths: list[int], pad: int, costs: Any) -> tuple[PlanError | None, list[int]]:
    """Each sample's cost (:func:`~seqlen_balancing.cost.sample_costs`: the given cost, or
    the effective length, rounded up to ``pad``), or the error to agree on. ``costs`` is
    read whole (:func:`~seqlen_balancing.planning.per_sample.read_numbers`; a callable is called
    with the lengths)."""
    error, given = (None, lengths) if costs is None else read_numbers(costs, "costs", lengths)
    if error is None and len(given) != len(lengths):
        error = NotOnePerSample("costs", len(given), len(lengths))
    return error, [aligned_length(c, pad) for c in given] if error is None and pad > 1 else given


def workloads_of(
    lengths: list[int], workloads: Any, model: WorkloadModel | None = None
) -> tuple[PlanError | None, list[int]]:
    """Each sample's balance workload: the caller's (read whole: a list, or a callable of
    the effective lengths), the ``workload_model``'s, or verl's ``24576*s + s**2``."""
    if workloads is None:
        if model is not None:
            return None, model.workloads(lengths)
        return None, [(WORKLOAD_LINEAR_COEF + s) * s for s in lengths]
    if model is not None:
        return WorkloadsAndModel(), []
    error, given = read_numbers(workloads, "workloads", lengths)
    if error is None and len(given) != len(lengths):
        error = NotOnePerSample("workloads", len(given), len(lengths))
    return error, given


def over_cap_error(
    tokens: list[int], costs: list[int], kind: type[OverCap], firsts: list[int],
    cap: Cap, made: tuple[int, bool],
) -> PlanError | None:
    """The error for items (samples or groups) whose cost exceeds the usable cap, naming
    the first one's tokens and cost (``firsts``: each item's first sample), the cap given,
    how many and the largest cost. ``made``: ``(pad_to_multiple_of, whether the caller
    gave costs)``."""
    if not costs or max(costs) <= cap.usable:
        return None
    over = [i for i, cost in enumerate(costs) if cost > cap.usable]
    first = over[0]
    return kind(tokens[first], firsts[first], cap.given, len(over), max(costs), costs[first], cap.bucket,
                *made)


def named_group_error(
    rule: Rule, members: list[list[int]], labels: list[str], cap: Cap
) -> PlanError | None:
    """The error for the first group of ``group_ids`` (by its first sample) that cannot run
    alone: over the sample limit, or its cost over the usable cap (named by its id)."""
    largest = max(rule.sizes, default=0)
    for g in range(rule.n):
        if rule.limit is not None and rule.rows[g] > rule.limit:
            return GroupOverSampleLimit(labels[g], members[g][0], rule.rows[g], rule.limit)
        if rule.sizes[g] > cap.usable:
            return GroupIdsOverCap(labels[g], members[g][0], rule.sizes[g], cap.given, largest,
                                   cap.bucket, rule.is_padded)
    return None


def _per_group(values: list[int], members: list[list[int]] | None, combine: Any = sum) -> list[int]:
    if members is None:
        return values
    return [combine(values[i] for i in m) for m in members]


@dataclass(frozen=True)
class GroupRule:
    """What :func:`group_rule` builds: the rule on the force groups, each sample's cost
    (padded: its width), each group's workload, and the error to agree on (or ``None``)."""

    rule: Rule
    sample_costs: list[int]
    workloads: list[int]
    error: PlanError | None


def group_rule(
    lengths: list[int],
    costs: list[int],
    workloads: list[int],
    options: PlanOptions,
    cap: Cap,
    extents: tuple[Sequence[int], Sequence[int]] | None,
    custom_costs: bool,
    members: list[list[int]] | None = None,
    labels: list[str] | None = None,
) -> GroupRule:
    """The one rule on the groups of one rank's samples.

    Args:
        lengths: effective length of each sample in tokens.
        costs: each sample's cost (given or effective, aligned): what a group sums, or
            (padded, no ``extents``, ``costs`` given) each row's span right of column 0
            (else its effective length is).
        workloads: each sample's balance workload.
        options: the plan's options (its ``force_group_size``, ``pad_to_multiple_of``,
            ``max_samples_per_micro_batch``, ``padded`` and ``over_cap``: with ``"alone"``
            over-cap items are set apart, not an error).
        cap: the checked cap.
        extents: padded: each sample's ``(left, right)`` span around a column every row
            shares, or ``None``.
        custom_costs: the caller gave ``costs`` (named in the over-cap message).
        members: the groups (each its ascending sample indices, in the order of their
            first sample: :func:`~seqlen_balancing.planning.groups.read_group_ids`), or ``None``
            for ``force_group_size``'s consecutive groups
            (:func:`~seqlen_balancing.planning.groups.uniform_members`).
        labels: with ``members`` from ``group_ids``, each group's name: over-cap groups
            are then named by their id (:class:`~seqlen_balancing.errors.GroupIdsOverCap`).

    Returns:
        A :class:`GroupRule`; its error is a :class:`~seqlen_balancing.errors.SampleOverCap`
        / :class:`~seqlen_balancing.errors.GroupOverCap` (summed) or a
        :class:`~seqlen_balancing.errors.PaddedSampleOverCap` /
        :class:`~seqlen_balancing.errors.PaddedGroupOverCap` (padded) for the first over-cap
        sample or group (a group of ``group_ids``: by its id, or over the sample limit),
        unless ``over_cap="alone"``.

    Complexity: O(n).
    """
    group, alone = options.force_group_size, options.over_cap == "alone"
    if members is None and group > 1:
        members = uniform_members(len(lengths), group)
    rows = [1] * len(lengths) if members is None else [len(m) for m in members]
    group_workloads = _per_group(workloads, members)
    if options.padded:
        return _padded_groups(lengths, costs, group_workloads, options, cap, extents, custom_costs,
                              (members, labels, rows))
    made = (options.pad_to_multiple_of, custom_costs)
    error = None if alone else over_cap_error(lengths, costs, SampleOverCap, list(range(len(lengths))), cap,
                                              made)
    rule = Rule.sums(_per_group(costs, members), cap.usable, rows, options.max_samples_per_micro_batch)
    if error is None and members is not None and not alone:
        error = _group_error(rule, lengths, members, labels, cap, made, GroupOverCap)
    return GroupRule(rule, costs, group_workloads, error)


def _group_error(
    rule: Rule, lengths: list[int], members: list[list[int]], labels: list[str] | None,
    cap: Cap, made: tuple[int, bool], kind: type[OverCap],
    spans: list[int] | None = None,
) -> PlanError | None:
    """The groups' error once every sample fits: by id for ``group_ids``, else
    ``force_group_size``'s (``spans``: padded, each group's span; else its tokens)."""
    if labels is not None:
        return named_group_error(rule, members, labels, cap)
    tokens = spans if spans is not None else _per_group(lengths, members)
    return over_cap_error(tokens, rule.sizes, kind, [m[0] for m in members], cap, made)


def _padded_groups(
    lengths: list[int], costs: list[int], group_workloads: list[int], options: PlanOptions,
    cap: Cap, extents: tuple[Sequence[int], Sequence[int]] | None, custom_costs: bool,
    grouped: tuple[list[list[int]] | None, list[str] | None, list[int]],
) -> GroupRule:
    """:func:`group_rule` for ``padded=True``: each row spans ``extents`` or ``(0, its
    cost)`` (its length or the ``costs`` given, before alignment); a group spans its rows'
    widest left and right; alone it costs ``rows * ceil((left + right) / pad) * pad``."""
    pad, alone = options.pad_to_multiple_of, options.over_cap == "alone"
    members, labels, rows = grouped
    if extents is not None:
        left, right = list(extents[0]), list(extents[1])
    else:
        left, right = [0] * len(lengths), costs if custom_costs else lengths
    spans = [a + b for a, b in zip(left, right, strict=True)]
    widths = [aligned_length(span, pad) for span in spans]
    rule = Rule.padded(_per_group(left, members, max), _per_group(right, members, max), cap.usable,
                       rows, pad, options.max_samples_per_micro_batch)
    made = (pad, custom_costs)
    error = None if alone else over_cap_error(spans, widths, PaddedSampleOverCap, list(range(len(lengths))),
                                              cap, made)
    if error is None and members is not None and not alone:
        group_spans = [a + b for a, b in zip(rule.left or [], rule.right or [], strict=True)]
        error = _group_error(rule, lengths, members, labels, cap, made, PaddedGroupOverCap,
                             group_spans)
    return GroupRule(rule, widths, group_workloads, error)


def dummy_group(rule: Rule, lengths: list[int], members: list[list[int]] | None = None) -> int:
    """The group a dummy micro-batch copies: one that fits alone before one that does not,
    then the cheapest under the rule alone, the fewest effective tokens, the lowest index.

    Example:
        >>> dummy_group(Rule.sums([8, 8, 16], 100), [5, 3, 9])
        1
    """
    tokens = _per_group(lengths, members)
    return min(range(rule.n), key=lambda g: (not rule.fits_alone(g), rule.sizes[g], tokens[g], g))
