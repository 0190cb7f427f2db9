"""The modeled step time of one step, three ways: verl's, the library per rank, the global planner.

The lock-step model (:mod:`seqlen_balancing.global_batch.lockstep`, docs/step-time.md): under FSDP the DP
ranks run their micro-batches in lock-step, so

    step time = sum over k of max over ranks r of W(r, k)  +  K x fixed cost
    floor     = (sum of every sample's workload) / dp      +  K x fixed cost

with ``W(r, k)`` the workload of rank ``r``'s micro-batch ``k`` (verl's ``24576*s + s**2``
per sequence, or the ``--workload-model``'s), ``K`` the most micro-batches any rank runs and
the fixed cost of one micro-batch ``micro_batch_fixed_tokens x 24576`` (tokens of linear work,
whatever the cap; the ``--workload-model``'s linear coefficient instead of ``24576``). Each kind
of plan (:class:`Modeled`) is shown in units of ``24576 x cap``, the linear term of a full
micro-batch: a step of ``K`` full micro-batches of short sequences takes about ``K x (1 +
micro_batch_fixed_tokens / cap)`` of them. ``sweep`` compares caps in a unit that does not
move with the cap (:func:`sweep_times`).

* ``verl``: the trainer's dealing (``--trainer``) and verl 0.9.1's own plans on each rank:
  its agreed count (:func:`~seqlen_balancing.planning.verl_rule.verl_counts`), Karmarkar-Karp on
  the workloads at that count, verl's order of micro-batches
  (:func:`~seqlen_balancing.planning.balance.order_micro_batches`); with ``--compare-verl`` only,
  and only for verl's own rule (one sample per group).
* ``library``: the same dealing, each rank planned by the library (the report's plans).
* ``global``: :func:`~seqlen_balancing.plan_global_batch` on the step's rows in the
  sampler's order, choosing the ranks itself (what ``SEQLEN_BALANCING_BALANCE_STEP=1``
  runs), under every option it takes (``--equal-rows-per-micro-batch``
  included); the header names those it has no parameter for (:func:`not_applied_lines`:
  ``--over-cap``, ``--dummy-micro-batches``, ``--no-same-micro-num-in-dp``).

No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from seqlen_balancing.global_batch.lockstep import lock_step_time, micro_batch_fixed_cost, step_time_floor
from seqlen_balancing.global_batch.step import plan_global_batch
from seqlen_balancing.options import OPTIONS, PlanOptions
from seqlen_balancing.planning.balance import order_micro_batches
from seqlen_balancing.planning.partition import WORKLOAD_LINEAR_COEF, karmarkar_karp, workload

__all__ = [
    "KINDS",
    "Modeled",
    "fastest",
    "fixed_tokens_of",
    "model_step",
    "not_applied",
    "not_applied_lines",
    "verl_plans",
    "workloads",
]

#: The three kinds of plan, and how the reports name them.
KINDS = {
    "verl": "verl 0.9.1: the trainer's dealing, verl's plans",
    "library": "the trainer's dealing, this library per rank",
    "global": "the global planner (plan_global_batch)",
}

Plans = list[list[list[int]]]  # per rank, its micro-batches of indices into the step's rows


@dataclass(frozen=True)
class Modeled:
    """One kind of plan of the step in the lock-step model (``None``: not modeled).

    Attributes:
        kind: a key of :data:`KINDS`.
        count: micro-batches per rank (the most any rank runs).
        step_time: the modeled step time, in workload units.
        floor: the floor at ``count``.
        unit: ``24576 x cap``, the linear term of a full micro-batch.
        error: why the plan could not be made.
        token: the workload of one token of linear work (``24576``, or the
            ``--workload-model``'s linear coefficient): ``sweep``'s unit, the same at every cap.
    """

    kind: str
    count: int | None
    step_time: float | None
    floor: float | None
    unit: float
    error: str | None = None
    token: float = float(WORKLOAD_LINEAR_COEF)

    @property
    def in_tokens(self) -> float | None:
        """The step time in tokens of linear work (comparable across caps)."""
        return None if self.step_time is None else self.step_time / self.token



def fixed_tokens_of(options: PlanOptions) -> float:
    """The fixed cost of one micro-batch in tokens of linear work: the options'
    ``micro_batch_fixed_tokens`` where they have one, else the library's default."""
    return float(options.micro_batch_fixed_tokens)


def workloads(lengths: Sequence[int], options: PlanOptions) -> list[int]:
    """Each sample's balance workload: the ``--workload-model``'s FLOPs, else verl's."""
    model = options.workload_model
    return list(model.workloads(list(lengths))) if model is not None else [workload(s) for s in lengths]


def verl_plans(lengths: Sequence[int], dealt: Sequence[Sequence[int]], counts: Sequence[int],
               options: PlanOptions) -> Plans:
    """verl 0.9.1's plans of each rank at its count (``counts[r]``, the agreed one under
    ``same_micro_num_in_dp``): Karmarkar-Karp on the workloads (``equal_size=False``),
    verl's order; indices into ``lengths``.

    Example:
        >>> verl_plans([5, 1, 4, 2], [[0, 1], [2, 3]], [1, 1], PlanOptions())
        [[[0, 1]], [[2, 3]]]
    """
    out: Plans = []
    for rows, count in zip(dealt, counts, strict=True):
        loads = workloads([lengths[i] for i in rows], options)
        parts = [sorted(p) for p in karmarkar_karp(loads, count, equal_size=False)]
        out.append([[rows[i] for i in mb]
                    for mb in order_micro_batches(parts, loads, options.use_dynamic_bsz_balance)])
    return out


def _timed(kind: str, plans: Plans, loads: list[int], dp: int, fixed: float, unit: float) -> Modeled:
    count = max((len(p) for p in plans), default=0)
    return Modeled(kind, count, lock_step_time(plans, loads, fixed), step_time_floor(loads, dp, count, fixed),
                   unit)


def fastest(rows: Sequence[tuple[int, Sequence[Modeled]]], kind: str, limit: int | None = None) -> int | None:
    """The cap (each row's ``max_token_len``, with its models) whose ``kind`` of plan has the
    least modeled step time, among caps at or below ``limit`` when given; equal times: the
    smaller cap (it holds less memory). ``None`` where no such cap was modeled.

    Example:
        >>> def m(t): return [Modeled("library", 1, t, t, 1.0)]
        >>> rows = [(100, m(5.0)), (200, m(4.0)), (300, m(4.0))]
        >>> fastest(rows, "library"), fastest(rows, "library", limit=150)
        (200, 100)
    """
    timed = [(m.in_tokens, cap) for cap, models in rows for m in models
             if m.kind == kind and m.in_tokens is not None and (limit is None or cap <= limit)]
    return min(timed)[1] if timed else None


#: Options no column of the command line can count with: the entries a dummy zeroes.
_NO_COUNT = ("loss_weight_keys",)


#: Options the global planner refuses: it gives every rank real samples and the same count.
_GLOBAL_REFUSED = ("dummy_micro_batches", "same_micro_num_in_dp")


def not_applied(options: PlanOptions, kind: str) -> list[str]:
    """The options given (``options.changed()``) that a kind of plan does not take, as
    flags: ``"global"``, :func:`~seqlen_balancing.plan_global_batch`'s refusals; ``"verl"``,
    verl 0.9.1's own rule (its parameters only)."""
    taken = {name for name, opt in OPTIONS.items()
             if (name not in _GLOBAL_REFUSED if kind == "global" else opt.verl_parameter)}
    return [f"--no-{OPTIONS[name].flag[2:]}" if value is False else OPTIONS[name].flag
            for name, value in options.changed().items() if name not in taken and name not in _NO_COUNT]


def not_applied_lines(options: PlanOptions, kinds: Sequence[str]) -> list[str]:
    """The header's lines naming the options given that a column does not plan with."""
    why = {
        "global": "the global planner (plan_global_batch refuses them)",
        "verl": "verl's count (verl 0.9.1's own rule has none of the library's options)",
    }
    return [f"options not applied to {why[kind]}: {', '.join(flags)}"
            for kind in kinds if (flags := not_applied(options, kind))]


def _global(lengths: Sequence[int], dp: int, cap: int, options: PlanOptions, fixed: float,
            loads: list[int], unit: float) -> Modeled:
    """:func:`~seqlen_balancing.plan_global_batch` on the step under every option it takes
    but those it refuses (:func:`not_applied` names them), in the lock-step model as the other
    kinds are."""
    try:
        _, micro = plan_global_batch(list(lengths), dp, cap, options=replace(
            options, dummy_micro_batches=False, same_micro_num_in_dp=True))
    except (TypeError, ValueError) as error:
        return Modeled("global", None, None, None, unit, error=str(error))
    # with equal rows the filler rows are left out, as the lock-step search leaves them
    return _timed("global", [[list(mb) for mb in rank] for rank in micro], loads, dp, fixed, unit)


def model_step(
    lengths: Sequence[int],
    dealt: Sequence[Sequence[int]],
    library: Plans,
    cap: int,
    options: PlanOptions,
    verl_counts: Sequence[int] | None = None,
    whole_step: bool = True,
) -> list[Modeled]:
    """The step in the lock-step model: ``[verl, library, global]`` (:class:`Modeled`).

    Args:
        lengths: tokens of the step's rows, in the sampler's order (before any dealing).
        dealt: the rows (indices into ``lengths``) the trainer deals each rank.
        library: each rank's plan by the library, indices into ``lengths``.
        cap: the cap in tokens (``max_token_len x sp``).
        options: the plan's options.
        verl_counts: verl's count on each dealt rank, or ``None`` (no ``verl`` row: its
            ``step_time`` is ``None``).
        whole_step: False: no ``global`` row either (its ``count`` and ``step_time`` are
            ``None``, with no error).

    Complexity: :func:`~seqlen_balancing.plan_global_batch` on the step, plus
    Karmarkar-Karp at verl's count on each rank.
    """
    dp = len(dealt)
    fixed = micro_batch_fixed_cost(fixed_tokens_of(options), options)
    unit = float(WORKLOAD_LINEAR_COEF * cap)
    loads = workloads(lengths, options)
    verl = (_timed("verl", verl_plans(lengths, dealt, verl_counts, options), loads, dp, fixed, unit)
            if verl_counts is not None and options.force_group_size == 1
            else Modeled("verl", None, None, None, unit))
    whole = (_global(lengths, dp, cap, options, fixed, loads, unit) if whole_step
             else Modeled("global", None, None, None, unit))
    return [replace(m, token=micro_batch_fixed_cost(1.0, options))
            for m in (verl, _timed("library", library, loads, dp, fixed, unit), whole)]


def lines(rows: Sequence[Modeled], cap: int, fixed_tokens: float, runs: str = "step") -> list[str]:
    """The report's lines: a header and one row per kind of plan that was modeled.

    ``runs`` names what the figures cover (``"step"``, or ``"run"`` for sums over steps).
    """
    if not rows:
        return []
    # what ``vs`` compares with: verl's row where it was modeled, else the library's
    reference = next((m for m in rows if m.step_time is not None and m.kind in ("verl", "library")), None)
    against = "verl" if reference is not None and reference.kind == "verl" else "library"
    table = [["plans", "count/rank", "step time", "x floor", f"vs {against}"]]
    for m in rows:
        if m.step_time is None:
            if m.error is not None:
                table.append([KINDS[m.kind], "fails", m.error[:60], "", ""])
            continue
        vs = "" if reference is None or m is reference or not reference.step_time else (
            f"{100 * (m.step_time / reference.step_time - 1):+.1f}%")
        table.append([KINDS[m.kind], str(m.count), f"{m.step_time / m.unit:.2f}",
                      f"{m.step_time / m.floor:.4f}" if m.floor else "-", vs])  # floor 0: nothing to run
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    text = [r[0].ljust(widths[0]) + "".join("  " + c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))
            for r in table]
    return [f"lock-step model of the {runs} (micro_batch_fixed_tokens {fixed_tokens:g}; step time in units "
            f"of 24576 x {cap}, a full micro-batch's linear term; x floor: over total workload / ranks "
            "+ count x fixed cost)", *(t.rstrip() for t in text)]


def to_json(rows: Sequence[Modeled], fixed_tokens: float) -> dict[str, Any]:
    """``{"micro_batch_fixed_tokens", "unit", "token", kind: {count, step_time, floor, error}}``."""
    return {"micro_batch_fixed_tokens": fixed_tokens,
            "unit": rows[0].unit if rows else None, "token": rows[0].token if rows else None,
            **{m.kind: {"count": m.count, "step_time": m.step_time, "floor": m.floor, "error": m.error}
               for m in rows}}
