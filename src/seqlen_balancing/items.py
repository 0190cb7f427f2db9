"""One rank's items under the one rule, from its plain inputs (no torch).

Its costs and workloads read (whole, by :func:`~seqlen_balancing.per_sample.read_numbers`),
the force groups formed, the rule built and its over-cap items named.
Everything here reads plain values and never raises for bad input: it returns the
:class:`~seqlen_balancing.errors.PlanError` the DP group agrees on, as
:func:`~seqlen_balancing.planner.analyse` needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seqlen_balancing.cost import WorkloadModel, aligned_length
from seqlen_balancing.errors import (
    GroupOverCap,
    LengthSource,
    NotOnePerSample,
    OverCap,
    PaddedGroupOverCap,
    PaddedSampleOverCap,
    PlanError,
    SampleOverCap,
    WorkloadsAndModel,
)
from seqlen_balancing.partition import WORKLOAD_LINEAR_COEF
from seqlen_balancing.per_sample import read_numbers
from seqlen_balancing.rule import Rule

__all__ = ["GroupRule", "group_rule"]


def longest(sizes: list[int], group: int | None) -> int:
    """The costliest forced group in tokens (its samples' costs summed; the costliest
    sample when the groups cannot be formed), 0 for no samples."""
    if not sizes:
        return 0
    if group is None or group <= 1 or len(sizes) % group:
        return max(sizes)
    return max(sum(sizes[g : g + group]) for g in range(0, len(sizes), group))


def sample_costs_of(lengths: list[int], pad: int, costs: Any) -> tuple[PlanError | None, list[int]]:
    """Each sample's cost (:func:`~seqlen_balancing.cost.sample_costs`: the given cost, or
    the effective length, rounded up to ``pad``), or the error to agree on. ``costs`` is
    read whole (:func:`~seqlen_balancing.per_sample.read_numbers`; a callable is called
    with the lengths)."""
    if costs is None:
        return None, [aligned_length(n, pad) for n in lengths] if pad > 1 else lengths
    error, given = read_numbers(costs, LengthSource.COSTS, lengths)
    if error is None and len(given) != len(lengths):
        error = NotOnePerSample(LengthSource.COSTS, len(given), len(lengths))
    if error is None and pad > 1:
        given = [aligned_length(c, pad) for c in given]
    return error, given


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
    error, given = read_numbers(workloads, LengthSource.WORKLOADS, lengths)
    if error is None and len(given) != len(lengths):
        error = NotOnePerSample(LengthSource.WORKLOADS, len(given), len(lengths))
    return error, given


def over_cap_error(
    tokens: list[int], costs: list[int], kind: type[OverCap], stride: int,
    caps: tuple[int, int, int], made: tuple[int, bool],
) -> PlanError | None:
    """The error for items (samples or groups) whose cost exceeds the usable cap, naming
    the first one's tokens and cost, the cap given, how many and the largest cost.
    ``caps``: ``(usable cap, max_token_len given, micro_batch_multiple_of)``; ``made``:
    ``(pad_to_multiple_of, whether the caller gave costs)``."""
    usable, given, bucket = caps
    over = [i for i, cost in enumerate(costs) if cost > usable]
    if not over:
        return None
    first = over[0]
    largest = max(costs[i] for i in over)
    return kind(tokens[first], first * stride, given, len(over), largest, costs[first], bucket, *made)


def _per_group(values: list[int], group: int, combine: Any = sum) -> list[int]:
    if group == 1:
        return values
    return [combine(values[g : g + group]) for g in range(0, len(values), group)]


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
    shape: tuple[int, int, int | None, bool],
    caps: tuple[int, int, int],
    extents: tuple[Sequence[int], Sequence[int]] | None,
    custom_costs: bool,
    alone: bool,
) -> GroupRule:
    """The one rule on the force groups of one rank's samples.

    Args:
        lengths: effective length of each sample in tokens.
        costs: each sample's cost (given or effective, aligned): what a group sums, or
            (padded, no ``extents``, ``costs`` given) each row's span right of column 0
            (else its effective length is).
        workloads: each sample's balance workload.
        shape: ``(force_group_size, pad_to_multiple_of, max_samples_per_micro_batch,
            padded)``.
        caps: ``(usable cap, max_token_len given, micro_batch_multiple_of)``.
        extents: padded: each sample's ``(left, right)`` span around a column every row
            shares, or ``None``.
        custom_costs: the caller gave ``costs`` (named in the over-cap message).
        alone: ``over_cap="alone"``: over-cap items are set apart, not an error.

    Returns:
        A :class:`GroupRule`; its error is a :class:`~seqlen_balancing.errors.SampleOverCap`
        / :class:`~seqlen_balancing.errors.GroupOverCap` (summed) or a
        :class:`~seqlen_balancing.errors.PaddedSampleOverCap` /
        :class:`~seqlen_balancing.errors.PaddedGroupOverCap` (padded) for the first over-cap
        sample or group, unless ``alone``.

    Complexity: O(n).
    """
    group, pad, limit, padded = shape
    rows = [group] * (len(lengths) // group)
    group_workloads = _per_group(workloads, group)
    if padded:
        return _padded_groups(lengths, costs, group_workloads, shape, caps, extents, custom_costs, alone)
    made = (pad, custom_costs)
    error = None if alone else over_cap_error(lengths, costs, SampleOverCap, 1, caps, made)
    sizes = _per_group(costs, group)
    rule = Rule.sums(sizes, caps[0], rows, limit)
    if error is None and group > 1 and not alone:
        tokens = _per_group(lengths, group)
        error = over_cap_error(tokens, sizes, GroupOverCap, group, caps, made)
    return GroupRule(rule, costs, group_workloads, error)


def _padded_groups(
    lengths: list[int], costs: list[int], group_workloads: list[int],
    shape: tuple[int, int, int | None, bool], caps: tuple[int, int, int],
    extents: tuple[Sequence[int], Sequence[int]] | None, custom_costs: bool, alone: bool,
) -> GroupRule:
    """:func:`group_rule` for ``padded=True``: each row spans ``extents`` or ``(0, its
    cost)`` (its length or the ``costs`` given, before alignment); a group spans its rows'
    widest left and right; alone it costs ``group * ceil((left + right) / pad) * pad``."""
    group, pad, limit, _ = shape
    if extents is not None:
        left, right = list(extents[0]), list(extents[1])
    else:
        left, right = [0] * len(lengths), costs if custom_costs else lengths
    spans = [a + b for a, b in zip(left, right, strict=True)]
    widths = [aligned_length(span, pad) for span in spans]
    rows = [group] * (len(lengths) // group)
    rule = Rule.padded(_per_group(left, group, max), _per_group(right, group, max), caps[0],
                       rows, pad, limit)
    made = (pad, custom_costs)
    error = None
    if not alone:
        error = over_cap_error(spans, widths, PaddedSampleOverCap, 1, caps, made)
    if error is None and group > 1 and not alone:
        group_spans = [a + b for a, b in zip(rule.left or [], rule.right or [], strict=True)]
        error = over_cap_error(group_spans, rule.sizes, PaddedGroupOverCap, group, caps, made)
    return GroupRule(rule, widths, group_workloads, error)


def dummy_group(rule: Rule, lengths: list[int], group: int) -> int:
    """The group a dummy micro-batch copies: one that fits alone before one that does not,
    then the cheapest under the rule alone, the fewest effective tokens, the lowest index.

    Example:
        >>> dummy_group(Rule.sums([8, 8, 16], 100), [5, 3, 9], 1)
        1
    """
    tokens = _per_group(lengths, group)
    return min(range(rule.n), key=lambda g: (not rule.fits_alone(g), rule.sizes[g], tokens[g], g))
