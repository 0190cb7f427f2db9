"""How DP ranks agree on one micro-batch count with a single element-wise MAX (no torch).

Each rank encodes its :class:`~seqlen_balancing.planner.RankAnalysis` (dynamic path) or its
static micro-batch count (``use_dynamic_bsz=False``) into a vector of :data:`VECTOR_SIZE`
int64 values; the group reduces the vectors with MAX (one ``all_reduce`` in
:mod:`seqlen_balancing.distributed`, or :func:`combine` in one process); every rank decodes
the same reduced vector and so reaches the same verdict.

The vector is :data:`LAYOUT`, declared once below: named slots with widths, in order; the
indices and :data:`VECTOR_SIZE` follow from it, and a new slot is one more line there. A
``tag`` is ``2**20-1-rank``, so that MAX prefers the lowest rank; a slot a rank has nothing
to say in holds its idle value (0, or ``-2**62`` for a negated slot, below any real value).

* ``error_key``: 0 without an error, else ``tag << B | code``, ``code`` the error record's
  number (1..N, :data:`~seqlen_balancing.errors.RECORDS`) in the low ``B = N.bit_length()``
  bits, so MAX picks an error over none and, among errors, the lowest rank at fault;
* ``error_values``: the record's :data:`~seqlen_balancing.errors.N_ERROR_VALUES` integers
  (:meth:`~seqlen_balancing.errors.PlanError.values`, zeros after them), each split in a
  high and a low part (38 bits each) stored as ``tag << 38 | part``: the tag in the high
  bits makes MAX take every part from the rank whose error won, and the split carries
  values up to ``2**76 - 1`` whole (:data:`~seqlen_balancing.errors.MAX_ERROR_VALUE`;
  larger ones arrive as "out of range");
* ``count``, ``count << 20 | tag``: the largest needed count and the lowest rank needing it;
* ``groups``, ``-groups << 20 | tag``: the fewest samples/groups and its rank;
* ``mode`` and ``neg_mode``, the mode (1 dynamic, 2 static) as ``mode << 20 | tag`` and
  ``-mode << 20 | tag``: a group mixing both modes is an error on every rank, naming one
  rank of each;
* ``static`` and ``neg_static``, the static count as ``count << 20 | tag`` and
  ``-count << 20 | tag``: static ranks whose counts differ are an error on every rank,
  naming the largest and the smallest;
* ``largest``, the costliest sample or forced group (tokens of cost) the rank holds, capped
  at ``2**62 + 1`` (which then stands for "above 2**62"), error or not: an over-cap error's
  advice ("raise max_token_len to at least X") then names the longest in the whole DP
  group, so following it cannot fail again on another rank
  (:meth:`~seqlen_balancing.errors.PlanError.agreed`);
* ``dummy_groups``, ``-groups << 20 | tag`` of the ranks that serve a count above their
  groups with dummies (``dummy_micro_batches=True``): those ranks leave ``groups`` idle
  (they never make the count impossible), and this slot bounds the dummies the agreed count
  needs on the shortest of them (:data:`~seqlen_balancing.errors.MAX_DUMMY_MICRO_BATCHES`);
* ``rows`` and ``neg_rows_tolerance`` (``equal_rows_per_micro_batch``), each
  :data:`~seqlen_balancing.rows.ROWS_WINDOW` wide: for each count ``c`` of the rank's
  window (its own count and the next multiples of ``num_batches_divided_by``), at place
  ``c / num_batches_divided_by`` modulo the width, ``rows << 20 | tag``, the fewest rows
  its plan needs at ``c``, and ``-tolerance << 20 | tag``, the most rows that plan's
  micro-batches can be topped up to under the cap (:mod:`seqlen_balancing.rows`). At the
  agreed count's place every micro-batch of the group holds the largest ``rows``; when
  that is above the smallest tolerance, every rank raises the same
  :class:`~seqlen_balancing.errors.RowsOverCap`, naming the rank holding it. A count
  above a rank's window reads the rows of the window's count at the same place, whose
  plan split up to the agreed count keeps them;
* the request, one pair of slots per quantity of :data:`REQUEST`: every agreed option of
  :class:`~seqlen_balancing.PlanOptions` (``option_<name>``), the cap
  (``option_max_token_len``) and whether the rank passes ``costs``, ``workloads`` and
  ``group_ids`` (``option_costs``, ``option_workloads``, ``option_group_ids``: the ids
  themselves differ from rank to rank, as the lengths do; whether groups are used must not).
  A pair holds the value as ``value << 20 | tag``
  and ``-value << 20 | tag`` (``neg_option_<name>``), a 42-bit value: a positive integer
  as itself (0 for ``None``), a switch 0/1, ``over_cap`` its index; keys, a model and any
  number of 2**41 or more as ``2**41`` plus a stable 41-bit hash (:func:`request_value`,
  BLAKE2b: the same in every process, unlike ``hash()``). After the MAX, a pair whose two
  halves differ names the largest value, the smallest and the lowest rank holding each:
  every rank raises the same :class:`~seqlen_balancing.errors.OptionMismatch`, naming the
  option and both ranks (and both values, when they are not hashes). This check comes
  first, before any rank's own error (ranks asked to plan differently is the cause to
  fix); a rank whose options could not be read contributes nothing here (its error
  speaks), nor does a static rank (``use_dynamic_bsz=False``).

Each rank contributes the count it needs (:attr:`~seqlen_balancing.planner.RankAnalysis.
needed_count`: its own count, with ``over_cap="alone"`` one micro-batch per over-cap
sample included, and with dummies its ``min_num_micro_batch``); which ranks run dummies
follows from the agreed count and each rank's own groups, so it takes no second
collective.

The agreed count is the largest needed count rounded up to ``num_batches_divided_by`` (the
same on every rank, or the mismatch above); if a rank has fewer samples/groups than that,
every rank raises the same ``ValueError``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from seqlen_balancing.cost import WorkloadModel
from seqlen_balancing.errors import (
    LARGEST_SHOWN,
    N_ERROR_VALUES,
    OUT_OF_RANGE,
    RECORDS,
    Argument,
    ModeMismatch,
    OptionMismatch,
    PlanError,
    RowsOverCap,
    Shown,
    StaticCountMismatch,
)
from seqlen_balancing.options import OPTIONS, Kind, PlanOptionKeywords, PlanOptions, Unpack
from seqlen_balancing.planner import (
    RankAnalysis,
    agreed_count,
    analyse,
    build_plan,
    local_count,
    log_over_cap,
)
from seqlen_balancing.rows import ROWS_WINDOW

__all__ = [
    "LAYOUT",
    "REQUEST",
    "VECTOR_SIZE",
    "Layout",
    "RankPlan",
    "Slot",
    "agreed_rows",
    "combine",
    "decode",
    "encode",
    "plan_data_parallel",
    "plan_ranks",
    "request_value",
]

_RANK_BITS = 20
_RANK_MASK = (1 << _RANK_BITS) - 1
_CODE_BITS = len(RECORDS).bit_length()  # the key is 20 + _CODE_BITS bits
_VALUE_BITS = 38  # a value slot: a 20-bit tag above a 38-bit part, 58 bits
_VALUE_MASK = (1 << _VALUE_BITS) - 1
_NO_GROUPS = -(1 << 62)  # a "negated" slot of a rank that has nothing to say: never the MAX


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
        self._starts: dict[str, int] = {}
        at = 0
        for slot in slots:
            if slot.name in self._starts or slot.width < 1:
                raise ValueError(f"slot {slot.name!r}: names are unique and widths at least 1")
            self._starts[slot.name] = at
            at += slot.width
        #: Number of int64 values in the vector.
        self.size = at

    def start(self, name: str) -> int:
        """Index of the first value of slot ``name``."""
        return self._starts[name]

    def idle_vector(self) -> list[int]:
        """A vector holding every slot's idle value: a rank that has nothing to say."""
        return [slot.idle for slot in self.slots for _ in range(slot.width)]


