"""The entry point: parse, run ``plan`` or ``sweep``, turn failures into one line and an exit code."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from seqlen_balancing.cli._text import PROG, CliError
from seqlen_balancing.cli.arguments import build_parser, check_combinations

__all__ = ["main"]


def _plot_checked(args: argparse.Namespace) -> Any:
    """matplotlib's Figure class when ``--plot`` is given (else ``None``), after checking,
    before anything is read or planned, that the plot can be written where asked."""
    from seqlen_balancing.cli import plot

    if not args.plot:
        return None
    plot.check_plot_path(args.plot)
    figure_class = plot.load_figure_class()
    plot.check_plot_format(figure_class, args.plot)
    return figure_class


def _run_plan(args: argparse.Namespace) -> int:
    from seqlen_balancing.cli import plot, report
    from seqlen_balancing.cli.load import load_lengths
    from seqlen_balancing.cli.step import make_step, plan_step

    figure_class = _plot_checked(args)
    step = make_step(args, load_lengths(args))
    result = plan_step(step, args.max_token_len * args.sp_size, args)
    if args.json:
        report.emit_json(report.plan_json(step, args, result))
    else:
        report.print_plan(step, args, result)
    if figure_class is not None:
        plot.save_plan_plot(figure_class, result, args.plot)
        print(f"{PROG}: plot written to {args.plot}", file=sys.stderr)
    return 0


def _run_sweep(args: argparse.Namespace) -> int:
    from seqlen_balancing.cli import plot, report
    from seqlen_balancing.cli.load import load_lengths
    from seqlen_balancing.cli.results import StepResult
    from seqlen_balancing.cli.step import make_step, plan_step, smallest_cap

    figure_class = _plot_checked(args)
    step = make_step(args, load_lengths(args))
    smallest = smallest_cap(step, args)
    outcomes: list[StepResult | tuple[int, str]] = []
    for cap in args.max_token_len:
        try:
            outcomes.append(plan_step(step, cap * args.sp_size, args))
        except CliError as exc:
            if exc.code != 1:
                raise
            outcomes.append((cap * args.sp_size, str(exc)))  # an infeasible cap is a row, not the end
    planned = [o for o in outcomes if not isinstance(o, tuple)]
    if args.json:
        report.emit_json(report.sweep_json(step, args, outcomes, smallest))
    else:
        report.print_sweep(step, args, outcomes, smallest)
    if figure_class is not None:
        plot.save_sweep_plot(figure_class, outcomes, args.plot)
        print(f"{PROG}: plot written to {args.plot}", file=sys.stderr)
    if not planned:  # the table (every row infeasible) is printed; the exit code says so
        print(f"{PROG}: error: no cap of the sweep can be planned (smallest that can: "
              f"max_token_len {smallest})", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise CliError(f"choose a command, plan or sweep (see '{PROG} --help')")
        check_combinations(args)
        if args.command == "plan":
            return _run_plan(args)
        return _run_sweep(args)
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:  # Ctrl-C during a long count: no traceback
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) left early: not an error of ours, and no traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
