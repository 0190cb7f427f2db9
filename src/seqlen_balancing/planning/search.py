"""The smallest micro-batch count one rank reaches under its rule, and its packing (no torch).

:func:`search_count` runs the packers of :data:`PACKERS` in order, each declaring the
rules it serves, and stops as soon as the count meets the lower bound, which it strengthens
step by step (cheap bounds first, the stronger ones only where a gap remains). For summed
costs without a sample limit: best-fit, closing-fit and minimum-bin-slack decreasing, the
exchange search on what the Martello-Toth reduction leaves, the exhaustive search on few
items, and verl 0.9.1's own construction (Karmarkar-Karp at the counts verl's rule could
stop at) so the count is never above verl's. For a sample limit: best fit, row filling and
seeded randomized best-fit restarts under the rule, the plain search's plan cut to the
limit, then the exchange and exact searches with the limit.
For padded rows: the sorted rule (optimal on one-sided rows), best fit and its restarts.
On batches of more than :data:`_SEARCH_ALWAYS` items only the O(n log n) packers run (and
Karmarkar-Karp within its budget), so the search's work grows with n, not with the gap; the
result then keeps the count it stopped at and the cheap bound it stopped above.
:func:`_set_aside` sets the over-cap items of ``over_cap="alone"`` apart first and plans
the rest under the same rule (:meth:`~seqlen_balancing.planning.rule.Rule.restrict`).
Both return a frozen :class:`Count`; :mod:`seqlen_balancing.planning.planner` composes it into
its analysis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from seqlen_balancing.planning.bounds import BOUND_NAMES
from seqlen_balancing.planning.differencing import _capped_largest_differencing
from seqlen_balancing.planning.packing import (
    _closing_fit,
    best_fit,
    minimum_bin_slack,
    randomized_best_fit,
    row_filling,
    split,
)
from seqlen_balancing.planning.partition import roundup_divisible
from seqlen_balancing.planning.repack import exact_packing, repack
from seqlen_balancing.planning.rule import Rule, fewest_sorted, rule_bound, sorted_cut

__all__ = ["EXHAUSTIVE", "PACKERS", "Aside", "Count", "Packer", "search_count"]

#: Karmarkar-Karp costs O(n * count); above this product the capacity-aware LPT packing
#: (O(n log count)) balances alone. 2**22 covers 2,048 samples into 2,048 micro-batches
#: and 16,384 into 256.
_KK_BUDGET = 1 << 22

#: Largest number of items the exhaustive search (:func:`_exact`) is tried on.
_EXACT_GROUPS = 40

#: Items the exhaustive search may place per count tried before it gives up.
_EXACT_BUDGET = 50_000

#: Batches of up to this many items run every packer while a gap remains; on larger ones
#: only the packers whose work stays O(n log n) run (best fit, closing fit, row filling,
#: the restarts; verl's Karmarkar-Karp where :data:`_KK_BUDGET` lets it), and the bound is
#: the cheap one: the exchange search costs O(micro-batches) per step on top of its budget
#: and gains little there (issues 33 and 45: at 10^6 CHAMP lengths and cap 16k it and the
#: stronger bounds took 2.2 s of 5.6 to close 3 of the 73 micro-batches above L2).
_SEARCH_ALWAYS = 1 << 16

#: The cheap bounds (L2, cardinality, matching): evaluated before any packer after the first.
_CHEAP_LEVEL = 2
_CHEAP = BOUND_NAMES[_CHEAP_LEVEL]

#: ``bound_name`` of a lower bound proven by the exhaustive search.
EXHAUSTIVE = "exhaustive search"


@dataclass(frozen=True)
class Count:
    """What the count search found under one rule: the fewest micro-batches reached, a
    packing with that many (items by index), and the lower bound they are held to with
    its name. With over-cap items set aside (:func:`_set_aside`): ``over``, one
    micro-batch each, and ``rest``, the count of the others."""

    min_count: int
    lower_bound: int
    bound_name: str
    packing: list[list[int]]
    over: list[int] = field(default_factory=list)
    rest: Aside | None = None


@dataclass(frozen=True)
class Aside:
    """The items left once the over-cap ones are set aside: their indices among all
    items, their rule (renumbered), workloads and count."""

    index: list[int]
    rule: Rule
    workloads: list[int]
    count: Count


@dataclass
class _Search:
    """The state of one count search: the rule, the items' workloads (Karmarkar-Karp's),
    the divisor verl's counts step by, the best packing so far and the bound it is held
    to (cheap bounds first: ``level`` is the last of ``BOUND_NAMES`` evaluated)."""

    rule: Rule
    workloads: list[int]
    divisor: int
    floor: int | None
    packing: list[list[int]] = field(default_factory=list)
    lower: int = 0
    name: str = ""
    level: int = -1

    def done(self) -> bool:
        return bool(self.packing) and len(self.packing) <= self.lower

    def hold(self, upto: str) -> None:
        """Evaluate the bounds up to ``upto`` (once per level) and the floor."""
        level = BOUND_NAMES.index(upto)
        if level <= self.level:
            return
        self.level = level
        wanted = 1 if self.floor is None else self.floor
        # At or below the floor, no bound can change the count: L2 alone is enough.
        enough = len(self.packing) if wanted < len(self.packing) else 0
        bound, name = rule_bound(self.rule, enough, upto)
        if wanted > bound:
            bound, name = wanted, ("one" if self.floor is None else "min_num_micro_batch")
        self.lower, self.name = bound, name

    def offer(self, found: list[list[int]] | None, ties: bool) -> None:
        """Keep ``found`` when it has fewer micro-batches (or as many, with ``ties``)."""
        if found is None:
            return
        if not self.packing or len(found) < len(self.packing) or (ties and len(found) == len(self.packing)):
            self.packing = found


@dataclass(frozen=True)
class Packer:
    """One step of the count search.

    Attributes:
        name: what it is.
        serves: which rules it packs correctly and usefully.
        run: its packing of the search's items (``None``: nothing found).
        upto: the bounds evaluated before it runs (it runs only while a gap remains).
        ties: a packing with as many micro-batches as the best so far replaces it.
        large: whether a costly packer (``upto`` beyond the cheap bounds) runs on a batch
            above :data:`_SEARCH_ALWAYS` items (``None``: it does not).
    """

    name: str
    serves: Callable[[Rule], bool]
    run: Callable[[_Search], list[list[int]] | None]
    upto: str = "matching"
    ties: bool = False
    large: Callable[[_Search], bool] | None = None


def _cut_summed(search: _Search) -> list[list[int]]:
    """The count search of the same items without the sample limit (summed costs alone),
    each of its micro-batches then cut into runs of at most ``limit`` rows: a plan under
    the limit, as good as the plain search whenever its micro-batches hold few rows."""
    rule = search.rule
    plain = search_count(Rule.sums(rule.sizes, rule.cap), search.workloads, search.divisor, None)
    by_rows = Rule.sums(rule.rows, rule.limit or 0)  # a run fits when its rows do
    return [run for items in plain.packing for run in sorted_cut(by_rows, items)]


def _exact(search: _Search) -> list[list[int]]:
    """The best packing and a proven bound: counts from the bound up to one below the
    packing's are searched exhaustively (:func:`~seqlen_balancing.planning.repack.exact_packing`)
    within :data:`_EXACT_BUDGET` placed items per count; a count whose search is exhausted
    without a packing raises the bound above it, and the first count that runs out of
    budget ends the search."""
    for count in range(search.lower, len(search.packing)):
        found, impossible = exact_packing(search.rule, count, _EXACT_BUDGET)
        if found is not None:
            return found
        if not impossible:
            break  # out of budget: nothing proven beyond what is known
        search.lower, search.name = count + 1, EXHAUSTIVE
    return search.packing


#: The count search's steps, in order. The first that serves a rule gives the first
#: packing; each later one runs only while the count is above the bound.
PACKERS = (
    Packer("sorted rule", lambda rule: rule.is_padded, lambda s: fewest_sorted(s.rule)),
    Packer("best fit decreasing", lambda rule: True, lambda s: best_fit(s.rule)),
    Packer("row filling", lambda rule: not rule.is_padded and rule.limit is not None,
           lambda s: row_filling(s.rule)),
    Packer("randomized best fit", lambda rule: not rule.plain,
           lambda s: randomized_best_fit(s.rule, s.lower, s.packing)),
    Packer("the summed plan cut to the limit", lambda rule: not rule.is_padded and rule.limit is not None,
           lambda s: _cut_summed(s)),
    Packer("closing fit decreasing", lambda rule: rule.plain,
           lambda s: _closing_fit(s.rule.sizes, s.rule.cap, s.rule.by_size)),
    # Bins filled exactly, one at a time: on few-items-per-bin batches with little slack
    # (CHAMP x10 at 32,768) this reaches L where best fit and the exchange search miss,
    # and on a tie its waste sits in the last bins, which the search empties first.
    Packer("minimum bin slack", lambda rule: rule.plain and rule.n <= 4096,
           lambda s: minimum_bin_slack(s.rule.sizes, s.rule.cap), ties=True),
    Packer("exchange search", lambda rule: not rule.is_padded,
           lambda s: _close_gap(s.rule, s.packing, s.lower), upto=BOUND_NAMES[-1], ties=True),
    # Few items: an exhaustive search finds the optimum, or proves the bound too low.
    Packer("exact search", lambda rule: not rule.is_padded and rule.n <= _EXACT_GROUPS, _exact,
           upto=BOUND_NAMES[-1]),
    # verl's own construction at every count it could stop at below ours: never more
    # micro-batches than verl's rule (see plan_micro_batches).
    Packer("Karmarkar-Karp", lambda rule: not rule.is_padded,
           lambda s: _verl_candidates(s), upto=BOUND_NAMES[-1],
           large=lambda s: s.rule.n * max(s.lower, 1) <= _KK_BUDGET),
)


def search_count(rule: Rule, workloads: list[int], divisor: int, floor: int | None) -> Count:
    """Smallest count reached under ``rule``, with its packing and the bound it is held
    to: the :data:`PACKERS` that serve the rule, in order, each only while the count is
    above the bound (evaluated up to the packer's ``upto`` first), so a batch proven
    optimal early costs nothing more. A packing below ``L`` (set by the ``floor``,
    ``min_num_micro_batch``) is split up to ``L``. ``workloads`` and ``divisor``
    (``num_batches_divided_by``) are verl's Karmarkar-Karp's."""
    search = _Search(rule, workloads, divisor, floor)
    if floor is not None and floor >= rule.n and all(rule.fits_alone(g) for g in range(rule.n)):
        # every item alone is the only plan with that many micro-batches: no packer needed
        search.packing = [[g] for g in range(rule.n)]
    for packer in PACKERS if not search.packing else ():
        if not packer.serves(rule):
            continue
        if search.packing:
            if search.done():
                break  # met the bound already evaluated: no stronger bound needed
            if BOUND_NAMES.index(packer.upto) > _CHEAP_LEVEL:  # a costly bound
                search.hold(_CHEAP)
                if search.done():
                    break
                if rule.n > _SEARCH_ALWAYS and not (packer.large and packer.large(search)):
                    continue  # its work (or its bounds') grows faster than the batch
            search.hold(packer.upto)
            if search.done():
                break
        search.offer(packer.run(search), packer.ties)
    search.hold(_CHEAP)  # the cheap bounds, if no second packer ran
    packing = search.packing
    if len(packing) < search.lower:
        packing = split(rule, packing, search.lower)
    return Count(len(packing), search.lower, search.name, packing)


def _set_aside(
    rule: Rule, workloads: list[int], divisor: int, over: list[int], floor: int | None
) -> Count:
    """``over_cap="alone"``: the over-cap items take one micro-batch each (in every plan,
    so they add one each to the count and to the lower bound); the others are counted as
    a batch of their own under the same rule, with the floor that remains."""
    chosen = set(over)
    index = [g for g in range(rule.n) if g not in chosen]
    rest_rule, rest_workloads = rule.restrict(index), [workloads[g] for g in index]
    left = None if floor is None or floor - len(over) < 1 else floor - len(over)
    rest = search_count(rest_rule, rest_workloads, divisor, left) if index else Count(0, 0, "one", [])
    lower, name = len(over) + rest.lower_bound, rest.bound_name
    if floor is not None and floor > lower:
        lower, name = floor, "min_num_micro_batch"
    packing = [[g] for g in over] + [[index[j] for j in b] for b in rest.packing]
    return Count(len(over) + rest.min_count, lower, name, packing, over,
                 Aside(index, rest_rule, rest_workloads, rest))


def _verl_candidates(search: _Search) -> list[list[int]] | None:
    """Karmarkar-Karp on the items' workloads (verl 0.9.1's construction, identical
    partitions) at each count from the search's bound up to one below its packing's that
    verl's rule could stop at (the multiples of ``num_batches_divided_by``); the first that
    fits the rule, or ``None``. At most ``(upper - lower) / num_batches_divided_by + 1`` tries, each
    O(n log n + n count), and none where ``n * count`` exceeds :data:`_KK_BUDGET`."""
    step = search.divisor
    tried = (_fitting_kk(search.rule, search.workloads, count)
             for count in range(roundup_divisible(search.lower, step), len(search.packing), step))
    return next((kk for kk in tried if kk is not None), None)


def _fitting_kk(rule: Rule, workloads: list[int], count: int) -> list[list[int]] | None:
    """verl's Karmarkar-Karp partition of the items into ``count`` micro-batches if it
    keeps every micro-batch within the rule (and ``n * count <= _KK_BUDGET``), else
    ``None``. The merge stops early once a part's summed cost is over the cap, which
    every rule implies (a padded footprint is at least the rows' own)."""
    if rule.n * count > _KK_BUDGET or count > rule.n:
        return None
    found = _capped_largest_differencing(workloads, count, rule.sizes, rule.cap)
    if found is None or rule.plain or all(rule.fits(part) for part in found):
        return found
    return None


def _close_gap(rule: Rule, packing: list[list[int]], lower: int) -> list[list[int]]:
    """The exchange local search towards ``lower``. For summed costs without a limit, on
    the items the Martello-Toth reduction leaves (:func:`~seqlen_balancing.planning.bounds.dominant_bins`:
    bins some optimal packing contains, so nothing is lost), from the best of the given
    packing restricted to them and fresh packings of them (made in turn, none after one
    that meets the bound); the reduction's bins are added back. With a sample limit
    (where the reduction's pairs may hold too many rows), on the whole packing."""
    fixed, rest = rule.dominant if rule.plain else ([], [])
    if not fixed:
        return repack(rule, packing, target=lower)
    fixed, rest = [list(b) for b in fixed], list(rest)  # the rule's own: not changed here
    sub = rule.restrict(rest)
    if not any(sub.sizes):
        fixed[0].extend(rest)  # zero-length items fit anywhere
        return fixed
    target = max(1, lower - len(fixed))  # no packing of the rest has fewer (fixed: optimal)

    def restricted() -> list[list[int]]:
        position = {g: j for j, g in enumerate(rest)}  # each item's place among the rest
        return [b for b in ([position[g] for g in b if g in position] for b in packing) if b]

    makers: list[Callable[[], list[list[int]]]] = [
        lambda: best_fit(sub),
        lambda: _closing_fit(sub.sizes, sub.cap, sub.by_size),
        lambda: minimum_bin_slack(sub.sizes, sub.cap) if sub.n <= 4096 else [],
        restricted,
    ]
    best: list[list[int]] = []
    for make in makers:  # the fewest, the earliest on a tie; one at the target ends it
        found = make()
        if found and (not best or len(found) < len(best)):
            best = found
        if best and len(best) <= target:
            break
    best = repack(sub, best, target=target)
    if len(fixed) + len(best) > len(packing):  # never seen on CHAMP; kept as a safety net
        return repack(rule, packing, target=lower)
    return fixed + [[rest[j] for j in b] for b in best]
