"""TensorDict / DataProto glue: read effective lengths, cut micro-batches, restore order.

The plan itself comes from :mod:`seqlen_balancing.planner` (pure Python); this module reads
the lengths from tensors (one device-to-host copy), takes part in the DP agreement, and
indexes the batch.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from tensordict import NonTensorData, TensorDict

from seqlen_balancing import distributed
from seqlen_balancing._checks import positive_int
from seqlen_balancing.errors import BatchProblem, ErrorCode, PlanError
from seqlen_balancing.partition import WORKLOAD_LINEAR_COEF, get_reverse_idx
from seqlen_balancing.planner import RankAnalysis, agreed_count, analyse, build_plan

__all__ = [
    "calculate_workload",
    "effective_lengths",
    "prepare_dynamic_batch",
    "prepare_micro_batches",
    "rearrange_micro_batches",
    "restore_dynamic_batch",
]

T = TypeVar("T")


def calculate_workload(seqlen_list: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """verl's per-sequence cost ``24576*s + s**2`` as an int64 tensor.

    Args:
        seqlen_list: sequence lengths in tokens, shape ``(n,)`` (tensor of any integer
            dtype, or a list).

    Returns:
        int64 tensor of shape ``(n,)``, on the input's device. Computed in int64, so int32
        input never overflows (exact for lengths up to ``2**31``).

    Raises:
        TypeError: floating-point or bool lengths.
        ValueError: a negative length.

    Example:
        >>> calculate_workload(torch.tensor([1000], dtype=torch.int32)).tolist()
        [25576000]
    """
    lengths = torch.as_tensor(seqlen_list)
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(
            f"seqlen_list must hold integer token counts, got dtype {lengths.dtype}"
        )
    lengths = lengths.to(torch.int64)
    if lengths.numel() and bool((lengths < 0).any()):
        raise ValueError("seqlen_list holds a negative length; lengths must be >= 0 tokens")
    return WORKLOAD_LINEAR_COEF * lengths + lengths * lengths


def _jagged_row_lengths(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.layout == torch.jagged:
        offsets: torch.Tensor = getattr(tensor, "offsets")()  # noqa: B009 (not in stubs)
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
    n = _batch_size(batch)
    keys = set(batch.keys())
    ids = batch.get("input_ids") if "input_ids" in keys else None
    if isinstance(ids, torch.Tensor) and ids.is_nested:
        lengths = _jagged_row_lengths(ids)
    elif "attention_mask" in keys:
        mask = batch.get("attention_mask")
        if isinstance(mask, NonTensorData):
            mask = mask.data
        if not isinstance(mask, torch.Tensor):
            return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.NO_LENGTH_SOURCE,)), []
        if mask.is_nested:
            lengths = torch.stack([(row != 0).sum() for row in mask.unbind()])
        elif mask.dim() != 2:
            return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.MASK_NOT_2D, mask.dim())), []
        else:
            if mask.shape[0] != n:
                return PlanError(
                    ErrorCode.BAD_BATCH, (BatchProblem.MASK_ROWS, mask.shape[0], n)
                ), []
            lengths = (mask != 0).sum(dim=-1)
    else:
        return PlanError(ErrorCode.BAD_BATCH, (BatchProblem.NO_LENGTH_SOURCE,)), []
    values: list[int] = lengths.tolist()
    return None, values


def _is_packed_jagged(tensor: torch.Tensor) -> bool:
    return (
        tensor.layout == torch.jagged
        and getattr(tensor, "lengths")() is None  # noqa: B009 (nested-only API)
        and getattr(tensor, "_ragged_idx", 1) == 1
    )


def _cut(
    batch: TensorDict, plan: list[list[int]], known_lengths: dict[Any, list[int]] | None = None
) -> list[TensorDict]:
    """The micro-batches of ``plan``: one gather of the batch in plan order, then a view each.

    Dense tensors, ``NonTensorStack`` entries and nested TensorDicts are gathered by
    tensordict; scalar ``NonTensorData`` stays as it is. Packed jagged tensors are gathered
    here (tensordict 0.10 cannot index them) from host-side offsets, read once per key
    (or taken from ``known_lengths``), so no device-to-host copy happens per micro-batch.
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
                    key, torch.nested.as_nested_tensor([rows[i] for i in part], layout=torch.jagged)
                )
            continue
        if known_lengths and key in known_lengths:
            offsets = [0, *itertools.accumulate(known_lengths[key])]
        else:
            offsets = getattr(tensor, "offsets")().tolist()  # noqa: B009 (one host copy)
        sizes = [offsets[i + 1] - offsets[i] for i in order]
        values = tensor.values()
        if not identity:
            starts = torch.tensor([offsets[i] for i in order], dtype=torch.long)
            lengths = torch.tensor(sizes, dtype=torch.long)
            packed = torch.zeros(len(order) + 1, dtype=torch.long)
            torch.cumsum(lengths, dim=0, out=packed[1:])
            total = offsets[-1]
            gather = torch.repeat_interleave(starts - packed[:-1], lengths, output_size=total)
            gather += torch.arange(total)
            values = values[gather.to(values.device, non_blocking=True)]
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


