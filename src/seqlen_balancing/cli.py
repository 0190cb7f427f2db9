"""Command-line planner: ``seqlen-balancing plan`` and ``seqlen-balancing sweep``.

Both commands simulate one training step on a data-parallel (DP) group: they draw
``dp_size * batch_size`` sequence lengths, give sample ``i`` of the draw to rank
``i // batch_size`` and plan every rank's micro-batches with
:func:`seqlen_balancing.agreement.plan_data_parallel`, i.e. with the same agreement rule a real
DP group uses. ``plan`` shows one cap in detail; ``sweep`` repeats the step for several caps
(comma-separated ``--max-token-len``, sorted ascending, duplicates dropped) so you can see
where a larger token budget stops saving micro-batches. Nothing here imports torch.

Input lengths:

* default: the bundled CHAMP lengths (19,440 conversations, Qwen3 tokenizer);
* ``--lengths FILE`` (``-`` for stdin): one integer per line (blank lines are skipped), or a
  JSON list of integers, or JSON Lines with ``--field NAME`` naming the key that holds the
  length (``--field`` also accepts a JSON list of objects).

The draw is ``random.Random(seed).sample(lengths, dp_size * batch_size)`` (without
replacement). Only for the bundled data, when it holds fewer lengths than needed, the draw
is ``random.Random(seed).choices(lengths, k=dp_size * batch_size)`` (with replacement); a
``--lengths`` input that is too short is an error. ``--in-order`` takes the first
``dp_size * batch_size`` lengths in input order instead (to replay a real step).
``--scale X`` multiplies every input length by ``X`` and rounds to the nearest integer
(halves up) before the draw. ``--truncate`` clips each drawn length to the cap instead of
failing (in ``sweep``, to each row's cap); the clipped length is the one planned and
reported.

Exit codes: 0 success; 1 the step cannot be planned (a sample longer than the cap, or a
planning error from the library, e.g. too few samples for the agreed count); 2 bad usage or
bad input (unreadable or malformed lengths, a cap that is not a positive integer, too few
lengths, matplotlib missing for ``--plot``). Errors are one line on stderr.

JSON output (``--json``, one object on stdout; keys are stable). Fills are fractions in
[0, 1]; the tables print them as percentages.

``plan --json``:

* ``source``: ``"champ"`` (bundled data), the ``--lengths`` path, or ``"-"`` (stdin);
  ``n_lengths``: how many lengths the input holds;
  ``sampling``: ``"without_replacement"``, ``"with_replacement"`` or ``"in_order"``;
  ``seed``, ``scale``: as given.
* The settings: ``max_token_len``, ``dp_size``, ``batch_size`` (per rank),
  ``same_micro_num_in_dp``, ``force_group_size``, ``num_batches_divided_by`` and
  ``min_num_micro_batch`` (``null`` when not given), ``dynamic_bsz_balance``.
* ``truncated``: how many drawn samples ``--truncate`` clipped to the cap (0 without it).
* ``ranks``: one object per DP rank, in rank order: ``rank``; ``samples``; ``tokens`` (sum
  of the rank's lengths); ``l2_lower_bound`` (Martello-Toth L2 bound on its micro-batch
  count); ``largest_micro_batch`` (tokens); ``fill`` (``tokens / (micro-batches * cap)``);
  ``workload_spread`` (``(max - min) / mean`` of the micro-batches' workloads, verl's cost
  ``24576*s + s**2`` summed over the samples); ``micro_batches``: the micro-batches in the
  order the rank runs them, each ``{"indices": [...], "tokens": int}`` where ``indices`` are
  positions in the input lengths list (the file or the bundled list, 0-based; a position
  can repeat under sampling with replacement) and ``tokens`` is the sum of their lengths.
* Summary: ``agreed_count`` (micro-batches per rank when every rank has the same count,
  else ``null``), ``total_micro_batches``, ``mean_fill`` (total tokens / (total
  micro-batches * cap)), ``largest_micro_batch``, ``l2_lower_bound_total`` (sum over ranks).

``sweep --json``: the same input and setting keys except ``max_token_len`` and
``truncated``, plus ``rows``: one object per cap, ascending, with ``max_token_len``,
``agreed_count``, ``micro_batches_per_rank`` (list), ``total_micro_batches``,
``l2_lower_bound_total``, ``mean_fill``, ``largest_micro_batch``, ``truncated`` and
``seconds`` (wall time of the planning call for that cap). ``plan --json`` holds no timing,
so its output is reproducible byte for byte.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

__all__ = ["main"]

PROG = "seqlen-balancing"
DEFAULT_DP_SIZE = 8
DEFAULT_BATCH_SIZE = 256
DEFAULT_CAP = 16384
DEFAULT_SWEEP_CAPS = (8192, 16384, 32768, 65536)
PLOT_HINT = "pip install 'seqlen-balancing[plot]'"

_INTEGER = re.compile(r"[+-]?\d+")


class CliError(Exception):
    """A failure reported as one line on stderr with exit code ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors become a one-line :class:`CliError` (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see '{self.prog} --help')", 2)


