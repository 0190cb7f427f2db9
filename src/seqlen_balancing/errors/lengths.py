"""Error records about a per-sample list: the lengths, the costs or the workloads.

Each record names the list it is about (``LengthSource``), and its message speaks of
that list by its parameter's name (``seq_lens``, ``costs``, ``workloads``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


# Which per-sample list an error is about, by its parameter's name: the effective lengths,
# the caller's costs, its workloads (the balance objective), the tokens each sample shares
# with its group, or the group ids.
LengthSource = Literal["seq_lens", "costs", "workloads", "prefix_lengths", "group_ids"]

#: Each list's words: (the values, one value, " of tokens", " tokens"); the last two empty
#: for the lists that are not in tokens.
_WORDS = {
    "seq_lens": ("lengths", "length", " of tokens", " tokens"),
    "costs": ("costs", "cost", " of tokens", " tokens"),
    "workloads": ("workloads", "workload", "", ""),
    "prefix_lengths": ("prefix lengths", "prefix length", " of tokens", " tokens"),
    "group_ids": ("group ids", "group id", "", ""),
}


@dataclass(frozen=True)
class LengthNotAnInteger(PlanError):
    """Entry ``index`` of the list is not an integer."""

    exception_type = TypeError
    source: LengthSource
    index: int

    def text(self) -> str:
        many, _, of_tokens, _ = _WORDS[self.source]
        return f"{self.source}[{self.index}] is not an integer; {many} are whole numbers{of_tokens}"


@dataclass(frozen=True)
class NegativeLength(PlanError):
    """Entry ``index`` of the list is negative (``value``, as given)."""

    source: LengthSource
    index: int
    value: int

    def text(self) -> str:
        many, _, _, tokens = _WORDS[self.source]
        return f"{self.source}[{self.index}] is {self.value}; {many} must be >= 0{tokens}"


@dataclass(frozen=True)
class NotOnePerSample(PlanError):
    """The list has ``entries`` values for a batch of ``samples``."""

    source: LengthSource
    entries: int
    samples: int

    def text(self) -> str:
        return (
            f"{self.source} has {self.entries} entries but the batch has {self.samples} "
            f"samples; give one {_WORDS[self.source][1]} per sample"
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
        what = f"a value of type {self.given}" if self.given else "something that is not"
        return (
            f"{self.source} must be a sequence of whole numbers{_WORDS[self.source][2]}, one per "
            f"sample (a list, a tuple, a 1-D tensor or array), got {what}"
        )


@dataclass(frozen=True)
class CallerDataRaised(PlanError):
    """Reading the caller's per-sample data (calling a callable, iterating the values, or
    converting one) raised an exception of type ``raised`` (its name): this rank's
    error, agreed on by the DP group like any other."""

    source: LengthSource
    raised: str

    fixed_text = (
        "reading {source} raised {raised}: the {source} given (or what their callable "
        "returned) must be read whole, one number per sample; fix the {source} or the callable"
    )


@dataclass(frozen=True)
class LengthsNotOneDimensional(PlanError):
    """The list is a tensor or array of another shape than one value per sample."""

    source: LengthSource

    fixed_text = "{source} must be one-dimensional (one value per sample), got another shape"
