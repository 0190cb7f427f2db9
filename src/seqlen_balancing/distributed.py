"""Agreement across DP ranks with one ``all_reduce(MAX)`` of a small int64 vector.

The encoding lives in :mod:`seqlen_balancing.agreement` (pure Python); this module only
moves the vector through ``torch.distributed``. Every rank calls :func:`agree` exactly once
per planning call, whatever its data, so no rank can be left waiting in a collective.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from seqlen_balancing.agreement import decode, encode
from seqlen_balancing.errors import PlanError
from seqlen_balancing.planner import RankAnalysis

__all__ = ["agree", "collective_device", "sync_enabled"]


def sync_enabled(same_micro_num_in_dp: bool) -> bool:
    """True when ranks must agree: ``same_micro_num_in_dp`` and torch.distributed is up.

    As in verl, ``dp_group=None`` then means the default (world) process group.
    """
    return bool(same_micro_num_in_dp) and dist.is_available() and dist.is_initialized()


def collective_device(group: Any = None) -> torch.device:
    """Where the agreement tensor must live for ``group``'s backend.

    CUDA's current device for NCCL (and other GPU backends), the CPU for gloo/mpi.
    """
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def agree(analysis: RankAnalysis, group: Any = None) -> tuple[int, PlanError | None, int | None]:
    """One ``all_reduce(MAX)`` over ``group``; every rank gets the same verdict.

    Args:
        analysis: this rank's :func:`~seqlen_balancing.planner.analyse` result (with or
            without an error: a rank with an error still takes part).
        group: the DP process group (``None``: the default group).

    Returns:
        ``(count, None, None)`` or ``(0, error, rank at fault or None)``; identical on every
        rank. The count is the largest any rank needs, rounded up to
        ``num_batches_divided_by`` (which must be the same on every rank, else an error).

    Complexity: one collective of :data:`~seqlen_balancing.agreement.VECTOR_SIZE` int64
    values and one device-to-host copy of it.
    """
    rank = dist.get_rank(group)
    vector = torch.tensor(encode(analysis, rank), dtype=torch.int64,
                          device=collective_device(group))
    dist.all_reduce(vector, op=dist.ReduceOp.MAX, group=group)
    return decode(vector.tolist())
