"""Cap-respecting packings under the one rule (no torch).

Best fit (one algorithm for every rule, with a fast path for plain sums) and its seeded
randomized restarts, closing-fit decreasing and minimum bin slack (summed costs without a
sample limit), and splitting up to a target count.

A *bin* here is a list of item indices that fits its :class:`~seqlen_balancing.planning.rule.Rule`:
for the public functions on ``(sizes, cap)``, whose sizes sum to at most ``cap``. Every
function in this module returns bins that fit; none of them needs torch. The exchange and
exact searches that take a packing to fewer bins live in :mod:`seqlen_balancing.planning.repack`,
the lower bounds in :mod:`seqlen_balancing.planning.bounds` and :mod:`seqlen_balancing.planning.rule`.
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import groupby
from math import gcd

from seqlen_balancing.native import Twinned
from seqlen_balancing.planning.bounds import _checked
from seqlen_balancing.planning.rule import Loads, Rule, widest_first

__all__ = [
    "best_fit",
    "best_fit_decreasing",
    "closing_fit_decreasing",
    "minimum_bin_slack",
    "randomized_best_fit",
    "row_filling",
    "split",
    "split_to_count",
]

_CLOSING_TRIES = 64  # sizes tried per exact-pair search in closing_fit_decreasing
_MAX_BITSET_BITS = 1 << 16  # minimum_bin_slack: widest subset-sum bitset (cap / gcd)
_MAX_STORED_BITS = 1 << 26  # minimum_bin_slack: bitsets kept per bin (8 MiB)
_BITMAP_CAP = 1 << 22  # _best_fit_sums: widest cap bucketed by room (64 Ki words)
# _best_fit_sums: up to this many bins' worth of tokens, the sorted list of rooms (its moves
# are cheap while the bins are few: 1.4-2.5x faster at 26-30k bins, slower at 34k)
_SORTED_BINS = 1 << 15
_PROBES = 16  # best_fit: micro-batches with the room tried per item under a rule
_MAX_RESTARTS = 64  # randomized_best_fit: restarts at most
_STALE_RESTARTS = 24  # randomized_best_fit: ... and at most this many in a row that gain nothing
_SPREADS = (0.05, 0.1, 0.2, 0.4)  # randomized_best_fit: the noise on the order's key


def best_fit_decreasing(sizes: Sequence[int], cap: int) -> list[list[int]]:
    """Best-fit decreasing: each item, largest first, into the fullest bin it fits.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        Bins (lists of item indices, largest item first), each summing to at most ``cap``,
        together an exact cover of ``range(n)``. At most ``11/9 OPT + 6/9`` bins.

    Raises:
        TypeError: a size or ``cap`` is not an integer.
        ValueError: a negative size, a size above ``cap``, or ``cap < 1``.

    Complexity: O(n log n) for the sort, then O(1 + cap / 4096) word operations per item
    (bins bucketed by their room under a bitmap of the rooms in use); for caps above
    ``2**22``, a bisect on a sorted list of rooms and list insertions that move O(bins)
    pointers each.

    References:
        D. S. Johnson, "Fast algorithms for bin packing", JCSS 8 (1974);
        G. Dosa, "The tight bound of first fit decreasing bin-packing algorithm is
        FFD(I) <= 11/9 OPT(I) + 6/9", ESCAPE 2007.

    Example:
        >>> best_fit_decreasing([5, 7, 3, 5], 10)
        [[1, 2], [0, 3]]
    """
    sizes, cap = _checked(sizes, cap)
    return best_fit(Rule.sums(sizes, cap))


def best_fit(rule: Rule, order: Sequence[int] | None = None) -> list[list[int]]:
    """Best fit under ``rule``: each item, in ``order`` (default:
    :func:`~seqlen_balancing.planning.rule.widest_first`, largest or widest first), into the
    fullest micro-batch it fits, else a new one.

    The micro-batches that can still take something sit in a list sorted by the room the
    cap leaves them; an item looks from the first whose room is at least what it costs
    alone (it adds at least that, :attr:`Rule.sizes`) and takes the first that fits the
    rule, among at most ``_PROBES`` (a padded width or a sample limit can refuse a bin that
    has the room). For summed costs without a limit the first always fits: that is plain
    best-fit decreasing, run by a tighter loop with no per-item call (the fast path).

    Args:
        rule: a :class:`~seqlen_balancing.planning.rule.Rule` under which every item fits alone.
        order: the items in the order to place them, or ``None``.

    Returns:
        Micro-batches (lists of items, in placement order), each fitting ``rule``, together
        an exact cover of the items.

    Raises:
        ValueError: (fast path) an item larger than the cap.

    Complexity: O(n log n + n * _PROBES) comparisons, plus list insertions that move
    O(bins) pointers each.

    Example:
        >>> best_fit(Rule.sums([5, 7, 3, 5], 10))
        [[1, 2], [0, 3]]
        >>> best_fit(Rule.sums([5, 7, 3, 5], 10, limit=1))
        [[1], [0], [3], [2]]
    """
    if order is None and rule.plain:
        return _best_fit_sums(rule.sizes, rule.cap, rule.by_size)
    order = widest_first(rule) if order is None else order
    sizes, counts, cap, limit = rule.sizes, rule.rows, rule.cap, rule.limit
    least, fewest = min(sizes, default=0), min(counts, default=0)
    loads = Loads(rule, 0)
    fits, add, cost, rows = loads.fits, loads.add, loads.cost, loads.rows
    rooms: list[int] = []  # ascending, of the bins that may take more
    owners: list[int] = []  # parallel to ``rooms``
    bins: list[list[int]] = []
    for i in order:
        pos = bisect_left(rooms, sizes[i])
        for at in range(pos, min(pos + _PROBES, len(rooms))):
            if fits(owners[at], i):
                rooms.pop(at)
                b = owners.pop(at)
                bins[b].append(i)
                break
        else:
            b = loads.open()
            bins.append([i])
        add(b, i)
        room = cap - cost[b]
        if room < least or (limit is not None and limit - rows[b] < fewest):
            continue  # nothing fits it any more
        at = bisect_right(rooms, room)
        rooms.insert(at, room)
        owners.insert(at, b)
    return bins


def _best_fit_sums(sizes: list[int], cap: int, order: list[int]) -> list[list[int]]:
    """:func:`best_fit` for summed costs without a limit, in decreasing order.

    The bins that can take more are bucketed by their room (a stack per room, the newest
    last) under a two-level bitmap of the rooms in use (64 rooms a word, and one bit a
    word), so finding the fullest bin an item fits costs O(cap / 4096) word operations,
    not a move of O(bins) pointers; caps above ``_BITMAP_CAP``, and batches of at most
    ``_SORTED_BINS`` bins' worth of tokens, keep the sorted list (the same bins).
    """
    few = cap > _BITMAP_CAP or sum(sizes) <= _SORTED_BINS * cap  # the list's moves cost less
    return (_best_fit_sorted if few else _best_fit_rooms)(sizes, cap, order)


def _best_fit_rooms_python(sizes: list[int], cap: int, order: list[int]) -> list[list[int]]:
    """:func:`_best_fit_sums` on the bins bucketed by room (``cap`` at most
    :data:`_BITMAP_CAP`), ``order`` given: O(n + n * cap / 4096) word operations."""
    smallest = sizes[order[-1]] if order else 0
    words = [0] * ((cap >> 6) + 1)  # bit r & 63 of word r >> 6: some bin has room r
    used = 0  # bit w: words[w] is not 0
    stacks: dict[int, list[int]] = {}  # room -> bins with that room, the newest last
    bins: list[list[int]] = []
    for i in order:
        size = sizes[i]
        if size > cap:
            raise ValueError(f"item {i} has size {size}, larger than the capacity {cap}")
        w = size >> 6
        word = words[w] >> (size & 63)
        if word:
            room = size + ((word & -word).bit_length() - 1)
        else:
            above = used >> (w + 1)
            if above:
                w += (above & -above).bit_length()
                word = words[w]
                room = (w << 6) + (word & -word).bit_length() - 1
            else:
                room = -1
        if room < 0:
            owner = len(bins)
            bins.append([i])
            left = cap - size
        else:
            stack = stacks[room]
            owner = stack.pop()
            if not stack:
                del stacks[room]
                w = room >> 6
                words[w] &= ~(1 << (room & 63))
                if not words[w]:
                    used &= ~(1 << w)
            bins[owner].append(i)
            left = room - size
        if left < smallest:
            continue  # no item left fits this bin: keep it out of the index
        waiting = stacks.get(left)
        if waiting is None:
            stacks[left] = [owner]
            w = left >> 6
            if not words[w]:
                used |= 1 << w
            words[w] |= 1 << (left & 63)
        else:
            waiting.append(owner)
    return bins


def _best_fit_sorted_python(sizes: list[int], cap: int, order: list[int]) -> list[list[int]]:
    """:func:`_best_fit_sums` on a sorted list of rooms (any cap; O(bins) moves per item)."""
    residuals: list[int] = []  # ascending
    owners: list[int] = []  # bin of each residual, parallel to ``residuals``
    bins: list[list[int]] = []
    smallest = sizes[order[-1]] if order else 0
    for i in order:
        size = sizes[i]
        if size > cap:
            raise ValueError(f"item {i} has size {size}, larger than the capacity {cap}")
        pos = bisect_left(residuals, size)
        if pos == len(residuals):
            owner = len(bins)
            bins.append([i])
            left = cap - size
        else:
            # The newest of the bins with this residual (the end of the run): popping there
            # is O(1) when all residuals are equal.
            pos = bisect_right(residuals, residuals[pos]) - 1
            left = residuals.pop(pos) - size
            owner = owners.pop(pos)
            bins[owner].append(i)
        if left < smallest:
            continue  # no item left fits this bin: keep it out of the index
        pos = bisect_right(residuals, left)  # after equal residuals: O(1) on equal sizes
        residuals.insert(pos, left)
        owners.insert(pos, owner)
    return bins


#: :func:`_best_fit_sorted_python`'s bins, from its compiled twin where it is in use and takes
#: the input (``_c_packing.c``; :class:`~seqlen_balancing.native.Twinned`).
_best_fit_sorted = Twinned(_best_fit_sorted_python, "_c_packing", "best_fit_sorted")

#: :func:`_best_fit_rooms_python`'s bins, from its compiled twin where it is in use and takes
#: the input (``_c_packing.c``: 10^6 samples at cap 16k, ~10^5 bins, in tens of ms).
_best_fit_rooms = Twinned(_best_fit_rooms_python, "_c_packing", "best_fit_rooms")


def randomized_best_fit(
    rule: Rule, target: int, packing: list[list[int]], budget: int | None = None
) -> list[list[int]]:
    """The fewest micro-batches among ``packing`` and seeded restarts of :func:`best_fit`
    on perturbed orders, stopping once one reaches ``target``.

    Even restarts sort the items by their decreasing key (cost alone, or width when
    padded) each scaled by a random factor in ``[1 - d, 1 + d]``, ``d`` cycling through
    0.05, 0.1, 0.2 and 0.4; odd restarts take a random order (under a sample limit a
    random order often packs tighter than a decreasing one: small items then meet large
    ones early, before the limit, not the cap, has to pack them). The seed is
    derived from the input, so the result is deterministic.

    Args:
        rule: a :class:`~seqlen_balancing.planning.rule.Rule` under which every item fits alone.
        target: stop as soon as a packing has this many micro-batches (a lower bound).
        packing: the best packing so far (returned when no restart beats it).
        budget: items placed over all restarts (default ``20 n + 100000``; at most 64
            restarts, and the restarts stop after 24 in a row that find no fewer).

    Returns:
        The packing with the fewest micro-batches, the earliest on a tie.

    Complexity: O(restarts * (n log n + n * _PROBES)).

    References:
        The randomized first/best fit of bin-packing practice; e.g. E. Falkenauer, "A
        hybrid grouping genetic algorithm for bin packing", J. Heuristics 2 (1996), which
        seeds with randomized first fit.
    """
    n = rule.n
    restarts = min(_MAX_RESTARTS, (20 * n + 100_000 if budget is None else budget) // max(n, 1))
    rng = random.Random((n * 1_000_003 + rule.cap * 7919 + sum(rule.sizes)) & 0xFFFFFFFF)
    # what decreasing orders sort by: the cost alone, or (padded) the width
    key = rule.sizes if rule.left is None or rule.right is None else [
        a + b for a, b in zip(rule.left, rule.right, strict=True)]
    best = packing
    stale = 0
    for restart in range(restarts):
        if len(best) <= target or stale >= _STALE_RESTARTS:
            break
        if restart % 2:
            order = list(range(n))
            rng.shuffle(order)
        else:
            spread = _SPREADS[restart // 2 % len(_SPREADS)]
            noisy = [key[i] * (1.0 + rng.uniform(-spread, spread)) for i in range(n)]
            order = sorted(range(n), key=noisy.__getitem__, reverse=True)
        found = best_fit(rule, order)
        stale += 1
        if len(found) < len(best):
            best, stale = found, 0
    return best


def row_filling(rule: Rule) -> list[list[int]]:
    """Bin-by-bin packing for a sample limit: each micro-batch opens with the largest item
    left, then takes, while it has rows to spare, the largest item that still leaves room
    for the smallest items left to fill its other rows (else the largest that fits).

    Under a tight sample limit best-fit decreasing fills its first micro-batches with the
    large items and leaves the small ones to the end, where the limit, not the cap, packs
    them: every micro-batch then holds either too few tokens or too few rows. Reserving
    the smallest items' tokens for the rows left keeps each micro-batch full in both (on
    CHAMP lengths with both bounds binding it reaches the bound where best fit is 20% over).
    It is a one-bin-at-a-time fill in the spirit of Minimum Bin Slack, with the limit's
    rows as the second resource.

    Args:
        rule: a summed-cost :class:`~seqlen_balancing.planning.rule.Rule` with a sample limit (any
            rule works; without a limit it is first-fit-like decreasing), every item
            fitting alone.

    Returns:
        Micro-batches (lists of items, the largest first), each fitting ``rule``, together
        an exact cover of the items.

    Complexity: O(n log n): the items left are a Fenwick tree over their ascending order
    (counts and token sums), so each pick and each reserve is O(log n).

    References:
        H. Kellerer and U. Pferschy, "Cardinality constrained bin-packing problems",
        Annals of Operations Research 92 (1999) (the problem);
        J. N. D. Gupta and J. C. Ho, "A new heuristic algorithm for the one-dimensional
        bin-packing problem", Production Planning & Control 10 (1999) (bin-by-bin filling).

    Example:
        >>> row_filling(Rule.sums([9, 8, 7, 2, 1, 1], 12, limit=2))
        [[0, 3], [1, 5], [2, 4]]
    """
    sizes, counts, cap = rule.sizes, rule.rows, rule.cap
    limit = sum(counts) if rule.limit is None else rule.limit
    fewest = max(min(counts, default=1), 1)
    ascending = sorted(range(rule.n), key=lambda i: (sizes[i], i))
    keys = [sizes[i] for i in ascending]
    left = _Fenwick([1] * rule.n), _Fenwick(keys)  # items left: count, tokens
    loads = Loads(rule, 0)
    bins: list[list[int]] = []
    remaining = rule.n
    while remaining:
        b = loads.open()
        at: int | None = left[0].find(remaining)  # the largest item left
        bins.append([])
        while at is not None:
            item = ascending[at]
            bins[b].append(item)
            loads.add(b, item)
            left[0].add(at, -1)
            left[1].add(at, -keys[at])
            remaining -= 1
            at = _next_fill(left, keys, cap - loads.cost[b], (limit - loads.rows[b]) // fewest,
                            remaining)
            if at is not None and not loads.fits(b, ascending[at]):
                at = None  # rows of different sizes: this one does not fit
    return bins


def _next_fill(
    left: tuple[_Fenwick, _Fenwick], keys: list[int], room: int, slots: int, remaining: int
) -> int | None:
    """The position (in ascending order) of :func:`row_filling`'s next item for a bin with
    ``room`` tokens and ``slots`` items to spare, or ``None``."""
    if slots <= 0 or not remaining:
        return None
    count, tokens = left
    reserve = min(slots - 1, remaining - 1)
    held = tokens.prefix(count.find(reserve)) if reserve else 0  # the smallest items' tokens
    pick = _largest_within(count, keys, room - held)
    if pick is not None and count.prefix(pick) > reserve:
        return pick  # not one of the reserved smallest
    return _largest_within(count, keys, room)


def _largest_within(count: _Fenwick, keys: list[int], most: int) -> int | None:
    """The position of the largest item left whose size is at most ``most``, or ``None``."""
    if most < 0:
        return None
    alive = count.prefix(bisect_right(keys, most) - 1)
    return count.find(alive) if alive else None


class _Fenwick:
    """A Fenwick (binary indexed) tree: point updates, prefix sums and the position of the
    ``k``-th unit, each O(log n). Positions are 0-based."""

    __slots__ = ("tree",)

    def __init__(self, values: list[int]) -> None:
        tree = [0, *values]
        for i in range(1, len(tree)):
            parent = i + (i & -i)
            if parent < len(tree):
                tree[parent] += tree[i]
        self.tree = tree

    def add(self, position: int, delta: int) -> None:
        tree, i = self.tree, position + 1
        while i < len(tree):
            tree[i] += delta
            i += i & -i

    def prefix(self, position: int) -> int:
        """Sum of positions ``0..position`` (0 for ``position < 0``)."""
        tree, i, total = self.tree, position + 1, 0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    def find(self, k: int) -> int:
        """The smallest position whose prefix sum reaches ``k`` (``k >= 1``; the values are
        non-negative counts)."""
        tree, position, step = self.tree, 0, 1 << (len(self.tree) - 1).bit_length()
        while step:
            nxt = position + step
            if nxt < len(tree) and tree[nxt] < k:
                position = nxt
                k -= tree[nxt]
            step >>= 1
        return position  # 0-based: the 1-based index is position + 1


def closing_fit_decreasing(sizes: Sequence[int], cap: int) -> list[list[int]]:
    """Bin-by-bin packing that closes each bin exactly when it can.

    Each bin opens with the largest remaining item; then, while some item fits the room
    ``r``, it is closed by one remaining item of size exactly ``r``, else by two of total
    exactly ``r`` (the most even such pair: the smaller item as large as possible, so
    ``[10, 7, 6, 4, 3]`` at cap 20 closes ``10`` with ``6 + 4``), else it takes the largest
    item that fits and tries again. Early bins are thus filled to the token, and the waste
    piles up in the last bins, which suits many-items-per-bin batches where best-fit
    decreasing leaves a small gap in every bin. The pair search tries at most
    ``_CLOSING_TRIES`` sizes per step and ``16 n + 1024`` in all, so it stays O(n log n).

    It is a cheap variant of the Minimum Bin Slack idea (fill one bin at a time as fully
    as possible), restricted to closing sets of one or two items.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).

    Returns:
        Bins (lists of item indices), each summing to at most ``cap``, together an exact
        cover of ``range(n)``. Deterministic.

    Raises:
        ValueError: an item is larger than ``cap``.

    Complexity: O(n log n) time and O(n) memory: each pair search reads at most
    ``_CLOSING_TRIES`` sizes left, each partner looked up in a dict of the sizes left
    (nothing grows with the cap).

    References:
        J. N. D. Gupta and J. C. Ho, "A new heuristic algorithm for the one-dimensional
        bin-packing problem", Production Planning & Control 10 (1999) (Minimum Bin Slack);
        K. Fleszar and K. S. Hindi, "New heuristics for one-dimensional bin-packing",
        Computers & OR 29 (2002).

    Example:
        >>> closing_fit_decreasing([6, 5, 4, 3, 2], 10)
        [[0, 2], [1, 3, 4]]
    """
    if max(sizes, default=0) > cap:
        raise ValueError(f"an item is larger than the capacity {cap}")
    return _closing_fit(sizes, cap, sorted(range(len(sizes)), key=sizes.__getitem__, reverse=True))


def _closing_fit(sizes: Sequence[int], cap: int, order: Sequence[int]) -> list[list[int]]:
    """:func:`closing_fit_decreasing` of items in ``0..cap``, ``order`` the items by
    decreasing size, ties by index (:attr:`Rule.by_size`: trusted, not checked)."""
    # size -> indices, the smallest index last (the runs of the order, reversed)
    holders = {size: list(run)[::-1] for size, run in groupby(order, key=sizes.__getitem__)}
    distinct = list(holders)[::-1]  # ascending
    tries_left = 16 * len(sizes) + 1024

    def take(size: int) -> int:
        owners = holders[size]
        i = owners.pop()
        if not owners:
            del holders[size]
            distinct.pop(bisect_left(distinct, size))
        return i

    bins: list[list[int]] = []
    while distinct:
        first = take(distinct[-1])
        current = [first]
        room = cap - sizes[first]
        while distinct and distinct[0] <= room:
            if room in holders:
                current.append(take(room))
                room = 0  # zero-size items may still join
                continue
            pos = bisect_right(distinct, room // 2) - 1
            stop = max(-1, pos - min(_CLOSING_TRIES, tries_left))
            # the pair whose smaller item is the largest of distinct[stop + 1 : pos + 1]
            low = distinct[stop + 1] if pos > stop else 0
            small = _largest_pair(distinct, holders, room, low, distinct[pos]) if pos > stop else -1
            if small >= 0 and 2 * small == room and len(holders[small]) < 2:
                small = _largest_pair(distinct, holders, room, low, small - 1) if pos - 1 > stop else -1
            tries_left -= _CLOSING_TRIES if small < 0 else 1
            if small >= 0:
                current.append(take(room - small))
                current.append(take(small))
                room = 0
                continue
            size = distinct[bisect_right(distinct, room) - 1]
            current.append(take(size))
            room -= size
        bins.append(current)
    return bins


def _largest_pair(distinct: list[int], holders: dict[int, list[int]], room: int, low: int, high: int) -> int:
    """The largest size ``s`` left in ``[low, high]`` whose partner ``room - s`` is left too,
    else -1: the partners left in ``[room - high, room - low]`` read from the ascending list
    of the sizes left, smallest first (the largest ``s``), each ``s`` looked up in the dict of
    them. O(log n + partners read) time (none read when no partner is left) and nothing that
    grows with the cap."""
    partners = distinct[bisect_left(distinct, room - high) : bisect_right(distinct, room - low)]
    return next((room - p for p in partners if room - p in holders), -1)


def minimum_bin_slack(
    sizes: Sequence[int], cap: int, budget: int | None = None
) -> list[list[int]]:
    """Bin-by-bin packing that fills each bin as fully as any subset of the remaining items can.

    Each bin opens with the largest remaining item; the room left is filled by the subset of
    the other remaining items with the largest total that fits (an exact subset-sum, so a
    bin is closed to the token whenever some subset allows it). The subset sums are Python
    int bitsets (bit ``t`` set: some subset sums to ``t``), in units of the gcd of the sizes
    below the cap, so multiples of 10 against a cap such as 32768 cost a tenth of the bits
    and the unavoidable ``cap mod 10`` gap counts as full. Items are added largest first and
    the scan stops once the room can be filled exactly; the subset is read back from the
    stored bitsets preferring the larger items. Waste thus piles up in the last bins, which
    suits batches with few items per bin and little slack, where best fit leaves a small
    gap in every bin.

    This is the MBS' variant of Fleszar and Hindi (each bin keeps the largest remaining
    item), with the search over subsets replaced by an exact bitset subset-sum.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).
        budget: bound on bitset steps (items scanned) over the whole call, default
            ``20 n + 50000``; once it is spent, the remaining items are packed by best-fit
            decreasing. Deterministic.

    Returns:
        Bins (lists of item indices, largest item first), each summing to at most ``cap``,
        together an exact cover of ``range(n)``.

    Raises:
        ValueError: an item is larger than ``cap``.

    Complexity: O(budget) bitset shifts of ``cap / gcd`` bits each, plus O(n log n). When
    ``cap / gcd`` exceeds 65,536 bits it returns best-fit decreasing instead, and a bin
    scans at most ``2**26 / (cap / gcd)`` items, so time and memory stay bounded.

    References:
        J. N. D. Gupta and J. C. Ho, "A new heuristic algorithm for the one-dimensional
        bin-packing problem", Production Planning & Control 10 (1999) (Minimum Bin Slack);
        K. Fleszar and K. S. Hindi, "New heuristics for one-dimensional bin-packing",
        Computers & OR 29 (2002) (MBS', the bin keeps its largest item).

    Example:
        >>> minimum_bin_slack([6, 5, 4, 3, 2], 10)
        [[0, 2], [1, 3, 4]]
    """
    if max(sizes, default=0) > cap:
        raise ValueError(f"an item is larger than the capacity {cap}")
    n = len(sizes)
    limit = 20 * n + 50_000 if budget is None else budget
    order = sorted((i for i in range(n) if sizes[i] > 0), key=lambda i: (-sizes[i], i))
    zeros = [i for i in range(n) if sizes[i] == 0]
    negated = [-sizes[i] for i in order]  # ascending, for bisect
    unit = gcd(*(size for size in sizes if size < cap)) or 1
    if cap // unit > _MAX_BITSET_BITS:
        # A bitset that wide costs too much time and memory per step: plain best fit.
        return best_fit_decreasing(sizes, cap)
    m = len(order)
    alive = [True] * m
    bins: list[list[int]] = []
    head = work = 0
    while head < m and work < limit:
        if not alive[head]:
            head += 1
            continue
        first = order[head]
        alive[head] = False
        current = [first]
        room = cap - sizes[first]
        target = room // unit
        max_scan = max(1, _MAX_STORED_BITS // (target + 1))
        mask = (1 << (target + 1)) - 1
        reach = 1
        stored: list[int] = []  # bitset before each scanned item
        scanned: list[int] = []  # positions in ``order``
        for pos in range(max(bisect_left(negated, -room), head + 1), m):
            work += 1
            if not alive[pos]:
                continue
            if len(scanned) == max_scan:
                break  # bounds the stored bitsets to about _MAX_STORED_BITS bits
            stored.append(reach)
            scanned.append(pos)
            reach = (reach | (reach << (sizes[order[pos]] // unit))) & mask
            if reach >> target:
                break  # the room can be filled exactly
        total = reach.bit_length() - 1
        taken: list[int] = []
        for k in range(len(scanned) - 1, -1, -1):
            if not total:
                break
            if not (stored[k] >> total) & 1:  # this sum needs item k
                pos = scanned[k]
                taken.append(order[pos])
                alive[pos] = False
                total -= sizes[order[pos]] // unit
        current.extend(reversed(taken))
        bins.append(current)
    rest = [order[pos] for pos in range(m) if alive[pos]]
    bins.extend([rest[j] for j in b] for b in best_fit_decreasing([sizes[i] for i in rest], cap))
    return _with_zeros(bins, zeros)


def _with_zeros(bins: list[list[int]], zeros: list[int]) -> list[list[int]]:
    """``bins`` with the zero-size items ``zeros`` added to the first bin (they fit
    anywhere), or as a bin of their own when there is none."""
    if bins:
        bins[0].extend(zeros)
    elif zeros:
        bins.append(zeros)
    return bins


def split_to_count(sizes: Sequence[int], bins: list[list[int]], count: int) -> list[list[int]]:
    """Split bins until there are exactly ``count`` (splitting never breaks a cap).

    The heaviest bin with at least two items is halved (items alternately by size) each
    step, so the extra bins go where they relieve the most load.

    Args:
        sizes: item sizes in tokens.
        bins: a packing (not modified).
        count: wanted number of bins, ``len(bins) <= count <= number of items``.

    Returns:
        ``count`` non-empty bins, an exact cover of the same items.

    Raises:
        ValueError: ``count`` is below ``len(bins)`` or above the number of items.

    Complexity: O(bins + (count - len(bins)) * log(count) + sum of m log m over the split
    bins), with m a split bin's item count: O(n log^2 n) at worst, when one bin of n items
    is split down to single items.
    """
    values = list(sizes)
    return split(Rule.sums(values, max(sum(values), 1)), bins, count)


def split(rule: Rule, bins: list[list[int]], count: int) -> list[list[int]]:
    """Split micro-batches until there are exactly ``count``; a part of a micro-batch that
    fits ``rule`` fits it, so the result does.

    Each step halves the costliest micro-batch with at least two items (the lowest index
    on a tie): summed costs deal its items, largest first, to the lighter half (the two
    largest seed the halves); padded micro-batches keep their wider half and put the
    narrower half apart, so the new micro-batch is as narrow as it can be.

    Args:
        rule: the :class:`~seqlen_balancing.planning.rule.Rule` the micro-batches fit.
        bins: micro-batches (lists of items; not modified).
        count: wanted, ``len(bins) <= count <= number of items``.

    Returns:
        ``count`` non-empty micro-batches, an exact cover of the same items.

    Raises:
        ValueError: ``count`` is below ``len(bins)`` or above the number of items.

    Complexity: as :func:`split_to_count` (padded: each step also prices its halves,
    O(m)).
    """
    result = [list(b) for b in bins]
    n_items = sum(len(b) for b in result)
    if not len(result) <= count <= n_items:
        raise ValueError(f"cannot split {len(result)} bins of {n_items} items into {count}")
    # Splittable bins keyed by (-cost, index): the costliest first, the lowest index on ties.
    heap = [(-rule.cost(b), k) for k, b in enumerate(result) if len(b) > 1]
    heapq.heapify(heap)
    halve = _halve_padded if rule.is_padded else _halve_summed
    while len(result) < count:
        costliest = heapq.heappop(heap)[1]
        first, second = halve(rule, result[costliest])
        result[costliest] = first
        result.append(second)
        for k in (costliest, len(result) - 1):
            if len(result[k]) > 1:
                heapq.heappush(heap, (-rule.cost(result[k]), k))
    return result


def _halve_summed(rule: Rule, items: list[int]) -> tuple[list[int], list[int]]:
    """Largest first, each to the lighter half (the first on a tie); the two largest seed
    the halves so both stay non-empty."""
    sizes = rule.sizes
    halves: tuple[list[int], list[int]] = ([], [])
    loads = [0, 0]
    for position, i in enumerate(sorted(items, key=lambda i: (-sizes[i], i))):
        side = int(position == 1 or loads[0] > loads[1])  # the first item: loads both 0
        halves[side].append(i)
        loads[side] += sizes[i]
    return halves


def _halve_padded(rule: Rule, items: list[int]) -> tuple[list[int], list[int]]:
    """Widest first: the longest prefix holding at most half the rows (at least one item)
    and the rest, each sorted by index."""
    left, right, counts = rule.left or [], rule.right or [], rule.rows
    ordered = sorted(items, key=lambda i: (-(left[i] + right[i]), i))
    total = sum(counts[i] for i in ordered)
    half = taken = 0
    while half < len(ordered) - 1 and 2 * (taken + counts[ordered[half]]) <= total:
        taken += counts[ordered[half]]
        half += 1
    half = max(half, 1)
    return sorted(ordered[:half]), sorted(ordered[half:])
