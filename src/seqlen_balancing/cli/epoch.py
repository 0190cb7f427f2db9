"""The ``epoch`` command: replay a whole SFT run step by step, per cap, and report it.

Every step's rows come from the trainer's sampler and dealing
(:func:`~seqlen_balancing.cli.trainers.epoch_steps`); each step is planned on every DP rank
with this library's planner and DP agreement (:mod:`seqlen_balancing.agreement`: one
count on every rank, as the engine's ``prepare_micro_batches`` with the DP group), and
with ``--compare-verl`` also with verl 0.9.1's rule (:mod:`seqlen_balancing.planning.verl_rule`).
The report gives, per cap, each step's micro-batches per rank, the totals over the run and
the worst step, then one summary row per cap: a cap is chosen by the whole run's count.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from seqlen_balancing.cli import modeled
from seqlen_balancing.cli._text import PROG, CliError, Progress, plural, table
from seqlen_balancing.cli.inputs import Loaded
from seqlen_balancing.cli.modeled import Modeled
from seqlen_balancing.cli.results import VerlResult, options_json
from seqlen_balancing.cli.step import plan_dp, scale_lengths, verl_result
from seqlen_balancing.cli.trainers import RULES, EpochStep, epoch_steps, steps_per_epoch
from seqlen_balancing.options import PlanOptions

__all__ = ["CapReplay", "Replay", "replay", "run_epoch"]

#: Step plans (steps x caps) from which a replay shows progress on a terminal unasked.
LONG_REPLAY = 200


@dataclass
class CapReplay:
    """One cap over the whole run: micro-batches per rank at each step (all ranks agree; with
    ``--no-same-micro-num-in-dp`` the most any rank runs, the step's lock-step count)."""

    max_token_len: int  # per GPU, as given
    cap: int  # max_token_len x sp_size
    counts: list[int] = field(default_factory=list)  # the library's, one per step planned
    # each step's micro-batches' tokens per rank, in run order (dummies: 0)
    tokens: list[list[list[int]]] = field(default_factory=list)
    verl: list[int | None] = field(default_factory=list)  # verl's (None: it fails or gives up)
    verl_found: list[VerlResult] = field(default_factory=list)  # each step's on every rank, or why none
    modeled: list[list[Modeled]] = field(default_factory=list)  # each step: verl, library, global
    error: str | None = None  # the step the library cannot plan (the run would stop there)

    def worst(self, values: list[int | None]) -> tuple[int, int] | None:
        """``(count, step)`` of the step with the most micro-batches (the first such)."""
        known = [(v, s) for s, v in enumerate(values, start=1) if v is not None]
        return max(known, key=lambda found: found[0], default=None)  # max keeps the first

    @property
    def verl_total(self) -> int | None:
        known = [v for v in self.verl if v is not None]
        return sum(known) if self.verl and len(known) == len(self.verl) else None


@dataclass
class Replay:
    """What was replayed: the run's shape and each cap's result."""

    loaded: Loaded
    lengths: list[int]
    steps: list[EpochStep]
    steps_per_epoch: int
    caps: list[CapReplay]


def _model(result: CapReplay, step: EpochStep, lengths: list[int], plans: list[list[list[int]]],
           options: PlanOptions, whole_step: bool = True) -> None:
    """The step in the lock-step model, three ways (:func:`~seqlen_balancing.cli.modeled.model_step`),
    on the step's rows in the sampler's order; ``whole_step`` False: not the global planner
    (``--group-sizes``: groups of different sizes cannot give every rank as many rows)."""
    where = {row: j for j, row in enumerate(step.rows)}
    dealt = [[where[row] for row in rows] for rows in step.ranks]
    library = [[[mine[i] for i in mb] for mb in plan] for mine, plan in zip(dealt, plans, strict=True)]
    result.modeled.append(modeled.model_step(
        [lengths[row] for row in step.rows], dealt, library, result.cap, options,
        result.verl_found[-1].counts if result.verl_found else None,  # this step's, when compared
        whole_step=whole_step))


def replay(args: argparse.Namespace, loaded: Loaded) -> Replay:
    """Replay every step for every cap of ``args.max_token_len``.

    Raises:
        CliError: (exit 2) a run the trainer could not form (see
            :func:`~seqlen_balancing.cli.trainers.check_epoch`), or torch missing.
    """
    lengths = scale_lengths(loaded.lengths, args.scale)
    steps = list(epoch_steps(lengths, args.dp_size, args.global_batch_size, args.trainer,
                             args.seed, args.epochs, bool(args.balance_batch),
                             args.options.workload_model, args.options.force_group_size))
    caps = [CapReplay(c, c * args.sp_size) for c in args.max_token_len]
    total = len(steps) * len(caps)
    progress = Progress(total, args.progress or (sys.stderr.isatty() and total >= LONG_REPLAY), "step",
                        f"{PROG} epoch", f"{PROG} epoch: {{done}}/{{total}} step plans ({{percent}}%)")
    try:
        for result in caps:
            for step in steps:
                progress.update()
                if result.error is not None:
                    continue
                per_rank = [[lengths[i] for i in rows] for rows in step.ranks]
                try:
                    plans = [r.plan for r in plan_dp(per_rank, result.cap, args)]
                except (ValueError, TypeError) as exc:
                    result.error = f"step {step.step} (epoch {step.epoch + 1}): {exc}"
                    continue
                tokens = [[sum(lens[i] for i in mb) for mb in plan] for lens, plan in
                          zip(per_rank, plans, strict=True)]
                result.counts.append(max(len(rank) for rank in tokens))
                result.tokens.append(tokens)
                if args.compare_verl:
                    verl = verl_result(per_rank, result.cap, args)
                    result.verl.append(None if verl.counts is None else max(verl.counts))
                    result.verl_found.append(verl)
                _model(result, step, lengths, plans, args.options, whole_step=not args.group_sizes)
    finally:
        progress.close()
    return Replay(loaded, lengths, steps,
                  steps_per_epoch(len(lengths), args.dp_size, args.global_batch_size, args.trainer), caps)


# ----------------------------------------------------------------------------- report


def _rows_used(replay_: Replay, args: argparse.Namespace) -> int:
    """Rows one epoch feeds (the rest dropped: drop_last); sft_trainer's ranks take
    global_batch_size // dp rows a step each (sft_trainer_ray's are refused unless dp divides it)."""
    return replay_.steps_per_epoch * int(args.global_batch_size // args.dp_size * args.dp_size)


def header(replay_: Replay, args: argparse.Namespace) -> list[str]:
    """The header lines: the data, the run's shape, the trainer modelled, the planning."""
    n = len(replay_.lengths)
    per_rank = args.global_batch_size // args.dp_size
    # sft_trainer's loaders take global_batch_size // dp rows each: a remainder is never fed
    lines = [
        f"{plural(n, 'row')} from "
        f"{'bundled CHAMP lengths' if replay_.loaded.source == 'champ' else replay_.loaded.name}"
        f"{f', lengths x {args.scale:g}' if args.scale != 1.0 else ''}; {plural(args.epochs, 'epoch')} x "
        f"{plural(replay_.steps_per_epoch, 'step')} of {per_rank * args.dp_size} rows "
        f"({per_rank} per rank on {plural(args.dp_size, 'DP rank')}); sampler seed {args.seed}; "
        f"{n - _rows_used(replay_, args)} rows left out per epoch (drop_last)",
        f"trainer modelled: {RULES[args.trainer]}"
        + (" (--no-balance-batch: not balanced, equal contiguous chunks)"
           if args.trainer == "sft_trainer_ray" and not args.balance_batch else ""),
    ]
    if replay_.loaded.counted:
        lines.append(replay_.loaded.counted)
    pad, bucket = args.options.pad_to_multiple_of, args.options.micro_batch_multiple_of
    if (pad, bucket) != (1, 1):
        lines.append(f"cost: each sample aligned to {pad} tokens, each micro-batch rounded up to {bucket}")
    if args.options.changed():
        lines.append(f"options: {args.options.describe()}")
    if args.group_sizes:
        lines.append(
            f"groups (group_ids): each rank's rows of a step, as dealt to it, in consecutive groups of "
            f"{','.join(map(str, args.group_sizes))}"
            f"{' rows, cycled' if len(args.group_sizes) > 1 else ' rows'}; each group lands whole "
            "in one micro-batch (the global planner is not modeled: groups of different sizes cannot "
            "give every rank as many rows)"
        )
    lines += modeled.not_applied_lines(
        args.options, (["verl"] if args.compare_verl else []) + ([] if args.group_sizes else ["global"]))
    lines.append(
        "each step: every rank planned with this library's planner and DP agreement (one count "
        "on every rank, as prepare_micro_batches with the DP group)"
        + ("; verl: verl 0.9.1's rule on the same rows" if args.compare_verl else "")
    )
    return lines


def _saved(ours: int, verl: int | None) -> tuple[str, str]:
    if verl is None:
        return "n/a", "n/a"
    return str(verl - ours), (f"{100 * (verl - ours) / verl:.1f}%" if verl else "0.0%")


def _worst_text(found: tuple[int, int] | None) -> str:
    return "n/a" if found is None else f"{found[0]} (step {found[1]})"


def _verl_cell(found: VerlResult) -> str:
    """verl's count at a step (the most on any rank), or '>K' (its search stopped), or its error."""
    if found.counts is not None:
        return str(max(found.counts))
    return f">{found.above}" if found.above is not None else found.error or "n/a"


def print_report(replay_: Replay, args: argparse.Namespace) -> None:
    """The text report: header, each cap's steps and totals, then the summary."""
    verl_on = args.compare_verl
    lines, summary = header(replay_, args), []
    for result in replay_.caps:
        lines.append(f"\nmax_token_len {result.max_token_len}: micro-batches per rank at each step")
        rows = [[str(replay_.steps[i].step), str(replay_.steps[i].epoch + 1), str(count)]
                + ([_verl_cell(result.verl_found[i])] if verl_on else [])
                + [str(whole.count) if whole.count is not None else "fails" if whole.error else "n/a"]
                for i, (count, (_, _, whole)) in enumerate(zip(result.counts, result.modeled, strict=True))]
        lines += [table(["step", "epoch", "library"] + (["verl"] if verl_on else []) + ["global"], rows)
                  ] if rows else []
        if result.error is not None:
            lines.append(f"cannot run: {result.error}")
            summary.append([str(result.max_token_len), "cannot run", "-"] + (["-"] * 4 if verl_on else []))
            continue
        total, verl_total = sum(result.counts), result.verl_total
        worst = _worst_text(result.worst(list(result.counts)))
        verl_worst = _worst_text(result.worst(result.verl))
        saved = _saved(total, verl_total)
        verl_shown = "n/a" if verl_total is None else str(verl_total)
        lines += [
            f"total over the run, per rank: library {total}"
            + (f", verl {verl_shown} (saved {saved[0]}, {saved[1]})" if verl_on else "")
            + f"; x {args.dp_size} ranks: {total * args.dp_size} micro-batches",
            f"worst step: library {worst}" + (f", verl {verl_worst}" if verl_on else ""),
            *modeled.lines(run_totals(result), result.cap, modeled.fixed_tokens_of(args.options), "run"),
        ]
        summary.append([str(result.max_token_len), str(total), worst]
                       + ([verl_shown, verl_worst, *saved] if verl_on else []))
    lines += [f"\nsummary over {plural(len(replay_.steps), 'step')} (micro-batches per rank)",
              table(["max_token_len", "library total", "worst step"] + (
                  ["verl total", "verl worst step", "saved", "saved %"] if verl_on else []), summary)]
    print("\n".join(lines))


def report_json(replay_: Replay, args: argparse.Namespace) -> dict[str, Any]:
    """The ``epoch --json`` object (keys stable)."""
    caps = [
        {
            "max_token_len": result.max_token_len,
            "cap": result.cap,
            "error": result.error,
            "steps": [
                {"step": replay_.steps[i].step, "epoch": replay_.steps[i].epoch + 1, "micro_batches": c,
                 "micro_batch_tokens": result.tokens[i]}
                | ({"verl_micro_batches": result.verl[i]} if args.compare_verl else {})
                | {"global_micro_batches": result.modeled[i][2].count}
                for i, c in enumerate(result.counts)
            ],
            "total_micro_batches": sum(result.counts) if result.error is None else None,
            "worst_step": _worst_json(result.worst(list(result.counts))),
            "step_time": modeled.to_json(run_totals(result), modeled.fixed_tokens_of(args.options))
            if result.error is None else None,
        } | ({"verl_total_micro_batches": result.verl_total if result.error is None else None,
              "verl_worst_step": _worst_json(result.worst(result.verl))} if args.compare_verl else {})
        for result in replay_.caps
    ]
    return {
        "command": "epoch",
        "source": replay_.loaded.source,
        "n_lengths": len(replay_.lengths),
        "scale": args.scale,
        "counted": replay_.loaded.counted,
        "trainer": args.trainer,
        "trainer_rule": RULES[args.trainer],
        "balance_batch": bool(args.balance_batch),
        "group_sizes": list(args.group_sizes or []) or None,
        "dp_size": args.dp_size,
        "global_batch_size": args.global_batch_size,
        "rows_per_rank": args.global_batch_size // args.dp_size,
        "epochs": args.epochs,
        "seed": args.seed,
        "steps_per_epoch": replay_.steps_per_epoch,
        "steps": len(replay_.steps),
        "rows_left_out_per_epoch": len(replay_.lengths) - _rows_used(replay_, args),
        "sp_size": args.sp_size,
        "pad_to_multiple_of": args.options.pad_to_multiple_of,
        "micro_batch_multiple_of": args.options.micro_batch_multiple_of,
        "options": options_json(args.options),
        "caps": caps,
    }


def run_totals(result: CapReplay) -> list[Modeled]:
    """Each kind of plan summed over the run's steps: counts, step times and floors (a kind
    that one step could not model is left out)."""
    totals = []
    for k, kind in enumerate(modeled.KINDS):
        steps = [step[k] for step in result.modeled]
        if not steps or any(m.step_time is None or m.floor is None or m.count is None for m in steps):
            continue
        totals.append(Modeled(kind, sum(m.count or 0 for m in steps), sum(m.step_time or 0.0 for m in steps),
                              sum(m.floor or 0.0 for m in steps), steps[0].unit))
    return totals


def _worst_json(found: tuple[int, int] | None) -> dict[str, int] | None:
    return None if found is None else {"micro_batches": found[0], "step": found[1]}


def run_epoch(args: argparse.Namespace) -> int:
    """The ``epoch`` command; the exit code (1 when no cap runs the whole replay)."""
    from seqlen_balancing.cli.load import load_lengths

    result = replay(args, load_lengths(args))
    if args.json:
        sys.stdout.write(json.dumps(report_json(result, args)) + "\n")  # one object, one line
    else:
        print_report(result, args)
    if not any(c.error is None for c in result.caps):
        raise CliError("no cap can run the whole replay (" + "; ".join(
            f"max_token_len {c.max_token_len}: {c.error}" for c in result.caps) + ")", 1)
    return 0
