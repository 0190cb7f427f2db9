"""The entry point: parse, run ``plan``, ``sweep`` or ``epoch``; failures become one line and an exit code."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from seqlen_balancing.cli._text import PROG, CliError
from seqlen_balancing.cli.arguments import build_parser, check_combinations

__all__ = ["main"]


def _planned(step: Any, cap: int, args: argparse.Namespace) -> Any:
    """``sweep``: the step planned at ``cap`` (per GPU), or ``(cap x sp, message)`` where it
    cannot be: an infeasible cap is a row, not the end."""
    from seqlen_balancing.cli.step import plan_step

    try:
        return plan_step(step, cap * args.sp_size, args)
    except CliError as exc:
        if exc.code != 1:
            raise
        return (cap * args.sp_size, str(exc))


def _run_steps(args: argparse.Namespace) -> int:
    """``plan`` (one cap, in detail) or ``sweep`` (a row per cap): report, then plot."""
    from seqlen_balancing.cli import plot, report
    from seqlen_balancing.cli.load import load_lengths
    from seqlen_balancing.cli.step import make_step, plan_step, smallest_cap

    figure_class = plot.figure_class_for(args.plot) if args.plot else None  # checked before any reading
    step = make_step(args, load_lengths(args))
    if args.command == "plan":
        found: Any = plan_step(step, args.max_token_len * args.sp_size, args)
        extra: tuple[Any, ...] = ()
        shown: tuple[Any, ...] = (report.plan_json, report.print_plan, plot.save_plan_plot)
    else:
        extra = (smallest_cap(step, args),)
        found = [_planned(step, cap, args) for cap in args.max_token_len]
        shown = (report.sweep_json, report.print_sweep, plot.save_sweep_plot)
    to_json, to_text, to_plot = shown
    if args.json:
        report.emit_json(to_json(step, args, found, *extra))
    else:
        to_text(step, args, found, *extra)
    if figure_class is not None:
        to_plot(figure_class, found, args.plot)
        print(f"{PROG}: plot written to {args.plot}", file=sys.stderr)
    if extra and all(isinstance(o, tuple) for o in found):  # every row infeasible: the table is printed
        print(f"{PROG}: error: no cap of the sweep can be planned (none below max_token_len "
              f"{extra[0]} can: the costliest sample or group)", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise CliError(f"choose a command, plan, sweep or epoch (see '{PROG} --help')")
        check_combinations(args)
        if args.command == "epoch":
            from seqlen_balancing.cli.epoch import run_epoch

            return run_epoch(args)
        return _run_steps(args)
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:  # Ctrl-C during a long count: no traceback
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) left early: not an error of ours, and no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
