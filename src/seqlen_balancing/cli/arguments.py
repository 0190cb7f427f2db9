"""The ``seqlen-balancing`` argument parser: subcommands, options and their checks."""

from __future__ import annotations

import argparse
import math
from typing import Any, NoReturn

from seqlen_balancing.cli._text import PROG, CliError, int_text, refuse, short
from seqlen_balancing.cli.inputs import DEFAULT_MAX_INPUT_MB
from seqlen_balancing.cli.report import columns_help
from seqlen_balancing.cli.results import options_of
from seqlen_balancing.cli.trainers import (
    DEFAULT_GLOBAL_BATCH_SIZE,
    DEFAULT_SAMPLER_SEED,
    DEFAULT_TRAINER,
    EPOCH_TRAINERS,
    RULES,
    TRAINERS,
    always_balances,
    balances_by_default,
)
from seqlen_balancing.options import add_arguments
from seqlen_balancing.planning.verl_rule import DEFAULT_MAX_TRIES

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_CAP", "DEFAULT_DP_SIZE", "DEFAULT_SWEEP_CAPS", "build_parser"]

DEFAULT_DP_SIZE = 8
DEFAULT_BATCH_SIZE = 256  # per rank, for the bundled data
DEFAULT_CAP = 16384
DEFAULT_SWEEP_CAPS = (8192, 16384, 32768, 65536)
PLOT_HINT = "pip install 'seqlen-balancing[plot]'"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors become a one-line :class:`CliError` (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see '{self.prog} --help')", 2)



def _positive_int(text: str) -> int:
    number = int_text(text)
    if number is None or number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {short(text)}")
    return number


def _non_negative_int(text: str) -> int:
    number = int_text(text)
    if number is None or number < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {short(text)}")
    return number


