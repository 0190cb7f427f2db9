"""Hand-written instances of every error record, with values someone could get wrong (huge,
zero, out of range, long keys), shared by tests/test_errors.py and the agreement's tests.

The expected integers of each are written out by hand in ``VALUES`` (the oracle for
``values()``); :func:`expected_type` is each record's exception type, stated here
(``TYPE_ERRORS``), not read from the record.
"""

from __future__ import annotations

from seqlen_balancing.errors import (
    OUT_OF_RANGE,
    Argument,
    BelowOne,
    BucketAboveCap,
    CombinationRefused,
    CountAboveGroups,
    DivisorMismatch,
    EmptyBatch,
    EntryLayout,
    EntryOnMeta,
    EntryStack,
    EntryUnreadable,
    GroupOverCap,
    LengthNotAnInteger,
    LengthsNotASequence,
    LengthsNotOneDimensional,
    LengthSource,
    LengthsUnreadable,
    LossWeightKeyMissing,
    LossWeightKeysNotKeys,
    LossWeightNotTensor,
    MaskNot2D,
    MaskRows,
    MetaInfoNotCopyable,
    MinAboveGroups,
    MissingSetting,
    ModeMismatch,
    NegativeLength,
    NoLengthSource,
    NoLossWeightEntry,
    NonTensorNotArray,
    NonTensorRows,
    NotADataProto,
    NotAnInteger,
    NotASwitch,
    NotATensorDict,
    NotDivisible,
    NotInGroup,
    NotOnePerSample,
    OverCapNotAString,
    PaddedGroupOverCap,
    PaddedLazyStack,
    PaddedSampleOverCap,
    PlanError,
    ProtoRaggedStack,
    SampleLimitBelowGroup,
    SampleOverCap,
    StaticCountMismatch,
    StaticNotDivisible,
    StaticPathOption,
    TooManyDummies,
    UnknownOverCap,
)

TOP = OUT_OF_RANGE  # 2**76 - 1
BIG = TOP - 1  # the largest value carried whole


def key(text: str) -> tuple[int, int, int, int]:
    """A key's 4 values, by hand: its UTF-8 bytes, NUL-padded to 36, in 9-byte big-endian chunks."""
    raw = text.encode().ljust(36, b"\0")
    a, b, c, d = (int.from_bytes(raw[i : i + 9], "big") for i in range(0, 36, 9))
    return a, b, c, d


