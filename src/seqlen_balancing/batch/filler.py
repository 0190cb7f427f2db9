"""Zero-weight copies: dummy micro-batches and filler rows, their loss-weight keys checked first.

With ``dummy_micro_batches=True`` a rank whose samples (or forced groups) are fewer than the
agreed count runs the missing micro-batches as dummies, so that every rank makes the same
number of forward/backward passes (and so the same collectives: gradient syncs, pipeline
sends) while the gradients stay those of the real samples:

* a dummy is a copy of the rank's cheapest real row under the plan's rule (its cheapest
  forced group, with ``force_group_size > 1``; the fewest effective tokens on a tie), the
  cheapest pass the model can make on data it accepts; with ``padded=True`` it is cut to
  its own width, as every micro-batch is;
* every loss-weight entry of the dummy is zero (``torch.zeros_like``): by default those of
  ``loss_mask`` and ``response_mask`` the batch holds (verl's loss weights), else the keys
  the caller names (``loss_weight_keys``). A loss summed over weighted tokens, or divided
  by a token count taken from the real batch (verl's ``batch_num_tokens``), then gets
  nothing from a dummy, and neither do the gradients;
* dummies come last and their index list is empty (``[]``): concatenating the outputs of
  every micro-batch in order puts the dummies' rows after every real row, so verl's own
  restore (``torch.cat``, then ``get_reverse_idx`` of the flattened lists, which only holds
  real rows) gives back exactly the real rows, and
  :func:`~seqlen_balancing.batch.restore.restore_dynamic_batch` drops them.

The keys are checked before the agreement (named keys present and tensors; a batch with
no default key is an error), so a rank that cannot zero its dummies fails with its peers.

A rank with no samples under ``dummy_micro_batches=True`` still runs the agreed count of
micro-batches, every one a dummy (zero loss weights, an empty index list). A dummy needs a
row to copy: the first row of ``dummy_template`` (a TensorDict, or a DataProto on
``prepare_dynamic_batch``, with the batch's keys and dtypes), else one row built from the
batch's own entries when it has zero rows but known columns (dense entries of shape
``(0, ...)``: zeros of shape ``(1, ...)``, with one real token in ``attention_mask``'s first
column, the 1-token placeholder slime places); with nothing to build from, the rank's
agreed error is :class:`~seqlen_balancing.errors.NoDummyTemplate`. All of it is checked
before the agreement, so the cut after it cannot fail.

Filler rows (``equal_rows_per_micro_batch``): cut after the agreement, dropped on restore.

Every micro-batch holds the plan's rows ``R``: its real rows, then
:attr:`~seqlen_balancing.planning.rows.RowIndices.filler` rows of one token, each the first token of
one real row (:attr:`~seqlen_balancing.planning.rows.RowIndices.filler_row`: the rank's cheapest
sample, or padded the micro-batch's narrowest row; a dummy micro-batch is filler only):
a jagged ``input_ids`` row and every nested entry as long as it cut to its first element
along the ragged dimension, else ``attention_mask`` cut to its first real token (a padded
row keeps its width, which the cost counts anyway). So a filler row costs what the plan
counted for it (:func:`~seqlen_balancing.planning.rows.filler_cost`). Each filler
row's loss-weight entries are zero (``loss_mask`` and ``response_mask`` by default, or
``loss_weight_keys``; checked before the agreement as for dummies), so a loss summed over
weighted tokens gets nothing from it, and neither do the gradients. The index lists hold
the real rows only and carry the filler count, which
:func:`~seqlen_balancing.batch.restore.restore_dynamic_batch` reads to drop the filler rows'
outputs (it restores them as samples after the real ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from seqlen_balancing.batch.cut import _cut, _cut_inputs, _Entries
from seqlen_balancing.batch.kinds import _READ_ERRORS, _is_dense, _is_lazy_stack, _ragged_dim
from seqlen_balancing.batch.nested import _join_rows
from seqlen_balancing.batch.trim import Trim
from seqlen_balancing.errors import (
    DummyTemplateInvalid,
    LossWeightKeyMissing,
    LossWeightNotTensor,
    NoDummyTemplate,
    NoLossWeightEntry,
    PlanError,
)
from seqlen_balancing.planning.rows import RowIndices, empty_rank_plan

__all__ = ["DEFAULT_LOSS_WEIGHT_KEYS"]

#: The loss-weight entries a dummy zeroes by default: verl's, those the batch holds.
DEFAULT_LOSS_WEIGHT_KEYS = ("loss_mask", "response_mask")


def _loss_weight_keys(
    batch: TensorDict, named: tuple[str, ...] | None
) -> tuple[PlanError | None, tuple[str, ...]]:
    """The keys to zero in the dummies (``named``: the options' ``loss_weight_keys``, which
    :class:`~seqlen_balancing.PlanOptions` checked), or the error to agree on (before the
    agreement)."""
    keys = named or tuple(key for key in DEFAULT_LOSS_WEIGHT_KEYS if key in batch.keys())
    if not keys:
        return NoLossWeightEntry(), ()
    for key in keys:
        if key not in batch.keys():
            return LossWeightKeyMissing(key), ()
        try:
            # A lazy stack along dim 0 is cut (and zeroed) row by row: its rows may differ.
            tensors = all(isinstance(row.get(key), torch.Tensor) for row in _rows(batch))
        except _READ_ERRORS as exc:
            return LossWeightNotTensor(key, detail=repr(exc)[:80]), ()
        if not tensors:
            return LossWeightNotTensor(key), ()
    return None, keys


def _rows(batch: TensorDict) -> list[Any]:
    """The TensorDicts a loss weight is read from and zeroed in: a lazy stack along dim 0
    row by row, any other batch whole."""
    if _is_lazy_stack(batch) and int(getattr(batch, "stack_dim", 0)) == 0:
        return list(getattr(batch, "tensordicts"))  # noqa: B009 (lazy-stack-only API)
    return [batch]


def _zero_from(micro_batch: TensorDictBase, key: str, start: int) -> None:
    """Zero ``key`` in the rows ``start:`` of ``micro_batch`` (a copy: the input is never
    written): a dummy's whole entry and a lazy stack's rows replaced by zeros (any layout),
    filler rows in place (dense entries by a slice, nested ones row by row)."""
    parts = _rows(micro_batch)
    if parts[0] is not micro_batch or start == 0:
        for row in parts[start:]:
            row.set(key, torch.zeros_like(row.get(key)))
        return
    value = micro_batch.get(key)
    if value.is_nested:
        for row in value.unbind()[start:]:
            row.zero_()
    else:
        value[start:] = 0



def _cut_with_copies(
    batch: TensorDict, plan: list[list[int]], entries: _Entries, keys: tuple[str, ...],
    trim: Trim | None = None, pad: int = 1, dummy: Sequence[int] = (),
) -> tuple[list[TensorDict], list[list[int]], list[list[int]]]:
    """The micro-batches of ``plan`` with their zero-weight copies: an empty list (a dummy,
    above) holds copies of the ``dummy`` rows, a
    :class:`~seqlen_balancing.planning.rows.RowIndices` its filler rows after its real ones
    (cut to one token); those rows' ``keys`` zeroed. Returns the micro-batches, the index
    lists to return (the real rows: a dummy's empty, with the filler count) and the rows
    each micro-batch holds.

    With ``trim`` (``padded=True`` on a dense batch) every micro-batch, a dummy included,
    is cut to its own rows' width, and the index lists are
    :class:`~seqlen_balancing.batch.trim.MicroBatchIndices` that remember the cut.
    """
    rows = [list(part) + [getattr(part, "filler_row", -1)] * filler_of(part) for part in plan]
    rows = [held or list(dummy) for held in rows]  # an empty list is a dummy: the dummy rows
    if trim is None or not trim.dims:
        micro_batches = _cut(batch, rows, entries)
        returned: list[list[int]] = plan
    else:
        # The entries cut by width are not gathered whole: each micro-batch takes its columns.
        micro_batches = _cut(batch.exclude(*trim.dims), rows, entries)
        returned = list(trim.cut(micro_batches, batch, rows, pad))
        for indices, part in zip(returned, plan, strict=True):
            del indices[len(part):]  # the real rows only; the columns kept stay
            if isinstance(part, RowIndices):
                setattr(indices, "filler", part.filler)  # noqa: B010 (MicroBatchIndices has no field)
                setattr(indices, "filler_row", part.filler_row)  # noqa: B010
    for micro_batch, part, held in zip(micro_batches, plan, rows, strict=True):
        if len(held) == len(part):
            continue  # real rows only
        for key in keys:
            _zero_from(micro_batch, key, len(part))
        if filler_of(part):  # a lazy stack's filler rows one by one
            stack = _rows(micro_batch)
            for row in stack[len(part):] if stack[0] is not micro_batch else [micro_batch]:
                _one_token(row, 0 if row is not micro_batch else len(part))
    return micro_batches, returned, rows


def _one_token(batch: TensorDictBase, start: int) -> None:
    """Cut the rows ``start:`` of ``batch`` (filler rows, copies of a real row; a lazy
    stack's row alone: ``start`` 0, no batch dim) to their first token: where ``input_ids``
    is nested (jagged rows) every nested entry whose row is as long as its ``input_ids``
    row, to one element along the ragged dimension; else ``attention_mask``'s real tokens
    after the first, zeroed. Entries of other lengths (per-sample, not per-token) stay."""
    ids = batch.get("input_ids", None)
    if isinstance(ids, torch.Tensor) and ids.is_nested:
        dim = _ragged_dim(ids) - 1
        lengths = [int(row.shape[dim]) for row in ids.unbind()]
        for key in list(batch.keys(include_nested=True, leaves_only=True)):
            value = batch.get(key)
            if not (isinstance(value, torch.Tensor) and value.is_nested):
                continue
            # rows ``start:`` as long as their input_ids row (per token) cut to one element
            rows, along = list(value.unbind()), _ragged_dim(value) - 1
            cut = [j for j in range(start, len(rows)) if int(rows[j].shape[along]) == lengths[j] > 1]
            for j in cut:
                rows[j] = rows[j].narrow(along, 0, 1)
            if cut:
                batch.set(key, _join_rows(rows, list(range(len(rows))), value, {}))
        return
    if isinstance(ids, torch.Tensor) and batch.batch_dims == 0 and ids.dim():
        # a lazy stack's row: every entry as long as its input_ids (per token) cut to its
        # first real token (attention_mask's first non-zero)
        length = int(ids.shape[0])
        mask = batch.get("attention_mask", None)
        real = (mask != 0).nonzero() if isinstance(mask, torch.Tensor) and mask.shape == (length,) else None
        at = int(real[0, 0]) if real is not None and len(real) else 0
        for key in list(batch.keys(include_nested=True, leaves_only=True)):
            value = batch.get(key)
            if isinstance(value, torch.Tensor) and not value.is_nested and value.dim() > 0 and (
                value.shape[0] == length > 1
            ):
                batch.set(key, value[at:at + 1].clone())
        return
    mask = batch.get("attention_mask", None)
    if isinstance(mask, torch.Tensor) and not mask.is_nested and mask.dim() >= 1:
        tail = mask[start:] if batch.batch_dims else mask
        real = tail != 0
        later = real & (real.long().cumsum(-1) > 1)  # every real token after the row's first
        tail.masked_fill_(later, 0)


def filler_of(part: Sequence[int]) -> int:
    """The filler rows after the real ones of an index list (0 for a plain list)."""
    return int(getattr(part, "filler", 0) or 0)


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
    plan: list[list[int]] = (list(empty_rank_plan(count, agreed_rows)) if agreed_rows
                             else [[] for _ in range(count)])
    return micro_batches, plan, rows
