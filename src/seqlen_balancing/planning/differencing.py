"""Karmarkar-Karp's largest differencing method on packed parts (no torch).

The k-way differencing method verl 0.9.1 uses, made choice for choice as verl makes it
(:func:`_differencing`), with an optional token cap that stops it as soon as a part is
over (:func:`_capped_largest_differencing`). A part is one packed int, so that parts
sort and compare in C; a state is a sorted list of its non-empty parts. The public
``karmarkar_karp`` and the balanced partitions of :mod:`seqlen_balancing.planning.partition`, and
the planner's verl candidate (:mod:`seqlen_balancing.planning.search`), call it.

Where the package was built with a C compiler, :func:`_differencing` runs the compiled twin
of :func:`_differencing_python` (``_c_differencing.c``: the same choices, the same
partitions, 9-20x faster) on ints from 0 below ``2**62`` (:mod:`seqlen_balancing.native`).
"""

from __future__ import annotations

import heapq
import math
from bisect import insort
from collections.abc import Callable, Sequence
from typing import NamedTuple

from seqlen_balancing.native import Twinned

__all__: list[str] = []


def _layout(n: int, cap: int | None) -> tuple[int, int]:
    """``(bits, token_bits)`` of the packed parts of ``n`` items: a part is one int,
    ``sum << 3b+t | items << 2b+t | first item << b+t | node << t | tokens`` (``b = bits``,
    ``t = token_bits``; no token field without a ``cap``). Ints sort and compare much
    faster than tuples, and their order is the order of parts that decides every tie (sum,
    then number of items, then the index of the part's first item; a part's node is unique,
    so two parts are never equal and the tokens never decide). A node below ``n`` is an
    item; a union's node ``u`` holds its items, in merge order, in ``lists[u - n]`` (a
    union keeps the node of the part that leads it, so its list grows in place)."""
    bits = max(2 * n, 1).bit_length()  # nodes (items and unions) number below 2n
    # Tokens are checked after every join, so a part holds at most 2 * cap of them.
    token_bits = 0 if cap is None else (2 * cap + 1).bit_length()
    return bits, token_bits


def _rounding(bits: int) -> Callable[[int], int]:
    """What a float type of ``bits`` significant bits keeps of a whole number >= 0: the
    nearest multiple of its spacing there, a tie to the even one (IEEE round to nearest).
    Sums of whole floats are whole floats, so verl's float sums are these ints."""

    def rounded(value: int) -> int:
        dropped = value.bit_length() - bits
        if dropped <= 0:
            return value
        kept, rest = value >> dropped, value & ((1 << dropped) - 1)
        half = 1 << (dropped - 1)
        return (kept + (rest > half or (rest == half and kept & 1))) << dropped

    return rounded


class _OverCap(Exception):
    """A joined part holds more tokens than the cap (Karmarkar-Karp stops there)."""


def _merge_states(first: list[int], second: list[int], lists: list[list[int]], layout: _Layout) -> list[int]:
    """Join two states (parts sorted ascending; missing parts are empty and smallest).

    Conceptually both states are padded with empty parts to ``k`` and the i-th largest part
    of ``first`` is joined with the i-th smallest of ``second``: the union keeps ``first``'s
    items ahead (so its first item leads). Only the ``a + b - k`` smallest real parts of
    each state meet a real part; the others meet an empty one and are kept as they are.
    With a token field, a union above ``cap`` tokens raises :class:`_OverCap`.
    """
    k, n, token_bits, cap = layout.k, layout.n, layout.token_bits, layout.cap
    overlap = len(first) + len(second) - k
    small, large = (first, second) if len(first) <= len(second) else (second, first)
    if overlap <= 0:
        if len(small) <= 8:
            # The large state is not used again: grow it in place, O(log k) per part.
            for part in small:
                insort(large, part)
            return large
        merged = first + second
    else:
        tokens, nodes, kept = layout.masks
        node_mask = nodes >> token_bits
        merged = []
        for a, b in zip(first[:overlap], second[overlap - 1 :: -1], strict=True):
            # a leads: the union keeps its first item and node, and its list (an item has
            # none) takes b's items, so a join costs b's items only
            node, other = a >> token_bits & node_mask, b >> token_bits & node_mask
            items = lists[other - n] if other >= n else [other]
            union = a + (b & kept)
            if layout.rounded is not None:
                union = layout.folded(union, a, items)
            if node >= n:
                lists[node - n] += items
                merged.append(union)
            else:
                lists.append([node, *items])
                merged.append(union - (a & nodes) + ((n + len(lists) - 1) << token_bits))
            if other >= n:
                items.clear()  # b's list is used up: each item is held once
        if token_bits and max(part & tokens for part in merged) > cap:
            raise _OverCap
        if len(small) <= 8:
            # A few parts joined into a long state (a state of k parts meeting a new item,
            # most merges): drop its joined parts and insert the few new ones in place,
            # O(k) moves in C instead of a copy and a sort per merge.
            rest = small[overlap:]
            del large[:overlap]
            for part in rest:
                insort(large, part)
            for part in merged:
                insort(large, part)
            return large
        merged += first[overlap:]
        merged += second[overlap:]
    merged.sort()
    return merged


