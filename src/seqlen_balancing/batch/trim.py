"""Padded micro-batches cut to their own width, and put back at the batch's width.

With ``padded=True`` (a micro-batch costs rows x its widest row, see
:mod:`seqlen_balancing.rule`) a micro-batch only holds what the plan says if it is cut
to its width: every dense entry with the batch's sequence dimension (the first dimension
after the batch dimension whose size is the ``attention_mask``'s width) keeps the columns
``[start, stop)`` that hold its rows' real tokens, on whichever side the mask pads
(left, right, or both, as verl's left-padded prompt plus right-padded response).

Each row ``i`` of the mask holds its real tokens in ``[first_i, stop_i)``. Around the
column ``anchor`` (the largest ``first_i``), a row spans ``left_i = anchor - first_i``
columns to the left and ``right_i = stop_i - anchor`` to the right; a micro-batch's window
is ``[min first, max stop)``, at most ``max left + max right`` wide, which is the width the
planner charges (exactly that when every row reaches the anchor, as one-sided and verl's
two-sided padding do), widened into pad columns up to a multiple of
``pad_to_multiple_of`` where the batch has room.

The index lists returned with the micro-batches are :class:`MicroBatchIndices`: plain
lists of sample indices that also remember the cut (the window, the batch's width, which
entries were cut along which dimension and the pad value each held), so that
:func:`restore_widths` (through ``restore_dynamic_batch``) can put outputs of each
micro-batch's width back at the batch's width with nothing else given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from seqlen_balancing._checks import describe
from seqlen_balancing.batch.kinds import _READ_ERRORS
from seqlen_balancing.cost import aligned_length
from seqlen_balancing.errors import LengthsUnreadable, PaddedLazyStack, PlanError

__all__ = ["MicroBatchIndices", "Trim", "restore_widths", "trim_inputs"]


class MicroBatchIndices(list):  # type: ignore[type-arg]
    """The sample indices of one micro-batch (a ``list`` of ints, unchanged for code that
    iterates it), and what cutting it to its width removed.

    Attributes:
        start, stop: the columns ``[start, stop)`` of the batch the micro-batch kept.
        width: the batch's width (columns of its ``attention_mask``).
        dims: the entries cut, each with the dimension cut (its sequence dimension).
        pad_values: each cut entry's pad value (what restoring writes outside the window).
        uncut: the batch's other entries (restoring leaves them as they are).
    """

    start: int
    stop: int
    width: int
    dims: dict[Any, int]
    pad_values: dict[Any, Any]
    uncut: frozenset[Any]

    def __init__(
        self,
        indices: Sequence[int],
        start: int,
        stop: int,
        width: int,
        dims: dict[Any, int] | None = None,
        pad_values: dict[Any, Any] | None = None,
        uncut: frozenset[Any] = frozenset(),
    ) -> None:
        super().__init__(indices)
        self.start, self.stop, self.width = start, stop, width
        self.dims = dict(dims or {})
        self.pad_values = dict(pad_values or {})
        self.uncut = uncut

    def __repr__(self) -> str:
        return (
            f"MicroBatchIndices({list(self)!r}, columns {self.start}:{self.stop} of {self.width})"
        )


def _mask_extents(mask: torch.Tensor) -> tuple[list[int], list[int], list[bool]]:
    """``(first, stop, any)`` of each row of a dense 2-D mask: its first and one past its
    last non-zero column, and whether it has one, in one device-to-host copy.

    Complexity: O(n * width) on the mask's device.
    """
    real = mask != 0
    width = int(mask.shape[1])
    if width == 0:
        n = int(mask.shape[0])
        return [0] * n, [0] * n, [False] * n
    has = real.any(dim=1)
    first = real.to(torch.uint8).argmax(dim=1)
    last = width - real.flip(1).to(torch.uint8).argmax(dim=1)
    packed = torch.stack([first, last, has.to(first.dtype)]).tolist()
    return packed[0], packed[1], [bool(x) for x in packed[2]]


def _extents(first: list[int], stop: list[int], has: list[bool]) -> tuple[int, list[int], list[int]]:
    """``(anchor, left, right)``: the anchor column (the largest first real column) and
    each row's span to its left and right (0 for rows without real tokens)."""
    anchor = max((f for f, h in zip(first, has, strict=True) if h), default=0)
    left = [max(anchor - f, 0) if h else 0 for f, h in zip(first, has, strict=True)]
    right = [max(s - anchor, 0) if h else 0 for s, h in zip(stop, has, strict=True)]
    return anchor, left, right


