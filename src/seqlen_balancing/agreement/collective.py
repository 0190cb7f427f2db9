"""Agreement across DP ranks: one ``all_reduce(MAX)`` of a small vector, a second where needed.

The encoding lives in :mod:`seqlen_balancing.agreement` (pure Python); this module only
decides whether to synchronise, checks that this process belongs to the group, and moves
the vector (and, when some rank failed or the settings differ, every rank's report)
through ``torch.distributed``. Every rank of the group calls :func:`agree` exactly once per
planning call, whatever its data, and every rank makes the same collectives in it, so no
rank can be left waiting in a collective.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from seqlen_balancing._checks import as_switch
from seqlen_balancing.agreement.vector import report, verdict
from seqlen_balancing.errors import NotInGroup, PlanError
from seqlen_balancing.planning.planner import RankAnalysis

__all__ = ["agree", "collective_device", "membership_error", "sync_enabled"]


def sync_enabled(dp_group: Any, same_micro_num_in_dp: Any) -> bool:
    """True when the ranks must agree, exactly as verl 0.9.1 decides.

    Agreement needs all three: ``dp_group`` given (not ``None``), ``same_micro_num_in_dp``
    true, and ``torch.distributed`` initialised. ``dp_group=None`` plans locally even when
    a default process group exists, so a call made on one rank alone never blocks.
    A ``same_micro_num_in_dp`` that is not a bool (or 0/1) counts as true here, as its
    truth value does in verl; the caller reports it as an error through the agreement.

    Args:
        dp_group: the DP process group passed by the caller, or ``None``.
        same_micro_num_in_dp: the caller's switch.

    Returns:
        Whether :func:`agree` must be called.

    Example:
        >>> sync_enabled(None, True)
        False
    """
    if dp_group is None or not (dist.is_available() and dist.is_initialized()):
        return False
    return as_switch(same_micro_num_in_dp) is not False


def membership_error(group: Any) -> PlanError | None:
    """Why this process cannot take part in ``group``'s agreement, or ``None``.

    A process outside the group was never part of its collective: it must raise at once
    (its error cannot be agreed on), with a ``ValueError`` saying so.

    Args:
        group: a process group (``torch.distributed`` initialised).

    Returns:
        ``None`` for a member, else a :class:`~seqlen_balancing.errors.NotInGroup` error
        naming this process's global rank and the group's size.

    Raises:
        TypeError: ``group`` is not a process group.
    """
    try:
        rank = dist.get_rank(group)
        size = len(dist.get_process_group_ranks(group))
    except (AttributeError, KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise TypeError(
            f"dp_group must be a torch.distributed ProcessGroup, got {type(group).__name__} "
            f"({exc}); pass the DP group or dp_group=None"
        ) from exc
    return NotInGroup(dist.get_rank(), size) if rank < 0 else None


def _device_types(group: Any) -> list[str] | None:
    """Device types the group's backends serve, from torch's own backend configuration
    (``"cpu:gloo,cuda:nccl"`` -> ``["cpu", "cuda"]``), or ``None`` when torch has none."""
    try:
        config = str(dist.get_backend_config(group)).lower()
    except (AttributeError, RuntimeError, ValueError):
        config = ""
    pairs = [part.split(":", 1) for part in config.split(",") if ":" in part]
    if pairs:
        return [device.strip() for device, _ in pairs]
    try:
        name = str(dist.get_backend(group)).lower()
    except (RuntimeError, ValueError):
        return None
    capability: dict[str, list[str]] = getattr(dist.Backend, "backend_capability", {})
    return list(capability[name]) if name in capability else None


def _current_device(device_type: str) -> torch.device | None:
    """The current device of ``device_type`` if that kind of device is available."""
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if accelerator is not None and accelerator.type == device_type:
        return torch.device(device_type, torch.accelerator.current_device_index())
    module = getattr(torch, device_type, None)  # torch.cuda, torch.xpu, torch.npu (torch_npu)
    available = getattr(module, "is_available", None)
    current = getattr(module, "current_device", None)
    if callable(available) and callable(current) and available():
        return torch.device(device_type, int(current()))
    return None


def collective_device(group: Any = None) -> torch.device:
    """Where the agreement tensor must live for ``group``'s backend.

    Read from torch's own notion of the group's backends (``dist.get_backend_config``, or
    ``dist.Backend.backend_capability`` for the backend's name):

    * a backend serving the CPU (gloo, mpi, ucc, or a mixed ``"cpu:gloo,cuda:nccl"``
      group): the CPU, so no device copy is needed;
    * a device-only backend (NCCL: ``cuda``, XCCL: ``xpu``, HCCL registered by torch_npu:
      ``npu``): that device type's current device;
    * a backend torch knows nothing about: ``torch.accelerator``'s current device when an
      accelerator is available, else the CPU.

    Args:
        group: the process group (``None``: the default group).

    Returns:
        A ``torch.device``.

    Example:
        >>> device = collective_device()  # no process group here: torch knows no backend
        >>> accelerator = torch.accelerator.current_accelerator()
        >>> device.type == (accelerator.type if torch.accelerator.is_available() else "cpu")
        True
    """
    types = _device_types(group)
    if types is None:  # a backend torch knows nothing about: the accelerator's, if any
        accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        types = [] if accelerator is None else [accelerator.type]
    # a backend serving the CPU needs no copy; else the first of its device types available here
    devices = [] if "cpu" in types else [d for d in map(_current_device, types) if d is not None]
    return devices[0] if devices else torch.device("cpu")


def _all_reduce_max(values: list[int], group: Any) -> list[int]:
    """One ``all_reduce(MAX)`` of ``values`` as int64, on the group backend's device."""
    tensor = torch.tensor(values, dtype=torch.int64, device=collective_device(group))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return [int(value) for value in tensor.tolist()]


def agree(
    analysis: RankAnalysis, group: Any = None, static_count: int | None = None
) -> tuple[int, PlanError | None, int | None, int]:
    """One ``all_reduce(MAX)`` over ``group``; every rank gets the same verdict.

    When the reduced vector shows that some rank failed or that the ranks' settings differ,
    every rank then gathers every rank's :class:`~seqlen_balancing.agreement.Report` (one
    ``all_gather_object``) and reads the same error from them. Under
    ``equal_rows_per_micro_batch`` (agreed like every option), a successful agreement is
    followed by one more ``all_reduce`` of 2 values: the rows every micro-batch holds.

    Args:
        analysis: this rank's :func:`~seqlen_balancing.planning.planner.analyse` result (with or
            without an error: a rank with an error still takes part).
        group: the DP process group; this process must be a member (see
            :func:`membership_error`).
        static_count: this rank's static micro-batch count (``use_dynamic_bsz=False``), or
            ``None`` on the dynamic path; the mode is part of the agreed vector.

    Returns:
        ``(count, None, None, rows)`` or ``(0, error, rank at fault or None, 0)``; identical
        on every rank (``rows``: the agreed equal rows, 0 without the option). The count
        is the largest any rank needs, rounded up to ``num_batches_divided_by`` (the same
        on every rank, else an error); on the static path, the common static count. The
        error names the DP group rank and the global rank at fault.

    Complexity: one collective of :data:`~seqlen_balancing.agreement.VECTOR_SIZE` int64
    values on success (two with equal rows); one more, an object gather, on failure.
    """
    def global_rank(group_rank: int) -> int:
        return int(dist.get_global_rank(group, group_rank)) if group is not None else group_rank

    def gather() -> list[Any]:  # some rank failed or the settings differ: every rank gathers
        reports: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(reports, report(analysis, static_count), group=group)
        return reports

    return verdict(analysis, lambda encoder: _all_reduce_max(encoder(analysis, dist.get_rank(group)), group),
                   gather, global_rank, static_count)