# --------------------------------------------------------------------------- arguments


def _short(text: str, limit: int = 40, quote: bool = True) -> str:
    """``text`` (quoted by ``repr`` unless ``quote`` is False), cut for one-line messages."""
    cut = text if len(text) <= limit else text[: limit - 3] + "..."
    return repr(cut) if quote else cut


def _int_text(text: str) -> int | None:
    """The integer ``text`` spells (at most 18 digits, surrounding blanks allowed), else None."""
    text = text.strip()
    if len(text) > 19 or not _INTEGER.fullmatch(text):
        return None
    return int(text)


def _positive_int(text: str) -> int:
    number = _int_text(text)
    if number is None or number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {_short(text)}")
    return number


def _cap_list(text: str) -> list[int]:
    caps: set[int] = set()
    for part in text.split(","):
        number = _int_text(part)
        if number is None or number < 1:
            raise argparse.ArgumentTypeError(
                f"must be positive integers separated by commas, got {_short(text)}"
            )
        caps.add(number)
    return sorted(caps)


def _single_cap(text: str) -> int:
    if "," in text:
        raise argparse.ArgumentTypeError(
            f"plan takes one cap, got {text!r}; use 'seqlen-balancing sweep' to compare caps"
        )
    return _positive_int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _add_common(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("input")
    data.add_argument(
        "--lengths",
        metavar="FILE",
        help="sequence lengths: one integer per line, a JSON list, or JSON Lines with "
        "--field; '-' reads stdin (default: the bundled CHAMP lengths)",
    )
    data.add_argument(
        "--field", metavar="NAME", help="JSON Lines key holding each length (needs --lengths)"
    )
    data.add_argument(
        "--scale",
        type=_positive_float,
        default=1.0,
        metavar="X",
        help="multiply every length by X and round (halves up), e.g. 2 to mimic rollouts "
        "twice as long (default: 1)",
    )
    data.add_argument("--seed", type=int, default=0, help="seed of the random draw (default: 0)")
    data.add_argument(
        "--in-order",
        action="store_true",
        help="take the first dp-size x batch-size lengths in input order instead of a "
        "seeded random draw",
    )
    data.add_argument(
        "--truncate",
        action="store_true",
        help="clip lengths longer than the cap to the cap instead of failing",
    )
    step = parser.add_argument_group("training step")
    step.add_argument(
        "--dp-size",
        type=_positive_int,
        default=DEFAULT_DP_SIZE,
        metavar="N",
        help=f"data-parallel ranks (default: {DEFAULT_DP_SIZE})",
    )
    step.add_argument(
        "--batch-size",
        type=_positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"samples per rank (default: {DEFAULT_BATCH_SIZE})",
    )
    step.add_argument(
        "--same-micro-num-in-dp",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="agree on one micro-batch count across the DP ranks (default: on)",
    )
    step.add_argument(
        "--force-group-size",
        type=_positive_int,
        default=1,
        metavar="N",
        help="consecutive samples that must share a micro-batch (default: 1)",
    )
    step.add_argument(
        "--num-batches-divided-by",
        type=_positive_int,
        metavar="N",
        help="round every micro-batch count up to a multiple of N",
    )
    step.add_argument(
        "--min-num-micro-batch",
        type=_positive_int,
        metavar="N",
        help="at least N micro-batches per rank",
    )
    step.add_argument(
        "--dynamic-bsz-balance",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="verl's micro-batch ordering, lightest at both ends (default: on)",
    )
    parser.add_argument("--json", action="store_true", help="write one JSON object to stdout")


def build_parser() -> argparse.ArgumentParser:
    """The ``seqlen-balancing`` argument parser (``plan`` and ``sweep`` subcommands)."""
    from seqlen_balancing import __version__

    parser = _Parser(
        prog=PROG,
        description="Plan strict-cap, DP-agreed micro-batches for one training step.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{plan,sweep}")
    plan = commands.add_parser(
        "plan",
        help="plan one step and show every rank's micro-batches",
        description="Plan one training step: one table row per DP rank, then a summary.",
    )
    plan.add_argument(
        "--max-token-len",
        type=_single_cap,
        default=DEFAULT_CAP,
        metavar="TOKENS",
        help=f"hard cap on tokens per micro-batch (default: {DEFAULT_CAP})",
    )
    plan.add_argument(
        "--plot",
        metavar="FILE.png",
        help="save tokens per micro-batch for each rank as a bar chart (needs the 'plot' "
        "extra: " + PLOT_HINT + ")",
    )
    _add_common(plan)
    sweep = commands.add_parser(
        "sweep",
        help="plan the same step for several caps, one row per cap",
        description="Plan the same training step for several caps, one table row per cap.",
    )
    sweep.add_argument(
        "--max-token-len",
        type=_cap_list,
        default=list(DEFAULT_SWEEP_CAPS),
        metavar="T1,T2,...",
        help="caps to compare, comma-separated (default: "
        + ",".join(map(str, DEFAULT_SWEEP_CAPS))
        + ")",
    )
    _add_common(sweep)
    return parser


# --------------------------------------------------------------------------- input


def _read_text(path: str) -> tuple[str, str]:
    """The text at ``path`` (``-``: stdin) and the name to use in messages."""
    if path == "-":
        try:
            return sys.stdin.read(), "<stdin>"
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read stdin: {exc}") from None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(), path
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(f"cannot read lengths file {path!r}: {reason}") from None


def _check_length(value: Any, where: str) -> int:
    """``value`` as a length, or a CliError naming ``where`` and what is wrong."""
    if isinstance(value, str):
        parsed = _int_text(value)
        if parsed is None:
            raise CliError(f"{where}: {_short(value.strip())} is not an integer length (up to 18 digits)")
        number = parsed
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise CliError(f"{where}: {_short(json.dumps(value), quote=False)} is not an integer length")
    if number < 0:
        raise CliError(f"{where}: length {number} is negative; lengths must be >= 0")
    return number


def _field_of(item: Any, field: str, where: str) -> Any:
    if not isinstance(item, dict):
        raise CliError(f"{where}: expected a JSON object with key {field!r}")
    if field not in item:
        raise CliError(f"{where}: no key {field!r} (keys: {', '.join(map(str, item))})")
    return item[field]


def parse_lengths(text: str, source: str, field: str | None = None) -> list[int]:
    """Parse lengths: one integer per line, a JSON list, or JSON Lines with ``field``.

    Raises:
        CliError: (exit 2) naming the line (or list index) of the first bad entry, or
            saying the input holds no lengths.
    """
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark is not part of the data
    stripped = text.lstrip()
    lengths: list[int] = []
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            raise CliError(f"{source}: not valid JSON ({_short(str(exc), 80)})") from None
        if not isinstance(items, list):
            raise CliError(f"{source}: expected a JSON list of lengths")
        for index, item in enumerate(items):
            where = f"{source}, list index {index}"
            value = item if field is None else _field_of(item, field, where)
            lengths.append(_check_length(value, where))
    elif field is not None or stripped.startswith("{"):
        if field is None:
            raise CliError(f"{source} looks like JSON Lines; pass --field NAME (the length key)")
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{source}, line {lineno}"
            try:
                item = json.loads(line)
            except (json.JSONDecodeError, RecursionError, ValueError):
                raise CliError(f"{where}: not a JSON object") from None
            lengths.append(_check_length(_field_of(item, field, where), where))
    else:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                lengths.append(_check_length(line, f"{source}, line {lineno}"))
    if not lengths:
        raise CliError(f"{source} holds no lengths")
    return lengths


def scale_lengths(lengths: Sequence[int], scale: float) -> list[int]:
    """Each length times ``scale``, rounded to the nearest integer (halves up)."""
    if scale == 1.0:
        return list(lengths)
    scaled = [n * scale + 0.5 for n in lengths]
    if not all(math.isfinite(x) and x < 2**62 for x in scaled):
        raise CliError(f"--scale {scale:g} makes a length too large (over 2**62 tokens)")
    return [math.floor(x) for x in scaled]


@dataclass(frozen=True)
class Step:
    """One training step: the input lengths and which of them each rank got."""

    source: str
    lengths: list[int]  # the whole input list, after --scale
    positions: list[int]  # drawn positions in ``lengths``; rank r has [r*B, (r+1)*B)
    sampling: str
    dp_size: int
    batch_size: int

    def rank_positions(self, rank: int) -> list[int]:
        return self.positions[rank * self.batch_size : (rank + 1) * self.batch_size]


def draw_step(args: argparse.Namespace) -> Step:
    """Load the lengths and draw ``dp_size * batch_size`` of them (see the module docstring)."""
    if args.lengths is None:
        if args.field is not None:
            raise CliError("--field applies to --lengths FILE; pass --lengths too")
        from seqlen_balancing.data import load_champ_lengths

        raw, source, name = load_champ_lengths(), "champ", "the bundled data"
    else:
        text, name = _read_text(args.lengths)
        raw, source = parse_lengths(text, name, args.field), args.lengths
    lengths = scale_lengths(raw, args.scale)
    n, needed = len(lengths), args.dp_size * args.batch_size
    rng = random.Random(args.seed)
    if n >= needed:
        if args.in_order:
            return Step(
                source, lengths, list(range(needed)), "in_order", args.dp_size, args.batch_size
            )
        positions = rng.sample(range(n), needed)
        return Step(
            source, lengths, positions, "without_replacement", args.dp_size, args.batch_size
        )
    if args.lengths is None and not args.in_order:
        positions = rng.choices(range(n), k=needed)
        return Step(source, lengths, positions, "with_replacement", args.dp_size, args.batch_size)
    how = "taken in input order" if args.in_order else "drawn without replacement"
    raise CliError(
        f"{name} holds {n} lengths but --dp-size {args.dp_size} x --batch-size "
        f"{args.batch_size} needs {needed} ({how}); pass at least "
        f"{needed} lengths or lower --dp-size/--batch-size"
    )


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class RankResult:
    rank: int
    samples: int
    tokens: int
    l2_lower_bound: int
    micro_batches: list[list[int]]  # positions in the input lengths list
    micro_batch_tokens: list[int]
    largest: int
    fill: float
    workload_spread: float


@dataclass(frozen=True)
class StepResult:
    max_token_len: int
    ranks: list[RankResult]
    truncated: int
    seconds: float

    @property
    def counts(self) -> list[int]:
        return [len(r.micro_batches) for r in self.ranks]

    @property
    def agreed_count(self) -> int | None:
        counts = set(self.counts)
        return counts.pop() if len(counts) == 1 else None

    @property
    def total_micro_batches(self) -> int:
        return sum(self.counts)

    @property
    def mean_fill(self) -> float:
        total = self.total_micro_batches
        tokens = sum(r.tokens for r in self.ranks)
        return tokens / (total * self.max_token_len) if total else 0.0

    @property
    def largest(self) -> int:
        return max((r.largest for r in self.ranks), default=0)

    @property
    def l2_lower_bound_total(self) -> int:
        return sum(r.l2_lower_bound for r in self.ranks)


def _over_cap_error(step: Step, cap: int) -> CliError | None:
    drawn = [step.lengths[p] for p in step.positions]
    over = [n for n in drawn if n > cap]
    if not over:
        return None
    largest = max(over)
    return CliError(
        f"{len(over)} of the {len(drawn)} drawn samples exceed max_token_len={cap} "
        f"(the largest has {largest} tokens); raise --max-token-len to at least {largest} "
        "or pass --truncate to clip lengths to the cap",
        1,
    )


def plan_step(step: Step, cap: int, args: argparse.Namespace) -> StepResult:
    """Plan every rank of ``step`` at ``cap`` with the library's DP agreement rule.

    Raises:
        CliError: (exit 1) a sample is over the cap without ``--truncate``, or the library
            cannot plan the step (its message, naming the rank at fault).
    """
    from seqlen_balancing.agreement import plan_data_parallel
    from seqlen_balancing.packing import l2_lower_bound
    from seqlen_balancing.partition import workload
    from seqlen_balancing.planner import spread

    if not args.truncate:
        error = _over_cap_error(step, cap)
        if error is not None:
            raise error
    per_rank = [[step.lengths[p] for p in step.rank_positions(r)] for r in range(step.dp_size)]
    truncated = sum(n > cap for lens in per_rank for n in lens)
    per_rank = [[min(n, cap) for n in lens] for lens in per_rank]
    start = time.perf_counter()
    try:
        plans = plan_data_parallel(
            per_rank,
            cap,
            same_micro_num_in_dp=args.same_micro_num_in_dp,
            num_batches_divided_by=args.num_batches_divided_by,
            min_num_micro_batch=args.min_num_micro_batch,
            force_group_size=args.force_group_size,
            use_dynamic_bsz_balance=args.dynamic_bsz_balance,
        )
    except (ValueError, TypeError) as exc:
        raise CliError(f"{exc}", 1) from None
    seconds = time.perf_counter() - start
    ranks: list[RankResult] = []
    for rank, (lens, plan) in enumerate(zip(per_rank, plans, strict=True)):
        positions = step.rank_positions(rank)
        mb_tokens = [sum(lens[i] for i in mb) for mb in plan]
        mb_work = [sum(workload(lens[i]) for i in mb) for mb in plan]
        tokens = sum(lens)
        ranks.append(
            RankResult(
                rank=rank,
                samples=len(lens),
                tokens=tokens,
                l2_lower_bound=l2_lower_bound(lens, cap),
                micro_batches=[[positions[i] for i in mb] for mb in plan],
                micro_batch_tokens=mb_tokens,
                largest=max(mb_tokens, default=0),
                fill=tokens / (len(plan) * cap) if plan else 0.0,
                workload_spread=spread(mb_work),
            )
        )
    return StepResult(cap, ranks, truncated, seconds)


# --------------------------------------------------------------------------- output


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}{'es' if noun.endswith('h') else 's'}"


