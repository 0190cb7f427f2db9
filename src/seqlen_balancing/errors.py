"""Planning errors as data, so that one rank's error can be agreed on by every DP rank.

A :class:`PlanError` is a code plus a few non-negative integers. The message is built from
those alone (and the DP group rank and global rank at fault, which every rank of the group
knows), so a rank that only learns them through a collective raises exactly the same
exception, with the same text, as the rank at fault.

Integers are reported exactly: any value in ``0..MAX_ERROR_VALUE - 1`` (``2**76 - 2``, well
beyond int64) is carried whole through the agreement; a value outside that range is stored
as :data:`OUT_OF_RANGE` and the message says "out of range" instead of a clipped number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "MAX_DUMMY_MICRO_BATCHES",
    "MAX_ERROR_VALUE",
    "N_ERROR_VALUES",
    "OUT_OF_RANGE",
    "Argument",
    "BatchProblem",
    "ErrorCode",
    "LengthSource",
    "PlanError",
    "key_values",
    "over_cap_kind",
]

#: Number of integers a :class:`PlanError` carries (the width of its slot in the agreement).
N_ERROR_VALUES = 8

#: Largest integer an error value may hold (76 bits: two 38-bit halves in the agreement).
MAX_ERROR_VALUE = (1 << 76) - 1

#: The value stored for an integer outside ``-1..MAX_ERROR_VALUE - 1``: "out of range".
OUT_OF_RANGE = MAX_ERROR_VALUE


class ErrorCode(IntEnum):
    """Why a rank cannot plan. The numeric values are part of the agreement encoding."""

    # (argument, 0 = wrong type / 1 = below 1 / 2 = missing, -value), or
    # (MICRO_BATCH_MULTIPLE_OF, 3 = above the cap, bucket, cap), or
    # (PAD_TO_MULTIPLE_OF / MICRO_BATCH_MULTIPLE_OF / COSTS, 4 = given on the static path,
    #  value + 1 or 0 when it is not shown), or
    # (MAX_SAMPLES_PER_MICRO_BATCH, 5 = below force_group_size, limit, force_group_size), or
    # (PADDED / MAX_SAMPLES_PER_MICRO_BATCH, 6 = not with, 0 = over_cap alone / 1 = dummies)
    BAD_ARGUMENT = 1
    BAD_BATCH = 2  # (BatchProblem, a, b)
    # (index, 0 = not an integer / 1 = negative, -value, LengthSource), or
    # (number of costs, 2 = not one per sample, samples, LengthSource.COSTS), or
    # (0, 3 = not a sequence / 4 = not one-dimensional, 0, LengthSource)
    BAD_LENGTH = 3
    EMPTY_BATCH = 4  # ()
    NOT_DIVISIBLE = 5  # (batch size, force_group_size)
    # (tokens, index, cap, count over cap, largest cost in the DP group, cost,
    #  micro_batch_multiple_of (0/1: none), how the cost is made (over_cap_kind): 0 = the
    #  tokens, else p << 1 | given costs, p the alignment); 5 values: the cost is the tokens
    SAMPLE_OVER_CAP = 6
    GROUP_OVER_CAP = 7  # as SAMPLE_OVER_CAP, for the group starting at sample ``index``
    MIN_ABOVE_GROUPS = 8  # (min_num_micro_batch, groups)
    COUNT_ABOVE_GROUPS = 9  # (agreed count, groups, count before rounding, rank needing it)
    DIVISOR_MISMATCH = 10  # (smallest num_batches_divided_by, largest)
    MODE_MISMATCH = 11  # (a static rank, a dynamic rank, their global ranks + 1)
    STATIC_NOT_DIVISIBLE = 12  # (batch size, micro_batch_size_per_gpu, force_group_size)
    STATIC_COUNT_MISMATCH = 13  # (rank, count, rank, count, global ranks + 1): largest, smallest
    NOT_IN_GROUP = 14  # (global rank, group size): never agreed (the process is not a member)
    # padded=True (issue 26): (tokens of the widest row, index, cap, count over cap, largest
    # cost in the DP group, cost = rows x width, micro_batch_multiple_of (0/1: none),
    # 2 * pad_to_multiple_of + (1 when the widths are the costs given))
    PADDED_SAMPLE_OVER_CAP = 20
    PADDED_GROUP_OVER_CAP = 21  # as PADDED_SAMPLE_OVER_CAP, for the group starting at ``index``
    # issue 27 (codes 25-29)
    BAD_OVER_CAP = 25  # (0 = not a str / 1 = neither "raise" nor "alone")
    TOO_MANY_DUMMIES = 26  # (dummies needed, groups, MAX_DUMMY_MICRO_BATCHES, count)
    # (0 = a named key absent / 1 = no default key in the batch / 2 = the entry is not a
    #  tensor / 3 = loss_weight_keys not a key or list of keys, key bytes x4)
    NO_LOSS_WEIGHT = 27


class Argument(IntEnum):
    """Which scalar argument a BAD_ARGUMENT error is about."""

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
    COSTS = 13  # the per-sample costs (issue 25: only in "given on the static path")
    # (MAX_SAMPLES_PER_MICRO_BATCH, 5 = below force_group_size, limit, force_group_size)
    MAX_SAMPLES_PER_MICRO_BATCH = 20
    PADDED = 21
    # issue 27 (30-39)
    DUMMY_MICRO_BATCHES = 30


class LengthSource(IntEnum):
    """Which per-sample list a BAD_LENGTH error is about."""

    SEQ_LENS = 0  # the effective lengths
    COSTS = 1  # the caller's costs
    WORKLOADS = 2  # the caller's workloads (the balance objective)


#: Arguments that are switches: a bool (or 0/1), not a positive integer.
_SWITCHES = (Argument.USE_DYNAMIC_BSZ, Argument.SAME_MICRO_NUM_IN_DP, Argument.USE_DYNAMIC_BSZ_BALANCE,
             Argument.PADDED, Argument.DUMMY_MICRO_BATCHES)

#: Most dummy micro-batches one rank adds (``dummy_micro_batches=True``): a larger need is
#: a ``TOO_MANY_DUMMIES`` error, so no argument makes a rank copy rows without bound.
MAX_DUMMY_MICRO_BATCHES = 1 << 16



class BatchProblem(IntEnum):
    """Which structural problem a BAD_BATCH error is about."""

    NO_LENGTH_SOURCE = 0  # neither attention_mask nor jagged input_ids
    MASK_NOT_2D = 1  # (ndim, -)
    MASK_ROWS = 2  # (mask rows, batch size)
    UNREADABLE = 3  # reading the lengths raised (the rank at fault chains the cause)
    NOT_DATAPROTO = 4  # prepare_dynamic_batch got an object without batch/non_tensor_batch/...
    NON_TENSOR_ROWS = 5  # (rows of a non_tensor_batch array, batch size)
    NOT_TENSORDICT = 6  # the batch is not a TensorDict with a batch dimension (TypeError)
    NON_TENSOR_NOT_ARRAY = 7  # a non_tensor_batch entry is not a NumPy array (TypeError)
    ENTRY_ON_META = 8  # (key bytes, see key_values): an entry to cut is on the meta device
    ENTRY_UNREADABLE = 9  # (key bytes): reading an entry to cut raised (cause chained)
    ENTRY_LAYOUT = 10  # (key bytes): a tensor layout whose rows cannot be picked (TypeError)
    ENTRY_STACK = 11  # (key bytes): a lazy stack that cannot be cut along dim 0 (TypeError)
    META_INFO_NOT_COPYABLE = 12  # a DataProto's meta_info cannot be deep-copied (TypeError)
    PROTO_RAGGED_STACK = 13  # (key bytes): a DataProto's lazy-stacked batch, rows of other shapes
    PADDED_LAZY_STACK = 20  # padded=True on a lazy stack cut by rows: no common width to cut (issue 26)


#: BAD_BATCH problems that are wrong types (raised as TypeError).
_TYPE_PROBLEMS = (BatchProblem.NOT_TENSORDICT, BatchProblem.NOT_DATAPROTO,
                  BatchProblem.NON_TENSOR_NOT_ARRAY, BatchProblem.ENTRY_LAYOUT,
                  BatchProblem.ENTRY_STACK, BatchProblem.META_INFO_NOT_COPYABLE,
                  BatchProblem.PROTO_RAGGED_STACK)


#: Bytes of an entry's key carried in an error (4 values of 9 bytes each, 72 bits).
_KEY_CHUNK = 9
_KEY_BYTES = 4 * _KEY_CHUNK


def key_values(key: str | tuple[str, ...]) -> tuple[int, int, int, int]:
    """A TensorDict key (nested keys joined by ``.``) as 4 error values, so that every rank
    names the same entry: its UTF-8 bytes, shortened to 33 bytes plus ``...`` when longer
    than 36."""
    text = key if isinstance(key, str) else ".".join(str(part) for part in key)
    raw = text.encode("utf-8", errors="replace")
    if len(raw) > _KEY_BYTES:
        raw = raw[: _KEY_BYTES - 3] + b"..."
    raw = raw.ljust(_KEY_BYTES, b"\0")
    chunks = (raw[i : i + _KEY_CHUNK] for i in range(0, _KEY_BYTES, _KEY_CHUNK))
    a, b, c, d = (int.from_bytes(chunk, "big") for chunk in chunks)
    return a, b, c, d


def _key_text(values: tuple[int, ...]) -> str:
    """The key :func:`key_values` encoded (a cut multi-byte character is dropped)."""
    raw = b"".join(v.to_bytes(_KEY_CHUNK, "big") if v < 1 << 72 else b"" for v in values)
    return raw.rstrip(b"\0").decode("utf-8", errors="ignore")


def _n(value: int) -> str:
    """An integer as given, or "out of range" for :data:`OUT_OF_RANGE`."""
    return "out of range" if value == OUT_OF_RANGE else str(value)


def _rank(group_rank: int, global_plus_one: int) -> str:
    """``rank R`` or ``rank R (global rank G)`` when the global rank is known (stored + 1)."""
    if global_plus_one:
        return f"rank {group_rank} (global rank {global_plus_one - 1})"
    return f"rank {group_rank}"


def _bad_argument(v: tuple[int, ...]) -> str:
    argument = Argument(v[0])
    name = argument.name.lower()
    if v[1] == 6:
        other = ("over_cap='alone'", "dummy_micro_batches=True")[v[2]] if v[2] in (0, 1) else "another option"
        return (
            f"{name} cannot be combined with {other} in this release: the planner for it does "
            "not model that option, and a setting is never silently ignored; drop one of the two"
        )
    if argument in _SWITCHES:
        return f"{name} must be a bool (or 0/1), got a value that is not"
    if v[1] == 5:
        return (
            f"max_samples_per_micro_batch={_n(v[2])} is below force_group_size={_n(v[3])}: a "
            "forced group shares one micro-batch, so none could hold it; raise "
            f"max_samples_per_micro_batch to at least {_n(v[3])} or lower force_group_size"
        )
    if v[1] == 3:
        needed = max(v[2], v[4])  # the bucket, or the costliest group rounded up to it
        return (
            f"micro_batch_multiple_of={_n(v[2])} is larger than max_token_len={_n(v[3])}: every "
            "micro-batch is rounded up to at least one bucket, so none fits; raise "
            f"max_token_len {_at_least(needed)} or lower micro_batch_multiple_of"
        )
    if v[1] == 4:
        given = f"{name}={_n(v[2] - 1)}" if v[2] and v[2] != OUT_OF_RANGE else name
        return (
            f"{given} applies to the dynamic path (use_dynamic_bsz=True) only: the static path "
            "cuts chunks of micro_batch_size_per_gpu samples and has no cap for it to change; "
            f"drop {name} or set use_dynamic_bsz"
        )
    if v[1] == 2:
        return (
            f"the batch has no {name!r} setting; store it in the TensorDict (verl's "
            "prepare_micro_batches reads its settings from the batch)"
        )
    if v[1] == 0:
        return f"{name} must be a positive integer, got a value that is not an integer"
    if v[2] == OUT_OF_RANGE:
        return f"{name} must be a positive integer (>= 1), got a negative value out of range"
    return f"{name} must be a positive integer (>= 1), got {-v[2]}"


def _bad_batch(v: tuple[int, ...]) -> str:
    problem = BatchProblem(v[0])
    if problem is BatchProblem.NO_LENGTH_SOURCE:
        return (
            "the batch has neither an 'attention_mask' nor jagged (nested) 'input_ids', so "
            "the effective sequence lengths cannot be read; add one of them"
        )
    if problem is BatchProblem.UNREADABLE:
        return (
            "the effective lengths could not be read from the batch; pass a TensorDict with "
            "batch size (n,) and a 2-D attention_mask or jagged input_ids"
        )
    if problem is BatchProblem.NOT_DATAPROTO:
        return (
            "data must be DataProto-like: .batch (a TensorDict), .non_tensor_batch (dict of "
            "arrays), .meta_info (dict) and a from_dict classmethod"
        )
    if problem is BatchProblem.NON_TENSOR_ROWS:
        return (
            f"a non_tensor_batch array has {_n(v[1])} rows but the batch has {_n(v[2])} samples; "
            "give every non-tensor entry one row per sample"
        )
    if problem is BatchProblem.NOT_TENSORDICT:
        return (
            "batch must be a TensorDict with a batch dimension (batch_size (n,)), got an object "
            "that is not; pass the TensorDict of this rank's samples"
        )
    if problem is BatchProblem.NON_TENSOR_NOT_ARRAY:
        return (
            "every non_tensor_batch entry must be a NumPy array with one row per sample (as "
            "verl's DataProto holds), got one that is not; convert it with numpy.asarray"
        )
    if problem is BatchProblem.ENTRY_ON_META:
        return (
            f"entry '{_key_text(v[1:5])}' is on the meta device, which holds no data, so its "
            "rows cannot be cut into micro-batches; move it to a real device or drop it"
        )
    if problem is BatchProblem.ENTRY_UNREADABLE:
        return (
            f"entry '{_key_text(v[1:5])}' could not be read to cut it into micro-batches (its "
            "row offsets); pass a readable nested tensor or drop the entry"
        )
    if problem is BatchProblem.ENTRY_LAYOUT:
        return (
            f"entry '{_key_text(v[1:5])}' has a tensor layout whose rows cannot be picked for "
            "micro-batches (block-sparse BSR/BSC, CSR/CSC with batch or dense dimensions, "
            "mkldnn); store it dense, as sparse COO (.to_sparse_coo()) or as a 2-D CSR/CSC tensor"
        )
    if problem is BatchProblem.ENTRY_STACK:
        return (
            f"entry '{_key_text(v[1:5])}' is a lazy stack along a dimension other than the batch "
            "dimension whose entries differ in shape (or are not dense tensors), so it cannot be "
            "cut by rows; stack its rows along dim 0, or make its entries dense or nested tensors"
        )
    if problem is BatchProblem.META_INFO_NOT_COPYABLE:
        return (
            "meta_info cannot be deep-copied, and every micro-batch gets its own deep copy (as "
            "verl's prepare_dynamic_batch gives it); drop or replace the entry that cannot be copied"
        )
    if problem is BatchProblem.PROTO_RAGGED_STACK:
        return (
            f"entry '{_key_text(v[1:5])}' of data.batch is a lazy stack whose rows differ in "
            "shape, and from_dict takes one tensor per key; store it as a nested tensor "
            "(torch.nested.as_nested_tensor(rows, layout=torch.jagged)) or pad it"
        )
    if problem is BatchProblem.PADDED_LAZY_STACK:
        return (
            "padded=True cuts every micro-batch to its width, but the batch is a lazy stack "
            "along dim 0 (its rows may differ in width); stack it into one TensorDict "
            "(.contiguous()) or plan without padded"
        )
    if problem is BatchProblem.MASK_NOT_2D:
        return f"attention_mask must be 2-D (batch, seq_len), got a {v[1]}-D tensor"
    return (
        f"attention_mask has {_n(v[1])} rows but the batch has {_n(v[2])} samples; "
        "they must match"
    )


_LENGTH_NAMES = {
    LengthSource.SEQ_LENS: ("seq_lens", "lengths", "length"),
    LengthSource.COSTS: ("costs", "costs", "cost"),
    LengthSource.WORKLOADS: ("workloads", "workloads", "workload"),
}


def _bad_length(v: tuple[int, ...]) -> str:
    source = LengthSource(v[3]) if v[3] in set(LengthSource) else LengthSource.SEQ_LENS
    name, what, one = _LENGTH_NAMES[source]
    if v[1] == 2:
        return (
            f"{name} has {_n(v[0])} entries but the batch has {_n(v[2])} samples; give one {one} "
            "per sample"
        )
    words, unit = ("", "") if source is LengthSource.WORKLOADS else (" of tokens", " tokens")
    if v[1] == 3:
        return (
            f"{name} must be a sequence of whole numbers{words}, one per sample (a list, a "
            "tuple, a 1-D tensor or array), got something that is not"
        )
    if v[1] == 4:
        return f"{name} must be one-dimensional (one value per sample), got another shape"
    if v[1] == 0:
        return f"{name}[{_n(v[0])}] is not an integer; {what} are whole numbers{words}"
    if v[2] == OUT_OF_RANGE:
        return f"{name}[{_n(v[0])}] is negative and out of range; {what} must be >= 0{unit}"
    return f"{name}[{_n(v[0])}] is {-v[2]}; {what} must be >= 0{unit}"


def _round_up(value: int, multiple: int) -> int:
    return value if value == OUT_OF_RANGE or multiple <= 1 else -(-value // multiple) * multiple


def _at_least(value: int) -> str:
    """``to at least N``, or the words for a value beyond what the agreement carries."""
    if value == OUT_OF_RANGE:
        return "beyond 2**62 tokens"
    return f"to at least {value}"


def over_cap_kind(pad_to_multiple_of: int, custom_costs: bool) -> int:
    """The 8th value of an over-cap error: how the sample's cost was formed. 0: its
    effective length; else ``pad_to_multiple_of << 1 | custom_costs`` (a given cost, an
    aligned length, or a given cost aligned).

    Example:
        >>> over_cap_kind(1, False), over_cap_kind(1, True), over_cap_kind(8, False), over_cap_kind(8, True)
        (0, 3, 16, 17)
    """
    if pad_to_multiple_of <= 1 and not custom_costs:
        return 0
    return max(pad_to_multiple_of, 1) << 1 | int(custom_costs)


def _over_cap(v: tuple[int, ...], what: str, unit: str) -> str:
    length, index, cap, count = (_n(x) for x in v[:4])
    largest_cost, cost, bucket, kind = v[4], v[5], max(v[6], 1), v[7]
    over = f"{count} {unit}{'s' if count != '1' else ''} over the cap in this batch"
    longest = f"the longest {unit} of the call, on every DP rank of the group when they agree"
    if kind == 0 and bucket == 1:  # the cost is the effective length: the plain words
        return (
            f"{what} {index} has {length} tokens, which exceeds max_token_len={cap} ({over}); "
            f"raise max_token_len {_at_least(largest_cost)} ({longest}) or truncate the "
            "sequences"
        )
    pad, custom = (1, False) if kind == 0 or kind == OUT_OF_RANGE else (kind >> 1, bool(kind & 1))
    if not custom and pad == 1:
        costs, lower = "", "lower micro_batch_multiple_of"
    elif custom and pad == 1:
        costs, lower = f" and costs {_n(cost)} tokens (the costs given)", "lower the costs"
    elif custom:
        costs = (
            f" and costs {_n(cost)} tokens (the cost given, rounded up to a multiple of "
            f"pad_to_multiple_of={pad})"
        )
        lower = "lower the costs or the alignment"
    else:
        costs = f" and costs {_n(cost)} tokens aligned to a multiple of pad_to_multiple_of={pad}"
        lower = "lower the alignment"
    usable = ""
    if bucket > 1:
        usable_cap = _n(v[2] // bucket * bucket) if v[2] != OUT_OF_RANGE else "out of range"
        usable = (
            f", usable as {usable_cap} tokens since each micro-batch is rounded up to a multiple "
            f"of micro_batch_multiple_of={bucket}"
        )
    needed = largest_cost if largest_cost == OUT_OF_RANGE else _round_up(largest_cost, bucket)
    return (
        f"{what} {index} has {length} tokens{costs}, which exceeds max_token_len={cap}{usable} "
        f"({over}); raise max_token_len {_at_least(needed)} ({longest}, in aligned tokens), "
        f"{lower} or truncate the sequences"
    )


def _padded_over_cap(v: tuple[int, ...], what: str, unit: str) -> str:
    """An over-cap message under ``padded=True``: the row's tokens, the width it is padded
    to, the rows and the footprint (rows x width), the cap and the advice."""
    index, cap, count = (_n(x) for x in v[1:4])
    largest_cost, cost, bucket = v[4], v[5], max(v[6], 1)
    pad, given = max(v[7] // 2, 1), v[7] % 2
    width = v[0] if v[0] == OUT_OF_RANGE else _round_up(v[0], pad)
    rows = "out of range" if OUT_OF_RANGE in (cost, width) or width == 0 else str(cost // width)
    over = f"{count} {unit}{'s' if count != '1' else ''} over the cap in this batch"
    longest = f"the costliest {unit} of the call, on every DP rank of the group when they agree"
    source = " (the costs given)" if given else ""
    aligned = f", each row rounded up to pad_to_multiple_of={pad}" if pad > 1 else ""
    usable = ""
    if bucket > 1:
        usable_cap = _n(v[2] // bucket * bucket) if v[2] != OUT_OF_RANGE else "out of range"
        usable = (
            f", usable as {usable_cap} since each footprint is rounded up to a multiple of "
            f"micro_batch_multiple_of={bucket}"
        )
    needed = largest_cost if largest_cost == OUT_OF_RANGE else _round_up(largest_cost, bucket)
    has = f"has {_n(v[0])} tokens" if unit == "sample" else f"has a widest row of {_n(v[0])} tokens"
    return (
        f"{what} {index} {has}{source}; padded=True holds it as {rows} "
        f"row{'s' if rows != '1' else ''} x {_n(width)} wide = {_n(cost)} token positions (a "
        f"micro-batch costs rows x its widest row{aligned}), which exceeds max_token_len={cap}"
        f"{usable} ({over}); raise max_token_len {_at_least(needed)} ({longest}), "
        f"{'lower force_group_size ' if unit == 'group' else ''}or truncate the sequences"
    )


def _count_above_groups(v: tuple[int, ...]) -> str:
    needing = f"{_rank(v[3], v[4])} needs {_n(v[2])}" if v[3] >= 0 else f"the cap needs {_n(v[2])}"
    rounded = f", rounded up to {_n(v[0])} for num_batches_divided_by" if v[0] != v[2] else ""
    return (
        "Cannot satisfy max_token_len while keeping forced groups atomic: "
        f"{_n(v[0])} micro-batches are needed but only {_n(v[1])} samples/groups are available "
        f"and a micro-batch cannot be empty ({needing}{rounded}); raise max_token_len, lower "
        "num_batches_divided_by or min_num_micro_batch, or pass more samples"
    )


def _no_loss_weight(v: tuple[int, ...]) -> str:
    if v[0] == 2:
        return (
            f"loss-weight entry '{_key_text(v[1:5])}' is not a tensor, so the dummy "
            "micro-batches cannot zero it; name tensor entries in loss_weight_keys"
        )
    if v[0] == 3:
        return (
            "loss_weight_keys must be a key (a string) or a list of keys, got a value that is "
            "not; e.g. loss_weight_keys=('loss_mask',)"
        )
    if v[0] == 0:
        return (
            f"loss-weight key '{_key_text(v[1:5])}' named for the dummy micro-batches is not in "
            "the batch; name keys the batch holds (loss_weight_keys) or add the entry"
        )
    return (
        "dummy_micro_batches=True needs a loss-weight entry to zero in the dummies, but the "
        "batch has neither 'loss_mask' nor 'response_mask'; add one, or name the keys with "
        "loss_weight_keys"
    )


_MESSAGES: dict[ErrorCode, Callable[[tuple[int, ...]], str]] = {
    ErrorCode.BAD_ARGUMENT: _bad_argument,
    ErrorCode.BAD_BATCH: _bad_batch,
    ErrorCode.BAD_LENGTH: _bad_length,
    ErrorCode.EMPTY_BATCH: lambda v: "the batch has no samples; pass at least one row",
    ErrorCode.NOT_DIVISIBLE: lambda v: (
        f"batch size {_n(v[0])} is not divisible by force_group_size={_n(v[1])}; every forced "
        "group needs all its samples"
    ),
    ErrorCode.SAMPLE_OVER_CAP: lambda v: _over_cap(v, "sample", "sample"),
    ErrorCode.GROUP_OVER_CAP: lambda v: (
        "forced group exceeds max_token_len: " + _over_cap(v, "the group starting at sample",
                                                           "group")
    ),
    ErrorCode.PADDED_SAMPLE_OVER_CAP: lambda v: _padded_over_cap(v, "sample", "sample"),
    ErrorCode.PADDED_GROUP_OVER_CAP: lambda v: (
        "forced group exceeds max_token_len: "
        + _padded_over_cap(v, "the group starting at sample", "group")
    ),
    ErrorCode.MIN_ABOVE_GROUPS: lambda v: (
        f"min_num_micro_batch={_n(v[0])} asks for more micro-batches than the {_n(v[1])} "
        "samples/groups available (a micro-batch cannot be empty); lower min_num_micro_batch"
    ),
    ErrorCode.DIVISOR_MISMATCH: lambda v: (
        f"the ranks passed different num_batches_divided_by (from {_n(v[0])} to {_n(v[1])}), "
        "so no count suits them all; pass the same value on every rank"
    ),
    ErrorCode.COUNT_ABOVE_GROUPS: _count_above_groups,
    ErrorCode.MODE_MISMATCH: lambda v: (
        f"the ranks of the DP group disagree on use_dynamic_bsz: {_rank(v[0], v[2])} cuts its "
        f"batch statically (use_dynamic_bsz=False) but {_rank(v[1], v[3])} dynamically; store "
        "the same use_dynamic_bsz in every rank's batch"
    ),
    ErrorCode.STATIC_NOT_DIVISIBLE: lambda v: (
        f"batch size {_n(v[0])} is not a positive multiple of micro_batch_size_per_gpu * "
        f"force_group_size = {_n(v[1])} * {_n(v[2])}; change micro_batch_size_per_gpu or the "
        "batch size"
    ),
    ErrorCode.STATIC_COUNT_MISMATCH: lambda v: (
        f"the ranks of the DP group would run different numbers of static micro-batches: "
        f"{_rank(v[0], v[4])} has {_n(v[1])} and {_rank(v[2], v[5])} has {_n(v[3])}; give every "
        "rank the same batch size (use_dynamic_bsz=False cuts batch size / "
        "(micro_batch_size_per_gpu * force_group_size) micro-batches)"
    ),
    ErrorCode.NOT_IN_GROUP: lambda v: (
        f"this process (global rank {_n(v[0])}) is not a member of dp_group (a group of "
        f"{_n(v[1])} ranks), so it cannot take part in that group's agreement; pass the DP "
        "group this process belongs to, or dp_group=None to plan locally"
    ),
    ErrorCode.BAD_OVER_CAP: lambda v: (
        "over_cap must be 'raise' or 'alone', got "
        + ("a value that is not a string" if v[0] == 0 else "another string")
    ),
    ErrorCode.TOO_MANY_DUMMIES: lambda v: (
        f"{_n(v[3])} micro-batches would need {_n(v[0])} dummy micro-batches on a rank of "
        f"{_n(v[1])} samples/groups, more than the {_n(v[2])} allowed; lower "
        "min_num_micro_batch or num_batches_divided_by"
    ),
    ErrorCode.NO_LOSS_WEIGHT: _no_loss_weight,
}


@dataclass(frozen=True)
class PlanError:
    """A reason a rank cannot plan: a code, a few integers, and the rank at fault.

    The integers are non-negative, except ``-1`` in ``COUNT_ABOVE_GROUPS``'s rank slot (no
    rank); one outside ``-1..MAX_ERROR_VALUE - 1`` is stored as :data:`OUT_OF_RANGE`, never
    clipped. ``message`` and ``exception`` depend on nothing else, so every rank that holds
    the same error raises the same exception.

    Message format (what a test oracle can rebuild): the text of the code, then
    ``" (detail)"`` when ``detail`` is set (local calls only: the agreement does not carry
    it), prefixed with ``"rank R of the DP group (global rank G): "`` when the DP group rank
    ``R`` and global rank ``G`` at fault are known, or ``"rank R of the DP group: "`` when
    only ``R`` is (:func:`~seqlen_balancing.plan_data_parallel`).
    """

    code: ErrorCode
    values: tuple[int, ...] = ()
    #: Extra local detail (e.g. the repr of a wrong-typed value). Not sent in the
    #: agreement, so the collective path leaves it empty on every rank.
    detail: str = ""
    #: DP group rank at fault (named in the message), or ``None``.
    rank: int | None = None
    #: Global rank of that process, or ``None`` when unknown.
    global_rank: int | None = None

    def __post_init__(self) -> None:
        values = tuple(
            value if -1 <= value < MAX_ERROR_VALUE else OUT_OF_RANGE for value in self.values
        )
        object.__setattr__(self, "values", values)

    def padded(self) -> tuple[int, ...]:
        """The values padded with zeros to :data:`N_ERROR_VALUES` entries."""
        return self.values + (0,) * (N_ERROR_VALUES - len(self.values))

    def message(self, rank: int | None = None) -> str:
        """Human-readable message; the DP rank at fault (``rank``, else ``self.rank``) and
        its global rank (``self.global_rank``) are named when known."""
        text = _MESSAGES[self.code](self.padded())
        if self.detail:
            text = f"{text} ({self.detail})"
        if rank is None:
            rank = self.rank
        if rank is None:
            return text
        if self.global_rank is None:
            return f"rank {rank} of the DP group: {text}"
        return f"rank {rank} of the DP group (global rank {self.global_rank}): {text}"

    def is_type_error(self) -> bool:
        """True when the error is about a wrong type (raised as ``TypeError``)."""
        v = self.padded()
        if self.code is ErrorCode.BAD_LENGTH:
            return v[1] in (0, 3)  # an element, or the whole, of a wrong type
        if self.code is ErrorCode.BAD_ARGUMENT:
            return v[1] == 0
        if self.code is ErrorCode.BAD_OVER_CAP:
            return v[0] == 0
        if self.code is ErrorCode.NO_LOSS_WEIGHT:
            return v[0] in (2, 3)
        return self.code is ErrorCode.BAD_BATCH and v[0] in _TYPE_PROBLEMS

    def exception(self, rank: int | None = None) -> Exception:
        """The exception to raise: ``TypeError`` for a wrong type, else ``ValueError``."""
        return (TypeError if self.is_type_error() else ValueError)(self.message(rank))