def _plan(
    batch: TensorDict,
    max_token_len: Any,
    dp_group: Any,
    num_batches_divided_by: Any,
    same_micro_num_in_dp: bool,
    min_num_micro_batch: Any,
    use_dynamic_bsz_balance: bool,
    force_group_size: Any,
) -> tuple[list[list[int]], list[int]]:
    """The plan and the effective lengths it was made from (for the identity/gather paths)."""
    sync = distributed.sync_enabled(same_micro_num_in_dp)
    cause: Exception | None = None
    try:
        error, lengths = effective_lengths(batch)
    except (TypeError, ValueError, AttributeError, RuntimeError, IndexError) as exc:
        if not sync:
            raise
        # Under agreement the peers must hear of it: turn it into a plan error.
        cause = exc
        error, lengths = PlanError(ErrorCode.BAD_BATCH, (BatchProblem.UNREADABLE,)), []
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
    if sync:
        # Every rank reaches this call, with or without an error of its own.
        count, error, rank = distributed.agree(analysis, dp_group)
        if error is not None:
            raise error.exception(rank) from cause
    else:
        if analysis.error is not None:
            raise analysis.error.exception()
        count, error = agreed_count(
            analysis.min_count, analysis.n_groups, analysis.num_batches_divided_by
        )
        if error is not None:
            raise error.exception()
    return build_plan(analysis, count, use_dynamic_bsz_balance), lengths


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
        dp_group: DP process group; ``None`` means the default group when
            torch.distributed is initialised (verl's behaviour).
        num_batches_divided_by: the count is rounded up to a multiple of this (e.g. the
            virtual pipeline stages).
        same_micro_num_in_dp: every rank of the group gets the same count (the largest
            needed), through one ``all_reduce(MAX)``.
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
        TypeError: an argument has a wrong type (e.g. a float ``max_token_len``).
        ValueError: a sample (``exceeds max_token_len``) or forced group
            (``forced group exceeds max_token_len``) over the cap, an empty batch, ``n`` not
            divisible by ``force_group_size``, more micro-batches needed than samples, a bad
            ``min_num_micro_batch``/``num_batches_divided_by``, no length source. Under DP
            agreement every rank raises the same error, naming the rank at fault.

    Complexity: O(n log n) planning plus Karmarkar-Karp's O(n k) for ``k`` micro-batches,
    one collective, one device-to-host copy of the lengths, one index per micro-batch.

    Example:
        >>> td = TensorDict({"attention_mask": torch.ones(4, 6)}, batch_size=[4])
        >>> micro_batches, idx = rearrange_micro_batches(td, max_token_len=12)
        >>> [len(mb) for mb in micro_batches], sorted(i for part in idx for i in part)
        ([2, 2], [0, 1, 2, 3])
    """
    plan, lengths = _plan(
        batch,
        max_token_len,
        dp_group,
        num_batches_divided_by,
        same_micro_num_in_dp,
        min_num_micro_batch,
        use_dynamic_bsz_balance,
        force_group_size,
    )
    ids = batch.get("input_ids") if "input_ids" in batch.keys() else None
    # Lengths read from jagged input_ids are its row lengths: no second host copy needed.
    known = {"input_ids": lengths} if isinstance(ids, torch.Tensor) and ids.is_nested else None
    return _cut(batch, plan, known), plan


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
        ValueError: the index lists are not a permutation of ``range(n)``.

    Complexity: O(n) indices plus one gather.

    Example:
        >>> restore_dynamic_batch(torch.tensor([10, 30, 20]), [[0, 2], [1]]).tolist()
        [10, 20, 30]
    """
    flat = [int(i) for part in batch_idx_list for i in part]
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
            [rows_in_order[i] for i in order.tolist()], layout=torch.jagged
        )
    return data[order.to(data.device)]


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
        TypeError: ``data`` lacks one of the attributes above.
        ValueError: as :func:`rearrange_micro_batches`.
    """
    for attribute in ("batch", "non_tensor_batch", "meta_info", "from_dict"):
        if not hasattr(data, attribute):
            raise TypeError(
                f"data must be DataProto-like (batch, non_tensor_batch, meta_info, from_dict);"
                f" {type(data).__name__} has no {attribute!r}"
            )
    source: Any = data
    batches, plan = rearrange_micro_batches(
        source.batch,
        max_token_len=max_token_len,
        dp_group=dp_group,
        num_batches_divided_by=num_batches_divided_by,
        same_micro_num_in_dp=same_micro_num_in_dp,
        min_num_micro_batch=min_num_micro_batch,
        use_dynamic_bsz_balance=use_dynamic_bsz_balance,
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
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return value


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

    Returns:
        ``(micro_batches, indices)``; ``indices`` is ``None`` on the static path.

    Raises:
        ValueError: a required setting is missing or not a positive integer, a static batch
            not divisible into chunks, or as :func:`rearrange_micro_batches`.
    """
    use_dynamic_bsz = bool(_setting(data, "use_dynamic_bsz", True))
    sp_size = positive_int(_setting(data, "sp_size", 1), "sp_size")
    force_group_size = positive_int(_setting(data, "force_group_size", 1), "force_group_size")
    if use_dynamic_bsz:
        per_gpu = _setting(data, "max_token_len_per_gpu", None)
        if per_gpu is None:
            raise ValueError(
                "use_dynamic_bsz is on but the batch has no 'max_token_len_per_gpu'; "
                "store it in the TensorDict (tokens per GPU before sequence parallelism)"
            )
        max_token_len = positive_int(per_gpu, "max_token_len_per_gpu") * sp_size
        return rearrange_micro_batches(
            data,
            max_token_len=max_token_len,
            dp_group=dp_group,
            num_batches_divided_by=num_batches_divided_by,
            same_micro_num_in_dp=same_micro_num_in_dp,
            min_num_micro_batch=min_num_micro_batch,
            use_dynamic_bsz_balance=use_dynamic_bsz_balance,
            force_group_size=force_group_size,
        )
    size = _setting(data, "micro_batch_size_per_gpu", None)
    if size is None:
        raise ValueError(
            "use_dynamic_bsz is off but the batch has no 'micro_batch_size_per_gpu'; store it "
            "in the TensorDict"
        )
    chunk = positive_int(size, "micro_batch_size_per_gpu") * force_group_size
    n = _batch_size(data)
    if n == 0 or n % chunk:
        raise ValueError(
            f"batch size {n} is not a positive multiple of micro_batch_size_per_gpu * "
            f"force_group_size = {chunk}; change micro_batch_size_per_gpu or the batch size"
        )
    return _cut(data, [list(range(start, start + chunk)) for start in range(0, n, chunk)]), None
