"""``plan`` and ``epoch`` report the modeled step time three ways (verl, the library per rank,
the global planner), checked against the lock-step model spelled out here and a brute-force
best count of the whole step (no torch for ``plan``; ``epoch`` replays torch's sampler)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from cli_helpers import lengths_file, run, run_json

CAP = 400
LINEAR = 24576


def work(s: int) -> int:
    return LINEAR * s + s * s


def lock_step(plans: list[list[list[int]]], lengths: list[int], fixed: float) -> float:
    """The lock-step model: sum over index k of the slowest rank's micro-batch k, plus a
    fixed cost per micro-batch of the most any rank runs."""
    count = max(len(p) for p in plans)
    total = sum(max(sum(work(lengths[i]) for i in p[k]) for p in plans if k < len(p)) for k in range(count))
    return total + count * fixed


def fewest(sizes: list[int], cap: int) -> int:
    for count in range(1, len(sizes) + 1):
        for labels in itertools.product(range(count), repeat=len(sizes)):
            sums = [0] * count
            for size, label in zip(sizes, labels, strict=True):
                sums[label] += size
            if len(set(labels)) == count and max(sums) <= cap:
                return count
    raise AssertionError("unreachable")


def best_equal_split(sizes: list[int], cap: int) -> int:
    n = len(sizes)
    best = n
    for half in itertools.combinations(range(n), n // 2):
        rest = [i for i in range(n) if i not in half]
        best = min(best, max(fewest([sizes[i] for i in half], cap), fewest([sizes[i] for i in rest], cap)))
    return best


@pytest.mark.parametrize("seed", range(4))
def test_plan_reports_the_lock_step_model_three_ways(
    seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(seed)
    values = [rng.randint(20, 390) for _ in range(8)]
    path = lengths_file(tmp_path, values)
    for trainer in ("sft_trainer", "main_ppo"):
        result = run_json(capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", str(CAP),
                          "--trainer", trainer, "--compare-verl")
        model = result["step_time"]
        fixed = 819.2 * LINEAR  # the default: 819.2 tokens of linear work, whatever the cap
        assert (model["micro_batch_fixed_tokens"], model["unit"]) == (819.2, LINEAR * CAP)
        plans = [[mb["indices"] for mb in rank["micro_batches"]] for rank in result["ranks"]]
        library = model["library"]
        assert library["count"] == result["agreed_count"]
        assert library["step_time"] == pytest.approx(lock_step(plans, values, fixed))
        total = sum(work(v) for v in values)
        assert library["floor"] == pytest.approx(total / 2 + library["count"] * fixed)
        # verl's own plans: its count, never below its floor
        verl = model["verl"]
        assert verl["count"] == result["verl"]["counts"][0]
        assert verl["step_time"] >= verl["floor"] == pytest.approx(total / 2 + verl["count"] * fixed)
        # the global planner: the best count any equal split admits, or one above it
        best = best_equal_split(values, CAP)
        whole = model["global"]
        assert best <= whole["count"] <= best + 1
        assert whole["step_time"] >= whole["floor"] == pytest.approx(total / 2 + whole["count"] * fixed)
        code, out, _ = run(capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", str(CAP),
                           "--trainer", trainer, "--compare-verl")
        assert code == 0
        lines = out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("lock-step model of the step"))
        assert lines[start + 1].split() == ["plans", "count/rank", "step", "time", "x", "floor", "vs", "verl"]
        for line, kind in zip(lines[start + 2 : start + 5], ("verl", "library", "global"), strict=True):
            cells = line.split()
            unit = LINEAR * CAP
            assert cells[-3 if kind != "verl" else -2] == f"{model[kind]['step_time'] / unit:.2f}"
            assert int(cells[-4 if kind != "verl" else -3]) == model[kind]["count"]
            if kind != "verl":
                assert cells[-1] == f"{100 * (model[kind]['step_time'] / verl['step_time'] - 1):+.1f}%"


def test_plan_without_compare_verl_compares_with_the_library(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = lengths_file(tmp_path, [300, 20, 250, 40, 90, 60, 75, 10])
    result = run_json(capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", str(CAP))
    assert result["step_time"]["verl"] == {"count": None, "step_time": None, "floor": None, "error": None}
    _, out, _ = run(capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", str(CAP))
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("lock-step model of the step"))
    assert lines[start + 1].split()[-2:] == ["vs", "library"]
    assert lines[start + 2].startswith("the trainer's dealing, this library per rank")
    assert lines[start + 3].startswith("the global planner (plan_global_batch)")
    assert len(lines) == start + 4


@pytest.mark.torch
def test_epoch_reports_the_global_count_per_step_and_the_run_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(9)
    values = [rng.randint(20, 390) for _ in range(32)]
    path = lengths_file(tmp_path, values)
    result = run_json(capsys, "epoch", "--lengths", path, "--dp-size", "2", "--trainer", "sft_trainer",
                      "--global-batch-size", "8", "--max-token-len", str(CAP))
    cap = result["caps"][0]
    steps = cap["steps"]
    assert len(steps) == 4
    import torch

    order = torch.randperm(32, generator=torch.Generator().manual_seed(0)).tolist()
    for t, step in enumerate(steps):
        rows = order[8 * t : 8 * t + 8]  # DistributedSampler's step: the same rows, all ranks
        best = best_equal_split([values[i] for i in rows], CAP)
        assert best <= step["global_micro_batches"] <= best + 1
        assert step["global_micro_batches"] <= step["micro_batches"] + 1
    totals = cap["step_time"]
    assert totals["library"]["count"] == cap["total_micro_batches"]
    assert totals["global"]["count"] == sum(step["global_micro_batches"] for step in steps)
    assert "verl" not in totals  # not asked for (--compare-verl)
    assert totals["global"]["floor"] <= totals["global"]["step_time"]


def test_a_step_of_empty_rows_with_no_fixed_cost_has_no_floor_to_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every row 0 tokens and micro_batch_fixed_tokens 0: the step's workload and its floor are
    # both 0, so "x floor" has nothing to divide by: it reads '-' (it used to be a traceback).
    code, out, err = run(capsys, "plan", "--lengths", lengths_file(tmp_path, [0, 0, 0, 0]), "--dp-size", "2",
                         "--micro-batch-fixed-tokens", "0")
    assert code == 0 and err == ""
    rows = [line.split("  ") for line in out.splitlines() if line.startswith(("the trainer", "the global"))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row if c.strip()]
        assert cells[1:] == ["1", "0.00", "-"]  # count/rank 1, step time 0, no floor ratio
