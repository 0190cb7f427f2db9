"""verl 0.9.1's micro-batch count rule, re-implemented on integer lists (no torch).

What ``verl.utils.seqlen_balancing.rearrange_micro_batches`` (verl 0.9.1) does to choose
how many micro-batches a rank runs, so that a user can compare it with this library's
count on the same step (``seqlen-balancing plan --compare-verl``, ``benchmarks/``):

1. Each rank starts at ``min(groups, ceil(total tokens / cap))`` (``groups`` = samples /
   ``force_group_size``), raised to ``min_num_micro_batch``; with DP agreement the ranks
   take the MAX of their starts; the result is rounded up to ``num_batches_divided_by``.
2. A forced group longer than the cap fails (verl: ``ValueError``; a single sample longer
   than the cap fails verl's ``assert``).
3. Karmarkar-Karp on the groups' workloads (``24576*s + s**2``, summed over a group) into
   ``k`` parts; if any part holds more than ``cap`` tokens, ``k`` grows by
   ``num_batches_divided_by`` (or 1) and Karmarkar-Karp runs again. With DP agreement every
   rank moves to the next ``k`` until all ranks fit at the same ``k`` (verl's MIN
   all-reduce of "fits"); a ``k`` above the fewest groups on any rank fails.

The count is the first ``k`` of that sequence at which every part fits, so it cannot be
found faster than by trying each ``k`` in turn, with one exception used here: a ``k``
below a rank's Martello-Toth L2 lower bound cannot fit on that rank, so those ``k`` are
skipped without running Karmarkar-Karp (the answer is the same). ``max_tries`` bounds the
Karmarkar-Karp rounds that remain; past it :class:`VerlSearchLimit` says the count is above
the last ``k`` tried. One round costs O(n log n + n k) per rank.

Differences from verl's code that do not change the count: errors are ``ValueError`` (verl
uses ``assert`` for an over-cap sample and an indivisible batch), and a batch of only empty
samples starts at one micro-batch (verl would ask Karmarkar-Karp for zero parts and fail).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from seqlen_balancing._checks import as_list, non_negative_ints, positive_int
from seqlen_balancing.planning.bounds import l2_lower_bound
from seqlen_balancing.planning.partition import karmarkar_karp, roundup_divisible, workload

__all__ = ["DEFAULT_MAX_TRIES", "VerlCounts", "VerlSearchLimit", "verl_counts"]

#: Karmarkar-Karp rounds (one per count tried, all ranks together) before giving up.
DEFAULT_MAX_TRIES = 100


class VerlSearchLimit(ValueError):
    """verl's count search ran ``tries`` rounds without finding a count that fits.

    Attributes:
        last_tried: the largest count tried; verl's count is above it.
        tries: Karmarkar-Karp rounds run.
    """

    def __init__(self, last_tried: int, tries: int) -> None:
        super().__init__(
            f"verl 0.9.1's count search stopped after {tries} Karmarkar-Karp rounds; its "
            f"count is above {last_tried}; raise max_tries to search further"
        )
        self.last_tried = last_tried
        self.tries = tries


@dataclass(frozen=True)
class VerlCounts:
    """The micro-batch counts verl 0.9.1 chooses for a DP group.

    Attributes:
        counts: micro-batches per rank, in rank order (all equal under DP agreement).
        tries: Karmarkar-Karp rounds run (counts tried after the L2 skip).
    """

    counts: list[int]
    tries: int


@dataclass(frozen=True)
class _Rank:
    sizes: list[int]  # tokens per forced group
    workloads: list[int]  # verl workload per forced group
    start: int  # min(groups, ceil(total / cap)), raised to min_num_micro_batch
    bound: int  # L2 lower bound: no count below it fits

    def fits(self, count: int, cap: int) -> bool:
        parts = karmarkar_karp(self.workloads, count, equal_size=False)
        return all(sum(self.sizes[i] for i in part) <= cap for part in parts)


def _rank(lengths: list[int], rank: int, cap: int, group: int, floor: int | None) -> _Rank:
    if not lengths:
        raise ValueError(f"rank {rank} has no samples; verl 0.9.1 needs at least one per rank")
    if len(lengths) % group:
        raise ValueError(
            f"rank {rank}: batch size {len(lengths)} is not divisible by force_group_size {group}"
        )
    longest = max(lengths)
    if longest > cap:
        raise ValueError(
            f"rank {rank}: a sample of {longest} tokens exceeds max_token_len {cap} "
            "(verl 0.9.1 fails its assert)"
        )
    sizes = [sum(lengths[g : g + group]) for g in range(0, len(lengths), group)]
    loads = [sum(workload(s) for s in lengths[g : g + group]) for g in range(0, len(lengths), group)]
    start = max(floor or 1, min(len(sizes), -(-sum(sizes) // cap)))  # floor: None or >= 1
    bound = l2_lower_bound(sizes, cap) if max(sizes) <= cap else 0  # else _search raises
    return _Rank(sizes, loads, start, bound)


def _search(ranks: list[_Rank], start: int, cap: int, step: int, max_tries: int) -> tuple[int, int]:
    """First count ``start + m * step`` at which every rank's Karmarkar-Karp parts fit."""
    fewest = min(len(r.sizes) for r in ranks)
    largest = max(max(r.sizes) for r in ranks)
    if largest > cap:
        raise ValueError(
            f"a forced group of {largest} tokens exceeds max_token_len {cap} and cannot be split "
            "(verl 0.9.1 raises ValueError)"
        )
    count, tries = start, 0
    bound = max(r.bound for r in ranks)
    if count < bound:  # counts below the L2 bound cannot fit: skip them, same answer
        count += -(-(bound - count) // step) * step
    while True:
        if count > fewest:
            raise ValueError(
                f"verl 0.9.1 needs more than {count - step} micro-batches but a rank has only "
                f"{fewest} forced groups; it raises ValueError on this step"
            )
        if tries == max_tries:
            raise VerlSearchLimit(count - step, tries)
        tries += 1
        if all(r.fits(count, cap) for r in ranks):
            return count, tries
        count += step


def verl_counts(
    seq_lens_per_rank: Sequence[Sequence[int]],
    max_token_len: int,
    *,
    same_micro_num_in_dp: bool = True,
    num_batches_divided_by: int | None = None,
    min_num_micro_batch: int | None = None,
    force_group_size: int = 1,
    max_tries: int = DEFAULT_MAX_TRIES,
) -> VerlCounts:
    """Micro-batches per rank that verl 0.9.1's ``rearrange_micro_batches`` would use.

    The rule of the module docstring: Karmarkar-Karp on workloads from
    ``ceil(total / cap)`` upwards, one count (or ``num_batches_divided_by``) at a time,
    until every micro-batch fits the cap; with ``same_micro_num_in_dp`` all ranks move
    together, as verl's all-reduces make them.

    Args:
        seq_lens_per_rank: for each DP rank, its samples' effective lengths in tokens.
        max_token_len: hard cap in tokens per micro-batch.
        same_micro_num_in_dp: all ranks use one count (verl with a ``dp_group``).
        num_batches_divided_by: count step and rounding (verl's virtual pipeline size).
        min_num_micro_batch: the smallest count to start from, or ``None``.
        force_group_size: consecutive samples that share a micro-batch.
        max_tries: Karmarkar-Karp rounds allowed (each runs on every rank), >= 1.

    Returns:
        A :class:`VerlCounts`: the count of each rank and the rounds run.

    Raises:
        VerlSearchLimit: ``max_tries`` rounds ran without a fit (a ``ValueError``).
        ValueError: where verl 0.9.1 fails: a sample or forced group over the cap, a batch
            not divisible by ``force_group_size``, or a count above the fewest groups;
            also an empty ``seq_lens_per_rank`` or a rank without samples.
        TypeError: a length or setting is not an integer.

    Complexity: O(t * (n log n + n k)) per rank for ``t`` rounds, ``t <= max_tries``.

    Example:
        >>> verl_counts([[6, 6, 6], [1, 1, 1]], 10).counts
        [3, 3]
        >>> verl_counts([[6, 6, 6], [1, 1, 1]], 10, same_micro_num_in_dp=False).counts
        [3, 1]

    References:
        verl 0.9.1, ``verl/utils/seqlen_balancing.py``, ``rearrange_micro_batches``;
        Karmarkar & Karp 1982; Martello & Toth 1990 (L2 bound).
    """
    cap = positive_int(max_token_len, "max_token_len")
    group = positive_int(force_group_size, "force_group_size")
    tries_allowed = positive_int(max_tries, "max_tries")
    step = (
        1
        if num_batches_divided_by is None
        else positive_int(num_batches_divided_by, "num_batches_divided_by")
    )
    floor = None if min_num_micro_batch is None else positive_int(min_num_micro_batch, "min_num_micro_batch")
    per_rank = [
        non_negative_ints(as_list(lens, "seq_lens"), "seq_lens")
        for lens in as_list(seq_lens_per_rank, "seq_lens_per_rank")
    ]
    if not per_rank:
        raise ValueError("seq_lens_per_rank is empty; pass one list of lengths per DP rank")
    ranks = [_rank(lens, r, cap, group, floor) for r, lens in enumerate(per_rank)]
    if same_micro_num_in_dp:
        start = roundup_divisible(max(r.start for r in ranks), step)
        count, tries = _search(ranks, start, cap, step, tries_allowed)
        return VerlCounts([count] * len(ranks), tries)
    found = [_search([r], roundup_divisible(r.start, step), cap, step, tries_allowed) for r in ranks]
    return VerlCounts([count for count, _ in found], sum(tries for _, tries in found))
