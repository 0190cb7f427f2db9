"""The command line's --padded and --max-samples-per-micro-batch (issue 26): the counts,
the footprint columns and JSON, on the plan and the sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import lengths_file, run, run_json


def test_plan_padded_counts_and_shows_the_footprint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = lengths_file(tmp_path, [100, 10, 10, 10, 100])
    base = ["plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "150", "--no-balance-batch",
            "--trainer", "main_ppo_v0"]
    plain = run_json(capsys, *base)
    assert plain["total_micro_batches"] == 2 and plain["padded"] is False
    padded = run_json(capsys, *base, "--padded")
    assert padded["total_micro_batches"] == 3 and padded["padded"] is True
    rank = padded["ranks"][0]
    # The footprint of each micro-batch: rows x its widest row (100, 30, 100).
    assert sorted(mb["cost"] for mb in rank["micro_batches"]) == [30, 100, 100]
    assert rank["aligned_tokens"] == 230 and rank["tokens"] == 230
    code, out, _ = run(capsys, *base, "--padded")
    assert code == 0
    assert "a micro-batch costs its rows x its widest row, cut to that width (--padded)" in out
    header = next(line for line in out.splitlines() if line.startswith("rank "))
    assert "footprint" in header and "footprint mb" in header and "aligned" not in header
    row = next(line for line in out.splitlines() if line.split()[:1] == ["0"])
    assert row.split()[3] == "230" and "padded sorted rule" in row


def test_sweep_padded_shows_the_largest_footprint_and_the_padding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = lengths_file(tmp_path, [200] * 8 + [50] * 8)
    argv = ["sweep", "--lengths", path, "--dp-size", "1", "--max-token-len", "800,1600",
            "--no-balance-batch", "--trainer", "main_ppo_v0", "--padded"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("max_token_len"))
    assert "footprint mb" in header and "padding" in header
    names = header.replace("max_token_len", "cap").replace("count/rank", "count").replace(
        "total mbs", "total").replace("L2 bound", "L2").replace("mean fill", "fill").replace(
        "largest mb", "largest").replace("footprint mb", "footprint").split()
    rows = {line.split()[0]: dict(zip(names, line.split(), strict=False))
            for line in lines if line.split()[:1] in (["800"], ["1600"])}
    # 800: 4 rows of 200 per micro-batch (2) and the 8 rows of 50 in one (400): 3, no padding.
    assert (rows["800"]["count"], rows["800"]["footprint"], rows["800"]["padding"]) == ("3", "800", "0.0%")
    # 1600: 2 micro-batches; each holds at most 1,600 token positions.
    assert rows["1600"]["count"] == "2" and int(rows["1600"]["footprint"]) <= 1600


def test_max_samples_per_micro_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = lengths_file(tmp_path, [100] * 64)
    base = ["plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "16384"]
    assert run_json(capsys, *base)["total_micro_batches"] == 1
    limited = run_json(capsys, *base, "--max-samples-per-micro-batch", "16")
    assert limited["total_micro_batches"] == 4 and limited["max_samples_per_micro_batch"] == 16
    assert all(len(mb["indices"]) == 16 for mb in limited["ranks"][0]["micro_batches"])
    code, _, err = run(capsys, *base, "--max-samples-per-micro-batch", "0")
    assert code == 2 and "must be a positive integer" in err
