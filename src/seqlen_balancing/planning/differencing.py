"""Karmarkar-Karp's largest differencing method on packed parts (no torch).

The k-way differencing method verl 0.9.1 uses, made choice for choice as verl makes it
(:func:`_differencing`), with an optional token cap that stops it as soon as a part is
over (:func:`_capped_largest_differencing`). A part is one packed int, so that parts
sort and compare in C; a state is a sorted list of its non-empty parts. The public
``karmarkar_karp`` and the balanced partitions of :mod:`seqlen_balancing.planning.partition`, and
the planner's verl candidate (:mod:`seqlen_balancing.planning.search`), call it.

Where the package was built with a C compiler, :func:`_differencing` runs the compiled twin
of :func:`_differencing_python` (``_c_differencing.c``: the same choices, the same
partitions, 40-140x faster) on ints from 0 below ``2**62`` (:mod:`seqlen_balancing.native`).
"""

from __future__ import annotations

import heapq
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
    n, token_bits = layout.n, layout.token_bits
    overlap = len(first) + len(second) - layout.k
    merged = []
    if overlap > 0:
        tokens, nodes, kept = layout.masks
        node_mask = nodes >> token_bits
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
        if token_bits and max(part & tokens for part in merged) > layout.cap:
            raise _OverCap
    merged += first[max(overlap, 0) :]
    merged += second[max(overlap, 0) :]
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
    # (implicit empties, the smallest parts). Nodes below n are items; the others are
    # unions, whose items are ``lists[node - n]`` in merge order.
    lists: list[list[int]] = []
    total = sum(values)
    rounded = None if float_bits is None else _rounding(float_bits)
    if float_bits is not None:  # a rounded sum exceeds the exact one by < 2**-bits per addition
        total <<= (n >> (float_bits - 1)) + 2
    merging = _Layout(k, n, bits, token_bits, cap, total, rounded, values)
    if equal_size:
        ascending = sorted(range(n), key=lambda i: (values[i], i))
        states = [sorted(leaves[i] for i in ascending[start : start + k]) for start in range(0, n, k)]
    else:
        states = [[leaf] for leaf in leaves]
    try:
        final = _merge_all([(merging.key(state), state) for state in states], merging, lists)
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
        return (union & ((1 << self.sum_shift) - 1)) | total << self.sum_shift


def _merge_all(heap: list[tuple[int, list[int]]], layout: _Layout, lists: list[list[int]]) -> list[int]:
    """The one state left after merging the keyed states two at a time, the smallest
    keys first (:class:`_Layout`), the smaller key's state leading
    (:func:`_merge_states`)."""
    heapq.heapify(heap)
    while len(heap) > 1:
        first, second = heapq.heappop(heap)[1], heapq.heappop(heap)[1]
        state = _merge_states(first, second, lists, layout)
        heapq.heappush(heap, (layout.key(state), state))
    return heap[0][1]


#: :func:`_differencing_python`'s partitions, from its compiled twin where it is in use and
#: takes the input (``_c_differencing.c``; :class:`~seqlen_balancing.native.Twinned`).
_differencing = Twinned(_differencing_python, "_c_differencing", "differencing")