def _largest_differencing(
    values: list[int], k: int, equal_size: bool, float_bits: int | None = None
) -> list[list[int]]:
    """Karmarkar-Karp for ``k`` partitions; ``values`` already checked (see
    :func:`_differencing`). ``float_bits``: the items were floats of that precision,
    whose sums verl keeps in their type, rounding past ``2**float_bits``; ``None``: ints."""
    if float_bits is not None and sum(values) > 1 << float_bits:
        parts = _differencing(values, k, equal_size, None, 0, float_bits=float_bits)
    else:  # every sum and spread is exact below 2**float_bits: verl's float sums are ints
        parts = _differencing(values, k, equal_size, None, 0)
    return [] if parts is None else parts  # None only comes with a cap


def _capped_largest_differencing(
    values: list[int], k: int, sizes: list[int], cap: int
) -> list[list[int]] | None:
    """Karmarkar-Karp for ``k`` partitions of ``values``, or ``None`` as soon as a part
    holds more than ``cap`` of ``sizes`` (each item's tokens, at most ``cap``)."""
    return _differencing(values, k, False, sizes, cap)


def _differencing_python(
    values: list[int], k: int, equal_size: bool, sizes: list[int] | None, cap: int,
    float_bits: int | None = None,
) -> list[list[int]] | None:
    """Karmarkar-Karp for ``k`` partitions; ``values`` already checked.

    Every choice is made as verl 0.9.1 makes it, so the partitions are verl's, index list
    for index list: the state with the largest spread merges first (ties: the larger
    largest part, compared by sum, then item count, then first item index), the popped
    state's i-th largest part takes the other's i-th smallest, and the final parts come
    largest first, each listing its items in merge order.

    With ``sizes`` (tokens per item, each at most ``cap``): ``None`` as soon as a part
    holds more than ``cap`` tokens (parts only grow, so the final partition would too).

    With ``float_bits`` the sums are kept as verl keeps them for float items (a float32
    tensor: 24): a part adds the items it takes one at a time, in their order, each sum
    rounded to that precision, and a spread is rounded too (:func:`_rounding`).
    """
    n = len(values)
    bits, token_bits = _layout(n, None if sizes is None else cap)
    shift = bits + token_bits
    sum_shift = 3 * bits + token_bits
    one = 1 << (2 * bits + token_bits)  # one item in the count field
    given = sizes if sizes is not None else [0] * n
    leaves = [
        value << sum_shift | one | i << shift | i << token_bits | tokens
        for i, (value, tokens) in enumerate(zip(values, given, strict=True))
    ]
    # A state is a list of parts sorted ascending. Parts that hold no item are left out
    # (implicit empties, the smallest parts), so growing a state by a few items costs
    # O(log k), not O(k). Nodes below n are items; the others are unions, whose items
    # are ``lists[node - n]`` in merge order.
    lists: list[list[int]] = []
    total = sum(values)
    rounded = None if float_bits is None else _rounding(float_bits)
    if float_bits is not None:  # a rounded sum exceeds the exact one by < 2**-bits per addition
        total <<= (n >> (float_bits - 1)) + 2
    merging = _Layout(k, n, bits, token_bits, cap, total, rounded, values)
    heap: list[tuple[float, list[int]]] = []
    singles: list[int] = []
    if equal_size:
        ascending = sorted(range(n), key=lambda i: (values[i], i))
        for start in range(0, n, k):
            p = sorted(leaves[i] for i in ascending[start : start + k])
            heap.append((merging.key(p), p))
        heapq.heapify(heap)
    else:
        # the states of one item merge in falling order of their parts (their keys rise):
        # they wait in that order, out of the heap
        singles = sorted(leaves, reverse=True)
    try:
        final = _merge_all(singles, heap, merging, lists)
    except _OverCap:
        return None
    node_mask = (1 << bits) - 1
    nodes = (part >> token_bits & node_mask for part in reversed(final))
    parts = [lists[node - n] if node >= n else [node] for node in nodes]
    return parts + [[] for _ in range(k - len(parts))]


