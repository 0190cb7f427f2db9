"""Cutting a checked batch into micro-batches by the plan's row indices.

Cutting a checked batch into micro-batches by the plan's row indices (dense, nested,
sparse and lazy-stack entries); nothing here raises for a batch that passed the checks.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import cast

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from seqlen_balancing.batch.entries import _Entries
from seqlen_balancing.batch.kinds import _lazy_stack, _ragged_dim
from seqlen_balancing.batch.nested import _jagged, _local_offsets, _rows_of


def _pick_rows(tensor: torch.Tensor, how: str, rows: list[int]) -> torch.Tensor:
    """Rows ``rows`` of a sparse tensor (a copy), in its layout."""
    index = torch.tensor(rows, dtype=torch.long, device=tensor.device)
    if how == "coo":
        return tensor.index_select(0, index)
    picked = tensor.to_sparse(layout=torch.sparse_coo).index_select(0, index)
    return picked.to_sparse(layout=tensor.layout)


def _gathered(rest: TensorDictBase, order: list[int], identity: bool) -> TensorDictBase:
    """The rows of ``rest`` in ``order``: a copy even when nothing moves, so that writes
    into a micro-batch never reach the input."""
    return rest.clone() if identity else rest[torch.tensor(order, dtype=torch.long)]


def _cut(
    batch: TensorDict, plan: list[list[int]], entries: _Entries | None = None, copy: bool = True
) -> list[TensorDict]:
    """The micro-batches of ``plan``: copies of the batch's rows (as verl's index-select
    makes them), one gather of the batch in plan order, then a view each. With
    ``copy=False`` (the static path: ``plan`` is consecutive chunks) dense entries and
    lazy-stack rows are views of the input, as verl's ``chunk`` makes them.

    Dense tensors, ``NonTensorStack`` entries and nested TensorDicts are gathered by
    tensordict; scalar ``NonTensorData`` stays as it is. Jagged tensors keep their layout,
    ragged dimension, dtype and device: rows ragged in dim 1 are joined by one cat in plan
    order (no index tensor of every token) and sliced per micro-batch; rows ragged in a
    later dim (``(C, length)`` rows) are joined per micro-batch. Offsets come from the
    host (read once per key, or from ``entries``), so no device-to-host copy happens
    per micro-batch, and keys with the same row lengths share one offsets tensor per
    micro-batch, as tensors built together do. Strided nested tensors are rebuilt from
    their rows, sparse tensors picked by ``index_select`` (CSR/CSC through COO), and
    lazy stacks along dim 0 (the batch or an entry) by picking their rows.

    Nothing here raises for a batch :func:`_cut_inputs` passed: every entry kind it lets
    through has its cutting below.
    """
    entries = entries or _Entries()
    if entries.by_rows:
        rows = list(cast(LazyStackedTensorDict, batch).tensordicts)
        parts = [_lazy_stack([rows[i] for i in part]) for part in plan]
        return [part.clone() if copy else part for part in parts]
    order = [i for part in plan for i in part]
    bounds = [0, *itertools.accumulate(len(part) for part in plan)]
    apart = entries.apart
    rest = batch.exclude(*(key for key, _, _ in apart)) if apart else batch
    identity = order == list(range(len(order)))
    permuted = _gathered(rest, order, identity) if copy else rest
    # One split (views of the gathered copy): ~2x faster than a slice per micro-batch.
    micro_batches = list(permuted.split([len(part) for part in plan], dim=0))
    shared_offsets: dict[tuple[int, torch.device, tuple[int, ...]], torch.Tensor] = {}
    for key, value, how in apart:
        if how == "stack":
            stack_rows = list(value.tensordicts)
            for micro_batch, part in zip(micro_batches, plan, strict=True):
                picked_stack = _lazy_stack([stack_rows[i] for i in part])
                micro_batch.set(key, picked_stack.clone() if copy else picked_stack)
            continue
        if how != "nested":
            for micro_batch, part in zip(micro_batches, plan, strict=True):
                micro_batch.set(key, _pick_rows(value, how, part))
            continue
        tensor = value
        if tensor.layout != torch.jagged:
            strided_rows = tensor.unbind()
            for micro_batch, part in zip(micro_batches, plan, strict=True):
                picked = [strided_rows[i] for i in part]
                micro_batch.set(key, torch.nested.as_nested_tensor(picked, layout=tensor.layout))
            continue
        ragged_dim = _ragged_dim(tensor)
        given = entries.offsets.get(key)
        joined: torch.Tensor | None
        if identity and ragged_dim == 1 and getattr(tensor, "lengths")() is None:  # noqa: B009
            # Rows already in plan order: one copy of the token range, no split and cat.
            offsets = given or getattr(tensor, "offsets")().tolist()  # noqa: B009
            sizes = [b - a for a, b in itertools.pairwise(offsets)]
            joined = tensor.values()[offsets[0] : offsets[-1]].clone()
            rows_of: Sequence[torch.Tensor] = ()
        else:
            rows_of, row_sizes = _rows_of(tensor, given)
            sizes = [row_sizes[i] for i in order]
            joined = torch.cat([rows_of[i] for i in order]) if ragged_dim == 1 else None
        new_offsets = [0, *itertools.accumulate(sizes)]
        local = _local_offsets(new_offsets, sizes, bounds, tensor.device, shared_offsets)
        for m, (micro_batch, part) in enumerate(zip(micro_batches, plan, strict=True)):
            start, stop = bounds[m], bounds[m + 1]
            first, last = new_offsets[start], new_offsets[stop]
            if joined is not None:
                values = joined[first:last]
            else:
                values = torch.cat([rows_of[i] for i in part], dim=ragged_dim - 1)
            micro_batch.set(key, _jagged(values, local[m], ragged_dim, sizes[start:stop]))
    return micro_batches