def _sizes(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers, in order (each part read as ``_positive_int`` reads it)."""
    try:
        return tuple(_positive_int(part) for part in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be positive integers separated by commas, got {short(text)}"
        ) from None


def _cap_list(text: str) -> list[int]:
    return sorted(set(_sizes(text)))


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


def _add_rows(group: Any, *rows: tuple[str, dict[str, Any]]) -> None:
    """One ``add_argument`` per ``(flag, keywords)`` row, in order (``--help`` lists them so)."""
    for flag, keywords in rows:
        group.add_argument(flag, **keywords)


DP_SIZE = ("--dp-size", dict(type=_positive_int, default=DEFAULT_DP_SIZE, metavar="N",
                             help=f"data-parallel ranks (default: {DEFAULT_DP_SIZE})"))
GROUP_SIZES = ("--group-sizes", dict(
    type=_sizes, metavar="N[,N...]",
    help="GRPO groups of different sizes (group_ids=): each rank's rows, as dealt to it, "
    "in consecutive groups of these sizes, cycled (e.g. 16,12,9 after DAPO filtering); "
    "each group lands whole in one micro-batch (with --prefix-lengths, a group over the cap is cut "
    "into parts that each pay its prefix) (default: none)"))
JSON = ("--json", dict(action="store_true", help="write one JSON object to stdout"))


def _add_input(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group(
        "input (default: the bundled CHAMP lengths, 256 samples per rank drawn at random)"
    )
    _add_source(data, "Without --batch-size every row is used once, in file order, dealt to the DP "
                "ranks in equal contiguous chunks as verl's dispatch does")
    _add_rows(
        data,
        ("--seed", dict(type=int, default=0, help="seed of the random draw (default: 0)")),
        ("--in-order", dict(
            action="store_true",
            help="with --batch-size: take the first dp-size x batch-size lengths in input order "
            "instead of a seeded random draw")),
        ("--truncate", dict(
            action="store_true", help="clip lengths longer than the cap to the cap instead of failing")),
    )


def _add_source(data: Any, rows: str) -> None:
    """Where the lengths come from (plan, sweep and epoch); ``rows``: how the command uses
    the file's rows (``--lengths``' help ends with it)."""
    _add_rows(
        data,
        ("--lengths", dict(
            metavar="FILE",
            help="a file of lengths or a dataset: one integer per line, a JSON list, JSON Lines, "
            "or Parquet (extra 'data': pip install 'seqlen-balancing[data]'); '-' reads stdin. " + rows)),
        ("--field", dict(metavar="NAME",
                         help="JSON Lines key or Parquet column holding each length (tokens)")),
        ("--max-input-mb", dict(
            type=_positive_int, default=DEFAULT_MAX_INPUT_MB, metavar="MB",
            help="the input bound: --lengths is read once, whole, and refused (exit 2) beyond this "
            f"many MiB (default: {DEFAULT_MAX_INPUT_MB})")),
        ("--tokenizer", dict(
            metavar="PATH",
            help="count tokens with a local Hugging Face tokenizer (a directory or a tokenizer.json; "
            "extra 'tokenize': pip install 'seqlen-balancing[tokenize]'); never downloads, never "
            "runs code from PATH")),
        ("--messages-field", dict(
            metavar="NAME",
            help="with --tokenizer: a chat conversation (list of {role, content}) rendered with the "
            "tokenizer's chat template, as verl's multi-turn SFT dataset does")),
        ("--text-field", dict(metavar="NAME", help="with --tokenizer: plain text, encoded")),
        ("--prompt-field", dict(
            metavar="NAME",
            help="with --tokenizer: an RL prompt (chat messages, rendered with the generation prompt, "
            "or text); add --response-tokens")),
        ("--response-tokens", dict(
            type=_non_negative_int, default=0, metavar="N",
            help="tokens added to each --prompt-field length, e.g. the rollout's maximum response "
            "length (default: 0)")),
        ("--progress", dict(
            action="store_true",
            help="show a progress bar while counting tokens (default: only on a terminal)")),
        ("--save-lengths", dict(
            metavar="FILE",
            help="write the lengths read or counted (before --scale), one per line, for reuse with "
            "--lengths")),
        ("--scale", dict(
            type=_positive_float, default=1.0, metavar="X",
            help="multiply every length by X and round (halves up), e.g. 2 to mimic rollouts "
            "twice as long (default: 1)")),
    )


def _trainer(choices: tuple[str, ...], default: str) -> tuple[str, dict[str, Any]]:
    """``--trainer``, its rules in the help; required when ``default`` is empty."""
    rules = "; ".join(f"{name}: {RULES[name].split(': ', 1)[1]}" for name in choices)
    which = f"default: {default}" if default else "required"
    return ("--trainer", dict(
        choices=choices, default=default or None, required=not default,
        help=f"the verl 0.9.1 trainer whose balancing and dealing of rows to DP ranks is "
        f"modelled ({which}). {rules}"))


def _add_step(parser: argparse.ArgumentParser) -> Any:
    step = parser.add_argument_group("training step (verl's settings)")
    _add_rows(
        step,
        DP_SIZE,
        ("--batch-size", dict(
            type=_positive_int, metavar="N",
            help=f"samples per rank, drawn at random (default: {DEFAULT_BATCH_SIZE} for the bundled "
            "data; with --lengths, the whole file)")),
        ("--sp-size", dict(
            type=_positive_int, default=1, metavar="N",
            help="Ulysses sequence-parallel size: the cap is max_token_len x N, as "
            "prepare_micro_batches computes it (default: 1)")),
        _trainer(TRAINERS, DEFAULT_TRAINER),
        ("--balance-batch", dict(
            action=argparse.BooleanOptionalAction, default=None,
            help="balance the step across DP ranks first, as main_ppo_v0 and sft_trainer_ray do by "
            "default (trainer.balance_batch: equal sample counts, Karmarkar-Karp on workload) "
            "(default: on, except with --trainer sft_trainer, which never balances; main_ppo, verl's "
            "V1 trainer, balances every step whatever it says)")),
        ("--mini-batch-size", dict(
            type=_sizes, metavar="N[,N]",
            help="with --trainer main_ppo: the rows of a PPO mini-batch, actor.ppo_mini_batch_size x "
            "rollout.n (and, with a critic, critic.ppo_mini_batch_size x rollout.n after a comma); "
            "verl's V1 trainer pads the step with synthetic rows to a multiple of the least common "
            "multiple of the DP size and these (verl's defaults: 256,256 with rollout.n 1) "
            "(default: the DP size alone)")),
        GROUP_SIZES,
        ("--prefix-lengths", dict(
            metavar="FILE",
            help="shared prompts counted once (prefix_lengths=): one prefix length per row of "
            "--lengths, in its order (one integer per line, or a JSON list); the rows of a "
            "--force-group-size or --group-sizes group share it, and a micro-batch holds each "
            "group's prefix once (a group over the cap is cut into parts that each pay it) "
            "(default: none, every row counted in full)")),
    )
    return step


def _add_cost(parser: argparse.ArgumentParser) -> Any:
    cost = parser.add_argument_group(
        "the cap on what the GPU holds (default: effective tokens, verl's rule)"
    )
    _add_rows(
        cost,
        ("--tp", dict(
            type=_positive_int, metavar="N",
            help="Megatron tensor-parallel size: derive verl's per-sequence alignment (tp*cp*2 when "
            "cp > 1, else tp)")),
        ("--cp", dict(type=_positive_int, metavar="N",
                      help="Megatron context-parallel size (with --tp; default 1)")),
        ("--fp8", dict(
            action="store_true",
            help="with --tp: FP8 padding, each sequence to lcm(16, align) and each micro-batch's "
            "total to a multiple of align*128")),
    )
    return cost


def _add_output(parser: argparse.ArgumentParser, plot_help: str) -> None:
    _add_rows(
        parser.add_argument_group("output"),
        ("--compare-verl", dict(
            action="store_true",
            help="also show the count verl 0.9.1's rule gives on the same step and the saving")),
        ("--verl-max-tries", dict(
            type=_positive_int, default=DEFAULT_MAX_TRIES, metavar="N",
            help="Karmarkar-Karp rounds verl's rule may take per cap before it is reported as "
            f"'>K' (default: {DEFAULT_MAX_TRIES})")),
        JSON,
        ("--plot", dict(metavar="FILE.png", help=plot_help + " (extra 'plot': " + PLOT_HINT + ")")),
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``seqlen-balancing`` argument parser (``plan`` and ``sweep`` subcommands)."""
    from seqlen_balancing import __version__

    parser = _Parser(
        prog=PROG,
        description="Plan strict-cap, DP-agreed micro-batches for one training step, as verl's "
        "trainer would run it, to choose max_token_len_per_gpu.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{plan,sweep,epoch}")
    formatter = argparse.RawDescriptionHelpFormatter
    # plan and sweep take the same options but their caps (one, or several) and what --plot draws
    for name, about, caps, plot_help in (
        ("plan", ("plan one step and show every rank's micro-batches",
                  "Plan one training step: one table row per DP rank, then a summary."),
         [("--max-token-len", dict(
             type=_single_cap, default=DEFAULT_CAP, metavar="TOKENS",
             help=f"max_token_len_per_gpu: hard cap on tokens per micro-batch (default: {DEFAULT_CAP})"))],
         "save tokens per micro-batch for each rank as a bar chart"),
        ("sweep", ("plan the same step for several caps, one row per cap",
                   "Plan the same training step for several caps, one table row per cap."),
         [("--max-token-len", dict(
             type=_cap_list, default=list(DEFAULT_SWEEP_CAPS), metavar="T1,T2,...",
             help=f"caps to compare, comma-separated (default: {','.join(map(str, DEFAULT_SWEEP_CAPS))})")),
          ("--max-token-len-limit", dict(
              type=_positive_int, default=None, metavar="N",
              help="the largest max_token_len your GPU holds: mark the fastest cap at or below it "
              "(in the lock-step model)"))],
         "plot micro-batches per rank and mean fill against the cap"),
    ):
        command = commands.add_parser(name, help=about[0], description=about[1], epilog=columns_help(name),
                                      formatter_class=formatter)
        _add_rows(command, *caps)
        _add_input(command)
        add_arguments(command, {"step": _add_step(command), "cost": _add_cost(command)})
        _add_output(command, plot_help)
    _add_epoch(commands, formatter)
    return parser


