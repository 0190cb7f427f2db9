"""Padded micro-batches cut to their own width, and put back at the batch's width.

With ``padded=True`` (a micro-batch costs rows x its widest row, see
:mod:`seqlen_balancing.planning.rule`) a micro-batch only holds what the plan says if it is cut
to its width: every dense entry with the batch's sequence dimension (the first dimension
after the batch dimension whose size is the ``attention_mask``'s width) keeps the columns
``[start, stop)`` that hold its rows' real tokens, on whichever side the mask pads
(left, right, or both, as verl's left-padded prompt plus right-padded response). verl's
narrower entries go with them: where the batch holds ``responses`` (else ``response_mask``)
``R < width`` columns wide, every dense entry with a dimension of size ``R`` spans the
mask's last ``R`` columns (``responses``, ``old_log_probs``, ``advantages``, ...) and
``prompts`` its first; each keeps the part of the window within its span, so that
``input_ids[:, -R':]`` is ``responses`` (``R'`` wide) in every micro-batch.

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
from typing import Any

import torch
from tensordict import TensorDictBase

from seqlen_balancing._checks import describe
from seqlen_balancing.batch.kinds import _READ_ERRORS, _carried, _is_dense, _select
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
        spans: the cut entries narrower than the mask, each with ``(offset, size)``: its
            columns are the mask's ``[offset, offset + size)`` (verl's response entries
            the last ``size``, its ``prompts`` the first); the others span the mask.
        response: the response window's ``(offset, size)`` (``None`` without one): outputs
            of its kept width (verl's per-token log-probs) are restored into it.
    """

    def __init__(self, indices: Sequence[int], start: int, stop: int, trim: Trim) -> None:
        super().__init__(indices)
        self.start, self.stop = start, stop
        self.width, self.response, self.uncut = trim.width, trim.response, trim.uncut
        self.dims, self.pad_values, self.spans = trim.dims, trim.pad_values, trim.spans

    def window(self, span: tuple[int, int] | None = None) -> tuple[int, int, int]:
        """``(start, stop, size)``: the columns kept of an entry spanning the mask's
        ``[offset, offset + size)`` (``span``; ``None``: the whole mask), in its own
        columns."""
        offset, size = span or (0, self.width)
        return _clamped(self.start, self.stop, offset, size)

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


def _clamped(start: int, stop: int, offset: int, size: int) -> tuple[int, int, int]:
    """The mask's columns ``[start, stop)`` in the columns of an entry spanning the mask's
    ``[offset, offset + size)``, clamped to it: ``(start, stop, size)``."""
    lo = min(max(start - offset, 0), size)
    return lo, max(lo, min(stop - offset, size)), size


def _response_window(batch: TensorDictBase, width: int) -> tuple[int, int] | None:
    """verl's response window ``(offset, size)`` in the mask's columns: its last ``size``,
    the width of ``responses`` (else ``response_mask``: dense, narrower than the mask), or
    ``None``."""
    for name in ("responses", "response_mask"):
        value = batch.get(name, None)
        if _is_dense(value) and value.dim() >= 2 and 0 < int(value.shape[1]) < width:
            return width - int(value.shape[1]), int(value.shape[1])
    return None


def _cut_dims(
    batch: TensorDictBase, width: int
) -> tuple[dict[Any, int], dict[Any, tuple[int, int]], tuple[int, int] | None]:
    """``(dims, spans, response)``: the dense entries with the batch's sequence dimension,
    each with that dimension, the first after its TensorDict's batch dimensions whose size
    is ``width`` (a dimension that is a batch dimension of a nested TensorDict is never
    cut); then, where the batch has verl's response window (``R`` columns,
    :func:`_response_window`), every other dense entry with a dimension of size ``R``,
    spanning the mask's last ``R`` columns, and verl's ``prompts`` (its first columns)."""
    found: dict[Any, int] = {}
    spans: dict[Any, tuple[int, int]] = {}
    response = _response_window(batch, width)
    for key, value in batch.items(include_nested=True, leaves_only=True):
        if not _is_dense(value):
            continue
        parent = batch.get(key[:-1]) if isinstance(key, tuple) and len(key) > 1 else batch
        sizes = [int(value.shape[d]) for d in range(len(parent.batch_size), value.dim())]
        first = len(parent.batch_size)
        if width in sizes:
            found[key] = first + sizes.index(width)
        elif response is not None and key == "prompts" and sizes and sizes[0] < width:
            found[key], spans[key] = first, (0, sizes[0])  # verl's left-padded prompts
        elif response is not None and response[1] in sizes:
            found[key], spans[key] = first + sizes.index(response[1]), response
    return found, spans, response


