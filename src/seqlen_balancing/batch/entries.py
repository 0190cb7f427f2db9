"""Checking every entry of a batch before the agreement.

Checking every entry of a batch before the agreement: its kind, layout and device, and
what the cut will need (host offsets, entries cut apart). A problem becomes a
:class:`~seqlen_balancing.errors.PlanError` that travels through the agreement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, NonTensorData, TensorDict, TensorDictBase

from seqlen_balancing._checks import describe
from seqlen_balancing.batch.kinds import _COMPRESSED, _READ_ERRORS, _carrier, _is_dense, _is_lazy_stack
from seqlen_balancing.errors import EntryLayout, EntryOnMeta, EntryStack, EntryUnreadable, PlanError


@dataclass
class _Entries:
    """What the cut needs to know about a batch, read before the agreement.

    ``offsets``: host offsets of packed jagged entries, by key. ``by_rows``: the batch is a
    lazy stack along dim 0, cut by picking its rows (each row a TensorDict). ``apart``: the
    entries tensordict's own indexing cannot cut (nested and sparse tensors, lazy stacks
    along dim 0, dense tensors of a dtype some index kernel lacks), with how to cut each:
    ``"nested"``, ``"stack"``, ``"rows"`` (sparse and dense tensors, picked by rows).
    """

    offsets: dict[Any, list[int]] = field(default_factory=dict)
    by_rows: bool = False
    apart: list[tuple[Any, Any, str]] = field(default_factory=list)


def _entry_problem(key: Any, value: Any, entries: _Entries) -> PlanError | None:
    """Why entry ``key`` cannot be cut by rows, or ``None``; records how to cut it.
    ``NonTensorData`` (a scalar, kept) and ``NonTensorStack`` (picked by rows) are
    tensordict's to index, as are tensorclasses and other collections."""
    if _is_lazy_stack(value):
        if int(value.stack_dim) == 0:
            entries.apart.append((key, value, "stack"))
            return None
        # Cut by tensordict's indexing of every row, which needs its entries dense.
        try:
            dense = all(_is_dense(leaf) for leaf in value.values(include_nested=True, leaves_only=True))
        except _READ_ERRORS:
            dense = False
        return None if dense else EntryStack(key)
    if not isinstance(value, torch.Tensor):
        return None
    if _is_dense(value):
        if _carrier(value.dtype) is not value.dtype:  # rows copied as a signed integer's bits
            entries.apart.append((key, value, "rows"))
        return None
    sparse = value.layout == torch.sparse_coo or value.layout in _COMPRESSED
    if not (sparse or value.is_nested):
        return EntryLayout(key)
    if value.device.type == "meta":
        return EntryOnMeta(key)
    if value.layout in _COMPRESSED and (value.dim() != 2 or value.dense_dim() != 0):
        return EntryLayout(key)
    entries.apart.append((key, value, "rows" if sparse else "nested"))
    packed = value.layout == torch.jagged and getattr(value, "lengths")() is None  # noqa: B009
    if packed and key not in entries.offsets:
        entries.offsets[key] = getattr(value, "offsets")().tolist()  # noqa: B009 (nested-only API)
    return None


def _node_problem(
    node: TensorDictBase, prefix: tuple[str, ...], entries: _Entries
) -> tuple[PlanError | None, BaseException | None]:
    """:func:`_entry_problem` of every entry under ``node`` (keys nested under ``prefix``),
    with the exception that reading an entry raised
    (:class:`~seqlen_balancing.errors.EntryUnreadable`, its key)."""
    for name in list(node.keys()):
        key: Any = (*prefix, name) if prefix else name
        try:
            value = node.get(name)
            if isinstance(value, TensorDictBase) and not isinstance(
                value, (LazyStackedTensorDict, NonTensorData)
            ):
                error, cause = _node_problem(value, (*prefix, name), entries)
            else:
                error, cause = _entry_problem(key, value, entries), None
        except _READ_ERRORS as exc:
            return EntryUnreadable(key, detail=describe(exc)), exc
        if error is not None:
            return error, cause
    return None, None


def _cut_inputs(
    batch: TensorDict, known: dict[Any, list[int]]
) -> tuple[PlanError | None, _Entries, BaseException | None]:
    """Check every entry of ``batch`` before any rank commits to a plan (DESIGN: fail
    before the collective), and read what :func:`_cut` reads from the host.

    Every entry is one of the kinds the cut handles, or the error names its key:

    * dense tensors (any device, the meta device included, any strides, zero-size dims),
      ``NonTensorData`` (kept whole), ``NonTensorStack`` and other tensor collections:
      gathered by tensordict; a dense tensor of any dtype some index kernel lacks
      (uint16/32/64, float8, the sub-byte and bits dtypes) is picked apart, its rows
      copied as the signed integer of its element size (:func:`~seqlen_balancing.batch.kinds._select`);
    * nested tensors (strided or jagged, any ragged dimension, with or without holes):
      rebuilt from their rows; on the meta device they hold no rows
      (:class:`~seqlen_balancing.errors.EntryOnMeta`),
      and a packed jagged one has its offsets read here (one host copy per key, kept for
      the cut, ``known`` entries reused; a failure is :class:`~seqlen_balancing.errors.EntryUnreadable`);
    * sparse COO tensors (picked with ``index_select``) and 2-D CSR/CSC tensors (picked
      through COO); other sparse layouts are :class:`~seqlen_balancing.errors.EntryLayout` (TypeError);
    * lazy stacks along dim 0 (the batch itself or a nested entry): cut by picking rows,
      so their rows may differ in shape; a lazy stack along another dimension must hold
      dense entries of one shape, else :class:`~seqlen_balancing.errors.EntryStack` (TypeError).

    Returns ``(error, entries, cause)``; the error names the entry's key, so that it can be
    agreed on like any other batch problem.
    """
    entries = _Entries(offsets=dict(known))
    if _is_lazy_stack(batch) and int(batch.stack_dim) == 0:
        entries.by_rows = True  # each row is cloned whole: no entry is indexed
        return None, entries, None
    error, cause = _node_problem(batch, (), entries)
    return error, entries, cause
