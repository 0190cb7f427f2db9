"""Error records about the DP group as a whole: ranks that disagree, a process outside it.

No single rank is at fault for a mismatch, so these records name two ranks (and their
global ranks, when known) in their fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqlen_balancing.errors.record import PlanError, rank_words

__all__ = ["ModeMismatch", "NotInGroup", "OptionMismatch", "StaticCountMismatch"]


@dataclass(frozen=True)
class OptionMismatch(PlanError):
    """The ranks of a DP group were asked to plan under different settings (an option, the
    cap, per-sample data given or not, a step setting of the job): its name, whether it is
    per-sample data (named as passed or not), the lowest rank holding the largest value and
    that value as shown, the lowest rank holding the smallest and its value, and their global
    ranks when known. No single rank is at fault."""

    name: str
    given: bool
    rank_high: int
    high: str
    rank_low: int
    low: str
    global_high: int | None = None
    global_low: int | None = None

    def text(self) -> str:
        name = self.name
        high = rank_words(self.rank_high, self.global_high)
        low = rank_words(self.rank_low, self.global_low)
        differ = (f"{high} passes {name} and {low} does not" if self.given
                  else f"{high} has {name}={self.high} and {low} has {name}={self.low}")
        return (
            f"the ranks passed different {name}: {differ}; every rank of the DP group must "
            "plan under the same options and cap, so set them alike on every rank (keywords, "
            "batch settings and SEQLEN_BALANCING_* variables)"
        )


@dataclass(frozen=True)
class ModeMismatch(PlanError):
    """A group mixing the static and the dynamic path: one rank of each, and their global
    ranks when known."""

    static_rank: int
    dynamic_rank: int
    static_global: int | None = None
    dynamic_global: int | None = None

    def text(self) -> str:
        return (
            "the ranks of the DP group disagree on use_dynamic_bsz: "
            f"{rank_words(self.static_rank, self.static_global)} cuts its batch statically "
            f"(use_dynamic_bsz=False) but {rank_words(self.dynamic_rank, self.dynamic_global)} "
            "dynamically; store the same use_dynamic_bsz in every rank's batch"
        )


@dataclass(frozen=True)
class StaticCountMismatch(PlanError):
    """Static ranks whose counts differ: the largest count (its lowest rank) and the
    smallest (its lowest rank), with their global ranks when known."""

    rank_largest: int
    largest: int
    rank_smallest: int
    smallest: int
    global_largest: int | None = None
    global_smallest: int | None = None

    def text(self) -> str:
        return (
            "the ranks of the DP group would run different numbers of static micro-batches: "
            f"{rank_words(self.rank_largest, self.global_largest)} has {self.largest} and "
            f"{rank_words(self.rank_smallest, self.global_smallest)} has {self.smallest}; give "
            "every rank the same batch size (use_dynamic_bsz=False cuts batch size / "
            "(micro_batch_size_per_gpu * force_group_size) micro-batches)"
        )


@dataclass(frozen=True)
class NotInGroup(PlanError):
    """This process (global rank ``process``) is not a member of the ``dp_group`` of
    ``size`` ranks it passed; raised at once, never agreed."""

    process: int
    size: int

    fixed_text = (
        "this process (global rank {process}) is not a member of dp_group (a "
        "group of {size} ranks), so it cannot take part in that group's "
        "agreement; pass the DP group this process belongs to, or dp_group=None to plan locally"
    )
