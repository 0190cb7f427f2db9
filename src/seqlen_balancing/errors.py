"""Planning errors as data, so that one rank's error can be agreed on by every DP rank.

A :class:`PlanError` is a code plus a few non-negative integers. The message is built from
those alone, so a rank that only learns the code and the integers through a collective
raises exactly the same exception, with the same text, as the rank at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

__all__ = ["N_ERROR_VALUES", "Argument", "BatchProblem", "ErrorCode", "PlanError"]

#: Number of integers a :class:`PlanError` carries (the width of its slot in the agreement).
N_ERROR_VALUES = 5


class ErrorCode(IntEnum):
    """Why a rank cannot plan. The numeric values are part of the agreement encoding."""

    BAD_ARGUMENT = 1  # (argument, 0 = wrong type / 1 = below 1 / 2 = missing, -value)
    BAD_BATCH = 2  # (BatchProblem, a, b)
    BAD_LENGTH = 3  # (index, 0 = not an integer / 1 = negative, -value)
    EMPTY_BATCH = 4  # ()
    NOT_DIVISIBLE = 5  # (batch size, force_group_size)
    SAMPLE_OVER_CAP = 6  # (length, index, cap, count over cap, largest length)
    GROUP_OVER_CAP = 7  # (group tokens, first sample index, cap, groups over cap, largest)
    MIN_ABOVE_GROUPS = 8  # (min_num_micro_batch, groups)
    COUNT_ABOVE_GROUPS = 9  # (agreed count, groups, count before rounding, rank needing it)
    DIVISOR_MISMATCH = 10  # (smallest num_batches_divided_by, largest)


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


class BatchProblem(IntEnum):
    """Which structural problem a BAD_BATCH error is about."""

    NO_LENGTH_SOURCE = 0  # neither attention_mask nor jagged input_ids
    MASK_NOT_2D = 1  # (ndim, -)
    MASK_ROWS = 2  # (mask rows, batch size)
    UNREADABLE = 3  # reading the lengths raised (the rank at fault chains the cause)
    NOT_DATAPROTO = 4  # prepare_dynamic_batch got an object without batch/non_tensor_batch/...
    NON_TENSOR_ROWS = 5  # (rows of a non_tensor_batch array, batch size)


def _bad_argument(v: tuple[int, ...]) -> str:
    argument = Argument(v[0])
    name = argument.name.lower()
    if argument is Argument.USE_DYNAMIC_BSZ:
        return "use_dynamic_bsz must be a bool (or 0/1), got a value that is not"
    if v[1] == 2:
        return (
            f"the batch has no {name!r} setting; store it in the TensorDict (verl's "
            "prepare_micro_batches reads its settings from the batch)"
        )
    if v[1] == 0:
        return f"{name} must be a positive integer, got a value that is not an integer"
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
            f"a non_tensor_batch array has {v[1]} rows but the batch has {v[2]} samples; "
            "give every non-tensor entry one row per sample"
        )
    if problem is BatchProblem.MASK_NOT_2D:
        return f"attention_mask must be 2-D (batch, seq_len), got a {v[1]}-D tensor"
    return (
        f"attention_mask has {v[1]} rows but the batch has {v[2]} samples; "
        "they must match"
    )


def _bad_length(v: tuple[int, ...]) -> str:
    if v[1] == 0:
        return f"seq_lens[{v[0]}] is not an integer; lengths are whole numbers of tokens"
    return f"seq_lens[{v[0]}] is {-v[2]}; lengths must be >= 0 tokens"


def _over_cap(v: tuple[int, ...], what: str, unit: str) -> str:
    length, index, cap, count, largest = v
    return (
        f"{what} {index} has {length} tokens, which exceeds max_token_len={cap} "
        f"({count} {unit}{'s' if count != 1 else ''} over the cap, the largest {largest} "
        f"tokens); raise max_token_len to at least {largest} or truncate the sequences"
    )


_MESSAGES: dict[ErrorCode, Callable[[tuple[int, ...]], str]] = {
    ErrorCode.BAD_ARGUMENT: _bad_argument,
    ErrorCode.BAD_BATCH: _bad_batch,
    ErrorCode.BAD_LENGTH: _bad_length,
    ErrorCode.EMPTY_BATCH: lambda v: "the batch has no samples; pass at least one row",
    ErrorCode.NOT_DIVISIBLE: lambda v: (
        f"batch size {v[0]} is not divisible by force_group_size={v[1]}; every forced "
        "group needs all its samples"
    ),
    ErrorCode.SAMPLE_OVER_CAP: lambda v: _over_cap(v, "sample", "sample"),
    ErrorCode.GROUP_OVER_CAP: lambda v: (
        "forced group exceeds max_token_len: " + _over_cap(v, "the group starting at sample",
                                                           "group")
    ),
    ErrorCode.MIN_ABOVE_GROUPS: lambda v: (
        f"min_num_micro_batch={v[0]} asks for more micro-batches than the {v[1]} "
        "samples/groups available (a micro-batch cannot be empty); lower min_num_micro_batch"
    ),
    ErrorCode.DIVISOR_MISMATCH: lambda v: (
        f"the ranks passed different num_batches_divided_by (from {v[0]} to {v[1]}), so no "
        "count suits them all; pass the same value on every rank"
    ),
    ErrorCode.COUNT_ABOVE_GROUPS: lambda v: (
        f"{v[0]} micro-batches are needed but only {v[1]} samples/groups are available and "
        "a micro-batch cannot be empty ("
        + (f"rank {v[3]} needs {v[2]}" if v[3] >= 0 else f"the cap needs {v[2]}")
        + (f", rounded up to {v[0]} for num_batches_divided_by" if v[0] != v[2] else "")
        + "); raise max_token_len, lower num_batches_divided_by or min_num_micro_batch, "
        "or pass more samples"
    ),
}


@dataclass(frozen=True)
class PlanError:
    """A reason a rank cannot plan: a code and up to :data:`N_ERROR_VALUES` integers.

    The integers are non-negative except in ``COUNT_ABOVE_GROUPS``'s last slot (-1: no
    rank). ``message`` and ``exception`` depend on nothing else, so every rank that holds
    the same error raises the same exception.
    """

    code: ErrorCode
    values: tuple[int, ...] = ()
    #: Extra local detail (e.g. the repr of a wrong-typed value). Not sent in the
    #: agreement, so the collective path leaves it empty on every rank.
    detail: str = ""

    def padded(self) -> tuple[int, ...]:
        """The values padded with zeros to :data:`N_ERROR_VALUES` entries."""
        return self.values + (0,) * (N_ERROR_VALUES - len(self.values))

    def message(self, rank: int | None = None) -> str:
        """Human-readable message; ``rank`` (DP rank at fault) is named when given."""
        text = _MESSAGES[self.code](self.padded())
        if self.detail:
            text = f"{text} ({self.detail})"
        return text if rank is None else f"rank {rank} of the DP group: {text}"

    def exception(self, rank: int | None = None) -> Exception:
        """The exception to raise: ``TypeError`` for a wrong type, else ``ValueError``."""
        wrong_type = self.code in (ErrorCode.BAD_ARGUMENT, ErrorCode.BAD_LENGTH) and (
            self.padded()[1] == 0
        )
        return (TypeError if wrong_type else ValueError)(self.message(rank))
