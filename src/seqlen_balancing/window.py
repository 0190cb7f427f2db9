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
* whether verl's Karmarkar-Karp partition at ``c`` fits the cap on this rank (0), does not
  (1), or was not tried (2: over the Karmarkar-Karp budget, or over-cap samples set apart);
* the *profile* of its plan at ``c``: its micro-batches' workloads, heaviest first, zeros
  after them (:data:`PROFILE` values);
* the profile of verl's own plan at ``c`` (zeros where it does not fit).

Lined up heaviest with heaviest, which is the order every rank then uses, the element-wise
MAX of the sorted profiles is ``max over r of W(r, k)`` at each index ``k``: the lock-step
time of the group's plans at ``c`` is the sum of the reduced profile, exactly, and no other
order of the same micro-batches is faster (the ``j``-th slowest index waits for at least
every rank's ``j``-th heaviest micro-batch).

**The choice** (:func:`choose`, the same on every rank). ``K`` is the agreed count (the
largest needed, rounded up to ``d``). Where the slot of ``K`` is exact, the candidates are
the library's plans at ``K`` and, where Karmarkar-Karp is known not to fit at ``K`` on some
rank, at ``K + d``: both at most verl's count (verl stops at the first count from ``K`` up
where every rank's Karmarkar-Karp fits), so the count guarantee holds. The fastest in the
model wins, the smaller count on a tie. verl's count ``V`` is known when every rank fits at
``K`` (``V = K``), or fits at ``K + d`` after some rank did not at ``K``; where verl's plans
at ``V`` (each rank's Karmarkar-Karp partition) are faster still, they are the plan. Every
rank then orders its micro-batches heaviest first and, with ``use_dynamic_bsz_balance``,
in verl's pipeline order (lightest at both ends), a permutation of the sorted positions
that is the same on every rank, so the lined-up time stands. Where the slot of ``K`` is
not exact (a rank's own count more than ``d`` below ``K``, or counts above ``PROFILE``),
the plans are the library's at ``K``, as without the choice, lined up the same way.

**Never worse than verl 0.9.1, third axis.** Wherever verl's count is known (above), the
chosen plans' modeled step time, fixed costs included, is at most that of verl's plans of
the same step on the same ranks: verl orders each rank's micro-batches by workload (the
same permutation of sorted positions on every rank), so its time is the lined-up sum of
its profiles, and its plans are a candidate, compared exactly.
``tests/compat/test_step_time.py`` checks it against verl itself.

Complexity: two plans per rank before the agreement where the counts are at most
:data:`PROFILE` (one more than without the choice, which the agreed count then reuses);
:data:`WINDOW` x (3 + 2 x :data:`PROFILE`) = 70 int64 values in the vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from seqlen_balancing.analysis import RankAnalysis
from seqlen_balancing.partition import WORKLOAD_LINEAR_COEF, roundup_divisible
from seqlen_balancing.planner import balanced_bins
from seqlen_balancing.search import _fitting_kk

__all__ = ["PROFILE", "WINDOW", "Choice", "Window", "choose", "settle", "window_of"]

#: Counts each rank plans before the agreement.
WINDOW = 2
#: Values of one profile in the vector.
PROFILE = 16
#: Karmarkar-Karp at a count: fits on this rank, does not, not tried.
FITS, NOT_FIT, UNKNOWN = 0, 1, 2
#: Largest value a profile entry carries (int64; a workload above it is clamped).
_CLAMP = (1 << 62) - 1


@dataclass
class Window:
    """What one rank planned before the agreement: for each count of its window, its own
    plan (groups per micro-batch) and verl's Karmarkar-Karp partition (``None``: does not
    fit or not tried, ``fits`` says which)."""

    counts: list[int]
    ours: dict[int, list[list[int]]]
    verl: dict[int, list[list[int]] | None]
    fits: dict[int, int]


def window_of(result: RankAnalysis) -> Window | None:
    """This rank's plans at its window of counts (``None`` where no choice is made: an
    error, dummy micro-batches). Cached on ``result``."""
    if result.window is not None:
        return result.window  # type: ignore[no-any-return]
    unplanned = result.rule is None and result._rest is None
    if result.error is not None or unplanned or result.dummy_micro_batches:
        return None
    if result.options is not None and result.options.equal_rows_per_micro_batch:
        return None  # the rows window plans at the agreed count (seqlen_balancing.rows)
    step = result.num_batches_divided_by
    first = roundup_divisible(result.needed_count, step)
    if first + (WINDOW - 1) * step > PROFILE:
        return None  # many micro-batches: the plan as without the choice, at no extra cost
    counts = [c for c in (first + i * step for i in range(WINDOW)) if c <= result.n_groups]
    window = Window(counts, {}, {}, {})
    for count in counts:
        verl = None if result._rest is not None else _fitting_kk(result, count)
        window.verl[count] = verl
        if verl is not None:
            window.fits[count] = FITS
        elif result._rest is not None or len(result.group_sizes) * count > 1 << 22:
            window.fits[count] = UNKNOWN  # verl raises on over-cap samples; or KK not run
        else:
            window.fits[count] = NOT_FIT
        window.ours[count] = balanced_bins(result, count, verl)
    result.window = window
    return window


def profile(bins: Sequence[Sequence[int]], workloads: Sequence[int]) -> list[int]:
    """The micro-batches' workloads, heaviest first."""
    return sorted((sum(workloads[g] for g in b) for b in bins), reverse=True)


def _padded(values: list[int]) -> list[int]:
    """A profile as its :data:`PROFILE` values: zeros past its end, each clamped to int64."""
    return [min(v, _CLAMP) for v in values] + [0] * (PROFILE - len(values))


def encode_window(vector: list[int], starts: dict[str, int], result: RankAnalysis) -> None:
    """Write this rank's window into ``vector`` (the agreement's slots named in ``starts``:
    ``window_count``, ``neg_window_count``, ``window_fits``, ``profile``, ``verl_profile``)."""
    window = window_of(result)
    if window is None:
        return
    loads = result.group_workloads
    for count in window.counts:
        i = (count // result.num_batches_divided_by) % WINDOW
        vector[starts["window_count"] + i] = count
        vector[starts["neg_window_count"] + i] = -count
        vector[starts["window_fits"] + i] = window.fits[count]
        at = starts["profile"] + i * PROFILE
        vector[at : at + PROFILE] = _padded(profile(window.ours[count], loads))
        verl = window.verl[count]
        if verl is not None:
            at = starts["verl_profile"] + i * PROFILE
            vector[at : at + PROFILE] = _padded(profile(verl, loads))


@dataclass(frozen=True)
class Choice:
    """The DP group's choice: the count, and whether every rank runs verl's own
    Karmarkar-Karp partition at it (else the library's plans); ``time``: the modeled step
    time of the choice (workload units, fixed costs included), or ``None`` where no choice
    was made (the slot of the agreed count not exact); ``verl_known``: verl's count was
    known, so the time is at most verl's plans'."""

    count: int
    verl: bool = False
    time: float | None = None
    verl_known: bool = False


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

    def exact(count: int) -> int | None:
        i = (count // step) % WINDOW
        hi, lo = reduced[starts["window_count"] + i], -reduced[starts["neg_window_count"] + i]
        return i if hi == lo == count else None

    def values(name: str, i: int) -> list[int]:
        at = starts[name] + i * PROFILE
        return list(reduced[at : at + PROFILE])

    def lined_up(name: str, i: int, count: int) -> float:
        return sum(values(name, i)) + count * fixed

    first = exact(agreed)
    if first is None:
        return Choice(agreed)
    fits = reduced[starts["window_fits"] + first]
    candidates = [(lined_up("profile", first, agreed), agreed, first)]
    verl_at = (agreed, first) if fits == FITS else None
    second = agreed + step
    if fits == NOT_FIT and second <= fewest and (i := exact(second)) is not None:
        candidates.append((lined_up("profile", i, second), second, i))
        if reduced[starts["window_fits"] + i] == FITS:
            verl_at = (second, i)
    best, count, _ = min(candidates)
    if verl_at is not None and (theirs := lined_up("verl_profile", verl_at[1], verl_at[0])) < best:
        return Choice(verl_at[0], True, theirs, True)
    return Choice(count, False, best, verl_at is not None)


def settle(result: RankAnalysis, choice: Choice) -> None:
    """Record on ``result`` the groups of each micro-batch this rank runs under
    ``choice`` (:func:`~seqlen_balancing.planner.build_plan` then orders them, lined up);
    a count outside the rank's window is planned as without the choice."""
    window = window_of(result)
    if window is None:
        return
    if choice.count in window.ours:
        verl = window.verl[choice.count] if choice.verl else None
        bins = verl if verl is not None else window.ours[choice.count]
        result.lockstep = (choice.count, [list(b) for b in bins])
    else:
        result.lockstep = (choice.count, balanced_bins(result, choice.count, _kk(result, choice.count)))


def _kk(result: RankAnalysis, count: int) -> list[list[int]] | None:
    return None if result._rest is not None else _fitting_kk(result, count)
