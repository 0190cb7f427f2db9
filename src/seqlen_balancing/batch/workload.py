"""verl's workload ``24576*s + s**2`` on tensors, lists and arrays (:func:`calculate_workload`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from seqlen_balancing.planning.partition import WORKLOAD_LINEAR_COEF

__all__ = ["calculate_workload"]


#: Largest length whose workload ``24576*s + s**2`` fits in int64.
_MAX_WORKLOAD_LENGTH = math.isqrt((WORKLOAD_LINEAR_COEF // 2) ** 2 + 2**63 - 1) - (
    WORKLOAD_LINEAR_COEF // 2
)


def calculate_workload(seqlen_list: torch.Tensor | Sequence[int] | Any) -> Any:
    """verl's per-sequence cost ``24576*s + s**2``, for every length of ``seqlen_list``.

    Args:
        seqlen_list: sequence lengths in tokens, shape ``(n,)`` or a scalar: a tensor of any
            integer or float dtype (verl's SFT trainer passes ``torch.Tensor([...])``, which
            is float32), a NumPy array or scalar, or a list of whole numbers.

    Returns:
        A float tensor for a float tensor, computed in its dtype exactly as verl computes
        it (bit-identical); an int64 tensor for integer input or a list (never overflows,
        where verl's int32 arithmetic would), on the input's device. NumPy input gives
        NumPy output of the same rule (float dtype kept, integers as int64).

    Raises:
        TypeError: bool, complex, nested or non-numeric input, or a tensor that cannot be
            read (``seqlen_list cannot be read``: e.g. on the meta device).
        ValueError: a negative length, a length that is not a whole number (``2.5``,
            ``nan``, ``inf``; the message names its index and value), or one above
            ~3.04e9 tokens (the int64 workload would overflow).

    Complexity: O(n), one device-to-host copy of three flags.

    References:
        verl 0.9.1 ``calculate_workload`` (the cost model of a 7B dense transformer:
        ``12 h**2 s + 2 h s**2`` with ``h = 4096``, divided by ``2 h``).

    Example:
        >>> calculate_workload(torch.tensor([1000], dtype=torch.int32)).tolist()
        [25576000]
        >>> calculate_workload(torch.Tensor([5.0, 7.0]))
        tensor([122905., 172081.])
    """
    if isinstance(seqlen_list, torch.Tensor) and seqlen_list.is_nested:
        raise TypeError("seqlen_list must be a dense tensor or list of lengths, got a nested tensor")
    from_numpy = type(seqlen_list).__module__ == "numpy"
    try:
        lengths = torch.as_tensor(seqlen_list)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        _check_python_ints(seqlen_list)  # an int beyond int64 is a ValueError, as documented
        raise TypeError(f"seqlen_list must be a tensor or list of integer lengths: {exc}") from None
    if lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"seqlen_list must hold whole token counts, got dtype {lengths.dtype}")
    if lengths.device.type == "meta":
        raise TypeError("seqlen_list cannot be read: it is on the meta device, which holds no data")
    try:
        return _workload(lengths, seqlen_list, from_numpy)
    except (RuntimeError, NotImplementedError) as exc:  # a tensor torch cannot read back
        raise TypeError(f"seqlen_list cannot be read: {exc}") from None


def _workload(lengths: torch.Tensor, seqlen_list: Any, from_numpy: bool) -> Any:
    """:func:`calculate_workload` of ``lengths`` (``seqlen_list`` as a tensor)."""
    if lengths.numel() == 0:
        given_float = lengths.dtype.is_floating_point and (
            isinstance(seqlen_list, torch.Tensor) or from_numpy
        )
        # an empty list holds no floats
        work = torch.zeros(lengths.shape, dtype=lengths.dtype if given_float else torch.int64,
                           device=lengths.device)
    elif lengths.dtype.is_floating_point:
        _check_whole(lengths)
        work = WORKLOAD_LINEAR_COEF * lengths + lengths**2  # verl's expression, in verl's dtype
    else:
        unsigned = not lengths.dtype.is_signed
        lengths = lengths.to(torch.int64)
        low, high = torch.stack(list(torch.aminmax(lengths))).tolist()
        if low < 0 and unsigned:  # uint64 values from 2**63 up wrap to negatives, in order
            high = int(lengths[lengths < 0].max()) + 2**64
        elif low < 0:
            _check_whole(lengths)  # names the first negative length
        if high > _MAX_WORKLOAD_LENGTH:
            raise ValueError(
                f"seqlen_list holds a length of {high} tokens; the workload overflows int64 "
                f"above {_MAX_WORKLOAD_LENGTH} tokens"
            )
        work = WORKLOAD_LINEAR_COEF * lengths + lengths * lengths
    # numpy in, numpy out: a 0-d result as a numpy scalar (``[()]`` of an array is the array)
    return work.numpy()[()] if from_numpy else work


def _check_python_ints(values: Any) -> None:
    """Raise naming a Python int of ``values`` (an int, or a flat list or tuple) that is
    negative or too long for a workload: torch refuses ints beyond int64 before any check."""
    flat = [values] if isinstance(values, int) else values
    if not isinstance(flat, (list, tuple)):
        return
    ints = [(i, v) for i, v in enumerate(flat) if isinstance(v, int) and not isinstance(v, bool)]
    for index, value in ints:
        if value < 0:
            raise ValueError(
                f"seqlen_list[{index}] is {value!r}, a negative length; lengths must be whole "
                "numbers of tokens >= 0"
            )
    high = max((v for _, v in ints), default=0)
    if high > _MAX_WORKLOAD_LENGTH:
        raise ValueError(
            f"seqlen_list holds a length of {high} tokens; the workload overflows int64 "
            f"above {_MAX_WORKLOAD_LENGTH} tokens"
        )


def _check_whole(lengths: torch.Tensor) -> None:
    """Raise naming the first length that is negative, not whole or not finite."""
    flat = lengths.reshape(-1)
    bad = flat < 0
    if flat.dtype.is_floating_point:
        bad |= ~torch.isfinite(flat) | (flat != flat.trunc())
    if not bool(bad.any()):  # one host copy on the common path
        return
    first = int(torch.argmax(bad.to(torch.uint8)))
    value = flat[first].item()
    problem = "a negative length" if value < 0 else "not a whole number"
    raise ValueError(
        f"seqlen_list[{first}] is {value!r}, {problem}; lengths must be whole numbers of "
        "tokens >= 0"
    )
