"""The count and the order chosen by the step, not by the rank: the lock-step choice of a DP group (no torch).

DP ranks run their micro-batches in lock-step (:mod:`seqlen_balancing.lockstep`): a step
takes ``sum over k of max over ranks r of W(r, k) + K x fixed cost``, the fixed cost
``micro_batch_overhead x 24576 x max_token_len``. Before the one all_reduce(MAX) of
:mod:`seqlen_balancing.agreement`, each rank plans its batch at a *window* of
:data:`WINDOW` counts, ``c0 = roundup(own count, d)`` and ``c0 + d`` (``d`` =
``num_batches_divided_by`` or 1), where ``c0 + d <= PROFILE``, and writes, for each count
``c``, in slot ``(c / d) mod WINDOW``:

* ``c`` and ``-c``: after the MAX a slot is *exact* (every rank planned that very count)
  when the two agree;
* the *profile* of its plan at ``c``: its micro-batches' workloads, heaviest first, zeros
  after them (:data:`PROFILE` values);
* the profile of verl's own plan at ``c`` (zeros where it does not fit).

It also writes, at absolute place ``c / d - 1`` of :data:`FLAGS` slots, whether verl's
Karmarkar-Karp partition at ``c`` fits the cap on this rank (:data:`FITS` 0), not known
(:data:`UNKNOWN` 1, the idle value: not tried) or does not fit (:data:`NOT_FIT` 2), for
the :data:`SPAN` counts ``c0, c0 + d, ..., c0 + (SPAN - 1) d`` (at most ``FLAGS x d`` and
its groups), where verl 0.9.1 plans the same problem (lengths as costs summed under the
cap: no alignment, sample limit, padded footprint, custom costs or workloads; elsewhere no
flags, so ``V`` is not known and the plans are the library's); and its total workload.
After the MAX a count's flag is FITS where it fits on
every rank, NOT_FIT where it does not on some rank. Cost: a failing Karmarkar-Karp merge
stops at the first part over the cap, and a fit is proven without running it where
``W + (c - 1) w_max <= c x 24576 x cap`` (``W`` the rank's total workload, ``w_max`` its
heaviest group's: largest differencing keeps the parts within ``w_max`` of each other, and
a part of workload ``w`` holds at most ``w / 24576`` tokens; custom workloads or costs,
padded and sample-limited rules always run it).

Lined up heaviest with heaviest, which is the order every rank then uses, the element-wise
MAX of the sorted profiles is ``max over r of W(r, k)`` at each index ``k``: the lock-step
time of the group's plans at ``c`` is the sum of the reduced profile, exactly, and no other
order of the same micro-batches is faster (the ``j``-th slowest index waits for at least
every rank's ``j``-th heaviest micro-batch).

**verl's count** ``V`` (verl stops at the first count from its start up where every rank's
Karmarkar-Karp fits) is at least the agreed count ``K`` (the largest needed, rounded up to
``d``; the count guarantee). The flags from ``K`` up give ``low``: the first count not
flagged NOT_FIT, so ``V >= low``; ``V = low`` exactly when ``low`` is flagged FITS
(:func:`verl_facts`); ``low`` above the fewest groups: verl raises on the step.

**The choice** (:func:`choose`, the same on every rank). The candidates are the library's
plans at ``K`` and ``K + d``, each where its slot is exact and it is at most ``low`` (so at
most ``V``: the count guarantee holds); the fastest in the model wins, the smaller count on
a tie. Then, in this order:

1. verl raises on the step: the candidate (or the library's plans at ``K``);
2. ``V`` known and its slot exact: verl's plans' time is known exactly; they run where
   strictly faster, else the candidate;
3. the candidate's time is at most ``max over r of total workload(r) + low x fixed cost``,
   below which no plan of verl's runs (its slowest rank does all its work, in at least
   ``low`` micro-batches): the candidate;
4. ``V`` known: verl's own plans at ``V``, each rank's Karmarkar-Karp partition there
   (computed before the agreement, or after it where its fit was proven: it fits, no error
   can follow), in verl's order, so the step time is verl's;
5. else the candidate (or the library's plans at ``K``): the only case not proven.

Every rank then orders its micro-batches heaviest first and, with
``use_dynamic_bsz_balance``, in verl's pipeline order (lightest at both ends), a
permutation of the sorted positions that is the same on every rank, so the lined-up time
stands.

**Never worse than verl 0.9.1, third axis.** verl orders each rank's micro-batches by
workload (the same permutation of sorted positions on every rank), so its time is the
lined-up sum of its profiles. Wherever verl's count is known, that is
``V <= min over r of c0(r) + (SPAN - 1) d`` and ``V <= FLAGS x d`` (with ``d = 1``: at most
7 above the lightest rank's own count, at most 32), with Karmarkar-Karp run or proven on
every rank (``n x count <= 2**22``, no over-cap sample set apart), and wherever verl
raises, the chosen plans' modeled step time, fixed costs included, is at most that of
verl's plans of the same step on the same ranks, for any ``micro_batch_overhead``.
``tests/compat/test_step_time.py`` checks it against verl itself on every step it draws,
``benchmarks/never_slower.py`` on 900 steps of 8 ranks x 32 samples.

Complexity: two plans per rank before the agreement where the counts are at most
:data:`PROFILE` (one more than without the choice, which the agreed count then reuses);
Karmarkar-Karp at up to :data:`SPAN` counts, ``O(n log n + n c)`` each, fewer where a fit
is proven or a merge fails early; :data:`WINDOW` x (2 + 2 x :data:`PROFILE`) +
:data:`FLAGS` + 1 = 101 int64 values in the vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from seqlen_balancing.analysis import RankAnalysis
from seqlen_balancing.partition import WORKLOAD_LINEAR_COEF, roundup_divisible
from seqlen_balancing.planner import balanced_bins
from seqlen_balancing.search import _KK_BUDGET, _fitting_kk

__all__ = ["FLAGS", "PROFILE", "SPAN", "WINDOW", "Choice", "Window", "choose", "settle", "window_of"]

#: Counts each rank plans before the agreement.
WINDOW = 2
#: Values of one profile in the vector.
PROFILE = 16
#: Counts ``j x d`` (``j`` = 1 .. FLAGS) whose Karmarkar-Karp fit flags the vector carries.
FLAGS = 32
#: Counts from its own each rank flags (``c0`` to ``c0 + (SPAN - 1) x d``): not known after.
SPAN = 8
#: Karmarkar-Karp at a count: fits, not known, does not fit. Under the MAX: FITS where it
#: fits on every rank, NOT_FIT where it does not on some rank, else UNKNOWN.
FITS, UNKNOWN, NOT_FIT = 0, 1, 2
#: Largest value a profile entry carries (int64; a workload above it is clamped).
_CLAMP = (1 << 62) - 1


@dataclass
class Window:
    """What one rank planned before the agreement: for each count of its window (at most
    :data:`PROFILE`), its own plan (groups per micro-batch); for each count from its own
    up to ``FLAGS x d``, verl's Karmarkar-Karp partition (``None``: does not fit or not
    tried) and its flag (:data:`FITS`, :data:`UNKNOWN`, :data:`NOT_FIT`)."""

    counts: list[int]
    ours: dict[int, list[list[int]]]
    verl: dict[int, list[list[int]] | None]
    fits: dict[int, int] = field(default_factory=dict)


def window_of(result: RankAnalysis) -> Window | None:
    """This rank's plans at its window of counts and its fit flags (``None`` where no
    choice is made: an error, dummy micro-batches, equal rows). Cached on ``result``."""
    if result.window is not None:
        return result.window  # type: ignore[no-any-return]
    unplanned = result.rule is None and result._rest is None
    if result.error is not None or unplanned or result.dummy_micro_batches:
        return None
    if result.options is not None and result.options.equal_rows_per_micro_batch:
        return None  # the rows window plans at the agreed count (seqlen_balancing.rows)
    step = result.num_batches_divided_by
    first = roundup_divisible(result.needed_count, step)
    counts = [] if first + (WINDOW - 1) * step > PROFILE else [
        c for c in (first + i * step for i in range(WINDOW)) if c <= result.n_groups]
    last = min(FLAGS * step, result.n_groups, first + (SPAN - 1) * step) if _verl_rule(result) else 0
    flagged = range(first, last + 1, step)
    if not counts and not flagged:
        return None  # nothing the choice could use: the plan as without it, at no extra cost
    window = Window(counts, {}, {})
    proof = _fit_proof(result)
    budget = _KK_BUDGET // max(1, len(result.group_sizes))  # counts Karmarkar-Karp runs at
    for count in flagged:
        if count in counts or proof is None or not proof(count) or count > budget:
            window.fits[count] = _flag(result, count, window.verl)
        else:
            window.fits[count] = FITS  # proven without running it; settle runs it if chosen
    for count in counts:
        if count not in window.fits:  # not flagged (verl's rule does not apply): still a candidate
            _flag(result, count, window.verl)
        window.ours[count] = balanced_bins(result, count, window.verl.get(count))
    result.window = window
    return window


def _verl_rule(result: RankAnalysis) -> bool:
    """Whether verl 0.9.1 plans this rank's problem: lengths as costs, summed under the cap
    (no alignment, sample limit, padded footprint, custom costs or workloads). Elsewhere
    verl has no such plan to compare with: no flags, the library's plans (agreed options,
    so the same on every rank)."""
    options, rule = result.options, result.rule
    if options is None or rule is None or not rule.plain or result.custom_costs or result.custom_workloads:
        return False
    return options.pad_to_multiple_of == 1 and options.micro_batch_multiple_of in (None, 1)


def _fit_proof(result: RankAnalysis) -> Callable[[int], bool] | None:
    """A test that verl's Karmarkar-Karp partition fits at a count, without running it.

    Largest differencing merges a state's parts sorted heaviest first with the other's
    lightest first, so the spread (heaviest part minus lightest) of a merge is at most the
    larger of the two spreads, and of a single item its workload: every part of the final
    ``c`` parts is within ``w_max`` (the heaviest group) of the lightest, so the heaviest
    holds at most ``(W + (c - 1) w_max) / c`` of the total workload ``W``. Where every
    group's workload is at least ``24576`` times its cost (verl's ``24576*s + s**2``) and
    the rule is the summed cost under the cap, a part of workload at most ``24576 x cap``
    fits; the bound falls with ``c``, so once it holds it holds at every larger count.
    ``None`` where the premise does not hold (custom workloads or costs, padded, a sample
    limit, over-cap samples set apart)."""
    rule, sizes, loads = result.rule, result.group_sizes, result.group_workloads
    if rule is None or not rule.plain or result._rest is not None or not loads:
        return None
    if any(WORKLOAD_LINEAR_COEF * s > w for s, w in zip(sizes, loads, strict=True)):
        return None
    total, heaviest, room = sum(loads), max(loads), WORKLOAD_LINEAR_COEF * result.max_token_len
    return lambda c: total + (c - 1) * heaviest <= c * room


def _flag(result: RankAnalysis, count: int, partitions: dict[int, list[list[int]] | None]) -> int:
    """Karmarkar-Karp at ``count`` on this rank (its partition kept in ``partitions``):
    over-cap samples set apart (verl fails on them) or ``n x count`` over the
    Karmarkar-Karp budget: not known. A failing merge stops at the first part over the cap
    (:func:`_fitting_kk`)."""
    if result._rest is not None or len(result.group_sizes) * count > _KK_BUDGET:
        return UNKNOWN
    partitions[count] = found = _fitting_kk(result, count)
    return FITS if found is not None else NOT_FIT


def profile(bins: Sequence[Sequence[int]], workloads: Sequence[int]) -> list[int]:
    """The micro-batches' workloads, heaviest first."""
    return sorted((sum(workloads[g] for g in b) for b in bins), reverse=True)