def _pad_values(batch: TensorDictBase, trim: Trim) -> dict[Any, Any]:
    """Each cut entry's value at one pad position of the mask within its span (the first
    element there), read to the host (a dtype some index kernel lacks: the bits of the
    signed integer of its size); entries on the meta device or without a pad position get 0."""
    values: dict[Any, Any] = dict.fromkeys(trim.dims, 0)
    for key, dim in trim.dims.items():
        value = batch.get(key)
        offset, size = trim.spans.get(key, (0, trim.width))
        where = _pad_position(trim, offset, size)
        if value.device.type == "meta" or where is None:
            continue
        picked = _carried(value)[where[0]].select(dim - 1, where[1] - offset)
        values[key] = picked.reshape(-1)[0].item() if picked.numel() else 0
    return values


def _widened(tensor: torch.Tensor, dim: int, window: tuple[int, int, int], fill: Any) -> torch.Tensor:
    """``tensor`` put back at its ``size`` columns along ``dim``: its own in the kept
    ``[start, stop)`` of ``window``, ``fill`` elsewhere (bit patterns carried, as cut)."""
    start, stop, size = window
    carried = _carried(tensor)
    shape = list(tensor.shape)
    shape[dim] = size
    out = torch.full(shape, fill, dtype=carried.dtype, device=tensor.device)
    out.narrow(dim, start, stop - start).copy_(carried)
    return out if carried is tensor else out.view(tensor.dtype)


def _seq_dim(
    tensor: torch.Tensor, indices: MicroBatchIndices, key: Any = None
) -> tuple[int, tuple[int, int, int]] | None:
    """The dimension of an output of the micro-batch's kept width, and the window it goes
    back into: an entry the cut made (``key``) along the dimension it cut, in its span;
    an entry the batch did not have (a model output) along its first of that width, in the
    mask's window, else the response window's (verl's log-probs); ``None`` for the batch's
    uncut entries and outputs of other widths."""
    cut = indices.dims.get(key)
    if cut is not None:
        start, stop, size = window = indices.window(indices.spans.get(key))
        fits = stop - start != size and tensor.dim() > cut and int(tensor.shape[cut]) == stop - start
        return (cut, window) if fits else None
    if key in indices.uncut or tensor.is_nested or tensor.layout != torch.strided:
        return None
    windows = [indices.window()] + ([indices.window(indices.response)] if indices.response else [])
    for start, stop, size in windows:
        if stop - start == size:
            continue  # nothing was cut there
        dim = next((d for d in range(1, tensor.dim()) if int(tensor.shape[d]) == stop - start), None)
        if dim is not None:
            return dim, (start, stop, size)
    return None


def _widen(value: Any, indices: MicroBatchIndices, key: Any = None) -> Any:
    """``value`` (an output, or entry ``key`` of one) put back at the batch's width where
    it has a micro-batch's kept width (:func:`_seq_dim`), with the entry's pad value (0
    for outputs the cut did not make); anything else as it is."""
    found = _seq_dim(value, indices, key) if isinstance(value, torch.Tensor) else None
    return value if found is None else _widened(value, *found, indices.pad_values.get(key, 0))


def restore_widths(parts: list[Any], lists: Sequence[Sequence[int]]) -> list[Any]:
    """``parts`` (one output per micro-batch) with every output cut to its micro-batch's
    width put back at the batch's width: the kept columns in place, each entry's pad value
    (0 for outputs the cut did not make) elsewhere; a TensorDict as a new one (the output
    is not changed), entry by entry. Outputs of other shapes and micro-batches that were
    not cut are returned as they are."""
    out = []
    for part, indices in zip(parts, lists, strict=True):
        if isinstance(indices, MicroBatchIndices) and isinstance(part, TensorDictBase):
            widened = part.empty(recurse=True)
            for key, value in part.items(include_nested=True, leaves_only=True):
                widened.set(key, _widen(value, indices, key))
            part = widened
        elif isinstance(indices, MicroBatchIndices):
            part = _widen(part, indices)
        out.append(part)
    return out