def _add_epoch(commands: Any, formatter: type[argparse.HelpFormatter]) -> None:
    epoch = commands.add_parser(
        "epoch",
        help="replay a whole SFT dataset as the trainer feeds it, per cap",
        description="Replay every step of an SFT run as verl 0.9.1's trainer feeds it (its "
        "sampler's rows for the seed, dealt to the DP ranks as it deals them) and plan each "
        "rank with this library's DP rule: per cap, each step's micro-batches per rank, the "
        "totals over the run and the worst step, to pick the cap by the whole run.",
        epilog=EPOCH_EPILOG,
        formatter_class=formatter,
    )
    epoch.add_argument(
        "--max-token-len",
        type=_cap_list,
        default=[DEFAULT_SFT_CAP],
        metavar="C1,C2,...",
        help=f"caps to replay, comma-separated (max_token_len_per_gpu; default: verl's {DEFAULT_SFT_CAP})",
    )
    data = epoch.add_argument_group("input (default: the bundled CHAMP lengths, every row)")
    _add_source(data, "Every row is the dataset the trainer's sampler draws each step's "
                "--global-batch-size rows from")
    run = epoch.add_argument_group("the run (verl's settings; verl's defaults when not given)")
    _add_rows(
        run,
        _trainer(EPOCH_TRAINERS, ""),
        DP_SIZE,
        ("--global-batch-size", dict(
            type=_positive_int, default=DEFAULT_GLOBAL_BATCH_SIZE, metavar="B",
            help="data.train_batch_size: rows per step over all ranks (default: verl's "
            f"{DEFAULT_GLOBAL_BATCH_SIZE})")),
        ("--epochs", dict(type=_positive_int, default=1, metavar="E",
                          help="trainer.total_epochs to replay (default: 1)")),
        ("--seed", dict(
            type=int, default=DEFAULT_SAMPLER_SEED, metavar="S",
            help=f"the DistributedSampler's seed (default: {DEFAULT_SAMPLER_SEED}, as verl's SFT "
            "trainers leave it)")),
        ("--sp-size", dict(type=_positive_int, default=1, metavar="N",
                           help="Ulysses sequence-parallel size: the cap is max_token_len x N (default: 1)")),
        ("--balance-batch", dict(
            action=argparse.BooleanOptionalAction, default=None,
            help="sft_trainer_ray's trainer.balance_batch (default: on); sft_trainer never balances")),
        GROUP_SIZES,
    )
    add_arguments(epoch, {"step": run, "cost": _add_cost(epoch)})
    _add_rows(
        epoch.add_argument_group("output"),
        ("--compare-verl", dict(action="store_true",
                                help="also replay verl 0.9.1's own micro-batch count rule on every step")),
        ("--verl-max-tries", dict(type=_positive_int, default=DEFAULT_MAX_TRIES, metavar="N",
                                  help="Karmarkar-Karp rounds verl's rule may take per step "
                                  f"(default: {DEFAULT_MAX_TRIES})")),
        JSON,
    )


