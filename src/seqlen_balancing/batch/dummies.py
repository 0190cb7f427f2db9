"""Dummy micro-batches: their loss-weight keys checked before the agreement, built after it.

With ``dummy_micro_batches=True`` a rank whose samples (or forced groups) are fewer than the
agreed count runs the missing micro-batches as dummies, so that every rank makes the same
number of forward/backward passes (and so the same collectives: gradient syncs, pipeline
sends) while the gradients stay those of the real samples:

* a dummy is a copy of the rank's shortest real row (its shortest forced group, with
  ``force_group_size > 1``), the cheapest pass the model can make on data it accepts;
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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from seqlen_balancing.batch.cut import _cut
from seqlen_balancing.batch.entries import _Entries
from seqlen_balancing.batch.kinds import _READ_ERRORS, _is_lazy_stack
from seqlen_balancing.errors import (
    LossWeightKeyMissing,
    LossWeightKeysNotKeys,
    LossWeightNotTensor,
    NoLossWeightEntry,
    PlanError,
)

__all__ = ["DEFAULT_LOSS_WEIGHT_KEYS"]

#: The loss-weight entries a dummy zeroes by default: verl's, those the batch holds.
DEFAULT_LOSS_WEIGHT_KEYS = ("loss_mask", "response_mask")


@dataclass(frozen=True)
class _Keep:
    """Issue 27's options of one call, as given (checked by the planner and here)."""

    workloads: Any = None
    over_cap: Any = "raise"
    dummy_micro_batches: Any = False
    loss_weight_keys: Any = None


def _loss_weight_keys(batch: TensorDict, named: Any) -> tuple[PlanError | None, tuple[str, ...]]:
    """The keys to zero in the dummies, or the error to agree on (before the agreement)."""
    if named is None:
        keys = tuple(key for key in DEFAULT_LOSS_WEIGHT_KEYS if key in batch.keys())
        if not keys:
            return NoLossWeightEntry(), ()
    elif isinstance(named, str):
        keys = (named,)
    elif isinstance(named, Sequence) and named and all(isinstance(k, str) for k in named):
        keys = tuple(named)
    else:
        return LossWeightKeysNotKeys(detail=f"got {type(named).__name__}"), ()
    for key in keys:
        if key not in batch.keys():
            return LossWeightKeyMissing(key), ()
        try:
            # A lazy stack along dim 0 is cut (and zeroed) row by row: its rows may differ.
            rows = _rows(batch)
            tensors = all(isinstance(row.get(key), torch.Tensor) for row in rows)
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


def _dummy_rows(lengths: list[int], group: int) -> list[int]:
    """The rows of the shortest forced group (the shortest row for ``group == 1``; the lowest
    index on a tie) in effective tokens."""
    starts = range(0, len(lengths), group)
    first = min(starts, key=lambda g: (sum(lengths[g : g + group]), g))
    return list(range(first, first + group))


def _cut_with_dummies(
    batch: TensorDict, plan: list[list[int]], entries: _Entries, lengths: list[int], group: int,
    keys: tuple[str, ...],
) -> tuple[list[TensorDict], list[list[int]]]:
    """The micro-batches of ``plan``, its empty lists (the dummies) cut as copies of the
    shortest group with ``keys`` zeroed; and the rows each micro-batch holds."""
    if all(plan):
        return _cut(batch, plan, entries), plan
    dummy = _dummy_rows(lengths, group)
    rows = [part if part else dummy for part in plan]
    micro_batches = _cut(batch, rows, entries)
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        if not part:
            for key in keys:
                for row in _rows(micro_batch):
                    row.set(key, torch.zeros_like(row.get(key)))
    return micro_batches, rows
