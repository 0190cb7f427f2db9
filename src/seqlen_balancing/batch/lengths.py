"""Effective lengths of a batch's samples, in one device-to-host copy.

Effective lengths of a batch's samples: ``attention_mask`` row sums (any padding side) or
the row lengths of a jagged ``input_ids``, in one device-to-host copy.
"""

from __future__ import annotations

import itertools
from typing import Any, cast

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from seqlen_balancing._checks import describe
from seqlen_balancing.batch.kinds import _READ_ERRORS, _batch_size, _is_lazy_stack, _ragged_dim, _unwrapped
from seqlen_balancing.batch.nested import _jagged_row_lengths
from seqlen_balancing.errors import LengthsUnreadable, MaskNot2D, MaskRows, NoLengthSource, PlanError
from seqlen_balancing.native import Twinned

__all__ = ["effective_lengths"]


def effective_lengths(batch: TensorDict) -> tuple[PlanError | None, list[int]]:
    """Effective (real) token count of every sample; the padded width never matters.

    Jagged nested ``input_ids``: the length of each row. Otherwise ``attention_mask``:
    the number of non-zero entries in each row (any padding side, holes allowed; bool, int
    or float masks).

    Args:
        batch: a TensorDict with batch size ``(n,)``.

    Returns:
        ``(None, lengths)`` with ``n`` ints, or ``(error, [])`` for a batch whose lengths
        cannot be read (no source, mask not 2-D, mask rows != n, a mask torch cannot
        count, e.g. a sparse or meta one). One device-to-host copy
        of the ``n`` lengths, never one per element.

    Raises:
        TypeError: ``batch`` has no batch dimension (not a TensorDict-like object).
    """
    _batch_size(batch)
    try:
        error, lengths, _ = _read_lengths(batch)
    except _READ_ERRORS as exc:  # e.g. a sparse mask: the same error the planners agree on
        return LengthsUnreadable(detail=describe(exc)), []
    return error, lengths


def _read_lengths(batch: TensorDict) -> tuple[PlanError | None, list[int], list[int] | None]:
    """:func:`effective_lengths`, plus the host offsets of packed jagged ``input_ids``
    (read in the same copy, so cutting needs no second one)."""
    n = _batch_size(batch)
    ids = _get_entry(batch, "input_ids")
    if isinstance(ids, torch.Tensor) and ids.is_nested:
        # packed jagged rows (no holes) ragged in dim 1: their offsets are the lengths
        if ids.layout == torch.jagged and _ragged_dim(ids) == 1 and getattr(ids, "lengths")() is None:  # noqa: B009
            offsets: list[int] = getattr(ids, "offsets")().tolist()  # noqa: B009
            return None, [b - a for a, b in itertools.pairwise(offsets)], offsets
        return None, cast(list[int], _jagged_row_lengths(ids).tolist()), None
    mask = _unwrapped(_get_entry(batch, "attention_mask"))
    if not isinstance(mask, torch.Tensor):
        return NoLengthSource(), [], None
    if mask.is_nested:
        return None, cast(list[int], torch.stack([(row != 0).sum() for row in mask.unbind()]).tolist()), None
    if mask.dim() != 2:
        return MaskNot2D(mask.dim()), [], None
    if mask.shape[0] != n:
        return MaskRows(mask.shape[0], n), [], None
    return None, _mask_row_counts(mask), None


def _get_entry(batch: TensorDict, key: str) -> Any:
    """``batch[key]`` (``None`` where the batch has no ``key``); from a lazy stack whose
    rows differ in shape there, a nested tensor of the rows (one row per sample, as the cut
    picks them)."""
    if key not in batch.keys():
        return None
    try:
        return batch.get(key)
    except RuntimeError:
        if not (_is_lazy_stack(batch) and int(batch.stack_dim) == 0):
            raise
        rows = [row.get(key) for row in cast(LazyStackedTensorDict, batch).tensordicts]
        return torch.nested.as_nested_tensor(rows)


#: Integer dtypes torch cannot take ``aminmax`` of (the wide unsigned ones): counted exactly.
_NO_AMINMAX = tuple(
    getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)
)


#: Mask dtypes numpy holds as they are (``count_nonzero`` there is ``!= 0`` in torch).
_NUMPY_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.float32, torch.float64,
})


#: From this width on a row-by-row count beats numpy's count along an axis (1.5-6x).
_ROW_BY_ROW = 1024


def _row_counts_python(host: np.ndarray) -> list[int]:
    """Non-zero entries per row of a 2-D numpy array: ``numpy.count_nonzero`` on its own
    memory, with SIMD and no temporary (~30x faster than torch's integer sum on CPU, and
    exact for every dtype: the rule of ``mask != 0``), row by row from
    :data:`_ROW_BY_ROW` columns on. O(rows x width)."""
    if host.shape[1] >= _ROW_BY_ROW:
        return [int(np.count_nonzero(row)) for row in host]
    return cast(list[int], np.count_nonzero(host, axis=1).tolist())


#: The mask's count, through its compiled twin (``batch/_c_lengths.c``) where one is in
#: use: the same counts in one call and one pass (bool and integer masks; 512 x 11,675
#: bools: 0.21 against 0.40 ms), else the Python code (floats, other layouts).
_row_counts = Twinned(_row_counts_python, "batch._c_lengths", "row_counts")


def _mask_row_counts(mask: torch.Tensor) -> list[int]:
    """Non-zero entries per row of a 2-D mask, with one device-to-host copy.

    On CPU (dtypes numpy holds) the rows are counted on the tensor's own memory, with no
    temporary (:data:`_row_counts`: its compiled twin, or ``numpy.count_nonzero``):
    O(n x width).
    Elsewhere (CUDA, bfloat16, ...):
    ``(mask != 0).sum(-1)`` writes a temporary and reduces bools, which is slow on CPU
    (~80 ms for 2,048 x 6,704). Bool masks are summed as bytes; integer masks are summed
    directly when their values are all 0/1 (checked in the same copy); anything else (float
    masks, unsigned masks wider than 8 bits, other values) takes the exact but slower
    comparison.
    """
    if mask.numel() == 0:
        return [0] * mask.shape[0]
    plain = mask.device.type == "cpu" and mask.layout == torch.strided and not mask.is_nested
    if plain and not mask.is_neg() and mask.dtype in _NUMPY_DTYPES:
        # the mask's memory as numpy holds it (no copy); CUDA, bfloat16, ...: torch counts
        return _row_counts(mask.detach().numpy())
    if mask.dtype == torch.bool:
        return cast(list[int], mask.view(torch.uint8).sum(dim=-1, dtype=torch.int64).tolist())
    if not (mask.dtype.is_floating_point or mask.dtype.is_complex or mask.dtype in _NO_AMINMAX):
        low, high = torch.aminmax(mask)
        bounds = torch.stack([low, high]).to(torch.int64)
        packed: list[int] = torch.cat([mask.sum(dim=-1, dtype=torch.int64), bounds]).tolist()
        if packed[-2] >= 0 and packed[-1] <= 1:
            return packed[:-2]
    return cast(list[int], (mask != 0).sum(dim=-1).tolist())
