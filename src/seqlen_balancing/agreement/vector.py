"""How DP ranks agree on one micro-batch count (no torch).

The success path is one ``all_reduce(MAX)`` of :data:`VECTOR_SIZE` int64 values (the
collective itself lives in :mod:`seqlen_balancing.agreement.collective`; :func:`combine` is the same
MAX in one process). Each rank :func:`encode` s what it needs, every rank reads the same
reduced vector, and so reaches the same verdict. When the vector shows that some rank failed
or that the ranks were asked to plan differently, every rank makes the same second exchange:
each gathers every rank's :class:`Report` (its error as the exception record it holds, and
the settings it plans under) and every rank raises the same error from them, the way
``torch.distributed.checkpoint`` gathers failures only when there is one. Equal rows
(``equal_rows_per_micro_batch``) agree on their rows in one more small all_reduce
(:func:`encode_rows`), made only when that option is on.

The vector, slot by slot (:data:`LAYOUT`). A ``tag`` is ``2**20-1-rank``, so that MAX
prefers the lowest rank; a rank with nothing to say in a slot holds its idle value (0, or
``-2**62`` for a negated slot, below any real value):

* ``failed``: 1 when this rank holds an error (the reports then say which);
* ``fingerprint`` and ``neg_fingerprint``: a 61-bit hash of every setting the rank plans
  under (:func:`settings_of`: every agreed option of :class:`~seqlen_balancing.PlanOptions`,
  the cap, whether ``costs``/``workloads``/``group_ids`` are given, and the job's own step
  settings, :func:`~seqlen_balancing.options.step_settings`), and its negation: after the
  MAX they differ exactly when two ranks' settings do;
* ``count``, ``count << 20 | tag``: the largest needed count and the lowest rank needing it;
* ``groups``, ``-groups << 20 | tag``: the fewest samples/groups and its rank;
* ``mode``/``neg_mode`` (1 dynamic, 2 static) and ``static``/``neg_static`` (the static
  count): a group mixing both paths, or static ranks whose counts differ, is an error on
  every rank naming one rank of each;
* ``largest``: the costliest sample or forced group the rank holds (capped at
  ``2**62 + 1``), so that advice on the cap names the longest in the whole group;
* ``dummy_groups``: ``-groups << 20 | tag`` of the ranks that serve a count above their
  groups with dummies (``dummy_micro_batches=True``).

The agreed count is the largest needed count rounded up to ``num_batches_divided_by`` (the
same on every rank, or the settings differ); if a rank has fewer samples/groups than that,
every rank raises the same ``ValueError``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

from seqlen_balancing.cost import WorkloadModel
from seqlen_balancing.errors import (
    OUT_OF_RANGE,
    ModeMismatch,
    OptionMismatch,
    PlanError,
    RowsOverCap,
    StaticCountMismatch,
)
from seqlen_balancing.options import OPTIONS, PlanOptionKeywords, PlanOptions, Unpack, step_settings
from seqlen_balancing.planning.planner import (
    RankAnalysis,
    agreed_count,
    analyse_with_prefixes,
    build_plan,
    local_count,
    log_over_cap,
)
from seqlen_balancing.planning.rows import rows_at

__all__ = [
    "LAYOUT",
    "VECTOR_SIZE",
    "Layout",
    "RankPlan",
    "Report",
    "Setting",
    "Slot",
    "agree_in_process",
    "analyse_with_prefixes",
    "combine",
    "decode",
    "decode_rows",
    "encode",
    "encode_rows",
    "fingerprint",
    "needs_reports",
    "plan_data_parallel",
    "plan_ranks",
    "report",
    "settings_of",
]

_RANK_BITS = 20
_RANK_MASK = (1 << _RANK_BITS) - 1
_IDLE = -(1 << 62)  # a negated slot of a rank that has nothing to say: never the MAX
_HASH_BITS = 61


@dataclass(frozen=True)
class Slot:
    """A named run of ``width`` int64 values in the vector; ``idle`` is what a rank with
    nothing to say there contributes (MAX then ignores it)."""

    name: str
    width: int = 1
    idle: int = 0


class Layout:
    """Slots in order: each one's start index and the vector's size follow from the widths.

    Example:
        >>> layout = Layout(Slot("a"), Slot("b", 3), Slot("c", idle=-1))
        >>> layout.start("c"), layout.size, layout.idle_vector()
        (4, 5, [0, 0, 0, 0, -1])
    """

    def __init__(self, *slots: Slot) -> None:
        self.slots = slots
        names = [slot.name for slot in slots]
        for i, slot in enumerate(slots):
            if slot.name in names[:i] or slot.width < 1:
                raise ValueError(f"slot {slot.name!r}: names are unique and widths at least 1")
        starts = list(accumulate((slot.width for slot in slots), initial=0))
        self._starts = dict(zip(names, starts, strict=False))  # the last start is the end
        #: Number of int64 values in the vector.
        self.size = starts[-1]

    def start(self, name: str) -> int:
        """Index of the first value of slot ``name``."""
        return self._starts[name]

    def idle_vector(self) -> list[int]:
        """A vector holding every slot's idle value: a rank that has nothing to say."""
        return [slot.idle for slot in self.slots for _ in range(slot.width)]


