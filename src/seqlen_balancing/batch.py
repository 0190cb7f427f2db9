"""TensorDict / DataProto glue: read effective lengths, cut micro-batches, restore order.

The plan itself comes from :mod:`seqlen_balancing.planner` (pure Python); this module reads
the lengths from tensors (one device-to-host copy), takes part in the DP agreement, and
indexes the batch.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from seqlen_balancing import distributed
from seqlen_balancing._checks import as_switch, describe, non_negative_ints
from seqlen_balancing.errors import Argument, BatchProblem, ErrorCode, PlanError
from seqlen_balancing.partition import WORKLOAD_LINEAR_COEF, get_reverse_idx
from seqlen_balancing.planner import RankAnalysis, analyse, argument_error, build_plan, local_count

__all__ = [
    "calculate_workload",
    "effective_lengths",
    "prepare_dynamic_batch",
    "prepare_micro_batches",
    "rearrange_micro_batches",
    "restore_dynamic_batch",
]

T = TypeVar("T")


#: Largest length whose workload ``24576*s + s**2`` fits in int64.
_MAX_WORKLOAD_LENGTH = math.isqrt((WORKLOAD_LINEAR_COEF // 2) ** 2 + 2**63 - 1) - (
    WORKLOAD_LINEAR_COEF // 2
)


def calculate_workload(seqlen_list: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """verl's per-sequence cost ``24576*s + s**2`` as an int64 tensor.

    Args:
        seqlen_list: sequence lengths in tokens, shape ``(n,)`` (tensor of any integer
            dtype, or a list).

    Returns:
        int64 tensor of shape ``(n,)``, on the input's device. Computed in int64, so int32
        input never overflows (exact for lengths up to ``2**31``).

    Raises:
        TypeError: floating-point, bool or nested input.
        ValueError: a negative length, or one above ~3.04e9 tokens (int64 overflow).

    Example:
        >>> calculate_workload(torch.tensor([1000], dtype=torch.int32)).tolist()
        [25576000]
    """
    if isinstance(seqlen_list, torch.Tensor) and seqlen_list.is_nested:
        raise TypeError("seqlen_list must be a dense tensor or list of lengths, got a nested tensor")
    try:
        lengths = torch.as_tensor(seqlen_list)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise TypeError(f"seqlen_list must be a tensor or list of integer lengths: {exc}") from None
    if lengths.numel() == 0:
        return torch.zeros(lengths.shape, dtype=torch.int64, device=lengths.device)
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(
            f"seqlen_list must hold integer token counts, got dtype {lengths.dtype}"
        )
    lengths = lengths.to(torch.int64)
    low, high = torch.aminmax(lengths)
    if int(low) < 0:
        raise ValueError("seqlen_list holds a negative length; lengths must be >= 0 tokens")
    if int(high) > _MAX_WORKLOAD_LENGTH:
        raise ValueError(
            f"seqlen_list holds a length of {int(high)} tokens; the workload overflows int64 "
            f"above {_MAX_WORKLOAD_LENGTH} tokens"
        )
    return WORKLOAD_LINEAR_COEF * lengths + lengths * lengths


def _jagged_row_lengths(tensor: torch.Tensor) -> torch.Tensor:
    """Tokens per row of a nested tensor: ``lengths()`` when the rows have holes, else the
    offsets' differences (jagged), else each row's first dimension (strided)."""
    if tensor.layout == torch.jagged:
        holes: torch.Tensor | None = getattr(tensor, "lengths")()  # noqa: B009 (not in stubs)
        if holes is not None:
            return holes
        offsets: torch.Tensor = getattr(tensor, "offsets")()  # noqa: B009
        return offsets.diff()
    return torch.tensor([row.shape[0] for row in tensor.unbind()], dtype=torch.int64)


def _batch_size(batch: Any) -> int:
    size = getattr(batch, "batch_size", None)
    if size is None or len(size) == 0:
        raise TypeError(
            f"batch must be a TensorDict with a batch dimension, got {type(batch).__name__}"
            f" with batch_size={size!r}"
        )
    return int(size[0])


def effective_lengths(batch: TensorDict) -> tuple[PlanError | None, list[int]]:
    """Effective (real) token count of every sample; the padded width never matters.

    Jagged nested ``input_ids``: the length of each row. Otherwise ``attention_mask``:
    the number of non-zero entries in each row (any padding side, holes allowed; bool, int
    or float masks).

    Args:
        batch: a TensorDict with batch size ``(n,)``.

    Returns:
        ``(None, lengths)`` with ``n`` ints, or ``(error, [])`` for a batch whose lengths
        cannot be read (no source, mask not 2-D, mask rows != n). One device-to-host copy
        of the ``n`` lengths, never one per element.

    Raises:
        TypeError: ``batch`` has no batch dimension (not a TensorDict-like object).
    """
    error, lengths, _ = _read_lengths(batch)
    return error, lengths


def _read_lengths(batch: TensorDict) -> tuple[PlanError | None, list[int], list[int] | None]:
    """:func:`effective_lengths`, plus the host offsets of packed jagged ``input_ids``
    (read in the same copy, so cutting needs no second one)."""
    n = _batch_size(batch)
    keys = set(batch.keys())
    ids = batch.get("input_ids") if "input_ids" in keys else None
    if isinstance(ids, torch.Tensor) and ids.is_nested:
        if _is_packed_jagged(ids):
            offsets: list[int] = getattr(ids, "offsets")().tolist()  # noqa: B009
            return None, [b - a for a, b in itertools.pairwise(offsets)], offsets
        lengths = _jagged_row_lengths(ids)
    elif "attention_mask" in keys:
        mask = batch.get("attention_mask")
        if isinstance(mask, NonTensorData):
            mask = mask.data
        if not isinstance(mask, torch.Tensor):
            return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.NO_LENGTH_SOURCE,)), [], None
        if mask.is_nested:
            lengths = torch.stack([(row != 0).sum() for row in mask.unbind()])
        elif mask.dim() != 2:
            return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.MASK_NOT_2D, mask.dim())), [], None
        else:
            if mask.shape[0] != n:
                return PlanError(
                    ErrorCode.BAD_BATCH, (BatchProblem.MASK_ROWS, mask.shape[0], n)
                ), [], None
            return None, _mask_row_counts(mask), None
    else:
        return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.NO_LENGTH_SOURCE,)), [], None
    values: list[int] = lengths.tolist()
    return None, values, None


def _mask_row_counts(mask: torch.Tensor) -> list[int]:
    """Non-zero entries per row of a 2-D mask, with one device-to-host copy.

    ``(mask != 0).sum(-1)`` writes a temporary and reduces bools, which is slow on CPU
    (~80 ms for 2,048 x 6,704). Bool masks are summed as bytes; integer masks are summed
    directly when their values are all 0/1 (checked in the same copy); anything else (float
    masks, other values) takes the exact but slower comparison.
    """
    if mask.numel() == 0:
        return [0] * mask.shape[0]
    if mask.dtype == torch.bool:
        counts: list[int] = mask.view(torch.uint8).sum(dim=-1, dtype=torch.int64).tolist()
        return counts
    if not (mask.dtype.is_floating_point or mask.dtype.is_complex):
        low, high = torch.aminmax(mask)
        bounds = torch.stack([low, high]).to(torch.int64)
        packed: list[int] = torch.cat([mask.sum(dim=-1, dtype=torch.int64), bounds]).tolist()
        if packed[-2] >= 0 and packed[-1] <= 1:
            return packed[:-2]
    exact: list[int] = (mask != 0).sum(dim=-1).tolist()
    return exact


def _is_packed_jagged(tensor: torch.Tensor) -> bool:
    return (
        tensor.layout == torch.jagged
        and getattr(tensor, "lengths")() is None  # noqa: B009 (nested-only API)
        and getattr(tensor, "_ragged_idx", 1) == 1
    )


def _cut(
    batch: TensorDict, plan: list[list[int]], known_offsets: dict[Any, list[int]] | None = None
) -> list[TensorDict]:
    """The micro-batches of ``plan``: one gather of the batch in plan order, then a view each.

    Dense tensors, ``NonTensorStack`` entries and nested TensorDicts are gathered by
    tensordict; scalar ``NonTensorData`` stays as it is. Packed jagged tensors are gathered
    here (tensordict 0.10 cannot index them) from host-side offsets, read once per key
    (or taken from ``known_offsets``), so no device-to-host copy happens per micro-batch.
    When the plan keeps the original order nothing is copied at all.
    """
    order = [i for part in plan for i in part]
    bounds = [0, *itertools.accumulate(len(part) for part in plan)]
    nested = [
        (key, value)
        for key, value in batch.items(include_nested=True, leaves_only=True)
        if isinstance(value, torch.Tensor) and value.is_nested
    ]
    rest = batch.exclude(*(key for key, _ in nested)) if nested else batch
    identity = order == list(range(len(order)))
    permuted = rest if identity else rest[torch.tensor(order, dtype=torch.long)]
    micro_batches = [permuted[start:stop] for start, stop in itertools.pairwise(bounds)]
    for key, tensor in nested:
        if not _is_packed_jagged(tensor):
            rows = tensor.unbind()
            for micro_batch, part in zip(micro_batches, plan, strict=True):
                micro_batch.set(
                    key, torch.nested.as_nested_tensor([rows[i] for i in part], layout=tensor.layout)
                )
            continue
        if known_offsets and key in known_offsets:
            offsets = known_offsets[key]
        else:
            offsets = getattr(tensor, "offsets")().tolist()  # noqa: B009 (one host copy)
        sizes = [offsets[i + 1] - offsets[i] for i in order]
        values = tensor.values()[offsets[0] : offsets[-1]]  # the rows, from token 0
        if not identity:
            # Row views in plan order, joined by one cat (no index tensor of every token).
            rows = torch.split(values, [b - a for a, b in itertools.pairwise(offsets)])
            values = torch.cat([rows[i] for i in order])
        new_offsets = [0, *itertools.accumulate(sizes)]
        for micro_batch, start, stop in zip(micro_batches, bounds, bounds[1:], strict=False):
            first, last = new_offsets[start], new_offsets[stop]
            local = torch.tensor([o - first for o in new_offsets[start : stop + 1]])
            micro_batch.set(
                key,
                torch.nested.nested_tensor_from_jagged(
                    values[first:last],
                    local.to(values.device, non_blocking=True),
                    min_seqlen=min(sizes[start:stop], default=0),
                    max_seqlen=max(sizes[start:stop], default=0),
                ),
            )
    return micro_batches


def rearrange_micro_batches(
    batch: TensorDict,
    max_token_len: int,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
    force_group_size: int = 1,
) -> tuple[list[TensorDict], list[list[int]]]:
    """Cut a batch into micro-batches of at most ``max_token_len`` effective tokens.

    Drop-in for verl 0.9.1's function of the same name and signature. Differences: the cap
    is a hard bound on every path (verl starts at ``ceil(total / cap)`` and retries one
    count at a time), the count is the smallest this library can reach (the L2 bound on
    most real batches), and DP ranks agree with one collective in which every check takes
    part, so an error raises on every rank instead of hanging the others.

    Args:
        batch: TensorDict of batch size ``(n,)`` with ``attention_mask`` of shape
            ``(n, seq_len)`` or jagged nested ``input_ids``.
        max_token_len: cap in effective tokens per micro-batch (a memory budget).
        dp_group: DP process group. The ranks agree only when it is given (not ``None``),
            ``same_micro_num_in_dp`` is true and torch.distributed is initialised (verl
            0.9.1's rule); ``None`` plans locally, even when a default process group
            exists, so a call made on one rank alone never blocks.
        num_batches_divided_by: the count is rounded up to a multiple of this (e.g. the
            virtual pipeline stages).
        same_micro_num_in_dp: with ``dp_group``, every rank of the group gets the same
            count (the largest needed), through one ``all_reduce(MAX)``.
        min_num_micro_batch: at least this many micro-batches.
        use_dynamic_bsz_balance: order micro-batches by workload with the lightest at both
            ends of the list and the heaviest in the middle.
        force_group_size: consecutive samples ``[g*size, (g+1)*size)`` stay in one
            micro-batch.

    Returns:
        ``(micro_batches, micro_bsz_idx)``: the micro-batches (TensorDicts) and, for each,
        the sorted original row indices; the index lists are an exact cover of
        ``range(n)``. Jagged tensors and per-sample ``NonTensorStack`` entries are indexed
        row by row; scalar ``NonTensorData`` entries are kept unchanged.

    Raises:
        TypeError: an argument has a wrong type (e.g. a float ``max_token_len``, a
            non-bool switch), or ``batch`` is not a TensorDict with a batch dimension.
        ValueError: a sample (``exceeds max_token_len``) or forced group
            (``forced group exceeds max_token_len``) over the cap, an empty batch, ``n`` not
            divisible by ``force_group_size``, more micro-batches needed than samples, a bad
            ``min_num_micro_batch``/``num_batches_divided_by``, no length source, lengths
            that cannot be read (e.g. a mask on the meta device), or this process is not a
            member of ``dp_group`` (raised at once). Under DP agreement every rank raises
            the same error, naming the DP group rank and the global rank at fault:
            ``rank 1 of the DP group (global rank 3): sample 1 has 60 tokens, ...``.
            Nothing but ``TypeError``/``ValueError`` is raised.

    Complexity: O(n log n) planning plus Karmarkar-Karp's O(n k) for ``k`` micro-batches,
    one collective, one device-to-host copy of the lengths, one index per micro-batch.

    Example:
        >>> td = TensorDict({"attention_mask": torch.ones(4, 6)}, batch_size=[4])
        >>> micro_batches, idx = rearrange_micro_batches(td, max_token_len=12)
        >>> [len(mb) for mb in micro_batches], sorted(i for part in idx for i in part)
        ([2, 2], [0, 1, 2, 3])
    """
    return _rearrange(
        batch,
        max_token_len,
        dp_group,
        num_batches_divided_by,
        same_micro_num_in_dp,
        min_num_micro_batch,
        use_dynamic_bsz_balance,
        force_group_size,
    )


#: What reading a foreign object may raise; under agreement it becomes an agreed error.
_READ_ERRORS = (
    AttributeError, IndexError, KeyError, NotImplementedError, OverflowError, RuntimeError,
    TypeError, ValueError,
)


def _begin(dp_group: Any, same_micro_num_in_dp: Any) -> bool:
    """Whether this call agrees with ``dp_group`` (verl 0.9.1's rule); a process outside
    the group raises at once, since it was never part of that group's collective."""
    sync = distributed.sync_enabled(dp_group, same_micro_num_in_dp)
    if sync:
        error = distributed.membership_error(dp_group)
        if error is not None:
            raise error.exception()
    return sync


def _switch_error(value: Any, argument: Argument) -> PlanError | None:
    """The error for a switch that is not a bool (or 0/1), else ``None``."""
    if as_switch(value) is None:
        return PlanError(ErrorCode.BAD_ARGUMENT, (argument, 0, 0), describe(value))
    return None


def _batch_problem(batch: Any) -> PlanError | None:
    """``NOT_TENSORDICT`` unless ``batch`` is a TensorDict with a batch dimension."""
    if isinstance(batch, TensorDictBase) and len(batch.batch_size) > 0:
        return None
    what = type(batch).__name__
    if isinstance(batch, TensorDictBase):
        what += " with batch_size=()"
    return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.NOT_TENSORDICT,), f"got {what}")