@dataclass
class Trim:
    """What :func:`trim_inputs` read before the agreement for cutting to width.

    Attributes:
        first, stop, has: per row, its first and one past its last real column, and
            whether it has a real token.
        anchor: the shared column; ``extents`` each row's ``(left, right)`` span around
            it (the planner's ``padded_extents``).
        width: the mask's width (columns).
        dims: the dense entries to cut, with their sequence dimension.
        pad_values: each one's pad value.
        uncut: the batch's other entries.
        spans: the narrow cut entries' ``(offset, size)`` in the mask's columns.
        response: the response window's ``(offset, size)``, or ``None``.
    """

    first: list[int]
    stop: list[int]
    has: list[bool]
    anchor: int
    extents: tuple[list[int], list[int]]
    width: int
    dims: dict[Any, int] = field(default_factory=dict)
    pad_values: dict[Any, Any] = field(default_factory=dict)
    uncut: frozenset[Any] = frozenset()
    spans: dict[Any, tuple[int, int]] = field(default_factory=dict)
    response: tuple[int, int] | None = None

    def cut(
        self, micro_batches: list[Any], batch: TensorDictBase, plan: list[list[int]], pad: int
    ) -> list[MicroBatchIndices]:
        """Set every entry of :attr:`dims` of each micro-batch to the input's rows of that
        micro-batch and its window's columns only, those within its span for a narrow entry
        (nothing here raises for a batch :func:`trim_inputs` read), and return the index
        lists that remember it."""
        values = {key: batch.get(key) for key in self.dims}
        kept: list[tuple[int, int]] = []
        for micro_batch, part in zip(micro_batches, plan, strict=True):
            # the smallest window holding the rows' real tokens ((anchor, anchor) for none),
            # widened to a multiple of ``pad``, to the right first, within the batch's width
            real = [i for i in part if self.has[i]]
            lo = min((self.first[i] for i in real), default=self.anchor)
            hi = max((self.stop[i] for i in real), default=self.anchor)
            extra = min(aligned_length(hi - lo, pad), self.width) - (hi - lo)
            grow = min(extra, self.width - hi)
            lo, hi = lo - (extra - grow), hi + grow
            kept.append((lo, hi))
            index: dict[torch.device, torch.Tensor] = {}  # one index per device and micro-batch
            for key, dim in self.dims.items():
                value = values[key]
                offset, size = self.spans.get(key, (0, int(value.shape[dim])))
                start, stop, _ = _clamped(lo, hi, offset, size)
                if value.device not in index:
                    index[value.device] = torch.tensor(part, dtype=torch.long, device=value.device)
                # an index_select of the kept columns' view: no full-width copy
                micro_batch.set(key, _select(value.narrow(dim, start, stop - start), index[value.device]))
        return [MicroBatchIndices(part, lo, hi, self) for part, (lo, hi) in zip(plan, kept, strict=True)]


def _pad_position(trim: Trim, offset: int, size: int) -> tuple[int, int] | None:
    """A ``(row, column)`` the mask pads within its columns ``[offset, offset + size)``, or
    ``None`` when every position there is real."""
    end = offset + size
    for row, (lo, hi, has) in enumerate(zip(trim.first, trim.stop, trim.has, strict=True)):
        if not has or lo > offset:
            return (row, offset) if size else None
        if hi < end:
            return row, end - 1
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
    if "attention_mask" not in batch.keys():
        return None, None, None
    if by_rows:
        return PaddedLazyStack(), None, None
    try:
        ids = batch.get("input_ids", None)
        if isinstance(ids, torch.Tensor) and ids.is_nested:
            return None, None, None
        mask = batch.get("attention_mask")
        if not _is_dense(mask):
            return None, None, None
        first, stop, has = _mask_extents(mask)
        # the anchor (the largest first real column) and each row's span to its left and
        # right of it (0 and 0 without real tokens; ``right`` negative for a row ending
        # before it, so that a micro-batch's max(left) + max(right) is still its rows' hull)
        anchor = max((f for f, h in zip(first, has, strict=True) if h), default=0)
        left = [anchor - f if h else 0 for f, h in zip(first, has, strict=True)]
        right = [s - anchor if h else 0 for s, h in zip(stop, has, strict=True)]
        trim = Trim(first, stop, has, anchor, (left, right), int(mask.shape[1]))
        trim.dims, trim.spans, trim.response = _cut_dims(batch, trim.width)
        trim.uncut = frozenset(key for key in batch.keys(include_nested=True, leaves_only=True)
                               if key not in trim.dims)
        trim.pad_values = _pad_values(batch, trim)
    except _READ_ERRORS as exc:
        return LengthsUnreadable(detail=describe(exc)), None, exc
    return None, trim, None