def _windows(
    plan: list[list[int]], first: list[int], stop: list[int], has: list[bool], anchor: int,
    width: int, pad: int,
) -> list[tuple[int, int]]:
    """Each micro-batch's kept columns ``[start, stop)``: the smallest window holding its
    rows' real tokens, widened to a multiple of ``pad`` (to the right first, then to the
    left) as far as the batch's ``width`` allows; ``(anchor, anchor)`` for rows with no
    real token."""
    out = []
    for part in plan:
        real = [i for i in part if has[i]]
        lo = min((first[i] for i in real), default=anchor)
        hi = max((stop[i] for i in real), default=anchor)
        wanted = min(aligned_length(hi - lo, pad), width)
        extra = wanted - (hi - lo)
        grow = min(extra, width - hi)
        hi += grow
        lo -= extra - grow
        out.append((lo, hi))
    return out


def _cut_dims(batch: TensorDictBase, width: int) -> dict[Any, int]:
    """The dense entries with the batch's sequence dimension, each with that dimension:
    the first after its TensorDict's batch dimensions whose size is ``width`` (a
    dimension that is a batch dimension of a nested TensorDict is never cut)."""
    found: dict[Any, int] = {}
    for key, value in batch.items(include_nested=True, leaves_only=True):
        if isinstance(value, (NonTensorData, NonTensorStack)) or not isinstance(value, torch.Tensor):
            continue
        if value.is_nested or value.layout != torch.strided:
            continue
        parent = batch.get(key[:-1]) if isinstance(key, tuple) and len(key) > 1 else batch
        for d in range(len(parent.batch_size), value.dim()):
            if int(value.shape[d]) == width:
                found[key] = d
                break
    return found


def _pad_values(batch: TensorDictBase, dims: dict[Any, int], row: int, column: int) -> dict[Any, Any]:
    """Each cut entry's value at one pad position ``(row, column)`` of the mask (the first
    element there), read to the host; entries on the meta device get 0."""
    values: dict[Any, Any] = {}
    for key, dim in dims.items():
        value = batch.get(key)
        if value.device.type == "meta":
            values[key] = 0
            continue
        picked = value[row].select(dim - 1, column)
        values[key] = picked.reshape(-1)[0].item() if picked.numel() else 0
    return values


def cut_to_width(
    micro_batches: list[Any], batch: TensorDictBase, plan: list[list[int]],
    kept: list[tuple[int, int]], dims: dict[Any, int],
) -> None:
    """Set each cut entry of each micro-batch to the input's rows of that micro-batch and
    its kept columns only (one ``index_select`` of a narrowed view: no full-width copy)."""
    values = {key: batch.get(key) for key in dims}
    for micro_batch, part, (lo, hi) in zip(micro_batches, plan, kept, strict=True):
        index: dict[torch.device, torch.Tensor] = {}  # one index per device and micro-batch
        for key, dim in dims.items():
            value = values[key]
            if value.device not in index:
                index[value.device] = torch.tensor(part, dtype=torch.long, device=value.device)
            micro_batch.set(key, value.narrow(dim, lo, hi - lo).index_select(0, index[value.device]))


def _widened(tensor: torch.Tensor, dim: int, indices: MicroBatchIndices, fill: Any) -> torch.Tensor:
    shape = list(tensor.shape)
    shape[dim] = indices.width
    out = torch.full(shape, fill, dtype=tensor.dtype, device=tensor.device)
    out.narrow(dim, indices.start, indices.stop - indices.start).copy_(tensor)
    return out


def _seq_dim(tensor: torch.Tensor, indices: MicroBatchIndices) -> int | None:
    kept = indices.stop - indices.start
    if tensor.is_nested or tensor.layout != torch.strided or kept == indices.width:
        return None
    return next((d for d in range(1, tensor.dim()) if int(tensor.shape[d]) == kept), None)


def restore_widths(parts: list[Any], lists: Sequence[Sequence[int]]) -> list[Any]:
    """``parts`` (one output per micro-batch) with every output cut to its micro-batch's
    width put back at the batch's width: the kept columns in place, each entry's pad value
    (0 for outputs the cut did not make) elsewhere. Outputs of other shapes and
    micro-batches that were not cut are returned as they are."""
    out = []
    for part, indices in zip(parts, lists, strict=True):
        if not isinstance(indices, MicroBatchIndices):
            out.append(part)
            continue
        if isinstance(part, torch.Tensor):
            dim = _seq_dim(part, indices)
            out.append(part if dim is None else _widened(part, dim, indices, 0))
            continue
        if isinstance(part, TensorDictBase):
            out.append(_widened_tensordict(part, indices))
            continue
        out.append(part)
    return out


