"""Worker side of the multi-process torch.distributed tests (gloo, CPU).

Run as a script, one process per rank::

    python _workers.py SUITE RANK WORLD_SIZE INIT_METHOD OUT_DIR

Each rank joins a gloo process group through ``INIT_METHOD`` (a ``file://`` rendezvous),
runs every scenario of ``SUITE`` in order and appends one JSON line per scenario to
``OUT_DIR/rank{RANK}.jsonl`` (flushed and fsynced at once, so that the parent still sees
the finished scenarios if a later one hangs). A line holds the outcome of the call
(number of micro-batches, index lists, token sums, or the exception type and message) and
every torch.distributed collective the call made (counted by wrapping the module-level
functions for the duration of the call only).

Between scenarios every rank takes part in a fence (an uncounted ``all_gather_object`` of
the scenario name on the world group), so a desynchronised scenario is reported instead of
silently shifting the collectives of the next one.

The scenario tables (:data:`SUITES`) are plain data, imported by the test module as well,
which computes the expected values from the same lengths.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: Seconds a gloo collective may wait before it raises (a hang becomes an error).
PG_TIMEOUT_S = 30

#: Module-level torch.distributed functions counted during a call.
COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_coalesced",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "batch_isend_irecv",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "irecv",
    "isend",
    "monitored_barrier",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
)

# ---------------------------------------------------------------------------------------
# Scenario tables
#
# A scenario is a dict:
#   name:        unique within its suite
#   batches:     {rank: batch spec}; a rank missing here does not call the function
#                (only used with subgroups). Batch specs:
#                  {"lengths": [...]}            attention_mask built from the lengths
#                  {"no_mask": n}                only a dense input_ids of n rows
#                  {"plain_dict": [...]}         a dict, not a TensorDict
#   kwargs:      keyword arguments of rearrange_micro_batches common to every rank
#   rank_kwargs: {rank: {...}} per-rank overrides (optional)
#   group:       None (world, dp_group=None) or "pairs" (subgroups [0, 1] and [2, 3])
#   group_of:    {rank: "01" | "23"} which subgroup a rank passes (default: its own)
# ---------------------------------------------------------------------------------------

CAP = 100

PAIR_SCENARIOS: list[dict[str, Any]] = [
    {  # case 1: the light rank follows the heavy one
        "name": "case1_sync",
        "batches": {0: {"lengths": [95] * 5}, 1: {"lengths": [20] * 5}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # case 1 without agreement: each rank plans alone, no collective
        "name": "case1_no_sync",
        "batches": {0: {"lengths": [95] * 5}, 1: {"lengths": [20] * 5}},
        "kwargs": {"max_token_len": CAP, "same_micro_num_in_dp": False},
    },
    {  # case 2
        "name": "case2_sync",
        "batches": {0: {"lengths": [7] * 8}, 1: {"lengths": [1] * 8}},
        "kwargs": {"max_token_len": 8},
    },
    {  # case 3: rank 0 needs 3, rank 1 has only 2 samples
        "name": "case3_count_above_samples",
        "batches": {0: {"lengths": [100] * 8}, 1: {"lengths": [100] * 2}},
        "kwargs": {"max_token_len": 300},
    },
    {  # case 4: rank 0 has fewer samples than min_num_micro_batch
        "name": "case4_min_above_samples",
        "batches": {0: {"lengths": [10, 20, 30]}, 1: {"lengths": [10] * 8}},
        "kwargs": {"max_token_len": CAP, "min_num_micro_batch": 4},
    },
    {  # case 4's control: enough samples everywhere
        "name": "case4_min_ok",
        "batches": {0: {"lengths": [10, 20, 30, 40]}, 1: {"lengths": [10] * 8}},
        "kwargs": {"max_token_len": CAP, "min_num_micro_batch": 4},
    },
    {  # case 6: 3 samples, force_group_size 2 on rank 1
        "name": "case6_not_divisible",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10] * 3}},
        "kwargs": {"max_token_len": CAP, "force_group_size": 2},
    },
    {  # forced groups that plan: each pair stays together, counts agree
        "name": "force_group_ok",
        "batches": {
            0: {"lengths": [40, 50, 30, 30, 10, 10, 60, 40]},
            1: {"lengths": [10, 10, 5, 5, 1, 1, 2, 2]},
        },
        "kwargs": {"max_token_len": CAP, "force_group_size": 2},
    },
    {  # case 8: rank 1 has no attention_mask at all
        "name": "case8_no_attention_mask",
        "batches": {0: {"lengths": [10] * 4}, 1: {"no_mask": 4}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # a wrong-typed argument on one rank: TypeError on both
        "name": "type_error_one_rank",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10] * 4}},
        "kwargs": {},
        "rank_kwargs": {0: {"max_token_len": CAP}, 1: {"max_token_len": float(CAP)}},
    },
    {  # rank 0 passes a dict, not a TensorDict: its peer must still hear of it
        "name": "not_a_tensordict",
        "batches": {0: {"plain_dict": [10] * 4}, 1: {"lengths": [10] * 4}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # two ranks at fault: the lowest one is named
        "name": "both_ranks_at_fault",
        "batches": {0: {"lengths": [10, 150]}, 1: {"no_mask": 3}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # without agreement an error stays local and nobody calls a collective
        "name": "no_sync_error_stays_local",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10, 150]}},
        "kwargs": {"max_token_len": CAP, "same_micro_num_in_dp": False},
    },
    {  # verl's order off: sorted by first index, counts still agree
        "name": "balance_off",
        "batches": {0: {"lengths": [60, 50, 40, 30, 20]}, 1: {"lengths": [5] * 6}},
        "kwargs": {"max_token_len": CAP, "use_dynamic_bsz_balance": False},
    },
    {  # a misconfigured group: the ranks disagree on num_batches_divided_by
        "name": "divisor_differs_between_ranks",
        "batches": {0: {"lengths": [95] * 4 + [5] * 2}, 1: {"lengths": [20] * 6}},
        "kwargs": {"max_token_len": CAP},
        "rank_kwargs": {0: {"num_batches_divided_by": 2}, 1: {"num_batches_divided_by": 3}},
    },
]

PAIR_SCENARIOS += [
    {  # prepare_micro_batches: rank 1's batch lacks its token budget setting
        "name": "prepare_missing_budget",
        "call": "prepare_micro_batches",
        "batches": {
            0: {"lengths": [10] * 4, "settings": {"max_token_len_per_gpu": CAP}},
            1: {"lengths": [10] * 4, "settings": {}},
        },
        "kwargs": {},
    },
    {  # prepare_dynamic_batch: rank 1 passes an object that is not DataProto-like
        "name": "dataproto_without_from_dict",
        "call": "prepare_dynamic_batch",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10] * 4, "no_from_dict": True}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # a divisor too large for int64 on one rank: still one agreed error
        "name": "huge_divisor_one_rank",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10] * 4}},
        "kwargs": {"max_token_len": CAP},
        "rank_kwargs": {1: {"num_batches_divided_by": 2**63}},
    },
]

QUAD_SCENARIOS: list[dict[str, Any]] = [
    {  # case 5: rank 2 holds a sample over the cap
        "name": "case5_sample_over_cap",
        "batches": {
            0: {"lengths": [10] * 4},
            1: {"lengths": [90, 90]},
            2: {"lengths": [50, 120, 30]},
            3: {"lengths": [1] * 6},
        },
        "kwargs": {"max_token_len": CAP},
    },
    {  # ranks 1 (empty batch) and 3 (over the cap) at fault: rank 1 is named
        "name": "lowest_rank_at_fault",
        "batches": {
            0: {"lengths": [10] * 4},
            1: {"lengths": []},
            2: {"lengths": [10] * 4},
            3: {"lengths": [200]},
        },
        "kwargs": {"max_token_len": CAP},
    },
    {  # case 7: different loads, count rounded up to a multiple of 2
        "name": "case7_divisible_by_2",
        "batches": {
            0: {"lengths": [60] * 5 + [10] * 3},
            1: {"lengths": [30] * 8},
            2: {"lengths": [90, 10, 50, 50, 20, 20, 5, 5]},
            3: {"lengths": [1] * 7},
        },
        "kwargs": {"max_token_len": CAP, "num_batches_divided_by": 2},
    },
    {  # the rounding itself exceeds a rank's samples: that rank is named
        "name": "rounding_above_samples",
        "batches": {
            0: {"lengths": [60] * 5 + [10] * 3},
            1: {"lengths": [30] * 8},
            2: {"lengths": [90, 10, 50, 50, 20, 20, 5, 5]},
            3: {"lengths": [1] * 7},
        },
        "kwargs": {"max_token_len": CAP, "num_batches_divided_by": 4},
    },
    {  # subgroups [0, 1] and [2, 3] agree separately
        "name": "subgroups_agree_separately",
        "batches": {
            0: {"lengths": [95] * 5},
            1: {"lengths": [20] * 5},
            2: {"lengths": [50] * 6},
            3: {"lengths": [30] * 6},
        },
        "kwargs": {"max_token_len": CAP},
        "group": "pairs",
    },
    {  # only subgroup [0, 1] plans; ranks 2 and 3 stay out of it (and call nothing)
        "name": "subgroup_outsiders_idle",
        "batches": {0: {"lengths": [95] * 3}, 1: {"lengths": [20] * 3}},
        "kwargs": {"max_token_len": CAP},
        "group": "pairs",
    },
    {  # an error in subgroup [2, 3] (group rank 1) leaves subgroup [0, 1] planning
        "name": "subgroup_error_stays_in_subgroup",
        "batches": {
            0: {"lengths": [30] * 4},
            1: {"lengths": [60] * 4},
            2: {"lengths": [10] * 4},
            3: {"lengths": [10, 101]},
        },
        "kwargs": {"max_token_len": CAP},
        "group": "pairs",
    },
]

SUITES: dict[str, list[dict[str, Any]]] = {"pair": PAIR_SCENARIOS, "quad": QUAD_SCENARIOS}
WORLD_SIZES: dict[str, int] = {"pair": 2, "quad": 4}

MASK_DTYPES = ("int64", "bool", "float32", "int32")


def scenario_kwargs(scenario: dict[str, Any], rank: int) -> dict[str, Any]:
    """The keyword arguments rank ``rank`` passes (common ones plus its overrides)."""
    kwargs = dict(scenario.get("kwargs", {}))
    kwargs.update(scenario.get("rank_kwargs", {}).get(rank, {}))
    return kwargs


def subgroup_name(scenario: dict[str, Any], rank: int) -> str | None:
    """``"01"``/``"23"`` for a subgroup scenario, ``None`` for the world group."""
    if scenario.get("group") != "pairs":
        return None
    return scenario.get("group_of", {}).get(rank, "01" if rank < 2 else "23")


# ---------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------


def build_batch(spec: dict[str, Any], rank: int) -> Any:
    """The batch rank ``rank`` passes: masks are left- or right-padded row by row."""
    import torch
    from tensordict import TensorDict

    if "no_mask" in spec:
        n = spec["no_mask"]
        return TensorDict({"input_ids": torch.ones(n, 16, dtype=torch.long)}, batch_size=[n])
    lengths = spec.get("lengths", spec.get("plain_dict"))
    n = len(lengths)
    width = max([*lengths, 0]) + 3
    dtype = getattr(torch, MASK_DTYPES[rank % len(MASK_DTYPES)])
    mask = torch.zeros(n, width, dtype=dtype)
    for row, length in enumerate(lengths):
        if (row + rank) % 2:
            mask[row, width - length :] = 1  # left padding
        else:
            mask[row, :length] = 1  # right padding
    tensors = {"attention_mask": mask, "sample_id": torch.arange(n, dtype=torch.long)}
    if "plain_dict" in spec:
        return tensors
    return TensorDict(tensors, batch_size=[n])


def _group_ranks(group: Any) -> list[int]:
    import torch.distributed as dist

    return list(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))


def _counting_wrapper(name: str, original: Callable[..., Any], events: list[dict[str, Any]]):
    import torch.distributed as dist

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        event: dict[str, Any] = {"name": name}
        if name == "all_reduce":
            tensor = args[0] if args else kwargs.get("tensor")
            op = args[1] if len(args) > 1 else kwargs.get("op", dist.ReduceOp.SUM)
            group = args[2] if len(args) > 2 else kwargs.get("group")
            event.update(
                dtype=str(tensor.dtype),
                shape=list(tensor.shape),
                op_is_max=bool(op == dist.ReduceOp.MAX),
                group_ranks=_group_ranks(group),
            )
        events.append(event)
        return original(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def count_collectives() -> Iterator[list[dict[str, Any]]]:
    """Count every module-level collective called inside the block.

    Patches the functions on ``torch.distributed``, on ``torch.distributed.distributed_c10d``
    and on whatever module ``seqlen_balancing.distributed`` calls through (``dist``), then
    restores them.
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    import seqlen_balancing.distributed as sb_distributed

    modules: dict[int, Any] = {}
    for module in (dist, c10d, getattr(sb_distributed, "dist", dist)):
        modules[id(module)] = module
    events: list[dict[str, Any]] = []
    saved: list[tuple[Any, str, Any]] = []
    try:
        for module in modules.values():
            for name in COLLECTIVES:
                original = getattr(module, name, None)
                if original is None:
                    continue
                saved.append((module, name, original))
                setattr(module, name, _counting_wrapper(name, original, events))
        yield events
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)


