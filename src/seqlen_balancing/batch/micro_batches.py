"""The verl-named entry points rearrange_micro_batches and prepare_micro_batches, and the settings they read.

The verl-named micro-batch entry points: :func:`rearrange_micro_batches` and
:func:`prepare_micro_batches` (check, agree, cut), and the verdict of one call: whether it
agrees with its DP group (:func:`_begin`), the batch's type checked, and the agreed count
(one ``all_reduce``) or the error every rank raises (:func:`_finish`).

Reading :func:`prepare_micro_batches`' settings from the TensorDict, as verl stores them
(plain entries or ``NonTensorData``: :func:`_settings`, :func:`_batch_options`).
``group_ids`` and ``prefix_lengths`` are either the values themselves (a list, a 1-D tensor
or array) or the name of the batch's entry that holds them (verl keeps a ``uid`` per
sample); :func:`_batch_values` reads that entry before the agreement.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from seqlen_balancing._checks import as_switch, describe
from seqlen_balancing.agreement import analyse_with_prefixes
from seqlen_balancing.agreement import collective as distributed
from seqlen_balancing.batch.cut import _cut, _cut_inputs, _Entries
from seqlen_balancing.batch.filler import (
    _cut_with_copies,
    _empty_cut,
    _empty_inputs,
    _EmptySource,
    _loss_weight_keys,
)
from seqlen_balancing.batch.kinds import _READ_ERRORS, _same_data, _unwrapped
from seqlen_balancing.batch.lengths import _read_lengths, effective_lengths
from seqlen_balancing.batch.trim import Trim, trim_inputs
from seqlen_balancing.errors import (
    CallerDataRaised,
    GroupIdsKeyMissing,
    GroupIdsRaised,
    LengthsUnreadable,
    MissingSetting,
    NotASwitch,
    NotATensorDict,
    PlanError,
    PrefixLengthsKeyMissing,
    PrefixTreeAsked,
    StaticNotDivisible,
    StaticPathOption,
)
from seqlen_balancing.options import (
    OPTIONS,
    GroupOptionKeywords,
    OptionKeywords,
    PlanOptions,
    Unpack,
    argument_error,
)
from seqlen_balancing.planning.planner import (
    RankAnalysis,
    build_plan,
    failed_analysis,
    local_count,
    log_over_cap,
)
from seqlen_balancing.planning.rows import empty_rank_tolerance

__all__ = ["prepare_micro_batches", "rearrange_micro_batches"]


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
    options: PlanOptions | None = None,
    costs: Sequence[int] | torch.Tensor | Callable[[list[int]], Iterable[int]] | None = None,
    workloads: Sequence[int] | torch.Tensor | Callable[[list[int]], Iterable[int]] | None = None,
    group_ids: str | Sequence[Hashable] | torch.Tensor | None = None,
    dummy_template: TensorDict | None = None,
    prefix_lengths: str | Sequence[int] | torch.Tensor | None = None,
    **option_keywords: Unpack[OptionKeywords],
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
        options: keyword-only. The plan's options (:class:`~seqlen_balancing.PlanOptions`,
            docs/options.md); verl's parameters above that are not at their default, then
            ``option_keywords``, are laid over it. ``None``: verl's behaviour.
        costs: keyword-only. One non-negative cost in tokens per sample (a list or a 1-D
            tensor, read once to the host, or a callable of the effective lengths),
            replacing the effective lengths and rounded up to ``pad_to_multiple_of`` as
            they would be: e.g. image plus text tokens, or a memory estimate. Default
            ``None``. Balance stays on the effective lengths.
        workloads: keyword-only. The balance objective: one non-negative integer per
            sample (a list or 1-D tensor), or a callable of the effective lengths (e.g.
            ``functools.partial(transformer_workloads, hidden_size=8192, num_layers=80)``,
            see :func:`~seqlen_balancing.cost.transformer_workloads`), instead of verl's
            ``24576*s + s**2``. The cap and the count are untouched. Default ``None``.
            Both are read whole before the agreement: a mapping, a set or a string is
            refused, and whatever reading them raises is this rank's agreed error.
        group_ids: keyword-only. One hashable id per sample (a list, a 1-D tensor), or
            the name of the batch's entry holding them (e.g. ``"uid"``: a tensor or a
            ``NonTensorStack``): samples of equal id form a group that lands whole in one
            micro-batch, of any size, contiguous or not (GRPO groups after filtering;
            docs/shapes.md). A group over the cap is every rank's error naming its id (or
            runs alone under ``over_cap="alone"``). Not with ``force_group_size > 1``,
            which is ``group_ids=[i // g for i in range(n)]``. Default ``None``.
        prefix_lengths: keyword-only. With ``group_ids`` or ``force_group_size``, the
            tokens each sample shares with its group (GRPO's prompt; a list, a 1-D tensor,
            or the name of the batch's
            entry holding them), equal across a group and at most the sample's length: a
            micro-batch then costs its samples' tokens beyond the prefix plus each group's
            prefix once, and a group over the cap is split, its samples in order, into parts
            that each pay the prefix (or runs alone under ``over_cap="alone"``). Not with
            ``costs`` nor ``padded``; under DP agreement every rank passes them or none
            (docs/prefix.md). Default ``None``.
        dummy_template: keyword-only. With ``dummy_micro_batches``, a TensorDict with at
            least one row of the batch's keys and dtypes: a rank whose batch has no rows
            runs the agreed count of dummies, copies of its first row with their loss
            weights zero (without it, a zero-row batch's own dense entries give one row of
            zeros with one real token; with nothing to build from, the agreed error says
            so). Checked before the agreement. Default ``None``.
        **option_keywords: keyword-only. The library's own options by name
            (:class:`~seqlen_balancing.options.OptionKeywords`), each off by default:
            ``pad_to_multiple_of`` (per-sequence alignment, Megatron's THD: see
            :func:`~seqlen_balancing.cost.megatron_alignment`), ``micro_batch_multiple_of``
            (a micro-batch's total rounded up before it meets the cap),
            ``padded`` (a micro-batch costs rows x width; dense entries of the mask's width
            come back cut to each micro-batch's width, :mod:`~seqlen_balancing.batch.trim`),
            ``max_samples_per_micro_batch``, ``over_cap`` (``"alone"``: an over-cap sample
            or forced group runs in a micro-batch of its own, counted in the agreed count,
            and the rank holding it logs a warning on the ``seqlen_balancing`` logger),
            ``dummy_micro_batches`` (a rank with fewer samples or groups than the agreed
            count runs every group alone and the missing micro-batches as dummies, last,
            each a copy of its shortest row with every loss-weight entry zero and an empty
            index list: docs/keep-training.md), ``loss_weight_keys`` (the entries a dummy
            zeroes; ``None``: ``loss_mask`` and ``response_mask``, those the batch holds),
            ``workload_model`` and ``equal_rows_per_micro_batch`` (every micro-batch of
            every rank holds the same rows: its real rows, then filler rows, copies of one
            real row with every loss-weight entry zero, counted under the cap; the index
            lists are then :class:`~seqlen_balancing.planning.rows.RowIndices`, the real rows with
            their ``filler`` count, which :func:`restore_dynamic_batch` drops:
            docs/pipeline.md), ``heaviest_first`` (micro-batches by workload descending,
            ties by first index, over ``use_dynamic_bsz_balance``: an out-of-memory shows
            at the first). Under DP agreement every rank must plan with the same
            options and cap: ranks that differ all raise the same ``ValueError`` naming
            the option and two ranks.

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
    verl = {
        "num_batches_divided_by": num_batches_divided_by, "same_micro_num_in_dp": same_micro_num_in_dp,
        "min_num_micro_batch": min_num_micro_batch, "use_dynamic_bsz_balance": use_dynamic_bsz_balance,
        "force_group_size": force_group_size,
    }
    given, error = PlanOptions.from_keywords(options, verl, option_keywords)
    return _rearrange_rows(
        batch, max_token_len, dp_group, given, error, None, costs, workloads, same_micro_num_in_dp,
        group_ids, dummy_template, prefix_lengths,
    )[:2]


def _begin(dp_group: Any, same_micro_num_in_dp: Any) -> bool:
    """Whether this call agrees with ``dp_group`` (verl 0.9.1's rule); a process outside
    the group raises at once, since it was never part of that group's collective."""
    sync = distributed.sync_enabled(dp_group, same_micro_num_in_dp)
    error = distributed.membership_error(dp_group) if sync else None
    if error is not None:
        raise error.exception()
    return sync


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


def _agree_asked(given: PlanOptions, error: PlanError | None, same_micro_num_in_dp: Any) -> Any:
    """The ``same_micro_num_in_dp`` that decides whether the call agrees (verl's rule): the
    options' when they could be read, else the call's own value (as given: a value that is
    not a switch counts as true there, and is the error the group agrees on)."""
    if error is None or same_micro_num_in_dp is True:  # True: verl's default
        return given.same_micro_num_in_dp
    return same_micro_num_in_dp


def _rearrange_rows(
    batch: Any,
    max_token_len: Any,
    dp_group: Any,
    options: PlanOptions,
    options_error: PlanError | None = None,
    pre_error: PlanError | None = None,
    costs: Any = None,
    workloads: Any = None,
    same_micro_num_in_dp: Any = True,
    group_ids: Any = None,
    dummy_template: Any = None,
    prefix_lengths: Any = None,
) -> tuple[list[TensorDict], list[list[int]], list[list[int]]]:
    """Plan (agreeing with the DP group when asked), then cut: ``(micro_batches, plan,
    rows)``, ``rows`` the batch rows each micro-batch holds (a dummy's: the copied ones;
    on a rank with no samples, row 0 of the dummies' source); with ``padded`` cutting
    widths, ``plan`` is the :class:`~seqlen_balancing.batch.trim.MicroBatchIndices`.

    ``options`` are the call's, read by the caller, and ``options_error`` why they could
    not be (then no request is checked: the rank's error speaks); ``pre_error`` is another
    problem the caller found before planning (a bad setting, a bad DataProto). Like every
    other error they go through the agreement before anyone raises. With ``padded`` the mask's
    extents, the entries to cut and their pad values are read before the agreement
    (:func:`~seqlen_balancing.batch.trim.trim_inputs`), with ``dummy_micro_batches`` the
    loss-weight keys are checked there too, and ``group_ids`` (ids, or the name of the
    batch's entry holding them) and, on a rank with no samples, the row its dummies copy
    (``dummy_template``'s or the batch's own: :mod:`~seqlen_balancing.batch.filler`);
    ``prefix_lengths`` are read like ``group_ids`` and turned into costs and parts before
    :func:`~seqlen_balancing.planning.planner.analyse` (:func:`~seqlen_balancing.agreement.
    analyse_with_prefixes`).
    """
    sync = _begin(dp_group, _agree_asked(options, options_error, same_micro_num_in_dp))
    error = options_error or pre_error or _batch_problem(batch)
    empty = error is None and options.dummy_micro_batches and int(batch.batch_size[0]) == 0
    read = _read_batch(batch, options, error, empty, dummy_template)
    error, cause = read.error, read.cause
    ids = prefixes = None  # (read from the batch where they name an entry of it)
    if error is None:
        error, ids = _batch_values(batch, group_ids, GroupIdsKeyMissing,
                                   lambda raised, detail: GroupIdsRaised(raised, detail=detail))
    if error is None:
        error, prefixes = _batch_values(batch, prefix_lengths, PrefixLengthsKeyMissing,
                                        lambda raised, detail: CallerDataRaised("prefix_lengths", raised,
                                                                                detail=detail))
    if error is None:
        extents = None if read.trim is None or costs is not None else read.trim.extents
        analysis = analyse_with_prefixes(read.lengths, max_token_len, options, prefixes,
                                         costs=_unwrapped(costs), workloads=_unwrapped(workloads),
                                         padded_extents=extents, group_ids=ids)
    else:
        analysis = failed_analysis(error, max_token_len, None if options_error else options,
                                   costs is not None, workloads is not None, group_ids is not None,
                                   prefix_lengths is not None)
    if read.empty is not None and analysis.error is None and options.equal_rows_per_micro_batch:
        # the most copies of the template row a dummy holds under the cap (equal rows): its
        # effective tokens, or padded its width, per copy; above it the agreed RowsOverCap
        mask = read.empty.row.get("attention_mask", None)
        padded = options.padded and isinstance(mask, torch.Tensor) and mask.dim() == 2
        width = int(mask.shape[1]) if padded else 0
        # the row's tokens read as any batch's (an unreadable row is this rank's agreed error)
        row_error, lengths = (None, [width]) if width else effective_lengths(read.empty.row)
        tolerance = max(1, empty_rank_tolerance(analysis, lengths[0] if lengths else 0))
        analysis = replace(analysis, error=row_error) if row_error else replace(
            analysis, empty_rows_tolerance=tolerance)
    count, rows = _finish(analysis, sync, dp_group, cause)
    plan = build_plan(analysis, count, options.use_dynamic_bsz_balance, rows, agreed=sync)
    log_over_cap(analysis, dist.get_rank(dp_group) if sync else None)
    if read.empty is not None:
        return _empty_cut(read.empty, count, rows)
    # Offsets read before the agreement (input_ids' with its lengths): no second host copy.
    # (An empty list holds the dummy's rows; under equal rows none is empty: filler fills it.)
    dummy = analysis.samples_of(analysis.dummy_group) if analysis.n_groups else []
    return _cut_with_copies(batch, plan, read.entries, read.keys, read.trim, analysis.pad_to_multiple_of,
                            dummy)


@dataclass
class _Read:
    """What :func:`_read_batch` read of a batch before the agreement."""

    error: PlanError | None
    cause: BaseException | None = None
    lengths: list[int] = field(default_factory=list)
    entries: _Entries = field(default_factory=_Entries)
    trim: Trim | None = None
    keys: tuple[str, ...] = ()
    empty: _EmptySource | None = None


def _read_batch(batch: Any, options: PlanOptions, error: PlanError | None, empty: bool,
                dummy_template: Any) -> _Read:
    """The batch's lengths, entries, widths (``padded``) and loss-weight keys (dummies),
    each checked; a rank with no samples under dummies: the row its dummies copy instead."""
    if error is not None:
        return _Read(error)
    if empty:  # no rows: nothing to measure or cut, only the dummies' source to check
        error, source = _empty_inputs(batch, dummy_template, options.loss_weight_keys)
        return _Read(error, empty=source)
    read = _Read(None)
    offsets: list[int] | None = None
    try:
        read.error, read.lengths, offsets = _read_lengths(batch)
    except _READ_ERRORS as exc:
        # The peers must hear of it: turn it into a plan error (the cause is chained).
        read.cause, read.error = exc, LengthsUnreadable(detail=describe(exc))
    known: dict[Any, list[int]] = {} if offsets is None else {"input_ids": offsets}
    if read.error is None:
        # Every entry checked and everything the cut reads read before the agreement: a
        # failure is agreed on, and the cut after it cannot fail.
        read.error, read.entries, read.cause = _cut_inputs(batch, known)
    if read.error is None and options.padded:
        read.error, read.trim, read.cause = trim_inputs(batch, read.entries.by_rows)
    if read.error is None and (options.dummy_micro_batches or options.equal_rows_per_micro_batch):
        # dummies and filler rows alike are zero-weight copies: their keys checked first
        read.error, read.keys = _loss_weight_keys(batch, options.loss_weight_keys)
    if read.error is None and options.dummy_micro_batches and dummy_template is not None:
        # checked on every rank, so that a template that cannot serve shows at once
        read.error, _ = _empty_inputs(None, dummy_template, options.loss_weight_keys)
    return read


def prepare_micro_batches(
    data: TensorDict,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
    *,
    options: PlanOptions | None = None,
    costs: Sequence[int] | torch.Tensor | Callable[[list[int]], Iterable[int]] | None = None,
    workloads: Sequence[int] | torch.Tensor | Callable[[list[int]], Iterable[int]] | None = None,
    group_ids: str | Sequence[Hashable] | torch.Tensor | None = None,
    dummy_template: TensorDict | None = None,
    prefix_lengths: str | Sequence[int] | torch.Tensor | None = None,
    **option_keywords: Unpack[GroupOptionKeywords],
) -> tuple[list[TensorDict], list[list[int]] | None]:
    """verl's ``prepare_micro_batches``: settings are read from the TensorDict itself.

    Settings (plain entries or ``NonTensorData``): ``use_dynamic_bsz`` (default True),
    ``sp_size`` (default 1), ``max_token_len_per_gpu`` (required when dynamic; the cap is
    ``max_token_len_per_gpu * sp_size`` tokens), ``micro_batch_size_per_gpu`` (required
    when not dynamic), and every option's batch key (docs/options.md: ``force_group_size``,
    default 1, then the library's own: ``pad_to_multiple_of``, ``micro_batch_multiple_of``,
    ``padded``, ``max_samples_per_micro_batch``, ``over_cap``, ``dummy_micro_batches``,
    ``loss_weight_keys``, ``heaviest_first``), plus per-sample ``costs`` and ``workloads``
    entries (cut with the batch). Precedence: ``options=`` (else the defaults), then the
    batch's settings, then verl's parameters not at their default, then each keyword given
    other than ``None``.

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
        options: keyword-only: the options the batch's settings are laid over
            (:class:`~seqlen_balancing.PlanOptions`); ``None``: verl's behaviour.
        costs, workloads: keyword-only, dynamic path: as in
            :func:`rearrange_micro_batches`. ``None``: the batch's entry of that name (per
            sample), else none.
        group_ids, dummy_template: keyword-only, dynamic path: as in
            :func:`rearrange_micro_batches`. ``group_ids=None``: the batch's ``group_ids``
            entry (per-sample ids, or a ``NonTensorData`` naming the entry that holds
            them), else none.
        prefix_lengths: keyword-only, dynamic path: as in :func:`rearrange_micro_batches`
            (each sample's tokens shared with its group, counted once per micro-batch).
            ``None``: the batch's ``prefix_lengths`` entry (per sample, or a ``NonTensorData``
            naming the entry that holds them), else none. Refused on the static path.
        **option_keywords: keyword-only, as in :func:`rearrange_micro_batches`, and
            ``force_group_size`` (:class:`~seqlen_balancing.options.GroupOptionKeywords`);
            one given as ``None``: the batch's setting, else the default.

    Returns:
        ``(micro_batches, indices)``; ``indices`` is ``None`` on the static path.

    Raises:
        TypeError: ``data`` is not a TensorDict, or a setting or switch has a wrong type.
        ValueError: the batch sets ``use_prefix_tree`` (verl's prefix-tree micro-batches,
            which the library does not build: switch it off or unset
            ``SEQLEN_BALANCING_VERL``), a required setting is missing or below 1, a static batch not
            divisible into chunks, one of the library's own options (not verl's
            parameters) set on the static path, which has no cap for it to change (e.g.
            ``pad_to_multiple_of`` other than 1, ``costs``), ranks disagreeing on the mode or
            the static count, this process is not in ``dp_group``, or as
            :func:`rearrange_micro_batches`.

    Example:
        >>> from tensordict import NonTensorData
        >>> td = TensorDict({"attention_mask": torch.ones(4, 3)}, batch_size=[4])
        >>> td["use_dynamic_bsz"] = NonTensorData(False)
        >>> td["micro_batch_size_per_gpu"] = NonTensorData(2)
        >>> micro_batches, indices = prepare_micro_batches(td)
        >>> [len(mb) for mb in micro_batches], indices
        ([2, 2], None)
    """
    verl = {
        "num_batches_divided_by": num_batches_divided_by, "same_micro_num_in_dp": same_micro_num_in_dp,
        "min_num_micro_batch": min_num_micro_batch, "use_dynamic_bsz_balance": use_dynamic_bsz_balance,
    }
    cause: BaseException | None = None
    error = _batch_problem(data)
    keywords = {name: value for name, value in option_keywords.items() if value is not None}
    given, options_error = PlanOptions.from_keywords(options, verl, keywords)
    dynamic, value = True, 0
    per_sample = {"costs": costs, "workloads": workloads, "group_ids": group_ids,
                  "prefix_lengths": prefix_lengths}
    if error is None:
        try:
            error, dynamic, setting = _settings(data)
            value = setting or 0
            given, options_error = _batch_options(data, options, verl, keywords)
            if dynamic:  # each one not given: the batch's entry of its name (cut with the batch)
                per_sample = {
                    key: _unwrapped(data.get(key)) if value is None and key in data.keys() else value
                    for key, value in per_sample.items()
                }
        except _READ_ERRORS as exc:
            cause, error = exc, LengthsUnreadable(detail=describe(exc))
    if dynamic:
        return _rearrange_rows(
            data if error is None else None, value, dp_group, given, options_error, error,
            same_micro_num_in_dp=same_micro_num_in_dp, dummy_template=dummy_template, **per_sample,
        )[:2]
    return _static(data, dp_group, given, options_error or error, cause, value, per_sample,
                   same_micro_num_in_dp)


def _static(
    data: TensorDict, dp_group: Any, options: PlanOptions, error: PlanError | None,
    cause: BaseException | None, size: int, per_sample: dict[str, Any],
    same_micro_num_in_dp: Any,
) -> tuple[list[TensorDict], None]:
    """The static path: chunks of ``micro_batch_size_per_gpu * force_group_size`` samples,
    agreed on (mode and count) with the group like the dynamic path."""
    sync = _begin(dp_group, _agree_asked(options, error, same_micro_num_in_dp))
    error = error or _static_option_error(options, per_sample)
    chunk = size * options.force_group_size
    n = int(data.batch_size[0])
    if error is None and (n == 0 or n % chunk):
        error = StaticNotDivisible(n, size, options.force_group_size)
    entries = _Entries()
    if error is None:
        error, entries, cause = _cut_inputs(data, {})
    static_count = n // chunk if error is None else 0
    _finish(RankAnalysis(error), sync, dp_group, cause, static_count)
    chunks = [list(range(start, start + chunk)) for start in range(0, n, chunk)]
    # Dense entries are views of the input, as verl's chunk makes them (nested and sparse
    # entries are rebuilt per chunk: copies, as verl rebuilds nested ones).
    return _cut(data, chunks, entries, copy=False), None


def _static_option_error(options: PlanOptions, per_sample: dict[str, Any]) -> PlanError | None:
    """One of the library's own options set on the static path, which has no cap it could
    change: refused, never ignored (verl's parameters are accepted there, as verl accepts
    them; a value at its default changes nothing and is accepted)."""
    for name, value in options.changed().items():
        opt = OPTIONS[name]
        if not (opt.static or opt.verl_parameter):
            return StaticPathOption(name, value if type(value) is int else None)  # None: not shown
    given = [argument for argument, value in per_sample.items() if value is not None]
    return StaticPathOption(given[0], None) if given else None


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


def _int_setting(
    data: TensorDict, key: str, default: int | None
) -> tuple[PlanError | None, int]:
    """A positive-integer setting, or the error to agree on (missing, wrong type, < 1)."""
    value = _setting(data, key, default)
    if value is None:
        return MissingSetting(key), 0
    return argument_error(value, key)


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
    # read first, as verl reads it (PR #6689), never ignored: anything but absent, None,
    # false or 0 (a flag per row: any row's)
    tree = _setting(data, "use_prefix_tree", None)
    if isinstance(tree, torch.Tensor) and tree.numel() != 1 and tree.device.type != "meta":
        tree = bool(tree.ne(0).any())
    if tree is not None and as_switch(tree) is not False:
        return PrefixTreeAsked("use_prefix_tree"), True, 0
    raw_dynamic = _setting(data, "use_dynamic_bsz", True)
    # an unreadable switch plans dynamically (the default), and its error is agreed on
    dynamic = as_switch(raw_dynamic) is not False
    dynamic_error = None if as_switch(raw_dynamic) is not None else NotASwitch(
        "use_dynamic_bsz", detail=describe(raw_dynamic))
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
        value = _unwrapped(batch.get(values))
        if isinstance(value, NonTensorStack):
            value = value.tolist()
    except _READ_ERRORS as exc:
        return raised(type(exc).__name__, describe(exc)[:120]), None
    return None, value