def _count_text(result: StepResult) -> str:
    agreed = result.agreed_count
    if agreed is not None:
        return str(agreed)
    return f"{min(result.counts)}-{max(result.counts)}"


def _describe(step: Step, args: argparse.Namespace) -> str:
    source = "bundled CHAMP lengths" if step.source == "champ" else step.source
    how = {
        "without_replacement": f"drawn without replacement, seed {args.seed}",
        "with_replacement": f"drawn with replacement, seed {args.seed}",
        "in_order": "in input order",
    }[step.sampling]
    scale = f", lengths x {args.scale:g}" if args.scale != 1.0 else ""
    agree = "on" if args.same_micro_num_in_dp else "off"
    return (
        f"{_plural(step.dp_size, 'DP rank')} x {_plural(step.batch_size, 'sample')} from {source} "
        f"({len(step.lengths)} lengths; {how}{scale}); same_micro_num_in_dp {agree}"
    )


def _settings(step: Step, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "source": step.source,
        "n_lengths": len(step.lengths),
        "sampling": step.sampling,
        "seed": args.seed,
        "scale": args.scale,
        "dp_size": step.dp_size,
        "batch_size": step.batch_size,
        "same_micro_num_in_dp": args.same_micro_num_in_dp,
        "force_group_size": args.force_group_size,
        "num_batches_divided_by": args.num_batches_divided_by,
        "min_num_micro_batch": args.min_num_micro_batch,
        "dynamic_bsz_balance": args.dynamic_bsz_balance,
    }


