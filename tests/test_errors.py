"""errors/: every record carries the integers written out by hand for it, decodes back to
itself, crosses the real agreement (encode, MAX, decode) with an identical message and
exception type; codes are dense; the registry refuses what the agreement cannot carry.
No torch."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, replace

import pytest

import seqlen_balancing.errors as errors
from error_examples import BIG, EXAMPLES, TOP, VALUES, expected_type
from seqlen_balancing.agreement import combine, decode, encode
from seqlen_balancing.errors import (
    N_ERROR_VALUES,
    RECORDS,
    Argument,
    CountAboveGroups,
    EntryOnMeta,
    NegativeLength,
    NonPositive,
    NotDivisible,
    PlanError,
    Registry,
    SampleOverCap,
)
from seqlen_balancing.planner import RankAnalysis, analyse

IDS = [f"{type(e).__name__}-{i}" for i, e in enumerate(EXAMPLES)]


def records_defined_in_the_package() -> list[type[PlanError]]:
    """Every PlanError subclass with its own text() in the errors/ modules (read, not registered)."""
    found: list[type[PlanError]] = []
    for info in pkgutil.iter_modules(errors.__path__, "seqlen_balancing.errors."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            own = cls.__module__ == info.name and "text" in vars(cls)
            if issubclass(cls, PlanError) and cls is not PlanError and own:
                found.append(cls)
    return found


def test_codes_are_dense_from_one_and_every_record_is_registered() -> None:
    codes = [cls.code for cls in RECORDS]
    assert codes == list(range(1, len(RECORDS) + 1))
    assert all(RECORDS.record(cls.code) is cls for cls in RECORDS)
    assert set(RECORDS) == set(records_defined_in_the_package())
    assert len(RECORDS) == 67  # one per kind of error; a new one changes this on purpose
    for code in (0, len(RECORDS) + 1):
        with pytest.raises(ValueError, match=f"no error record has code {code}"):
            RECORDS.record(code)


def test_codes_go_area_by_area_in_the_package_order() -> None:
    # errors/__init__.py imports the areas in this order, which numbers the records; an
    # import sorter reordering them would renumber every code (ruff once did).
    areas = ["arguments", "lengths", "batch", "plan", "agreement", "groups"]
    modules = [cls.__module__.rsplit(".", 1)[1] for cls in RECORDS]
    assert sorted(set(modules), key=modules.index) == areas
    assert modules == sorted(modules, key=areas.index)
    first, last = RECORDS.record(1), RECORDS.record(len(RECORDS))
    assert (first.__name__, last.__name__) == ("NotAnInteger", "DummyTemplateInvalid")


def test_the_examples_cover_every_record() -> None:
    assert {type(e) for e in EXAMPLES} == set(RECORDS)


@pytest.mark.parametrize(("error", "values", "text"), VALUES, ids=IDS)
def test_values_are_the_fields_and_decode_to_the_same_record(
    error: PlanError, values: tuple[int, ...], text: str
) -> None:
    assert error.text() == text  # the message before the records, byte for byte
    assert error.message() == (f"{text} ({error.detail})" if error.detail else text)
    assert error.values() == values
    assert len(values) <= N_ERROR_VALUES and all(0 <= v <= TOP for v in values)
    local = replace(error, detail="")  # the detail stays local: the agreement never carries it
    assert type(error).from_values(values) == local
    padded = values + (0,) * (N_ERROR_VALUES - len(values))
    assert type(error).from_values(padded) == local  # the agreement's zero padding is ignored
    assert type(error.exception()) is expected_type(error) is error.exception_type


@pytest.mark.parametrize("error", EXAMPLES, ids=IDS)
def test_every_record_crosses_the_agreement_with_the_same_message(error: PlanError) -> None:
    local = replace(error, detail="")
    fine = encode(analyse([1, 2], 8), 0)
    later = encode(RankAnalysis(EntryOnMeta("other")), 3)  # a higher rank's error loses
    for global_rank in (None, lambda r: 10 + r):
        count, agreed, rank = decode(combine([fine, encode(RankAnalysis(local), 2), later]), global_rank)
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


def test_a_record_with_too_many_values_is_refused_at_registration() -> None:
    registry = Registry(N_ERROR_VALUES)

    @dataclass(frozen=True)
    class Fits(PlanError):
        a: int
        b: str  # a key: 4 values
        c: int | None
        d: NonPositive
        e: bool
        f: Argument

        def text(self) -> str:
            return "fits"

    assert registry.add(Fits) is Fits and Fits.code == 1 and len(registry) == 1

    @dataclass(frozen=True)
    class TooWide(PlanError):
        a: int
        b: str
        c: str
        d: bool

        def text(self) -> str:
            return "too wide"

    with pytest.raises(ValueError, match="TooWide needs 10 error values but the agreement carries 9"):
        registry.add(TooWide)
    with pytest.raises(ValueError, match="TooWide needs 10 error values but the agreement carries 9"):
        RECORDS.add(TooWide)
    assert len(registry) == 1 and TooWide not in set(RECORDS)
    assert Registry(10).add(TooWide).code == 1


def test_the_registry_refuses_what_it_cannot_carry_or_number() -> None:
    registry = Registry(N_ERROR_VALUES)

    @dataclass(frozen=True)
    class FloatField(PlanError):
        x: float

        def text(self) -> str:
            return ""

    @dataclass(frozen=True)
    class NoText(PlanError):
        x: int

    @dataclass(frozen=True)
    class NotARecord:
        x: int

        def text(self) -> str:
            return ""

    with pytest.raises(TypeError, match=r"FloatField\.x: a record's field is an int"):
        registry.add(FloatField)
    with pytest.raises(TypeError, match="NoText has no text"):
        registry.add(NoText)
    with pytest.raises(TypeError, match="NotARecord: a record is a frozen dataclass subclassing PlanError"):
        registry.add(NotARecord)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="SampleOverCap is registered already"):
        registry.add(SampleOverCap)
    assert len(registry) == 0


def test_fields_hold_what_a_peer_decodes() -> None:
    # Out of range (or negative where a count is expected): "out of range" locally too,
    # so that the rank at fault and its peers print the same text.
    assert NotDivisible(2**80, 2).batch_size == TOP
    assert NotDivisible(-1, 2).batch_size == TOP
    assert NotDivisible(BIG, 2).batch_size == BIG
    assert NotDivisible(2**80, 2).message() == (
        "batch size out of range is not divisible by force_group_size=2; every forced group "
        "needs all its samples"
    )
    assert NegativeLength(errors.LengthSource.COSTS, 0, -(2**77)).message() == (
        "costs[0] is negative and out of range; costs must be >= 0 tokens"
    )
    assert CountAboveGroups(3, 2, 3, -1).rank_needing == TOP  # a negative rank is no rank
    long = EntryOnMeta("k" * 30 + "é" * 5)  # 40 bytes: cut to 33 (the é split drops) + "..."
    assert long.key == "k" * 30 + "é" + "..."
    assert EntryOnMeta(("outer", "inner")).key == "outer.inner"  # type: ignore[arg-type]


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
    vectors = [encode(analyse([50], 64), 0), encode(analyse([70], 64), 1)]
    _, error, rank = decode(combine(vectors))
    assert rank == 1 and error == SampleOverCap(70, 0, 64, 1, 70, 70, 1, 1, False, rank=1)
    # Both over; the lowest rank's error wins, its advice covers rank 1's longer sample (a
    # rank under another cap would be an option mismatch: the ranks must share the cap).
    vectors = [encode(analyse([70], 64), 0), encode(analyse([90, 10], 64), 1)]
    _, error, rank = decode(combine(vectors))
    assert rank == 0 and isinstance(error, SampleOverCap) and error.largest == 90
    assert "raise max_token_len to at least 90 (the longest sample of the call" in error.message()
