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
which computes the expected values from the same lengths. Suite ``fuzz`` (2 ranks) runs
:data:`FUZZ_ROUNDS` rounds of the ``_malformed.py`` catalogue in one process group, one
JSON line per round; suite ``poison`` (2 ranks) runs every batch of ``_poisoned.py`` twice
(poisoned on rank 0, then on rank 1), also in one process group.
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
#                  {"lengths": [...], "meta_jagged": key}  plus a jagged meta tensor at key
#   kwargs:      keyword arguments of rearrange_micro_batches common to every rank
#   rank_kwargs: {rank: {...}} per-rank overrides (optional)
#   group:       None (the world group passed as dp_group), "local" (dp_group=None: no
#                agreement, as in verl 0.9.1), "pairs" (subgroups [0, 1] and [2, 3]) or
#                "cross" (subgroups [0, 2] and [1, 3])
#   group_of:    {rank: "01" | "23" | "02" | "13"} which subgroup a rank passes (default:
#                its own)
#   call:        "rearrange" (default), "prepare_micro_batches" or "prepare_dynamic_batch"
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
    {  # issue 19, case 6: both ranks over the cap; the advice must suit rank 1's 12,000 too
        "name": "advice_covers_the_group",
        "batches": {0: {"lengths": [10_987, 500, 9_000]}, 1: {"lengths": [12_000, 700, 300]}},
        "kwargs": {"max_token_len": 9_216},
    },
]


def _champ_pair(first: int, per: int, cap: int) -> dict[int, dict[str, list[int]]]:
    """Two ranks of ``per`` CHAMP lengths each from row ``first``, clipped to ``cap``."""
    from seqlen_balancing.data import load_champ_lengths

    rows = [min(cap, s) for s in load_champ_lengths()[first : first + 2 * per]]
    return {0: {"lengths": rows[:per]}, 1: {"lengths": rows[per:]}}


#: A CHAMP step whose ranks need 6 and 8 micro-batches alone (the agreed count is 8; a
#: lock-step choice once made it 9).
CHAMP_PAIR = _champ_pair(384, 32, 4096)

PAIR_SCENARIOS += [
    {  # the agreed count: the largest a rank needs alone
        "name": "champ_step",
        "batches": CHAMP_PAIR,
        "kwargs": {"max_token_len": 4096},
    },
    {  # ...and without verl's order, every rank heaviest first
        "name": "champ_step_balance_off",
        "batches": CHAMP_PAIR,
        "kwargs": {"max_token_len": 4096, "use_dynamic_bsz_balance": False},
    },
]

ALIGNED_SETTINGS = {"max_token_len_per_gpu": 16_384, "pad_to_multiple_of": 32}

PAIR_SCENARIOS += [
    {  # issue 21: 65 x 250 tokens fit 16,384 as tokens, not aligned to 32 (65 x 256 = 16,640)
        "name": "aligned_agree",
        "batches": {0: {"lengths": [250] * 65}, 1: {"lengths": [100] * 10}},
        "kwargs": {"max_token_len": 16_384, "pad_to_multiple_of": 32},
    },
    {  # issue 21: rank 1's 1,000 tokens cost 1,024 aligned to 64, over a cap of 1,010
        "name": "aligned_sample_over_cap",
        "batches": {0: {"lengths": [100] * 4}, 1: {"lengths": [1_000, 10]}},
        "kwargs": {"max_token_len": 1_010, "pad_to_multiple_of": 64},
    },
    {  # issue 21: prepare_micro_batches reads the alignment from the batch's settings
        "name": "aligned_prepare_settings",
        "call": "prepare_micro_batches",
        "batches": {
            0: {"lengths": [250] * 65, "settings": ALIGNED_SETTINGS},
            1: {"lengths": [100] * 10, "settings": ALIGNED_SETTINGS},
        },
        "kwargs": {},
    },
]