def _emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


def _plan_json(step: Step, args: argparse.Namespace, result: StepResult) -> dict[str, Any]:
    settings = _settings(step, args)
    head = {k: settings[k] for k in ("source", "n_lengths", "sampling", "seed", "scale")}
    rest = {k: v for k, v in settings.items() if k not in head}
    return {
        **head,
        "max_token_len": result.max_token_len,
        **rest,
        "truncated": result.truncated,
        "ranks": [
            {
                "rank": r.rank,
                "samples": r.samples,
                "tokens": r.tokens,
                "l2_lower_bound": r.l2_lower_bound,
                "largest_micro_batch": r.largest,
                "fill": round(r.fill, 6),
                "workload_spread": round(r.workload_spread, 6),
                "micro_batches": [
                    {"indices": mb, "tokens": t}
                    for mb, t in zip(r.micro_batches, r.micro_batch_tokens, strict=True)
                ],
            }
            for r in result.ranks
        ],
        "agreed_count": result.agreed_count,
        "total_micro_batches": result.total_micro_batches,
        "mean_fill": round(result.mean_fill, 6),
        "largest_micro_batch": result.largest,
        "l2_lower_bound_total": result.l2_lower_bound_total,
    }


def _print_plan(step: Step, args: argparse.Namespace, result: StepResult) -> None:
    cap = result.max_token_len
    print(f"{_describe(step, args)}; max_token_len {cap}")
    if result.truncated:
        print(f"{result.truncated} drawn samples longer than {cap} tokens truncated to the cap")
    headers = [
        "rank",
        "samples",
        "tokens",
        "micro-batches",
        "L2 bound",
        "largest mb",
        "fill",
        "workload spread",
    ]
    rows = [
        [
            str(r.rank),
            str(r.samples),
            str(r.tokens),
            str(len(r.micro_batches)),
            str(r.l2_lower_bound),
            str(r.largest),
            _pct(r.fill),
            f"{r.workload_spread:.3f}",
        ]
        for r in result.ranks
    ]
    print(_table(headers, rows))
    agreed = result.agreed_count
    if not args.same_micro_num_in_dp:
        counts = f"no agreement (per-rank counts {_count_text(result)})"
    elif agreed is not None:
        counts = f"agreed count {_plural(agreed, 'micro-batch')} per rank"
    else:
        counts = f"no agreed count (per-rank counts {_count_text(result)})"
    print(
        f"{counts}; total {result.total_micro_batches} micro-batches "
        f"(L2 bound {result.l2_lower_bound_total}); mean fill {_pct(result.mean_fill)}; "
        f"largest micro-batch {result.largest} tokens"
    )


