"""Number partitioning on plain integer lists: Karmarkar-Karp, greedy, balanced partitions.

These functions split ``n`` items (sequence lengths in tokens, or workloads) into ``k``
partitions whose sums are as equal as possible. They know nothing about a token cap; the
cap-respecting packing lives in :mod:`seqlen_balancing.planning.packing`.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Hashable, Sequence
from functools import reduce
from typing import Any

from seqlen_balancing._checks import (
    as_list,
    integer,
    k_partitions_in_range,
    non_negative_ints,
    switch,
    whole_numbers,
)
from seqlen_balancing.planning.differencing import _largest_differencing, _rounding

__all__ = [
    "MAX_EMPTY_PARTITIONS",
    "WORKLOAD_LINEAR_COEF",
    "ceildiv",
    "get_group_balanced_partitions",
    "get_reverse_idx",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "karmarkar_karp",
    "log_seqlen_unbalance",
    "roundup_divisible",
    "workload",
]

#: Linear coefficient of verl's per-sequence cost model ``24576 * s + s**2``.
WORKLOAD_LINEAR_COEF = 24576

#: Most partitions :func:`~seqlen_balancing.greedy_partition` returns for fewer items (the
#: rest are empty, as in verl): ``k_partitions`` above both ``n`` and this is a
#: ``ValueError``, so no argument makes memory grow beyond the result a sane ``k`` needs
#: (~9 MB of empty lists at most).
MAX_EMPTY_PARTITIONS = 1 << 16


def workload(seq_len: int) -> int:
    """Cost of one sequence of ``seq_len`` tokens in verl's model: ``24576*s + s**2``.

    The linear term stands for the MLP/projection FLOPs, the square for attention.

    Args:
        seq_len: sequence length in tokens (>= 0).

    Returns:
        The workload (an exact Python int, no overflow).

    Example:
        >>> workload(1000)
        25576000
    """
    return WORKLOAD_LINEAR_COEF * seq_len + seq_len * seq_len


def ceildiv(a: int, b: int) -> int:
    """Ceiling of ``a / b`` for integers, as verl's ``ceildiv``.

    Raises:
        TypeError: ``a`` or ``b`` is not an integer (Python or NumPy int, or a one-element
            integer tensor).
        ValueError: ``b`` is 0.

    Example:
        >>> ceildiv(7, 2), ceildiv(8, 2)
        (4, 4)
    """
    a, b = integer(a, "ceildiv: a"), integer(b, "ceildiv: b")
    if b == 0:
        raise ValueError(f"ceildiv({a}, 0): the divisor must be non-zero")
    return -(a // -b)


def roundup_divisible(a: int, b: int) -> int:
    """Smallest multiple of ``b`` that is ``>= a``, as verl's ``roundup_divisible``.

    Raises:
        TypeError: ``a`` or ``b`` is not an integer.
        ValueError: ``b`` is below 1.

    Example:
        >>> roundup_divisible(5, 4), roundup_divisible(8, 4)
        (8, 8)
    """
    a, b = integer(a, "roundup_divisible: a"), integer(b, "roundup_divisible: b")
    if b < 1:
        raise ValueError(f"roundup_divisible({a}, {b}): the divisor must be >= 1")
    return ceildiv(a, b) * b


def get_reverse_idx(idx_map: Sequence[int] | Any) -> Any:
    """Inverse of a permutation: ``out[idx_map[i]] == i``, of the type given (verl's contract).

    Use it to put rows back in their original order after concatenating micro-batches:
    ``torch.cat(micro_batches)[get_reverse_idx(flat_indices)]``.

    Args:
        idx_map: a permutation of ``range(n)``: a list, a tuple, a 1-D tensor or a 1-D
            NumPy array.

    Returns:
        The inverse permutation as the same type: a list for a list, a tuple for a tuple,
        a tensor (same dtype and device) for a tensor, an array (same dtype) for an array.
        Other iterables give a list.

    Raises:
        TypeError: an element is not an integer.
        ValueError: ``idx_map`` is not a permutation of ``range(n)`` (a repeated, missing,
            negative or too large index).

    Complexity: O(n), one host copy for a tensor.

    References:
        verl 0.9.1 ``get_reverse_idx`` (writes into a deep copy of its input, hence the type).

    Example:
        >>> get_reverse_idx([2, 0, 1])
        [1, 2, 0]
        >>> import torch
        >>> get_reverse_idx(torch.tensor([2, 0, 1]))
        tensor([1, 2, 0])
    """
    reverse = _inverse_permutation(idx_map)
    if isinstance(idx_map, list):
        return reverse
    if isinstance(idx_map, tuple):
        return tuple(reverse)
    given: Any = idx_map
    module = type(given).__module__
    if module.startswith("torch"):
        import torch  # the module needs no torch; a tensor input means it is installed

        return torch.tensor(reverse, dtype=given.dtype, device=given.device)
    if module == "numpy":
        out = given.copy()  # same dtype, as verl's deep copy gives
        out[:] = reverse
        return out
    return reverse


def _inverse_permutation(idx_map: Any) -> list[int]:
    values = non_negative_ints(as_list(idx_map, "idx_map"), "idx_map", "indices")
    n = len(values)
    reverse = [-1] * n
    for position, index in enumerate(values):
        if index >= n:
            raise ValueError(
                f"idx_map is not a permutation of range({n}): idx_map[{position}] = {index}"
            )
        if reverse[index] != -1:
            raise ValueError(
                f"idx_map is not a permutation of range({n}): index {index} appears at "
                f"positions {reverse[index]} and {position}"
            )
        reverse[index] = position
    return reverse


#: Significant bits of the float types, by the name of the dtype (a tensor's without its
#: ``torch.`` prefix, an array's as NumPy names it).
_FLOAT_BITS = {"float64": 53, "double": 53, "float32": 24, "float": 24, "float16": 11,
               "half": 11, "bfloat16": 8}


def _float_bits(values: Any) -> int | None:
    """The precision verl sums ``values`` in: its items' float type (a tensor's or an
    array's dtype; a list's or tuple's items when all are floats of one type, such as
    Python floats, 53 bits), ``None`` for integers and mixed lists (see
    docs/differences.md). verl adds the items themselves, so the sums keep their type."""
    dtype = getattr(values, "dtype", None)
    if dtype is not None:
        return _FLOAT_BITS.get(str(dtype).removeprefix("torch."))
    if not isinstance(values, (list, tuple)) or not values:
        return None
    found = {53 if type(item) is float else _float_bits(item) for item in values}
    return found.pop() if len(found) == 1 else None


def _checked_items(
    seqlen_list: Any, k_partitions: Any, equal_size: Any,
    checked_k: Callable[[Any, int], int] = k_partitions_in_range,
) -> tuple[list[int], int, bool]:
    """The items, ``k`` (``checked_k`` of it and the item count) and ``equal_size``, checked."""
    equal = switch(equal_size, "equal_size")
    values = whole_numbers(seqlen_list, "seqlen_list")
    k = checked_k(k_partitions, len(values))
    if equal and len(values) % k != 0:
        raise ValueError(
            f"equal_size=True needs len(seqlen_list) divisible by k_partitions, got "
            f"{len(values)} items and k_partitions={k}; pass equal_size=False or pad the list"
        )
    return values, k, equal


def karmarkar_karp(
    seqlen_list: Sequence[int] | Any, k_partitions: int, equal_size: bool
) -> list[list[int]]:
    """Split item indices into ``k_partitions`` parts of near-equal sums (largest differencing).

    The k-way largest differencing method: every item starts as a state of one non-empty
    part; the two states with the largest spread (max part - min part) are merged by
    joining the largest part of one with the smallest part of the other, until one state is
    left. With ``equal_size`` the initial states are the sorted items in runs of ``k``, so
    every part ends with ``n / k`` items. Empty parts are kept implicit, so a merge costs
    O(non-empty parts) rather than O(k).

    Every tie is broken as verl 0.9.1 breaks it, so the output is verl's, index list for
    index list: of two states with equal spread, the one whose largest part is larger
    (by sum, then number of items, then index of its first item) merges first; the state
    popped first gives each joined part its leading items; parts of equal sum are ordered
    by item count, then first index. verl compares Python objects for this (seconds for
    4,096 items into 256 parts); here a part is one packed int (~0.02 s). Float items are
    summed as verl sums them, in their type (a float32 tensor's: float32, each sum and
    spread rounded, which matters once the total passes ``2**24``: verl's SFT workloads).

    Args:
        seqlen_list: ``n`` whole numbers >= 0 (tokens or workloads), one per item: a list,
            a tensor or a NumPy array, integer or float dtype (``5.0`` counts as 5).
        k_partitions: number of partitions, ``1 <= k_partitions <= n``.
        equal_size: if True, every partition gets exactly ``n / k_partitions`` items.

    Returns:
        ``k_partitions`` lists of item indices (each non-empty, together an exact cover of
        ``range(n)``), in the order of the final state (largest part first, as verl
        returns them); indices inside a partition are in merge order, not sorted.

    Raises:
        TypeError: an item is not a number, ``k_partitions`` is not an integer, or
            ``equal_size`` is not a bool (or 0/1).
        ValueError: an item is negative or not whole, ``k_partitions`` is outside ``1..n``, or
            ``equal_size`` is True and ``n`` is not divisible by ``k_partitions``.

    Complexity: O(n log n + n k) time in the worst case, O(n + k) memory for the states.

    References:
        N. Karmarkar and R. M. Karp, "The differencing method of set partitioning", 1982.
        R. E. Korf, "A complete anytime algorithm for number partitioning", 1998.
        verl 0.9.1 ``karmarkar_karp`` (its tie-breaks and output order, mirrored).

    Example:
        >>> karmarkar_karp([11, 10, 6, 3, 5, 10, 16, 6], 3, equal_size=False)
        [[3, 1, 5], [4, 0, 7], [2, 6]]
        >>> sorted(sorted(p) for p in karmarkar_karp([8, 7, 6, 5, 4], 2, equal_size=False))
        [[0, 2], [1, 3, 4]]
    """
    values, k, equal = _checked_items(seqlen_list, k_partitions, equal_size)
    return _largest_differencing(values, k, equal, _float_bits(seqlen_list))


def greedy_partition(
    seqlen_list: Sequence[int] | Any, k_partitions: int, equal_size: bool
) -> list[list[int]]:
    """verl's in-order greedy: each item, in input order, goes to the lightest partition.

    Items are taken in the order given (not sorted); each joins the partition with the
    smallest current sum, the lowest partition index on a tie. With ``equal_size`` every
    item counts ``sum(seqlen_list) + 1`` more than its value (verl's bias), so the item
    count of a partition outweighs its sum and the partitions take turns: every one ends
    with ``n / k`` items. The output is identical to verl 0.9.1's on every input it
    accepts, including ``k_partitions > n`` (the extra partitions are empty), and float
    items' sums and bias are rounded in their type, as verl's are.

    Args:
        seqlen_list: ``n >= 0`` whole numbers >= 0 (tokens or workloads): a list, a
            tensor or a NumPy array, integer or float dtype.
        k_partitions: number of partitions, ``>= 1``.
        equal_size: if True, every partition gets ``n / k_partitions`` items.

    Returns:
        ``k_partitions`` lists of item indices, an exact cover of ``range(n)``, each in
        input order.

    Raises:
        TypeError: an item or ``k_partitions`` is not a number, or ``equal_size`` is not a
            bool (or 0/1).
        ValueError: an item is negative or not whole, ``k_partitions < 1``, ``k_partitions``
            above both ``n`` and :data:`~seqlen_balancing.planning.partition.MAX_EMPTY_PARTITIONS`
            (65,536: refused before anything is allocated), or ``equal_size`` is True and
            ``n`` is not divisible by ``k_partitions``.

    Complexity: O(n log k).

    References:
        verl 0.9.1 ``greedy_partition`` (the rule and its ``equal_size`` bias);
        R. L. Graham, "Bounds on certain multiprocessing anomalies", 1966 (list scheduling).

    Example:
        >>> greedy_partition([5, 1, 4, 2], 2, equal_size=True)
        [[0, 3], [1, 2]]
        >>> greedy_partition([5, 1, 4, 2, 3], 2, equal_size=False)
        [[0, 3], [1, 2, 4]]
    """
    values, k, equal = _checked_items(seqlen_list, k_partitions, equal_size, _greedy_k)
    bits = _float_bits(seqlen_list)
    # verl adds float items in their type: every sum rounded to its precision
    rounded = (lambda value: value) if bits is None else _rounding(bits)
    # verl's sum(seqlen_list) + 1, one item at a time
    bias = rounded(reduce(lambda total, value: rounded(total + value), values, 0) + 1) if equal else 0
    parts: list[list[int]] = [[] for _ in range(k)]
    heap = [(0, p) for p in range(k)]  # (sum, partition): the lowest index wins a tie
    for i, value in enumerate(values):
        total, p = heap[0]
        parts[p].append(i)
        heapq.heapreplace(heap, (rounded(total + rounded(value + bias)), p))
    return parts


def _greedy_k(k_partitions: Any, n: int) -> int:
    """:func:`greedy_partition`'s ``k``: at least 1, and at most ``n`` or
    :data:`MAX_EMPTY_PARTITIONS`."""
    k = integer(k_partitions, "k_partitions")
    if k < 1:
        raise ValueError(f"k_partitions must be >= 1, got {k}")
    if k > max(n, MAX_EMPTY_PARTITIONS):
        raise ValueError(
            f"k_partitions={k} is above both the {n} items and "
            f"{MAX_EMPTY_PARTITIONS} (the most partitions returned for fewer items, the rest "
            "empty); pass at most max(len(seqlen_list), 65536) partitions"
        )
    return k


def get_seqlen_balanced_partitions(
    seqlen_list: Sequence[int] | Any,
    k_partitions: int,
    equal_size: bool,
    *,
    workloads: Sequence[int] | Any = None,
) -> list[list[int]]:
    """Balanced partition of item indices, each part non-empty and sorted (verl's contract).

    Runs :func:`karmarkar_karp` and sorts the indices inside every partition, as verl does.
    Used to split a global batch across DP ranks (``equal_size=True``) or a rank's batch
    into micro-batches by workload.

    Args:
        seqlen_list: ``n`` whole numbers >= 0 (tokens or workloads), one per item: a list,
            a tensor or a NumPy array, integer or float dtype (``5.0`` counts as 5).
        k_partitions: number of partitions, ``1 <= k_partitions <= n``.
        equal_size: if True, every partition holds exactly ``n / k_partitions`` items.
        workloads: keyword-only. One whole number >= 0 per item to balance on instead of
            ``seqlen_list`` (e.g. :func:`~seqlen_balancing.cost.transformer_workloads` of
            the lengths: a global batch split across DP ranks on the caller's cost model).
            ``seqlen_list`` is still checked. Default ``None``: balance on ``seqlen_list``.

    Returns:
        ``k_partitions`` non-empty, disjoint lists of indices, each sorted ascending,
        together covering ``range(n)``.

    Raises:
        TypeError: an item is not a number, ``k_partitions`` is not an integer, or
            ``equal_size`` is not a bool (or 0/1).
        ValueError: empty list, ``k_partitions`` outside ``1..n``, a negative or non-whole
            item, ``equal_size`` with ``n`` not divisible by ``k_partitions``, or
            ``workloads`` not one per item.

    Complexity: O(n log n + n k).

    References:
        verl 0.9.1 ``get_seqlen_balanced_partitions``: the same method, contract and
        tie-breaks, so the same index lists (``k_partitions > n`` is a ``ValueError`` here,
        an ``AssertionError`` there).

    Example:
        >>> get_seqlen_balanced_partitions([3, 1, 2, 2], 2, equal_size=True)
        [[2, 3], [0, 1]]
        >>> get_seqlen_balanced_partitions([3, 1, 2, 2], 2, equal_size=True, workloads=[9, 1, 4, 4])
        [[0, 1], [2, 3]]
    """
    items, k, equal = _checked_items(seqlen_list, k_partitions, equal_size)
    # balanced as karmarkar_karp(workloads) would be: float ones summed in their type
    given = seqlen_list if workloads is None else workloads
    weights = items if workloads is None else whole_numbers(workloads, "workloads")
    if len(weights) != len(items):
        raise ValueError(
            f"workloads has {len(weights)} entries but seqlen_list has {len(items)}; give one "
            "workload per item"
        )
    return [sorted(part) for part in _largest_differencing(weights, k, equal, _float_bits(given))]


def get_group_balanced_partitions(
    seqlen_list: Sequence[int] | Any, uid_list: Sequence[Hashable] | Any, k_partitions: int
) -> list[list[int]]:
    """Equal-size partitions balanced on workload that keep every uid group whole.

    verl's trainer reorders the batch by these partitions and cuts it into ``k``
    contiguous chunks of ``n / k`` samples, one per DP rank, so every partition holds
    exactly ``n / k`` samples. A group is the set of all indices that share one uid,
    wherever they stand (rows of one prompt are usually contiguous; a repeat further on
    joins the same group). Groups are balanced on their workload, the sum of
    ``24576*s + s**2`` over their samples, as verl does:

    - every group the same size (GRPO: ``rollout.n`` responses per prompt): equal-size
      Karmarkar-Karp over the group workloads, ``groups / k`` groups per partition;
    - sizes differ: the heaviest group first into the lightest partition with room left,
      or, where that gets stuck, an exact-fill search over the group sizes;

    then groups of equal size are swapped between the heaviest and the lightest
    partition while that narrows the gap (the spread never grows).

    Args:
        seqlen_list: ``n`` whole numbers >= 0 (tokens), one per sample: a list, a tensor or
            a NumPy array, integer or float dtype.
        uid_list: ``n`` hashable group ids, one per sample.
        k_partitions: number of partitions (DP ranks), ``1 <= k_partitions <= groups``.

    Returns:
        ``k_partitions`` lists of sample indices, each sorted ascending and ``n / k`` long;
        every group lies inside one partition.

    Raises:
        TypeError: a length or ``k_partitions`` is not a number, or a uid is unhashable.
        ValueError: ``uid_list`` and ``seqlen_list`` differ in length, a length is negative
            or not whole, ``k_partitions`` is outside ``1..number of groups``, or the groups
            cannot be dealt into ``k`` partitions of ``n / k`` samples.

    Complexity: O(n + g log g + g k) for ``g`` groups of one size; the exact-fill search
    for mixed sizes is bounded (``ValueError`` when it gives up).

    References:
        verl 0.9.1 ``get_group_balanced_partitions`` (workload, equal-size Karmarkar-Karp
        over groups); N. Karmarkar and R. M. Karp, 1982.

    Example:
        >>> get_group_balanced_partitions([4, 4, 1, 1, 3, 3, 2, 2], list("aabbccdd"), 2)
        [[0, 1, 2, 3], [4, 5, 6, 7]]
    """
    values = whole_numbers(seqlen_list, "seqlen_list")
    uids = as_list(uid_list, "uid_list")
    if len(uids) != len(values):
        raise ValueError(
            f"uid_list has {len(uids)} entries but seqlen_list has {len(values)}; "
            "pass one uid per sample"
        )
    group_of: dict[Hashable, int] = {}
    members: list[list[int]] = []
    for index, uid in enumerate(uids):
        try:
            group = group_of.setdefault(uid, len(members))
        except TypeError as exc:
            raise TypeError(f"uid_list[{index}] is not hashable: {exc}") from None
        if group == len(members):
            members.append([])
        members[group].append(index)
    k = k_partitions_in_range(k_partitions, len(members), what="uid groups")
    sizes = [len(group) for group in members]
    loads = [sum(workload(values[i]) for i in group) for group in members]
    return [sorted(i for g in part for i in members[g]) for part in _deal_groups(sizes, loads, k)]


def _deal_groups(sizes: list[int], loads: list[int], k: int) -> list[list[int]]:
    """Groups into ``k`` partitions of ``sum(sizes) / k`` samples each, balanced on load."""
    n, g = sum(sizes), len(sizes)
    per = n // k
    if n % k or max(sizes) > per:
        raise _undealable(sizes, k, f"{n} samples do not split into {k} partitions"
                          if n % k else f"a group of {max(sizes)} samples exceeds {per}")
    if min(sizes) == max(sizes):
        # One size: the same number of groups per partition, equal-size Karmarkar-Karp.
        if g % k:
            raise _undealable(sizes, k, f"{g} groups of {sizes[0]} do not split into {k} equal counts")
        return _swap_equal_sizes(_largest_differencing(loads, k, equal_size=True), sizes, loads)
    parts = _lpt_with_room(sizes, loads, k, per) or _exact_fill(sizes, k, per)
    if parts is None:
        raise _undealable(sizes, k, "no way to fill every partition exactly was found")
    return _swap_equal_sizes(parts, sizes, loads)


def _undealable(sizes: list[int], k: int, why: str) -> ValueError:
    shown = sizes if len(sizes) <= 12 else [*sizes[:12], "..."]
    return ValueError(
        f"the uid groups cannot be dealt into {k} partitions of equal size ({why}; group "
        f"sizes {shown}); verl's trainer cuts the batch into {k} equal chunks, so make the "
        f"number of samples per partition reachable (e.g. the same rollout.n for every uid)"
    )


def _lpt_with_room(sizes: list[int], loads: list[int], k: int, per: int) -> list[list[int]] | None:
    """Heaviest group first into the lightest partition with room; ``None`` if stuck."""
    parts: list[list[int]] = [[] for _ in range(k)]
    room, total = [per] * k, [0] * k
    for group in sorted(range(len(sizes)), key=lambda x: (-sizes[x], -loads[x], x)):
        fits = [p for p in range(k) if room[p] >= sizes[group]]
        if not fits:
            return None
        p = min(fits, key=lambda q: (total[q], q))
        parts[p].append(group)
        room[p] -= sizes[group]
        total[p] += loads[group]
    return parts


def _exact_fill(sizes: list[int], k: int, per: int, budget: int = 200_000) -> list[list[int]] | None:
    """Depth-first search for ``k`` partitions of exactly ``per`` samples (largest group
    first; partitions with the same room left are tried once). ``None`` if none is found
    within ``budget`` steps, or for more than 500 groups (where the room-aware LPT that
    runs first has not found one either)."""
    if len(sizes) > 500:  # the search recurses once per group; beyond this, give up
        return None
    order = sorted(range(len(sizes)), key=lambda x: -sizes[x])
    room = [per] * k
    placed: list[int] = [0] * len(order)
    steps = 0

    def place(position: int) -> bool:
        nonlocal steps
        if position == len(order):
            return True
        size, tried = sizes[order[position]], set()
        for p in range(k):
            steps += 1
            if steps > budget:
                return False
            if room[p] < size or room[p] in tried:
                continue
            tried.add(room[p])
            room[p] -= size
            placed[position] = p
            if place(position + 1):
                return True
            room[p] += size
        return False

    if not place(0):
        return None
    return [[group for group, p in zip(order, placed, strict=True) if p == q] for q in range(k)]


def _swap_equal_sizes(parts: list[list[int]], sizes: list[int], loads: list[int]) -> list[list[int]]:
    """Swap groups of one size between the heaviest and the lightest partition while the
    gap narrows: each swap moves less than the gap, so the spread never grows.
    At most ``8 k`` swaps of O(m log m) each for ``m`` groups per partition."""
    totals = [sum(loads[x] for x in part) for part in parts]
    ids = range(len(parts))
    for _ in range(8 * len(parts)):
        heavy = max(ids, key=lambda p: (totals[p], -p))
        light = min(ids, key=lambda p: (totals[p], p))
        gap = totals[heavy] - totals[light]
        if gap <= 0:
            break
        by_size: dict[int, list[tuple[int, int]]] = {}  # each list ascending
        for x in sorted(parts[light], key=lambda x: (loads[x], x)):
            by_size.setdefault(sizes[x], []).append((loads[x], x))
        best: tuple[int, int, int] | None = None  # (distance from gap / 2, a, b)
        for a in parts[heavy]:
            candidates = by_size.get(sizes[a], [])
            # Moving d = loads[a] - loads[b] narrows the gap when 0 < d < gap; d = gap / 2 is best.
            spot = bisect_left(candidates, ((2 * loads[a] - gap) // 2, -1))
            for load_b, b in candidates[max(spot - 1, 0) : spot + 2]:
                d = loads[a] - load_b
                if 0 < d < gap:
                    score = abs(2 * d - gap)
                    if best is None or (score, a, b) < best:
                        best = (score, a, b)
        if best is None:
            break
        _, a, b = best
        parts[heavy][parts[heavy].index(a)] = b
        parts[light][parts[light].index(b)] = a
        totals[heavy] -= loads[a] - loads[b]
        totals[light] += loads[a] - loads[b]
    return parts


def log_seqlen_unbalance(
    seqlen_list: Sequence[int] | Any, partitions: Sequence[Sequence[int]], prefix: str
) -> dict[str, float]:
    """Balance metrics of ``partitions`` against contiguous, equal-count chunks (verl's keys).

    The "unbalanced" baseline cuts ``seqlen_list`` into ``len(partitions)`` contiguous chunks
    of ``n // k`` items (as the data arrived); the "balanced" figures are the partition sums.

    Args:
        seqlen_list: ``n`` whole numbers >= 0 (tokens), one per item (list, tensor or NumPy
            array, integer or float dtype).
        partitions: ``k >= 1`` lists of indices into ``seqlen_list``.
        prefix: key prefix, e.g. ``"global_seqlen"``.

    Returns:
        ``{prefix}/min``, ``/max``, ``/minmax_diff`` (contiguous chunks, in tokens),
        ``/balanced_min``, ``/balanced_max`` (partition sums, in tokens) and ``/mean``
        (total tokens / k).

    Raises:
        ValueError: no partitions, fewer items than partitions, a negative or non-whole
            length, or an index outside ``range(n)``.

    Complexity: O(n).

    Example:
        >>> log_seqlen_unbalance([1, 2, 3, 4], [[0, 3], [1, 2]], "s")["s/minmax_diff"]
        4
    """
    values = whole_numbers(seqlen_list, "seqlen_list")
    k = len(partitions)
    if k == 0 or len(values) < k:
        raise ValueError(
            f"need at least one partition and no more partitions than items, got "
            f"{k} partitions for {len(values)} items"
        )
    chunk = len(values) // k
    chunk_sums = [sum(values[start : start + chunk]) for start in range(0, len(values), chunk)]
    outside = [index for part in partitions for index in part if not 0 <= index < len(values)]
    if outside:
        raise ValueError(f"partition index {outside[0]} is outside range({len(values)})")
    balanced = [sum(values[index] for index in part) for part in partitions]
    return {
        f"{prefix}/min": min(chunk_sums),
        f"{prefix}/max": max(chunk_sums),
        f"{prefix}/minmax_diff": max(chunk_sums) - min(chunk_sums),
        f"{prefix}/balanced_min": min(balanced),
        f"{prefix}/balanced_max": max(balanced),
        f"{prefix}/mean": sum(chunk_sums) / k,
    }
