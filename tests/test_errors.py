"""errors/: every record builds the text written out by hand for it and crosses the real
agreement (encode, MAX, the reports, decode) with an identical message and exception type.
No torch."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import replace
from typing import Any

import pytest

import seqlen_balancing.errors as errors
from error_examples import EXAMPLES, VALUES, expected_type
from seqlen_balancing.agreement import combine, decode, encode, needs_reports, report
from seqlen_balancing.errors import (
    CountAboveGroups,
    EntryOnMeta,
    NotDivisible,
    PlanError,
    SampleOverCap,
)
from seqlen_balancing.planning.planner import RankAnalysis, analyse

IDS = [f"{type(e).__name__}-{i}" for i, e in enumerate(EXAMPLES)]


def records_defined_in_the_package() -> list[type[PlanError]]:
    """Every PlanError subclass with its own text() or fixed_text in the errors/ modules (read,
    not registered)."""
    found: list[type[PlanError]] = []
    for info in pkgutil.iter_modules(errors.__path__, "seqlen_balancing.errors."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            own = cls.__module__ == info.name and ("text" in vars(cls) or "fixed_text" in vars(cls))
            if issubclass(cls, PlanError) and cls is not PlanError and own:
                found.append(cls)
    return found


def agreed_verdict(
    analyses: list[RankAnalysis], global_rank: Any = None
) -> tuple[int, PlanError | None, int | None]:
    """The verdict of the ranks ``analyses`` in one process: the MAX, then the reports only
    where the vector asks for them, as every rank of a group reads them."""
    reduced = combine([encode(a, rank) for rank, a in enumerate(analyses)])
    reports = [report(a) for a in analyses] if needs_reports(reduced) else None
    return decode(reduced, 1, reports, global_rank)


def test_the_examples_cover_every_record() -> None:
    defined = records_defined_in_the_package()
    assert {type(e) for e in EXAMPLES} == set(defined)
    assert len(defined) == 70  # one per kind of error; a new one changes this on purpose


@pytest.mark.parametrize(("error", "text"), VALUES, ids=IDS)
def test_each_record_builds_its_text(error: PlanError, text: str) -> None:
    assert error.text() == text
    assert error.message() == (f"{text} ({error.detail})" if error.detail else text)
    assert type(error.exception()) is expected_type(error) is error.exception_type


@pytest.mark.parametrize("error", EXAMPLES, ids=IDS)
def test_every_record_crosses_the_agreement_with_the_same_message(error: PlanError) -> None:
    local = replace(error, detail="")
    fine = analyse([1, 2], 8)
    later = RankAnalysis(EntryOnMeta("other"))  # a higher rank's error loses
    for global_rank in (None, lambda r: 10 + r):
        count, agreed, rank = agreed_verdict([fine, fine, RankAnalysis(local), later], global_rank)
        assert (count, rank) == (0, 2) and agreed is not None
        known = None if global_rank is None else 12
        want = replace(local, rank=2, global_rank=known)
        if isinstance(local, CountAboveGroups) and local.rank_needing is not None:
            # The agreement names the rank needing the count by its global rank, when known.
            needing = None if global_rank is None else 10 + local.rank_needing
            want = replace(local, rank=2, global_rank=known, global_needing=needing)
        assert agreed == want
        prefix = "rank 2 of the DP group: " if known is None else "rank 2 of the DP group (global rank 12): "
        assert agreed.message() == prefix + want.text()
        if not isinstance(local, CountAboveGroups):
            assert agreed.message() == prefix + local.message()
        raised = agreed.exception()
        assert type(raised) is expected_type(error) and str(raised) == agreed.message()


def test_fields_hold_the_values_given() -> None:
    # Nothing is rounded to what an integer coding could carry: the text names the value.
    assert NotDivisible(2**80, 2).message() == (
        f"batch size {2**80} is not divisible by force_group_size=2; every forced group "
        "needs all its samples"
    )
    long = EntryOnMeta("k" * 30 + "é" * 5)
    assert long.key == "k" * 30 + "é" * 5


def test_messages_name_the_rank_and_the_detail() -> None:
    error = NotDivisible(7, 2, detail="local only")
    text = "batch size 7 is not divisible by force_group_size=2; every forced group needs all its samples"
    assert error.message() == f"{text} (local only)"
    assert error.message(4) == f"rank 4 of the DP group: {text} (local only)"
    known = replace(error, rank=1, global_rank=9)
    assert known.message() == f"rank 1 of the DP group (global rank 9): {text} (local only)"
    assert str(error.exception(3)) == f"rank 3 of the DP group: {text} (local only)"


def test_the_over_cap_advice_takes_the_group_costliest() -> None:
    # Rank 0 holds a sample of 50 (fine under 64); rank 1's sample of 70 is over the cap.
    _, error, rank = agreed_verdict([analyse([50], 64), analyse([70], 64)])
    assert rank == 1 and error == SampleOverCap(70, 0, 64, 1, 70, 70, 1, 1, False, rank=1)
    # Both over; the lowest rank's error wins, its advice covers rank 1's longer sample (a
    # rank under another cap would be an option mismatch: the ranks must share the cap).
    _, error, rank = agreed_verdict([analyse([70], 64), analyse([90, 10], 64)])
    assert rank == 0 and isinstance(error, SampleOverCap) and error.largest == 90
    assert "raise max_token_len to at least 90 (the longest sample of the call" in error.message()
