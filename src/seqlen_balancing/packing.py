"""Cap-respecting bin packings on plain integer lists (no torch).

Best-fit and closing-fit decreasing, minimum bin slack, bin-count reduction by exchange
local search, exact search on small inputs, and splitting up to a target count.

A *bin* here is a list of item indices whose sizes (tokens) sum to at most ``cap``. Every
function in this module returns bins that respect the cap; none of them needs torch. The
lower bounds live in :mod:`seqlen_balancing.bounds`; their names stay importable from here
(the import paths of earlier releases).
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from math import gcd

from seqlen_balancing.bounds import (  # re-exported: the import paths of earlier releases
    BOUND_NAMES,
    _checked,
    best_lower_bound,
    dominant_bins,
    l1_lower_bound,
    l2_lower_bound,
    lower_bound,
)

__all__ = [
    "BOUND_NAMES",
    "best_fit_decreasing",
    "best_lower_bound",
    "closing_fit_decreasing",
    "dominant_bins",
    "l1_lower_bound",
    "l2_lower_bound",
    "lower_bound",
    "minimum_bin_slack",
    "reduce_bins",
    "split_to_count",
]

_MAX_FREE_PAIRS = 64  # free pools up to this size also offer pairs of items
_MAX_FREE_TRIPLES = 16  # ... and triples
_CLOSING_TRIES = 64  # sizes tried per exact-pair search in closing_fit_decreasing
_MAX_OUT_PAIRS = 12  # bins with up to this many items may give up two at once
_KICK_BINS = 2  # bins emptied into the pool per kick
_MAX_BITSET_BITS = 1 << 16  # minimum_bin_slack: widest subset-sum bitset (cap / gcd)
_MAX_STORED_BITS = 1 << 26  # minimum_bin_slack: bitsets kept per bin (8 MiB)


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

    Complexity: O(n log n) comparisons (bisect on a sorted list of bin residuals), plus
    list insertions that move O(bins) pointers each.

    References:
        D. S. Johnson, "Fast algorithms for bin packing", JCSS 8 (1974);
        G. Dosa, "The tight bound of first fit decreasing bin-packing algorithm is
        FFD(I) <= 11/9 OPT(I) + 6/9", ESCAPE 2007.

    Example:
        >>> best_fit_decreasing([5, 7, 3, 5], 10)
        [[1, 2], [0, 3]]
    """
    sizes, cap = _checked(sizes, cap)
    residuals: list[int] = []  # ascending
    owners: list[int] = []  # bin of each residual, parallel to ``residuals``
    bins: list[list[int]] = []
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
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

    References:
        J. N. D. Gupta and J. C. Ho, "A new heuristic algorithm for the one-dimensional
        bin-packing problem", Production Planning & Control 10 (1999) (Minimum Bin Slack);
        K. Fleszar and K. S. Hindi, "New heuristics for one-dimensional bin-packing",
        Computers & OR 29 (2002).

    Example:
        >>> closing_fit_decreasing([6, 5, 4, 3, 2], 10)
        [[0, 2], [1, 3, 4]]
    """
    if not sizes:
        return []
    if max(sizes) > cap:
        raise ValueError(f"an item is larger than the capacity {cap}")
    holders: dict[int, list[int]] = {}  # size -> indices, the smallest index last
    for i in range(len(sizes) - 1, -1, -1):
        holders.setdefault(sizes[i], []).append(i)
    distinct = sorted(holders)
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
            pair = None
            while pos > stop:
                small = distinct[pos]
                large = room - small
                if large in holders and (large != small or len(holders[small]) > 1):
                    pair = (large, small)
                    break
                pos -= 1
            tries_left -= _CLOSING_TRIES if pair is None else 1
            if pair is not None:
                current.append(take(pair[0]))
                current.append(take(pair[1]))
                room = 0
                continue
            size = distinct[bisect_right(distinct, room) - 1]
            current.append(take(size))
            room -= size
        bins.append(current)
    return bins


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
    if not sizes:
        return []
    if max(sizes) > cap:
        raise ValueError(f"an item is larger than the capacity {cap}")
    n = len(sizes)
    limit = 20 * n + 50_000 if budget is None else budget
    order = sorted((i for i in range(n) if sizes[i] > 0), key=lambda i: (-sizes[i], i))
    zeros = [i for i in range(n) if sizes[i] == 0]
    negated = [-sizes[i] for i in order]  # ascending, for bisect
    unit = 0
    for size in sizes:
        if size < cap:
            unit = gcd(unit, size)
    unit = unit or 1
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
    if rest:
        tail = best_fit_decreasing([sizes[i] for i in rest], cap)
        bins.extend([rest[j] for j in b] for b in tail)
    if zeros:
        if bins:
            bins[0].extend(zeros)
        else:
            bins.append(zeros)
    return bins


class _FixedCount:
    """A packing into a fixed number of bins plus a pool of unplaced ("free") items.

    Every bin respects the cap at all times; the search tries to empty the free pool.
    ``work`` counts elementary steps (bisections, subset sums, copied items) so that the
    search is bounded by a deterministic budget rather than by wall-clock time. A subset
    of up to three items is encoded as one int (digits ``i + 1`` in base ``n + 1``), so
    the search allocates no tuples that the cyclic garbage collector would have to scan.
    """

    def __init__(
        self, sizes: Sequence[int], cap: int, bins: list[list[int]], free: list[int],
        seed: int,
    ) -> None:
        self.sizes = sizes
        self.cap = cap
        self.base = len(sizes) + 1
        self.bins = bins
        self.loads = [sum(sizes[i] for i in b) for b in bins]
        self.free = free
        self.work = 0
        self.rng = random.Random(seed)
        # Per bin: sorted-by-nothing parallel lists (sizes, codes) of the subsets it may
        # give up, or None when stale.
        self.outs: list[tuple[list[int], list[int]] | None] = [None] * len(bins)

    def free_weight(self) -> int:
        sizes = self.sizes
        return sum(sizes[i] for i in self.free)

    def _decode(self, code: int) -> list[int]:
        items = []
        while code:
            code, digit = divmod(code, self.base)
            items.append(digit - 1)
        return items

    def _free_sums(self) -> tuple[list[int], list[int]]:
        """Sorted distinct sums of 1-3 free items (pairs and triples only for small pools),
        with the code of one subset per sum."""
        sizes, free, base = self.sizes, self.free, self.base
        by_sum: dict[int, int] = {}
        for i in free:
            by_sum.setdefault(sizes[i], i + 1)
        f = len(free)
        if f <= _MAX_FREE_PAIRS:
            for x in range(f):
                a = free[x]
                size_a, code_a = sizes[a], (a + 1) * base
                for y in range(x + 1, f):
                    b = free[y]
                    by_sum.setdefault(size_a + sizes[b], code_a + b + 1)
            self.work += f * f // 2
        if f <= _MAX_FREE_TRIPLES:
            square = base * base
            for x in range(f):
                a = free[x]
                for y in range(x + 1, f):
                    b = free[y]
                    size_ab = sizes[a] + sizes[b]
                    code_ab = (a + 1) * square + (b + 1) * base
                    for z in range(y + 1, f):
                        c = free[z]
                        by_sum.setdefault(size_ab + sizes[c], code_ab + c + 1)
            self.work += f * f * f // 6
        keys = sorted(by_sum)
        self.work += f + len(keys)
        return keys, [by_sum[k] for k in keys]

    def _outs(self, b: int) -> tuple[list[int], list[int]]:
        outs = self.outs[b]
        if outs is None:
            sizes, base = self.sizes, self.base
            items = self.bins[b]
            out_sizes = [0]
            out_codes = [0]
            out_sizes.extend(sizes[i] for i in items)
            out_codes.extend(i + 1 for i in items)
            if len(items) <= _MAX_OUT_PAIRS:
                m = len(items)
                for x in range(m):
                    i = items[x]
                    for y in range(x + 1, m):
                        j = items[y]
                        out_sizes.append(sizes[i] + sizes[j])
                        out_codes.append((i + 1) * base + j + 1)
            outs = (out_sizes, out_codes)
            self.outs[b] = outs
        return outs

    def _best_move(self, b: int, keys: list[int], codes: list[int]) -> tuple[int, int, int]:
        """Largest load increase ``(gain, out code, in code)`` of bin ``b`` by swapping up to
        two of its items for one to three free ones (gain 0: no move)."""
        room = self.cap - self.loads[b]
        best = (0, 0, 0)
        out_sizes, out_codes = self._outs(b)
        self.work += len(out_sizes)
        for k, out_size in enumerate(out_sizes):
            pos = bisect_right(keys, out_size + room) - 1
            if pos < 0:
                continue
            gain = keys[pos] - out_size
            if gain > best[0]:
                best = (gain, out_codes[k], codes[pos])
                if gain == room:
                    break
        return best

    def _apply(self, b: int, gain: int, out_code: int, in_code: int) -> None:
        items = self.bins[b]
        out = self._decode(out_code)
        into = self._decode(in_code)
        for i in out:
            items.remove(i)
        items.extend(into)
        self.loads[b] += gain
        self.outs[b] = None
        for i in into:
            self.free.remove(i)
        self.free.extend(out)

    def descend(self, budget: int) -> None:
        """Apply load-increasing exchanges until none is left (each lowers the free weight)."""
        while self.free and self.work < budget:
            keys, codes = self._free_sums()
            moved = False
            loads = self.loads
            for b in sorted(range(len(self.bins)), key=lambda b: (loads[b], b)):
                gain, out_code, in_code = self._best_move(b, keys, codes)
                if not gain:
                    continue
                self._apply(b, gain, out_code, in_code)
                moved = True
                if not self.free or self.work >= budget:
                    return
                keys, codes = self._free_sums()
            if not moved:
                return

    def run(self, budget: int) -> bool:
        """Descend, then kick (empty random bins into the pool, descend again) while the
        budget lasts, keeping a kick unless it leaves more free weight. True on success."""
        self.descend(budget)
        weight = self.free_weight()
        n_bins = len(self.bins)
        while self.free and self.work < budget:
            saved = ([list(b) for b in self.bins], list(self.loads), list(self.free))
            for _ in range(min(_KICK_BINS, n_bins)):
                victim = self.rng.randrange(n_bins)
                self.free.extend(self.bins[victim])
                self.bins[victim] = []
                self.loads[victim] = 0
                self.outs[victim] = None
            self.work += n_bins + len(self.sizes)
            self.descend(budget)
            new_weight = self.free_weight()
            if new_weight <= weight:
                weight = new_weight
            else:
                self.bins, self.loads, self.free = saved
                self.outs = [None] * n_bins
        return not self.free


def reduce_bins(
    sizes: Sequence[int], cap: int, bins: list[list[int]], target: int,
    budget: int | None = None,
) -> list[list[int]]:
    """Try to repack ``bins`` into fewer bins, down to ``target``, by exchange local search.

    One bin at a time: the least-loaded bin is emptied into a pool of free items, and an
    iterated local search tries to place the pool into the remaining bins. Its descent
    applies, bin by bin, the exchange of up to two packed items for up to three free ones
    that raises the bin's load the most (so the free weight strictly falls and free items
    get smaller until they fit the gaps); when it stalls, a kick empties a random bin into
    the pool and descends again, and the kick is kept unless the free weight grew
    (non-improving rounds are accepted, which lets the search cross plateaus). The first
    count that cannot be reached within the budget ends the search.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens.
        bins: a packing that respects ``cap`` (not modified).
        target: stop once this many bins remain (e.g. a lower bound).
        budget: bound on move evaluations over the whole call (default ``20 n + 100000``),
            which bounds the time on any input; the search is deterministic (its random
            kicks use a seed derived from the input).

    Returns:
        A packing with at most ``len(bins)`` bins, each within ``cap``, exact cover of the
        same items.

    Complexity: O(budget) evaluations, each a bisection in the sorted sums of the pool,
    plus O(n) per kick; in practice a few milliseconds per 1,000 items.

    References:
        J. Levine and F. Ducatelle, "Ant colony optimization and local search for bin
        packing and cutting stock problems", JORS 55 (2004) (the exchange moves);
        K. Fleszar and K. S. Hindi, "New heuristics for one-dimensional bin-packing",
        Computers & OR 29 (2002) (perturbation of a fixed-count packing);
        M. Buljubasic and M. Vasquez, "Consistent neighborhood search for one-dimensional
        bin packing and two-dimensional vector packing", Computers & OR 76 (2016) (search
        over partial packings with a pool of unplaced items).
    """
    current = [list(b) for b in bins if b]
    n = sum(len(b) for b in current)
    limit = 20 * n + 100_000 if budget is None else budget
    spent = 0
    seed = (n * 1_000_003 + cap * 7919 + sum(sizes)) & 0xFFFFFFFF
    while len(current) > max(target, 1) and spent < limit:
        loads = [sum(sizes[i] for i in b) for b in current]
        victim = min(range(len(current)), key=lambda b: (loads[b], -b))
        trial = [list(b) for j, b in enumerate(current) if j != victim]
        search = _FixedCount(sizes, cap, trial, list(current[victim]), seed + len(current))
        ok = search.run(limit - spent)
        spent += search.work
        if not ok:
            break
        current = [b for b in search.bins if b]
    return current


def exact_packing(
    sizes: Sequence[int], cap: int, count: int, budget: int = 50_000
) -> tuple[list[list[int]] | None, bool]:
    """Depth-first search for a packing of ``sizes`` into at most ``count`` bins of ``cap``.

    Items go in decreasing size, each into every bin it fits in turn; bins with the same
    load are tried once per item (they are interchangeable), and a branch stops when the
    room no remaining item can use (bins whose free space is below the smallest item left)
    leaves too little for the items left. Exhausting the search proves that no packing
    into ``count`` bins exists: a lower bound of ``count + 1`` bins.

    Args:
        sizes: item sizes in tokens, each in ``0..cap``.
        cap: bin capacity in tokens (>= 1).
        count: bins available (>= 1).
        budget: items placed over the whole search before it gives up.

    Returns:
        ``(packing, False)`` with at most ``count`` non-empty bins (an exact cover of the
        items) when one is found; ``(None, True)`` when none exists; ``(None, False)``
        when the budget ran out first.

    Complexity: O(budget * count).

    References:
        S. Martello and P. Toth, "Knapsack problems" (1990), ch. 8 (branch and bound for
        bin packing: first-fit order, dominance of equal bins).
    """
    items = sorted((i for i in range(len(sizes)) if sizes[i] > 0), key=lambda i: (-sizes[i], i))
    zeros = [i for i in range(len(sizes)) if sizes[i] == 0]
    if sum(sizes[i] for i in items) > count * cap:
        return None, True
    loads = [0] * count
    where = [0] * len(items)
    left = [0] * (len(items) + 1)  # tokens of items[j:]
    for j in range(len(items) - 1, -1, -1):
        left[j] = left[j + 1] + sizes[items[j]]
    spent = 0

    def place(j: int) -> bool | None:
        """True: all placed; False: no way from here; None: the budget ran out."""
        nonlocal spent
        if j == len(items):
            return True
        size, smallest = sizes[items[j]], sizes[items[-1]]
        usable = sum(cap - load for load in loads if cap - load >= smallest)
        if usable < left[j]:
            return False
        tried: set[int] = set()
        for b in range(count):
            if loads[b] + size > cap or loads[b] in tried:
                continue
            tried.add(loads[b])
            spent += 1
            if spent > budget:
                return None
            loads[b] += size
            where[j] = b
            found = place(j + 1)
            loads[b] -= size
            if found is not False:
                return found
        return False

    outcome = place(0)
    if outcome is not True:
        return None, outcome is False
    bins: list[list[int]] = [[] for _ in range(count)]
    for j, i in enumerate(items):
        bins[where[j]].append(i)
    packing = [b for b in bins if b]
    if zeros:
        if packing:
            packing[0].extend(zeros)
        else:
            packing = [zeros]
    return packing, False


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
    result = [list(b) for b in bins]
    n_items = sum(len(b) for b in result)
    if not len(result) <= count <= n_items:
        raise ValueError(f"cannot split {len(result)} bins of {n_items} items into {count}")
    # Splittable bins keyed by (-load, index): the heaviest first, the lowest index on ties.
    heap = [(-sum(sizes[i] for i in b), k) for k, b in enumerate(result) if len(b) > 1]
    heapq.heapify(heap)
    while len(result) < count:
        heaviest = heapq.heappop(heap)[1]
        ordered = sorted(result[heaviest], key=lambda i: (-sizes[i], i))
        first: list[int] = []
        second: list[int] = []
        load_first = load_second = 0
        for position, i in enumerate(ordered):
            # The two largest items seed the halves so both stay non-empty.
            if position == 0 or (position > 1 and load_first <= load_second):
                first.append(i)
                load_first += sizes[i]
            else:
                second.append(i)
                load_second += sizes[i]
        result[heaviest] = first
        result.append(second)
        for k, load in ((heaviest, load_first), (len(result) - 1, load_second)):
            if len(result[k]) > 1:
                heapq.heappush(heap, (-load, k))
    return result
