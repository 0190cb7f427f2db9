"""Groups of samples that share a micro-batch, from the caller's ``group_ids`` (no torch).

A group is every sample whose id is equal (``==`` and ``hash``, as a ``dict`` key sees
it): ids may be any hashable values (ints, strings, tuples, verl's ``uid`` strings), and
groups need not be contiguous nor of equal size. ``force_group_size=g`` is the special
case ``group_ids = [i // g for i in range(n)]`` (:func:`uniform_members`), so one code path
plans both. Groups are numbered in the order of their first sample.

Like :mod:`seqlen_balancing.planning.per_sample`, reading never raises for bad input: it returns
the error record the DP group agrees on.
"""

from __future__ import annotations

from typing import Any

from seqlen_balancing._checks import describe
from seqlen_balancing.errors import (
    GroupIdsNotASequence,
    GroupIdsRaised,
    GroupIdUnhashable,
    NotOnePerSample,
    PlanError,
)
from seqlen_balancing.planning.per_sample import sequence_of

__all__ = ["group_label", "read_group_ids", "uniform_members"]


def uniform_members(n: int, size: int) -> list[list[int]]:
    """The groups of ``force_group_size=size`` on ``n`` samples (``n`` a multiple of
    ``size``): ``[[0..size-1], [size..2*size-1], ...]``.

    Example:
        >>> uniform_members(6, 2)
        [[0, 1], [2, 3], [4, 5]]
    """
    return [list(range(start, start + size)) for start in range(0, n, size)]


def group_label(group_id: Any) -> str:
    """How messages name a group: its id's ``repr``."""
    return repr(group_id)


def read_group_ids(group_ids: Any, n: int) -> tuple[PlanError | None, list[list[int]], list[str]]:
    """The groups ``group_ids`` forms on ``n`` samples, read whole, or the error to agree on.

    Args:
        group_ids: one hashable id per sample: a list, a tuple, any sequence, or a 1-D
            tensor or array (read with ``tolist``). A mapping, a set or a string is
            refused, never read as its keys or characters.
        n: the samples of the batch.

    Returns:
        ``(None, members, labels)``: ``members[g]`` the ascending sample indices of group
        ``g`` (groups in the order of their first sample) and ``labels[g]`` its name in
        messages (its id's ``repr``); or ``(error, [], [])``: not a sequence
        (``TypeError``), not one id per sample, an id that cannot be hashed (``TypeError``),
        or reading raised.

    Complexity: O(n) (one dict lookup per sample).

    Example:
        >>> read_group_ids(["b", "a", "b", "c"], 4)[1:]
        ([[0, 2], [1], [3]], ["'b'", "'a'", "'c'"])
        >>> read_group_ids({"a": 1}, 1)[0].message()[-24:]
        'got a value of type dict'
    """
    try:
        error, ids = sequence_of(
            group_ids, GroupIdsNotASequence,
            lambda flat: GroupIdsNotASequence(f"{type(flat).__name__} of another shape than (n,)"),
            lambda other: hasattr(other, "__len__") and hasattr(other, "__getitem__"))
    except Exception as exc:  # whatever reading the caller's data raises: agreed on
        return GroupIdsRaised(type(exc).__name__, detail=describe(exc)[:120]), [], []
    if error is not None:
        return error, [], []
    if len(ids) != n:
        return NotOnePerSample("group_ids", len(ids), n), [], []
    index: dict[Any, int] = {}
    members: list[list[int]] = []
    labels: list[str] = []
    for i, group_id in enumerate(ids):
        try:
            g = index.setdefault(group_id, len(members))
        except TypeError:
            return GroupIdUnhashable(i, type(group_id).__name__), [], []
        except Exception as exc:  # a __hash__ or __eq__ of the caller's that raises
            return GroupIdsRaised(type(exc).__name__, detail=describe(exc)[:120]), [], []
        if g == len(members):
            members.append([])
            labels.append(group_label(group_id))
        members[g].append(i)
    return None, members, labels
