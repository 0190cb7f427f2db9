"""seqlen-balancing: strict-cap, collective-safe micro-batch planning for LLM training.

A drop-in replacement for ``verl.utils.seqlen_balancing`` (verl 0.9.1) and verl's
``prepare_micro_batches``: same names, parameters and return shapes, but ``max_token_len``
is a hard bound on every micro-batch, DP ranks agree (or fail together) with one
collective, and the count is as small as bin packing allows on real data.

Example:
    >>> from seqlen_balancing import plan_micro_batches
    >>> plan_micro_batches([7, 7, 7, 7], max_token_len=8)
    [[1], [3], [2], [0]]
"""

import importlib
from typing import TYPE_CHECKING, Any

from seqlen_balancing.agreement import plan_data_parallel
from seqlen_balancing.global_batch.step import plan_global_batch
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.bounds import l1_lower_bound, l2_lower_bound
from seqlen_balancing.planning.packing import best_fit_decreasing
from seqlen_balancing.planning.partition import (
    ceildiv,
    get_group_balanced_partitions,
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    greedy_partition,
    karmarkar_karp,
    log_seqlen_unbalance,
    roundup_divisible,
)
from seqlen_balancing.planning.planner import plan_micro_batches
from seqlen_balancing.planning.rule import lower_bound

if TYPE_CHECKING:
    from seqlen_balancing.batch import (
        calculate_workload,
        effective_lengths,
        prepare_dynamic_batch,
        prepare_micro_batches,
        rearrange_micro_batches,
        restore_dynamic_batch,
        step_loss_scales,
    )
    from seqlen_balancing.global_batch.sampler import BalancedDistributedSampler

# The TensorDict functions and the sampler load torch (and tensordict: seconds); the
# planning core and the command line do not need them, so they are imported on first use
# (each name: the module it comes from).
_LAZY = dict.fromkeys(
    (
        "calculate_workload",
        "effective_lengths",
        "prepare_dynamic_batch",
        "prepare_micro_batches",
        "rearrange_micro_batches",
        "restore_dynamic_batch",
        "step_loss_scales",
    ),
    "seqlen_balancing.batch",
) | {"BalancedDistributedSampler": "seqlen_balancing.global_batch.sampler"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'seqlen_balancing' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_LAZY[name]), name)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "BalancedDistributedSampler",
    "PlanOptions",
    "__version__",
    "best_fit_decreasing",
    "calculate_workload",
    "ceildiv",
    "effective_lengths",
    "get_group_balanced_partitions",
    "get_reverse_idx",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "karmarkar_karp",
    "l1_lower_bound",
    "l2_lower_bound",
    "log_seqlen_unbalance",
    "lower_bound",
    "plan_data_parallel",
    "plan_global_batch",
    "plan_micro_batches",
    "prepare_dynamic_batch",
    "prepare_micro_batches",
    "rearrange_micro_batches",
    "restore_dynamic_batch",
    "roundup_divisible",
    "step_loss_scales",
]
