"""The verdict of one call: whether it agrees with its DP group, and the count or the error.

Whether a call agrees with its DP group, the checks of on/off arguments and of the batch's
type, and the verdict: the agreed count (one ``all_reduce``) or the error every rank raises.
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from seqlen_balancing._checks import as_switch, describe
from seqlen_balancing.agreement import collective as distributed
from seqlen_balancing.errors import NotASwitch, NotATensorDict, PlanError
from seqlen_balancing.planning.planner import RankAnalysis, local_count


def _begin(dp_group: Any, same_micro_num_in_dp: Any) -> bool:
    """Whether this call agrees with ``dp_group`` (verl 0.9.1's rule); a process outside
    the group raises at once, since it was never part of that group's collective."""
    sync = distributed.sync_enabled(dp_group, same_micro_num_in_dp)
    error = distributed.membership_error(dp_group) if sync else None
    if error is not None:
        raise error.exception()
    return sync


def _switch_error(value: Any, argument: str) -> PlanError | None:
    """The error for a switch that is not a bool (or 0/1), else ``None``."""
    return NotASwitch(argument, detail=describe(value)) if as_switch(value) is None else None


def _batch_problem(batch: Any) -> PlanError | None:
    """A :class:`~seqlen_balancing.errors.NotATensorDict` error unless ``batch`` is a
    TensorDict with a batch dimension."""
    if isinstance(batch, TensorDictBase) and len(batch.batch_size) > 0:
        return None
    what = type(batch).__name__ + (" with batch_size=()" if isinstance(batch, TensorDictBase) else "")
    return NotATensorDict(detail=f"got {what}")


def _finish(
    analysis: RankAnalysis,
    sync: bool,
    dp_group: Any,
    cause: BaseException | None = None,
    static_count: int | None = None,
) -> tuple[int, int]:
    """The count to plan and the agreed equal rows (0: none, or the rank's own): agreed with
    the group (one all_reduce; a second for equal rows), or this rank's own. Every error is
    raised here, identically on every rank of the group under agreement."""
    if sync:
        # Every rank reaches this call, with or without an error of its own.
        count, error, _, rows = distributed.agree(analysis, dp_group, static_count)
        if error is not None:
            raise error.exception() from cause
        return count, rows
    if analysis.error is not None:
        raise analysis.error.exception() from cause
    return (static_count if static_count is not None else local_count(analysis)), 0
