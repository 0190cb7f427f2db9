"""Nested (jagged) tensors: row lengths, cheap building, rows, and micro-batch offsets.

Nested (jagged) tensors: row lengths, building a jagged tensor from its values and
offsets cheaply, its rows, and each micro-batch's offsets from one host copy.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Sequence
from typing import Any, cast

import torch

from seqlen_balancing.batch.kinds import _ragged_dim


def _jagged_row_lengths(tensor: torch.Tensor) -> torch.Tensor:
    """Tokens per row of a nested tensor: ``lengths()`` when the rows have holes, else the
    offsets' differences (jagged), else each row's first dimension (strided)."""
    if tensor.layout == torch.jagged:
        holes: torch.Tensor | None = getattr(tensor, "lengths")()  # noqa: B009 (not in stubs)
        if holes is not None:
            return holes
        return cast(torch.Tensor, getattr(tensor, "offsets")()).diff()  # noqa: B009
    return torch.tensor([row.shape[0] for row in tensor.unbind()], dtype=torch.int64)


#: torch's module of the jagged tensor class, or ``None`` where it is not as expected.
try:
    _JAGGED_INTERNALS: Any = importlib.import_module("torch.nested._internal.nested_tensor")
except ImportError:  # pragma: no cover (a torch without it takes the public path)
    _JAGGED_INTERNALS = None
if not all(hasattr(_JAGGED_INTERNALS, name) for name in ("NestedTensor", "_store_val_in_tensor")):
    _JAGGED_INTERNALS = None  # pragma: no cover


def _jagged(
    values: torch.Tensor, offsets: torch.Tensor, ragged_dim: int, sizes: Sequence[int]
) -> torch.Tensor:
    """A jagged nested tensor over ``values`` (rows joined along ``ragged_dim - 1``).

    ``values`` here is always a fresh copy made for one micro-batch, so when it needs no
    gradient the tensor is built directly from torch's jagged class (the public
    ``nested_tensor_from_jagged`` gives the same tensor as a view of ``values``, through
    a dispatched op that costs ~3x more: ~0.1 ms per micro-batch). With a gradient, under
    ``torch.compile`` or on a torch without that class, the public function is used.
    """
    low, high = min(sizes, default=0), max(sizes, default=0)
    internals = _JAGGED_INTERNALS
    if internals is None or values.requires_grad or torch.compiler.is_compiling():
        return torch.nested.nested_tensor_from_jagged(
            values, offsets, jagged_dim=ragged_dim, min_seqlen=low, max_seqlen=high
        )
    store = internals._store_val_in_tensor
    cache = {"min_seqlen": store(low), "max_seqlen": store(high)}
    return cast(torch.Tensor, internals.NestedTensor(
        values, offsets, _ragged_idx=ragged_dim, _metadata_cache=cache
    ))


def _rows_of(
    tensor: torch.Tensor, known_offsets: list[int] | None
) -> tuple[Sequence[torch.Tensor], list[int]]:
    """The rows of a jagged tensor (views) and their lengths along the ragged dimension.

    Packed tensors (no holes) are split from their values with host offsets, read once
    (or taken from ``known_offsets``); tensors with holes are unbound.
    """
    dim = _ragged_dim(tensor) - 1  # the ragged dimension of the values (and of each row)
    if getattr(tensor, "lengths")() is None:  # noqa: B009 (nested-only API)
        offsets = known_offsets or getattr(tensor, "offsets")().tolist()  # noqa: B009 (one host copy)
        sizes = [b - a for a, b in itertools.pairwise(offsets)]
        values = tensor.values().narrow(dim, offsets[0], offsets[-1] - offsets[0])
        return torch.split(values, sizes, dim=dim), sizes
    rows = tensor.unbind()
    return rows, [int(row.shape[dim]) for row in rows]


def _local_offsets(
    offsets: list[int],
    sizes: list[int],
    bounds: list[int],
    device: torch.device,
    shared: dict[tuple[int, torch.device, tuple[int, ...]], torch.Tensor],
) -> list[torch.Tensor]:
    """Each micro-batch's offsets (from 0), on ``device``: ``offsets`` and ``sizes`` are
    those of the rows in plan order and micro-batch ``m`` holds rows
    ``bounds[m]:bounds[m + 1]``.

    A micro-batch whose row lengths an earlier key had in it reuses that key's tensor
    (``shared``, keyed by micro-batch, device and lengths), as nested tensors built
    together share their offsets; the others are made in one host tensor and one copy to
    ``device``, then split.
    """
    keys = [
        (m, device, tuple(sizes[start:stop]))
        for m, (start, stop) in enumerate(itertools.pairwise(bounds))
    ]
    missing = [m for m, key in enumerate(keys) if key not in shared]
    if missing:
        host = [o - offsets[bounds[m]] for m in missing for o in offsets[bounds[m] : bounds[m + 1] + 1]]
        made = torch.tensor(host, dtype=torch.int64).to(device, non_blocking=True)
        pieces = torch.split(made, [bounds[m + 1] - bounds[m] + 1 for m in missing])
        for m, piece in zip(missing, pieces, strict=True):
            shared.setdefault(keys[m], piece)
    return [shared[key] for key in keys]


#: Offsets already made in one restore, by device and row lengths (see :func:`_join_rows`).
_SharedOffsets = dict[tuple[torch.device, tuple[int, ...]], torch.Tensor]


def _join_rows(
    rows: Sequence[torch.Tensor],
    order: list[int],
    like: torch.Tensor,
    shared: _SharedOffsets,
) -> torch.Tensor:
    """A nested tensor of ``rows`` taken in ``order``, with ``like``'s layout and ragged dim.

    With ``shared``, jagged tensors whose rows have the same lengths get one offsets tensor,
    as tensors built together do, so that they can be combined (``input_ids`` and
    ``position_ids`` of a restored TensorDict).
    """
    picked = [rows[i] for i in order]
    if like.layout != torch.jagged:
        return torch.nested.as_nested_tensor(picked, layout=like.layout)
    ragged_dim = _ragged_dim(like)
    sizes = [int(row.shape[ragged_dim - 1]) for row in picked]
    values = torch.cat(picked, dim=ragged_dim - 1)
    key = (values.device, tuple(sizes))
    if key not in shared:
        shared[key] = torch.tensor([0, *itertools.accumulate(sizes)], device=values.device)
    return _jagged(values, shared[key], ragged_dim, sizes)