#: The agreement's vector, slot by slot (the module docstring says what each one holds).
LAYOUT = Layout(
    Slot("failed"),
    Slot("fingerprint"),
    Slot("neg_fingerprint", idle=_IDLE),
    Slot("count"),
    Slot("groups", idle=_IDLE),
    Slot("mode"),
    Slot("neg_mode", idle=_IDLE),
    Slot("static"),
    Slot("neg_static", idle=_IDLE),
    Slot("largest"),
    Slot("dummy_groups", idle=_IDLE),
)

#: Length of the int64 vector each rank contributes (at most 16).
VECTOR_SIZE = LAYOUT.size

_FAILED, _PRINT, _NEG_PRINT, _COUNT, _GROUPS, _MODE, _NEG_MODE, _STATIC, _NEG_STATIC, _LARGEST, \
    _DUMMY_GROUPS = range(VECTOR_SIZE)
_LARGEST_LIMIT = (1 << 62) + 1  # stored for anything above 2**62: "out of range"
_DYNAMIC_MODE, _STATIC_MODE = 1, 2


@dataclass(frozen=True)
class Setting:
    """One setting a rank plans under, as the ranks compare it.

    ``key`` orders and compares values (``None``: the rank could not state it, and its own
    error speaks); values that compare equal have equal keys (``-0.0`` and ``0.0``, ``1``
    and ``1.0``). ``shown`` is the value as a message names it; ``given`` marks per-sample
    data (``costs``), named as passed or not rather than by value.
    """

    name: str
    key: tuple[int, Any] | None
    shown: str
    given: bool = False


def _setting(name: str, value: Any, given: bool = False) -> Setting:
    """``value`` as :class:`Setting` ``name``: numbers, switches and ``over_cap`` compare by
    value, anything else (keys, a model) by its text."""
    if isinstance(value, bool) or value is None:
        return Setting(name, (0, int(bool(value))), str(value), given)
    if isinstance(value, str) and value in ("raise", "alone"):
        return Setting(name, (0, ("raise", "alone").index(value)), repr(value))
    if isinstance(value, float):
        value += 0.0  # -0.0 and 0.0 compare equal: one key
        if not math.isfinite(value):
            return Setting(name, (1, repr(value)), repr(value))
        return Setting(name, (0, int(value) if value.is_integer() else value), repr(value))
    if isinstance(value, int):
        return Setting(name, (0, value), str(value))
    text = str(value) if isinstance(value, WorkloadModel) else repr(value)
    return Setting(name, (1, f"{type(value).__name__}:{text}"), text)