def _finish(
    analysis: RankAnalysis,
    sync: bool,
    dp_group: Any,
    cause: BaseException | None = None,
    static_count: int | None = None,
) -> int:
    """The count to plan: agreed with the group (one all_reduce), or this rank's own.
    Every error is raised here, identically on every rank of the group under agreement."""
    if sync:
        # Every rank reaches this call, with or without an error of its own.
        count, error, _ = distributed.agree(analysis, dp_group, static_count)
        if error is not None:
            raise error.exception() from cause
        return count
    if analysis.error is not None:
        raise analysis.error.exception() from cause
    return static_count if static_count is not None else local_count(analysis)


def _rearrange(
    batch: Any,
    max_token_len: Any,
    dp_group: Any,
    num_batches_divided_by: Any,
    same_micro_num_in_dp: Any,
    min_num_micro_batch: Any,
    use_dynamic_bsz_balance: Any,
    force_group_size: Any,
    pre_error: PlanError | None = None,
) -> tuple[list[TensorDict], list[list[int]]]:
    """Plan (agreeing with the DP group when asked), then cut.

    ``pre_error`` is a problem the caller found before planning (a bad setting, a bad
    DataProto); like every other error it goes through the agreement before anyone raises.
    """
    sync = _begin(dp_group, same_micro_num_in_dp)
    cause: BaseException | None = None
    error = (
        pre_error
        or _switch_error(same_micro_num_in_dp, Argument.SAME_MICRO_NUM_IN_DP)
        or _switch_error(use_dynamic_bsz_balance, Argument.USE_DYNAMIC_BSZ_BALANCE)
        or _batch_problem(batch)
    )
    lengths: list[int] = []
    offsets: list[int] | None = None
    if error is None:
        try:
            error, lengths, offsets = _read_lengths(batch)
        except _READ_ERRORS as exc:
            # The peers must hear of it: turn it into a plan error (the cause is chained).
            cause = exc
            error = PlanError(ErrorCode.BAD_BATCH, (BatchProblem.UNREADABLE,), describe(exc))
    if error is None:
        analysis = analyse(
            lengths,
            max_token_len,
            force_group_size=force_group_size,
            min_num_micro_batch=min_num_micro_batch,
            num_batches_divided_by=num_batches_divided_by,
        )
    else:
        analysis = RankAnalysis(error)
    count = _finish(analysis, sync, dp_group, cause)
    plan = build_plan(analysis, count, bool(as_switch(use_dynamic_bsz_balance)))
    # Offsets read with the lengths of packed jagged input_ids: no second host copy.
    return _cut(batch, plan, None if offsets is None else {"input_ids": offsets}), plan