def _sweep_row_json(result: StepResult) -> dict[str, Any]:
    return {
        "max_token_len": result.max_token_len,
        "agreed_count": result.agreed_count,
        "micro_batches_per_rank": result.counts,
        "total_micro_batches": result.total_micro_batches,
        "l2_lower_bound_total": result.l2_lower_bound_total,
        "mean_fill": round(result.mean_fill, 6),
        "largest_micro_batch": result.largest,
        "truncated": result.truncated,
        "seconds": round(result.seconds, 6),
    }


def _print_sweep(
    step: Step, args: argparse.Namespace, outcomes: Sequence[StepResult | tuple[int, str]]
) -> None:
    print(_describe(step, args))
    headers = [
        "max_token_len",
        "count/rank",
        "total mbs",
        "L2 bound",
        "mean fill",
        "largest mb",
        "time",
    ]
    if args.truncate:
        headers.append("truncated")
    rows = []
    notes = []
    for r in outcomes:
        if isinstance(r, tuple):
            rows.append([str(r[0]), "infeasible"] + ["-"] * (len(headers) - 2))
            notes.append(f"max_token_len {r[0]}: {r[1]}")
            continue
        row = [
            str(r.max_token_len),
            _count_text(r),
            str(r.total_micro_batches),
            str(r.l2_lower_bound_total),
            _pct(r.mean_fill),
            str(r.largest),
            f"{1000 * r.seconds:.1f} ms",
        ]
        if args.truncate:
            row.append(str(r.truncated))
        rows.append(row)
    print(_table(headers, rows))
    for note in notes:
        print(note)