PAIR_SCENARIOS += [
    {  # issue 26: padded=True, right-padded rows: rank 0 needs 3 ([100], [10, 10, 10], [100])
        "name": "padded_agree",
        "batches": {0: {"lengths": [100, 10, 10, 10, 100], "side": "right"},
                    1: {"lengths": [10] * 15, "side": "right"}},
        "kwargs": {"max_token_len": 150, "padded": True},
    },
    {  # issue 26: rank 1's 300 tokens, padded to 64, are a 320-wide row over a cap of 256
        "name": "padded_row_over_cap",
        "batches": {0: {"lengths": [10] * 4, "side": "right"},
                    1: {"lengths": [90, 300, 10], "side": "right"}},
        "kwargs": {"max_token_len": 256, "padded": True, "pad_to_multiple_of": 64},
    },
    {  # issue 26: prepare_micro_batches reads padded and max_samples_per_micro_batch
        "name": "padded_prepare_settings",
        "call": "prepare_micro_batches",
        "batches": {
            r: {"lengths": [20] * (12 - 4 * r), "side": "right",
                "settings": {"max_token_len_per_gpu": 1_000, "padded": True,
                             "max_samples_per_micro_batch": 4}}
            for r in range(2)
        },
        "kwargs": {},
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
        # the options are agreed: both ranks pass it (one alone is an OptionMismatch)
        "kwargs": {"max_token_len": CAP, "num_batches_divided_by": 2**63},
    },
]

