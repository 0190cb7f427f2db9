"""Reading the caller's per-sample numbers whole, once: lengths, costs, workloads (no torch).

One reader, :func:`read_numbers`, for every list of one number per sample the caller hands
the planner (``seq_lens``, ``costs``, ``workloads``). It runs before the DP agreement and
never raises for bad input: it returns the error record the group agrees on, so a rank
whose data cannot be read fails with its peers instead of leaving them in the collective.

* A list, a tuple, any other :class:`~collections.abc.Sequence` (``range``, ...), or a 1-D
  tensor or array (anything with ``tolist``) is read in full.
* A callable (``costs`` and ``workloads`` only) is called once with the list of effective
  lengths, and what it returns is iterated in full (an iterator, e.g. ``map(...)``, is
  fine there).
* A mapping, a set, a string or bytes, and any other value that is not a sequence (a
  generator, a number, ``map(...)`` given directly) is refused, by its type's name, never
  read as its keys or characters (:class:`~seqlen_balancing.errors.LengthsNotASequence`).
* Whatever calling, iterating or converting raises, of any type (an ``Exception``), becomes
  :class:`~seqlen_balancing.errors.CallerDataRaised` naming the list and the exception's
  type; the exception itself is kept in the record's local ``detail``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from seqlen_balancing._checks import _integer_or_none, describe
from seqlen_balancing.errors import (
    CallerDataRaised,
    LengthNotAnInteger,
    LengthsNotASequence,
    LengthsNotOneDimensional,
    LengthSource,
    NegativeLength,
    PlanError,
)

__all__ = ["read_numbers"]

#: Containers that are iterable but never a list of per-sample numbers (nor of group ids,
#: :mod:`~seqlen_balancing.planning.groups`: a string would be read as characters).
_REFUSED = (Mapping, AbstractSet, str, bytes, bytearray, memoryview)


def read_numbers(
    values: Any, source: LengthSource, lengths: Sequence[int] | None = None
) -> tuple[PlanError | None, list[int]]:
    """``values`` as non-negative Python ints, read whole, or the error to agree on.

    Args:
        values: one whole number per sample (see the module docstring for what is read
            and what is refused), or, when ``lengths`` is given, a callable of them.
        source: which list this is (named in every error).
        lengths: the effective lengths a callable ``values`` is called with; ``None``:
            ``values`` may not be a callable.

    Returns:
        ``(None, numbers)``, or ``(error, [])``. The numbers' count is not checked here
        (the caller compares it with the batch's samples).

    Complexity: O(n), one pass over the values (two for a tensor: ``tolist``, then the
    conversion).

    Example:
        >>> read_numbers((3, 5), "costs")
        (None, [3, 5])
        >>> read_numbers({0: 9, 1: 9}, "costs")[0].message()[-57:]
        'a tuple, a 1-D tensor or array), got a value of type dict'
        >>> table = {3: 30}
        >>> error, _ = read_numbers(lambda lens: map(table.__getitem__, lens),
        ...                         "workloads", [3, 4])
        >>> error.message()[:36], error.detail
        ('reading workloads raised KeyError: t', 'KeyError(4) (KeyError)')
    """
    try:
        if lengths is not None and callable(values) and not callable(getattr(values, "tolist", None)):
            return _read(values(list(lengths)), source, returned=True)
        return _read(values, source, returned=False)
    except Exception as exc:  # any exception of the caller's data: this rank's agreed error
        return CallerDataRaised(source, type(exc).__name__, detail=describe(exc)[:120]), []


def sequence_of(
    values: Any, refused: Callable[[str], PlanError], not_flat: Callable[[Any], PlanError],
    other: Callable[[Any], bool],
) -> tuple[PlanError | None, Any]:
    """``values`` as a list (or tuple) to read, or the record refusing them: a list or a
    tuple as it is; a mapping, a set or a string never (``refused`` of its type's name);
    anything with ``tolist`` converted when one-dimensional (else ``not_flat`` of it); any
    other value ``other`` accepts, listed. The one way the caller's per-sample lists are
    read: the numbers here, the group ids in :mod:`~seqlen_balancing.planning.groups`."""
    if isinstance(values, (list, tuple)):
        return None, values
    if isinstance(values, _REFUSED):
        return refused(type(values).__name__), None
    if callable(getattr(values, "tolist", None)):
        if getattr(values, "ndim", 1) != 1:
            return not_flat(values), None
        converted = values.tolist()
        if not isinstance(converted, list):
            return refused(type(values).__name__), None
        return None, converted
    if other(values):
        return None, list(values)
    return refused(type(values).__name__), None


def _read(values: Any, source: LengthSource, returned: bool) -> tuple[PlanError | None, list[int]]:
    error, items = sequence_of(
        values, lambda name: LengthsNotASequence(source, name),
        lambda flat: LengthsNotOneDimensional(source, detail=f"shape {tuple(getattr(flat, 'shape', ()))}"),
        lambda other: isinstance(other, Sequence) or (returned and isinstance(other, Iterable)))
    if error is not None:
        return error, []
    if set(map(type, items)) == {int} and min(items) >= 0:
        return None, list(items)  # plain ints, none negative: what the loop below makes
    out: list[int] = []
    for index, value in enumerate(items):
        as_int = value if type(value) is int else _integer_or_none(value)
        if as_int is None:
            return LengthNotAnInteger(source, index, detail=describe(value)), []
        if as_int < 0:
            return NegativeLength(source, index, as_int), []
        out.append(as_int)
    return None, out