#: verl 0.9.1's ``data.max_token_len_per_gpu`` in ``sft_trainer_engine.yaml``.
DEFAULT_SFT_CAP = 8192

EPOCH_EPILOG = """the replay:
  rows of each step: the trainer's sampler, DistributedSampler(shuffle=True, drop_last=True)
    with --seed (verl: 0) and set_epoch(epoch): torch.randperm(n) seeded seed + epoch.
  sft_trainer: one sampler per rank (rank r: every dp-th row of that order from r), each rank
    global-batch-size / dp rows per step; no balancing.
  sft_trainer_ray: one sampler in the driver, global-batch-size rows per step, balanced
    across the ranks (trainer.balance_batch: equal sample counts, Karmarkar-Karp on
    workload, each part lightest at both ends), then equal contiguous chunks.
  each step: every rank planned with this library's planner and DP agreement (one count on
    every rank, as the engine's prepare_micro_batches with the DP group); with
    --compare-verl also verl 0.9.1's rule on the same rows.
  torch is needed for the shuffle (torch.randperm, as DistributedSampler draws it).
output: per cap, each step's micro-batches per rank (library, verl), then the totals over
  the run per rank and the worst step; exit 1 when no cap can run the whole replay.
"""


def check_combinations(args: argparse.Namespace) -> None:
    """Options that only make sense together (CliError, exit 2, naming what to add); sets
    ``args.options``, the plan's :class:`~seqlen_balancing.PlanOptions` (the option
    flags, with the alignment of ``--tp``/``--cp``/``--fp8``)."""
    token_fields = [
        name for name in ("messages_field", "text_field", "prompt_field") if getattr(args, name) is not None
    ]
    # the first option given that reads --lengths, when it is missing
    needs_file = next((name for name in ("field", "tokenizer", *token_fields, "save_lengths")
                       if getattr(args, name) is not None), None) if args.lengths is None else None
    # the field to count (several: the second rule refuses them)
    given = " and ".join("--" + name.replace("_", "-") for name in token_fields)
    refuse([
        (needs_file, f"--{str(needs_file).replace('_', '-')} applies to --lengths FILE; pass --lengths too"),
        (len(token_fields) > 1, f"{given} exclude each other; pass one"),
        (args.tokenizer is not None and not token_fields,
         "--tokenizer needs the field to count: --messages-field, --text-field or --prompt-field"),
        (token_fields and args.tokenizer is None,
         f"{given} counts tokens; pass --tokenizer PATH too (or --field for a column of counts)"),
        (token_fields and args.field is not None,
         f"--field (a column of counts) and {given} (text to count) exclude each other"),
        (args.response_tokens and "prompt_field" not in token_fields,
         "--response-tokens adds to prompt lengths; pass --prompt-field NAME too"),
        (args.tp is None and (args.cp is not None or args.fp8),
         f"{'--cp' if args.cp is not None else '--fp8'} derives Megatron's alignment with "
         "--tp; pass --tp N too (1 without tensor parallelism)"),
    ])
    args.options = options_of(args)
    trainer = getattr(args, "trainer", DEFAULT_TRAINER)
    sizes, force = getattr(args, "group_sizes", None), args.options.force_group_size
    prefixes = getattr(args, "prefix_lengths", None) is not None
    refuse([
        (prefixes and args.lengths is None,
         "--prefix-lengths gives one prefix length per row of --lengths FILE; pass --lengths too"),
        (prefixes and not (sizes or force > 1),
         "--prefix-lengths: a prefix is shared by the rows of a group; pass --force-group-size N "
         "above 1 (a prompt's N responses, consecutive rows) or --group-sizes"),
        (prefixes and args.batch_size is not None and not args.in_order,
         "--prefix-lengths: a random draw takes rows away from their groups; pass --in-order, or "
         "drop --batch-size (the whole file, in order)"),
        (prefixes and args.options.padded,
         "--prefix-lengths and --padded: a padded micro-batch costs its rows x its widest row, "
         "whatever the rows share; pass one"),
        (prefixes and args.prefix_lengths == args.lengths == "-",
         "--lengths and --prefix-lengths both read stdin; give one of them a file"),
        (args.options.over_cap == "alone" and getattr(args, "truncate", False),
         "--over-cap alone runs over-cap samples whole and --truncate clips them to the cap; pass one"),
        (args.tp is not None and args.pad_to_multiple_of is not None,
         "--pad-to-multiple-of and --tp/--cp/--fp8 both set the per-sequence alignment; pass one"),
        (sizes and force > 1,
         "--group-sizes and --force-group-size both form the groups (force_group_size=g is "
         "groups of g rows); pass one"),
        (sizes and getattr(args, "compare_verl", False),
         "--group-sizes: verl 0.9.1 has no groups of different sizes (only force_group_size), "
         "so its count cannot be compared; drop --compare-verl or --group-sizes"),
        (getattr(args, "mini_batch_size", None) and not always_balances(trainer),
         f"--mini-batch-size: only verl 0.9.1's V1 trainer pads a step to its mini-batch sizes; "
         f"{trainer} does not; drop it, or pass --trainer main_ppo"),
        (trainer == "sft_trainer" and force > 1,
         f"--force-group-size {force}: verl 0.9.1's sft_trainer deals every "
         "dp-th row to a rank, so consecutive rows never stay together; drop it, or pass "
         "--trainer main_ppo"),
        (getattr(args, "balance_batch", None) and not balances_by_default(trainer),
         f"--balance-batch: verl 0.9.1's {trainer} never balances a step across DP ranks "
         "(each rank's DistributedSampler deals its rows); drop --balance-batch, or pass "
         "--trainer sft_trainer_ray or main_ppo"),
    ])
    # verl 0.9.1's V1 trainer (main_ppo's default) balances every step: the flag is noted, not followed
    args.balance_batch_ignored = always_balances(trainer) and getattr(args, "balance_batch", None) is False
    if args.balance_batch_ignored or getattr(args, "balance_batch", False) is None:
        args.balance_batch = balances_by_default(trainer)  # main_ppo's: True
    strided = trainer == "sft_trainer" and args.dp_size > 1  # rank r: rows r, r + dp, ...
    refuse([(prefixes and sizes and (args.balance_batch or strided),
             f"--prefix-lengths with --group-sizes: the groups are each rank's rows as dealt, and "
             f"{trainer}'s deal {'gives a rank every dp-th row' if strided else 'balances the step'}, so a "
             "group would hold rows of other prompts; pass --force-group-size N (its groups stay whole "
             "through the deal), or --trainer main_ppo_v0 --no-balance-batch")])