#: What each rank was asked to do, one ``(name, argument, shown)`` per quantity the ranks
#: must agree on: every agreed option (in :class:`~seqlen_balancing.PlanOptions`'
#: order), the cap, and whether ``costs`` / ``workloads`` are given.
REQUEST: tuple[tuple[str, Argument, Shown], ...] = (
    *(
        (name, opt.argument, {Kind.SWITCH: Shown.SWITCH, Kind.CHOICE: Shown.OVER_CAP,
                              Kind.KEYS: Shown.HIDDEN, Kind.MODEL: Shown.HIDDEN,
                              Kind.SHARE: Shown.HIDDEN}.get(opt.kind, Shown.NUMBER))
        for name, opt in OPTIONS.items() if opt.agreed
    ),
    ("max_token_len", Argument.MAX_TOKEN_LEN, Shown.NUMBER),
    ("costs", Argument.COSTS, Shown.GIVEN),
    ("workloads", Argument.WORKLOADS, Shown.GIVEN),
    ("group_ids", Argument.GROUP_IDS, Shown.GIVEN),
)

#: The agreement's vector, slot by slot (the module docstring says what each one holds).
LAYOUT = Layout(
    Slot("error_key"),
    Slot("error_values", 2 * N_ERROR_VALUES),
    Slot("count"),
    Slot("groups", idle=_NO_GROUPS),
    Slot("mode"),
    Slot("neg_mode", idle=_NO_GROUPS),
    Slot("static"),
    Slot("neg_static", idle=_NO_GROUPS),
    Slot("largest"),
    Slot("dummy_groups", idle=_NO_GROUPS),
    Slot("rows", ROWS_WINDOW),
    Slot("neg_rows_tolerance", ROWS_WINDOW, idle=_NO_GROUPS),
    *(slot for name, _, _ in REQUEST
      for slot in (Slot(f"option_{name}"), Slot(f"neg_option_{name}", idle=_NO_GROUPS))),
)

