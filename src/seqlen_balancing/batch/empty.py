"""Group ids read from a batch, and the dummies of a rank that has no samples.

``group_ids`` on the TensorDict and DataProto paths is either the ids themselves (a list, a
1-D tensor or array) or the name of the batch's entry that holds them (verl keeps a
``uid`` per sample); :func:`_batch_group_ids` reads that entry before the agreement, and
:func:`_batch_prefix_lengths` reads ``prefix_lengths`` the same way.

A rank with no samples under ``dummy_micro_batches=True`` still runs the agreed count of
micro-batches, every one a dummy (zero loss weights, an empty index list). A dummy needs a
row to copy: the first row of ``dummy_template`` (a TensorDict, or a DataProto on
``prepare_dynamic_batch``, with the batch's keys and dtypes), else one row built from the
batch's own entries when it has zero rows but known columns (dense entries of shape
``(0, ...)``: zeros of shape ``(1, ...)``, with one real token in ``attention_mask``'s first
column, the 1-token placeholder slime places); with nothing to build from, the rank's
agreed error is :class:`~seqlen_balancing.errors.NoDummyTemplate`. All of it is checked
before the agreement, so the cut after it cannot fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from seqlen_balancing._checks import describe
from seqlen_balancing.batch.cut import _cut
from seqlen_balancing.batch.entries import _cut_inputs, _Entries
from seqlen_balancing.batch.filler import _loss_weight_keys, _zero_from
from seqlen_balancing.batch.kinds import _READ_ERRORS, _is_dense, _unwrapped
from seqlen_balancing.errors import (
    CallerDataRaised,
    DummyTemplateInvalid,
    GroupIdsKeyMissing,
    GroupIdsRaised,
    NoDummyTemplate,
    PlanError,
    PrefixLengthsKeyMissing,
)
from seqlen_balancing.planning.rows import empty_rank_plan

__all__: list[str] = []


def _batch_group_ids(batch: Any, group_ids: Any) -> tuple[PlanError | None, Any]:
    """``group_ids`` as the planner reads it: the batch's entry of that name when it is a
    string (a tensor, a ``NonTensorStack`` or a list per sample), else as given; or the
    error to agree on (no such entry, or reading it raised)."""
    return _batch_values(batch, group_ids, GroupIdsKeyMissing,
                         lambda raised, detail: GroupIdsRaised(raised, detail=detail))


def _batch_prefix_lengths(batch: Any, prefix_lengths: Any) -> tuple[PlanError | None, Any]:
    """``prefix_lengths`` as the planner reads them, as :func:`_batch_group_ids` reads ids."""
    return _batch_values(batch, prefix_lengths, PrefixLengthsKeyMissing,
                         lambda raised, detail: CallerDataRaised("prefix_lengths", raised,
                                                                 detail=detail))


def _batch_values(
    batch: Any, values: Any, missing: Callable[[str], PlanError],
    raised: Callable[[str, str], PlanError],
) -> tuple[PlanError | None, Any]:
    """Per-sample values given as themselves, or as the name of the batch's entry holding
    them (read here, before the agreement), or the error to agree on."""
    values = _unwrapped(values)
    if not isinstance(values, str):
        return None, values
    if not isinstance(batch, TensorDictBase) or values not in batch.keys():
        return missing(values), None
    try:
        value = batch.get(values)
        if isinstance(value, NonTensorData):
            value = value.data
        elif isinstance(value, NonTensorStack):
            value = value.tolist()
    except _READ_ERRORS as exc:
        return raised(type(exc).__name__, describe(exc)[:120]), None
    return None, value


@dataclass
class _EmptySource:
    """The one row an empty rank's dummies copy, its entries checked, and its loss-weight
    keys (:func:`_empty_inputs`)."""

    row: TensorDictBase
    entries: _Entries
    keys: tuple[str, ...]


def _one_row(batch: TensorDictBase) -> TensorDictBase | None:
    """One row built from a zero-row batch's own entries (zeros of each dense entry's
    shape and dtype, one real token in ``attention_mask``), or ``None`` when an entry
    gives nothing to build from (a nested or non-tensor per-sample entry, no columns)."""
    out: dict[Any, Any] = {}
    for key in batch.keys():
        value = batch.get(key)
        if isinstance(value, NonTensorData):
            out[key] = value
        elif _is_dense(value):
            out[key] = torch.zeros((1, *value.shape[1:]), dtype=value.dtype, device=value.device)
        else:
            return None
    mask = out.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.shape[1] == 0:
        return None
    mask[0, 0] = 1
    return TensorDict(out, batch_size=[1], device=batch.device)


def _empty_inputs(
    batch: Any, template: Any, named_keys: Any
) -> tuple[PlanError | None, _EmptySource | None]:
    """Before the agreement, on a rank with no samples under ``dummy_micro_batches``: the
    row its dummies copy (``template``'s first, else one built from ``batch``), checked,
    or the error to agree on."""
    if template is None:
        row = _one_row(batch) if isinstance(batch, TensorDictBase) else None
        if row is None:
            return NoDummyTemplate(), None
    elif not isinstance(template, TensorDictBase) or len(template.batch_size) == 0:
        return DummyTemplateInvalid(0), None
    elif int(template.batch_size[0]) == 0:
        return DummyTemplateInvalid(1), None
    else:
        try:
            row = template[0:1]
        except _READ_ERRORS:
            return DummyTemplateInvalid(3), None
    error, keys = _loss_weight_keys(row, named_keys)
    if error is not None:
        return (DummyTemplateInvalid(2) if template is not None else error), None
    error, entries, _ = _cut_inputs(row, {})
    if error is not None:
        return DummyTemplateInvalid(3), None
    return None, _EmptySource(row, entries, keys)


def _empty_cut(
    source: _EmptySource, count: int, agreed_rows: int = 0
) -> tuple[list[TensorDict], list[list[int]], list[list[int]]]:
    """The ``count`` dummies of an empty rank: copies of ``source.row`` with its loss
    weights zero (``agreed_rows`` copies each under ``equal_rows_per_micro_batch``, else
    one); their index lists (empty; under equal rows
    :class:`~seqlen_balancing.planning.rows.RowIndices` with ``agreed_rows`` filler rows, so that
    ``restore_dynamic_batch`` drops them) and the rows they copy (row 0 of the source)."""
    rows = [[0] * max(1, agreed_rows) for _ in range(count)]
    micro_batches = _cut(source.row, rows, source.entries)
    for micro_batch in micro_batches:
        for key in source.keys:
            _zero_from(micro_batch, key, 0)
    if agreed_rows:
        return micro_batches, list(empty_rank_plan(count, agreed_rows)), rows
    return micro_batches, [[] for _ in range(count)], rows
