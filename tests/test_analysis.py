"""analysis.py: what RankAnalysis records of one rank's batch (its groups, the lower bound and
the bound that gave it, whether the count is proven optimal, the count it asks the group
for), filled by planner.analyse; hand counts and a brute force."""

from __future__ import annotations

from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import (
    analyse,
)
from test_search import fewest_bins


def test_analysis_records_its_lower_bound() -> None:
    assert analyse([6, 6, 6], 10).lower_bound == 3
    assert analyse([6, 6, 6], 10, PlanOptions(min_num_micro_batch=3)).lower_bound == 3
    assert analyse([1, 1, 1], 10, PlanOptions(min_num_micro_batch=2)).lower_bound == 2


def test_analysis_counts_samples_and_groups() -> None:
    analysis = analyse([1, 2, 3, 4, 5, 6], 20, PlanOptions(force_group_size=3))
    assert (analysis.n_samples, analysis.n_groups, analysis.group_sizes) == (6, 2, [6, 15])


def test_bound_name_on_a_tie_with_the_floor() -> None:
    # bound_name is the floor only when the floor is larger than the bound. [1, 1] under 10:
    # L2 = ceil(2 / 10) = 1 equals the floor of 1 ("one" is for zero-length batches).
    assert (analyse([1, 1], 10).lower_bound, analyse([1, 1], 10).bound_name) == (1, "L2")
    assert (analyse([0, 0], 10).lower_bound, analyse([0, 0], 10).bound_name) == (1, "one")
    # Three items above half the cap: L2 = 3, equal to min_num_micro_batch=3.
    tie = analyse([6, 6, 6], 10, PlanOptions(min_num_micro_batch=3))
    assert (tie.lower_bound, tie.bound_name) == (3, "L2")


def test_a_floor_at_the_packing_count_stops_the_bounds_early() -> None:
    # Best-fit decreasing packs [6, 6, 2, 2, 2] under 9 into 3 bins (6+2, 6+2, 2); with
    # min_num_micro_batch=3 the floor decides the count, so only L2 (ceil(18 / 9) = 2) and
    # the cardinality bound (the 3 smallest items fit a bin: ceil(5 / 3) = 2) are evaluated.
    # Both are below 3, so the floor is named, although the matching bound (each 6 takes at
    # most one 2, the third 2 needs a bin: 3) would have met it.
    analysis = analyse([6, 6, 2, 2, 2], 9, PlanOptions(min_num_micro_batch=3))
    assert (analysis.min_count, analysis.lower_bound, analysis.bound_name) == (
        3, 3, "min_num_micro_batch")


def test_the_strongest_bound_proves_a_count() -> None:
    # Brute force: 4 bins; the volume bound says only ceil(113 / 38) = 3. The library's
    # bound (Fekete-Schepers here) must reach the optimum to prove it.
    sizes, cap = [7, 21, 14, 20, 14, 11, 18, 8], 38
    analysis = analyse(sizes, cap)
    assert fewest_bins(sizes, cap) == 4
    assert (analysis.min_count, analysis.lower_bound, analysis.proven_optimal) == (4, 4, True)