def restore_dynamic_batch(
    data: torch.Tensor, batch_idx_list: Sequence[Sequence[int]]
) -> torch.Tensor:
    """Put rows computed micro-batch by micro-batch back in the original order.

    Args:
        data: the micro-batch outputs concatenated along dim 0, shape ``(n, ...)``; dense
            or a jagged nested tensor.
        batch_idx_list: the index lists returned with the micro-batches.

    Returns:
        ``data`` with rows in the original sample order (same layout: jagged stays jagged).

    Raises:
        TypeError: ``data`` is not a tensor, or an index is not an integer.
        ValueError: ``data`` is 0-d, or the index lists are not a permutation of
            ``range(n)``.

    Complexity: O(n) indices plus one gather.

    Example:
        >>> restore_dynamic_batch(torch.tensor([10, 30, 20]), [[0, 2], [1]]).tolist()
        [10, 20, 30]
    """
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"data must be a torch.Tensor, got {type(data).__name__}")
    if data.dim() == 0:
        raise ValueError("data must have a batch dimension (dim 0), got a 0-d tensor")
    flat = non_negative_ints(
        (i for part in batch_idx_list for i in part), "batch_idx_list (flattened)", "indices"
    )
    rows = int(data.size(0))
    if len(flat) != rows:
        raise ValueError(
            f"batch_idx_list holds {len(flat)} indices but data has {rows} rows; "
            "pass the index lists returned with these micro-batches"
        )
    order = torch.tensor(get_reverse_idx(flat), dtype=torch.long)
    if data.is_nested:
        rows_in_order = data.unbind()
        return torch.nested.as_nested_tensor(
            [rows_in_order[i] for i in order.tolist()], layout=data.layout
        )
    return data[order.to(data.device)]


