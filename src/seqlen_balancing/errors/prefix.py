"""Error records about ``prefix_lengths``: the prompt a group's samples share, counted once.

A group is named by its id as ``repr`` shows it (carried as text, so that every rank names
the same group), a sample by its index.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqlen_balancing.errors.record import PlanError

__all__ = [
    "PrefixDiffersInGroup",
    "PrefixLengthsKeyMissing",
    "PrefixLengthsWith",
    "PrefixLengthsWithoutGroups",
    "PrefixOverLength",
]


@dataclass(frozen=True)
class PrefixLengthsWith(PlanError):
    """``prefix_lengths`` given with ``other`` (``"costs"`` or ``"padded=True"``), which
    decides a micro-batch's cost another way."""

    other: str

    def text(self) -> str:
        why = ("a padded micro-batch costs its rows x its widest row, whatever its samples share"
               if self.other.startswith("padded") else
               "prefix_lengths make each sample's cost (its tokens beyond the shared prefix, the "
               "prefix once per group part)")
        return f"prefix_lengths and {self.other} were both given: {why}; pass one of them"


@dataclass(frozen=True)
class PrefixLengthsWithoutGroups(PlanError):
    """``prefix_lengths`` given without ``group_ids`` or ``force_group_size``: nothing says
    who shares a prefix."""

    fixed_text = (
        "prefix_lengths was given without group_ids: a prefix is shared by the samples of one "
        "group (the responses of one prompt); pass group_ids (e.g. verl's uid) or a "
        "force_group_size above 1 too"
    )


@dataclass(frozen=True)
class PrefixOverLength(PlanError):
    """Sample ``index`` has a shared prefix of ``prefix`` tokens but ``length`` tokens in all."""

    index: int
    prefix: int
    length: int

    fixed_text = (
        "prefix_lengths[{index}] is {prefix} but sample "
        "{index} has {length} tokens; a sample's shared prefix is "
        "part of it: give at most its length"
    )


@dataclass(frozen=True)
class PrefixDiffersInGroup(PlanError):
    """Group ``group`` (its id's repr) holds samples ``index`` and ``other`` whose prefix
    lengths differ (``prefix`` and ``other_prefix``)."""

    group: str
    index: int
    prefix: int
    other: int
    other_prefix: int

    fixed_text = (
        "group {group} has prefix_lengths {prefix} (sample "
        "{index}) and {other_prefix} (sample {other}); "
        "the samples of a group share one prefix: give them one prefix length"
    )


@dataclass(frozen=True)
class PrefixLengthsKeyMissing(PlanError):
    """``prefix_lengths`` names an entry the batch does not hold."""

    key: str

    fixed_text = (
        "prefix_lengths={key!r} names no entry of the batch; store one prefix length "
        "per sample under that key (a tensor, a NonTensorStack, or a numpy array in a "
        "DataProto's non_tensor_batch) or pass the lengths themselves"
    )
