"""What the commands print: the tables (one column per entry of a list) and the JSON.

Each table is a list of :class:`Column`; a column is its header, the line ``--help``
prints for it, and how to compute a cell. Adding a column is adding one entry.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from seqlen_balancing.cli import modeled
from seqlen_balancing.cli._text import pct, plural, table
from seqlen_balancing.cli.results import options_json
from seqlen_balancing.cli.trainers import SYNTHETIC_ROW_TOKENS, always_balances, batch_multiple

if TYPE_CHECKING:
    from seqlen_balancing.cli.results import RankResult, Step, StepResult, VerlResult

__all__ = [
    "PLAN_COLUMNS",
    "SWEEP_COLUMNS",
    "Column",
    "columns_help",
    "plan_json",
    "print_plan",
    "print_sweep",
    "sweep_json",
]

Row = TypeVar("Row")


@dataclass(frozen=True)
class Column(Generic[Row]):
    """One table column: header, help line, cell text, and when it is shown."""

    header: str
    help: str
    cell: Callable[[Row, argparse.Namespace], str]
    shown: Callable[[argparse.Namespace], bool] = lambda args: True


def _verl_on(args: argparse.Namespace) -> bool:
    return bool(args.compare_verl)


def _aligned_on(args: argparse.Namespace) -> bool:
    """The cap is on aligned tokens (an alignment option was given): show both."""
    return not _padded_on(args) and bool(
        (args.pad_to_multiple_of or 1) > 1 or args.tp is not None or (args.micro_batch_multiple_of or 1) > 1
    )


def _padded_on(args: argparse.Namespace) -> bool:
    """--padded: the cap is on rows x width; show that footprint."""
    return bool(args.options.padded)


def _saving(ours: int, verl: int | None) -> str:
    return "-" if verl is None else f"{verl - ours} ({pct((verl - ours) / verl) if verl else '0.0%'})"


def _verl_text(result: StepResult, rank: int | None = None) -> str:
    """verl's count on ``rank``, or its range over the ranks; '>K' or 'fails' where it has none."""
    verl = result.verl
    if verl is None or verl.counts is None:
        return f">{verl.above}" if verl is not None and verl.above is not None else "fails"
    return _range_text(verl.counts if rank is None else [verl.counts[rank]])


# Plan rows carry the rank and the step result (for verl's counts).
PlanRow = tuple["RankResult", "StepResult"]