def _dataproto_problem(data: Any) -> PlanError | None:
    """Why ``data`` is not DataProto-like enough to cut, or ``None``."""
    for attribute in ("batch", "non_tensor_batch", "meta_info", "from_dict"):
        if not hasattr(data, attribute):
            return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.NOT_DATAPROTO,), f"no {attribute!r}")
    problem = _batch_problem(data.batch)
    if problem is not None:
        return problem
    n = int(data.batch.batch_size[0])
    try:
        arrays = list(dict(data.non_tensor_batch).values())
    except _READ_ERRORS as exc:
        return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.NOT_DATAPROTO,), describe(exc))
    for array in arrays:
        if not isinstance(array, np.ndarray) or array.ndim == 0:
            return PlanError(
                ErrorCode.BAD_BATCH, (BatchProblem.NON_TENSOR_NOT_ARRAY,), f"got {describe(array)}"
            )
        if len(array) != n:
            return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.NON_TENSOR_ROWS, len(array), n))
    return None


def prepare_dynamic_batch(
    data: T,
    max_token_len: int,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
) -> tuple[list[T], list[list[int]]]:
    """:func:`rearrange_micro_batches` for a DataProto-like object (verl's DataProto).

    ``data`` needs ``.batch`` (TensorDict), ``.non_tensor_batch`` (dict of NumPy arrays,
    first axis = samples), ``.meta_info`` (dict) and a classmethod
    ``from_dict(tensors, non_tensors, meta_info=...)``. verl is not imported.

    Returns:
        ``(micro_batches, micro_bsz_idx)``: objects of ``type(data)`` whose tensors and
        non-tensor arrays are the rows of each micro-batch, each with a deep copy of
        ``meta_info``; the index lists as :func:`rearrange_micro_batches` returns them.

    Raises:
        TypeError: ``data`` lacks one of the attributes above, its ``batch`` is not a
            TensorDict, or a ``non_tensor_batch`` entry is not a NumPy array (under DP
            agreement, on every rank).
        ValueError: a ``non_tensor_batch`` array does not have one row per sample, or as
            :func:`rearrange_micro_batches` (under DP agreement, on every rank).

    Example:
        >>> class Proto:
        ...     def __init__(self, batch, non_tensor_batch, meta_info=None):
        ...         self.batch, self.non_tensor_batch = batch, non_tensor_batch
        ...         self.meta_info = meta_info or {}
        ...     @classmethod
        ...     def from_dict(cls, tensors, non_tensors, meta_info=None):
        ...         size = len(next(iter(tensors.values())))
        ...         return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)
        >>> td = TensorDict({"attention_mask": torch.ones(3, 4)}, batch_size=[3])
        >>> parts, idx = prepare_dynamic_batch(Proto(td, {"uid": np.array(["a", "b", "c"])}), 8)
        >>> [list(p.non_tensor_batch["uid"]) for p in parts] == [["abc"[i] for i in part] for part in idx]
        True
        >>> sorted(len(part) for part in idx)
        [1, 2]
    """
    source: Any = data
    problem = _dataproto_problem(source)
    batches, plan = _rearrange(
        source.batch if problem is None else None,
        max_token_len,
        dp_group,
        num_batches_divided_by,
        same_micro_num_in_dp,
        min_num_micro_batch,
        use_dynamic_bsz_balance,
        1,
        problem,
    )
    out: list[T] = []
    for micro_batch, indices in zip(batches, plan, strict=True):
        tensors = {key: micro_batch[key] for key in micro_batch.keys()}
        non_tensors = {key: value[indices] for key, value in source.non_tensor_batch.items()}
        out.append(
            type(source).from_dict(tensors, non_tensors, meta_info=copy.deepcopy(source.meta_info))
        )
    return out, plan