def _column(micro_batch: Any, key: str) -> list[int] | None:
    return micro_batch[key].tolist() if key in micro_batch.keys() else None


def _token_sum(micro_batch: Any) -> int | None:
    if "attention_mask" not in micro_batch.keys():
        return None
    return int((micro_batch["attention_mask"] != 0).sum().item())


class _NoFromDict:
    """DataProto-like but for the missing ``from_dict`` classmethod."""

    def __init__(self, batch: Any, non_tensor_batch: Any = None, meta_info: Any = None) -> None:
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch or {}
        self.meta_info = meta_info or {}


class _Proto(_NoFromDict):
    """A minimal DataProto stand-in."""

    @classmethod
    def from_dict(cls, tensors: Any, non_tensors: Any, meta_info: Any = None) -> _Proto:
        from tensordict import TensorDict

        size = next(iter(tensors.values())).shape[0]
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def run_scenario(scenario: dict[str, Any], rank: int, groups: dict[str, Any]) -> dict[str, Any]:
    """Call rearrange_micro_batches as this rank would, and describe what happened."""
    from seqlen_balancing import rearrange_micro_batches

    record: dict[str, Any] = {"scenario": scenario["name"], "rank": rank}
    spec = scenario["batches"].get(rank)
    if spec is None:
        record["called"] = False
        return record
    record["called"] = True
    batch = build_batch(spec, rank)
    kwargs = scenario_kwargs(scenario, rank)
    name = subgroup_name(scenario, rank)
    if name is not None:
        kwargs["dp_group"] = groups[name]
    call = scenario.get("call", "rearrange")
    start = time.perf_counter()
    with count_collectives() as events:
        try:
            if call == "prepare_micro_batches":
                from tensordict import NonTensorData

                from seqlen_balancing import prepare_micro_batches

                for key, value in spec["settings"].items():
                    batch[key] = NonTensorData(value)
                micro_batches, indices = prepare_micro_batches(batch, **kwargs)
            elif call == "prepare_dynamic_batch":
                from seqlen_balancing import prepare_dynamic_batch

                proto = (_NoFromDict if spec.get("no_from_dict") else _Proto)(batch)
                protos, indices = prepare_dynamic_batch(proto, **kwargs)
                micro_batches = [p.batch for p in protos]
            else:
                micro_batches, indices = rearrange_micro_batches(batch, **kwargs)
        except Exception as exc:  # recorded for the parent to judge
            record.update(
                ok=False,
                error_type=type(exc).__name__,
                error_message=str(exc),
                cause_type=type(exc.__cause__).__name__ if exc.__cause__ else None,
            )
        else:
            record.update(
                ok=True,
                n_micro=len(micro_batches),
                indices=[[int(i) for i in part] for part in indices],
                mb_batch_sizes=[int(mb.batch_size[0]) for mb in micro_batches],
                mb_sample_ids=[_column(mb, "sample_id") for mb in micro_batches],
                mb_token_sums=[_token_sum(mb) for mb in micro_batches],
                mb_types=[type(mb).__name__ for mb in micro_batches],
            )
    record["seconds"] = round(time.perf_counter() - start, 4)
    record["collectives"] = events
    return record