#: Length of the int64 vector each rank contributes.
VECTOR_SIZE = LAYOUT.size

_KEY, _VALUES, _COUNT, _GROUPS = (LAYOUT.start(n) for n in ("error_key", "error_values", "count", "groups"))
_MODE, _NEG_MODE = LAYOUT.start("mode"), LAYOUT.start("neg_mode")
_STATIC, _NEG_STATIC = LAYOUT.start("static"), LAYOUT.start("neg_static")
_LARGEST, _DUMMY_GROUPS = LAYOUT.start("largest"), LAYOUT.start("dummy_groups")
_ROWS, _NEG_TOLERANCE = LAYOUT.start("rows"), LAYOUT.start("neg_rows_tolerance")
_REQUEST = tuple(
    (LAYOUT.start(f"option_{name}"), LAYOUT.start(f"neg_option_{name}")) for name, _, _ in REQUEST
)
_DIVISOR = _REQUEST[[name for name, _, _ in REQUEST].index("num_batches_divided_by")][0]
_CAP = _REQUEST[[name for name, _, _ in REQUEST].index("max_token_len")][0]

#: A request value of ``2**41`` or more is a hash (or a large number, hashed).
_HASHED = LARGEST_SHOWN + 1


def request_value(value: Any) -> int:
    """A requested option (or the cap) as the 42-bit value its slots carry: ``None`` 0, a
    bool 0/1, ``over_cap`` its index, a positive integer below 2**41 itself; anything else
    (keys, a model, a larger number) ``2**41`` plus 41 bits of its BLAKE2b hash, the same
    in every process and on every machine.

    Example:
        >>> request_value(None), request_value(True), request_value("alone"), request_value(16)
        (0, 1, 1, 16)
        >>> request_value(("loss_mask",)) == request_value(("loss_mask",)) >= 2**41
        True
    """
    if value is None:
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value in ("raise", "alone"):
        return ("raise", "alone").index(value)
    if isinstance(value, int) and 0 <= value <= LARGEST_SHOWN:
        return value
    if isinstance(value, WorkloadModel):
        text = f"model:{value}"
    elif isinstance(value, tuple):
        text = "keys:" + "\0".join(value)
    else:
        text = f"{type(value).__name__}:{value}"
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return _HASHED + (int.from_bytes(digest, "big") & LARGEST_SHOWN)


