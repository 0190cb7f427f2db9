"""Error records about ``group_ids`` and the dummies of a rank with no samples.

``group_ids`` keeps groups of any size whole; ``dummy_micro_batches=True`` on a rank with
no samples needs something to copy (``dummy_template``, or the batch's own columns).

A group is named by its id as ``repr`` shows it (text, so that every rank names the same
group) and by its first sample's index.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from seqlen_balancing.errors.record import Peers, PlanError, at_least, round_up

__all__ = [
    "DummyTemplateInvalid",
    "GroupIdUnhashable",
    "GroupIdsAndForceGroupSize",
    "GroupIdsKeyMissing",
    "GroupIdsNotASequence",
    "GroupIdsOverCap",
    "GroupIdsRaised",
    "GroupOverSampleLimit",
    "NoDummyTemplate",
]

@dataclass(frozen=True)
class GroupIdsNotASequence(PlanError):
    """``group_ids`` is not a sequence of per-sample ids (``given``: its type's name)."""

    exception_type = TypeError
    given: str

    fixed_text = (
        "group_ids must be one hashable id per sample (a list, a tuple, a 1-D tensor or array; "
        "with a batch, also the name of one of its entries), got a value of type {given}"
    )


@dataclass(frozen=True)
class GroupIdUnhashable(PlanError):
    """``group_ids[index]`` cannot be hashed (``given``: its type's name)."""

    exception_type = TypeError
    index: int
    given: str

    fixed_text = (
        "group_ids[{index}] is a {given}, which cannot be hashed; a group id is any hashable "
        "value (an int, a str, a tuple, ...)"
    )


@dataclass(frozen=True)
class GroupIdsRaised(PlanError):
    """Reading ``group_ids`` raised an exception of type ``raised``."""

    raised: str

    fixed_text = (
        "reading group_ids raised {raised}: group_ids must be read whole, one "
        "hashable id per sample; fix the group_ids"
    )


@dataclass(frozen=True)
class GroupIdsKeyMissing(PlanError):
    """``group_ids`` names an entry the batch does not hold."""

    key: str

    fixed_text = (
        "group_ids={key!r} names no entry of the batch; store one id per sample "
        "under that key (a tensor, a NonTensorStack, or a numpy array in a DataProto's "
        "non_tensor_batch) or pass the ids themselves"
    )


@dataclass(frozen=True)
class GroupIdsAndForceGroupSize(PlanError):
    """Both ``group_ids`` and ``force_group_size`` above 1 were given."""

    force_group_size: int

    fixed_text = (
        "group_ids and force_group_size={force_group_size} were both given; "
        "force_group_size=g is group_ids=[i // g for i in range(n)]: pass one of them"
    )


@dataclass(frozen=True)
class GroupIdsOverCap(PlanError):
    """A group of ``group_ids`` (``group``: its id's repr; ``index``: its first sample)
    whose ``cost`` exceeds the ``cap`` given: its samples' costs summed, or under
    ``padded=True`` its rows x its widest row; ``largest``: the costliest group (of the DP
    group, once agreed); ``bucket``: ``micro_batch_multiple_of``."""

    group: str
    index: int
    cost: int
    cap: int
    largest: int
    bucket: int
    padded: bool = False

    def agreed(self, peers: Peers) -> PlanError:
        return replace(self, largest=peers.costliest(self.largest))

    def text(self) -> str:
        usable = self.cap // self.bucket * self.bucket
        rounded = f" (usable as {usable}: micro_batch_multiple_of={self.bucket})" if self.bucket > 1 else ""
        unit = ("token positions padded (its rows x its widest row)" if self.padded
                else "tokens (its samples' costs summed)")
        return (
            f"group {self.group} (group_ids[{self.index}], its first sample) costs "
            f"{self.cost} {unit}, which exceeds max_token_len={self.cap}{rounded}; "
            f"a group runs whole in one micro-batch: raise max_token_len "
            f"{at_least(round_up(self.largest, self.bucket))} (the costliest group of the call, on "
            "every DP rank of the group when they agree), split the group, or pass "
            "over_cap='alone'"
        )


@dataclass(frozen=True)
class GroupOverSampleLimit(PlanError):
    """A group of ``group_ids`` holding more ``samples`` than ``max_samples_per_micro_batch``."""

    group: str
    index: int
    samples: int
    limit: int

    fixed_text = (
        "group {group} (group_ids[{index}], its first sample) has "
        "{samples} samples, more than max_samples_per_micro_batch="
        "{limit}; a group runs whole in one micro-batch: raise "
        "max_samples_per_micro_batch to at least {samples}, split the group, "
        "or pass over_cap='alone'"
    )


@dataclass(frozen=True)
class NoDummyTemplate(PlanError):
    """A rank with no samples under ``dummy_micro_batches=True`` has nothing to build its
    dummy micro-batches from: no rows, no columns, no ``dummy_template``."""

    fixed_text = (
        "the batch has no samples and no columns to build dummy micro-batches from "
        "(dummy_micro_batches=True); pass dummy_template= (a TensorDict or DataProto "
        "with at least one row of the batch's keys and dtypes), or a batch of zero rows "
        "that holds its entries"
    )


@dataclass(frozen=True)
class DummyTemplateInvalid(PlanError):
    """``dummy_template`` cannot serve (``reason`` 0: not a TensorDict/DataProto, 1: no
    rows, 2: a loss-weight entry missing or not a tensor, 3: its entries cannot be cut)."""

    reason: int

    def text(self) -> str:
        why = {
            0: "is not a TensorDict (or a DataProto on prepare_dynamic_batch)",
            1: "has no rows; it needs at least one row to copy",
            2: "lacks a loss-weight entry to zero (loss_mask or response_mask, or the "
               "loss_weight_keys given) as a tensor",
            3: "holds an entry that cannot be cut by rows",
        }.get(self.reason, "cannot serve")
        return (
            f"dummy_template {why}; pass a TensorDict (DataProto) with at least one row of "
            "the batch's keys and dtypes, its loss weights among them"
        )