def settings_of(analysis: RankAnalysis) -> tuple[Setting, ...] | None:
    """Every setting this rank plans under, in a fixed order: each agreed option of
    :class:`~seqlen_balancing.PlanOptions`, the cap, whether ``costs``, ``workloads``,
    ``group_ids`` and ``prefix_lengths`` are given, and the job's step settings
    (:func:`~seqlen_balancing.options.step_settings`); ``None`` when the rank's options
    could not be read (its error speaks).

    Example:
        >>> from seqlen_balancing.planning.planner import analyse
        >>> [s.shown for s in settings_of(analyse([5, 6], 8))][:3]
        ['1', '1', '1']
    """
    request = analysis.request
    if request is None:
        return None
    settings = []
    for name, opt in OPTIONS.items():
        if opt.agreed:
            value = getattr(request.options, name)
            if value is None and name in ("min_num_micro_batch", "num_batches_divided_by"):
                value = 1  # None plans as 1
            settings.append(_setting(name, value))
    cap = analysis.requested_max_token_len
    settings.append(_setting("max_token_len", cap) if cap else Setting("max_token_len", None, ""))
    given = {"costs": request.costs, "workloads": request.workloads, "group_ids": request.groups,
             "prefix_lengths": request.prefixes}
    settings += [_setting(name, value, given=True) for name, value in given.items()]
    settings += [_setting(name, value) for name, value in step_settings().items()]
    return tuple(settings)


def fingerprint(settings: Sequence[Setting]) -> int:
    """A 61-bit BLAKE2b hash of the settings' keys: the same in every process (unlike
    ``hash()``), equal for settings that compare equal."""
    digest = hashlib.blake2b(repr([(s.name, s.key) for s in settings]).encode("utf-8"), digest_size=8)
    return int.from_bytes(digest.digest(), "big") >> (64 - _HASH_BITS)


@dataclass(frozen=True)
class Report:
    """What a rank says in the second exchange, made only when the first one shows that
    some rank failed or that the settings differ: its error and its settings."""

    error: PlanError | None
    settings: tuple[Setting, ...] | None


def report(analysis: RankAnalysis, static_count: int | None = None) -> Report:
    """This rank's :class:`Report` (a static rank states no settings: its mode speaks)."""
    return Report(analysis.error, None if static_count is not None else settings_of(analysis))


def encode(analysis: RankAnalysis, rank: int, static_count: int | None = None) -> list[int]:
    """The vector rank ``rank`` contributes to the MAX reduction.

    Args:
        analysis: this rank's :func:`~seqlen_balancing.planning.planner.analyse` result (on the
            static path, a :class:`RankAnalysis` holding only the rank's error, if any).
        rank: this rank's index in the DP group, ``0 <= rank < 2**20``.
        static_count: this rank's number of static micro-batches (``use_dynamic_bsz=False``),
            or ``None`` on the dynamic path.

    Returns:
        :data:`VECTOR_SIZE` ints, each within int64.

    Raises:
        ValueError: ``rank`` is outside ``0..2**20-1``.
    """
    if not 0 <= rank <= _RANK_MASK:
        raise ValueError(f"DP rank must be in 0..{_RANK_MASK}, got {rank}")
    tag = _RANK_MASK - rank
    vector = LAYOUT.idle_vector()
    vector[_LARGEST] = min(analysis.largest, _LARGEST_LIMIT)
    settings = None if static_count is not None else settings_of(analysis)
    if settings is not None:
        vector[_PRINT] = fingerprint(settings)
        vector[_NEG_PRINT] = -vector[_PRINT]
    if analysis.error is not None:
        vector[_FAILED] = 1
        return vector
    mode = _DYNAMIC_MODE if static_count is None else _STATIC_MODE
    vector[_MODE], vector[_NEG_MODE] = mode << _RANK_BITS | tag, -mode << _RANK_BITS | tag
    if static_count is not None:
        vector[_STATIC], vector[_NEG_STATIC] = (static_count << _RANK_BITS | tag,
                                                -static_count << _RANK_BITS | tag)
        return vector
    vector[_COUNT] = analysis.needed_count << _RANK_BITS | tag
    groups = _DUMMY_GROUPS if analysis.given.dummy_micro_batches else _GROUPS
    vector[groups] = -analysis.n_groups << _RANK_BITS | tag
    return vector


def combine(vectors: Sequence[Sequence[int]]) -> list[int]:
    """Element-wise MAX of the ranks' vectors: what ``all_reduce(op=MAX)`` computes."""
    return [max(column) for column in zip(*vectors, strict=True)]


def needs_reports(reduced: Sequence[int]) -> bool:
    """Whether the ranks must exchange :class:`Report` s: some rank failed, or two ranks'
    settings differ (the same answer on every rank)."""
    # an idle neg_fingerprint: no rank could state its settings
    return bool(reduced[_FAILED]) or (reduced[_NEG_PRINT] != _IDLE
                                      and reduced[_PRINT] != -reduced[_NEG_PRINT])


