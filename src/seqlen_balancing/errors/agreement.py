"""Error records about the DP group as a whole: ranks that disagree, a process outside it.

No single rank is at fault for a mismatch, so these records name two ranks (and their
global ranks, when known) in their fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from seqlen_balancing.errors.record import Argument, PlanError, rank_words, record, shown

__all__ = ["LARGEST_SHOWN", "ModeMismatch", "NotInGroup", "OptionMismatch", "Shown", "StaticCountMismatch"]


class Shown(IntEnum):
    """How an :class:`OptionMismatch` shows the two values it carries."""

    NUMBER = 0  # a count or a number of tokens; 0 stands for None
    SWITCH = 1  # 0 or 1: False or True
    OVER_CAP = 2  # an index into ("raise", "alone")
    GIVEN = 3  # 1: the rank passes the per-sample data, 0: it does not
    HIDDEN = 4  # a hash: the values differ, and are not shown


#: Values of 2**41 and above are hashes of values too large to carry (never shown).
LARGEST_SHOWN = (1 << 41) - 1

_OVER_CAP_NAMES = ("'raise'", "'alone'")


def _shown(kind: Shown, value: int) -> str:
    if kind is Shown.SWITCH and value in (0, 1):
        return str(bool(value))
    if kind is Shown.OVER_CAP and value in (0, 1):
        return _OVER_CAP_NAMES[value]
    if kind is Shown.NUMBER and 0 <= value <= LARGEST_SHOWN:
        return "None" if value == 0 else str(value)
    return "a value too large to show"


@record
@dataclass(frozen=True)
class OptionMismatch(PlanError):
    """The ranks of a DP group were asked to plan under different options (or caps): the
    option (an ``Argument``), how its values show, the lowest
    rank holding the largest value and that value, the lowest rank holding the smallest
    and that value, and their global ranks when known. No single rank is at fault."""

    argument: Argument
    shown: Shown
    rank_high: int
    high: int
    rank_low: int
    low: int
    global_high: int | None = None
    global_low: int | None = None

    def text(self) -> str:
        name = self.argument.parameter
        high = rank_words(self.rank_high, self.global_high)
        low = rank_words(self.rank_low, self.global_low)
        if self.shown is Shown.GIVEN:
            differ = f"{high} passes {name} and {low} does not"
        elif self.shown is Shown.HIDDEN:
            differ = f"{high} and {low} have different values"
        else:
            differ = (f"{high} has {name}={_shown(self.shown, self.high)} and {low} has "
                      f"{name}={_shown(self.shown, self.low)}")
        return (
            f"the ranks passed different {name}: {differ}; every rank of the DP group must "
            "plan under the same options and cap, so set them alike on every rank (keywords, "
            "batch settings and SEQLEN_BALANCING_* variables)"
        )


@record
@dataclass(frozen=True)
class ModeMismatch(PlanError):
    """A group mixing the static and the dynamic path: one rank of each, and their global
    ranks when known."""

    static_rank: int
    dynamic_rank: int
    static_global: int | None = None
    dynamic_global: int | None = None

    def text(self) -> str:
        static = rank_words(self.static_rank, self.static_global)
        dynamic = rank_words(self.dynamic_rank, self.dynamic_global)
        return (
            f"the ranks of the DP group disagree on use_dynamic_bsz: {static} cuts its "
            f"batch statically (use_dynamic_bsz=False) but {dynamic} dynamically; store "
            "the same use_dynamic_bsz in every rank's batch"
        )


@record
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
        most = rank_words(self.rank_largest, self.global_largest)
        least = rank_words(self.rank_smallest, self.global_smallest)
        return (
            f"the ranks of the DP group would run different numbers of static micro-batches: "
            f"{most} has {shown(self.largest)} and {least} has {shown(self.smallest)}; give every "
            "rank the same batch size (use_dynamic_bsz=False cuts batch size / "
            "(micro_batch_size_per_gpu * force_group_size) micro-batches)"
        )


@record
@dataclass(frozen=True)
class NotInGroup(PlanError):
    """This process (global rank ``process``) is not a member of the ``dp_group`` of
    ``size`` ranks it passed; raised at once, never agreed."""

    process: int
    size: int

    def text(self) -> str:
        return (
            f"this process (global rank {shown(self.process)}) is not a member of dp_group (a "
            f"group of {shown(self.size)} ranks), so it cannot take part in that group's "
            "agreement; pass the DP group this process belongs to, or dp_group=None to plan locally"
        )