def _request_values(analysis: RankAnalysis) -> list[int | None] | None:
    """The values of :data:`REQUEST` this rank was asked for, or ``None`` (no options); a
    cap that could not be read is ``None`` too (the rank's error speaks for it)."""
    options = analysis.options
    if options is None:
        return None
    given = {"costs": analysis.custom_costs, "workloads": analysis.custom_workloads,
             "group_ids": analysis.custom_groups}
    # min_num_micro_batch and num_batches_divided_by: None plans as 1, so it reads as 1
    as_one = {"min_num_micro_batch", "num_batches_divided_by"}
    values: list[int | None] = []
    for name, _, _ in REQUEST:
        if name == "max_token_len":
            cap = analysis.requested_max_token_len
            values.append(request_value(cap) if cap else None)
            continue
        value = given[name] if name in given else getattr(options, name)
        values.append(request_value(1 if value is None and name in as_one else value))
    return values


#: Largest num_batches_divided_by the vector carries as a number; a larger divisor makes the
#: count exceed any batch, which the rank reports as its own error.
_DIVISOR_LIMIT = LARGEST_SHOWN
_LARGEST_LIMIT = (1 << 62) + 1  # stored for anything above 2**62: "out of range"
_DYNAMIC_MODE, _STATIC_MODE = 1, 2


def encode(analysis: RankAnalysis, rank: int, static_count: int | None = None) -> list[int]:
    """The vector rank ``rank`` contributes to the MAX reduction.

    Args:
        analysis: this rank's :func:`~seqlen_balancing.planner.analyse` result (on the
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
    if static_count is None:
        _encode_request(vector, analysis, tag)
    error = analysis.error
    if error is None and static_count is None and analysis.num_batches_divided_by > _DIVISOR_LIMIT:
        # No batch has that many samples: this rank's own count is already impossible.
        _, error = agreed_count(analysis.needed_count, analysis.n_groups,
                                analysis.num_batches_divided_by, rank,
                                dummies=analysis.dummy_micro_batches)
    if error is not None:
        vector[_KEY] = tag << _CODE_BITS | error.code
        values = error.values()
        for j, value in enumerate(values + (0,) * (N_ERROR_VALUES - len(values))):
            vector[_VALUES + 2 * j] = tag << _VALUE_BITS | value >> _VALUE_BITS
            vector[_VALUES + 2 * j + 1] = tag << _VALUE_BITS | value & _VALUE_MASK
        return vector
    if static_count is not None:
        vector[_MODE] = _STATIC_MODE << _RANK_BITS | tag
        vector[_NEG_MODE] = -_STATIC_MODE << _RANK_BITS | tag
        vector[_STATIC] = static_count << _RANK_BITS | tag
        vector[_NEG_STATIC] = -static_count << _RANK_BITS | tag
        return vector
    vector[_COUNT] = analysis.needed_count << _RANK_BITS | tag
    groups = _DUMMY_GROUPS if analysis.dummy_micro_batches else _GROUPS
    vector[groups] = -analysis.n_groups << _RANK_BITS | tag
    vector[_MODE] = _DYNAMIC_MODE << _RANK_BITS | tag
    vector[_NEG_MODE] = -_DYNAMIC_MODE << _RANK_BITS | tag
    for at in analysis.rows_window:
        place = at.count // analysis.num_batches_divided_by % ROWS_WINDOW
        vector[_ROWS + place] = at.rows << _RANK_BITS | tag
        vector[_NEG_TOLERANCE + place] = -at.tolerance << _RANK_BITS | tag
    if analysis.empty_rows_tolerance:  # a rank with no samples: the same at every count
        for place in range(ROWS_WINDOW):
            vector[_NEG_TOLERANCE + place] = -analysis.empty_rows_tolerance << _RANK_BITS | tag
    return vector


def _encode_request(vector: list[int], analysis: RankAnalysis, tag: int) -> None:
    """The request's slots of ``vector``: what this rank was asked to do, as its options
    say (nothing when it has none: its error speaks for it)."""
    values = _request_values(analysis)
    if values is None:
        return
    for (high, low), value in zip(_REQUEST, values, strict=True):
        if value is not None:
            vector[high] = value << _RANK_BITS | tag
            vector[low] = -value << _RANK_BITS | tag


@dataclass(frozen=True)
class _Peers:
    """What the reduced vector says about the group (:class:`~seqlen_balancing.errors.Peers`)."""

    largest_slot: int
    ranks: Callable[[int], int] | None

    def costliest(self, own: int) -> int:
        """The larger of an error's own costliest and the group's (the ``largest`` slot's
        MAX); "out of range" when the slot saturated above the own, the true value unknown."""
        if self.largest_slot >= _LARGEST_LIMIT and own < self.largest_slot:
            return OUT_OF_RANGE
        return max(own, self.largest_slot)

    def global_rank(self, rank: int) -> int | None:
        return None if self.ranks is None else self.ranks(rank)


def combine(vectors: Sequence[Sequence[int]]) -> list[int]:
    """Element-wise MAX of the ranks' vectors: what ``all_reduce(op=MAX)`` computes."""
    return [max(column) for column in zip(*vectors, strict=True)]