def _split(slot: int) -> tuple[int, int]:
    """``(value, rank)`` of a ``value << 20 | (2**20-1-rank)`` slot."""
    return slot >> _RANK_BITS, _RANK_MASK - (slot & _RANK_MASK)


@dataclass(frozen=True)
class _Peers:
    """What the reduced vector says about the group (:class:`~seqlen_balancing.errors.Peers`)."""

    largest_slot: int
    ranks: Callable[[int], int] | None

    def costliest(self, own: int) -> int:
        """The larger of an error's own costliest and the group's (the ``largest`` slot's
        MAX); "out of range" when the slot saturated above the own, the true value unknown."""
        return (OUT_OF_RANGE if self.largest_slot >= _LARGEST_LIMIT and own < self.largest_slot
                else max(own, self.largest_slot))

    def global_rank(self, rank: int | None) -> int | None:
        return None if self.ranks is None or rank is None else self.ranks(rank)


def _mismatch(reports: Sequence[Report], peers: _Peers) -> PlanError | None:
    """The first setting on which the ranks that stated it differ: the largest value and
    the smallest, each held by its lowest rank; else ``None``."""
    stated = [(rank, r.settings) for rank, r in enumerate(reports) if r.settings is not None]
    for column in zip(*(settings for _, settings in stated), strict=True):
        held = [(s, rank) for s, (rank, _) in zip(column, stated, strict=True) if s.key is not None]
        if len({s.key for s, _ in held}) < 2:
            continue
        top, bottom = max(s.key for s, _ in held), min(s.key for s, _ in held)
        high, rank_high = next(p for p in held if p[0].key == top)  # held is in rank order
        low, rank_low = next(p for p in held if p[0].key == bottom)
        return OptionMismatch(high.name, high.given, rank_high, high.shown, rank_low, low.shown,
                              peers.global_rank(rank_high), peers.global_rank(rank_low))
    return None


def _judge(reports: Sequence[Report], peers: _Peers) -> tuple[PlanError, int | None] | None:
    """The error every rank raises from the reports: differing settings first (ranks asked
    to plan differently is the cause to fix), else the lowest failing rank's error."""
    mismatch = _mismatch(reports, peers)
    if mismatch is not None:
        return mismatch, None
    return next(((replace(r.error.agreed(peers), detail=""), rank)
                 for rank, r in enumerate(reports) if r.error is not None), None)


def decode(
    reduced: Sequence[int],
    num_batches_divided_by: int = 1,
    reports: Sequence[Report] | None = None,
    global_rank: Callable[[int], int] | None = None,
) -> tuple[int, PlanError | None, int | None]:
    """The verdict every rank reads from the reduced vector (and the reports, when
    :func:`needs_reports`).

    Args:
        reduced: the element-wise MAX of all ranks' :func:`encode` vectors.
        num_batches_divided_by: the divisor every rank plans under (agreed, or the reports
            name the difference).
        reports: every rank's :class:`Report`, in rank order; required when
            :func:`needs_reports` holds.
        global_rank: maps a DP group rank to its global rank, so that errors name both
            (``None``: only group ranks are named).

    Returns:
        ``(count, None, None)`` when every rank can plan ``count`` micro-batches (the
        largest needed count rounded up to ``num_batches_divided_by``; on the static path
        the common static count), else ``(0, error, rank at fault)`` (rank ``None`` when no
        single rank is at fault). The error's ``rank`` and ``global_rank`` are set, so
        ``error.exception()`` names them.

    Raises:
        ValueError: the reports are needed but not given.
    """
    peers = _Peers(reduced[_LARGEST], global_rank)

    def at_fault(error: PlanError, rank: int | None) -> tuple[int, PlanError, int | None]:
        return 0, replace(error, rank=rank, global_rank=peers.global_rank(rank)), rank

    if needs_reports(reduced):
        if reports is None:
            raise ValueError("the reduced vector shows a failure: pass every rank's report")
        judged = _judge(reports, peers)
        if judged is not None:
            return at_fault(*judged)
    (mode, rank_most), (neg_mode, rank_least) = _split(reduced[_MODE]), _split(reduced[_NEG_MODE])
    if mode != -neg_mode:
        return 0, ModeMismatch(rank_most, rank_least, peers.global_rank(rank_most),
                               peers.global_rank(rank_least)), None
    if mode == _STATIC_MODE:
        (largest, rank_largest), (neg, rank_smallest) = _split(reduced[_STATIC]), _split(reduced[_NEG_STATIC])
        if largest != -neg:
            return 0, StaticCountMismatch(rank_largest, largest, rank_smallest, -neg,
                                          peers.global_rank(rank_largest),
                                          peers.global_rank(rank_smallest)), None
        return largest, None, None
    (needed, rank_needing), (neg_groups, rank_fewest) = _split(reduced[_COUNT]), _split(reduced[_GROUPS])
    count, error = agreed_count(needed, -neg_groups, num_batches_divided_by, rank_needing)
    if error is not None:
        return at_fault(error.agreed(peers), rank_fewest)
    # idle (no rank serves dummies): 2**42 groups, never short
    neg_dummy_groups, rank_shortest = _split(reduced[_DUMMY_GROUPS])
    _, error = agreed_count(count, -neg_dummy_groups, 1, dummies=True)
    if error is not None:
        return at_fault(error, rank_shortest)
    return count, None, None