def _setting(data: TensorDict, key: str, default: Any) -> Any:
    """A setting stored in ``data`` as verl does (plain entry or NonTensorData)."""
    if key not in data.keys():
        return default
    value = data.get(key)
    if isinstance(value, NonTensorData):
        value = value.data
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type != "meta":
        value = value.item()
    return value


def _int_setting(
    data: TensorDict, key: str, argument: Argument, default: int | None
) -> tuple[PlanError | None, int]:
    """A positive-integer setting, or the error to agree on (missing, wrong type, < 1)."""
    value = _setting(data, key, default)
    if value is None:
        return PlanError(ErrorCode.BAD_ARGUMENT, (argument, 2, 0)), 0
    return argument_error(value, argument, optional=False)


def _settings(data: TensorDict) -> tuple[PlanError | None, bool, int | None, int]:
    """``(error, dynamic, cap or chunk, force_group_size)`` read from the batch's settings.

    Dynamic: the cap ``max_token_len_per_gpu * sp_size``. Static: the chunk size
    ``micro_batch_size_per_gpu`` (``force_group_size`` is returned apart). A bad or missing
    setting is returned as the error to agree on (the first one found).
    """
    raw_dynamic = _setting(data, "use_dynamic_bsz", True)
    dynamic = as_switch(raw_dynamic)
    dynamic_error = _switch_error(raw_dynamic, Argument.USE_DYNAMIC_BSZ)
    if dynamic is None:  # an unreadable switch: plan dynamically (the default), agree on it
        dynamic = True
    group_error, force_group_size = _int_setting(
        data, "force_group_size", Argument.FORCE_GROUP_SIZE, 1
    )
    if dynamic:
        sp_error, sp_size = _int_setting(data, "sp_size", Argument.SP_SIZE, 1)
        cap_error, per_gpu = _int_setting(
            data, "max_token_len_per_gpu", Argument.MAX_TOKEN_LEN_PER_GPU, None
        )
        error = dynamic_error or group_error or sp_error or cap_error
        return error, True, per_gpu * sp_size, force_group_size
    size_error, size = _int_setting(
        data, "micro_batch_size_per_gpu", Argument.MICRO_BATCH_SIZE_PER_GPU, None
    )
    return group_error or size_error, False, size, force_group_size


