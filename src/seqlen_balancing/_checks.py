"""Argument checks shared by the public functions (pure Python, no torch import).

Each check either returns the normalised value or raises ``TypeError`` (wrong type) or
``ValueError`` (right type, value not allowed) with a message naming the parameter, the
value and what is allowed.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

#: The one spelling rule of every switch variable (case-insensitive, spaces around ignored;
#: empty is off): here, below every room that reads one (seqlen_balancing.options checks them).
SWITCH_ON = ("1", "true", "yes", "on")
SWITCH_OFF = ("0", "false", "no", "off", "")


def _item(value: Any) -> Any:
    """The scalar a one-element tensor or array holds (its ``.item()``), or ``None`` where
    ``value`` has no ``item``, holds another number of elements or cannot be read."""
    item = getattr(value, "item", None)
    if item is None:
        return None
    numel = value.numel() if callable(getattr(value, "numel", None)) else getattr(value, "size", 0)
    if numel != 1:
        return None
    try:
        return item()
    except (RuntimeError, NotImplementedError, ValueError):  # e.g. a tensor on the meta device
        return None


def _integer_or_none(value: Any) -> int | None:
    """Return ``value`` as a Python int if it is an integer (not a bool), else ``None``.

    Accepts Python and NumPy integers and one-element integer tensors/arrays (anything with
    ``.numel()``/``.size`` of 1, an integer ``dtype`` and ``.item()``).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    dtype = getattr(value, "dtype", None)
    torch_integer = getattr(dtype, "is_floating_point", True) is False and getattr(
        dtype, "is_complex", True
    ) is False
    integer_dtype = torch_integer or str(dtype).startswith(("int", "uint"))
    if dtype is None or not integer_dtype or str(dtype) in ("torch.bool", "bool"):
        return None
    scalar = _item(value)
    return int(scalar) if isinstance(scalar, numbers.Integral) else None


def closest_name(word: str, names: Iterable[str], prefix: str = "") -> str | None:
    """The name of ``names`` that ``word`` most likely misspells, or ``None``. Compared
    case aside and without ``prefix`` (which every name shares): a name that holds the word
    whole wins (one that starts with it first, then the shortest: ``EQUAL_ROWS`` is
    ``EQUAL_ROWS_PER_MICRO_BATCH``), then one the word holds whole (the longest), then
    difflib's closest (ratio at least 0.6), which alone would take ``EQUAL_ROWS`` for ``VERL``.

    Example:
        >>> closest_name("X_EQUAL_ROWS", ["X_VERL", "X_EQUAL_ROWS_PER_MICRO_BATCH"], "X_")
        'X_EQUAL_ROWS_PER_MICRO_BATCH'
    """
    def bare(name: str) -> str:
        return (name[len(prefix):] if name.startswith(prefix) else name).lower()

    by_bare = {bare(name): name for name in names}
    key = bare(word)
    if len(key) >= 3:  # a letter or two lies inside too many names to say which
        holding = sorted((not b.startswith(key), len(b), b) for b in by_bare if key in b)
        if holding:
            return by_bare[holding[0][2]]
        held = sorted((-len(b), b) for b in by_bare if len(b) >= 3 and b in key)
        if held:
            return by_bare[held[0][1]]
    close = difflib.get_close_matches(key, list(by_bare), n=1)
    return by_bare[close[0]] if close else None


def as_switch(value: Any) -> bool | None:
    """``value`` as a bool if it is a switch (a bool, NumPy/torch bool scalar, or 0/1), else
    ``None``."""
    if isinstance(value, bool):
        return value
    if str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        scalar = _item(value)
        return None if scalar is None else bool(scalar)
    as_int = _integer_or_none(value)
    return bool(as_int) if as_int in (0, 1) else None


def switch(value: Any, name: str) -> bool:
    """Return the on/off flag ``value`` as a bool, as :func:`as_switch` reads it.

    Raises:
        TypeError: ``value`` is not a bool, a NumPy/torch bool scalar or 0/1 (the string
            ``"False"``, a multi-element tensor, ``None``).
    """
    as_bool = as_switch(value)
    if as_bool is None:
        raise TypeError(f"{name} must be a bool (or 0/1), got {describe(value)}; pass True or False")
    return as_bool


def integer(value: Any, name: str) -> int:
    """Return ``value`` as a Python int (Python/NumPy ints, one-element integer tensors).

    Raises:
        TypeError: ``value`` is not an integer (a float, a bool, a string, a multi-element
            tensor).
    """
    as_int = _integer_or_none(value)
    if as_int is None:
        raise TypeError(f"{name} must be an integer, got {describe(value)}")
    return as_int


