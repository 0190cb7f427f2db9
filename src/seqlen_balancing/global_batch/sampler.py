"""A DistributedSampler whose steps are balanced across the DP ranks by the global planner.

:class:`BalancedDistributedSampler` is a drop-in for ``torch.utils.data.DistributedSampler``
(it is one: a subclass with the same arguments and defaults, ``set_epoch`` and
``len``). Each step's global batch is exactly the set of rows ``DistributedSampler`` gives
the ``num_replicas`` ranks at that step (same ``seed``, same epoch, same ``drop_last``);
only which rank gets which row changes: :func:`~seqlen_balancing.plan_global_batch` plans
the step, so that every rank runs the same number of micro-batches under
``max_token_len``, each index costing about the same on every rank. Every rank computes
the same plan from the same lengths, with no collective.

How a step is found: ``DistributedSampler`` shuffles ``range(len(dataset))`` with
``torch.randperm`` seeded ``seed + epoch`` (or keeps the order), pads it by repeating its
head (or cuts its tail with ``drop_last``) to ``num_replicas x num_samples`` rows and gives
rank ``r`` the rows ``r, r + num_replicas, ...``. A data loader with ``batch_size`` rows
per rank makes step ``t`` of rank ``r`` its rows ``t x batch_size .. (t + 1) x batch_size``,
so the step's global batch is the contiguous run of ``num_replicas x batch_size`` rows of
that order starting at ``t x num_replicas x batch_size`` (the last step, when shorter, the
rest). This sampler yields, for each step in turn, the rows the plan gives this rank, each
micro-batch's rows one after another.

With a loss normalised over the global batch (verl 0.9.1's SFT trainer divides by the
token count all-gathered over the DP group), the step's loss and gradient are those of
``DistributedSampler`` up to the order of floating-point sums.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler

from seqlen_balancing._checks import _integer_or_none, describe, positive_int
from seqlen_balancing.cost import aligned_length, micro_batch_capacity
from seqlen_balancing.global_batch.step import StepPlan, plan_step, step_options
from seqlen_balancing.options import PlanOptionKeywords, PlanOptions, Unpack
from seqlen_balancing.planning.partition import roundup_divisible

__all__ = ["BalancedDistributedSampler"]

logger = logging.getLogger("seqlen_balancing")

Lengths = Sequence[int] | Callable[[int], int] | str


class BalancedDistributedSampler(DistributedSampler[int]):
    """``DistributedSampler`` with every step's rows assigned to ranks by the global planner.

    Args:
        dataset, num_replicas, rank, shuffle, seed, drop_last: as
            ``torch.utils.data.DistributedSampler`` (same defaults; ``num_replicas`` and
            ``rank`` from the default process group when ``None``).
        lengths: each dataset row's effective length in tokens, read once here: a
            sequence of ``len(dataset)`` integers, a callable of the row index returning
            it, or a column name (``dataset[name]`` as a whole column where the dataset
            has one, else ``dataset[i][name]`` row by row). A value from a column or the
            callable is the length itself (an integer, or a 0-d integer tensor or array)
            or the row's tokens: one row of shape ``(L,)`` or ``(1, L)`` (a list, nested
            lists ``[[...]]``, a tensor or an array, e.g. a tokenizer's
            ``return_tensors="pt"`` on one text) counts its ``L`` tokens.
        batch_size: rows per rank per step (the data loader's ``batch_size``; verl:
            ``data.train_batch_size // dp_size``).
        max_token_len: the cap in tokens on every micro-batch (verl:
            ``max_token_len_per_gpu`` x ``sp_size``).
        costs: each row's cost in tokens instead of its length (a sequence, read once),
            or ``None``.
        options: the plan's options (:class:`~seqlen_balancing.PlanOptions`, passed on to
            :func:`~seqlen_balancing.plan_global_batch`); ``None``: verl's behaviour.
        **option_keywords: any option by name, laid over ``options`` (as
            :func:`~seqlen_balancing.plan_global_batch` takes them): ``micro_batch_fixed_tokens``,
            ``use_dynamic_bsz_balance``, ``pad_to_multiple_of``, ``micro_batch_multiple_of``,
            ``padded``, ``max_samples_per_micro_batch``, ``num_batches_divided_by``,
            ``min_num_micro_batch``, ``force_group_size``, ``workload_model``,
            ``heaviest_first`` (each step's heaviest index first, the same on every rank).

    Yields:
        This rank's dataset indices, ``len(self)`` of them per epoch (as
        ``DistributedSampler``): step after step, ``batch_size`` per step (the last step of
        the epoch may be shorter, as with ``DistributedSampler``), each step's
        micro-batches one after another (:meth:`step_plan` has them). A short last step
        that cannot be planned under the options (fewer rows per rank than
        ``min_num_micro_batch`` or ``num_batches_divided_by`` asks, or not whole force
        groups) is yielded as ``DistributedSampler`` deals it, with one warning: a data
        loader with ``drop_last=True`` drops that step, and one without it trains on the
        rows ``DistributedSampler`` would give.

    Raises:
        TypeError: a length, a cost or an option of the wrong type; an unknown option.
        ValueError: what ``DistributedSampler`` refuses (a rank outside the replicas),
            ``lengths`` or ``costs`` not one per row, a negative one, a row value that is
            not one row of tokens (naming the row and its shape), a row whose cost alone
            exceeds ``max_token_len`` (naming the row; not with ``over_cap="alone"``), an option value
            :class:`~seqlen_balancing.PlanOptions` or the global planner refuses
            (``dummy_micro_batches``, ``same_micro_num_in_dp=False``;
            ``equal_rows_per_micro_batch``, which the engine plans on its own batch), or a
            ``batch_size`` that no step could be planned with (not whole force groups, or
            fewer than ``min_num_micro_batch`` rounded up to ``num_batches_divided_by``).
            All at construction.

    Complexity: O(N) to read the lengths; each step is planned when it is reached
    (:func:`~seqlen_balancing.plan_global_batch` on ``num_replicas x batch_size`` rows),
    the same plan on every rank.

    Example:
        >>> lengths = [100, 900, 300, 700, 500, 500, 200, 800]
        >>> ranks = [BalancedDistributedSampler(range(8), num_replicas=2, rank=r, lengths=lengths,
        ...                                     batch_size=4, max_token_len=1000) for r in range(2)]
        >>> [list(s) for s in ranks]
        [[0, 1, 4, 5], [7, 6, 3, 2]]
        >>> ranks[0].step_plan(0).rank_micro_batches[0]   # 1000 tokens each
        [[0, 1], [4, 5]]
        >>> [list(DistributedSampler(range(8), num_replicas=2, rank=r)) for r in range(2)]
        [[4, 7, 2, 1], [0, 3, 5, 6]]

    The same eight rows in one step; ``DistributedSampler``'s rank 0 holds 2,500 tokens
    (three micro-batches of at most 1,000), the balanced ranks 2,000 each (two).

    References:
        ``torch.utils.data.DistributedSampler`` (the rows of each step); torchdata's
        ``StatefulDistributedSampler`` (``state_dict``'s ``yielded``, what
        ``StatefulDataLoader`` saves).
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        lengths: Lengths,
        batch_size: int,
        max_token_len: int,
        costs: Sequence[int] | None = None,
        options: PlanOptions | None = None,
        **option_keywords: Unpack[PlanOptionKeywords],
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last)
        self.options = step_options(options, option_keywords)
        self.batch_size = positive_int(batch_size, "batch_size")
        self.max_token_len = positive_int(max_token_len, "max_token_len")
        _check_steps(self.options, self.batch_size)
        n = len(dataset)  # type: ignore[arg-type]
        self.lengths = _read_lengths(dataset, lengths, n)
        self.costs = None if costs is None else _integers(costs, n, "costs")
        _check_alone(self.costs if self.costs is not None else self.lengths, self.lengths,
                     self.max_token_len, self.options)
        self.yielded = 0  # indices yielded in the current epoch (what state_dict saves)
        self._resume_at: int | None = None
        self._warned = False  # the short last step's warning, once per sampler

    # -- the steps ---------------------------------------------------------------------

    def _global_order(self) -> list[int]:
        """All ranks' rows of this epoch in ``DistributedSampler``'s order before it deals
        them: shuffled (seed + epoch), padded by its own head or cut to ``total_size``."""
        n = len(self.lengths)
        seeded = torch.Generator().manual_seed(self.seed + self.epoch)
        order: list[int] = torch.randperm(n, generator=seeded).tolist() if self.shuffle else list(range(n))
        if self.drop_last:
            return order[: self.total_size]
        missing = self.total_size - n
        return order + (order * math.ceil(missing / n))[:missing] if missing > 0 else order

    @property
    def steps(self) -> int:
        """Steps in an epoch, the last one shorter when ``batch_size`` does not divide
        ``len(self)`` (a data loader with ``drop_last=True`` drops it)."""
        return -(-self.num_samples // self.batch_size)

    def global_batch(self, step: int, order: Sequence[int] | None = None) -> list[int]:
        """The dataset rows of ``step`` (0-based) of the current epoch, all ranks together,
        in ``DistributedSampler``'s order (rank ``r`` would get positions ``r, r + R, ...``)."""
        if not 0 <= step < self.steps:
            raise ValueError(f"step must be in 0..{self.steps - 1} for this epoch, got {step}")
        order = self._global_order() if order is None else order
        width = self.num_replicas * self.batch_size
        return list(order[step * width : min((step + 1) * width, self.total_size)])

    def step_plan(self, step: int, order: Sequence[int] | None = None) -> StepPlan:
        """The plan of ``step`` of the current epoch (:func:`~seqlen_balancing.global_batch.step.plan_step`),
        its sample indices mapped to dataset rows: ``rank_samples[r]`` is what rank ``r``
        yields for the step, ``rank_micro_batches[r]`` its micro-batches."""
        rows = self.global_batch(step, order)
        plan = plan_step([self.lengths[i] for i in rows], self.num_replicas, self.max_token_len,
                         options=self.options,
                         costs=None if self.costs is None else [self.costs[i] for i in rows])
        return StepPlan(
            rank_samples=[[rows[i] for i in part] for part in plan.rank_samples],
            rank_micro_batches=[[[rows[i] for i in mb] for mb in mbs] for mbs in plan.rank_micro_batches],
            count=plan.count, lower_bound=plan.lower_bound, step_time=plan.step_time,
            floor=plan.floor, fixed_cost=plan.fixed_cost, tried=plan.tried,
        )

    def __iter__(self) -> Iterator[int]:
        start = self._resume_at or 0
        self._resume_at = None
        self.yielded = start
        return self._indices(start)

    def _indices(self, start: int) -> Iterator[int]:
        order = self._global_order()
        first, skip = divmod(start, self.batch_size)
        for step in range(first, self.steps):
            for index in self._rank_rows(step, order)[skip:]:
                self.yielded += 1
                yield index
            skip = 0

    def _rank_rows(self, step: int, order: Sequence[int]) -> list[int]:
        """This rank's rows of ``step`` as the plan orders them; a short last step that
        cannot be planned as ``DistributedSampler`` deals it (a loader with ``drop_last``
        drops it; one without trains on what the ranks would get from torch's sampler)."""
        try:
            return self.step_plan(step, order).rank_samples[self.rank]
        except ValueError as error:
            if step < self.num_samples // self.batch_size:
                raise  # a full step: every loader yields it
            if not self._warned:
                self._warned = True
                logger.warning(
                    "BalancedDistributedSampler: the short last step of the epoch (%d rows per "
                    "rank) cannot be planned, so it is dealt as DistributedSampler deals it (a "
                    "DataLoader with drop_last=True drops it): %s",
                    self.num_samples % self.batch_size, error)
            return self.global_batch(step, order)[self.rank :: self.num_replicas]

    # -- resume ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "yielded"}``: the epoch and how many indices this rank has yielded
        in it (torchdata's ``StatefulDataLoader`` saves it with the loader)."""
        return {"epoch": self.epoch, "yielded": self.yielded}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume: the next iteration starts after the ``yielded`` indices of ``epoch``.

        Raises:
            ValueError: no ``yielded`` entry, or one outside ``0..len(self)``.
        """
        yielded = _integer_or_none(state_dict.get("yielded"))
        if yielded is None or not 0 <= yielded <= self.num_samples:
            raise ValueError(
                f"state_dict needs 'yielded' in 0..{self.num_samples} (indices of this rank "
                f"yielded in the epoch), got {describe(state_dict.get('yielded'))}"
            )
        epoch = _integer_or_none(state_dict.get("epoch", self.epoch))
        if epoch is None:
            raise ValueError(f"state_dict's 'epoch' must be an integer, got {describe(state_dict['epoch'])}")
        self.epoch = epoch
        self._resume_at = self.yielded = yielded


def _integers(values: Any, n: int, name: str) -> list[int]:
    """``values`` as ``n`` non-negative Python ints, or the error naming the first bad one."""
    out: list[int] = []
    for index, value in enumerate(values):
        as_int = value if type(value) is int else _integer_or_none(value)
        if as_int is None:
            raise TypeError(f"{name}[{index}] must be an integer number of tokens, got {describe(value)}")
        if as_int < 0:
            raise ValueError(f"{name}[{index}] is {as_int}; lengths and costs are >= 0 tokens")
        out.append(as_int)
    if len(out) != n:
        raise ValueError(f"{name} has {len(out)} values but the dataset has {n} rows; give one per row")
    return out


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a row's value: ``()`` for a number, an array's or tensor's own, nested
    sequences' read along their first elements (strings in a sequence are its tokens), an
    other sized value's ``(len,)``; ``None`` for what holds no tokens (a mapping, a string,
    bytes, an object without a length)."""
    if isinstance(value, numbers.Number):
        return ()
    if isinstance(value, Mapping | str | bytes):
        return None
    shape = getattr(value, "shape", None)
    if shape is not None:
        try:
            return tuple(int(d) for d in shape)
        except (TypeError, ValueError, RuntimeError):  # a jagged tensor has no plain shape
            return None
    if isinstance(value, Sequence) and value and not isinstance(value[0], str | bytes):
        inner = _shape(value[0])
        return None if inner is None else (len(value), *inner)
    return (len(value),) if isinstance(value, Sized) else None


def _row_length(value: Any, index: int, where: str) -> int:
    """A row's length from a column value: an integer (0-d tensors and arrays included), or
    the tokens of one row, shape ``(L,)`` or ``(1, ..., 1, L)``: ``L``.

    Raises:
        ValueError: any other value (naming the row and its shape): more than one row,
            ``(2, L)``; a scalar that is not a whole number; a mapping or a string.
    """
    shape = _shape(value)
    if shape == ():
        as_int = _integer_or_none(value)
        if as_int is not None:
            return as_int
    elif shape and all(d == 1 for d in shape[:-1]):
        return shape[-1]
    what = f"{describe(value)}, which holds no tokens" if shape is None else \
        f"{describe(value)} of shape ()" if shape == () else f"a {type(value).__name__} of shape {shape}"
    raise ValueError(
        f"{where} of row {index} is {what}; a row's value is its "
        "length (an integer) or its tokens, one row of shape (L,) or (1, L) (e.g. a tokenizer's "
        "return_tensors='pt' on one text); pass lengths as a list or a callable of the row "
        "index for any other layout"
    )


def _row_value(dataset: Any, index: int, column: str) -> Any:
    try:
        return dataset[index][column]
    except (KeyError, TypeError, IndexError) as error:
        raise ValueError(
            f"row {index} has no column {column!r} ({type(error).__name__}: {error}); pass "
            "lengths as a list, a callable of the row index, or a column every row has"
        ) from None


def _read_lengths(dataset: Any, lengths: Lengths, n: int) -> list[int]:
    """Every row's length, read once (see the class docstring)."""
    if isinstance(lengths, str):
        try:
            column = dataset[lengths]
        except (KeyError, TypeError, IndexError, ValueError):
            column = None
        if column is None or isinstance(column, Mapping) or len(column) != n:  # read row by row
            column = [_row_value(dataset, i, lengths) for i in range(n)]
        return _integers([_row_length(v, i, f"column {lengths!r}") for i, v in enumerate(column)],
                         n, f"column {lengths!r}")
    if callable(lengths):
        return _integers([_row_length(lengths(i), i, "lengths(i)") for i in range(n)], n, "lengths")
    if isinstance(lengths, Mapping | set | frozenset | bytes):
        raise TypeError(f"lengths must be a sequence of integers, a callable or a column name, got "
                        f"{describe(lengths)}")
    return _integers(lengths, n, "lengths")


def _check_steps(options: PlanOptions, batch_size: int) -> None:
    """Refuse, at construction, a ``batch_size`` with which no step could be planned: each
    rank's share of a step must be whole force groups, at least the fewest micro-batches
    the options ask (``min_num_micro_batch`` rounded up to ``num_batches_divided_by``);
    and equal rows, which the sampler's rows cannot carry (its filler rows)."""
    if options.equal_rows_per_micro_batch:
        raise ValueError(
            "BalancedDistributedSampler cannot take equal_rows_per_micro_batch=True: it yields "
            "each rank's rows, not filler rows; pass the option to the engine's planning "
            "(prepare_micro_batches), which tops up its own micro-batches"
        )
    group, divisor = options.force_group_size, options.num_batches_divided_by or 1
    if batch_size % group:
        raise ValueError(
            f"force_group_size={group} does not divide batch_size={batch_size}: each rank's rows "
            "of a step must be whole groups; pass a batch_size that is a multiple of it"
        )
    fewest = roundup_divisible(options.min_num_micro_batch or 1, divisor)
    if batch_size // group < fewest:
        raise ValueError(
            f"min_num_micro_batch={options.min_num_micro_batch} and num_batches_divided_by="
            f"{options.num_batches_divided_by} ask for {fewest} micro-batches per rank, but "
            f"batch_size={batch_size} gives each rank {batch_size // group} "
            f"{'rows' if group == 1 else 'groups'} a step and a micro-batch is never empty; pass "
            "a larger batch_size or smaller options"
        )


def _check_alone(costs: list[int], lengths: list[int], cap: int, options: PlanOptions) -> None:
    """Refuse, at construction, a row that no micro-batch can hold alone (every step
    holding it would fail); with ``over_cap="alone"`` such a row is planned alone instead."""
    if options.over_cap == "alone":
        return
    pad = options.pad_to_multiple_of
    usable = micro_batch_capacity(cap, options.micro_batch_multiple_of)
    for index, cost in enumerate(costs):
        if aligned_length(cost, pad) > usable:
            raise ValueError(
                f"row {index} of the dataset ({lengths[index]} tokens, costing "
                f"{aligned_length(cost, pad)}) exceeds max_token_len={cap} (usable "
                f"{usable}); raise max_token_len or drop or truncate the row"
            )