def _split(slot: int) -> tuple[int, int]:
    """``(value, rank)`` of a ``value << 20 | (2**20-1-rank)`` slot."""
    return slot >> _RANK_BITS, _RANK_MASK - (slot & _RANK_MASK)


def _mismatch(reduced: Sequence[int], peers: _Peers) -> PlanError | None:
    """The first quantity of :data:`REQUEST` on which the ranks that stated it differ
    (largest and smallest value, the lowest rank holding each), else ``None``."""
    for (high, low), (_, argument, shown) in zip(_REQUEST, REQUEST, strict=True):
        if reduced[low] == _NO_GROUPS:
            continue  # no rank stated a request
        (largest, rank_high), (neg, rank_low) = _split(reduced[high]), _split(reduced[low])
        if largest != -neg:
            return OptionMismatch(argument, shown, rank_high, largest, rank_low, -neg,
                                  peers.global_rank(rank_high), peers.global_rank(rank_low))
    return None


def _error_of(reduced: Sequence[int], peers: _Peers) -> tuple[PlanError, int]:
    """The winning rank's error record, as the group states it, and that rank."""
    key = reduced[_KEY]
    rank = _RANK_MASK - ((key >> _CODE_BITS) & _RANK_MASK)
    values = [
        (reduced[_VALUES + 2 * j] & _VALUE_MASK) << _VALUE_BITS | reduced[_VALUES + 2 * j + 1] & _VALUE_MASK
        for j in range(N_ERROR_VALUES)
    ]
    kind = RECORDS.record(key & ((1 << _CODE_BITS) - 1))
    return kind.from_values(values).agreed(peers), rank


def decode(
    reduced: Sequence[int], global_rank: Callable[[int], int] | None = None
) -> tuple[int, PlanError | None, int | None]:
    """The verdict every rank reads from the reduced vector.

    Args:
        reduced: the element-wise MAX of all ranks' :func:`encode` vectors.
        global_rank: maps a DP group rank to its global rank, so that errors name both
            (``None``: only group ranks are named).

    Returns:
        ``(count, None, None)`` when every rank can plan ``count`` micro-batches (the
        largest needed count rounded up to ``num_batches_divided_by``; on the static path
        the common static count), else ``(0, error, rank at fault)`` (rank ``None`` when no
        single rank is at fault). The error's ``rank`` and ``global_rank`` are set, so
        ``error.exception()`` names them.
    """
    peers = _Peers(reduced[_LARGEST], global_rank)

    def at_fault(error: PlanError, rank: int | None) -> tuple[int, PlanError, int | None]:
        if rank is None:
            return 0, error, None
        return 0, replace(error, rank=rank, global_rank=peers.global_rank(rank)), rank

    mismatch = _mismatch(reduced, peers)
    if mismatch is not None:
        return at_fault(mismatch, None)
    if reduced[_KEY]:
        return at_fault(*_error_of(reduced, peers))
    mode, rank_most = _split(reduced[_MODE])
    neg_mode, rank_least = _split(reduced[_NEG_MODE])
    if mode != -neg_mode:
        mixed = ModeMismatch(rank_most, rank_least, peers.global_rank(rank_most),
                             peers.global_rank(rank_least))
        return at_fault(mixed, None)
    if mode == _STATIC_MODE:
        (largest, rank_largest), (neg, rank_smallest) = _split(reduced[_STATIC]), _split(
            reduced[_NEG_STATIC]
        )
        if largest != -neg:
            differ = StaticCountMismatch(rank_largest, largest, rank_smallest, -neg,
                                         peers.global_rank(rank_largest), peers.global_rank(rank_smallest))
            return at_fault(differ, None)
        return largest, None, None
    needed, rank_needing = _split(reduced[_COUNT])
    neg_groups, rank_fewest = _split(reduced[_GROUPS])
    divisor = _split(reduced[_DIVISOR])[0]  # the same on every rank (else the mismatch)
    count, error = agreed_count(needed, -neg_groups, divisor, rank_needing)
    if error is not None:
        return at_fault(error.agreed(peers), rank_fewest)
    if reduced[_DUMMY_GROUPS] != _NO_GROUPS:
        neg_dummy_groups, rank_shortest = _split(reduced[_DUMMY_GROUPS])
        _, error = agreed_count(count, -neg_dummy_groups, 1, dummies=True)
        if error is not None:
            return at_fault(error, rank_shortest)
    place = _NEG_TOLERANCE + count // divisor % ROWS_WINDOW
    if reduced[place] != _NO_GROUPS:
        rows = agreed_rows(reduced, count)
        neg_tolerance, rank_tight = _split(reduced[place])
        if rows > -neg_tolerance:
            return at_fault(RowsOverCap(rows, -neg_tolerance, _split(reduced[_CAP])[0]), rank_tight)
    return count, None, None