def _widened_tensordict(part: TensorDictBase, indices: MicroBatchIndices) -> TensorDictBase:
    """A new TensorDict (the output is not changed) with every entry of the micro-batch's
    width widened: the entries the cut made along the dimension it cut, with the pad
    value they held; entries the batch did not have (model outputs) along their first
    dimension of that width, with 0; the batch's uncut entries as they are."""
    widened = part.empty(recurse=True)
    kept = indices.stop - indices.start
    for key, value in part.items(include_nested=True, leaves_only=True):
        dim = None
        if isinstance(value, torch.Tensor) and not isinstance(value, (NonTensorData, NonTensorStack)):
            cut = indices.dims.get(key)
            if cut is not None:
                fits = kept != indices.width and value.dim() > cut and int(value.shape[cut]) == kept
                dim = cut if fits else None
            elif key not in indices.uncut:
                dim = _seq_dim(value, indices)
        if dim is None:
            widened.set(key, value)
        else:
            tensor = cast(torch.Tensor, value)
            widened.set(key, _widened(tensor, dim, indices, indices.pad_values.get(key, 0)))
    return widened


@dataclass
class Trim:
    """What :func:`trim_inputs` read before the agreement for cutting to width.

    Attributes:
        first, stop, has: per row, its first and one past its last real column, and
            whether it has a real token.
        anchor: the shared column; ``left``/``right`` each row's span around it.
        width: the mask's width (columns).
        dims: the dense entries to cut, with their sequence dimension.
        pad_values: each one's pad value.
        uncut: the batch's other entries.
    """

    first: list[int]
    stop: list[int]
    has: list[bool]
    anchor: int
    left: list[int]
    right: list[int]
    width: int
    dims: dict[Any, int] = field(default_factory=dict)
    pad_values: dict[Any, Any] = field(default_factory=dict)
    uncut: frozenset[Any] = frozenset()

    def cut(
        self, micro_batches: list[Any], batch: TensorDictBase, plan: list[list[int]], pad: int
    ) -> list[MicroBatchIndices]:
        """Cut every entry of :attr:`dims` of each micro-batch to its window (nothing here
        raises for a batch :func:`trim_inputs` read) and return the index lists that
        remember it."""
        kept = _windows(plan, self.first, self.stop, self.has, self.anchor, self.width, pad)
        cut_to_width(micro_batches, batch, plan, kept, self.dims)
        return [
            MicroBatchIndices(part, lo, hi, self.width, self.dims, self.pad_values, self.uncut)
            for part, (lo, hi) in zip(plan, kept, strict=True)
        ]


def _pad_position(trim: Trim) -> tuple[int, int] | None:
    """A ``(row, column)`` the mask pads, or ``None`` when every position is real."""
    for row, (lo, hi, has) in enumerate(zip(trim.first, trim.stop, trim.has, strict=True)):
        if not has:
            return (row, 0) if trim.width else None
        if lo > 0:
            return row, 0
        if hi < trim.width:
            return row, trim.width - 1
    return None


def trim_inputs(
    batch: TensorDictBase, by_rows: bool
) -> tuple[PlanError | None, Trim | None, BaseException | None]:
    """Read, before the agreement, what cutting ``batch``'s micro-batches to their width
    needs: each row's real columns (one host copy of the mask's extents), the entries with
    the mask's width and their pad values. ``(None, None, None)`` for a batch whose length
    source is not a dense 2-D ``attention_mask`` (jagged rows have no width to cut).

    Returns ``(error, trim, cause)``: :class:`~seqlen_balancing.errors.PaddedLazyStack` for a
    lazy stack cut by rows (its rows may differ in width),
    :class:`~seqlen_balancing.errors.LengthsUnreadable` when the mask or a pad value cannot be
    read (the cause is returned for chaining).
    """
    keys = set(batch.keys())
    if "attention_mask" not in keys:
        return None, None, None
    if by_rows:
        return PaddedLazyStack(), None, None
    try:
        ids = batch.get("input_ids") if "input_ids" in keys else None
        if isinstance(ids, torch.Tensor) and ids.is_nested:
            return None, None, None
        mask = batch.get("attention_mask")
        if not isinstance(mask, torch.Tensor) or mask.is_nested or mask.layout != torch.strided:
            return None, None, None
        first, stop, has = _mask_extents(mask)
        anchor, left, right = _extents(first, stop, has)
        trim = Trim(first, stop, has, anchor, left, right, int(mask.shape[1]))
        trim.dims = _cut_dims(batch, trim.width)
        leaves = batch.keys(include_nested=True, leaves_only=True)
        trim.uncut = frozenset(key for key in leaves if key not in trim.dims)
        where = _pad_position(trim)
        if where is not None:
            trim.pad_values = _pad_values(batch, trim.dims, *where)
    except _READ_ERRORS as exc:
        return LengthsUnreadable(detail=describe(exc)), None, exc
    return None, trim, None
