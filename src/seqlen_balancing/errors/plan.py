"""Error records about the plan: empty or indivisible batches, samples over the cap, counts.

The over-cap records share their fields (:class:`SampleOverCap`'s); once the DP group has
agreed, ``largest`` is the costliest sample or group of the whole group, so that the advice
("raise max_token_len to at least X") cannot fail again on another rank.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from seqlen_balancing.errors.record import Peers, PlanError, at_least, rank_words, round_up

__all__ = [
    "MAX_DUMMY_MICRO_BATCHES",
    "CountAboveGroups",
    "EmptyBatch",
    "GroupOverCap",
    "MinAboveGroups",
    "NotDivisible",
    "OverCap",
    "PaddedGroupOverCap",
    "PaddedSampleOverCap",
    "RowsOverCap",
    "SampleOverCap",
    "StaticNotDivisible",
    "TooManyDummies",
]

#: Most dummy micro-batches one rank adds (``dummy_micro_batches=True``): a larger need is
#: a :class:`TooManyDummies` error, so no argument makes a rank copy rows without bound.
MAX_DUMMY_MICRO_BATCHES = 1 << 16


@dataclass(frozen=True)
class EmptyBatch(PlanError):
    """The batch has no samples."""

    fixed_text = "the batch has no samples; pass at least one row"


@dataclass(frozen=True)
class NotDivisible(PlanError):
    """The batch size is not a multiple of ``force_group_size``."""

    batch_size: int
    force_group_size: int

    fixed_text = (
        "batch size {batch_size} is not divisible by "
        "force_group_size={force_group_size}; every forced group needs all its samples"
    )


@dataclass(frozen=True)
class OverCap(PlanError):
    """The fields of every over-cap record (not a record itself): the first item over the cap (its effective
    ``tokens``, the ``index`` of its first sample, its ``cost``), the ``cap`` given, how many
    items are ``over`` it, the ``largest`` cost (in the DP group, once agreed), and how the
    cost is made (``bucket``: micro_batch_multiple_of; ``pad_to_multiple_of``;
    ``given_costs``: the caller's costs)."""

    tokens: int
    index: int
    cap: int
    over: int
    largest: int
    cost: int
    bucket: int
    pad_to_multiple_of: int
    given_costs: bool

    def agreed(self, peers: Peers) -> PlanError:
        # The advice must suit every rank: the group's costliest item.
        return replace(self, largest=peers.costliest(self.largest))

    def _counted(self, unit: str, longest: str) -> tuple[str, str]:
        over = f"{self.over} {unit}{'s' if self.over != 1 else ''} over the cap in this batch"
        return over, f"the {longest} {unit} of the call, on every DP rank of the group when they agree"

    def _usable(self, since: str) -> str:
        """The usable cap under a bucket (``since``: the words before "is rounded up"), or
        "" without one."""
        if self.bucket == 1:
            return ""
        return (
            f", usable as {self.cap // self.bucket * self.bucket}{since} is rounded up to a "
            f"multiple of micro_batch_multiple_of={self.bucket}"
        )


def _over_cap(error: OverCap, what: str, unit: str) -> str:
    """The message of a sample or group whose summed cost exceeds the cap."""
    over, longest = error._counted(unit, "longest")
    pad, custom = error.pad_to_multiple_of, error.given_costs
    head = f"{what} {error.index} has {error.tokens} tokens"
    if pad == 1 and not custom and error.bucket == 1:  # the cost is the tokens
        return (
            f"{head}, which exceeds max_token_len={error.cap} ({over}); "
            f"raise max_token_len {at_least(error.largest)} ({longest}) or truncate the sequences"
        )
    aligned = f"a multiple of pad_to_multiple_of={pad}"
    costs, lower = {  # (costs given, aligned): what the cost is, and what lowers it
        (False, False): ("", "lower micro_batch_multiple_of"),
        (True, False): (f" and costs {error.cost} tokens (the costs given)", "lower the costs"),
        (True, True): (f" and costs {error.cost} tokens (the cost given, rounded up to {aligned})",
                       "lower the costs or the alignment"),
        (False, True): (f" and costs {error.cost} tokens aligned to {aligned}", "lower the alignment"),
    }[custom, pad > 1]
    return (
        f"{head}{costs}, which exceeds max_token_len={error.cap}"
        f"{error._usable(' tokens since each micro-batch')} ({over}); raise max_token_len "
        f"{at_least(round_up(error.largest, error.bucket))} "
        f"({longest}, in aligned tokens), {lower} or truncate the sequences"
    )


def _padded_over_cap(error: OverCap, what: str, unit: str) -> str:
    """The message under ``padded=True``: the row's tokens, the width it is padded to, the
    rows and the footprint (rows x width), the cap and the advice."""
    over, longest = error._counted(unit, "costliest")
    pad = error.pad_to_multiple_of
    width = round_up(error.tokens, pad)
    rows = error.cost // width
    source = " (the costs given)" if error.given_costs else ""
    aligned = f", each row rounded up to pad_to_multiple_of={pad}" if pad > 1 else ""
    has = f"has {error.tokens} tokens" if unit == "sample" else f"has a widest row of {error.tokens} tokens"
    return (
        f"{what} {error.index} {has}{source}; padded=True holds it as {rows} "
        f"row{'s' if rows != 1 else ''} x {width} wide = {error.cost} token positions (a "
        f"micro-batch costs rows x its widest row{aligned}), which exceeds "
        f"max_token_len={error.cap}{error._usable(' since each footprint')} ({over}); "
        "raise max_token_len "
        f"{at_least(round_up(error.largest, error.bucket))} ({longest}), "
        f"{'lower force_group_size ' if unit == 'group' else ''}or truncate the sequences"
    )


@dataclass(frozen=True)
class SampleOverCap(OverCap):
    """A sample whose cost exceeds the cap (fields: :class:`OverCap`)."""

    def text(self) -> str:
        return _over_cap(self, "sample", "sample")


@dataclass(frozen=True)
class GroupOverCap(OverCap):
    """A forced group, starting at sample ``index``, whose summed cost exceeds the cap."""

    def text(self) -> str:
        return "forced group exceeds max_token_len: " + _over_cap(
            self, "the group starting at sample", "group"
        )


@dataclass(frozen=True)
class PaddedSampleOverCap(OverCap):
    """Under ``padded=True``, a sample whose row (``tokens`` wide, padded) exceeds the cap."""

    def text(self) -> str:
        return _padded_over_cap(self, "sample", "sample")


@dataclass(frozen=True)
class PaddedGroupOverCap(OverCap):
    """Under ``padded=True``, a forced group whose rows x widest row exceeds the cap."""

    def text(self) -> str:
        return "forced group exceeds max_token_len: " + _padded_over_cap(
            self, "the group starting at sample", "group"
        )


@dataclass(frozen=True)
class MinAboveGroups(PlanError):
    """``min_num_micro_batch`` above the samples/groups available."""

    min_num_micro_batch: int
    groups: int

    fixed_text = (
        "min_num_micro_batch={min_num_micro_batch} asks for more micro-batches "
        "than the {groups} samples/groups available (a micro-batch cannot be "
        "empty); lower min_num_micro_batch"
    )


@dataclass(frozen=True)
class CountAboveGroups(PlanError):
    """The ``count`` agreed (``needed`` before rounding up to ``num_batches_divided_by``,
    by ``rank_needing``, ``None`` when the cap alone needs it) is above the ``groups`` of a
    rank; ``global_needing`` is that rank's global rank, when known."""

    count: int
    groups: int
    needed: int
    rank_needing: int | None
    global_needing: int | None = None

    def agreed(self, peers: Peers) -> PlanError:
        # The rank needing the count is named by its global rank too, where it is known.
        if self.rank_needing is None:
            return self
        return replace(self, global_needing=peers.global_rank(self.rank_needing))

    def text(self) -> str:
        who = "the cap" if self.rank_needing is None else rank_words(self.rank_needing, self.global_needing)
        rounded = ("" if self.count == self.needed
                   else f", rounded up to {self.count} for num_batches_divided_by")
        return (
            "Cannot satisfy max_token_len while keeping forced groups atomic: "
            f"{self.count} micro-batches are needed but only {self.groups} "
            f"samples/groups are available and a micro-batch cannot be empty ({who} needs "
            f"{self.needed}{rounded}); "
            "raise max_token_len, lower num_batches_divided_by or min_num_micro_batch, pass more samples, "
            "or pass dummy_micro_batches=True (a rank short of groups runs zero-weight micro-batches)"
        )


@dataclass(frozen=True)
class TooManyDummies(PlanError):
    """A ``count`` that needs more than :data:`MAX_DUMMY_MICRO_BATCHES` dummies on a rank
    of ``groups`` samples/groups."""

    dummies: int
    groups: int
    count: int

    fixed_text = (
        "{count} micro-batches would need {dummies} dummy micro-batches on a rank of {groups} "
        f"samples/groups, more than the {MAX_DUMMY_MICRO_BATCHES} allowed; lower "
        "min_num_micro_batch or num_batches_divided_by"
    )


@dataclass(frozen=True)
class StaticNotDivisible(PlanError):
    """On the static path, a batch size that is not a positive multiple of
    ``micro_batch_size_per_gpu * force_group_size``."""

    batch_size: int
    micro_batch_size_per_gpu: int
    force_group_size: int

    fixed_text = (
        "batch size {batch_size} is not a positive multiple of "
        "micro_batch_size_per_gpu * force_group_size = {micro_batch_size_per_gpu} * "
        "{force_group_size}; change micro_batch_size_per_gpu or the batch size"
    )


@dataclass(frozen=True)
class RowsOverCap(PlanError):
    """``equal_rows_per_micro_batch``: every micro-batch must hold ``rows`` rows (the most
    any micro-batch of the DP group holds), but this rank's micro-batches take at most
    ``tolerance`` rows under ``cap`` (the ``max_token_len`` given) once their filler rows
    (zero-weight rows of one token) are counted."""

    rows: int
    tolerance: int
    cap: int

    def text(self) -> str:
        return (
            f"equal_rows_per_micro_batch: every micro-batch must hold {self.rows} rows, "
            f"but this rank's micro-batches hold at most {self.tolerance} "
            f"{'row' if self.tolerance == 1 else 'rows'} under "
            f"max_token_len={self.cap} once their filler rows (zero-weight rows of one "
            "token) are counted; raise max_token_len, give the ranks batches of similar "
            "sizes, or turn equal_rows_per_micro_batch off"
        )
