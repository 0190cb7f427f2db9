"""Putting micro-batch outputs back in the input's row order (:func:`restore_dynamic_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from tensordict import LazyStackedTensorDict, NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from seqlen_balancing._checks import non_negative_ints
from seqlen_balancing.batch.cut import _pick_rows
from seqlen_balancing.batch.filler import filler_of
from seqlen_balancing.batch.kinds import (
    _COMPRESSED,
    _READ_ERRORS,
    _batch_size,
    _is_lazy_stack,
    _is_node,
    _key_name,
    _kind,
    _lazy_stack,
    _per_row,
    _ragged_dim,
    _same_data,
)
from seqlen_balancing.batch.nested import _join_rows, _SharedOffsets
from seqlen_balancing.batch.trim import restore_widths
from seqlen_balancing.planning.partition import get_reverse_idx

__all__ = ["restore_dynamic_batch"]


def restore_dynamic_batch(
    data: torch.Tensor | TensorDict | Sequence[torch.Tensor | TensorDict],
    batch_idx_list: Sequence[Sequence[int]],
) -> Any:
    """Put rows computed micro-batch by micro-batch back in the original order.

    Args:
        data: either the micro-batch outputs already concatenated along dim 0, shape
            ``(n, ...)`` (dense, or a jagged/strided nested tensor), as verl takes it, or
            a TensorDict of them; or
            the list of per-micro-batch outputs, one per index list: dense or sparse
            tensors with equal trailing shapes, nested tensors of one layout (``torch.cat``
            cannot join jagged tensors), or TensorDicts (every entry restored alike:
            tensors, per-sample ``NonTensorStack`` entries in the original order, a scalar
            ``NonTensorData`` kept as it is, whatever it holds, nested TensorDicts with
            their batch size, lazy stacks along dim 0 row by row), all on one device.
        batch_idx_list: the index lists returned with the micro-batches. When they are
            :class:`~seqlen_balancing.batch.trim.MicroBatchIndices` (``padded=True`` cut
            each micro-batch to its width), a list of outputs of each micro-batch's width
            (the micro-batches themselves, or per-token outputs) is put back at the
            batch's width first: the kept columns in place, bit for bit, and elsewhere the
            pad value each cut entry held in the input (0 for other outputs), so the
            padding side (left, right or both) is the input's.
            Lists that carry filler rows (``equal_rows_per_micro_batch``:
            :class:`~seqlen_balancing.planning.rows.RowIndices`, or ``filler`` set on the cut
            :class:`~seqlen_balancing.batch.trim.MicroBatchIndices`) have their filler
            rows' outputs dropped first: the last ``filler`` rows of each micro-batch's
            output, in a list or in the concatenated data.
            Empty lists at the end mark dummy micro-batches (``dummy_micro_batches=True``):
            their outputs are dropped (a list's entries for them; in concatenated data, the
            rows after the real ones, where concatenating the outputs in order puts them).
            A rank with no samples (every list empty) gets zero rows back, of the outputs'
            trailing shape and type.

    Returns:
        The rows in the original sample order: a tensor (nested tensors keep their layout
        and ragged dimension), or a TensorDict of batch size ``(n,)`` for TensorDicts.

    Raises:
        TypeError: ``data`` is not a tensor, a TensorDict or a list of them, or an index
            is not an integer.
        ValueError: ``data`` is 0-d, the index lists are not a permutation of
            ``range(n)``, the list holds a different number of outputs than there are index
            lists, or micro-batch ``i``'s output has a different number of rows than
            ``batch_idx_list[i]`` (or a different trailing shape, fixed dims of jagged rows,
            layout, device or key set from micro-batch 0); the message names the
            micro-batch (and the entry). Whatever torch refuses to join is reported as a
            ``ValueError`` naming the entry; nothing else is raised.

    Complexity: O(n) indices plus one gather (one cat and one gather for a list).

    References:
        verl 0.9.1 ``restore_dynamic_batch`` (the concatenated form).

    Example:
        >>> restore_dynamic_batch(torch.tensor([10, 30, 20]), [[0, 2], [1]]).tolist()
        [10, 20, 30]
        >>> restore_dynamic_batch([torch.tensor([10, 30]), torch.tensor([20])], [[0, 2], [1]]).tolist()
        [10, 20, 30]
    """
    lists, dummies = _real_lists(batch_idx_list)
    if isinstance(data, (list, tuple)):
        parts = list(data)
        if dummies and not lists and len(parts) == dummies and isinstance(
            parts[0], (torch.Tensor, TensorDictBase)
        ):
            return parts[0][:0]  # a rank with no samples: no real rows, the outputs' shape
        if dummies and len(parts) == len(lists) + dummies:
            parts = parts[: len(lists)]  # the dummies' outputs
        return _restore_parts(parts, lists)
    filled = [i for part in _with_filler(lists) for i in part]
    if isinstance(data, TensorDictBase):
        if dummies and len(data.batch_size) > 0 and _rows(data) >= len(filled) + dummies:
            data = data[: len(filled)]
        return _restore_parts([data], [[i for part in lists for i in part]], [filled])
    if not isinstance(data, torch.Tensor):
        raise TypeError(
            f"data must be a torch.Tensor, a TensorDict or a list of them, got {type(data).__name__}"
        )
    tensor = cast(torch.Tensor, data)
    if tensor.dim() == 0:
        raise ValueError("data must have a batch dimension (dim 0), got a 0-d tensor")
    flat = non_negative_ints(filled, "batch_idx_list (flattened)", "indices")
    rows = int(tensor.size(0))
    if len(flat) != rows and not (dummies and rows >= len(flat) + dummies):
        extra = f" and {dummies} dummy micro-batches (at least a row each)" if dummies else ""
        raise ValueError(
            f"batch_idx_list holds {len(flat)} indices{extra} but data has {rows} rows; "
            "pass the index lists returned with these micro-batches"
        )
    order: list[int] = get_reverse_idx(flat)[: sum(len(part) for part in lists)]  # filler rows last
    try:
        if tensor.is_nested:
            return _join_rows(tensor.unbind(), order, tensor, {})
        return _pick_rows(tensor, order)
    except (RuntimeError, NotImplementedError) as exc:  # a layout torch cannot index by rows
        raise ValueError(f"data ({_kind(tensor)}) cannot be put back in order by rows: {exc}") from exc


def _rows(part: Any) -> int:
    if isinstance(part, TensorDictBase):
        return _batch_size(part)
    return int(part.size(0))


def _real_lists(batch_idx_list: Sequence[Sequence[int]]) -> tuple[list[list[int]], int]:
    """``(the index lists before the dummies, number of dummies)``: the dummies are the
    empty lists at the end; an empty list before a real one is a ``ValueError``."""
    # lists stay as they are (padded=True's MicroBatchIndices carry the cut to undo)
    lists = [part if isinstance(part, list) else list(part) for part in batch_idx_list]
    real = max((m + 1 for m, part in enumerate(lists) if part), default=0)
    empty = next((m for m, part in enumerate(lists[:real]) if not part), None)
    if empty is not None:
        raise ValueError(
            f"batch_idx_list[{empty}] is empty but a later index list is not; empty lists mark "
            "dummy micro-batches, which come last: pass the index lists returned with these "
            "micro-batches"
        )
    return lists[:real], len(lists) - real


def _with_filler(lists: Sequence[Sequence[int]]) -> list[list[int]]:
    """The index lists with their filler rows (``equal_rows_per_micro_batch``: the last
    ``filler`` rows of a micro-batch) as samples after the real ones (``n``, ``n + 1``,
    ...), so that restoring puts their outputs last, where they are dropped."""
    n = sum(len(part) for part in lists)
    out = []
    for part in lists:
        out.append([*part, *range(n, n + filler_of(part))])
        n += filler_of(part)
    return out


def _restore_parts(
    parts: list[Any], batch_idx_list: Sequence[Sequence[int]], filled: list[list[int]] | None = None
) -> Any:
    """:func:`restore_dynamic_batch` for a list of per-micro-batch outputs; ``filled``: the
    index lists with their filler rows (:func:`_with_filler`, the default)."""
    lists = filled or _with_filler(batch_idx_list)
    if len(parts) != len(lists):
        raise ValueError(
            f"data holds {len(parts)} micro-batch outputs but batch_idx_list has {len(lists)} "
            "index lists; pass one output per micro-batch, in the order they were returned"
        )
    if not parts:
        raise ValueError("data is an empty list; pass one output per micro-batch")
    first = parts[0]
    for m, part in enumerate(parts):
        if not isinstance(part, (torch.Tensor, TensorDictBase)):
            raise TypeError(
                f"micro-batch {m}: output must be a torch.Tensor or a TensorDict, got {type(part).__name__}"
            )
        if isinstance(part, TensorDictBase) != isinstance(first, TensorDictBase):
            raise ValueError(
                f"micro-batch {m}: output is a {type(part).__name__}, micro-batch 0's a "
                f"{type(first).__name__}"
            )
        if isinstance(part, torch.Tensor) and part.dim() == 0:
            raise ValueError(f"micro-batch {m}: output is a 0-d tensor; it needs one row per sample")
        if isinstance(part, TensorDictBase) and len(part.batch_size) == 0:
            raise ValueError(f"micro-batch {m}: output has batch_size=(); it needs one row per sample")
        if _rows(part) != len(lists[m]):
            raise ValueError(
                f"micro-batch {m}: output has {_rows(part)} rows but batch_idx_list[{m}] holds "
                f"{len(lists[m])} indices; pass the outputs in the order the micro-batches came"
            )
    flat = non_negative_ints(
        (i for part in lists for i in part), "batch_idx_list (flattened)", "indices"
    )
    order: list[int] = get_reverse_idx(flat)[: sum(len(part) for part in batch_idx_list)]
    parts = restore_widths(parts, list(batch_idx_list))  # padded=True's cut, undone
    if isinstance(parts[0], TensorDictBase):
        return _restore_tensordicts(parts, order, (), {})
    return _restore_tensors(parts, order, {})


def _restore_tensors(
    parts: list[torch.Tensor], order: list[int], shared: _SharedOffsets, key: Any = None,
) -> torch.Tensor:
    """Rows of ``parts`` (one tensor per micro-batch) joined in ``order``; every mismatch
    torch would raise on is a ``ValueError`` naming the micro-batch (and ``key``)."""
    first = parts[0]
    where = "" if key is None else f" (entry {_key_name(key)!r})"
    for m, part in enumerate(parts):
        if part.is_nested != first.is_nested or part.layout != first.layout or (
            part.is_nested and _ragged_dim(part) != _ragged_dim(first)
        ):
            raise ValueError(
                f"micro-batch {m}{where}: output is {_kind(part)} but micro-batch 0's is {_kind(first)}"
            )
        if part.device != first.device:
            raise ValueError(
                f"micro-batch {m}{where}: output is on {part.device} but micro-batch 0's is on "
                f"{first.device}; move the outputs to one device"
            )
        if part.dim() != first.dim() or (not part.is_nested and part.shape[1:] != first.shape[1:]):
            raise ValueError(
                f"micro-batch {m}{where}: output rows have shape {tuple(part.shape[1:])} but "
                f"micro-batch 0's have {tuple(first.shape[1:])}; pad them to one shape or return "
                "nested tensors"
            )
        if part.layout == torch.jagged:
            ragged = _ragged_dim(part)
            fixed = [(d, int(part.shape[d])) for d in range(1, part.dim()) if d != ragged]
            if fixed != [(d, int(first.shape[d])) for d in range(1, first.dim()) if d != ragged]:
                raise ValueError(
                    f"micro-batch {m}{where}: jagged output rows have the fixed dimensions "
                    f"{[size for _, size in fixed]} but micro-batch 0's have "
                    f"{[int(first.shape[d]) for d, _ in fixed]}; every row must match outside "
                    f"its ragged dimension {ragged}"
                )
    if first.is_nested:
        return _join_rows([row for part in parts for row in part.unbind()], order, first, shared)
    # torch.cat cannot join CSR/CSC parts: joined in COO, then back in their layout
    coo = [part.to_sparse(layout=torch.sparse_coo) if part.layout in _COMPRESSED else part for part in parts]
    joined = _pick_rows(torch.cat(coo), order)
    return joined.to_sparse(layout=first.layout) if first.layout in _COMPRESSED else joined


def _restore_tensordicts(
    parts: list[TensorDictBase], order: list[int], prefix: tuple[str, ...], shared: _SharedOffsets,
) -> TensorDictBase:
    """The rows of TensorDict outputs joined in ``order``, entry by entry (nested
    TensorDicts keep their batch size); lazy stacks along dim 0 are joined by rows."""
    if all(_is_lazy_stack(part) and int(part.stack_dim) == 0 for part in parts):
        rows = [row for part in parts for row in cast(LazyStackedTensorDict, part).tensordicts]
        return _lazy_stack([rows[i] for i in order])
    try:
        # A lazy stack along another dim holds dense entries of one shape (as cut).
        parts = [part.contiguous() if _is_lazy_stack(part) else part for part in parts]
        found = [{name: part.get(name) for name in part.keys()} for part in parts]
    except _READ_ERRORS as exc:
        raise ValueError(f"the micro-batch outputs cannot be read entry by entry: {exc}") from exc
    keys = sorted(found[0], key=str)
    for m, entries in enumerate(found):
        if sorted(entries, key=str) != keys:
            raise ValueError(
                f"micro-batch {m}: output has keys "
                f"{[(*prefix, k) if prefix else k for k in sorted(entries, key=str)]} but "
                f"micro-batch 0's has {[(*prefix, k) if prefix else k for k in keys]}"
            )
    out = TensorDict({}, batch_size=[len(order), *parts[0].batch_size[1:]])
    for name in keys:
        key: Any = (*prefix, name) if prefix else name
        try:
            out.set(name, _restore_entry(key, [entries[name] for entries in found], order, shared))
        except (RuntimeError, NotImplementedError) as exc:  # what torch or tensordict refuse
            raise ValueError(
                f"entry {_key_name(key)!r} of the micro-batch outputs cannot be joined back: {exc}"
            ) from exc
    return out


def _restore_entry(key: Any, values: list[Any], order: list[int], shared: _SharedOffsets) -> Any:
    """One entry of the restored TensorDict, from its value in every micro-batch."""
    if all(_is_node(value) for value in values):
        return _restore_tensordicts(values, order, key if isinstance(key, tuple) else (key,), shared)
    if all(isinstance(value, torch.Tensor) for value in values):
        return _restore_tensors(values, order, shared, key)
    if all(isinstance(value, NonTensorData) for value in values) and all(
        _same_data(value.data, values[0].data) for value in values
    ):
        return values[0]  # one scalar for the whole batch, as cut
    if any(isinstance(value, torch.Tensor) or _is_node(value) for value in values):
        raise ValueError(
            f"entry {_key_name(key)!r} is a tensor or a TensorDict in some micro-batch outputs "
            "but not in others; return the same kind of entry from every micro-batch"
        )
    objects = [item for value in values for item in _per_row(value)]
    return NonTensorStack(*(NonTensorData(objects[i]) for i in order))
