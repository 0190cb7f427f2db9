"""DataProto glue: :func:`prepare_dynamic_batch` for objects shaped like verl's ``DataProto``.

DataProto glue: :func:`prepare_dynamic_batch` for any object with verl's ``DataProto``
shape (``.batch``, ``.non_tensor_batch``, ``.meta_info``, ``from_dict``), no import of verl.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from seqlen_balancing._checks import describe
from seqlen_balancing.batch.kinds import _READ_ERRORS, _is_lazy_stack
from seqlen_balancing.batch.micro_batches import _batch_problem, _rearrange_rows
from seqlen_balancing.errors import (
    DummyTemplateInvalid,
    MetaInfoNotCopyable,
    NonTensorNotArray,
    NonTensorRows,
    NotADataProto,
    PlanError,
    ProtoRaggedStack,
)
from seqlen_balancing.options import GroupOptionKeywords, PlanOptions, Unpack

__all__ = ["prepare_dynamic_batch"]


T = TypeVar("T")


def _dataproto_parts(data: Any) -> tuple[PlanError | None, dict[Any, Any], Any]:
    """``(error, non_tensor_batch, meta_info)`` of a DataProto-like ``data``, read before
    the agreement: why it cannot be cut (or ``None``), its non-tensor arrays as a dict, and
    a deep copy of its ``meta_info``. The cut after the agreement uses only these, so
    nothing about ``data`` is read (or can fail) once the peers have returned."""
    for attribute in ("batch", "non_tensor_batch", "meta_info", "from_dict"):
        if not hasattr(data, attribute):
            return NotADataProto(detail=f"no {attribute!r}"), {}, None
    problem = _batch_problem(data.batch)
    if problem is not None:
        return problem, {}, None
    if _is_lazy_stack(data.batch):  # from_dict gets one tensor per key: it must stack
        for key in list(data.batch.keys()):
            try:
                data.batch.get(key)
            except _READ_ERRORS:
                return ProtoRaggedStack(key), {}, None
    n = int(data.batch.batch_size[0])
    given = data.non_tensor_batch
    if not isinstance(given, Mapping):
        return NotADataProto(detail=f"non_tensor_batch is a {type(given).__name__}, not a dict"), {}, None
    try:
        arrays = dict(given.items())
    except _READ_ERRORS as exc:
        return NotADataProto(detail=describe(exc)), {}, None
    for array in arrays.values():
        if not isinstance(array, np.ndarray) or array.ndim == 0:
            return NonTensorNotArray(detail=f"got {describe(array)}"), {}, None
        if len(array) != n:
            return NonTensorRows(len(array), n), {}, None
    try:
        meta_info = copy.deepcopy(data.meta_info)
    except Exception as exc:  # any object's __deepcopy__ / __reduce_ex__
        return MetaInfoNotCopyable(detail=describe(exc)), {}, None
    return None, arrays, meta_info


def prepare_dynamic_batch(
    data: T,
    max_token_len: int,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
    *,
    options: PlanOptions | None = None,
    costs: Sequence[int] | torch.Tensor | Callable[[list[int]], Iterable[int]] | None = None,
    workloads: Sequence[int] | torch.Tensor | Callable[[list[int]], Iterable[int]] | None = None,
    group_ids: str | Sequence[Hashable] | torch.Tensor | None = None,
    dummy_template: Any = None,
    prefix_lengths: str | Sequence[int] | torch.Tensor | None = None,
    **option_keywords: Unpack[GroupOptionKeywords],
) -> tuple[list[T], list[list[int]]]:
    """:func:`rearrange_micro_batches` for a DataProto-like object (verl's DataProto).

    ``data`` needs ``.batch`` (TensorDict), ``.non_tensor_batch`` (dict of NumPy arrays,
    first axis = samples), ``.meta_info`` (dict) and a classmethod
    ``from_dict(tensors, non_tensors, meta_info=...)``. verl is not imported.
    ``options``, ``costs``, ``workloads`` and ``**option_keywords`` (keyword-only; the
    options of :class:`~seqlen_balancing.options.GroupOptionKeywords`, ``force_group_size``
    among them) are as in :func:`rearrange_micro_batches`: the cap holds on what the GPU
    holds (with ``padded`` the batch's dense entries of the mask's width come back cut to
    each micro-batch's width; the non-tensor arrays are per sample and are not cut), and a
    dummy's ``non_tensor_batch`` rows are those of the row it copies (its index list is
    empty).
    ``group_ids`` is as there too, and a string names a ``non_tensor_batch`` array first
    (verl's ``uid``), else an entry of ``batch``; ``prefix_lengths`` likewise (the tokens
    each sample shares with its group, counted once per micro-batch: docs/prefix.md);
    ``dummy_template`` is a DataProto-like object (its ``batch`` a TensorDict with at least
    one row) whose first row, tensors and non-tensor arrays, the dummies of a rank with no
    samples copy (a zero-row ``data`` without one: its own entries give one row of zeros).
    What ``type(data).from_dict`` itself raises passes through unchanged: it is the
    caller's class, called after the agreement with the micro-batches' parts.

    Returns:
        ``(micro_batches, micro_bsz_idx)``: objects of ``type(data)`` whose tensors and
        non-tensor arrays are the rows of each micro-batch, each with a deep copy of
        ``meta_info``; the index lists as :func:`rearrange_micro_batches` returns them.

    Raises:
        TypeError: ``data`` lacks one of the attributes above, its ``batch`` is not a
            TensorDict, ``non_tensor_batch`` is not a dict (mapping) or one of its entries
            is not a NumPy array, ``meta_info`` cannot be deep-copied, ``batch`` is a lazy
            stack whose rows differ in shape at some key (``from_dict`` takes one tensor
            per key; the message names it), or as
            :func:`rearrange_micro_batches` (under DP agreement, on every rank).
        ValueError: a ``non_tensor_batch`` array does not have one row per sample, or as
            :func:`rearrange_micro_batches` (under DP agreement, on every rank).

    Example:
        >>> from tensordict import TensorDict
        >>> class Proto:
        ...     def __init__(self, batch, non_tensor_batch, meta_info=None):
        ...         self.batch, self.non_tensor_batch = batch, non_tensor_batch
        ...         self.meta_info = meta_info or {}
        ...     @classmethod
        ...     def from_dict(cls, tensors, non_tensors, meta_info=None):
        ...         size = len(next(iter(tensors.values())))
        ...         return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)
        >>> td = TensorDict({"attention_mask": torch.ones(3, 4)}, batch_size=[3])
        >>> parts, idx = prepare_dynamic_batch(Proto(td, {"uid": np.array(["a", "b", "c"])}), 8)
        >>> [list(p.non_tensor_batch["uid"]) for p in parts] == [["abc"[i] for i in part] for part in idx]
        True
        >>> sorted(len(part) for part in idx)
        [1, 2]
    """
    source: Any = data
    problem, arrays, meta_info = _dataproto_parts(source)
    verl = {
        "num_batches_divided_by": num_batches_divided_by, "same_micro_num_in_dp": same_micro_num_in_dp,
        "min_num_micro_batch": min_num_micro_batch, "use_dynamic_bsz_balance": use_dynamic_bsz_balance,
    }
    given, options_error = PlanOptions.from_keywords(options, verl, option_keywords)
    if problem is None and isinstance(group_ids, str) and group_ids in arrays:
        group_ids = list(arrays[group_ids])
    if problem is None and isinstance(prefix_lengths, str) and prefix_lengths in arrays:
        prefix_lengths = list(arrays[prefix_lengths])
    template: Any = None
    if problem is None and dummy_template is not None and given.dummy_micro_batches:
        # its first row's arrays serve only a batch of no rows
        problem, template_arrays, _ = _dataproto_parts(dummy_template)
        if problem is None:
            template = dummy_template.batch
            arrays = arrays if int(source.batch.batch_size[0]) else template_arrays
        else:
            problem = DummyTemplateInvalid(0)
    elif problem is None and given.dummy_micro_batches and int(source.batch.batch_size[0]) == 0:
        arrays = {key: np.zeros((1, *value.shape[1:]), dtype=value.dtype) for key, value in arrays.items()}
    batches, plan, rows = _rearrange_rows(
        source.batch if problem is None else None, max_token_len, dp_group, given, options_error,
        problem, costs, workloads, same_micro_num_in_dp, group_ids, template, prefix_lengths,
    )
    out: list[T] = []
    for m, (micro_batch, indices) in enumerate(zip(batches, rows, strict=True)):
        tensors = {key: micro_batch[key] for key in micro_batch.keys()}
        non_tensors = {key: value[indices] for key, value in arrays.items()}
        # The copy checked before the agreement, then copies of it (copyable, as it was).
        own = meta_info if m == 0 else copy.deepcopy(meta_info)
        out.append(type(source).from_dict(tensors, non_tensors, meta_info=own))
    return out, plan