#: (record, the integers it must carry), for every record type, some more than once.
VALUES: list[tuple[PlanError, tuple[int, ...]]] = [
    (NotAnInteger(Argument.MAX_TOKEN_LEN), (0,)),
    (NotAnInteger(Argument.MAX_SAMPLES_PER_MICRO_BATCH, detail="1.5 (float)"), (14,)),
    (BelowOne(Argument.SP_SIZE, 0), (6, 0)),
    (BelowOne(Argument.FORCE_GROUP_SIZE, -(2**70)), (1, 2**70)),
    (BelowOne(Argument.MIN_NUM_MICRO_BATCH, -(2**80)), (2, TOP)),
    (MissingSetting(Argument.MAX_TOKEN_LEN_PER_GPU), (5,)),
    (NotASwitch(Argument.OVER_CAP), (17,)),
    (NotASwitch(Argument.USE_DYNAMIC_BSZ), (7,)),
    (BucketAboveCap(4096, 1000, 8192), (4096, 1000, 8192)),
    (StaticPathOption(Argument.PAD_TO_MULTIPLE_OF, 8), (11, 9)),
    (StaticPathOption(Argument.MICRO_BATCH_MULTIPLE_OF, 0), (12, 1)),
    (StaticPathOption(Argument.COSTS, None), (13, 0)),
    (StaticPathOption(Argument.PAD_TO_MULTIPLE_OF, BIG), (11, TOP)),
    (SampleLimitBelowGroup(3, 4), (3, 4)),
    (CombinationRefused(Argument.PADDED, Argument.DUMMY_MICRO_BATCHES), (15, 16)),
    (OverCapNotAString(detail="3 (int)"), ()),
    (UnknownOverCap(), ()),
    (LengthNotAnInteger(LengthSource.COSTS, 7), (1, 7)),
    (NegativeLength(LengthSource.SEQ_LENS, 2, -3), (0, 2, 3)),
    (NegativeLength(LengthSource.WORKLOADS, BIG, -(2**76)), (2, BIG, TOP)),
    (NotOnePerSample(LengthSource.WORKLOADS, 3, 5), (2, 3, 5)),
    (LengthsNotASequence(LengthSource.COSTS), (1,)),
    (LengthsNotOneDimensional(LengthSource.SEQ_LENS), (0,)),
    (NoLengthSource(), ()),
    (MaskNot2D(3), (3,)),
    (MaskRows(4, 5), (4, 5)),
    (LengthsUnreadable(), ()),
    (NotADataProto(), ()),
    (NonTensorRows(0, 2**63), (0, 2**63)),
    (NotATensorDict(), ()),
    (NonTensorNotArray(), ()),
    (EntryOnMeta("input_ids"), key("input_ids")),
    (EntryUnreadable("a.b"), key("a.b")),
    (EntryLayout("é" * 18), key("é" * 18)),  # exactly 36 bytes: not shortened
    (EntryStack("x" * 40), key("x" * 33 + "...")),
    (MetaInfoNotCopyable(), ()),
    (ProtoRaggedStack("position_ids"), key("position_ids")),
    (PaddedLazyStack(), ()),
    (LossWeightKeyMissing("loss_mask"), key("loss_mask")),
    (NoLossWeightEntry(), ()),
    (LossWeightNotTensor("response_mask"), key("response_mask")),
    (LossWeightKeysNotKeys(), ()),
    (EmptyBatch(), ()),
    (NotDivisible(7, 2), (7, 2)),
    (SampleOverCap(9, 1, 8, 1, 9, 9, 1, 1, False), (9, 1, 8, 1, 9, 9, 1, 1, 0)),
    (SampleOverCap(20, 4, 16, 3, 2**70, 24, 8, 8, True), (20, 4, 16, 3, 2**70, 24, 8, 8, 1)),
    (GroupOverCap(30, 6, 16, 2, 40, 32, 1, 16, False), (30, 6, 16, 2, 40, 32, 1, 16, 0)),
    (PaddedSampleOverCap(300, 1, 256, 1, 320, 320, 1, 64, False), (300, 1, 256, 1, 320, 320, 1, 64, 0)),
    (PaddedGroupOverCap(90, 2, 100, 1, 360, 360, 16, 4, True), (90, 2, 100, 1, 360, 360, 16, 4, 1)),
    (MinAboveGroups(9, 4), (9, 4)),
    (CountAboveGroups(3, 2, 3, 2), (3, 2, 3, 3, 0)),
    (CountAboveGroups(4, 2, 3, None), (4, 2, 3, 0, 0)),
    (CountAboveGroups(8, 3, 5, 0, 0), (8, 3, 5, 1, 1)),
    (TooManyDummies(70000, 4, 70004), (70000, 4, 70004)),
    (StaticNotDivisible(10, 4, 2), (10, 4, 2)),
    (DivisorMismatch(2, 3), (2, 3)),
    (ModeMismatch(1, 0), (1, 0, 0, 0)),
    (ModeMismatch(1, 2, 7, 14), (1, 2, 8, 15)),
    (StaticCountMismatch(1, 5, 4, 2, 101, 104), (1, 5, 4, 2, 102, 105)),
    (NotInGroup(5, 2), (5, 2)),
]

EXAMPLES = [error for error, _ in VALUES]

#: The records raised as TypeError (a wrong type); every other one is a ValueError.
TYPE_ERRORS = {
    "NotAnInteger", "NotASwitch", "OverCapNotAString", "LengthNotAnInteger", "LengthsNotASequence",
    "NotADataProto", "NotATensorDict", "NonTensorNotArray", "EntryLayout", "EntryStack",
    "MetaInfoNotCopyable", "ProtoRaggedStack", "LossWeightNotTensor", "LossWeightKeysNotKeys",
}


def expected_type(error: PlanError) -> type[Exception]:
    return TypeError if type(error).__name__ in TYPE_ERRORS else ValueError
