"""Reading ``prepare_micro_batches``' settings from the TensorDict, as verl stores them.

Reading :func:`~seqlen_balancing.batch.micro_batches.prepare_micro_batches`' settings from the
TensorDict, as verl stores them (plain entries or ``NonTensorData``).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from seqlen_balancing._checks import as_switch
from seqlen_balancing.batch.kinds import _same_data
from seqlen_balancing.batch.verdict import _switch_error
from seqlen_balancing.errors import Argument, MissingSetting, PlanError
from seqlen_balancing.planner import argument_error


def _setting(data: TensorDict, key: str, default: Any) -> Any:
    """A setting stored in ``data`` as verl does (plain entry or NonTensorData; in a lazy
    stack, one NonTensorData per row, all equal)."""
    if key not in data.keys():
        return default
    value = data.get(key)
    if isinstance(value, NonTensorStack):
        rows = value.tolist()
        if rows and all(_same_data(row, rows[0]) for row in rows):
            value = NonTensorData(rows[0])
    if isinstance(value, NonTensorData):
        value = value.data
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type != "meta":
        value = value.item()
    return value


def _int_setting(
    data: TensorDict, key: str, argument: Argument, default: int | None
) -> tuple[PlanError | None, int]:
    """A positive-integer setting, or the error to agree on (missing, wrong type, < 1)."""
    value = _setting(data, key, default)
    if value is None:
        return MissingSetting(argument), 0
    return argument_error(value, argument, optional=False)


def _settings(data: TensorDict) -> tuple[PlanError | None, bool, int | None, int]:
    """``(error, dynamic, cap or chunk, force_group_size)`` read from the batch's settings.

    Dynamic: the cap ``max_token_len_per_gpu * sp_size``. Static: the chunk size
    ``micro_batch_size_per_gpu`` (``force_group_size`` is returned apart). A bad or missing
    setting is returned as the error to agree on (the first one found).
    """
    raw_dynamic = _setting(data, "use_dynamic_bsz", True)
    dynamic = as_switch(raw_dynamic)
    dynamic_error = _switch_error(raw_dynamic, Argument.USE_DYNAMIC_BSZ)
    if dynamic is None:  # an unreadable switch: plan dynamically (the default), agree on it
        dynamic = True
    group_error, force_group_size = _int_setting(
        data, "force_group_size", Argument.FORCE_GROUP_SIZE, 1
    )
    if dynamic:
        sp_error, sp_size = _int_setting(data, "sp_size", Argument.SP_SIZE, 1)
        cap_error, per_gpu = _int_setting(
            data, "max_token_len_per_gpu", Argument.MAX_TOKEN_LEN_PER_GPU, None
        )
        error = dynamic_error or group_error or sp_error or cap_error
        return error, True, per_gpu * sp_size, force_group_size
    size_error, size = _int_setting(
        data, "micro_batch_size_per_gpu", Argument.MICRO_BATCH_SIZE_PER_GPU, None
    )
    return group_error or size_error, False, size, force_group_size


def _cost_settings(data: TensorDict, given: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """``(pad_to_multiple_of, micro_batch_multiple_of, costs)``: each argument given (not
    ``None``), else the batch's setting of that name (plain entry or NonTensorData), else
    verl's default (1, 1, no costs). Checked later, by the planner, like every setting."""
    pad, bucket, costs = given
    if pad is None:
        pad = _setting(data, "pad_to_multiple_of", 1)
    if bucket is None:
        bucket = _setting(data, "micro_batch_multiple_of", 1)
    if costs is None and "costs" in data.keys():
        costs = data.get("costs")  # per sample: never turned into a scalar
        if isinstance(costs, NonTensorData):
            costs = costs.data
    return pad, bucket, costs


def _shape_settings(data: TensorDict, given: tuple[Any, Any]) -> tuple[Any, Any]:
    """``(padded, max_samples_per_micro_batch)``: each argument given (not ``None``), else
    the batch's setting of that name, else ``(False, None)`` (verl's rule). Checked later,
    by the planner."""
    padded, limit = given
    if padded is None:
        padded = _setting(data, "padded", False)
    if limit is None:
        limit = _setting(data, "max_samples_per_micro_batch", None)
    return padded, limit


def _keep_settings(data: TensorDict, given: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
    """``(workloads, over_cap, dummy_micro_batches, loss_weight_keys)``: each argument given
    (not ``None``), else the batch's setting of that name (``workloads``: a per-sample entry,
    cut with the batch), else the default that keeps verl's behaviour (none, ``"raise"``,
    False, the default keys). Checked later, by the planner and the dummies' check."""
    workloads, over_cap, dummies, keys = given
    if workloads is None and "workloads" in data.keys():
        workloads = data.get("workloads")  # per sample: never turned into a scalar
        if isinstance(workloads, NonTensorData):
            workloads = workloads.data
    if over_cap is None:
        over_cap = _setting(data, "over_cap", "raise")
    if dummies is None:
        dummies = _setting(data, "dummy_micro_batches", False)
    if keys is None:
        keys = _setting(data, "loss_weight_keys", None)
        if isinstance(keys, list):
            keys = tuple(keys)
    return workloads, over_cap, dummies, keys
