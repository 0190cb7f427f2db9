"""Error records about a per-sample list: the lengths, the costs or the workloads.

Each record names the :class:`LengthSource` it is about, and its message speaks of that
list by its parameter's name (``seq_lens``, ``costs``, ``workloads``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from seqlen_balancing.errors.record import PlanError

__all__ = [
    "CallerDataRaised",
    "LengthNotAnInteger",
    "LengthSource",
    "LengthsNotASequence",
    "LengthsNotOneDimensional",
    "NegativeLength",
    "NotOnePerSample",
]


class LengthSource(IntEnum):
    """Which per-sample list an error is about."""

    SEQ_LENS = 0  # the effective lengths
    COSTS = 1  # the caller's costs
    WORKLOADS = 2  # the caller's workloads (the balance objective)
    PREFIX_LENGTHS = 3  # the tokens each sample shares with its group (prefix_lengths)

    @property
    def words(self) -> tuple[str, str, str, str, str]:
        """``(parameter, the values, one value, " of tokens", " tokens")``; the last two
        empty for workloads, which are not in tokens."""
        name, many, one = _NAMES[self]
        if self is LengthSource.WORKLOADS:
            return name, many, one, "", ""
        return name, many, one, " of tokens", " tokens"


_NAMES = {
    LengthSource.SEQ_LENS: ("seq_lens", "lengths", "length"),
    LengthSource.COSTS: ("costs", "costs", "cost"),
    LengthSource.WORKLOADS: ("workloads", "workloads", "workload"),
    LengthSource.PREFIX_LENGTHS: ("prefix_lengths", "prefix lengths", "prefix length"),
}


@dataclass(frozen=True)
class LengthNotAnInteger(PlanError):
    """Entry ``index`` of the list is not an integer."""

    exception_type = TypeError
    source: LengthSource
    index: int

    def text(self) -> str:
        name, many, _, of_tokens, _ = self.source.words
        return f"{name}[{self.index}] is not an integer; {many} are whole numbers{of_tokens}"


@dataclass(frozen=True)
class NegativeLength(PlanError):
    """Entry ``index`` of the list is negative (``value``, as given)."""

    source: LengthSource
    index: int
    value: int

    def text(self) -> str:
        name, many, _, _, tokens = self.source.words
        return f"{name}[{self.index}] is {self.value}; {many} must be >= 0{tokens}"


@dataclass(frozen=True)
class NotOnePerSample(PlanError):
    """The list has ``entries`` values for a batch of ``samples``."""

    source: LengthSource
    entries: int
    samples: int

    def text(self) -> str:
        name, _, one, _, _ = self.source.words
        return (
            f"{name} has {self.entries} entries but the batch has {self.samples} "
            f"samples; give one {one} per sample"
        )


@dataclass(frozen=True)
class LengthsNotASequence(PlanError):
    """The list is not a sequence of per-sample numbers: ``given`` names what it is (a type
    name such as ``dict``, ``set``, ``str`` or ``generator``; "" when not known). A mapping
    or a set is refused, never read as its keys."""

    exception_type = TypeError
    source: LengthSource
    given: str = ""

    def text(self) -> str:
        name, _, _, of_tokens, _ = self.source.words
        what = f"a value of type {self.given}" if self.given else "something that is not"
        return (
            f"{name} must be a sequence of whole numbers{of_tokens}, one per sample (a list, a "
            f"tuple, a 1-D tensor or array), got {what}"
        )


@dataclass(frozen=True)
class CallerDataRaised(PlanError):
    """Reading the caller's per-sample data (calling a callable, iterating the values, or
    converting one) raised an exception of type ``raised`` (its name): this rank's
    error, agreed on by the DP group like any other."""

    source: LengthSource
    raised: str

    def text(self) -> str:
        name = self.source.words[0]
        return (
            f"reading {name} raised {self.raised}: the {name} given (or what their callable "
            f"returned) must be read whole, one number per sample; fix the {name} or the callable"
        )


@dataclass(frozen=True)
class LengthsNotOneDimensional(PlanError):
    """The list is a tensor or array of another shape than one value per sample."""

    source: LengthSource

    def text(self) -> str:
        return f"{self.source.words[0]} must be one-dimensional (one value per sample), got another shape"
