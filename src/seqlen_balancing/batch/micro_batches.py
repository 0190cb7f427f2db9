"""The verl-named micro-batch entry points: rearrange_micro_batches, prepare_micro_batches.

The verl-named micro-batch entry points: :func:`rearrange_micro_batches` and
:func:`prepare_micro_batches` (check, agree, cut).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from tensordict import NonTensorData, TensorDict

from seqlen_balancing._checks import as_switch, describe
from seqlen_balancing.batch.cut import _cut
from seqlen_balancing.batch.dummies import _cut_with_dummies, _Keep, _loss_weight_keys
from seqlen_balancing.batch.entries import _cut_inputs, _Entries
from seqlen_balancing.batch.kinds import _READ_ERRORS
from seqlen_balancing.batch.lengths import _read_lengths
from seqlen_balancing.batch.settings import _cost_settings, _keep_settings, _settings, _shape_settings
from seqlen_balancing.batch.trim import Trim, trim_inputs
from seqlen_balancing.batch.verdict import _batch_problem, _begin, _finish, _switch_error
from seqlen_balancing.errors import (
    Argument,
    LengthsUnreadable,
    PlanError,
    StaticNotDivisible,
    StaticPathOption,
)
from seqlen_balancing.planner import RankAnalysis, analyse, build_plan, log_over_cap

__all__ = ["prepare_micro_batches", "rearrange_micro_batches"]

#: Issue 27's options off: verl's behaviour.
_VERL = _Keep()


def rearrange_micro_batches(
    batch: TensorDict,
    max_token_len: int,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
    force_group_size: int = 1,
    *,
    pad_to_multiple_of: int = 1,
    micro_batch_multiple_of: int = 1,
    costs: Sequence[int] | torch.Tensor | None = None,
    padded: bool = False,
    max_samples_per_micro_batch: int | None = None,
    workloads: Sequence[int] | torch.Tensor | Callable[[list[int]], Sequence[int]] | None = None,
    over_cap: str = "raise",
    dummy_micro_batches: bool = False,
    loss_weight_keys: str | Sequence[str] | None = None,
) -> tuple[list[TensorDict], list[list[int]]]:
    """Cut a batch into micro-batches of at most ``max_token_len`` effective tokens.

    Drop-in for verl 0.9.1's function of the same name and signature. Differences: the cap
    is a hard bound on every path (verl starts at ``ceil(total / cap)`` and retries one
    count at a time), the count is the smallest this library can reach (the L2 bound on
    most real batches), and DP ranks agree with one collective in which every check takes
    part, so an error raises on every rank instead of hanging the others.

    Args:
        batch: TensorDict of batch size ``(n,)`` with ``attention_mask`` of shape
            ``(n, seq_len)`` or jagged nested ``input_ids``.
        max_token_len: cap in effective tokens per micro-batch (a memory budget).
        dp_group: DP process group. The ranks agree only when it is given (not ``None``),
            ``same_micro_num_in_dp`` is true and torch.distributed is initialised (verl
            0.9.1's rule); ``None`` plans locally, even when a default process group
            exists, so a call made on one rank alone never blocks.
        num_batches_divided_by: the count is rounded up to a multiple of this (e.g. the
            virtual pipeline stages).
        same_micro_num_in_dp: with ``dp_group``, every rank of the group gets the same
            count (the largest needed), through one ``all_reduce(MAX)``.
        min_num_micro_batch: at least this many micro-batches.
        use_dynamic_bsz_balance: order micro-batches by workload with the lightest at both
            ends of the list and the heaviest in the middle.
        force_group_size: consecutive samples ``[g*size, (g+1)*size)`` stay in one
            micro-batch.
        pad_to_multiple_of: keyword-only. Each sample costs its effective length rounded up
            to a multiple of this (Megatron's packed THD alignment: 16 for ``tp=4, cp=2``, see
            :func:`~seqlen_balancing.cost.megatron_alignment`). Default 1: verl's rule.
        micro_batch_multiple_of: keyword-only. A micro-batch's summed cost is rounded up to a
            multiple of this before it meets the cap (verl's ``pad_to_length_bucket``, FP8's
            total alignment); a cap that is not a multiple is usable as
            ``max_token_len // micro_batch_multiple_of * micro_batch_multiple_of``. Default 1.
        costs: keyword-only. One non-negative cost in tokens per sample (a list or a 1-D
            tensor, read once to the host), replacing the effective lengths and rounded up to
            ``pad_to_multiple_of`` as they would be: e.g. image plus text tokens, or a memory
            estimate. Default ``None``. Balance stays on the effective lengths.
        padded: keyword-only. For models that run padded tensors: a micro-batch costs
            its rows times its width (:func:`~seqlen_balancing.plan_micro_batches`), the
            count is the fewest possible, and every dense entry with the mask's width
            comes back cut to the micro-batch's width, on the side(s) the mask pads
            (:mod:`~seqlen_balancing.batch.trim`; a row's width is the span of its real
            tokens, around the column every row shares). Default ``False``: verl's rule.
        max_samples_per_micro_batch: keyword-only. No micro-batch holds more samples (a
            forced group counts all its samples). Default ``None``: no limit.
        workloads: keyword-only. The balance objective: one non-negative integer per
            sample (a list or 1-D tensor), or a callable of the effective lengths (e.g.
            ``functools.partial(transformer_workloads, hidden_size=8192, num_layers=80)``,
            see :func:`~seqlen_balancing.cost.transformer_workloads`), instead of verl's
            ``24576*s + s**2``. The cap and the count are untouched. Default ``None``.
        over_cap: keyword-only. ``"raise"`` (default, verl's behaviour) or ``"alone"``: a
            sample or forced group over the cap runs in a micro-batch of its own (the only
            one allowed over the cap), counted in the agreed count, and the rank holding
            it logs a warning on the ``seqlen_balancing`` logger naming its index, its cost
            and the cap (``seqlen_balancing.planner.over_cap_messages``).
        dummy_micro_batches: keyword-only. Default False (verl: a rank with fewer samples or
            groups than the agreed count raises, on every rank). True: that rank runs every
            group alone and the missing micro-batches as dummies, last, each a copy of its
            shortest row (group) with every loss-weight entry zero and an empty index list
            (see ``seqlen_balancing.batch.dummies`` and docs/keep-training.md).
        loss_weight_keys: keyword-only. The entries a dummy zeroes (a key or a list of
            keys); ``None``: ``loss_mask`` and ``response_mask``, those the batch holds. A
            named key that is absent, or a batch with neither default key, is an error
            before the agreement (only with ``dummy_micro_batches``).

    Returns:
        ``(micro_batches, micro_bsz_idx)``: the micro-batches (TensorDicts) and, for each,
        the sorted original row indices; the index lists are an exact cover of
        ``range(n)`` (a dummy's list is empty); with ``padded`` on a batch with a dense
        ``attention_mask`` they are
        :class:`~seqlen_balancing.batch.trim.MicroBatchIndices` (lists of ints that also hold
        the columns each micro-batch kept, for :func:`restore_dynamic_batch`).
        The micro-batches are copies. Jagged tensors and per-sample
        ``NonTensorStack`` entries are indexed row by row, sparse COO and 2-D CSR/CSC
        tensors keep their layout, lazy stacks along dim 0 (the batch itself or an entry)
        are cut by picking their rows; scalar ``NonTensorData`` entries are kept unchanged.

    Raises:
        TypeError: an argument has a wrong type (e.g. a float ``max_token_len``, a
            non-bool switch), ``batch`` is not a TensorDict with a batch dimension, or an
            entry cannot be cut by rows (a block-sparse or batched CSR/CSC layout, a lazy
            stack along another dim whose entries differ in shape; the message names its
            key and what to store instead).
        ValueError: a sample (``exceeds max_token_len``) or forced group
            (``forced group exceeds max_token_len``) over the cap, an empty batch, ``n`` not
            divisible by ``force_group_size``, more micro-batches needed than samples, a bad
            ``min_num_micro_batch``/``num_batches_divided_by``, no length source, lengths
            that cannot be read (e.g. a mask on the meta device), an entry that cannot be
            cut (a nested or sparse one on the meta device, or one that cannot be read; the
            message names its key), or this process is not a member of ``dp_group``
            (raised at once). Every check runs before the agreement; the cut after it does
            not raise for a batch that passed them.
            Under DP agreement every rank raises the same error, naming the DP group rank
            and the global rank at fault:
            ``rank 1 of the DP group (global rank 3): sample 1 has 60 tokens, ...``.
            Nothing but ``TypeError``/``ValueError`` is raised.

    Complexity: O(n log n) planning plus Karmarkar-Karp's O(n k) for ``k`` micro-batches,
    one collective, one device-to-host copy of the lengths, one index per micro-batch.

    Example:
        >>> td = TensorDict({"attention_mask": torch.ones(4, 6)}, batch_size=[4])
        >>> micro_batches, idx = rearrange_micro_batches(td, max_token_len=12)
        >>> [len(mb) for mb in micro_batches], sorted(i for part in idx for i in part)
        ([2, 2], [0, 1, 2, 3])
        >>> td["loss_mask"] = torch.ones(4, 6)
        >>> micro_batches, idx = rearrange_micro_batches(td, 12, num_batches_divided_by=5,
        ...                                               dummy_micro_batches=True)
        >>> idx[-1], micro_batches[-1]["loss_mask"].sum().item()
        ([], 0.0)
    """
    return _rearrange(
        batch,
        max_token_len,
        dp_group,
        num_batches_divided_by,
        same_micro_num_in_dp,
        min_num_micro_batch,
        use_dynamic_bsz_balance,
        force_group_size,
        cost=(pad_to_multiple_of, micro_batch_multiple_of, costs),
        shape=(padded, max_samples_per_micro_batch),
        keep=_Keep(workloads, over_cap, dummy_micro_batches, loss_weight_keys),
    )


def _rearrange(
    batch: Any,
    max_token_len: Any,
    dp_group: Any,
    num_batches_divided_by: Any,
    same_micro_num_in_dp: Any,
    min_num_micro_batch: Any,
    use_dynamic_bsz_balance: Any,
    force_group_size: Any,
    pre_error: PlanError | None = None,
    cost: tuple[Any, Any, Any] = (1, 1, None),
    shape: tuple[Any, Any] = (False, None),
    keep: _Keep = _VERL,
) -> tuple[list[TensorDict], list[list[int]]]:
    """Plan (agreeing with the DP group when asked), then cut."""
    micro_batches, plan, _ = _rearrange_rows(
        batch, max_token_len, dp_group, num_batches_divided_by, same_micro_num_in_dp,
        min_num_micro_batch, use_dynamic_bsz_balance, force_group_size, pre_error, cost, shape,
        keep,
    )
    return micro_batches, plan


def _rearrange_rows(
    batch: Any,
    max_token_len: Any,
    dp_group: Any,
    num_batches_divided_by: Any,
    same_micro_num_in_dp: Any,
    min_num_micro_batch: Any,
    use_dynamic_bsz_balance: Any,
    force_group_size: Any,
    pre_error: PlanError | None = None,
    cost: tuple[Any, Any, Any] = (1, 1, None),
    shape: tuple[Any, Any] = (False, None),
    keep: _Keep = _VERL,
) -> tuple[list[TensorDict], list[list[int]], list[list[int]]]:
    """Plan (agreeing with the DP group when asked), then cut: ``(micro_batches, plan,
    rows)``, ``rows`` the batch rows each micro-batch holds (a dummy's: the copied ones);
    with ``padded`` cutting widths, ``plan`` is the :class:`~seqlen_balancing.batch.trim.MicroBatchIndices`.

    ``pre_error`` is a problem the caller found before planning (a bad setting, a bad
    DataProto); like every other error it goes through the agreement before anyone raises.
    ``cost`` is ``(pad_to_multiple_of, micro_batch_multiple_of, costs)``, checked by
    :func:`~seqlen_balancing.planner.analyse` (a bad one is agreed on too); ``shape`` is
    ``(padded, max_samples_per_micro_batch)``, checked there too. With ``padded`` the
    mask's extents, the entries to cut and their pad values are read before the agreement
    (:func:`~seqlen_balancing.batch.trim.trim_inputs`); ``keep`` the workloads,
    over-cap and dummy options, checked by the planner and, for the dummies' loss-weight
    keys, here (a bad one is agreed on too).
    """
    sync = _begin(dp_group, same_micro_num_in_dp)
    cause: BaseException | None = None
    error = (
        pre_error
        or _switch_error(same_micro_num_in_dp, Argument.SAME_MICRO_NUM_IN_DP)
        or _switch_error(use_dynamic_bsz_balance, Argument.USE_DYNAMIC_BSZ_BALANCE)
        or _batch_problem(batch)
    )
    lengths: list[int] = []
    offsets: list[int] | None = None
    if error is None:
        try:
            error, lengths, offsets = _read_lengths(batch)
        except _READ_ERRORS as exc:
            # The peers must hear of it: turn it into a plan error (the cause is chained).
            cause = exc
            error = LengthsUnreadable(detail=describe(exc))
    known: dict[Any, list[int]] = {} if offsets is None else {"input_ids": offsets}
    entries = _Entries(offsets=known)
    if error is None:
        # Every entry checked and everything the cut reads read before the agreement: a
        # failure is agreed on, and the cut after it cannot fail.
        error, entries, cause = _cut_inputs(batch, known)
    trim: Trim | None = None
    if error is None and as_switch(shape[0]):
        error, trim, cause = trim_inputs(batch, entries.by_rows)
    keys: tuple[str, ...] = ()
    if error is None and as_switch(keep.dummy_micro_batches):
        error, keys = _loss_weight_keys(batch, keep.loss_weight_keys)
    if error is None:
        extents = None if trim is None or cost[2] is not None else (trim.left, trim.right)
        given = keep.workloads.data if isinstance(keep.workloads, NonTensorData) else keep.workloads
        analysis = analyse(
            lengths,
            max_token_len,
            force_group_size=force_group_size,
            min_num_micro_batch=min_num_micro_batch,
            num_batches_divided_by=num_batches_divided_by,
            pad_to_multiple_of=cost[0],
            micro_batch_multiple_of=cost[1],
            # costs given as NonTensorData read as the batch's own entry does
            costs=cost[2].data if isinstance(cost[2], NonTensorData) else cost[2],
            padded=shape[0],
            max_samples_per_micro_batch=shape[1],
            padded_extents=extents,
            workloads=given,
            over_cap=keep.over_cap,
            dummy_micro_batches=keep.dummy_micro_batches,
        )
    else:
        analysis = RankAnalysis(error)
    count = _finish(analysis, sync, dp_group, cause)
    plan = build_plan(analysis, count, bool(as_switch(use_dynamic_bsz_balance)))
    log_over_cap(analysis, dist.get_rank(dp_group) if sync else None)
    # Offsets read before the agreement (input_ids' with its lengths): no second host copy.
    if trim is None or not trim.dims:
        micro_batches, rows = _cut_with_dummies(batch, plan, entries, lengths, analysis.force_group_size,
                                                keys)
        return micro_batches, plan, rows
    # The entries to cut by width are not gathered whole: each micro-batch takes its columns
    # (no dummies here: padded with dummy_micro_batches is refused before the agreement).
    micro_batches = _cut(batch.exclude(*trim.dims), plan, entries)
    indices = trim.cut(micro_batches, batch, plan, analysis.pad_to_multiple_of)
    return micro_batches, list(indices), plan


def prepare_micro_batches(
    data: TensorDict,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
    *,
    pad_to_multiple_of: int | None = None,
    micro_batch_multiple_of: int | None = None,
    costs: Sequence[int] | torch.Tensor | None = None,
    padded: bool | None = None,
    max_samples_per_micro_batch: int | None = None,
    workloads: Sequence[int] | torch.Tensor | Callable[[list[int]], Sequence[int]] | None = None,
    over_cap: str | None = None,
    dummy_micro_batches: bool | None = None,
    loss_weight_keys: str | Sequence[str] | None = None,
) -> tuple[list[TensorDict], list[list[int]] | None]:
    """verl's ``prepare_micro_batches``: settings are read from the TensorDict itself.

    Settings (plain entries or ``NonTensorData``): ``use_dynamic_bsz`` (default True),
    ``sp_size`` (default 1), ``force_group_size`` (default 1), ``max_token_len_per_gpu``
    (required when dynamic; the cap is ``max_token_len_per_gpu * sp_size`` tokens) and
    ``micro_batch_size_per_gpu`` (required when not dynamic). The cap on what the GPU holds
    (dynamic path, see :func:`rearrange_micro_batches`): ``pad_to_multiple_of`` and
    ``micro_batch_multiple_of`` (default 1 each) and a per-sample ``costs`` entry (default:
    none), each used when the keyword argument of that name is ``None``.

    Dynamic: :func:`rearrange_micro_batches` with that cap. Static: consecutive chunks of
    ``micro_batch_size_per_gpu * force_group_size`` samples; the batch size must be a
    multiple of the chunk (so every micro-batch has the same number of samples). As verl's
    ``chunk_tensordict`` makes them, a static micro-batch's dense entries are views of
    the input (writing into one writes into the input); nested and sparse entries are
    rebuilt per chunk (copies). The dynamic path always copies.

    Under DP agreement (``dp_group`` given, ``same_micro_num_in_dp`` true,
    ``torch.distributed`` initialised) both paths take part in the same single
    ``all_reduce``: the mode (dynamic or static) and the static count are part of the
    agreed vector, so ranks mixing modes, static ranks with different counts, and every
    input error raise the same exception on every rank (verl's static path makes no
    collective; a count mismatch there would hang the trainer's later collectives).

    Args:
        data: a TensorDict of batch size ``(n,)`` holding the settings above.
        dp_group: DP process group; ``None`` plans locally (no collective), as verl does.
        num_batches_divided_by: dynamic path: round the count up to a multiple of this.
        same_micro_num_in_dp: agree with the group (needs ``dp_group``).
        min_num_micro_batch: dynamic path: at least this many micro-batches.
        use_dynamic_bsz_balance: dynamic path: verl's workload order.
        pad_to_multiple_of: keyword-only, dynamic path: per-sequence alignment in tokens
            (as in :func:`rearrange_micro_batches`). ``None``: the batch's
            ``pad_to_multiple_of`` setting, else 1.
        micro_batch_multiple_of: keyword-only, dynamic path: per-micro-batch rounding in
            tokens. ``None``: the batch's ``micro_batch_multiple_of`` setting, else 1.
        costs: keyword-only, dynamic path: one cost in tokens per sample. ``None``: the
            batch's ``costs`` entry (a per-sample tensor, cut with the batch), else none.
        padded: keyword-only, dynamic path: as in :func:`rearrange_micro_batches`.
            ``None``: the batch's ``padded`` setting, else ``False``.
        max_samples_per_micro_batch: keyword-only, dynamic path: samples per micro-batch
            at most. ``None``: the batch's ``max_samples_per_micro_batch`` setting, else no
            limit.
        workloads, over_cap, dummy_micro_batches, loss_weight_keys: keyword-only, dynamic
            path, as in :func:`rearrange_micro_batches`. ``None``: the batch's entry of that
            name (``workloads`` per sample; the others settings, plain or
            ``NonTensorData``), else verl's behaviour (verl's workload, ``"raise"``, no
            dummies, the default keys).

    Returns:
        ``(micro_batches, indices)``; ``indices`` is ``None`` on the static path.

    Raises:
        TypeError: ``data`` is not a TensorDict, or a setting or switch has a wrong type.
        ValueError: a required setting is missing or below 1, a static batch not
            divisible into chunks, a cost keyword (``pad_to_multiple_of`` or
            ``micro_batch_multiple_of`` other than 1, ``costs``) given on the static path,
            which has no cap for it to change, ranks disagreeing on the mode or the static
            count, this process is not in ``dp_group``, or as :func:`rearrange_micro_batches`.

    Example:
        >>> td = TensorDict({"attention_mask": torch.ones(4, 3)}, batch_size=[4])
        >>> td["use_dynamic_bsz"] = NonTensorData(False)
        >>> td["micro_batch_size_per_gpu"] = NonTensorData(2)
        >>> micro_batches, indices = prepare_micro_batches(td)
        >>> [len(mb) for mb in micro_batches], indices
        ([2, 2], None)
    """
    sync = _begin(dp_group, same_micro_num_in_dp)
    cause: BaseException | None = None
    error = _batch_problem(data)
    dynamic, value, force_group_size = True, 0, 1
    if error is None:
        try:
            error, dynamic, setting, force_group_size = _settings(data)
            value = setting or 0
        except _READ_ERRORS as exc:
            cause = exc
            error = LengthsUnreadable(detail=describe(exc))
    if dynamic:
        cost = (pad_to_multiple_of, micro_batch_multiple_of, costs)
        shape: tuple[Any, Any] = (padded, max_samples_per_micro_batch)
        keep = (workloads, over_cap, dummy_micro_batches, loss_weight_keys)
        if error is None:
            try:
                cost = _cost_settings(data, cost)
                shape = _shape_settings(data, shape)
                keep = _keep_settings(data, keep)
            except _READ_ERRORS as exc:
                cause = exc
                error = LengthsUnreadable(detail=describe(exc))
        return _rearrange(
            data if error is None else None,
            value,
            dp_group,
            num_batches_divided_by,
            same_micro_num_in_dp,
            min_num_micro_batch,
            use_dynamic_bsz_balance,
            force_group_size,
            error,
            cost=cost,
            shape=shape,
            keep=_Keep(*keep),
        )
    # The static path: chunks of micro_batch_size_per_gpu * force_group_size samples.
    error = (
        error
        or _switch_error(same_micro_num_in_dp, Argument.SAME_MICRO_NUM_IN_DP)
        or _switch_error(use_dynamic_bsz_balance, Argument.USE_DYNAMIC_BSZ_BALANCE)
        or _static_cost_error(pad_to_multiple_of, micro_batch_multiple_of, costs)
    )
    chunk = value * force_group_size
    n = int(data.batch_size[0])
    if error is None and (n == 0 or n % chunk):
        error = StaticNotDivisible(n, value, force_group_size)
    entries = _Entries()
    if error is None:
        error, entries, cause = _cut_inputs(data, {})
    static_count = n // chunk if error is None else 0
    _finish(RankAnalysis(error), sync, dp_group, cause, static_count)
    chunks = [list(range(start, start + chunk)) for start in range(0, n, chunk)]
    # Dense entries are views of the input, as verl's chunk makes them (nested and sparse
    # entries are rebuilt per chunk: copies, as verl rebuilds nested ones).
    return _cut(data, chunks, entries, copy=False), None


def _static_cost_error(pad: Any, bucket: Any, costs: Any) -> PlanError | None:
    """A cost setting given to the static path, which has no cap it could change: refused,
    never ignored (a value of 1, verl's default, changes nothing and is accepted)."""
    for value, argument in ((pad, Argument.PAD_TO_MULTIPLE_OF), (bucket, Argument.MICRO_BATCH_MULTIPLE_OF)):
        if value is not None and not (type(value) is int and value == 1):
            shown = value if type(value) is int and value >= 0 else None  # None: not shown
            return StaticPathOption(argument, shown)
    if costs is not None:
        return StaticPathOption(Argument.COSTS, None)
    return None