PLAN_COLUMNS: list[Column[PlanRow]] = [
    Column("rank", "DP rank", lambda x, a: str(x[0].rank)),
    Column("samples", "rows the rank got", lambda x, a: str(x[0].samples)),
    Column("tokens", "tokens on the rank (sum of its lengths; --prefix-lengths: each group's prefix "
           "once per micro-batch holding it)", lambda x, a: str(x[0].tokens)),
    Column(
        "aligned",
        "with an alignment option: what the rank's samples cost on the GPU (each length rounded "
        "up to --pad-to-multiple-of or Megatron's alignment)",
        lambda x, a: str(x[0].aligned_tokens),
        _aligned_on,
    ),
    Column(
        "footprint",
        "--padded: token positions the rank's micro-batches hold, each its rows x its widest "
        "row (rounded up to --pad-to-multiple-of)",
        lambda x, a: str(x[0].aligned_tokens),
        _padded_on,
    ),
    Column(
        "micro-batches",
        "this library's count (the same on every rank unless --no-same-micro-num-in-dp)",
        lambda x, a: str(x[0].count),
    ),
    Column(
        "L2 bound",
        "Martello-Toth L2 lower bound over the single samples (a group's samples taken apart): no "
        "plan under the cap has fewer micro-batches; 'bound' takes the groups (or parts) whole",
        lambda x, a: str(x[0].l2_lower_bound),
    ),
    Column(
        "bound",
        "the strongest lower bound this rank needed: no plan of its batch has fewer "
        "micro-batches; '*' when the rank's own smallest count meets it (proven optimal)",
        lambda x, a: f"{x[0].analysis.lower_bound}" + ("*" if x[0].analysis.proven_optimal else ""),
    ),
    Column(
        "by",
        "which bound that is: L2, cardinality (most samples per micro-batch), matching (samples "
        "over cap/3 pair at most two to a micro-batch), reduction (Martello-Toth), "
        "Fekete-Schepers (dual feasible functions), min_num_micro_batch, one, padded sorted rule "
        "(--padded: the fewest micro-batches exactly), or samples per micro-batch "
        "(--max-samples-per-micro-batch)",
        lambda x, a: x[0].analysis.bound_name,
    ),
    Column(
        "largest mb",
        "tokens in the fullest micro-batch (never above the cap)",
        lambda x, a: str(x[0].largest),
    ),
    Column(
        "aligned mb",
        "with an alignment option: the costliest micro-batch in aligned tokens, its total rounded "
        "up to --micro-batch-multiple-of (never above the cap: the cap holds on this)",
        lambda x, a: str(x[0].largest_cost),
        _aligned_on,
    ),
    Column(
        "footprint mb",
        "--padded: the largest micro-batch's footprint, rows x its widest row (never above the "
        "cap: the cap holds on this)",
        lambda x, a: str(x[0].largest_cost),
        _padded_on,
    ),
    Column("fill", "tokens / (micro-batches x cap): how full the passes are", lambda x, a: pct(x[0].fill)),
    Column(
        "workload spread",
        "(max - min) / mean of the micro-batches' workloads (verl's cost 24576*s + s**2 per "
        "sample); 0 is perfectly balanced",
        lambda x, a: f"{x[0].workload_spread:.3f}",
    ),
    Column(
        "verl count",
        "--compare-verl: micro-batches verl 0.9.1's rule uses on the same rank (Karmarkar-"
        "Karp from ceil(total / cap) upwards until every micro-batch fits, same DP "
        "agreement); '>K': the search stopped (--verl-max-tries); 'fails': verl raises",
        lambda x, a: _verl_text(x[1], x[0].rank),
        _verl_on,
    ),
    Column(
        "saved",
        "--compare-verl: verl count - micro-batches, and that as a percent of verl's count",
        lambda x, a: _saving(
            x[0].count, x[1].verl.counts[x[0].rank] if x[1].verl and x[1].verl.counts else None
        ),
        _verl_on,
    ),
]


def _range_text(counts: list[int]) -> str:
    """``"3"`` when every count is 3, else ``"low-high"``."""
    return str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


