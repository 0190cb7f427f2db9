"""What kind of entry a batch value is, and the facts about each kind the rooms share.

What kind of entry a batch value is (dense, jagged or strided nested, sparse, lazy stack,
non-tensor data), and small facts about each kind that the other rooms share.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, NonTensorData, NonTensorStack, TensorDictBase


def _batch_size(batch: Any) -> int:
    size = getattr(batch, "batch_size", None)
    if size is None or len(size) == 0:
        raise TypeError(
            f"batch must be a TensorDict with a batch dimension, got {type(batch).__name__}"
            f" with batch_size={size!r}"
        )
    return int(size[0])


def _ragged_dim(tensor: torch.Tensor) -> int:
    """The nested dimension whose size varies by row (1 for ``(n, j, ...)``; verl's
    multi-modal ``position_ids`` use 2: rows of shape ``(C, length)``)."""
    return int(getattr(tensor, "_ragged_idx", 1))


#: The dtypes whose rows torch's index kernels copy on every device and path (index_select,
#: advanced indexing, full, copy_).
_INDEXED = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
})

#: Quantized dtypes: their tensors hold a scale besides the bits, so they keep their own dtype.
_QUANTIZED = frozenset(getattr(torch, name) for name in
                       ("qint8", "quint8", "qint32", "quint4x2", "quint2x4") if hasattr(torch, name))

#: The signed integer of each element size, which carries the bits of the other dtypes.
_SIGNED = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _carrier(dtype: torch.dtype) -> torch.dtype:
    """The dtype a tensor's rows are copied as: its own, or for a dtype some index kernel
    lacks (uint16/32/64 for 1-D ``index_select``, float8, the sub-byte and bits dtypes for
    every index kernel) the signed integer of its size, which holds the same bits."""
    if dtype in _INDEXED or dtype in _QUANTIZED:
        return dtype
    return _SIGNED.get(dtype.itemsize, dtype)


def _carried(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` viewed as its :func:`_carrier` dtype (itself where that is its own)."""
    carrier = _carrier(tensor.dtype)
    return tensor if carrier is tensor.dtype else tensor.view(carrier)


def _select(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of a dense tensor (a copy, bit for bit), whatever its dtype."""
    carried = _carried(tensor)
    picked = carried.index_select(0, index)
    return picked if carried is tensor else picked.view(tensor.dtype)


#: Sparse layouts whose rows are picked through the COO layout (2-D, no dense dimensions).
_COMPRESSED = (torch.sparse_csr, torch.sparse_csc)


def _is_lazy_stack(value: Any) -> bool:
    """A LazyStackedTensorDict (NonTensorStack, one of them, is cut by tensordict)."""
    return isinstance(value, LazyStackedTensorDict) and not isinstance(value, NonTensorStack)


def _is_dense(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.layout == torch.strided and not value.is_nested


def _lazy_stack(rows: list[TensorDictBase]) -> TensorDictBase:
    """A lazy stack of ``rows`` along dim 0 (``lazy_stack`` where tensordict has it)."""
    stack = getattr(LazyStackedTensorDict, "lazy_stack", None)
    if stack is not None:
        return cast(TensorDictBase, stack(rows, 0))
    return LazyStackedTensorDict(*rows, stack_dim=0)  # pragma: no cover (older tensordict)


#: What reading a foreign object may raise; under agreement it becomes an agreed error.
_READ_ERRORS = (
    AttributeError, IndexError, KeyError, NotImplementedError, OverflowError, RuntimeError,
    TypeError, ValueError,
)


def _key_name(key: Any) -> str:
    return key if isinstance(key, str) else ".".join(str(part) for part in key)


def _kind(tensor: torch.Tensor) -> str:
    if not tensor.is_nested:
        return "a dense tensor" if tensor.layout == torch.strided else f"a {tensor.layout} tensor"
    if tensor.layout != torch.jagged:
        return "a strided nested tensor"
    return f"a jagged nested tensor ragged in dim {_ragged_dim(tensor)}"


def _unwrapped(value: Any) -> Any:
    """What a ``NonTensorData`` holds (per-sample data or a setting, read as the batch's
    own entry is); any other value as it is."""
    return value.data if isinstance(value, NonTensorData) else value


def _is_node(value: Any) -> bool:
    """A TensorDict entry holding entries of its own (not non-tensor data)."""
    return isinstance(value, TensorDictBase) and not isinstance(value, (NonTensorData, NonTensorStack))


def _same_data(a: Any, b: Any) -> bool:
    """Whether two ``NonTensorData`` payloads are the same value (arrays and tensors
    compared element by element; their truth value is ambiguous)."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        alike = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and (
            (a.shape, a.dtype, a.device, a.layout) == (b.shape, b.dtype, b.device, b.layout))
        if not alike or a.device.type == "meta":
            return alike  # on the meta device: no data to differ
        try:
            return bool(torch.equal(a.to_dense(), b.to_dense()))
        except (RuntimeError, NotImplementedError, TypeError):
            return False
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
            and bool(np.array_equal(a, b))
        )
    try:
        return bool(a == b)
    except Exception:  # any __eq__ / __bool__ of a foreign object
        return False


def _per_row(value: Any) -> list[Any]:
    tolist = getattr(value, "tolist", None)
    if not callable(tolist):
        raise TypeError(f"cannot restore a {type(value).__name__} entry row by row")
    return cast(list[Any], tolist())