def encode_rows(analysis: RankAnalysis, count: int, rank: int) -> list[int]:
    """``equal_rows_per_micro_batch``'s second agreement, at the agreed ``count``: the rows
    this rank's plan needs and the most rows its micro-batches can be topped up to under
    the cap (:func:`~seqlen_balancing.planning.rows.rows_at`, found here, at that count
    only), as ``[rows << 20 | tag, -tolerance << 20 | tag]`` (idle for a rank with
    neither)."""
    tag = _RANK_MASK - rank
    if analysis.equal_rows is not None:
        at = rows_at(analysis, count)
        rows, tolerance = at.rows, at.tolerance
    elif analysis.empty_rows_tolerance:  # a rank with no samples: dummies of any rows
        rows, tolerance = 0, analysis.empty_rows_tolerance
    else:
        return [0, _IDLE]
    return [rows << _RANK_BITS | tag, -tolerance << _RANK_BITS | tag]


def decode_rows(
    reduced: Sequence[int], max_token_len: int, global_rank: Callable[[int], int] | None = None
) -> tuple[int, PlanError | None, int | None]:
    """``(rows, None, None)``: the rows every micro-batch of the group holds (the most any
    rank needs), or ``(0, error, rank)`` when they exceed what some rank's micro-batches
    take under ``max_token_len`` (that rank named)."""
    # idle slots read as 0 rows and a tolerance of 2**42, above any rows
    (rows, _), (neg_tolerance, rank_tight) = _split(reduced[0]), _split(reduced[1])
    if rows <= -neg_tolerance:
        return rows, None, None
    # the tightest rank, by both names
    return 0, RowsOverCap(rows, -neg_tolerance, max_token_len, rank=rank_tight,
                          global_rank=None if global_rank is None else global_rank(rank_tight)), rank_tight


def verdict(
    analysis: RankAnalysis,
    reduce: Callable[[Callable[[RankAnalysis, int], list[int]]], list[int]],
    gather: Callable[[], Sequence[Report]],
    global_rank: Callable[[int], int] | None = None,
    static_count: int | None = None,
) -> tuple[int, PlanError | None, int | None, int]:
    """The whole agreement as this rank sees it, over whatever moves the vectors: ``reduce``
    takes an encoder of ``(analysis, rank)`` and returns the MAX of every rank's vector,
    ``gather`` every rank's :class:`Report` (called only when :func:`needs_reports`). The
    vector first; under ``equal_rows_per_micro_batch`` (dynamic path, agreed), the rows
    (:func:`encode_rows`) in one more ``reduce``.

    Returns:
        ``(count, None, None, rows)`` or ``(0, error, rank at fault or None, 0)``; ``rows``
        0 without equal rows.
    """
    reduced = reduce(lambda a, rank: encode(a, rank, static_count))
    count, error, at_fault = decode(reduced, analysis.num_batches_divided_by,
                                    gather() if needs_reports(reduced) else None, global_rank)
    if error is not None or static_count is not None or not analysis.given.equal_rows_per_micro_batch:
        return count, error, at_fault, 0
    # agreed: every rank makes this collective, each finding its rows at the agreed count
    rows, error, at_fault = decode_rows(reduce(lambda a, rank: encode_rows(a, count, rank)),
                                        analysis.requested_max_token_len, global_rank)
    return (0, error, at_fault, 0) if error is not None else (count, None, None, rows)


