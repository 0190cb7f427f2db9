"""The smallest micro-batch count one rank reaches under the cap, and its packing (no torch).

:func:`_search_count` runs the packings (best-fit, closing-fit, minimum-bin-slack
decreasing), holds them to the lower bounds, narrows a gap that remains with the exchange
search and, on few groups, the exhaustive search, and tries verl 0.9.1's own construction
(Karmarkar-Karp at the counts verl's rule could stop at) so the count is never above
verl's. :func:`_set_aside` sets the over-cap groups of ``over_cap="alone"`` apart first.
:mod:`seqlen_balancing.planner` calls them from its analysis.
"""

from __future__ import annotations

from seqlen_balancing.analysis import RankAnalysis
from seqlen_balancing.bounds import BOUND_NAMES, _best_lower_bound, dominant_bins
from seqlen_balancing.packing import (
    best_fit_decreasing,
    closing_fit_decreasing,
    exact_packing,
    minimum_bin_slack,
    reduce_bins,
    split_to_count,
)
from seqlen_balancing.padded import SAMPLE_LIMIT, limit_samples
from seqlen_balancing.partition import _capped_largest_differencing, roundup_divisible

__all__ = ["EXHAUSTIVE"]

#: Karmarkar-Karp costs O(n * count); above this product the capacity-aware LPT packing
#: (O(n log count)) balances alone. 2**22 covers 2,048 samples into 2,048 micro-batches
#: and 16,384 into 256.
_KK_BUDGET = 1 << 22


def _set_aside(result: RankAnalysis, over: list[int], floor: int | None) -> None:
    """``over_cap="alone"``: the over-cap groups take one micro-batch each (in every plan,
    so they add one each to the count and to the lower bound); the others are analysed
    as a batch of their own, under the floor that remains."""
    result.over_cap_groups = over
    chosen = set(over)
    rest_index = [g for g in range(result.n_groups) if g not in chosen]
    rest = RankAnalysis(None, result.max_token_len, 1, result.num_batches_divided_by)
    rest.group_sizes = [result.group_sizes[g] for g in rest_index]
    rest.group_workloads = [result.group_workloads[g] for g in rest_index]
    rest.n_samples = len(rest_index)
    rest.requested_max_token_len = result.requested_max_token_len
    rest_floor = None if floor is None or floor - len(over) < 1 else floor - len(over)
    if rest_index:
        _search_count(rest, rest_floor)
    else:
        rest.bound_name = "one"
    result._rest, result._rest_index = rest, rest_index
    result.min_count = len(over) + rest.min_count
    result.lower_bound = len(over) + rest.lower_bound
    result.bound_name = rest.bound_name
    if floor is not None and floor > result.lower_bound:
        result.lower_bound, result.bound_name = floor, "min_num_micro_batch"
    result._packing = [[g] for g in over] + [[rest_index[j] for j in b] for b in rest._packing]


def _search_count(result: RankAnalysis, floor: int | None) -> None:
    """Smallest count reached under the cap, with its packing and the bound it is held to.

    Best-fit decreasing, held to the O(n log n) bounds (L2, cardinality, large-item
    matching); where a gap remains, closing-fit decreasing and (up to 4,096 groups)
    minimum-bin-slack packing; where one still remains, the stronger bounds (reduction,
    Fekete-Schepers) and then the search of :func:`_close_gap`. Each step runs only while
    the count is above the bound, so a batch proven optimal early costs nothing more. A
    packing below ``L`` (set by ``min_num_micro_batch``) is split up to ``L``.
    """
    sizes, cap = result.group_sizes, result.max_token_len
    wanted = 1 if floor is None else floor
    packing = best_fit_decreasing(sizes, cap)

    def hold(upto: str) -> int:
        """Set the bound (bounds up to ``upto``, the floor) and return it."""
        # At or below the floor, no bound can change the count: L2 alone is enough.
        enough = len(packing) if wanted < len(packing) else 0
        bound, name = _best_lower_bound(sizes, cap, enough, upto)
        if wanted > bound:
            bound, name = wanted, ("one" if floor is None else "min_num_micro_batch")
        result.lower_bound, result.bound_name = bound, name
        return bound

    lower = hold("matching")
    if len(packing) > lower:
        closing = closing_fit_decreasing(sizes, cap)
        if len(closing) < len(packing):
            packing = closing
    if len(packing) > lower and len(sizes) <= 4096:
        # Bins filled exactly, one at a time: on few-items-per-bin batches with little slack
        # (CHAMP x10 at 32,768) this reaches L where best fit and the exchange search miss,
        # and on a tie its waste sits in the last bins, which the search empties first.
        slack = minimum_bin_slack(sizes, cap)
        if len(slack) <= len(packing):
            packing = slack
    if len(packing) > lower:
        lower = hold(BOUND_NAMES[-1])
    if len(packing) > lower:
        packing = _close_gap(sizes, cap, packing, lower)
    if len(packing) > lower and len(sizes) <= _EXACT_GROUPS:
        # Few groups: an exhaustive search finds the optimum, or proves the bound too low.
        packing, proven = _exact_search(sizes, cap, packing, lower)
        if proven > lower:
            result.lower_bound, result.bound_name = proven, EXHAUSTIVE
            lower = proven
    if len(packing) > lower:
        # verl's own construction at every count it could stop at below ours: never more
        # micro-batches than verl's rule (see plan_micro_batches).
        found = _verl_candidates(result, lower, len(packing))
        if found is not None:
            packing = found
    most = None if result.rule is None else result.rule.max_groups
    if most is not None:  # no bin holds more than `most` groups: at least ceil(groups / most)
        packing, by_count = limit_samples(sizes, cap, most, packing)
        if by_count > lower:
            lower = result.lower_bound = by_count
            result.bound_name = SAMPLE_LIMIT
    if len(packing) < lower:
        packing = split_to_count(sizes, packing, lower)
    result.min_count = len(packing)
    result._packing = packing