class _Layout(NamedTuple):
    """The packed parts' fields (:func:`_layout`) and the order states merge in.

    A state's key is one int: ``spread << width`` plus ``limit`` less its largest part,
    ``spread`` its smallest part's sum less its largest's (an empty part counting 0), so
    that the smallest key has the largest spread and, among equal spreads, the larger
    largest part (compared by sum, then item count, then first item index). Keys are
    unique (two states never share an item)."""

    k: int
    n: int
    bits: int
    token_bits: int
    cap: int
    total: int  # at least the largest sum
    rounded: Callable[[int], int] | None = None  # float sums: what the float type keeps
    values: Sequence[int] = ()  # the items' values (read where sums are rounded)

    @property
    def sum_shift(self) -> int:
        return 3 * self.bits + self.token_bits

    @property
    def width(self) -> int:
        """Bits of the largest part there can be, and one more."""
        return (self.total + 1).bit_length() + self.sum_shift + 1

    @property
    def masks(self) -> tuple[int, int, int]:
        """``(tokens, nodes, kept)``: the token field; the node field; and what a union
        takes of the part joined to the one that leads (sum, count and tokens: the fields
        that add without a carry), so that a union is ``a - (a & nodes) + (b & kept)``
        plus its node."""
        tokens = (1 << self.token_bits) - 1
        nodes = ((1 << self.bits) - 1) << self.token_bits
        return tokens, nodes, ~(((1 << self.bits) - 1) << (self.bits + self.token_bits) | nodes)

    def key(self, state: list[int]) -> int:
        shift = self.sum_shift
        spread = (state[-1] >> shift) - (state[0] >> shift if len(state) == self.k else 0)
        if self.rounded is not None:
            spread = self.rounded(spread)  # verl's float difference
        return (-spread << self.width) + (1 << self.width) - 1 - state[-1]

    def folded(self, union: int, lead: int, items: list[int]) -> int:
        """``union`` of ``lead`` and a part of ``items`` with its sum as verl's float sum
        makes it: ``lead``'s sum plus each item in turn, each sum rounded."""
        rounded, total = self.rounded, lead >> self.sum_shift
        for item in items:
            total = total + self.values[item] if rounded is None else rounded(total + self.values[item])
        low = (1 << self.sum_shift) - 1
        return (union & low) | total << self.sum_shift