def agree_in_process(analyses: Sequence[RankAnalysis]) -> tuple[int, int]:
    """The agreement of :func:`plan_ranks`, every rank in this process: the count, and the
    rows every micro-batch holds under ``equal_rows_per_micro_batch`` (0: off).

    Raises:
        TypeError, ValueError: the error every rank of a real group would raise.
    """
    count, error, _, rows = verdict(
        analyses[0], lambda encoder: combine([encoder(a, rank) for rank, a in enumerate(analyses)]),
        lambda: [report(a) for a in analyses])
    if error is not None:
        raise error.exception()
    return count, rows


@dataclass(frozen=True)
class RankPlan:
    """One rank's part of :func:`plan_ranks`: its analysis and its micro-batches."""

    analysis: RankAnalysis
    plan: list[list[int]]


def plan_ranks(
    seq_lens_per_rank: Sequence[Sequence[int]],
    max_token_len: Any,
    options: PlanOptions | None = None,
    *,
    costs: Sequence[Any] | None = None,
    workloads: Sequence[Any] | None = None,
    group_ids: Sequence[Any] | None = None,
    prefix_lengths: Sequence[Any] | None = None,
) -> list[RankPlan]:
    """Plan every DP rank in one process with the real agreement: each rank's analysis
    (the planner's ``analyse``), the encoding, the MAX, the decoding, and
    each rank's plan at the agreed count (or its own, with ``same_micro_num_in_dp``
    false). What :func:`~seqlen_balancing.plan_data_parallel` and the command line plan with.

    Args:
        seq_lens_per_rank: for each DP rank, its samples' effective lengths in tokens.
        max_token_len: hard cap in tokens per micro-batch.
        options: the options every rank plans with (``None``: verl's behaviour).
        costs, workloads, group_ids, prefix_lengths: for each rank, its per-sample data
            (as :func:`~seqlen_balancing.plan_micro_batches` takes it), or ``None``.

    Returns:
        One :class:`RankPlan` per rank, in rank order.

    Raises:
        TypeError, ValueError: as on a real DP group, the message naming the rank at fault
            (the lowest one, when several are); ``costs``/``workloads`` not one list per
            rank, or no rank at all.

    Complexity: the sum of the ranks' planning; one encode and decode per rank.
    """
    given = PlanOptions() if options is None else options
    for name, per_rank in (("costs", costs), ("workloads", workloads), ("group_ids", group_ids),
                           ("prefix_lengths", prefix_lengths)):
        if per_rank is not None and len(per_rank) != len(seq_lens_per_rank):
            raise ValueError(
                f"{name} has {len(per_rank)} lists but seq_lens_per_rank has "
                f"{len(seq_lens_per_rank)} ranks; give one list of {name} per DP rank"
            )
    if not seq_lens_per_rank:
        raise ValueError("seq_lens_per_rank is empty; pass one list of lengths per DP rank")
    analyses = [
        analyse_with_prefixes(lens, max_token_len, given,
                              None if prefix_lengths is None else prefix_lengths[rank],
                              costs=None if costs is None else costs[rank],
                              workloads=None if workloads is None else workloads[rank],
                              group_ids=None if group_ids is None else group_ids[rank])
        for rank, lens in enumerate(seq_lens_per_rank)
    ]
    if given.same_micro_num_in_dp:
        count, rows = agree_in_process(analyses)
        plans = [build_plan(a, count, given.use_dynamic_bsz_balance, rows, agreed=True) for a in analyses]
    else:
        plans = [build_plan(a, local_count(a, rank), given.use_dynamic_bsz_balance)
                 for rank, a in enumerate(analyses)]
    for rank, a in enumerate(analyses):
        log_over_cap(a, rank)
    return [RankPlan(a, plan) for a, plan in zip(analyses, plans, strict=True)]