def agreed_rows(reduced: Sequence[int], count: int) -> int:
    """The rows every micro-batch holds under ``equal_rows_per_micro_batch`` at the agreed
    ``count`` (the largest any rank needs there), from the reduced vector; 0 when no rank
    stated rows."""
    divisor = max(1, _split(reduced[_DIVISOR])[0])
    slot = reduced[_ROWS + count // divisor % ROWS_WINDOW]
    return _split(slot)[0] if slot else 0


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
) -> list[RankPlan]:
    """Plan every DP rank in one process with the real agreement: each rank's analysis
    (the planner's ``analyse``), the encoding, the MAX, the decoding, and
    each rank's plan at the agreed count (or its own, with ``same_micro_num_in_dp``
    false). What :func:`~seqlen_balancing.plan_data_parallel` and the command line plan with.

    Args:
        seq_lens_per_rank: for each DP rank, its samples' effective lengths in tokens.
        max_token_len: hard cap in tokens per micro-batch.
        options: the options every rank plans with (``None``: verl's behaviour).
        costs, workloads, group_ids: for each rank, its per-sample data (as
            :func:`~seqlen_balancing.plan_micro_batches` takes it), or ``None``.

    Returns:
        One :class:`RankPlan` per rank, in rank order.

    Raises:
        TypeError, ValueError: as on a real DP group, the message naming the rank at fault
            (the lowest one, when several are); ``costs``/``workloads`` not one list per
            rank, or no rank at all.

    Complexity: the sum of the ranks' planning; one encode and decode per rank.
    """
    given = PlanOptions() if options is None else options
    for name, per_rank in (("costs", costs), ("workloads", workloads), ("group_ids", group_ids)):
        if per_rank is not None and len(per_rank) != len(seq_lens_per_rank):
            raise ValueError(
                f"{name} has {len(per_rank)} lists but seq_lens_per_rank has "
                f"{len(seq_lens_per_rank)} ranks; give one list of {name} per DP rank"
            )
    if not seq_lens_per_rank:
        raise ValueError("seq_lens_per_rank is empty; pass one list of lengths per DP rank")
    analyses = [
        analyse(lens, max_token_len, given, costs=None if costs is None else costs[rank],
                workloads=None if workloads is None else workloads[rank],
                group_ids=None if group_ids is None else group_ids[rank])
        for rank, lens in enumerate(seq_lens_per_rank)
    ]
    balance = given.use_dynamic_bsz_balance
    if given.same_micro_num_in_dp:
        reduced = combine([encode(a, rank) for rank, a in enumerate(analyses)])
        count, error, _ = decode(reduced)
        if error is not None:
            raise error.exception()
        for a in analyses:
            a.agreed_rows = agreed_rows(reduced, count)
        plans = [build_plan(a, count, balance, agreed=True) for a in analyses]
    else:
        plans = [build_plan(a, local_count(a, rank), balance) for rank, a in enumerate(analyses)]
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
    ranks = plan_ranks(seq_lens_per_rank, max_token_len, given, costs=costs, workloads=workloads,
                       group_ids=group_ids)
    return [rank.plan for rank in ranks]
