"""What one rank knows about its batch before the DP group agrees on a count (no torch).

:func:`~seqlen_balancing.planning.planner.analyse` builds it in frozen steps, each from the last
one's result: the :class:`Request` (the options and the cap given), the items under one
rule (:func:`~seqlen_balancing.planning.items.group_rule`), the count
(:class:`~seqlen_balancing.planning.search.Count`); :class:`RankAnalysis` is made once from them.
The costs per forced group, their workloads, the cap, the smallest count found and the
lower bound it is held to, or the error to agree on. It is frozen: a step that needs
another (the equal-rows view of :mod:`seqlen_balancing.planning.rows`, a packing searched for
a given count) makes a new one with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from seqlen_balancing.errors import PlanError
from seqlen_balancing.options import PlanOptions

if TYPE_CHECKING:
    from seqlen_balancing.planning.rule import Rule

__all__ = ["RankAnalysis", "Request"]

#: What an analysis whose options could not be read plans under: verl's behaviour.
_DEFAULTS = PlanOptions()


@dataclass(frozen=True)
class Request:
    """What one rank was asked to plan: the options, the ``max_token_len`` given (0 when
    invalid) and which per-sample inputs the caller gave (``workloads``: also a
    ``workload_model``). The DP group checks that every rank was asked the same."""

    options: PlanOptions
    max_token_len: int = 0
    costs: bool = False
    workloads: bool = False
    groups: bool = False
    prefixes: bool = False


@dataclass(frozen=True)
class RankAnalysis:
    """What one rank knows about its batch before the DP group agrees on a count.

    Attributes:
        error: why this rank cannot plan, or ``None``.
        max_token_len: the cap the plan holds every micro-batch's summed cost to, in tokens:
            the ``max_token_len`` given, rounded down to a multiple of
            ``micro_batch_multiple_of`` (see :func:`~seqlen_balancing.cost.micro_batch_capacity`;
            0 when an argument is invalid). Equal to the cap given by default.
        force_group_size: samples per forced group (1: every sample is its own group).
        num_batches_divided_by: the count must be a multiple of this (1 when not given).
        n_samples: samples on this rank.
        group_sizes: cost per group in tokens (the sum of its samples' costs: effective
            lengths by default, aligned lengths with ``pad_to_multiple_of``, or the
            ``costs`` given), ``n_samples / force_group_size`` entries. The packing, the
            bounds and the agreement all work on these.
        group_workloads: verl workload per group (sum over its samples), on the effective
            lengths whatever the costs: balance is about compute, the cap about memory.
        lower_bound: ``max(bin-packing bound, min_num_micro_batch, 1)`` micro-batches: no
            plan of this batch under the cap has fewer. The bin-packing bound is the best
            of :func:`~seqlen_balancing.planning.bounds.best_lower_bound`, evaluated only as far
            as needed (its evaluation stops once a bound meets the count found), so when
            the count is above it every bound was tried.
        bound_name: which bound gave ``lower_bound``: one of
            :data:`~seqlen_balancing.planning.bounds.BOUND_NAMES` (``"L2"``, ``"cardinality"``,
            ``"matching"``, ``"reduction"``, ``"Fekete-Schepers"``), ``"min_num_micro_batch"``,
            ``"one"`` (zero-length samples), ``"padded sorted rule"``, ``"samples per
            micro-batch"`` (:mod:`~seqlen_balancing.planning.rule`), ``"exhaustive search"``, or ""
            on error.
        min_count: the smallest count this rank reached under the cap (0 on error).
        largest: the costliest forced group (a sample when ``force_group_size`` is 1) in
            tokens of cost (effective tokens by default), also on an over-cap error (0 when
            the lengths could not be read): what the DP group's advice on the cap is built
            from.
        requested_max_token_len: the ``max_token_len`` given (0 when invalid).
        pad_to_multiple_of: per-sequence alignment in tokens (1: none).
        sample_costs: cost of each sample in tokens (empty on error); padded: its width.
        rule: when a micro-batch of groups fits and what it costs, under all of those
            (:class:`~seqlen_balancing.planning.rule.Rule`; ``None`` on error); every algorithm of
            the plan takes it. ``group_sizes`` is its ``sizes``: padded, each group's
            footprint alone.
        over_cap_groups: with ``over_cap="alone"``, the groups (samples when
            ``force_group_size`` is 1) whose cost is over the cap: each runs alone, in the
            only micro-batches allowed over it. ``min_count`` and ``lower_bound`` count them
            (one micro-batch each, in every plan).
        dummy_group: with ``dummy_micro_batches``, the group a dummy copies: the cheapest
            under the rule alone (a group that fits before one that does not, then the
            fewest effective tokens, then the lowest index).
        equal_rows: with ``equal_rows_per_micro_batch``, the rows of this rank's own count
            (:class:`~seqlen_balancing.planning.analysis.RowsAt`: the rows every micro-batch of its
            own plan holds, real and filler, their tolerance under the cap and the plans);
            ``None`` when off. The rows at another count are
            :func:`~seqlen_balancing.planning.rows.rows_at`'s.
        empty_rows_tolerance: on a rank with no samples under dummies and equal rows, the
            most rows its dummies can hold under the cap (copies of one template row; 0:
            nothing stated, no row to copy).
        request: what this rank was asked (:class:`Request`; ``None`` when the options
            could not be read: the rank's error says why); the DP group checks that every
            rank has the same (:mod:`seqlen_balancing.agreement`). ``options``,
            ``requested_max_token_len``, ``custom_groups``,
            ``force_group_size``, ``num_batches_divided_by`` and ``pad_to_multiple_of`` are
            read from it, every other option through ``given`` (the defaults without it).
        members: the samples of each group, ascending, groups in the order of their first
            sample (``group_ids``' groups, or ``force_group_size``'s consecutive ones), or
            ``None`` when every sample is its own group.
        group_labels: with ``members``, each group's name in messages (its id's repr).
        custom_groups: True when the caller gave ``group_ids`` (agreed by the DP group).
    """

    error: PlanError | None
    max_token_len: int = 0
    n_samples: int = 0
    group_sizes: list[int] = field(default_factory=list)
    group_workloads: list[int] = field(default_factory=list)
    lower_bound: int = 0
    bound_name: str = ""
    min_count: int = 0
    largest: int = 0
    # Packing over groups with ``min_count`` bins (the fallback of build_plan).
    _packing: list[list[int]] = field(default_factory=list, repr=False)
    sample_costs: list[int] = field(default_factory=list, repr=False)
    rule: Rule | None = field(default=None, repr=False)
    over_cap_groups: list[int] = field(default_factory=list)
    dummy_group: int = 0
    # With over-cap groups set aside: the analysis of the others, and their group indices.
    _rest: RankAnalysis | None = field(default=None, repr=False)
    _rest_index: list[int] = field(default_factory=list, repr=False)
    request: Request | None = field(default=None, repr=False)
    members: list[list[int]] | None = field(default=None, repr=False)
    group_labels: list[str] = field(default_factory=list, repr=False)
    equal_rows: RowsAt | None = field(default=None, repr=False)
    empty_rows_tolerance: int = 0

    @property
    def options(self) -> PlanOptions | None:
        return None if self.request is None else self.request.options

    @property
    def requested_max_token_len(self) -> int:
        return 0 if self.request is None else self.request.max_token_len

    @property
    def custom_groups(self) -> bool:
        return self.request is not None and self.request.groups

    @property
    def given(self) -> PlanOptions:
        """The options planned under: ``options``, or the defaults where they could not be read."""
        return _DEFAULTS if self.options is None else self.options

    @property
    def force_group_size(self) -> int:
        return self.given.force_group_size

    @property
    def num_batches_divided_by(self) -> int:
        return self.given.num_batches_divided_by or 1

    @property
    def pad_to_multiple_of(self) -> int:
        return self.given.pad_to_multiple_of

    @property
    def needed_count(self) -> int:
        """Micro-batches this rank asks the DP group for: ``min_count``, or
        ``min_num_micro_batch`` where dummies may serve a floor above ``n_groups``."""
        return max(self.min_count, self.given.min_num_micro_batch or 0)

    def samples_of(self, g: int) -> list[int]:
        """The sample indices of group ``g``, ascending."""
        return [g] if self.members is None else self.members[g]

    def group_of(self) -> list[int]:
        """Each sample's group. O(n)."""
        owner = {i: g for g in range(self.n_groups) for i in self.samples_of(g)}
        return [owner.get(i, 0) for i in range(self.n_samples)]

    @property
    def n_groups(self) -> int:
        """Number of forced groups (samples when ``force_group_size`` is 1)."""
        return len(self.group_sizes)

    @property
    def proven_optimal(self) -> bool:
        """True when ``min_count`` meets ``lower_bound``: no plan under the cap (with at
        least ``min_num_micro_batch`` micro-batches) has fewer. False on error, and when
        a gap remains (the count may still be optimal; the bounds cannot tell)."""
        return self.error is None and self.min_count == self.lower_bound


@dataclass(frozen=True)
class RowsAt:
    """A rank's equal rows at one count (the rows room's
    ``search_rows`` and ``rows_at``): at ``count`` micro-batches (over-cap ones included)
    the fewest ``rows`` found, and plans for every row count from there up to
    ``tolerance``: ``plans`` holds ``(from_rows, upto, sub)``, ``sub`` the core analysis
    under ``rows_rule`` for ``from_rows`` rows with a plan of at most ``count``
    micro-batches that takes any row count in ``from_rows..upto``; together they cover
    ``rows..tolerance``."""

    count: int
    rows: int
    tolerance: int
    plans: tuple[tuple[int, int, RankAnalysis], ...]

    def plan_for(self, rows: int) -> tuple[int, RankAnalysis]:
        """``(from_rows, sub)`` of a plan that takes ``rows`` rows (``rows`` within
        ``rows..tolerance``)."""
        return next((start, sub) for start, upto, sub in self.plans if start <= rows <= upto)
