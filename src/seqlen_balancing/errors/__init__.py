"""Planning errors as named records, so that one rank's error can be agreed on by every DP rank.

Each kind of error is a small frozen record type (:class:`PlanError` subclasses) with named
fields; it builds its message from them and knows its exception type. The integers a record
sends through the agreement are derived from its fields (:mod:`seqlen_balancing.errors.record`),
and its code is its place in :data:`RECORDS`, dense from 1. The records, by room:

* :mod:`~seqlen_balancing.errors.arguments`: the caller's scalar arguments and settings;
* :mod:`~seqlen_balancing.errors.lengths`: the per-sample lists (lengths, costs, workloads);
* :mod:`~seqlen_balancing.errors.batch`: the batch, its entries and its loss weights;
* :mod:`~seqlen_balancing.errors.plan`: empty batches, samples over the cap, counts;
* :mod:`~seqlen_balancing.errors.agreement`: ranks that disagree, a process outside the group.

The modules are imported here in that order, which fixes every record's code.

Example:
    >>> error = NotDivisible(7, 2)
    >>> error.values(), type(error).from_values(error.values()) == error
    ((7, 2), True)
    >>> error.exception_type.__name__, error.message(rank=1)[:51]
    ('ValueError', 'rank 1 of the DP group: batch size 7 is not divisib')
"""

from __future__ import annotations

from seqlen_balancing.errors.record import (
    MAX_ERROR_VALUE,
    N_ERROR_VALUES,
    OUT_OF_RANGE,
    RECORDS,
    NonPositive,
    Peers,
    PlanError,
    Registry,
)

# The areas' order below is the order of the records' codes: keep it, do not sort it.
# isort: off
from seqlen_balancing.errors.arguments import (
    Argument,
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
    LARGEST_SHOWN,
    ModeMismatch,
    NotInGroup,
    OptionMismatch,
    Shown,
    StaticCountMismatch,
)
from seqlen_balancing.errors.groups import (
    DummyTemplateInvalid,
    GroupIdsAndForceGroupSize,
    GroupIdsKeyMissing,
    GroupIdsNotASequence,
    GroupIdsNotOnePerSample,
    GroupIdsOverCap,
    GroupIdsRaised,
    GroupIdUnhashable,
    GroupOverSampleLimit,
    NoDummyTemplate,
    PaddedGroupIdsOverCap,
)
# isort: on

__all__ = [
    "LARGEST_SHOWN",
    "MAX_DUMMY_MICRO_BATCHES",
    "MAX_ERROR_VALUE",
    "N_ERROR_VALUES",
    "OUT_OF_RANGE",
    "RECORDS",
    "Argument",
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
    "GroupIdsNotOnePerSample",
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
    "NonPositive",
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
    "PaddedGroupIdsOverCap",
    "PaddedGroupOverCap",
    "PaddedLazyStack",
    "PaddedSampleOverCap",
    "Peers",
    "PlanError",
    "PrefixTreeAsked",
    "ProtoRaggedStack",
    "Registry",
    "RowsOverCap",
    "SampleLimitBelowGroup",
    "SampleOverCap",
    "Shown",
    "StaticCountMismatch",
    "StaticNotDivisible",
    "StaticPathOption",
    "TooManyDummies",
    "UnknownOption",
    "UnknownOverCap",
    "WorkloadModelInvalid",
    "WorkloadsAndModel",
]
