"""Fewer micro-batches from a packing under a summed-cost rule (no torch).

The exchange local search (:func:`reduce_bins`, :func:`repack`) and the exact search
(:func:`exact_packing`). Both take a :class:`~seqlen_balancing.planning.rule.Rule` of summed costs,
with or without a sample limit: every micro-batch they hold stays within the cap and, with
a limit, within its rows.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate, combinations

from seqlen_balancing.planning.packing import _with_zeros
from seqlen_balancing.planning.rule import Rule

__all__ = ["exact_packing", "reduce_bins", "repack"]

_MAX_FREE_PAIRS = 64  # free pools up to this size also offer pairs of items
_MAX_FREE_TRIPLES = 16  # ... and triples
_MAX_OUT_PAIRS = 12  # bins with up to this many items may give up two at once
_KICK_BINS = 2  # bins emptied into the pool per kick
_ROW_TRIES = 8  # with a sample limit: smaller free sums tried when the largest has too many rows


class _FixedCount:
    """A packing into a fixed number of bins plus a pool of unplaced ("free") items.

    Every bin respects the cap at all times; the search tries to empty the free pool.
    ``work`` counts elementary steps (bisections, subset sums, copied items) so that the
    search is bounded by a deterministic budget rather than by wall-clock time. A subset
    of up to three items is encoded as one int (digits ``i + 1`` in base ``n + 1``), so
    the search allocates no tuples that the cyclic garbage collector would have to scan.
    With a sample limit every bin also keeps its rows within the limit: an exchange whose
    largest free sum brings too many rows tries the next smaller sums (up to
    ``_ROW_TRIES``).
    """

    def __init__(self, rule: Rule, bins: list[list[int]], free: list[int], seed: int) -> None:
        sizes = self.sizes = rule.sizes
        self.rule = rule
        self.base = len(sizes) + 1
        self.bins = bins
        self.loads = [sum(map(sizes.__getitem__, b)) for b in bins]
        self.rows = [sum(map(rule.rows.__getitem__, b)) for b in bins] if rule.limit is not None else []
        self.free = free
        self.work = 0
        self.rng = random.Random(seed)
        # Per bin: sorted-by-nothing parallel lists (sizes, codes) of the subsets it may
        # give up, or None when stale.
        self.outs: list[tuple[list[int], list[int]] | None] = [None] * len(bins)

    def _decode(self, code: int) -> list[int]:
        items = []
        while code:
            code, digit = divmod(code, self.base)
            items.append(digit - 1)
        return items

    def _rows_of(self, code: int) -> int:
        return sum(map(self.rule.rows.__getitem__, self._decode(code)))

    def _free_sums(self) -> tuple[list[int], list[int]]:
        """Sorted distinct sums of 1-3 free items (pairs and triples only for small pools),
        with the code of one subset per sum."""
        sizes, free, base = self.sizes, self.free, self.base
        by_sum: dict[int, int] = {}
        for i in free:
            by_sum.setdefault(sizes[i], i + 1)
        f = len(free)
        if f <= _MAX_FREE_PAIRS:
            for a, b in combinations(free, 2):
                by_sum.setdefault(sizes[a] + sizes[b], (a + 1) * base + b + 1)
            self.work += f * f // 2
        if f <= _MAX_FREE_TRIPLES:
            for a, b, c in combinations(free, 3):
                by_sum.setdefault(sizes[a] + sizes[b] + sizes[c], ((a + 1) * base + b + 1) * base + c + 1)
            self.work += f * f * f // 6
        keys = sorted(by_sum)
        self.work += f + len(keys)
        return keys, [by_sum[k] for k in keys]

    def _outs(self, b: int) -> tuple[list[int], list[int]]:
        outs = self.outs[b]
        if outs is None:
            sizes, base = self.sizes, self.base
            items = self.bins[b]
            out_sizes = [0, *(sizes[i] for i in items)]
            out_codes = [0, *(i + 1 for i in items)]
            if len(items) <= _MAX_OUT_PAIRS:
                for i, j in combinations(items, 2):
                    out_sizes.append(sizes[i] + sizes[j])
                    out_codes.append((i + 1) * base + j + 1)
            outs = self.outs[b] = (out_sizes, out_codes)
        return outs

    def _best_move(self, b: int, keys: list[int], codes: list[int]) -> tuple[int, int, int]:
        """Largest load increase ``(gain, out code, in code)`` of bin ``b`` by swapping up to
        two of its items for one to three free ones (gain 0: no move)."""
        room = self.rule.cap - self.loads[b]
        best = (0, 0, 0)
        if room == 0:
            # a full bin gains nothing: charge the same evaluations without making them
            m = len(self.bins[b])
            self.work += 1 + m + (m * (m - 1) // 2 if m <= _MAX_OUT_PAIRS else 0)
            return best
        out_sizes, out_codes = self._outs(b)
        self.work += len(out_sizes)
        spare = None if self.rule.limit is None else self.rule.limit - self.rows[b]
        for k, out_size in enumerate(out_sizes):
            pos = bisect_right(keys, out_size + room) - 1
            if pos >= 0 and spare is not None:
                pos = self._within_rows(pos, codes, spare + self._rows_of(out_codes[k]))
            if pos < 0:
                continue
            gain = keys[pos] - out_size
            if gain > best[0]:
                best = (gain, out_codes[k], codes[pos])
                if gain == room:
                    break
        return best

    def _within_rows(self, pos: int, codes: list[int], allowed: int) -> int:
        """The largest position at or below ``pos`` (among ``_ROW_TRIES``) whose free
        subset has at most ``allowed`` rows, or -1."""
        for at in range(pos, max(-1, pos - _ROW_TRIES), -1):
            self.work += 1
            if self._rows_of(codes[at]) <= allowed:
                return at
        return -1

    def _apply(self, b: int, gain: int, out_code: int, in_code: int) -> None:
        items = self.bins[b]
        out = self._decode(out_code)
        into = self._decode(in_code)
        for i in out:
            items.remove(i)
        items.extend(into)
        self.loads[b] += gain
        if self.rule.limit is not None:
            self.rows[b] += self._rows_of(in_code) - self._rows_of(out_code)
        self.outs[b] = None
        for i in into:
            self.free.remove(i)
        self.free.extend(out)

    def descend(self, budget: int) -> None:
        """Apply load-increasing exchanges until none is left (each lowers the free weight)."""
        while self.free and self.work < budget:
            keys, codes = self._free_sums()
            moved = False
            for b in sorted(range(len(self.bins)), key=self.loads.__getitem__):  # stable: ties by bin
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
        weight = sum(map(self.sizes.__getitem__, self.free))
        n_bins = len(self.bins)
        while self.free and self.work < budget:
            saved = ([list(b) for b in self.bins], list(self.loads), list(self.free), list(self.rows))
            for _ in range(min(_KICK_BINS, n_bins)):
                victim = self.rng.randrange(n_bins)
                self.free.extend(self.bins[victim])
                self.bins[victim] = []
                self.loads[victim] = 0
                if self.rows:
                    self.rows[victim] = 0
                self.outs[victim] = None
            self.work += n_bins + len(self.sizes)
            self.descend(budget)
            new_weight = sum(map(self.sizes.__getitem__, self.free))
            if new_weight <= weight:
                weight = new_weight
            else:
                self.bins, self.loads, self.free, self.rows = saved
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
    return repack(Rule.sums(list(sizes), cap), bins, target, budget)


def repack(
    rule: Rule, bins: list[list[int]], target: int, budget: int | None = None
) -> list[list[int]]:
    """:func:`reduce_bins` under a summed-cost ``rule``, its sample limit included: every
    bin of the result fits ``rule``.

    Args:
        rule: a summed-cost :class:`~seqlen_balancing.planning.rule.Rule` (with or without a limit).
        bins: a packing that fits ``rule`` (not modified).
        target: stop once this many bins remain.
        budget: as in :func:`reduce_bins`.

    Returns:
        A packing with at most ``len(bins)`` bins, each fitting ``rule``, exact cover of
        the same items.

    Complexity: as :func:`reduce_bins`.
    """
    sizes = rule.sizes
    current = [list(b) for b in bins if b]
    n = sum(len(b) for b in current)
    limit = 20 * n + 100_000 if budget is None else budget
    spent = 0
    seed = (n * 1_000_003 + rule.cap * 7919 + sum(sizes)) & 0xFFFFFFFF
    while len(current) > max(target, 1) and spent < limit:
        loads = [sum(map(sizes.__getitem__, b)) for b in current]
        victim = min(range(len(current)), key=lambda b: (loads[b], -b))
        trial = [list(b) for j, b in enumerate(current) if j != victim]
        search = _FixedCount(rule, trial, list(current[victim]), seed + len(current))
        ok = search.run(limit - spent)
        spent += search.work
        if not ok:
            break
        current = [b for b in search.bins if b]
    return current


def exact_packing(
    rule: Rule, count: int, budget: int = 50_000
) -> tuple[list[list[int]] | None, bool]:
    """Depth-first search for a packing into at most ``count`` bins under a summed-cost
    ``rule`` (its cap and, when it has one, its sample limit).

    Items go in decreasing size, each into every bin it fits in turn; bins with the same
    load (and rows) are tried once per item (they are interchangeable), and a branch stops
    when the room no remaining item can use (bins whose free space is below the smallest
    item left) leaves too little for the items left, or (with a limit) the rows left
    exceed the bins' spare rows. Exhausting the search proves that no packing into
    ``count`` bins exists: a lower bound of ``count + 1`` bins.

    Args:
        rule: a summed-cost :class:`~seqlen_balancing.planning.rule.Rule`; every item fits alone.
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

    Example:
        >>> exact_packing(Rule.sums([6, 5, 5, 4], 10), 2)
        ([[0, 3], [1, 2]], False)
        >>> exact_packing(Rule.sums([6, 5, 5, 4], 10, limit=1), 3)
        (None, True)
    """
    sizes, cap, limit, counts = rule.sizes, rule.cap, rule.limit, rule.rows
    # Zero-size items fit anywhere, unless they take rows under a limit.
    placed = [i for i in range(len(sizes)) if sizes[i] > 0 or limit is not None]
    items = sorted(placed, key=lambda i: (-sizes[i], i))
    zeros = [i for i in range(len(sizes)) if sizes[i] == 0 and limit is None]
    if sum(sizes[i] for i in items) > count * cap:
        return None, True
    spare = 0 if limit is None else limit
    loads, rows = [0] * count, [0] * count
    where = [0] * len(items)
    # tokens and rows of items[j:], for j in 0..len(items)
    left = list(accumulate(reversed([sizes[i] for i in items]), initial=0))[::-1]
    rows_left = list(accumulate(reversed([counts[i] for i in items]), initial=0))[::-1]
    if limit is not None and rows_left[0] > count * limit:
        return None, True
    spent = 0

    def place(j: int) -> bool | None:
        """True: all placed; False: no way from here; None: the budget ran out."""
        nonlocal spent
        if j == len(items):
            return True
        size, smallest, k = sizes[items[j]], sizes[items[-1]], counts[items[j]]
        usable = sum(cap - load for load in loads if cap - load >= smallest)
        if usable < left[j] or (limit is not None and count * spare - sum(rows) < rows_left[j]):
            return False
        tried: set[int] = set()
        for b in range(count):
            key = loads[b] if limit is None else loads[b] * (spare + 1) + rows[b]
            if loads[b] + size > cap or key in tried or (limit is not None and rows[b] + k > limit):
                continue
            tried.add(key)
            spent += 1
            if spent > budget:
                return None
            loads[b] += size
            rows[b] += k
            where[j] = b
            found = place(j + 1)
            loads[b] -= size
            rows[b] -= k
            if found is not False:
                return found
        return False

    outcome = place(0)
    if outcome is not True:
        return None, outcome is False
    bins: list[list[int]] = [[] for _ in range(count)]
    for j, i in enumerate(items):
        bins[where[j]].append(i)
    return _with_zeros([b for b in bins if b], zeros), False
