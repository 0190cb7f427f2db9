"""Planning errors as named records, so that one rank's error can be raised by every DP rank.

Each kind of error is a small frozen record type (:class:`PlanError` subclasses) with named
fields; it builds its message from them and knows its exception type. With a DP group the
record itself travels to every rank when some rank failed (the agreement's second exchange,
:mod:`seqlen_balancing.agreement`). The records, by room:

* :mod:`~seqlen_balancing.errors.arguments`: the caller's scalar arguments and settings;
* :mod:`~seqlen_balancing.errors.lengths`: the per-sample lists (lengths, costs, workloads);
* :mod:`~seqlen_balancing.errors.batch`: the batch, its entries and its loss weights;
* :mod:`~seqlen_balancing.errors.plan`: empty batches, samples over the cap, counts;
* :mod:`~seqlen_balancing.errors.agreement`: ranks that disagree, a process outside the group;
* :mod:`~seqlen_balancing.errors.prefix`: ``prefix_lengths`` (shared prompts counted once).

Example:
    >>> error = NotDivisible(7, 2)
    >>> error.exception_type.__name__, error.message(rank=1)[:51]
    ('ValueError', 'rank 1 of the DP group: batch size 7 is not divisib')
"""

from __future__ import annotations

from seqlen_balancing.errors.record import OUT_OF_RANGE, Peers, PlanError

# isort: off
from seqlen_balancing.errors.arguments import (
    BelowOne,
    BucketAboveCap,
    MissingSetting,
    NotAnInteger,
    OverheadInvalid,
    OverheadNotANumber,
    NotASwitch,
    NotPlanOptions,
    OverCapNotAString,
    SampleLimitBelowGroup,
    StaticPathOption,
    UnknownOption,
    UnknownOverCap,
    WorkloadModelInvalid,
    WorkloadsAndModel,
)
from seqlen_balancing.errors.lengths import (
    CallerDataRaised,
    LengthNotAnInteger,
    LengthsNotASequence,
    LengthsNotOneDimensional,
    LengthSource,
    NegativeLength,
    NotOnePerSample,
)
from seqlen_balancing.errors.batch import (
    EntryLayout,
    EntryOnMeta,
    EntryStack,
    EntryUnreadable,
    LengthsUnreadable,
    LossWeightKeyMissing,
    LossWeightKeysNotKeys,
    LossWeightNotTensor,
    MaskNot2D,
    MaskRows,
    MetaInfoNotCopyable,
    NoLengthSource,
    NoLossWeightEntry,
    NonTensorNotArray,
    NonTensorRows,
    NotADataProto,
    NotATensorDict,
    PaddedLazyStack,
    PrefixTreeAsked,
    ProtoRaggedStack,
)
from seqlen_balancing.errors.plan import (
    MAX_DUMMY_MICRO_BATCHES,
    CountAboveGroups,
    EmptyBatch,
    GroupOverCap,
    MinAboveGroups,
    NotDivisible,
    OverCap,
    PaddedGroupOverCap,
    PaddedSampleOverCap,
    RowsOverCap,
    SampleOverCap,
    StaticNotDivisible,
    TooManyDummies,
)
from seqlen_balancing.errors.agreement import (
    ModeMismatch,
    NotInGroup,
    OptionMismatch,
    StaticCountMismatch,
)
from seqlen_balancing.errors.groups import (
    DummyTemplateInvalid,
    GroupIdsAndForceGroupSize,
    GroupIdsKeyMissing,
    GroupIdsNotASequence,
    GroupIdsOverCap,
    GroupIdsRaised,
    GroupIdUnhashable,
    GroupOverSampleLimit,
    NoDummyTemplate,
)
from seqlen_balancing.errors.prefix import (
    PrefixDiffersInGroup,
    PrefixLengthsKeyMissing,
    PrefixLengthsWith,
    PrefixLengthsWithoutGroups,
    PrefixOverLength,
)
# isort: on

__all__ = [
    "MAX_DUMMY_MICRO_BATCHES",
    "OUT_OF_RANGE",
    "BelowOne",
    "BucketAboveCap",
    "CallerDataRaised",
    "CountAboveGroups",
    "DummyTemplateInvalid",
    "EmptyBatch",
    "EntryLayout",
    "EntryOnMeta",
    "EntryStack",
    "EntryUnreadable",
    "GroupIdUnhashable",
    "GroupIdsAndForceGroupSize",
    "GroupIdsKeyMissing",
    "GroupIdsNotASequence",
    "GroupIdsOverCap",
    "GroupIdsRaised",
    "GroupOverCap",
    "GroupOverSampleLimit",
    "LengthNotAnInteger",
    "LengthSource",
    "LengthsNotASequence",
    "LengthsNotOneDimensional",
    "LengthsUnreadable",
    "LossWeightKeyMissing",
    "LossWeightKeysNotKeys",
    "LossWeightNotTensor",
    "MaskNot2D",
    "MaskRows",
    "MetaInfoNotCopyable",
    "MinAboveGroups",
    "MissingSetting",
    "ModeMismatch",
    "NegativeLength",
    "NoDummyTemplate",
    "NoLengthSource",
    "NoLossWeightEntry",
    "NonTensorNotArray",
    "NonTensorRows",
    "NotADataProto",
    "NotASwitch",
    "NotATensorDict",
    "NotAnInteger",
    "NotDivisible",
    "NotInGroup",
    "NotOnePerSample",
    "NotPlanOptions",
    "OptionMismatch",
    "OverCap",
    "OverCapNotAString",
    "OverheadInvalid",
    "OverheadNotANumber",
    "PaddedGroupOverCap",
    "PaddedLazyStack",
    "PaddedSampleOverCap",
    "Peers",
    "PlanError",
    "PrefixDiffersInGroup",
    "PrefixLengthsKeyMissing",
    "PrefixLengthsWith",
    "PrefixLengthsWithoutGroups",
    "PrefixOverLength",
    "PrefixTreeAsked",
    "ProtoRaggedStack",
    "RowsOverCap",
    "SampleLimitBelowGroup",
    "SampleOverCap",
    "StaticCountMismatch",
    "StaticNotDivisible",
    "StaticPathOption",
    "TooManyDummies",
    "UnknownOption",
    "UnknownOverCap",
    "WorkloadModelInvalid",
    "WorkloadsAndModel",
]