def _padded(values: list[int]) -> list[int]:
    """A profile as its :data:`PROFILE` values: zeros past its end, each clamped to int64."""
    return [min(v, _CLAMP) for v in values] + [0] * (PROFILE - len(values))


def encode_window(vector: list[int], starts: dict[str, int], result: RankAnalysis) -> None:
    """Write this rank's window into ``vector`` (the agreement's slots named in ``starts``:
    ``window_count``, ``neg_window_count``, ``profile``, ``verl_profile``, ``fit_flags``,
    ``rank_workload``)."""
    window = window_of(result)
    if window is None:
        return
    loads = result.group_workloads
    step = result.num_batches_divided_by
    vector[starts["rank_workload"]] = min(sum(loads), _CLAMP)
    for count, flag in window.fits.items():
        vector[starts["fit_flags"] + count // step - 1] = flag
    for count in window.counts:
        i = (count // step) % WINDOW
        vector[starts["window_count"] + i] = count
        vector[starts["neg_window_count"] + i] = -count
        at = starts["profile"] + i * PROFILE
        vector[at : at + PROFILE] = _padded(profile(window.ours[count], loads))
        verl = window.verl.get(count)
        if verl is not None:
            at = starts["verl_profile"] + i * PROFILE
            vector[at : at + PROFILE] = _padded(profile(verl, loads))


@dataclass(frozen=True)
class Choice:
    """The DP group's choice: the count, and whether every rank runs verl's own
    Karmarkar-Karp partition at it (else the library's plans); ``time``: the modeled step
    time of the choice (workload units, fixed costs included) where the vector gives it;
    ``proven``: the choice's modeled time is known to be at most verl's plans' (or verl
    fails on the step)."""

    count: int
    verl: bool = False
    time: float | None = None
    proven: bool = False


def verl_facts(reduced: Sequence[int], starts: dict[str, int], agreed: int, fewest: int,
               step: int) -> tuple[int, bool]:
    """What the reduced fit flags say of verl's count ``V`` (at least ``agreed``):
    ``(low, exact)``, ``V >= low``, and ``V == low`` when ``exact``; ``low > fewest``:
    verl raises on the step (no count fits on every rank)."""
    count = agreed
    while count <= fewest:
        j = count // step
        flag = reduced[starts["fit_flags"] + j - 1] if 1 <= j <= FLAGS else UNKNOWN
        if flag != NOT_FIT:
            return count, flag == FITS
        count += step
    return count, False


def choose(
    reduced: Sequence[int], starts: dict[str, int], agreed: int, fewest: int, step: int,
    max_token_len: int, overhead: float,
) -> Choice:
    """The module docstring's choice, from the reduced vector.

    Args:
        reduced: the element-wise MAX of the ranks' vectors.
        starts: where the window's slots start (:func:`encode_window`).
        agreed: the agreed count ``K``.
        fewest: the fewest groups on any rank (no count above it).
        step: ``num_batches_divided_by`` (or 1).
        max_token_len: the cap in tokens (the fixed cost's unit).
        overhead: ``micro_batch_overhead``.
    """
    fixed = overhead * WORKLOAD_LINEAR_COEF * max_token_len
    low, exact = verl_facts(reduced, starts, agreed, fewest, step)

    def slot(count: int) -> int | None:
        i = (count // step) % WINDOW
        hi, lo = reduced[starts["window_count"] + i], -reduced[starts["neg_window_count"] + i]
        return i if hi == lo == count else None

    def lined_up(name: str, i: int, count: int) -> float:
        at = starts[name] + i * PROFILE
        return sum(reduced[at : at + PROFILE]) + count * fixed

    # the library's plans at K and K + d, where both are planned on every rank and at most V
    candidates = [(lined_up("profile", i, c), c) for c in (agreed, agreed + step)
                  if c <= min(low, fewest) and (i := slot(c)) is not None]
    best = min(candidates, default=None)
    ours = Choice(agreed) if best is None else Choice(best[1], False, best[0])
    if low > fewest:  # verl raises on this step: nothing to be slower than
        return Choice(ours.count, False, ours.time, True)
    theirs = None
    if exact and (i := slot(low)) is not None:
        theirs = lined_up("verl_profile", i, low)  # verl's plans' time, exactly
    if ours.time is not None and theirs is not None:
        if theirs < ours.time:
            return Choice(low, True, theirs, True)
        return Choice(ours.count, False, ours.time, True)
    # no plan of verl's takes less than its slowest rank's workload plus V fixed costs
    bound = reduced[starts["rank_workload"]] + low * fixed
    if ours.time is not None and ours.time <= bound:
        return Choice(ours.count, False, ours.time, True)
    if exact:  # verl's own plans at V: every rank's partition fits there (its flag says so)
        return Choice(low, True, theirs, True)
    return ours


def settle(result: RankAnalysis, choice: Choice) -> None:
    """Record on ``result`` the groups of each micro-batch this rank runs under
    ``choice`` (:func:`~seqlen_balancing.planner.build_plan` then orders them, lined up);
    a count outside the rank's window is planned as without the choice."""
    window = window_of(result)
    if window is None:
        return
    verl = None
    if choice.verl:  # its flag said it fits: run, or computed before the agreement
        verl = window.verl[choice.count] if choice.count in window.verl else _kk(result, choice.count)
    if verl is not None:
        result.lockstep = (choice.count, [list(b) for b in verl])
    elif choice.count in window.ours:
        result.lockstep = (choice.count, [list(b) for b in window.ours[choice.count]])
    else:
        result.lockstep = (choice.count, balanced_bins(result, choice.count, _kk(result, choice.count)))


def _kk(result: RankAnalysis, count: int) -> list[list[int]] | None:
    return None if result._rest is not None else _fitting_kk(result, count)
