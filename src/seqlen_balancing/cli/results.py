"""The results of simulating a step: its rows, every rank's plan, and verl's counts.

Plain data shared by the simulation (:mod:`.step`), the reports (:mod:`.report`) and the
charts (:mod:`.plot`), with :func:`options_of`, the plan's options the flags ask for, so
that none of those modules needs another's (no torch, no planning here).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the planner is not needed to hold a result (nor for --help)
    from seqlen_balancing.cli.modeled import Modeled
    from seqlen_balancing.options import PlanOptions
    from seqlen_balancing.planning.planner import RankAnalysis

__all__ = ["RankResult", "Step", "StepResult", "VerlResult", "options_json", "options_of"]


@dataclass(frozen=True)
class Step:
    """One training step: the input lengths and the positions of the step's rows."""

    source: str
    lengths: list[int]  # the whole input list, after --scale
    positions: list[int]  # the step's rows, before balancing; dispatch cuts equal chunks
    sampling: str  # "without_replacement", "with_replacement", "in_order" or "whole_file"
    dp_size: int
    batch_size: int
    counted: str | None = None  # how --tokenizer counted the lengths
    synthetic: int = 0  # rows of the step that main_ppo's V1 trainer adds (the last positions)
    prefixes: list[int] | None = None  # --prefix-lengths, as ``lengths`` (synthetic rows: 0)


@dataclass(frozen=True)
class RankResult:
    """One rank's plan and the figures the report shows."""

    rank: int
    analysis: RankAnalysis  # the planner's view of this rank (bounds, counts)
    samples: int
    tokens: int
    l2_lower_bound: int
    micro_batches: list[list[int]]  # positions in the input lengths list
    micro_batch_tokens: list[int]
    largest: int
    fill: float
    workload_spread: float
    aligned_tokens: int = 0  # the rank's samples' costs summed (aligned tokens; --padded: footprints)
    micro_batch_costs: list[int] = field(default_factory=list)  # what each holds on the GPU
    largest_cost: int = 0  # the costliest micro-batch (above the cap only with --over-cap alone)
    # --over-cap alone: (position of the first sample, its cost) of each over-cap sample/group
    over_cap_alone: list[tuple[int, int]] = field(default_factory=list)
    # --equal-rows-per-micro-batch: the rows every micro-batch holds, and each one's filler rows
    rows: int = 0
    filler: list[int] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.micro_batches)


@dataclass(frozen=True)
class VerlResult:
    """verl 0.9.1's counts on the same step, or why it has none."""

    counts: list[int] | None  # per rank; None when verl fails or the search stopped
    above: int | None = None  # the search stopped: verl's count is above this
    error: str | None = None  # verl would raise


@dataclass(frozen=True)
class StepResult:
    """Every rank's plan at one cap."""

    max_token_len: int  # the cap used: --max-token-len x --sp-size
    ranks: list[RankResult]
    truncated: int
    seconds: float
    options: PlanOptions  # the plan's (the alignment, the divisor, the agreement)
    verl: VerlResult | None = None
    modeled: list[Modeled] = field(default_factory=list)  # plan: the lock-step model, three ways

    @property
    def aligned(self) -> bool:
        """True when the cost of a sample or a micro-batch can differ from its tokens."""
        return self.options.pad_to_multiple_of > 1 or self.options.micro_batch_multiple_of > 1

    @property
    def largest_cost(self) -> int:
        return max((r.largest_cost for r in self.ranks), default=0)

    @property
    def counts(self) -> list[int]:
        return [r.count for r in self.ranks]

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
        return sum(r.tokens for r in self.ranks) / (total * self.max_token_len) if total else 0.0

    @property
    def largest(self) -> int:
        return max((r.largest for r in self.ranks), default=0)

    @property
    def padding_share(self) -> float:
        """With ``--padded``: 1 - tokens / token positions the micro-batches hold."""
        held = sum(r.aligned_tokens for r in self.ranks)
        return 1 - sum(r.tokens for r in self.ranks) / held if held else 0.0

    @property
    def l2_lower_bound_total(self) -> int:
        return sum(r.l2_lower_bound for r in self.ranks)

    @property
    def lower_bound_total(self) -> int:
        """No plan of this step has fewer micro-batches in all (the same rules: agreement,
        ``num_batches_divided_by``): each rank's ``RankAnalysis.lower_bound`` rounded up to
        the divisor; under agreement every rank runs the largest."""
        divisor = self.options.num_batches_divided_by or 1
        bounds = [-(-r.analysis.lower_bound // divisor) * divisor for r in self.ranks]
        return max(bounds, default=0) * len(bounds) if self.options.same_micro_num_in_dp else sum(bounds)

    @property
    def proven_optimal(self) -> bool:
        """True when the step's total meets :attr:`lower_bound_total`: no fewer is possible."""
        return self.total_micro_batches == self.lower_bound_total

    @property
    def verl_total(self) -> int | None:
        return sum(self.verl.counts) if self.verl is not None and self.verl.counts else None


def options_of(args: argparse.Namespace) -> PlanOptions:
    """The plan's options: every option flag given
    (:meth:`~seqlen_balancing.PlanOptions.from_args`), the alignment Megatron's from
    ``--tp``/``--cp``/``--fp8`` (:func:`~seqlen_balancing.cost.megatron_alignment`) where
    given, with ``--micro-batch-multiple-of`` combined by least common multiple.

    Raises:
        CliError: (exit 2) options that contradict each other, naming them.
    """
    from seqlen_balancing.cli._text import CliError
    from seqlen_balancing.cost import megatron_alignment
    from seqlen_balancing.options import PlanOptions

    pad, bucket = args.pad_to_multiple_of or 1, args.micro_batch_multiple_of or 1
    if getattr(args, "tp", None) is not None:
        pad, total = megatron_alignment(args.tp, args.cp or 1, bool(args.fp8))
        bucket = math.lcm(bucket, total)
    try:
        return replace(PlanOptions.from_args(args), pad_to_multiple_of=pad, micro_batch_multiple_of=bucket)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None


def options_json(options: PlanOptions) -> dict[str, object]:
    """Every option as the JSON reports hold it (a model as its shape, keys as a list)."""

    def value(held: object) -> object:
        if isinstance(held, tuple):
            return list(held)
        shape = getattr(held, "shape", None)
        return shape() if callable(shape) else held

    return {f.name: value(getattr(options, f.name)) for f in fields(options)}