def _fits(bins: list[list[int]], sizes: list[int], cap: int) -> bool:
    """Every bin within ``cap`` (the capped Karmarkar-Karp checks as it merges instead)."""
    return all(sum(sizes[i] for i in b) <= cap for b in bins)


#: Largest number of groups the exhaustive search (:func:`_exact_search`) is tried on.
_EXACT_GROUPS = 40

#: Items the exhaustive search may place per count tried before it gives up.
_EXACT_BUDGET = 50_000

#: ``bound_name`` of a lower bound proven by the exhaustive search.
EXHAUSTIVE = "exhaustive search"


def _exact_search(
    sizes: list[int], cap: int, packing: list[list[int]], lower: int
) -> tuple[list[list[int]], int]:
    """``(best packing, proven lower bound)``: counts from ``lower`` up to one below the
    packing's are searched exhaustively (:func:`~seqlen_balancing.packing.exact_packing`)
    within :data:`_EXACT_BUDGET` placed items per count; a count whose search is exhausted
    without a packing raises the bound above it, and the first count that runs out of
    budget ends the search."""
    for count in range(lower, len(packing)):
        found, impossible = exact_packing(sizes, cap, count, _EXACT_BUDGET)
        if found is not None:
            return found, lower
        if not impossible:
            break  # out of budget: nothing proven beyond what is known
        lower = count + 1
    return packing, lower


def _verl_candidates(result: RankAnalysis, lower: int, upper: int) -> list[list[int]] | None:
    """Karmarkar-Karp on the groups' workloads (verl 0.9.1's construction, identical
    partitions) at each count from ``lower`` up to ``upper - 1`` that verl's rule could stop
    at (the multiples of ``num_batches_divided_by``); the first that fits the cap, or
    ``None``. At most ``(upper - lower) / num_batches_divided_by + 1`` tries, each
    O(n log n + n count), and none where ``n * count`` exceeds :data:`_KK_BUDGET`."""
    step = result.num_batches_divided_by
    first = roundup_divisible(lower, step)
    for count in range(first, upper, step):
        kk = _fitting_kk(result, count)
        if kk is not None:
            return kk
    return None


def _fitting_kk(result: RankAnalysis, count: int) -> list[list[int]] | None:
    """verl's Karmarkar-Karp partition of the groups into ``count`` micro-batches if it
    keeps every micro-batch within the cap (and ``n * count <= _KK_BUDGET``), else ``None``."""
    sizes = result.group_sizes
    if len(sizes) * count > _KK_BUDGET or count > len(sizes):
        return None
    return _capped_largest_differencing(result.group_workloads, count, sizes, result.max_token_len)


def _close_gap(sizes: list[int], cap: int, packing: list[list[int]], lower: int) -> list[list[int]]:
    """The exchange local search towards ``lower``, on the items the Martello-Toth
    reduction leaves (:func:`~seqlen_balancing.bounds.dominant_bins`: bins some optimal
    packing contains, so nothing is lost), from the best of the given packing restricted
    to them and fresh packings of them; the reduction's bins are added back.
    """
    fixed, rest = dominant_bins(sizes, cap)
    if not fixed:
        return reduce_bins(sizes, cap, packing, target=lower)
    sub = [sizes[i] for i in rest]
    if not any(sub):
        if rest:
            fixed[0].extend(rest)  # zero-length groups fit anywhere
        return fixed
    remaining = set(rest)
    candidates = [
        best_fit_decreasing(sub, cap),
        closing_fit_decreasing(sub, cap),
        minimum_bin_slack(sub, cap) if len(sub) <= 4096 else [],
    ]
    position = {g: j for j, g in enumerate(rest)}
    restricted = [[position[g] for g in b if g in remaining] for b in packing]
    candidates.append([b for b in restricted if b])
    best = min((c for c in candidates if c), key=len)
    best = reduce_bins(sub, cap, best, target=max(1, lower - len(fixed)))
    if len(fixed) + len(best) > len(packing):  # never seen on CHAMP; kept as a safety net
        return reduce_bins(sizes, cap, packing, target=lower)
    return fixed + [[rest[j] for j in b] for b in best]