def prepare_micro_batches(
    data: TensorDict,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
) -> tuple[list[TensorDict], list[list[int]] | None]:
    """verl's ``prepare_micro_batches``: settings are read from the TensorDict itself.

    Settings (plain entries or ``NonTensorData``): ``use_dynamic_bsz`` (default True),
    ``sp_size`` (default 1), ``force_group_size`` (default 1), ``max_token_len_per_gpu``
    (required when dynamic; the cap is ``max_token_len_per_gpu * sp_size`` tokens) and
    ``micro_batch_size_per_gpu`` (required when not dynamic).

    Dynamic: :func:`rearrange_micro_batches` with that cap. Static: consecutive chunks of
    ``micro_batch_size_per_gpu * force_group_size`` samples; the batch size must be a
    multiple of the chunk (so every micro-batch has the same number of samples).

    Under DP agreement (``dp_group`` given, ``same_micro_num_in_dp`` true,
    ``torch.distributed`` initialised) both paths take part in the same single
    ``all_reduce``: the mode (dynamic or static) and the static count are part of the
    agreed vector, so ranks mixing modes, static ranks with different counts, and every
    input error raise the same exception on every rank (verl's static path makes no
    collective; a count mismatch there would hang the trainer's later collectives).

    Args:
        data: a TensorDict of batch size ``(n,)`` holding the settings above.
        dp_group: DP process group; ``None`` plans locally (no collective), as verl does.
        num_batches_divided_by: dynamic path: round the count up to a multiple of this.
        same_micro_num_in_dp: agree with the group (needs ``dp_group``).
        min_num_micro_batch: dynamic path: at least this many micro-batches.
        use_dynamic_bsz_balance: dynamic path: verl's workload order.

    Returns:
        ``(micro_batches, indices)``; ``indices`` is ``None`` on the static path.

    Raises:
        TypeError: ``data`` is not a TensorDict, or a setting or switch has a wrong type.
        ValueError: a required setting is missing or below 1, a static batch not
            divisible into chunks, ranks disagreeing on the mode or the static count, this
            process is not in ``dp_group``, or as :func:`rearrange_micro_batches`.

    Example:
        >>> td = TensorDict({"attention_mask": torch.ones(4, 3)}, batch_size=[4])
        >>> td["use_dynamic_bsz"] = NonTensorData(False)
        >>> td["micro_batch_size_per_gpu"] = NonTensorData(2)
        >>> micro_batches, indices = prepare_micro_batches(td)
        >>> [len(mb) for mb in micro_batches], indices
        ([2, 2], None)
    """
    sync = _begin(dp_group, same_micro_num_in_dp)
    cause: BaseException | None = None
    error = _batch_problem(data)
    dynamic, value, force_group_size = True, 0, 1
    if error is None:
        try:
            error, dynamic, setting, force_group_size = _settings(data)
            value = setting or 0
        except _READ_ERRORS as exc:
            cause = exc
            error = PlanError(ErrorCode.BAD_BATCH, (BatchProblem.UNREADABLE,), describe(exc))
    if dynamic:
        return _rearrange(
            data if error is None else None,
            value,
            dp_group,
            num_batches_divided_by,
            same_micro_num_in_dp,
            min_num_micro_batch,
            use_dynamic_bsz_balance,
            force_group_size,
            error,
        )
    # The static path: chunks of micro_batch_size_per_gpu * force_group_size samples.
    error = (
        error
        or _switch_error(same_micro_num_in_dp, Argument.SAME_MICRO_NUM_IN_DP)
        or _switch_error(use_dynamic_bsz_balance, Argument.USE_DYNAMIC_BSZ_BALANCE)
    )
    chunk = value * force_group_size
    n = int(data.batch_size[0])
    if error is None and (n == 0 or n % chunk):
        error = PlanError(ErrorCode.STATIC_NOT_DIVISIBLE, (n, value, force_group_size))
    static_count = n // chunk if error is None else 0
    _finish(RankAnalysis(error), sync, dp_group, cause, static_count)
    return _cut(data, [list(range(start, start + chunk)) for start in range(0, n, chunk)]), None
