"""Error records about the caller's scalar arguments and the batch's settings.

Each record names the :class:`Argument` it is about; the message uses the argument's
name as the caller spells it (``max_token_len``, ``sp_size``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from seqlen_balancing.errors.record import (
    OUT_OF_RANGE,
    NonPositive,
    Peers,
    PlanError,
    at_least,
    record,
    round_up,
    shown,
)

__all__ = [
    "Argument",
    "BelowOne",
    "BucketAboveCap",
    "CombinationRefused",
    "MissingSetting",
    "NotASwitch",
    "NotAnInteger",
    "OverCapNotAString",
    "SampleLimitBelowGroup",
    "StaticPathOption",
    "UnknownOverCap",
]


class Argument(IntEnum):
    """Which scalar argument (or batch setting) an error is about; its name, lower-cased,
    is the parameter's."""

    MAX_TOKEN_LEN = 0
    FORCE_GROUP_SIZE = 1
    MIN_NUM_MICRO_BATCH = 2
    NUM_BATCHES_DIVIDED_BY = 3
    NUM_MICRO_BATCHES = 4
    MAX_TOKEN_LEN_PER_GPU = 5
    SP_SIZE = 6
    USE_DYNAMIC_BSZ = 7
    MICRO_BATCH_SIZE_PER_GPU = 8
    SAME_MICRO_NUM_IN_DP = 9
    USE_DYNAMIC_BSZ_BALANCE = 10
    PAD_TO_MULTIPLE_OF = 11
    MICRO_BATCH_MULTIPLE_OF = 12
    COSTS = 13
    MAX_SAMPLES_PER_MICRO_BATCH = 14
    PADDED = 15
    DUMMY_MICRO_BATCHES = 16
    OVER_CAP = 17

    @property
    def parameter(self) -> str:
        """The name as the caller spells it."""
        return self.name.lower()


@record
@dataclass(frozen=True)
class NotAnInteger(PlanError):
    """A positive-integer argument that is not an integer (a float, a string, ``None``)."""

    exception_type = TypeError
    argument: Argument

    def text(self) -> str:
        return f"{self.argument.parameter} must be a positive integer, got a value that is not an integer"


@record
@dataclass(frozen=True)
class BelowOne(PlanError):
    """A positive-integer argument that is 0 or negative (``value``, as given)."""

    argument: Argument
    value: NonPositive

    def text(self) -> str:
        name = self.argument.parameter
        if self.value == OUT_OF_RANGE:
            return f"{name} must be a positive integer (>= 1), got a negative value out of range"
        return f"{name} must be a positive integer (>= 1), got {self.value}"


@record
@dataclass(frozen=True)
class MissingSetting(PlanError):
    """A setting ``prepare_micro_batches`` reads from the batch is not there."""

    argument: Argument

    def text(self) -> str:
        return (
            f"the batch has no {self.argument.parameter!r} setting; store it in the TensorDict "
            "(verl's prepare_micro_batches reads its settings from the batch)"
        )


@record
@dataclass(frozen=True)
class NotASwitch(PlanError):
    """A switch (``use_dynamic_bsz``, ``padded``, ...) that is not a bool or 0/1."""

    exception_type = TypeError
    argument: Argument

    def text(self) -> str:
        return f"{self.argument.parameter} must be a bool (or 0/1), got a value that is not"


@record
@dataclass(frozen=True)
class BucketAboveCap(PlanError):
    """``micro_batch_multiple_of`` above ``max_token_len``: no micro-batch fits. ``needed``:
    the cap to advise (a bucket, and the costliest group rounded up to it)."""

    bucket: int
    cap: int
    needed: int

    def text(self) -> str:
        return (
            f"micro_batch_multiple_of={shown(self.bucket)} is larger than "
            f"max_token_len={shown(self.cap)}: every micro-batch is rounded up to at least one "
            f"bucket, so none fits; raise max_token_len {at_least(max(self.bucket, self.needed))} "
            "or lower micro_batch_multiple_of"
        )

    def agreed(self, peers: Peers) -> PlanError:
        # The advised cap must also hold the group's costliest sample or group.
        group = peers.costliest(0)
        return replace(self, needed=max(self.needed, round_up(group, self.bucket)))


@record
@dataclass(frozen=True)
class StaticPathOption(PlanError):
    """A cost option given to the static path (``use_dynamic_bsz=False``), which has no
    cap for it to change. ``given``: the value, when it can be shown, else ``None``."""

    argument: Argument
    given: int | None

    def text(self) -> str:
        name = self.argument.parameter
        what = name if self.given is None or self.given == OUT_OF_RANGE else f"{name}={self.given}"
        return (
            f"{what} applies to the dynamic path (use_dynamic_bsz=True) only: the static path "
            "cuts chunks of micro_batch_size_per_gpu samples and has no cap for it to change; "
            f"drop {name} or set use_dynamic_bsz"
        )


@record
@dataclass(frozen=True)
class SampleLimitBelowGroup(PlanError):
    """``max_samples_per_micro_batch`` below ``force_group_size``: no group fits."""

    limit: int
    group: int

    def text(self) -> str:
        limit, group = shown(self.limit), shown(self.group)
        return (
            f"max_samples_per_micro_batch={limit} is below force_group_size={group}: a "
            "forced group shares one micro-batch, so none could hold it; raise "
            f"max_samples_per_micro_batch to at least {group} or lower force_group_size"
        )


@record
@dataclass(frozen=True)
class CombinationRefused(PlanError):
    """Two options that this release does not plan together (``argument`` with ``other``:
    ``over_cap='alone'`` or ``dummy_micro_batches=True``)."""

    argument: Argument
    other: Argument

    def text(self) -> str:
        settings = {Argument.OVER_CAP: "over_cap='alone'",
                    Argument.DUMMY_MICRO_BATCHES: "dummy_micro_batches=True"}
        return (
            f"{self.argument.parameter} cannot be combined with "
            f"{settings.get(self.other, 'another option')} in this release: the planner for it "
            "does not model that option, and a setting is never silently ignored; drop one of the two"
        )


@record
@dataclass(frozen=True)
class OverCapNotAString(PlanError):
    """``over_cap`` is not a string."""

    exception_type = TypeError

    def text(self) -> str:
        return "over_cap must be 'raise' or 'alone', got a value that is not a string"


@record
@dataclass(frozen=True)
class UnknownOverCap(PlanError):
    """``over_cap`` is a string other than ``"raise"`` and ``"alone"``."""

    def text(self) -> str:
        return "over_cap must be 'raise' or 'alone', got another string"