def describe(value: Any) -> str:
    """A short, safe description of ``value`` for an error message."""
    if isinstance(value, float) and math.isnan(value):
        return "nan (float)"
    try:
        text = repr(value)
    except (AttributeError, NotImplementedError, RuntimeError, TypeError, ValueError):
        text = "<unprintable>"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def positive_int(value: Any, name: str) -> int:
    """Return ``value`` as an int >= 1.

    Raises:
        TypeError: ``value`` is not an integer (bools, floats, strings, multi-element or
            floating-point tensors are refused).
        ValueError: ``value`` is an integer below 1.
    """
    as_int = _integer_or_none(value)
    if as_int is None:
        raise TypeError(
            f"{name} must be a positive integer, got {describe(value)}; pass an int >= 1"
        )
    if as_int < 1:
        raise ValueError(f"{name} must be a positive integer (>= 1), got {as_int}")
    return as_int


def non_negative_ints(
    values: Iterable[Any], name: str, what: str = "lengths and workloads", *, whole: bool = False
) -> list[int]:
    """Return ``values`` as a list of non-negative Python ints; ``whole=True`` (for
    :func:`whole_numbers`) takes whole real numbers too.

    Raises:
        TypeError: an element is not an integer (floats and bools are refused), or with
            ``whole`` not a real number.
        ValueError: an element is negative (or with ``whole`` not whole); the message gives
            its index and value.
    """
    out: list[int] = []
    for index, value in enumerate(values):
        number = value if type(value) is int else (_whole_or_none if whole else _integer_or_none)(value)
        if number is None:
            wanted = "a whole number" if whole else "an integer"
            raise TypeError(f"{name}[{index}] must be {wanted}, got {describe(value)}")
        if isinstance(number, float):
            raise ValueError(
                f"{name}[{index}] is {number!r}, not a whole number; {what} must be whole "
                "numbers >= 0 (round or truncate them first)"
            )
        if number < 0:
            raise ValueError(f"{name}[{index}] is {number}; {what} must be >= 0")
        out.append(number)
    return out


def k_partitions_in_range(k_partitions: Any, n_items: int, what: str = "items") -> int:
    """Return ``k_partitions`` as an int in ``1..n_items``.

    Raises:
        TypeError: ``k_partitions`` is not an integer.
        ValueError: ``k_partitions`` is outside ``1..n_items``.
    """
    k = integer(k_partitions, "k_partitions")
    if not 1 <= k <= n_items:
        if n_items == 0:
            raise ValueError(f"cannot partition an empty list of {what} (k_partitions={k})")
        raise ValueError(
            f"k_partitions must be in 1..{n_items} (one partition needs at least one of the "
            f"{n_items} {what}), got {k}"
        )
    return k


def as_list(values: Any, name: str) -> Sequence[Any]:
    """Return a sequence view of ``values`` (a list, tuple, or anything with ``tolist``)."""
    if isinstance(values, (list, tuple)):
        return values
    tolist = getattr(values, "tolist", None)
    if callable(tolist):
        if getattr(values, "ndim", 1) != 1:
            raise ValueError(
                f"{name} must be one-dimensional, got shape {tuple(getattr(values, 'shape', ()))}"
            )
        try:
            converted = tolist()
        except (RuntimeError, NotImplementedError) as exc:  # e.g. the meta device
            raise TypeError(f"{name} cannot be read: {exc}") from None
        if isinstance(converted, list):
            return converted
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence, got {describe(values)}")
    return list(values)


def _whole_or_none(value: Any) -> int | float | None:
    """``value`` as an int when it is a whole number, the float itself when it is a real
    number that is not whole (or not finite), ``None`` when it is not a real number.

    Accepts Python and NumPy ints and floats and one-element tensors/arrays of any real
    dtype (verl's SFT trainer passes float32 tensors of whole numbers); bools are refused.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        as_float = float(value)
        return int(as_float) if math.isfinite(as_float) and as_float.is_integer() else as_float
    dtype = str(getattr(value, "dtype", ""))
    if "bool" in dtype or "complex" in dtype:
        return None
    scalar = _item(value)
    return None if scalar is None or isinstance(scalar, (bool, complex)) else _whole_or_none(scalar)


def whole_numbers(values: Any, name: str, what: str = "lengths and workloads") -> list[int]:
    """Return ``values`` (a list, tuple, tensor or NumPy array, any real dtype) as
    non-negative Python ints; whole floats such as ``5.0`` are accepted, as verl accepts them.

    Raises:
        TypeError: ``values`` is not a sequence, or an element is not a real number (a
            string, a bool, a complex number).
        ValueError: ``values`` is not one-dimensional, or an element is negative, not whole
            (``2.5``) or not finite; the message gives its index and value.
    """
    return non_negative_ints(as_list(values, name), name, what, whole=True)