def plan_data_parallel(
    seq_lens_per_rank: Sequence[Sequence[int]],
    max_token_len: int,
    *,
    options: PlanOptions | None = None,
    costs: Sequence[Sequence[int]] | None = None,
    workloads: Sequence[Sequence[int]] | None = None,
    group_ids: Sequence[Sequence[Any]] | None = None,
    prefix_lengths: Sequence[Sequence[int]] | None = None,
    **option_keywords: Unpack[PlanOptionKeywords],
) -> list[list[list[int]]]:
    """Plan every DP rank's micro-batches in one process, with the real agreement rule.

    What :func:`~seqlen_balancing.rearrange_micro_batches` does on each rank of a DP group
    (same encoding, MAX and decoding: :func:`~seqlen_balancing.agreement.plan_ranks`),
    without ``torch.distributed``: useful for tools, tests and capacity planning. Every rank
    plans with the same options.

    Args:
        seq_lens_per_rank: for each DP rank, its samples' effective lengths in tokens.
        max_token_len: hard cap in tokens per micro-batch.
        options: the options (:class:`~seqlen_balancing.PlanOptions`, docs/options.md);
            ``None``: verl's behaviour.
        costs: for each rank, one cost in tokens per sample (same shape as
            ``seq_lens_per_rank``) instead of the effective lengths, rounded up to
            ``pad_to_multiple_of`` as they are, or ``None``.
        workloads: for each rank, one balance workload per sample (same shape), instead
            of verl's ``24576*s + s**2``, or ``None``.
        group_ids: for each rank, one hashable id per sample (same shape), or ``None``:
            each group lands whole in one micro-batch of its rank (as
            :func:`~seqlen_balancing.plan_micro_batches` takes them).
        prefix_lengths: for each rank, with ``group_ids`` or ``force_group_size``, the
            tokens each sample shares with its group (same shape), or ``None``: each
            group's shared prefix counts
            once per micro-batch (:func:`~seqlen_balancing.plan_micro_batches`,
            docs/prefix.md). A rank passing them while another does not raises on every rank.
        **option_keywords: any option by name, laid over ``options``: e.g.
            ``same_micro_num_in_dp`` (if true, the default, every rank gets the largest
            needed count, rounded up to ``num_batches_divided_by``; else each rank plans
            alone), ``min_num_micro_batch``, ``padded`` (every rank agrees on the largest
            of the ranks' fewest padded counts), ``over_cap="alone"`` (its micro-batch
            counts in the agreed count; a warning names the rank holding it),
            ``dummy_micro_batches`` (a rank with fewer samples/groups than the agreed count
            gets the missing micro-batches as empty lists, last; a rank with no samples
            gets the agreed count of them),
            ``equal_rows_per_micro_batch`` (every micro-batch of every rank holds the same
            rows, short ones topped up with filler rows counted under the cap; a rank that
            cannot take them raises on every rank: docs/pipeline.md).

    Returns:
        For each rank, its micro-batches as lists of that rank's sample indices; every
        micro-batch's cost is at most ``max_token_len`` (but an over-cap sample's alone);
        dummies are empty lists at the end.

    Raises:
        TypeError: an option of the wrong type (a switch that is not a bool or 0/1, an
            unknown name), checked first; else as below.
        TypeError, ValueError: as on a real DP group: the message names the rank at fault
            (the lowest one, when several are).

    Example:
        >>> plans = plan_data_parallel([[95] * 5, [20] * 5], 100)
        >>> [len(p) for p in plans]
        [5, 5]
        >>> plan_data_parallel([[50], [60], [70], []], 1000, dummy_micro_batches=True)
        [[[0]], [[0]], [[0]], [[]]]
    """
    given, error = PlanOptions.from_keywords(options, None, option_keywords)
    if error is not None:
        raise error.exception()
    return [rank.plan for rank in plan_ranks(seq_lens_per_rank, max_token_len, given, costs=costs,
                                             workloads=workloads, group_ids=group_ids,
                                             prefix_lengths=prefix_lengths)]
