"""Shared prompts counted once: ``prefix_lengths`` as costs and groups (no torch).

GRPO samples ``n`` responses per prompt; with prefix-shared attention (verl's shared-prefix
path, AReaL's tree attention) a micro-batch holding ``k`` of one prompt's responses holds
the prompt once plus the ``k`` responses. The rule: **a micro-batch costs the sum of its
samples' tokens beyond their prefix, plus each group's shared prefix once per group part
it holds.**

This is a thin layer on the existing ``costs=`` and ``group_ids=`` machinery:
:func:`shared_prefix_costs` turns ``(lengths, group_ids, prefix_lengths, cap, options)``
into one cost per sample and one group id per sample such that planning those costs with
those groups is exactly the rule. The sample that opens each part (a whole group's first
sample) costs its whole length (``prefix + (length - prefix)``), the others ``length -
prefix`` (each rounded up to
``pad_to_multiple_of``, as every cost is), and each part is a group that lands whole, so
the part pays its prefix once.

**A group over the cap** (its cost, the prefix once plus its samples' tokens beyond it, over
the cap rounded down to ``micro_batch_multiple_of``, or more samples than
``max_samples_per_micro_batch``) is split into parts that each pay the prefix, by
first-fit decreasing: its samples, most tokens beyond the prefix first (ties: the lower
index), each join the first part that still holds it under the cap and the sample limit,
else open a new part (whose first sample pays the prefix). No two parts of a group fit
together (the later one's first sample did not fit the earlier one), so no micro-batch
ever holds two parts of one group: counting the prefix once per part is counting it once
per group present. A sample that alone is over the cap is the usual over-cap error,
naming the sample. Under ``over_cap="alone"`` no group is
split: an over-cap group runs alone, as any over-cap group does.

The groups are ``group_ids``', or without them ``force_group_size``'s (``[i // g for i in
range(n)]``, a batch it does not divide refused as without prefixes). Refused (the error
every DP rank agrees on): ``prefix_lengths`` with ``costs`` or with ``padded=True`` (both
decide the cost another way), without groups, a prefix longer than its sample, and two
samples of one group with different prefix lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from seqlen_balancing._checks import _integer_or_none
from seqlen_balancing.cost import aligned_length, micro_batch_capacity
from seqlen_balancing.errors import (
    NotDivisible,
    NotOnePerSample,
    PlanError,
    PrefixDiffersInGroup,
    PrefixLengthsWith,
    PrefixLengthsWithoutGroups,
    PrefixOverLength,
)
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.groups import read_group_ids
from seqlen_balancing.planning.per_sample import read_numbers

__all__ = ["PartId", "PrefixParts", "shared_prefix_costs"]


@dataclass(frozen=True)
class PartId:
    """The group id of one part of a group: equal for the samples of one part, named in
    messages by ``label`` (the group id's repr, with ``part k of m`` for a split group)."""

    group: int
    part: int
    label: str = field(compare=False)

    def __repr__(self) -> str:
        return self.label


@dataclass(frozen=True)
class PrefixParts:
    """What :func:`shared_prefix_costs` returns: the ``error`` to agree on, or one cost per
    sample and one :class:`PartId` per sample to plan with (``costs=``, ``group_ids=``)."""

    error: PlanError | None
    costs: list[int] = field(default_factory=list)
    group_ids: list[PartId] = field(default_factory=list)


def shared_prefix_costs(
    seq_lens: Sequence[Any],
    group_ids: Any,
    prefix_lengths: Any,
    max_token_len: Any,
    options: PlanOptions | None = None,
    *,
    costs_given: bool = False,
) -> PrefixParts:
    """Per-sample costs and part ids under which the ``costs=``/``group_ids=`` machinery
    plans "each group's shared prefix counted once per micro-batch".

    Args:
        seq_lens: effective length in tokens of each of the ``n`` samples (prefix included).
        group_ids: one hashable id per sample (as the planner takes them); the samples of a
            group share a prefix. ``None``: ``options.force_group_size``'s groups.
        prefix_lengths: one whole number per sample (a list, a 1-D tensor or array): the
            tokens of the sample that its group shares (the prompt), at most its length and
            equal across a group.
        max_token_len: the cap in tokens (a group over it is split; an invalid cap is left
            for the planner to report, nothing split).
        options: the plan's options: ``pad_to_multiple_of`` (each cost rounded up),
            ``micro_batch_multiple_of`` (the cap rounded down), ``max_samples_per_micro_batch``
            and ``over_cap`` (``"alone"``: nothing split) decide the parts; ``padded`` is
            refused.
        costs_given: True when the caller also gave ``costs`` (refused).

    Returns:
        A :class:`PrefixParts`: ``error`` (never raised: the DP group agrees on it first),
        else the costs and the part ids.

    Complexity: O(n): one pass to read, one per group to split.

    Example:
        >>> parts = shared_prefix_costs([300, 250, 280], ["a", "a", "a"], [200] * 3, 500)
        >>> parts.costs, parts.group_ids
        ([300, 50, 80], ['a', 'a', 'a'])
        >>> shared_prefix_costs([300, 250, 280], [0, 0, 0], [200] * 3, 350).group_ids
        [0 (part 1 of 2), 0 (part 1 of 2), 0 (part 2 of 2)]
        >>> from seqlen_balancing import plan_micro_batches
        >>> plan_micro_batches([300, 250, 280], 500, group_ids=[0, 0, 0], prefix_lengths=[200] * 3)
        [[0, 1, 2]]
    """
    options = PlanOptions() if options is None else options
    # read whole even when refused (reading never raises); the first error in this order speaks
    length_error, lengths = read_numbers(seq_lens, "seq_lens")
    prefix_error, prefixes = read_numbers(prefix_lengths, "prefix_lengths")
    error = _refused(group_ids, options, costs_given) or length_error or prefix_error
    if error is None and len(prefixes) != len(lengths):
        error = NotOnePerSample("prefix_lengths", len(prefixes), len(lengths))
    size = options.force_group_size  # without group_ids, its groups: [i // size for i in range(n)]
    if error is None and group_ids is None and len(lengths) % size:
        error = NotDivisible(len(lengths), size)
    if error is not None:
        return PrefixParts(error)
    error, members, labels = read_group_ids([i // size for i in range(len(lengths))] if group_ids is None
                                            else group_ids, len(lengths))
    error = error or _prefix_error(lengths, prefixes, members, labels)
    if error is not None:
        return PrefixParts(error)
    pad, cap = options.pad_to_multiple_of, _usable_cap(max_token_len, options)
    out_costs, out_ids = [0] * len(lengths), [PartId(0, 0, "")] * len(lengths)
    for g, samples in enumerate(members):
        head = [aligned_length(lengths[i], pad) for i in samples]
        tail = [aligned_length(lengths[i] - prefixes[i], pad) for i in samples]  # one prefix per group
        parts = _split(head, tail, cap, options.max_samples_per_micro_batch)
        for k, part in enumerate(parts):
            label = labels[g] if len(parts) == 1 else f"{labels[g]} (part {k + 1} of {len(parts)})"
            for position, j in enumerate(part):
                i = samples[j]
                out_costs[i] = head[j] if position == 0 else tail[j]
                out_ids[i] = PartId(g, k, label)
    return PrefixParts(None, out_costs, out_ids)


def _refused(group_ids: Any, options: PlanOptions, costs_given: bool) -> PlanError | None:
    if costs_given or options.padded:
        return PrefixLengthsWith("costs" if costs_given else "padded=True")
    return PrefixLengthsWithoutGroups() if group_ids is None and options.force_group_size == 1 else None


def _prefix_error(
    lengths: list[int], prefixes: list[int], members: list[list[int]], labels: list[str]
) -> PlanError | None:
    """A prefix longer than its sample, or two prefix lengths in one group (the first found,
    in sample order), else ``None``."""
    for i, (length, prefix) in enumerate(zip(lengths, prefixes, strict=True)):
        if prefix > length:
            return PrefixOverLength(i, prefix, length)
    for g, samples in enumerate(members):
        first = samples[0]
        for i in samples:
            if prefixes[i] != prefixes[first]:
                return PrefixDiffersInGroup(labels[g], first, prefixes[first], i, prefixes[i])
    return None


def _usable_cap(max_token_len: Any, options: PlanOptions) -> int | None:
    """The summed cost a micro-batch may hold, or ``None`` (never split) for a cap the
    planner refuses or ``over_cap="alone"`` (an over-cap group runs alone, whole)."""
    cap = _integer_or_none(max_token_len)
    if cap is None or cap < 1 or options.over_cap == "alone":
        return None
    return micro_batch_capacity(cap, options.micro_batch_multiple_of) or None


def _split(head: list[int], tail: list[int], cap: int | None, limit: int | None) -> list[list[int]]:
    """A group's parts (positions in the group, the first to join a part first): the whole
    group when it fits, else first-fit decreasing: its samples, most tokens beyond the prefix
    first (ties: lower index), each joining the first part it fits (cap and sample limit),
    else opening one that pays the prefix through it. No two parts fit together, so a
    micro-batch never holds two parts of one group. O(size x parts)."""
    if cap is None or (head[0] + sum(tail[1:]) <= cap and (limit is None or len(head) <= limit)):
        return [list(range(len(head)))]
    parts: list[list[int]] = []
    loads: list[int] = []
    for j in sorted(range(len(head)), key=lambda j: (-tail[j], j)):
        for k, part in enumerate(parts):
            if loads[k] + tail[j] <= cap and (limit is None or len(part) < limit):
                part.append(j)
                loads[k] += tail[j]
                break
        else:
            parts.append([j])
            loads.append(head[j])
    return sorted(parts, key=min)  # numbered by their first sample
