"""``sweep`` answers "which cap" (issue 47): each cap's modeled step time three ways, the
fastest cap, and the fastest at or below ``--max-token-len-limit``; checked against the
lock-step model computed by hand on a step whose plans are the only ones the caps allow."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import lengths_file, run, run_json

LINEAR = 24576
FIXED_TOKENS = 5  # the fixed cost of one micro-batch: 5 tokens of linear work, at every cap

#: Two ranks of four rows each (``--trainer main_ppo_v0 --no-balance-batch``: equal
#: contiguous chunks): rank 0 holds 90, 60, 50, 50 and rank 1 holds 90, 60, 60, 40.
ROWS = [90, 60, 50, 50, 90, 60, 60, 40]


def work(*lengths: int) -> int:
    """verl's workload of a micro-batch: ``24576 s + s**2`` per sequence."""
    return sum(LINEAR * s + s * s for s in lengths)


def lock_step(rank_loads: list[list[int]], count: int) -> float:
    """The lock-step model with the library's order (each rank's micro-batches by the same
    permutation of its sorted workloads): the sum over sorted positions of the ranks' largest,
    plus ``count`` fixed costs."""
    ranked = [sorted(loads, reverse=True) for loads in rank_loads]
    return sum(max(column) for column in zip(*ranked, strict=True)) + count * FIXED_TOKENS * LINEAR


# Each cap allows one plan per rank at the agreed count (checked by hand):
# * 100: 250 tokens need 3 micro-batches; 90 and 60 fit nothing else, so the two smallest
#   share one: rank 0 {90} {60} {50, 50}, rank 1 {90} {60} {60, 40};
# * 140: 2 micro-batches; 90 fits with 50 or 40 only, so rank 0 {90, 50} {60, 50} and
#   rank 1 {90, 40} {60, 60};
# * 300: one micro-batch per rank (250 tokens each).
AT_100 = lock_step([[work(90), work(60), work(50, 50)], [work(90), work(60), work(60, 40)]], 3)
AT_140 = lock_step([[work(90, 50), work(60, 50)], [work(90, 40), work(60, 60)]], 2)
AT_300 = lock_step([[work(90, 60, 50, 50)], [work(90, 60, 60, 40)]], 1)


def _sweep(tmp_path: Path, *extra: str) -> list[str]:
    return ["sweep", "--lengths", lengths_file(tmp_path, ROWS), "--dp-size", "2", "--trainer", "main_ppo_v0",
            "--no-balance-batch", "--micro-batch-fixed-tokens", str(FIXED_TOKENS), *extra]


def test_the_hand_computed_times_make_a_smaller_cap_the_faster() -> None:
    # 140 pairs the heavy 90s with unlike partners on the two ranks: its second layer waits
    # for rank 1's {60, 60}; at 100 the layers line up, worth more than one fixed cost
    assert AT_100 < AT_140
    assert (AT_100, AT_140, AT_300) == (6_160_900 + 3 * 5 * LINEAR, 6_407_560 + 2 * 5 * LINEAR,
                                        6_160_900 + 5 * LINEAR)


def test_sweep_models_every_cap_and_names_the_fastest_which_is_not_the_largest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_json(capsys, *_sweep(tmp_path, "--max-token-len", "100,140", "--json"))
    times = {row["max_token_len"]: row["step_time"]["library"] for row in out["rows"]}
    assert (times[100]["count"], times[140]["count"]) == (3, 2)
    assert times[100]["step_time"] == pytest.approx(AT_100)
    assert times[140]["step_time"] == pytest.approx(AT_140)
    assert out["fastest"]["library"] == 100
    assert all(row["step_time"]["micro_batch_fixed_tokens"] == FIXED_TOKENS for row in out["rows"])
    # the table: the same times in tokens of linear work, and which cap is fastest
    code, text, _ = run(capsys, *_sweep(tmp_path, "--max-token-len", "100,140"))
    assert code == 0
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("max_token_len"))
    columns = lines[header].split()
    rows = [dict(zip(columns, line.split(), strict=False)) for line in lines[header + 1 : header + 3]]
    assert [r["count/rank"] for r in rows] == ["3", "2"]
    assert lines[header].index("library time") > 0
    cells = [line[lines[header].index("library time") - 2 : lines[header].index("library time") + 12].split()
             for line in lines[header + 1 : header + 3]]
    assert cells == [[f"{AT_100 / LINEAR:,.0f}"], [f"{AT_140 / LINEAR:,.0f}"]]
    assert lines[header + 1].split()[-1] == "fastest"
    assert lines[header + 2].split()[-1] == f"{100 * (AT_140 / AT_100 - 1):+.1f}%"
    assert any(line.startswith("fastest max_token_len in the lock-step model") and
               "this library per rank 100" in line for line in lines)


def test_the_limit_marks_the_fastest_cap_at_or_below_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 300 is fastest of all (one micro-batch per rank); at or below 200, 100 beats 140
    assert AT_300 < AT_100 < AT_140
    out = run_json(capsys, *_sweep(tmp_path, "--max-token-len", "100,140,300", "--max-token-len-limit", "200",
                                   "--json"))
    assert out["max_token_len_limit"] == 200
    assert out["fastest"]["library"] == 300
    assert out["fastest_within_limit"]["library"] == 100
    assert [row["step_time"]["library"]["step_time"] for row in out["rows"]] == pytest.approx(
        [AT_100, AT_140, AT_300])
    code, text, _ = run(capsys, *_sweep(tmp_path, "--max-token-len", "100,140,300",
                                        "--max-token-len-limit", "200"))
    assert code == 0
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("max_token_len"))
    assert lines[header].split()[-1] == "limit"
    marks = [line[len(lines[header]) - 7 :].strip() for line in lines[header + 1 : header + 4]]
    assert marks == ["fastest", "", "over"]
    assert any(line.startswith("fastest max_token_len at or below --max-token-len-limit 200") and
               "this library per rank 100" in line for line in lines)
    # without the limit, no limit column, no such line
    out = run_json(capsys, *_sweep(tmp_path, "--max-token-len", "100,140,300", "--json"))
    assert out["max_token_len_limit"] is None and out["fastest_within_limit"] is None


def test_the_limit_must_be_a_positive_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *_sweep(tmp_path, "--max-token-len-limit", "0"))
    assert code == 2 and "--max-token-len-limit" in err
