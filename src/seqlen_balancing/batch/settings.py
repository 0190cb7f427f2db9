"""Reading ``prepare_micro_batches``' settings, and per-sample data named by key, from a batch.

Reading :func:`~seqlen_balancing.batch.micro_batches.prepare_micro_batches`' settings from the
TensorDict, as verl stores them (plain entries or ``NonTensorData``).

``group_ids`` on the TensorDict and DataProto paths is either the ids themselves (a list, a
1-D tensor or array) or the name of the batch's entry that holds them (verl keeps a
``uid`` per sample); :func:`_batch_group_ids` reads that entry before the agreement, and
:func:`_batch_prefix_lengths` reads ``prefix_lengths`` the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from seqlen_balancing._checks import as_switch, describe
from seqlen_balancing.batch.kinds import _READ_ERRORS, _same_data, _unwrapped
from seqlen_balancing.errors import (
    CallerDataRaised,
    GroupIdsKeyMissing,
    GroupIdsRaised,
    MissingSetting,
    NotASwitch,
    PlanError,
    PrefixLengthsKeyMissing,
    PrefixTreeAsked,
)
from seqlen_balancing.options import OPTIONS, PlanOptions
from seqlen_balancing.planning.planner import argument_error


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
    value = _unwrapped(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type != "meta":
        value = value.item()
    return value


def _switch_error(value: Any, argument: str) -> PlanError | None:
    """The error for a switch that is not a bool (or 0/1), else ``None``."""
    return NotASwitch(argument, detail=describe(value)) if as_switch(value) is None else None


def _int_setting(
    data: TensorDict, key: str, default: int | None
) -> tuple[PlanError | None, int]:
    """A positive-integer setting, or the error to agree on (missing, wrong type, < 1)."""
    value = _setting(data, key, default)
    if value is None:
        return MissingSetting(key), 0
    return argument_error(value, key, optional=False)


def _asks_prefix_tree(data: TensorDict) -> bool:
    """Whether the batch sets verl's ``use_prefix_tree``: anything but absent, ``None``,
    false or 0 (a flag per row: any row's)."""
    value = _setting(data, "use_prefix_tree", None)
    if isinstance(value, torch.Tensor) and value.numel() != 1 and value.device.type != "meta":
        return bool(value.ne(0).any())
    return value is not None and as_switch(value) is not False


def _settings(data: TensorDict) -> tuple[PlanError | None, bool, int | None]:
    """``(error, dynamic, cap or chunk)`` read from verl's settings in the batch.

    ``use_prefix_tree`` set (anything but false, 0 or absent) is refused first
    (:class:`~seqlen_balancing.errors.PrefixTreeAsked`): the library does not build verl's
    prefix-tree micro-batches.

    Dynamic: the cap ``max_token_len_per_gpu * sp_size``. Static: the chunk size
    ``micro_batch_size_per_gpu`` (the options, ``force_group_size`` among them, are read by
    :func:`_batch_options`). A bad or missing setting is returned as the error to agree on
    (the first one found).
    """
    if _asks_prefix_tree(data):  # read first, as verl reads it (PR #6689): never ignored
        return PrefixTreeAsked("use_prefix_tree"), True, 0
    raw_dynamic = _setting(data, "use_dynamic_bsz", True)
    # an unreadable switch plans dynamically (the default), and its error is agreed on
    dynamic = as_switch(raw_dynamic) is not False
    dynamic_error = _switch_error(raw_dynamic, "use_dynamic_bsz")
    if dynamic:
        sp_error, sp_size = _int_setting(data, "sp_size", 1)
        cap_error, per_gpu = _int_setting(data, "max_token_len_per_gpu", None)
        return dynamic_error or sp_error or cap_error, True, per_gpu * sp_size
    size_error, size = _int_setting(data, "micro_batch_size_per_gpu", None)
    return size_error, False, size


#: The batch keys of the options (``prepare_micro_batches`` reads them from the batch).
_OPTION_KEYS = tuple(opt.batch_key for opt in OPTIONS.values() if opt.batch_key)

_ABSENT = object()


def _batch_options(
    data: TensorDict,
    options: Any,
    verl_parameters: Mapping[str, Any],
    keywords: Mapping[str, Any],
) -> tuple[PlanOptions, PlanError | None]:
    """The options of one ``prepare_micro_batches`` call: ``options=`` (else the defaults),
    then the batch's settings (plain entries or NonTensorData, as verl stores them), then
    verl's parameters not at their default, then ``keywords`` (the caller's, those given
    other than ``None``). Later wins; the first problem is returned as the error to agree
    on (with the options so far)."""
    start, error = PlanOptions.from_keywords(options)
    if error is not None:
        return start, error
    present = {key: _setting(data, key, _ABSENT) for key in _OPTION_KEYS}
    settings = {key: value for key, value in present.items() if value is not _ABSENT}
    start, error = PlanOptions.from_batch(settings, start)
    if error is not None:
        return start, error
    return PlanOptions.from_keywords(None, verl_parameters, keywords, base=start)


def _per_sample_entry(data: TensorDict, key: str, given: Any) -> Any:
    """``given`` (a keyword), else the batch's per-sample entry ``key`` (``costs``,
    ``workloads``: cut with the batch, never turned into a scalar), else ``None``."""
    if given is not None or key not in data.keys():
        return given
    return _unwrapped(data.get(key))


def _batch_group_ids(batch: Any, group_ids: Any) -> tuple[PlanError | None, Any]:
    """``group_ids`` as the planner reads it: the batch's entry of that name when it is a
    string (a tensor, a ``NonTensorStack`` or a list per sample), else as given; or the
    error to agree on (no such entry, or reading it raised)."""
    return _batch_values(batch, group_ids, GroupIdsKeyMissing,
                         lambda raised, detail: GroupIdsRaised(raised, detail=detail))


def _batch_prefix_lengths(batch: Any, prefix_lengths: Any) -> tuple[PlanError | None, Any]:
    """``prefix_lengths`` as the planner reads them, as :func:`_batch_group_ids` reads ids."""
    return _batch_values(batch, prefix_lengths, PrefixLengthsKeyMissing,
                         lambda raised, detail: CallerDataRaised("prefix_lengths", raised,
                                                                 detail=detail))


def _batch_values(
    batch: Any, values: Any, missing: Callable[[str], PlanError],
    raised: Callable[[str, str], PlanError],
) -> tuple[PlanError | None, Any]:
    """Per-sample values given as themselves, or as the name of the batch's entry holding
    them (read here, before the agreement), or the error to agree on."""
    values = _unwrapped(values)
    if not isinstance(values, str):
        return None, values
    if not isinstance(batch, TensorDictBase) or values not in batch.keys():
        return missing(values), None
    try:
        value = batch.get(values)
        if isinstance(value, NonTensorData):
            value = value.data
        elif isinstance(value, NonTensorStack):
            value = value.tolist()
    except _READ_ERRORS as exc:
        return raised(type(exc).__name__, describe(exc)[:120]), None
    return None, value
