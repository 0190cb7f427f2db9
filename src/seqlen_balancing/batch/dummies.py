"""Dummy micro-batches: their loss-weight keys checked before the agreement, built after it.

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
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from seqlen_balancing.batch.kinds import _READ_ERRORS, _is_lazy_stack
from seqlen_balancing.errors import (
    LossWeightKeyMissing,
    LossWeightNotTensor,
    NoLossWeightEntry,
    PlanError,
)

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
