"""The command line's issue-27 options: --over-cap alone (the plan and its report of the
samples run alone) and --workload-model (balance on a model's FLOPs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import lengths_file, run
from seqlen_balancing.cost import transformer_workloads


def test_over_cap_alone_plans_and_reports_the_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = lengths_file(tmp_path, [5000, 100, 200])
    base = ["plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "4096"]
    code, _, err = run(capsys, *base)
    assert code == 1 and "exceeds max_token_len=4096" in err  # verl's behaviour by default
    code, out, _ = run(capsys, *base, "--over-cap", "alone")
    assert code == 0
    assert ("rank 0: 1 sample over the cap of 4096 run alone (--over-cap alone; may run out of "
            "memory): sample 0 (5000 tokens)") in out
    code, out, _ = run(capsys, *base, "--over-cap", "alone", "--json")
    result: dict[str, Any] = json.loads(out)
    rank = result["ranks"][0]
    assert rank["over_cap_alone"] == [{"index": 0, "cost": 5000}]
    assert [mb["indices"] for mb in rank["micro_batches"]] == [[0], [1, 2]]
    assert rank["lower_bound"] == 2 and result["over_cap"] == "alone"


def test_over_cap_alone_on_two_ranks_counts_in_the_agreed_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = lengths_file(tmp_path, [100, 200, 300, 5000, 100, 200])
    code, out, _ = run(capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", "4096",
                       "--over-cap", "alone", "--no-balance-batch", "--trainer", "main_ppo_v0", "--json")
    result = json.loads(out)
    assert code == 0 and result["agreed_count"] == 2
    assert [r["over_cap_alone"] for r in result["ranks"]] == [[], [{"index": 3, "cost": 5000}]]


def test_over_cap_alone_and_truncate_exclude_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = lengths_file(tmp_path, [5000, 100])
    code, _, err = run(capsys, "plan", "--lengths", path, "--dp-size", "1", "--over-cap", "alone",
                       "--truncate")
    assert code == 2 and "--over-cap alone runs over-cap samples whole" in err


def test_workload_model_balances_on_its_flops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = [4096] + [1024] * 8
    path = lengths_file(tmp_path, lengths)
    base = ["plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "16384",
            "--min-num-micro-batch", "2", "--json"]
    _, out, _ = run(capsys, *base)
    verl_sizes = sorted(len(mb["indices"]) for mb in json.loads(out)["ranks"][0]["micro_batches"])
    assert verl_sizes == [3, 6]
    _, out, _ = run(capsys, *base, "--workload-model", "hidden_size=64,num_layers=2")
    result = json.loads(out)
    plan = [mb["indices"] for mb in result["ranks"][0]["micro_batches"]]
    assert sorted(plan) == [[0], [1, 2, 3, 4, 5, 6, 7, 8]]
    assert result["workload_model"] == {"hidden_size": 64, "num_layers": 2}
    loads = [sum(transformer_workloads([lengths[i] for i in mb], hidden_size=64)) for mb in plan]
    mean = sum(loads) / 2
    assert result["ranks"][0]["workload_spread"] == round((max(loads) - min(loads)) / mean, 6)
    code, _, err = run(capsys, *base, "--workload-model", "hidden=64")
    assert code == 2 and "is not key=value with a key among" in err
