"""Tests for the bundled CHAMP token-length data and its loaders."""

from __future__ import annotations

import dataclasses
import doctest
import gzip
import hashlib
import statistics
from importlib import resources

import pytest

import seqlen_balancing.data as data_mod
from seqlen_balancing.data import (
    CHAMP_LENGTHS_FILE,
    CHAMP_NUM_PROBLEMS,
    CHAMP_RESPONSES_PER_PROBLEM,
    ChampRecord,
    load_champ_lengths,
    load_champ_problem_ids,
    load_champ_records,
)

N_ROWS = 19_440

# Measured by scripts/build_length_data.py when the file was built; any change
# to the bundled file must update these (and data/README.md) deliberately.
TSV_SHA256 = "23edbc430b763d7726bd1b8282dc8ebada2005cd28e5b345f16307a7cca16eeb"
SUM_TOTAL = 19_747_147
SUM_PROMPT = 4_695_348
SUM_RESPONSE = 15_051_799
MIN_TOTAL = 174
MAX_TOTAL = 9_236
MEDIAN_TOTAL = 864.5


def test_row_count() -> None:
    assert N_ROWS == CHAMP_NUM_PROBLEMS * CHAMP_RESPONSES_PER_PROBLEM
    assert len(load_champ_records()) == N_ROWS
    assert len(load_champ_lengths()) == N_ROWS
    assert len(load_champ_problem_ids()) == N_ROWS


def test_problems_are_contiguous_groups_of_72() -> None:
    ids = load_champ_problem_ids()
    assert len(set(ids)) == CHAMP_NUM_PROBLEMS
    for start in range(0, N_ROWS, CHAMP_RESPONSES_PER_PROBLEM):
        block = ids[start : start + CHAMP_RESPONSES_PER_PROBLEM]
        assert len(set(block)) == 1, f"rows {start}.. mix problems"
    # Each block is a different problem, so every problem is one contiguous run.
    firsts = ids[::CHAMP_RESPONSES_PER_PROBLEM]
    assert len(set(firsts)) == CHAMP_NUM_PROBLEMS
    assert all(pid.startswith("P_") for pid in firsts)


def test_response_indices_run_0_to_71_per_problem() -> None:
    records = load_champ_records()
    expected = list(range(CHAMP_RESPONSES_PER_PROBLEM)) * CHAMP_NUM_PROBLEMS
    assert [r.response_index for r in records] == expected


def test_lengths_positive_and_consistent() -> None:
    for r in load_champ_records():
        for value in (r.prompt_tokens, r.response_tokens, r.total_tokens):
            assert type(value) is int
            assert value > 0
        assert r.total_tokens == r.prompt_tokens + r.response_tokens


def test_loaders_agree() -> None:
    records = load_champ_records()
    assert load_champ_lengths() == [r.total_tokens for r in records]
    assert load_champ_problem_ids() == [r.problem_id for r in records]


def test_loaders_return_fresh_lists() -> None:
    lengths = load_champ_lengths()
    lengths.clear()
    assert len(load_champ_lengths()) == N_ROWS

    ids = load_champ_problem_ids()
    ids[0] = "mutated"
    assert load_champ_problem_ids()[0] == "P_Combinatorics_1"

    records = load_champ_records()
    records.reverse()
    assert load_champ_records()[0].problem_id == "P_Combinatorics_1"
    assert load_champ_records() is not load_champ_records()


def test_records_are_frozen() -> None:
    record = load_champ_records()[0]
    assert isinstance(record, ChampRecord)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.total_tokens = 1  # type: ignore[misc]


def test_stable_statistics() -> None:
    records = load_champ_records()
    lengths = [r.total_tokens for r in records]
    assert sum(lengths) == SUM_TOTAL
    assert sum(r.prompt_tokens for r in records) == SUM_PROMPT
    assert sum(r.response_tokens for r in records) == SUM_RESPONSE
    assert min(lengths) == MIN_TOTAL
    assert max(lengths) == MAX_TOTAL
    assert statistics.median(lengths) == MEDIAN_TOTAL


def test_first_and_last_rows() -> None:
    records = load_champ_records()
    assert records[0] == ChampRecord("P_Combinatorics_1", 0, 74, 564, 638)
    assert records[-1] == ChampRecord("P_Sequence_50", 71, 168, 1033, 1201)


def test_file_content_hash() -> None:
    raw = resources.files("seqlen_balancing.data").joinpath(CHAMP_LENGTHS_FILE).read_bytes()
    assert hashlib.sha256(gzip.decompress(raw)).hexdigest() == TSV_SHA256


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "header"),
        ("a\tb\n", "header"),
        (
            "problem_id\tresponse_index\tprompt_tokens\tresponse_tokens\ttotal_tokens\nP\t0\t1\t2\n",
            "5 fields",
        ),
        (
            "problem_id\tresponse_index\tprompt_tokens\tresponse_tokens\ttotal_tokens\n"
            "P\t0\t1\tx\t3\n",
            "non-integer",
        ),
        (
            "problem_id\tresponse_index\tprompt_tokens\tresponse_tokens\ttotal_tokens\n"
            "P\t0\t1\t2\t4\n",
            "inconsistent",
        ),
        (
            "problem_id\tresponse_index\tprompt_tokens\tresponse_tokens\ttotal_tokens\n"
            "P\t0\t0\t2\t2\n",
            "inconsistent",
        ),
    ],
)
def test_parse_rejects_malformed_text(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        data_mod._parse(text)


def test_module_doctests() -> None:
    result = doctest.testmod(data_mod, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0