PAIR_SCENARIOS += [
    {  # issue 10 case 1: static path, rank 1's 7 rows are not a multiple of 2
        "name": "static_not_divisible",
        "call": "prepare_micro_batches",
        "batches": {
            0: {"lengths": [5] * 8, "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}},
            1: {"lengths": [5] * 7, "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}},
        },
        "kwargs": {},
    },
    {  # issue 10 case 2: static counts 4 and 3
        "name": "static_counts_differ",
        "call": "prepare_micro_batches",
        "batches": {
            0: {"lengths": [5] * 8, "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}},
            1: {"lengths": [5] * 6, "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}},
        },
        "kwargs": {},
    },
    {  # equal static counts: both return, with one collective
        "name": "static_counts_equal",
        "call": "prepare_micro_batches",
        "batches": {
            0: {"lengths": [5] * 8, "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2,
                                                 "force_group_size": 2}},
            1: {"lengths": [9] * 8, "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2,
                                                 "force_group_size": 2}},
        },
        "kwargs": {},
    },
    {  # issue 10 case 3: rank 0 dynamic, rank 1 static
        "name": "modes_differ",
        "call": "prepare_micro_batches",
        "batches": {
            0: {"lengths": [5] * 8, "settings": {"max_token_len_per_gpu": 16}},
            1: {"lengths": [5] * 8, "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}},
        },
        "kwargs": {},
    },
    {  # issue 10 case 4: prepare_micro_batches(None) on rank 1
        "name": "prepare_none_on_rank_1",
        "call": "prepare_micro_batches",
        "batches": {
            0: {"lengths": [5] * 4, "settings": {"max_token_len_per_gpu": 16}},
            1: {"none": True},
        },
        "kwargs": {},
    },
    {  # a DataProto whose non_tensor_batch holds a list (not an array) on rank 0
        "name": "dataproto_non_tensor_list",
        "call": "prepare_dynamic_batch",
        "batches": {0: {"lengths": [10] * 4, "non_tensor": "list"}, 1: {"lengths": [10] * 4}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # a DataProto whose non_tensor_batch array is one row short on rank 1
        "name": "dataproto_non_tensor_rows",
        "call": "prepare_dynamic_batch",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10] * 4, "non_tensor": "short"}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # a mask on the meta device (unreadable) on rank 1
        "name": "meta_mask",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10] * 4, "meta": True}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # a jagged entry (not the length source) on the meta device on rank 1: it cannot
       # be cut, which must be known before the agreement, not found after it
        "name": "meta_jagged_entry",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10] * 4, "meta_jagged": "extra"}},
        "kwargs": {"max_token_len": CAP},
    },
    {  # the same on the static path of prepare_micro_batches, rank 0 at fault
        "name": "meta_jagged_entry_static",
        "call": "prepare_micro_batches",
        "batches": {
            0: {"lengths": [5] * 4, "meta_jagged": "extra",
                "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}},
            1: {"lengths": [5] * 4, "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}},
        },
        "kwargs": {},
    },
    {  # a cap of -2**70 on rank 0: reported as given, not clipped
        "name": "cap_beyond_int64",
        "batches": {0: {"lengths": [10] * 4}, 1: {"lengths": [10] * 4}},
        "kwargs": {},
        "rank_kwargs": {0: {"max_token_len": -(2**70)}, 1: {"max_token_len": CAP}},
    },
    {  # issue 9 case 4: dp_group=None plans locally although a default group exists
        "name": "local_without_dp_group",
        "batches": {0: {"lengths": [5] * 4}, 1: {"lengths": [5] * 12}},
        "kwargs": {"max_token_len": 10},
        "group": "local",
    },
    {  # a call made on rank 0 only, with dp_group=None: it must not block
        "name": "one_rank_only_local",
        "batches": {0: {"lengths": [5] * 4}},
        "kwargs": {"max_token_len": 10},
        "group": "local",
    },
    {  # prepare_micro_batches on one rank only, static and dynamic, dp_group=None
        "name": "one_rank_only_prepare_local",
        "call": "prepare_micro_batches",
        "batches": {1: {"lengths": [5] * 6, "settings": {"use_dynamic_bsz": False,
                                                          "micro_batch_size_per_gpu": 3}}},
        "kwargs": {},
        "group": "local",
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

QUAD_SCENARIOS += [
    {  # issue 10 case 5: subgroups [0, 2] and [1, 3] at once; global rank 3 over the cap
        "name": "cross_subgroups_global_rank",
        "batches": {
            0: {"lengths": [10, 6, 8, 2]},
            1: {"lengths": [4, 4, 4]},
            2: {"lengths": [16, 1, 15]},
            3: {"lengths": [3, 60]},
        },
        "kwargs": {"max_token_len": 16},
        "group": "cross",
    },
    {  # static path on subgroups [0, 2] and [1, 3]: counts agree within each
        "name": "cross_subgroups_static",
        "call": "prepare_micro_batches",
        "batches": {
            r: {"lengths": [3] * (4 if r % 2 == 0 else 6),
                "settings": {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}}
            for r in range(4)
        },
        "kwargs": {},
        "group": "cross",
    },
    {  # issue 10 point 4: rank 2 passes subgroup [0, 1], which it is not a member of
        "name": "outsider_of_dp_group",
        "batches": {0: {"lengths": [30] * 4}, 1: {"lengths": [60] * 4}, 2: {"lengths": [10] * 4}},
        "kwargs": {"max_token_len": CAP},
        "group": "pairs",
        "group_of": {2: "01"},
    },
]

SUITES: dict[str, list[dict[str, Any]]] = {"pair": PAIR_SCENARIOS, "quad": QUAD_SCENARIOS}
WORLD_SIZES: dict[str, int] = {"pair": 2, "quad": 4, "fuzz": 2}

#: Rounds of the 2-rank fuzz suite (``AGREEMENT_FUZZ_ROUNDS`` overrides it).
FUZZ_ROUNDS = 200
FUZZ_SEED = 20261130

SUBGROUPS: dict[str, list[int]] = {"01": [0, 1], "23": [2, 3], "02": [0, 2], "13": [1, 3]}

MASK_DTYPES = ("int64", "bool", "float32", "int32")


def scenario_kwargs(scenario: dict[str, Any], rank: int) -> dict[str, Any]:
    """The keyword arguments rank ``rank`` passes (common ones plus its overrides)."""
    kwargs = dict(scenario.get("kwargs", {}))
    kwargs.update(scenario.get("rank_kwargs", {}).get(rank, {}))
    return kwargs


def subgroup_name(scenario: dict[str, Any], rank: int) -> str | None:
    """The group rank ``rank`` passes: ``"01"``/``"23"``/``"02"``/``"13"`` for a subgroup
    scenario, ``"world"`` for the world group, ``None`` for ``dp_group=None``."""
    group = scenario.get("group")
    if group == "local":
        return None
    if group == "pairs":
        return scenario.get("group_of", {}).get(rank, "01" if rank < 2 else "23")
    if group == "cross":
        return scenario.get("group_of", {}).get(rank, "02" if rank % 2 == 0 else "13")
    return "world"


def group_ranks_of(scenario: dict[str, Any], rank: int, world_size: int) -> list[int]:
    """Global ranks of the group rank ``rank`` passes (empty for ``dp_group=None``)."""
    name = subgroup_name(scenario, rank)
    if name is None:
        return []
    return list(range(world_size)) if name == "world" else SUBGROUPS[name]


def fuzz_round(round_index: int, n_kinds: int) -> tuple[int, int]:
    """``(kind index, faulty rank)`` of a fuzz round: every kind in turn (in a seeded
    order, reshuffled every pass), the faulty rank drawn at random."""
    import random

    passes, position = divmod(round_index, n_kinds)
    order = list(range(n_kinds))
    random.Random(FUZZ_SEED + passes).shuffle(order)
    return order[position], random.Random(FUZZ_SEED * 7 + round_index).randrange(2)


# ---------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------


def build_batch(spec: dict[str, Any], rank: int) -> Any:
    """The batch rank ``rank`` passes: masks are left- or right-padded row by row."""
    import torch
    from tensordict import TensorDict

    if spec.get("none"):
        return None
    if "no_mask" in spec:
        n = spec["no_mask"]
        return TensorDict({"input_ids": torch.ones(n, 16, dtype=torch.long)}, batch_size=[n])
    if spec.get("meta"):
        n = len(spec["lengths"])
        mask = torch.ones(n, 8, device="meta")
        return TensorDict({"attention_mask": mask, "sample_id": torch.arange(n)}, batch_size=[n])
    lengths = spec.get("lengths", spec.get("plain_dict"))
    n = len(lengths)
    width = max([*lengths, 0]) + 3
    dtype = getattr(torch, MASK_DTYPES[rank % len(MASK_DTYPES)])
    mask = torch.zeros(n, width, dtype=dtype)
    for row, length in enumerate(lengths):
        if (row + rank) % 2 and spec.get("side") != "right":
            mask[row, width - length :] = 1  # left padding
        else:
            mask[row, :length] = 1  # right padding
    tensors = {"attention_mask": mask, "sample_id": torch.arange(n, dtype=torch.long)}
    if "meta_jagged" in spec:  # a jagged entry on the meta device, rows of 1..n tokens
        rows = [torch.ones(i + 1, device="meta") for i in range(n)]
        tensors[spec["meta_jagged"]] = torch.nested.nested_tensor(rows, layout=torch.jagged)
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
    and on whatever module ``seqlen_balancing.agreement.collective`` calls through (``dist``), then
    restores them.
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    import seqlen_balancing.agreement.collective as sb_distributed

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
    record["group_ranks"] = [] if name is None else _group_ranks(groups[name])
    call = scenario.get("call", "rearrange")
    start = time.perf_counter()
    with count_collectives() as events:
        try:
            if call == "prepare_micro_batches":
                from tensordict import NonTensorData

                from seqlen_balancing import prepare_micro_batches

                for key, value in spec.get("settings", {}).items():
                    batch[key] = NonTensorData(value)
                micro_batches, indices = prepare_micro_batches(batch, **kwargs)
                if indices is None:  # the static path: consecutive chunks
                    sizes = [int(mb.batch_size[0]) for mb in micro_batches]
                    starts = [sum(sizes[:i]) for i in range(len(sizes))]
                    indices = [list(range(a, a + k)) for a, k in zip(starts, sizes, strict=True)]
                    record["static"] = True
            elif call == "prepare_dynamic_batch":
                import numpy as np

                from seqlen_balancing import prepare_dynamic_batch

                rows = len(spec["lengths"])
                non_tensor = {
                    "list": {"uid": [f"u{i}" for i in range(rows)]},
                    "short": {"uid": np.arange(rows - 1)},
                }.get(spec.get("non_tensor", ""), {"uid": np.arange(rows)})
                proto = (_NoFromDict if spec.get("no_from_dict") else _Proto)(batch, non_tensor)
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
                mb_widths=[
                    int(mb["attention_mask"].shape[1]) if "attention_mask" in mb.keys() else None
                    for mb in micro_batches
                ],
            )
    record["seconds"] = round(time.perf_counter() - start, 4)
    record["collectives"] = events
    return record


def run_fuzz(rank: int, world_size: int, out: Any) -> None:
    """The fuzz suite: each round one rank gets a malformed input from the catalogue
    (``_malformed.KINDS``), the other valid data; both call with the world group as
    ``dp_group`` and record the exception (or the plan). One JSON line per round."""
    import random

    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _malformed

    rounds = int(os.environ.get("AGREEMENT_FUZZ_ROUNDS", FUZZ_ROUNDS))
    start = time.perf_counter()
    for round_index in range(rounds):
        kind_index, faulty = fuzz_round(round_index, len(_malformed.KINDS))
        kind = _malformed.KINDS[kind_index]
        rng = random.Random(FUZZ_SEED + 1000 * round_index + rank)
        record: dict[str, Any] = {"scenario": f"fuzz{round_index}", "rank": rank,
                                  "kind": kind.name, "faulty": faulty}
        _record_call(record, _malformed.call, kind.build(rank == faulty, rng), dist.group.WORLD)
        out.write(json.dumps(record) + "\n")
        out.flush()
        _fence(out, rank, world_size, round_index)
    _write(out, {"scenario": "__fuzz_time__", "rank": rank, "seconds": time.perf_counter() - start,
                 "rounds": rounds})


def _record_call(record: dict[str, Any], call: Callable[..., Any], entry: Any, group: Any) -> None:
    """Run one catalogue call with ``dp_group=group`` and note in ``record`` how it ended
    (the count, or the exception's type and message), its seconds and its collectives."""
    began = time.perf_counter()
    with count_collectives() as events:
        try:
            micro_batches, _ = call(entry, dp_group=group)
        except Exception as exc:  # recorded for the parent to judge
            record.update(ok=False, error_type=type(exc).__name__, error_message=str(exc))
        else:
            record.update(ok=True, n_micro=len(micro_batches))
    record["seconds"] = time.perf_counter() - began
    record["collectives"] = [event["name"] for event in events]


def run_poison(rank: int, world_size: int, out: Any) -> None:
    """The poisoned-batch suite (issue 20): every batch of ``_poisoned.POISONS`` twice, once
    on rank 0 and once on rank 1, the other rank holding a valid batch of the same path;
    one process group for all of them, one JSON line per round with the outcome, the
    call's seconds and its collectives."""
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _poisoned

    start = time.perf_counter()
    for round_index in range(2 * len(_poisoned.POISONS)):
        poison = _poisoned.POISONS[round_index // 2]
        faulty = round_index % 2
        record: dict[str, Any] = {"scenario": f"poison{round_index}", "rank": rank,
                                  "kind": poison.name, "faulty": faulty}
        entry = poison.build() if rank == faulty else _poisoned.peer_call(poison)
        _record_call(record, _poisoned.call, entry, dist.group.WORLD)
        _write(out, record)
        _fence(out, rank, world_size, round_index)
    _write(out, {"scenario": "__poison_time__", "rank": rank, "seconds": time.perf_counter() - start})


def _fence(out: Any, rank: int, world_size: int, round_index: int) -> None:
    """An uncounted ``all_gather_object`` of the round: a desynchronised round raises."""
    import torch.distributed as dist

    names: list[Any] = [None] * world_size
    dist.all_gather_object(names, round_index)
    if names != [round_index] * world_size:
        _write(out, {"scenario": "__desync__", "rank": rank, "names": names})
        raise RuntimeError(f"round {round_index} desynchronised: {names}")


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
            groups: dict[str, Any] = {"world": dist.group.WORLD}
            if world_size == 4:
                # Every rank must create every subgroup, in the same order (torch's rule).
                for name in ("01", "23", "02", "13"):
                    groups[name] = dist.new_group(SUBGROUPS[name])
            _write(out, {"scenario": "__ready__", "rank": rank})
            if suite in ("fuzz", "poison"):
                (run_fuzz if suite == "fuzz" else run_poison)(rank, world_size, out)
                _write(out, {"scenario": "__done__", "rank": rank})
                return 0
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
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Records are written and the group destroyed; skip interpreter teardown, where a gloo
    # worker thread still alive can abort the process (SIGABRT) after the work is done.
    os._exit(code)