def _merge_all(
    singles: list[int], heap: list[tuple[float, list[int]]], layout: _Layout,
    lists: list[list[int]],
) -> list[int]:
    """The one state left after merging the states two at a time, the smallest keys
    first (:class:`_Layout`): the states of one item, whose parts ``singles`` lists in
    their pop order (falling), and the states of ``heap``, keyed.

    The items wait in their list, not in the heap, and the state just merged is held
    out of the heap: most merges join it with the next item, so that costs no push or
    pop; where two others come first, it goes into the heap. An item meeting a state of
    fewer than ``k`` parts becomes a part of its own here, in place; a run of items into
    the full held state is :func:`_run`'s; the other merges are :func:`_merge_states`'.
    """
    pop, push = heapq.heappop, heapq.heappush
    k, sum_shift, width = layout.k, layout.sum_shift, layout.width
    limit = (1 << width) - 1
    none = math.inf  # the key of no state
    # the items' keys, in their order, and none after the last
    if k == 1:  # a state of one item fills every part: a spread of 0
        waiting: list[float] = [limit - part for part in singles]
    else:
        waiting = [(-(part >> sum_shift) << width) + limit - part for part in singles]
    waiting.append(none)
    j, m = 0, len(singles)
    # the next item's key, and the state merged last (the first: the smallest key of all)
    ahead = waiting[j]
    key: float
    other_key: float
    if heap and heap[0][0] < ahead:
        key, state = pop(heap)
    else:
        key, state, j = ahead, [singles[j]], j + 1
    while j < m or heap:
        if len(state) == k and key < waiting[j] < (heap[0][0] if heap else none):
            j, key = _run(state, singles, waiting, j, heap[0][0] if heap else none, lists, layout)
            continue
        # other: the smaller of the next item and the heap's top
        ahead = waiting[j]
        if heap and heap[0][0] < ahead:
            other_key, other = pop(heap)
        else:
            other_key, other, j = ahead, [singles[j]], j + 1
        if key < other_key:
            first, second = state, other
        else:
            # second: the held state, unless the next item or the heap's top comes first
            first, second = other, state
            ahead = waiting[j]
            top = heap[0][0] if heap else none
            if ahead < key and ahead < top:
                second, j = [singles[j]], j + 1
            elif top < key:
                second = pop(heap)[1]
            if second is not state:
                push(heap, (key, state))  # two others merge first; this one waits
        size = len(first) + len(second)
        if size <= k and (len(first) == 1 or len(second) == 1):
            state = second if len(first) == 1 else first  # a new part of its own
            insort(state, (first if len(first) == 1 else second)[0])
        else:
            state = _merge_states(first, second, lists, layout)
        if layout.rounded is not None:
            key = layout.key(state)
            continue
        low = state[0] >> sum_shift if len(state) == k else 0  # layout.key, inlined
        key = (low - (state[-1] >> sum_shift) << width) + limit - state[-1]
    return state


def _run(
    state: list[int], singles: list[int], waiting: list[float], j: int, bound: float,
    lists: list[list[int]], layout: _Layout,
) -> tuple[int, int]:
    """:func:`_merge_all`'s commonest stretch: items ``singles[j:]`` into the full held
    ``state``, each into its smallest part (the held state merges first, the item second:
    the part leads), while the held state keeps the smallest key and the next item the
    second smallest (below ``bound``, the heap's top). ``(next j, the state's key)``."""
    n, token_bits, cap = layout.n, layout.token_bits, layout.cap
    sum_shift, width = layout.sum_shift, layout.width
    limit = (1 << width) - 1
    tokens, nodes, kept = layout.masks
    node_mask = (1 << layout.bits) - 1
    while True:
        a, b = state[0], singles[j]
        j += 1
        node = a >> token_bits & node_mask  # (as _merge_states joins, b one item)
        if node >= n:
            lists[node - n].append(b >> token_bits & node_mask)
            joined = a + (b & kept)
        else:
            lists.append([node, b >> token_bits & node_mask])
            joined = a - (a & nodes) + (b & kept) + ((n + len(lists) - 1) << token_bits)
        if token_bits and joined & tokens > cap:
            raise _OverCap
        if layout.rounded is not None:  # b is one item: its value is its sum
            joined = layout.folded(joined, a, [b >> token_bits & node_mask])
        del state[0]
        insort(state, joined)
        if layout.rounded is not None:
            key = layout.key(state)
        else:  # (layout.key, inlined: the state is full here, and this is the hot loop)
            key = ((state[0] >> sum_shift) - (state[-1] >> sum_shift) << width) + limit - state[-1]
        if not key < waiting[j] < bound:
            return j, key


#: :func:`_differencing_python`'s partitions, from its compiled twin where it is in use and
#: takes the input (``_c_differencing.c``; :class:`~seqlen_balancing.native.Twinned`).
_differencing = Twinned(_differencing_python, "_c_differencing", "differencing")