# --------------------------------------------------------------------------- plot


def _load_figure_class() -> Callable[..., Any]:
    """matplotlib's Figure class, or a CliError (exit 2) naming the ``plot`` extra."""
    try:
        module: Any = importlib.import_module("matplotlib.figure")
    except ImportError:
        raise CliError(f"--plot needs matplotlib: {PLOT_HINT}") from None
    figure_class: Callable[..., Any] = module.Figure
    return figure_class


def save_plot(figure_class: Callable[..., Any], result: StepResult, path: str) -> None:
    """Bars of tokens per micro-batch, rank by rank, with the cap as a horizontal line."""
    n_bars = result.total_micro_batches + len(result.ranks)
    fig = figure_class(figsize=(min(max(7.0, 0.12 * n_bars), 30.0), 4.5), layout="constrained")
    ax = fig.subplots()
    colours = ["tab:blue", "tab:orange"]
    x, centres = 0, []
    for r in result.ranks:
        xs = list(range(x, x + len(r.micro_batch_tokens)))
        ax.bar(xs, r.micro_batch_tokens, width=0.85, color=colours[r.rank % 2])
        centres.append((xs[0] + xs[-1]) / 2 if xs else x)
        x += len(xs) + 1
    cap = result.max_token_len
    ax.axhline(cap, color="tab:red", linestyle="--")
    ax.set_ylim(0, cap * 1.08)
    step = max(1, len(result.ranks) // 16)
    ax.set_xticks(centres[::step], [f"rank {r.rank}" for r in result.ranks][::step])
    ax.set_ylabel("tokens per micro-batch")
    ax.set_title(
        f"{result.total_micro_batches} micro-batches on {len(result.ranks)} ranks, "
        f"mean fill {_pct(result.mean_fill)}\n(dashed line: max_token_len = {cap})"
    )
    try:
        fig.savefig(path)
    except OSError as exc:
        raise CliError(f"cannot write plot {path!r}: {exc.strerror or exc}") from None


# --------------------------------------------------------------------------- main


def _run_plan(args: argparse.Namespace) -> int:
    figure_class = _load_figure_class() if args.plot else None
    step = draw_step(args)
    result = plan_step(step, args.max_token_len, args)
    if args.json:
        _emit_json(_plan_json(step, args, result))
    else:
        _print_plan(step, args, result)
    if figure_class is not None:
        save_plot(figure_class, result, args.plot)
        print(f"{PROG}: plot written to {args.plot}", file=sys.stderr)
    return 0


def _run_sweep(args: argparse.Namespace) -> int:
    step = draw_step(args)
    caps: list[int] = args.max_token_len
    outcomes: list[StepResult | tuple[int, str]] = []
    for cap in caps:
        try:
            outcomes.append(plan_step(step, cap, args))
        except CliError as exc:
            if exc.code != 1:
                raise
            outcomes.append((cap, str(exc)))  # an infeasible cap is a row, not the end
    failures = [o for o in outcomes if isinstance(o, tuple)]
    if len(failures) == len(outcomes):
        raise CliError(failures[0][1], 1)
    if args.json:
        rows = [
            {"max_token_len": o[0], "error": o[1]} if isinstance(o, tuple) else _sweep_row_json(o)
            for o in outcomes
        ]
        _emit_json({**_settings(step, args), "rows": rows})
    else:
        _print_sweep(step, args, outcomes)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise CliError(f"choose a command, plan or sweep (see '{PROG} --help')")
        if args.command == "plan":
            return _run_plan(args)
        return _run_sweep(args)
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        # The reader (e.g. `| head`) left early: not an error of ours, and no traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
