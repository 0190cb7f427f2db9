"""search.py: the count search's packers, the rules each serves, and that the search stops
at the bound."""

from __future__ import annotations

import random

import pytest

from seqlen_balancing import search
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planner import analyse
from seqlen_balancing.rule import Rule


def served(rule: Rule) -> list[str]:
    return [packer.name for packer in search.PACKERS if packer.serves(rule)]


def test_each_rule_gets_the_packers_that_serve_it_in_order() -> None:
    # Plain sums: exactly the search the library always ran (the never-worse-than-verl
    # guarantee rests on Karmarkar-Karp being among them).
    assert served(Rule.sums([5] * 10, 10)) == [
        "best fit decreasing", "closing fit decreasing", "minimum bin slack",
        "exchange search", "exact search", "Karmarkar-Karp",
    ]
    assert "minimum bin slack" not in served(Rule.sums([5] * 5000, 10))  # over 4,096 items
    assert "exact search" not in served(Rule.sums([5] * 41, 10))  # over 40 items
    assert served(Rule.sums([5] * 10, 10, limit=3)) == [
        "best fit decreasing", "row filling", "randomized best fit",
        "the summed plan cut to the limit", "exchange search", "exact search", "Karmarkar-Karp",
    ]
    assert served(Rule.padded([0] * 10, [5] * 10, 50)) == [
        "sorted rule", "best fit decreasing", "randomized best fit",
    ]


def test_a_packing_at_the_bound_ends_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a sample limit, where best fit meets the bound (here the rows': 64 samples, 8
    per micro-batch), no other packer runs."""
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a packer ran although the count met the bound")

    for name in ("row_filling", "randomized_best_fit", "repack", "exact_packing", "_cut_summed"):
        monkeypatch.setattr(search, name, forbidden)
    result = analyse([100] * 64, 16384, PlanOptions(max_samples_per_micro_batch=8))
    assert (result.min_count, result.lower_bound, result.bound_name) == (8, 8, "samples per micro-batch")


def test_the_count_is_at_the_bound_where_the_limit_and_the_cap_both_bind() -> None:
    """Lengths whose tokens fill about as many micro-batches as their rows do: the count meets
    the larger of ceil(tokens / cap) and ceil(samples / limit) (both spelled out here) on
    these seeds, where best fit alone is well above it."""
    for seed in range(6):
        rng = random.Random(seed)
        lengths = [rng.randint(100, 1900) for _ in range(256)]
        limit = 16
        floor = max(-(-sum(lengths) // 16384), -(-len(lengths) // limit))
        result = analyse(lengths, 16384, PlanOptions(max_samples_per_micro_batch=limit))
        assert result.min_count == floor == result.lower_bound, seed