def _write(handle: Any, record: dict[str, Any]) -> None:
    handle.write(json.dumps(record) + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def main(argv: list[str]) -> int:
    suite, rank, world_size, init_method, out_dir = (
        argv[0],
        int(argv[1]),
        int(argv[2]),
        argv[3],
        Path(argv[4]),
    )
    import torch.distributed as dist

    out = (out_dir / f"rank{rank}.jsonl").open("a", encoding="utf-8")
    try:
        dist.init_process_group(
            "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
        )
        try:
            groups: dict[str, Any] = {}
            if world_size == 4:
                # Every rank must create every subgroup, in the same order (torch's rule).
                groups["01"] = dist.new_group([0, 1])
                groups["23"] = dist.new_group([2, 3])
            _write(out, {"scenario": "__ready__", "rank": rank})
            for scenario in SUITES[suite]:
                record = run_scenario(scenario, rank, groups)
                _write(out, record)
                names: list[Any] = [None] * world_size
                dist.all_gather_object(names, scenario["name"])  # fence, not counted
                if names != [scenario["name"]] * world_size:
                    _write(out, {"scenario": "__desync__", "rank": rank, "names": names})
                    return 3
            _write(out, {"scenario": "__done__", "rank": rank})
        finally:
            dist.destroy_process_group()
    except BaseException:
        _write(out, {"scenario": "__harness_error__", "rank": rank, "traceback": traceback.format_exc()})
        return 2
    finally:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
