"""Error records about the caller's scalar arguments and the batch's settings.

Each record names the argument it is about as the caller spells it (``max_token_len``,
``sp_size``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from seqlen_balancing.errors.record import Peers, PlanError, at_least, round_up

__all__ = [
    "BelowOne",
    "BucketAboveCap",
    "MissingSetting",
    "NotASwitch",
    "NotAnInteger",
    "NotPlanOptions",
    "OverCapNotAString",
    "OverheadInvalid",
    "OverheadNotANumber",
    "SampleLimitBelowGroup",
    "StaticPathOption",
    "UnknownOption",
    "UnknownOverCap",
    "WorkloadModelInvalid",
    "WorkloadsAndModel",
]


@dataclass(frozen=True)
class NotAnInteger(PlanError):
    """A positive-integer argument that is not an integer (a float, a string, ``None``)."""

    exception_type = TypeError
    argument: str

    fixed_text = "{argument} must be a positive integer, got a value that is not an integer"


@dataclass(frozen=True)
class BelowOne(PlanError):
    """A positive-integer argument that is 0 or negative (``value``, as given)."""

    argument: str
    value: int

    fixed_text = "{argument} must be a positive integer (>= 1), got {value}"


@dataclass(frozen=True)
class MissingSetting(PlanError):
    """A setting ``prepare_micro_batches`` reads from the batch is not there."""

    argument: str

    fixed_text = (
        "the batch has no {argument!r} setting; store it in the TensorDict "
        "(verl's prepare_micro_batches reads its settings from the batch)"
    )


@dataclass(frozen=True)
class NotASwitch(PlanError):
    """A switch (``use_dynamic_bsz``, ``padded``, ...) that is not a bool or 0/1."""

    exception_type = TypeError
    argument: str

    fixed_text = "{argument} must be a bool (or 0/1), got a value that is not"


@dataclass(frozen=True)
class BucketAboveCap(PlanError):
    """``micro_batch_multiple_of`` above ``max_token_len``: no micro-batch fits. ``needed``:
    the cap to advise (a bucket, and the costliest group rounded up to it)."""

    bucket: int
    cap: int
    needed: int

    def text(self) -> str:
        return (
            f"micro_batch_multiple_of={self.bucket} is larger than "
            f"max_token_len={self.cap}: every micro-batch is rounded up to at least one "
            f"bucket, so none fits; raise max_token_len {at_least(max(self.bucket, self.needed))} "
            "or lower micro_batch_multiple_of"
        )

    def agreed(self, peers: Peers) -> PlanError:
        # The advised cap must also hold the group's costliest sample or group.
        return replace(self, needed=max(self.needed, round_up(peers.costliest(0), self.bucket)))


@dataclass(frozen=True)
class StaticPathOption(PlanError):
    """A cost option given to the static path (``use_dynamic_bsz=False``), which has no
    cap for it to change. ``given``: the value, when it can be shown, else ``None``."""

    argument: str
    given: int | None

    def text(self) -> str:
        what = self.argument if self.given is None else f"{self.argument}={self.given}"
        return (
            f"{what} applies to the dynamic path (use_dynamic_bsz=True) only: the static path "
            "cuts chunks of micro_batch_size_per_gpu samples and has no cap for it to change; "
            f"drop {self.argument} or set use_dynamic_bsz"
        )


@dataclass(frozen=True)
class SampleLimitBelowGroup(PlanError):
    """``max_samples_per_micro_batch`` below ``force_group_size``: no group fits."""

    limit: int
    group: int

    fixed_text = (
        "max_samples_per_micro_batch={limit} is below force_group_size={group}: a "
        "forced group shares one micro-batch, so none could hold it; raise "
        "max_samples_per_micro_batch to at least {group} or lower force_group_size"
    )


@dataclass(frozen=True)
class OverCapNotAString(PlanError):
    """``over_cap`` is not a string."""

    exception_type = TypeError

    fixed_text = "over_cap must be 'raise' or 'alone', got a value that is not a string"


@dataclass(frozen=True)
class UnknownOverCap(PlanError):
    """``over_cap`` is a string other than ``"raise"`` and ``"alone"``."""

    fixed_text = "over_cap must be 'raise' or 'alone', got another string"


@dataclass(frozen=True)
class UnknownOption(PlanError):
    """A keyword or batch setting that names no option (``name``, as given; ``close``: the
    option it most resembles, or "")."""

    exception_type = TypeError
    name: str
    close: str = ""

    def text(self) -> str:
        hint = f" (did you mean {self.close!r}?)" if self.close else ""
        return (
            f"{self.name!r} is not an option of seqlen-balancing{hint}; the options are the "
            "fields of seqlen_balancing.PlanOptions (docs/options.md)"
        )


@dataclass(frozen=True)
class NotPlanOptions(PlanError):
    """``options=`` given something other than a :class:`~seqlen_balancing.PlanOptions`."""

    exception_type = TypeError

    fixed_text = (
        "options must be a seqlen_balancing.PlanOptions (or None), got a value that is not; "
        "build one with PlanOptions(...) or pass the options as keywords"
    )


@dataclass(frozen=True)
class WorkloadModelInvalid(PlanError):
    """``workload_model`` is not a model shape the workload formula accepts."""

    fixed_text = (
        "workload_model must be a seqlen_balancing.cost.WorkloadModel, a mapping of its "
        "fields or 'key=value,...' text (e.g. 'hidden_size=8192,num_layers=80'), got one "
        "that is not a valid model shape"
    )


@dataclass(frozen=True)
class WorkloadsAndModel(PlanError):
    """Both per-sample ``workloads`` and a ``workload_model`` were given: two balance
    objectives, and a setting is never silently ignored."""

    fixed_text = (
        "workloads and workload_model are both given: each sets the balance objective; "
        "pass one of them (per-sample workloads, or the model whose workloads to compute)"
    )


@dataclass(frozen=True)
class OverheadNotANumber(PlanError):
    """``micro_batch_fixed_tokens`` is not a real number (a string, a bool, ``None``)."""

    exception_type = TypeError

    fixed_text = (
        "micro_batch_fixed_tokens must be a number >= 0 (the fixed cost of one micro-batch "
        "in tokens of linear work), got a value that is not a number"
    )


@dataclass(frozen=True)
class OverheadInvalid(PlanError):
    """``micro_batch_fixed_tokens`` is negative, infinite, NaN or beyond a float (``10**400``)."""

    fixed_text = (
        "micro_batch_fixed_tokens must be a finite number >= 0 (the fixed cost of one "
        "micro-batch in tokens of linear work), got a negative, infinite or NaN value, or "
        "one beyond a float; pass e.g. 819.2"
    )