SWEEP_COLUMNS: list[Column[StepResult]] = [
    Column(
        "max_token_len", "max_token_len_per_gpu in tokens", lambda r, a: str(r.max_token_len // a.sp_size)
    ),
    Column(
        "cap",
        "--sp-size N: tokens per micro-batch, max_token_len x N",
        lambda r, a: str(r.max_token_len),
        lambda a: a.sp_size > 1,
    ),
    Column(
        "count/rank",
        "this library's micro-batches per rank (a range when the ranks differ)",
        lambda r, a: _range_text(r.counts),
    ),
    Column("total mbs", "micro-batches on all ranks together", lambda r, a: str(r.total_micro_batches)),
    Column(
        "L2 bound",
        "sum over ranks of the Martello-Toth L2 lower bound",
        lambda r, a: str(r.l2_lower_bound_total),
    ),
    Column(
        "bound",
        "lower bound on total micro-batches: each rank's strongest bound (rounded up to "
        "--num-batches-divided-by; the largest on every rank under agreement)",
        lambda r, a: str(r.lower_bound_total),
    ),
    Column(
        "optimal",
        "'yes' when total mbs meets the bound: proven optimal; 'no': a gap remains (the count "
        "may still be optimal)",
        lambda r, a: "yes" if r.proven_optimal else "no",
    ),
    Column("mean fill", "total tokens / (total micro-batches x cap)", lambda r, a: pct(r.mean_fill)),
    Column("largest mb", "tokens in the fullest micro-batch", lambda r, a: str(r.largest)),
    Column(
        "aligned mb",
        "with an alignment option: the costliest micro-batch in aligned tokens (never above the cap)",
        lambda r, a: str(r.largest_cost),
        _aligned_on,
    ),
    Column(
        "footprint mb",
        "--padded: the largest micro-batch's rows x its widest row (never above the cap)",
        lambda r, a: str(r.largest_cost),
        _padded_on,
    ),
    Column(
        "padding",
        "--padded: share of the footprint that is padding, 1 - tokens / token positions held",
        lambda r, a: pct(r.padding_share),
        _padded_on,
    ),
    Column(
        "time", "wall time of this library's planning for the cap", lambda r, a: f"{1000 * r.seconds:.1f} ms"
    ),
    Column(
        "truncated",
        "--truncate: samples clipped to the cap",
        lambda r, a: str(r.truncated),
        lambda a: a.truncate,
    ),
    Column(
        "verl count/rank",
        "--compare-verl: verl 0.9.1's micro-batches per rank on the same step",
        lambda r, a: _verl_text(r),
        _verl_on,
    ),
    Column(
        "saved",
        "--compare-verl: verl's total - this library's total micro-batches (percent of verl's)",
        lambda r, a: _saving(r.total_micro_batches, r.verl_total),
        _verl_on,
    ),
    Column(
        "global count/rank",
        "the global planner's micro-batches per rank (plan_global_batch, choosing the ranks itself)",
        lambda r, a: _modeled_cell(r, "global", lambda m: str(m.count)),
    ),
    Column(
        "verl time",
        "--compare-verl: modeled step time under verl's plans (the lock-step model, fixed costs "
        "included), in tokens of linear work: the same unit at every cap",
        lambda r, a: _modeled_cell(r, "verl", _time_text),
        _verl_on,
    ),
    Column("library time", "modeled step time under this library's plans per rank (as verl time)",
           lambda r, a: _modeled_cell(r, "library", _time_text)),
    Column("global time", "modeled step time under the global planner's plan (as verl time)",
           lambda r, a: _modeled_cell(r, "global", _time_text)),
    Column(
        "vs fastest",
        "library time against the fastest cap's ('fastest'; equal times: the smaller cap)",
        lambda r, a: _vs_fastest(r, a),
    ),
    Column(
        "limit",
        "--max-token-len-limit N: 'fastest' on the fastest cap (library time) at or below N, "
        "'over' on caps above N",
        lambda r, a: _limit_cell(r, a),
        lambda a: getattr(a, "max_token_len_limit", None) is not None,
    ),
]


def _model_of(result: StepResult, kind: str) -> modeled.Modeled | None:
    return next((m for m in result.modeled if m.kind == kind), None)


def _modeled_cell(result: StepResult, kind: str, text: Callable[[modeled.Modeled], str]) -> str:
    m = _model_of(result, kind)
    if m is None or (m.step_time is None and m.error is None):
        return "-"
    return "fails" if m.step_time is None else text(m)


def _time_text(m: modeled.Modeled) -> str:
    return f"{m.in_tokens:,.0f}"


def _sweep_rows(outcomes: Sequence[StepResult | tuple[int, str]], sp_size: int
                ) -> list[tuple[int, list[modeled.Modeled]]]:
    """Each planned cap's ``max_token_len`` with its models (:func:`modeled.fastest` reads them)."""
    return [(o.max_token_len // sp_size, o.modeled) for o in outcomes if not isinstance(o, tuple)]


def _vs_fastest(result: StepResult, args: argparse.Namespace) -> str:
    rows = getattr(args, "sweep_rows", [])
    best = modeled.fastest(rows, "library")
    mine = _model_of(result, "library")
    if best is None or mine is None or mine.in_tokens is None:
        return "-"
    if result.max_token_len // args.sp_size == best:
        return "fastest"
    least = next(m.in_tokens for cap, models in rows if cap == best for m in models if m.kind == "library")
    return f"{100 * (mine.in_tokens / least - 1):+.1f}%" if least else "-"


def _limit_cell(result: StepResult, args: argparse.Namespace) -> str:
    limit, cap = args.max_token_len_limit, result.max_token_len // args.sp_size
    if cap > limit:
        return "over"
    return "fastest" if modeled.fastest(getattr(args, "sweep_rows", []), "library", limit) == cap else ""


def _fastest_lines(args: argparse.Namespace, rows: list[tuple[int, list[modeled.Modeled]]]) -> list[str]:
    """The sweep's answer: the fastest cap under each kind of plan modeled (and at or below
    ``--max-token-len-limit``)."""
    lines = []
    for limit in [None] + ([args.max_token_len_limit] if args.max_token_len_limit is not None else []):
        found = [(kind, modeled.fastest(rows, kind, limit)) for kind in ("library", "global", "verl")
                 if modeled.fastest(rows, kind) is not None]  # the kinds modeled at some cap
        named = ", ".join(f"{_KIND_WORDS[kind]} {'none' if cap is None else cap}" for kind, cap in found)
        if named:
            where = "" if limit is None else f" at or below --max-token-len-limit {limit}"
            lines.append(f"fastest max_token_len{where} in the lock-step model "
                         f"(micro_batch_fixed_tokens {modeled.fixed_tokens_of(args.options):g}): {named}")
    return lines


#: How the sweep's answer names each kind of plan.
_KIND_WORDS = {"library": "this library per rank", "global": "the global planner", "verl": "verl's plans"}


def columns_help(command: str) -> str:
    """The ``--help`` epilog: one line per column of ``command``'s table."""
    columns: Sequence[Column[Any]] = PLAN_COLUMNS if command == "plan" else SWEEP_COLUMNS
    width = max(len(c.header) for c in columns)
    return "\n".join([
        f"columns of the {command} table:",
        *(line for c in columns for line in textwrap.wrap(
            c.help, 96, break_on_hyphens=False, initial_indent=f"  {c.header.ljust(width)}  ",
            subsequent_indent=" " * (width + 4))),
        "exit codes: 0 planned; 1 the step cannot be planned under the cap; 2 bad usage or input",
    ])


def _cap_text(args: argparse.Namespace, cap: int | None) -> str:
    if args.sp_size == 1:
        return f"max_token_len {cap}" if cap is not None else "max_token_len as in each row"
    if cap is None:
        return f"cap per micro-batch = max_token_len x sp_size {args.sp_size}"
    return f"max_token_len {cap // args.sp_size} x sp_size {args.sp_size} = cap {cap} tokens per micro-batch"


def _alignment_text(args: argparse.Namespace) -> str:
    pad, bucket = args.options.pad_to_multiple_of, args.options.micro_batch_multiple_of
    source = "" if args.tp is None else (
        f" (verl's Megatron THD rule for tp {args.tp}, cp {args.cp or 1}{', fp8' if args.fp8 else ''})")
    parts = []
    if pad > 1 or source:
        parts.append(f"each sample costs its length rounded up to a multiple of {pad} tokens{source}")
    if bucket > 1:
        given = args.micro_batch_multiple_of
        combined = (
            f" (the least common multiple of --micro-batch-multiple-of {given} and FP8's total)"
            if given and given != bucket else ""
        )
        parts.append(
            f"each micro-batch's total is rounded up to a multiple of {bucket}{combined} (a cap is "
            f"usable as cap // {bucket} * {bucket})"
        )
    if _padded_on(args):
        parts.append("a micro-batch costs its rows x its widest row, cut to that width (--padded)")
    if args.options.max_samples_per_micro_batch:
        parts.append(f"at most {args.options.max_samples_per_micro_batch} samples per micro-batch")
    return "cap on what the GPU holds: " + ("; ".join(parts) or "each sample costs its length (no alignment)")


def _other_options(args: argparse.Namespace) -> dict[str, str]:
    """The options given that no other header line shows (their values as text)."""
    shown = {"pad_to_multiple_of", "micro_batch_multiple_of", "padded",
             "max_samples_per_micro_batch", "force_group_size", "same_micro_num_in_dp"}
    return {name: str(value) for name, value in args.options.changed().items() if name not in shown}


def describe(step: Step, args: argparse.Namespace, cap: int | None) -> list[str]:
    """The header lines: what was read, how the step was formed, the cap."""
    n = len(step.lengths) - step.synthetic
    how = {
        "without_replacement": f"drawn without replacement, seed {args.seed}",
        "with_replacement": f"drawn with replacement, seed {args.seed}",
        "in_order": "the first ones in input order",
        "whole_file": f"all {plural(n, 'row')} once, in file order",
    }[step.sampling]
    lines = [
        f"{plural(step.dp_size, 'DP rank')} x {plural(step.batch_size, 'sample')} from "
        f"{'bundled CHAMP lengths' if step.source == 'champ' else step.source} ({plural(n, 'length')}; "
        f"{how}{f', lengths x {args.scale:g}' if args.scale != 1.0 else ''}); {_cap_text(args, cap)}"
    ]
    if step.counted:
        lines.append(step.counted)
    if _aligned_on(args) or _padded_on(args) or args.options.max_samples_per_micro_batch:
        lines.append(_alignment_text(args))
    lines.append(step_text(step.dp_size, args))
    if step.synthetic:
        minis = tuple(getattr(args, "mini_batch_size", None) or ())
        to = (f"{batch_multiple(step.dp_size, minis)}, the least common multiple of --dp-size "
              f"{step.dp_size} and --mini-batch-size {','.join(map(str, minis))}" if minis else
              f"--dp-size {step.dp_size} (verl also pads to its PPO mini-batch sizes: pass "
              "--mini-batch-size)")
        lines.append(
            f"verl's V1 trainer pads the batch with {plural(step.synthetic, 'synthetic row')} of "
            f"{SYNTHETIC_ROW_TOKENS} tokens to a multiple of {to} "
            "(upsample_batch_to_divisible_size), planned with the rest"
        )
    if getattr(args, "balance_batch_ignored", False):
        lines.append(
            "--no-balance-batch: verl 0.9.1's V1 trainer (main_ppo's default) balances every step "
            "whatever trainer.balance_batch says, so the step is balanced here too (--trainer "
            "main_ppo_v0 models the legacy trainer, which follows the flag)"
        )
    sizes = getattr(args, "group_sizes", None)
    if sizes:
        lines.append(
            f"groups (group_ids): each rank's rows in consecutive groups of {','.join(map(str, sizes))}"
            f"{' rows, cycled' if len(sizes) > 1 else ' rows'}; each group lands whole in one micro-batch"
        )
    if step.prefixes:
        lines.append(
            f"shared prompts (--prefix-lengths {args.prefix_lengths}): a micro-batch holds each group's "
            "prefix once (a group over the cap is cut into parts that each pay it); tokens are what the "
            "GPU holds" + ("; verl's count counts every prompt in full" if args.compare_verl else "")
            + "; step time not modeled")
    if _other_options(args):
        lines.append("options: " + ", ".join(f"{k}={v}" for k, v in _other_options(args).items()))
    return lines + modeled.not_applied_lines(args.options, (["verl"] if args.compare_verl else []) + (
        ["global"] if getattr(args, "command", None) == "plan" and not sizes and not step.prefixes else []))


def step_text(dp_size: int, args: argparse.Namespace) -> str:
    """The header line naming the trainer modelled and how it deals the step's rows."""
    trainer = args.trainer
    if trainer == "sft_trainer":
        deal = (
            f"rank r takes the step's rows r, r + {dp_size}, r + {2 * dp_size}, ... "
            "(DistributedSampler), never balanced" if dp_size > 1 else "one DP rank, never balanced"
        )
    elif args.balance_batch and dp_size > 1:
        group = args.options.force_group_size
        how = ("as verl's V1 trainer does on every step" if always_balances(trainer)
               else "as verl's trainer.balance_batch")
        deal = (
            f"balanced across DP ranks {how} (equal sample counts, "
            f"Karmarkar-Karp on workload{f', groups of {group} rows kept whole' if group > 1 else ''}); "
            "equal contiguous chunks per rank (verl's dispatch)"
        )
    else:
        deal = (
            "not balanced across DP ranks (--no-balance-batch); equal contiguous chunks per rank "
            "(verl's dispatch)" if dp_size > 1 else "one DP rank"
        )
    return (f"step (verl 0.9.1 {trainer}): {deal}; "
            f"same_micro_num_in_dp {'on' if args.options.same_micro_num_in_dp else 'off'}")


def print_plan(step: Step, args: argparse.Namespace, result: StepResult) -> None:
    """The ``plan`` report: header, one row per rank, summary (and verl's, if asked)."""
    cap = result.max_token_len
    lines = describe(step, args, cap)
    if result.truncated:
        lines.append(f"{plural(result.truncated, 'drawn sample')} over the cap of {cap} tokens "
                     "truncated to the cap")
    shown = [c for c in PLAN_COLUMNS if c.shown(args)]
    lines.append(table([c.header for c in shown], [[c.cell((r, result), args) for c in shown]
                                                   for r in result.ranks]))
    agreed, same = result.agreed_count, args.options.same_micro_num_in_dp
    gap = result.total_micro_batches - result.lower_bound_total
    if same and agreed is not None:
        counts = f"agreed count {plural(agreed, 'micro-batch')} per rank"
    else:
        counts = (f"{'no agreed count' if same else 'no agreement'} "
                  f"(per-rank counts {_range_text(result.counts)})")
    lines.append(
        f"{counts}; total {plural(result.total_micro_batches, 'micro-batch')} "
        f"(L2 bound {result.l2_lower_bound_total}, lower bound {result.lower_bound_total}: "
        f"{'proven optimal' if gap == 0 else plural(gap, 'micro-batch') + ' above it'}); "
        f"mean fill {pct(result.mean_fill)}; "
        f"largest micro-batch {result.largest} tokens"
        + (f" (costliest {result.largest_cost} aligned tokens)" if _aligned_on(args) else "")
    )
    lines += [  # --over-cap alone: one line per rank holding samples over the cap
        f"rank {r.rank}: {plural(len(r.over_cap_alone), 'sample')} over the cap of "
        f"{result.max_token_len} run alone (--over-cap alone; may run out of memory): "
        + ", ".join(f"sample {p} ({c} tokens)" for p, c in r.over_cap_alone)
        for r in result.ranks if r.over_cap_alone
    ]
    if any(r.rows for r in result.ranks):
        lines.append(_filler_line(result))
    if result.verl is not None:
        lines.append(_verl_summary(result.verl, result.total_micro_batches))
    lines += modeled.lines(result.modeled, cap, modeled.fixed_tokens_of(args.options))
    print("\n".join(lines))


def _filler_line(result: StepResult) -> str:
    """``--equal-rows-per-micro-batch``: the rows of every micro-batch and the filler rows."""
    rows = max(r.rows for r in result.ranks)
    filler = sum(sum(r.filler) for r in result.ranks)
    held = rows * sum(r.count for r in result.ranks)
    return (
        f"equal rows: every micro-batch holds {plural(rows, 'row')}; "
        f"{plural(filler, 'filler row')} ({pct(filler / held) if held else '0.0%'} of the rows "
        "held; zero-weight rows of one token, counted under the cap)"
    )


def _verl_summary(verl: VerlResult, ours: int) -> str:
    if verl.counts is None:
        if verl.above is not None:
            return f"verl 0.9.1's rule: count above {verl.above} (search stopped; raise --verl-max-tries)"
        return f"verl 0.9.1's rule fails on this step: {verl.error}"
    total = sum(verl.counts)
    low, high = min(verl.counts), max(verl.counts)
    per_rank = plural(low, "micro-batch") if low == high else f"{low}-{high} micro-batches"
    return (
        f"verl 0.9.1's rule: {per_rank} per rank, total {total}; this library saves "
        f"{plural(total - ours, 'micro-batch')} ({pct((total - ours) / total) if total else '0.0%'})"
    )


def print_sweep(
    step: Step, args: argparse.Namespace, outcomes: Sequence[StepResult | tuple[int, str]],
    smallest: int | None = None,
) -> None:
    """The ``sweep`` report: header, one row per cap (infeasible ones included, marked), the
    smallest cap that can be planned at all, notes for infeasible caps."""
    lines = describe(step, args, None)
    args = argparse.Namespace(**vars(args), sweep_rows=_sweep_rows(outcomes, args.sp_size))
    shown = [c for c in SWEEP_COLUMNS if c.shown(args)]
    rows, notes = [], []
    for r in outcomes:
        if isinstance(r, tuple):
            first = [str(r[0] // args.sp_size)] + ([str(r[0])] if args.sp_size > 1 else [])
            rows.append([*first, "infeasible"] + ["-"] * (len(shown) - len(first) - 1))
            notes.append(f"max_token_len {r[0] // args.sp_size}: {r[1]}")
        else:
            rows.append([c.cell(r, args) for c in shown])
    lines += [table([c.header for c in shown], rows), *_fastest_lines(args, args.sweep_rows)]
    if smallest is not None:
        lines.append(_smallest_text(args, smallest))
    print("\n".join(lines + notes))


def _smallest_text(args: argparse.Namespace, smallest: int) -> str:
    unit = "aligned tokens" if _aligned_on(args) else "tokens"
    below = ("a sample or group over it runs alone (--over-cap alone)" if args.options.over_cap == "alone"
             else "the step cannot be planned")
    return (
        "smallest max_token_len that fits every sample and group"
        f"{' without --truncate' if args.truncate else ''}: {smallest} (the costliest, in {unit}); below "
        f"it {below}"
    )


# --------------------------------------------------------------------------- JSON


def settings(step: Step, args: argparse.Namespace) -> dict[str, Any]:
    """The input and step settings shared by ``plan --json`` and ``sweep --json``."""
    return {
        "source": step.source,
        "n_lengths": len(step.lengths),
        "sampling": step.sampling,
        "seed": args.seed,
        "scale": args.scale,
        "counted": step.counted,
        "dp_size": step.dp_size,
        "batch_size": step.batch_size,
        "sp_size": args.sp_size,
        "trainer": args.trainer,
        "balance_batch": args.balance_batch,
        "same_micro_num_in_dp": args.options.same_micro_num_in_dp,
        "force_group_size": args.options.force_group_size,
        "group_sizes": list(getattr(args, "group_sizes", None) or []) or None,
        "prefix_lengths": getattr(args, "prefix_lengths", None),
        "mini_batch_size": list(getattr(args, "mini_batch_size", None) or []) or None,
        "synthetic_rows": step.synthetic,
        "num_batches_divided_by": args.options.num_batches_divided_by,
        "min_num_micro_batch": args.options.min_num_micro_batch,
        "dynamic_bsz_balance": args.options.use_dynamic_bsz_balance,
        "over_cap": args.options.over_cap,
        "workload_model": options_json(args.options)["workload_model"],
        "pad_to_multiple_of": args.options.pad_to_multiple_of,
        "micro_batch_multiple_of": args.options.micro_batch_multiple_of,
        "tp": args.tp,
        "cp": args.cp,
        "fp8": bool(args.fp8),
        "padded": _padded_on(args),
        "max_samples_per_micro_batch": args.options.max_samples_per_micro_batch,
        "options": options_json(args.options),
    }


def _verl_json(result: StepResult) -> dict[str, Any]:
    if result.verl is None:
        return {}
    total, ours = result.verl_total, result.total_micro_batches
    return {
        "verl": {
            "counts": result.verl.counts,
            "total_micro_batches": total,
            "saved_micro_batches": None if total is None else total - ours,
            "saved_percent": None if not total else round(100 * (total - ours) / total, 3),
            "count_above": result.verl.above,
            "error": result.verl.error,
        }
    }


def emit_json(obj: dict[str, Any]) -> None:
    """One JSON object, one line, on stdout."""
    sys.stdout.write(json.dumps(obj) + "\n")


def plan_json(step: Step, args: argparse.Namespace, result: StepResult) -> dict[str, Any]:
    """The ``plan --json`` object (keys documented in :mod:`seqlen_balancing.cli`)."""
    info = settings(step, args)
    head = {k: info[k] for k in ("source", "n_lengths", "sampling", "seed", "scale", "counted")}
    rest = {k: v for k, v in info.items() if k not in head}
    verl = result.verl
    return {
        **head,
        "max_token_len": result.max_token_len // args.sp_size,
        "cap": result.max_token_len,
        **rest,
        "truncated": result.truncated,
        "ranks": [
            {
                "rank": r.rank,
                "samples": r.samples,
                "tokens": r.tokens,
                "aligned_tokens": r.aligned_tokens,
                "count": r.count,
                **({"verl_count": verl.counts[r.rank] if verl.counts else None} if verl else {}),
                "l2_lower_bound": r.l2_lower_bound,
                "lower_bound": r.analysis.lower_bound,
                "bound_name": r.analysis.bound_name,
                "proven_optimal": r.analysis.proven_optimal,
                "largest_micro_batch": r.largest,
                "largest_micro_batch_cost": r.largest_cost,
                "fill": round(r.fill, 6),
                "workload_spread": round(r.workload_spread, 6),
                "over_cap_alone": [{"index": p, "cost": c} for p, c in r.over_cap_alone],
                **({"rows": r.rows, "filler_rows": sum(r.filler)} if r.rows else {}),
                "micro_batches": [
                    {"indices": mb, "tokens": t, "cost": c}
                    for mb, t, c in zip(r.micro_batches, r.micro_batch_tokens, r.micro_batch_costs,
                                        strict=True)
                ],
            }
            for r in result.ranks
        ],
        "agreed_count": result.agreed_count,
        "total_micro_batches": result.total_micro_batches,
        "mean_fill": round(result.mean_fill, 6),
        "largest_micro_batch": result.largest,
        "largest_micro_batch_cost": result.largest_cost,
        "l2_lower_bound_total": result.l2_lower_bound_total,
        "lower_bound_total": result.lower_bound_total,
        "proven_optimal": result.proven_optimal,
        **_verl_json(result),
        "step_time": modeled.to_json(result.modeled, modeled.fixed_tokens_of(args.options)),
    }


def sweep_row_json(result: StepResult, sp_size: int, fixed_tokens: float | None = None) -> dict[str, Any]:
    """One ``sweep --json`` row (``step_time`` with ``fixed_tokens``: the lock-step model)."""
    return {
        "max_token_len": result.max_token_len // sp_size,
        "cap": result.max_token_len,
        "agreed_count": result.agreed_count,
        "micro_batches_per_rank": result.counts,
        "total_micro_batches": result.total_micro_batches,
        "l2_lower_bound_total": result.l2_lower_bound_total,
        "lower_bound_total": result.lower_bound_total,
        "proven_optimal": result.proven_optimal,
        "mean_fill": round(result.mean_fill, 6),
        "largest_micro_batch": result.largest,
        "largest_micro_batch_cost": result.largest_cost,
        "truncated": result.truncated,
        "over_cap_alone": sum(len(r.over_cap_alone) for r in result.ranks),
        "micro_batch_tokens": [r.micro_batch_tokens for r in result.ranks],
        "seconds": round(result.seconds, 6),
        **_verl_json(result),
        **({} if fixed_tokens is None else {"step_time": modeled.to_json(result.modeled, fixed_tokens)}),
    }


def sweep_json(
    step: Step, args: argparse.Namespace, outcomes: Sequence[StepResult | tuple[int, str]],
    smallest: int | None = None,
) -> dict[str, Any]:
    """The ``sweep --json`` object."""
    fixed_tokens = modeled.fixed_tokens_of(args.options)
    models, limit = _sweep_rows(outcomes, args.sp_size), args.max_token_len_limit
    kinds = ("verl", "library", "global")
    return {**settings(step, args), "smallest_max_token_len": smallest, "max_token_len_limit": limit,
            "fastest": {kind: modeled.fastest(models, kind) for kind in kinds},
            "fastest_within_limit": None if limit is None
            else {kind: modeled.fastest(models, kind, limit) for kind in kinds},
            "rows": [{"max_token_len": o[0] // args.sp_size, "cap": o[0], "error": o[1]}
                     if isinstance(o, tuple) else sweep_row_json(o, args.sp_size, fixed_tokens)
                     for o in outcomes]}
