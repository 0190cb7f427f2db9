"""``--trainer`` on plan and sweep (issue 25 case 4): the step dealt to the DP ranks as that
verl 0.9.1 trainer deals it, the rule named in the header, the JSON and ``--help``.

The oracle is each trainer's rule written out here: ``sft_trainer`` gives rank ``r`` the
step's rows ``r, r + dp, ...`` and never balances; ``main_ppo`` and ``sft_trainer_ray``
balance (equal-size Karmarkar-Karp on workloads, the default) or, with
``--no-balance-batch``, give rank ``r`` the ``r``-th equal contiguous chunk.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run, run_json
from seqlen_balancing.planning.partition import get_seqlen_balanced_partitions, workload


@pytest.fixture
def lengths_file(tmp_path: Path) -> tuple[str, list[int]]:
    rng = random.Random(25)
    values = [rng.randint(1, 900) for _ in range(24)]
    path = tmp_path / "step.txt"
    path.write_text("".join(f"{v}\n" for v in values), encoding="utf-8")
    return str(path), values


def rows_per_rank(result: dict[str, Any]) -> list[set[int]]:
    return [{i for mb in rank["micro_batches"] for i in mb["indices"]} for rank in result["ranks"]]


def test_sft_trainer_deals_every_dp_th_row_and_never_balances(
    capsys: pytest.CaptureFixture[str], lengths_file: tuple[str, list[int]]
) -> None:
    path, values = lengths_file
    result = run_json(capsys, "plan", "--lengths", path, "--dp-size", "3", "--max-token-len", "2000",
                      "--trainer", "sft_trainer")
    assert result["trainer"] == "sft_trainer" and result["balance_batch"] is False
    assert rows_per_rank(result) == [set(range(r, 24, 3)) for r in range(3)]
    assert [rank["tokens"] for rank in result["ranks"]] == [sum(values[r::3]) for r in range(3)]
    code, out, _ = run(capsys, "plan", "--lengths", path, "--dp-size", "3", "--max-token-len", "2000",
                       "--trainer", "sft_trainer")
    assert code == 0
    assert out.splitlines()[1] == (
        "step (verl 0.9.1 sft_trainer): rank r takes the step's rows r, r + 3, r + 6, ... "
        "(DistributedSampler), never balanced; same_micro_num_in_dp on"
    )


@pytest.mark.parametrize("trainer", ["main_ppo_v0", "sft_trainer_ray"])
def test_balancing_trainers_balance_by_default_and_chunk_without(
    capsys: pytest.CaptureFixture[str], lengths_file: tuple[str, list[int]], trainer: str
) -> None:
    path, values = lengths_file
    common = ("plan", "--lengths", path, "--dp-size", "3", "--max-token-len", "2000", "--trainer", trainer)
    balanced = run_json(capsys, *common)
    parts = get_seqlen_balanced_partitions([workload(v) for v in values], 3, equal_size=True)
    assert balanced["balance_batch"] is True
    assert rows_per_rank(balanced) == [set(part) for part in parts]
    chunked = run_json(capsys, *common, "--no-balance-batch")
    assert rows_per_rank(chunked) == [set(range(8 * r, 8 * r + 8)) for r in range(3)]
    _, out, _ = run(capsys, *common)
    assert out.splitlines()[1].startswith(f"step (verl 0.9.1 {trainer}): balanced across DP ranks")


def test_sft_trainer_refuses_balance_batch(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sweep", "--trainer", "sft_trainer", "--balance-batch")
    assert code == 2 and out == ""
    assert err.strip() == (
        "seqlen-balancing: error: --balance-batch: verl 0.9.1's sft_trainer never balances a step "
        "across DP ranks (each rank's DistributedSampler deals its rows); drop --balance-batch, or "
        "pass --trainer sft_trainer_ray or main_ppo"
    )
    # saying what it does anyway is fine
    code, _, err = run(capsys, "plan", "--trainer", "sft_trainer", "--no-balance-batch", "--dp-size", "2",
                       "--batch-size", "8", "--max-token-len", "40000")
    assert code == 0, err


def test_sweep_models_the_trainer_too(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("sweep", "--dp-size", "4", "--batch-size", "16", "--max-token-len", "20000,40000")
    default = run_json(capsys, *args)
    sft = run_json(capsys, *args, "--trainer", "sft_trainer")
    assert (default["trainer"], sft["trainer"]) == ("main_ppo", "sft_trainer")
    assert (default["balance_batch"], sft["balance_batch"]) == (True, False)
    code, out, _ = run(capsys, *args, "--trainer", "sft_trainer")
    assert code == 0 and "step (verl 0.9.1 sft_trainer): rank r takes the step's rows" in out


def test_help_states_each_trainers_rule(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("plan", "sweep"):
        code, out, _ = run(capsys, command, "--help")
        text = " ".join(out.split())
        assert code == 0
        assert "--trainer {main_ppo,main_ppo_v0,sft_trainer,sft_trainer_ray}" in text
        assert "(default: main_ppo)" in text
        assert "sft_trainer: no balancing; DistributedSampler(shuffle=True, seed 0, drop_last=True" in text
        assert "sft_trainer_ray: one shuffled sampler in the driver" in text


def test_sft_trainer_refuses_force_groups(capsys: pytest.CaptureFixture[str]) -> None:
    # its sampler deals rows r, r + dp, ...: a group of consecutive rows cannot stay whole
    code, out, err = run(capsys, "plan", "--trainer", "sft_trainer", "--force-group-size", "2")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--force-group-size 2: verl 0.9.1's sft_trainer deals every dp-th row" in err


def test_main_ppo_is_verls_v1_trainer_balanced_whatever_the_flag_says(
    capsys: pytest.CaptureFixture[str], lengths_file: tuple[str, list[int]]
) -> None:
    path, values = lengths_file
    common = ("plan", "--lengths", path, "--dp-size", "3", "--max-token-len", "2000")
    # verl 0.9.1's V1 _balance_batch: equal-size Karmarkar-Karp on workloads, the parts
    # concatenated as returned (each in row order), then equal contiguous chunks
    parts = get_seqlen_balanced_partitions([workload(v) for v in values], 3, equal_size=True)
    for extra in ((), ("--no-balance-batch",), ("--balance-batch",)):
        result = run_json(capsys, *common, *extra)
        assert result["balance_batch"] is True
        assert rows_per_rank(result) == [set(part) for part in parts]
    code, out, _ = run(capsys, *common, "--no-balance-batch")
    assert code == 0
    assert ("--no-balance-batch: verl 0.9.1's V1 trainer (main_ppo's default) balances every step "
            "whatever trainer.balance_batch says") in out
    assert "--no-balance-batch: verl" not in run(capsys, *common)[1]


def test_main_ppo_pads_a_batch_the_ranks_cannot_share_with_synthetic_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nine.txt"
    path.write_text("".join(f"{n}\n" for n in [300, 20, 250, 40, 90, 60, 75, 10, 5]), encoding="utf-8")
    result = run_json(capsys, "plan", "--lengths", str(path), "--dp-size", "4", "--max-token-len", "400")
    # 9 rows on 4 ranks: verl's upsample_batch_to_divisible_size adds 3 rows of 128 tokens
    assert [rank["samples"] for rank in result["ranks"]] == [3, 3, 3, 3]
    assert sum(rank["tokens"] for rank in result["ranks"]) == 850 + 3 * 128
    code, out, _ = run(capsys, "plan", "--lengths", str(path), "--dp-size", "4", "--max-token-len", "400")
    assert code == 0
    assert ("verl's V1 trainer pads the batch with 3 synthetic rows of 128 tokens to a multiple of "
            "--dp-size 4") in out
    assert "(9 lengths; all 9 rows once, in file order)" in out.splitlines()[0]
    # the legacy trainer refuses it, naming the remainder
    code, _, err = run(capsys, "plan", "--lengths", str(path), "--dp-size", "4", "--trainer", "main_ppo_v0")
    assert code == 2 and "holds 9 rows, not divisible by --dp-size 4" in err


def padded_size(n: int, dp: int, minis: list[int]) -> int:
    """The fewest rows at or above ``n`` that the DP size and every mini-batch size divide."""
    size = n
    while size % dp or any(size % m for m in minis):
        size += 1
    return size


@pytest.mark.parametrize(("n", "dp", "minis"), [(9, 4, [6]), (13, 4, [6]), (9, 2, [4, 3]), (12, 4, [6])])
def test_main_ppo_pads_to_the_dp_size_and_the_mini_batch_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], n: int, dp: int, minis: list[int]
) -> None:
    # verl 0.9.1's V1 _balance_batch pads to lcm(dp, critic and actor ppo_mini_batch_size x n)
    values = [(37 * i) % 300 + 1 for i in range(n)]
    path = tmp_path / "rows.txt"
    path.write_text("".join(f"{v}\n" for v in values), encoding="utf-8")
    flag = ["--mini-batch-size", ",".join(map(str, minis))]
    result = run_json(capsys, "plan", "--lengths", str(path), "--dp-size", str(dp), "--max-token-len",
                      "2000", *flag)
    extra = padded_size(n, dp, minis) - n
    assert result["synthetic_rows"] == extra and result["mini_batch_size"] == minis
    assert [rank["samples"] for rank in result["ranks"]] == [(n + extra) // dp] * dp
    assert sum(rank["tokens"] for rank in result["ranks"]) == sum(values) + 128 * extra
    code, out, _ = run(capsys, "plan", "--lengths", str(path), "--dp-size", str(dp), "--max-token-len",
                       "2000", *flag)
    assert code == 0
    if extra:
        assert (f"pads the batch with {extra} synthetic row{'s' if extra > 1 else ''} of 128 tokens to a "
                f"multiple of {padded_size(1, dp, minis)}, the least common multiple") in out
    else:
        assert "synthetic" not in out


def test_a_drawn_step_is_padded_to_the_mini_batch_sizes_too(capsys: pytest.CaptureFixture[str]) -> None:
    # 8 ranks x 9 rows = 72; a mini-batch of 16 rows: verl pads to 80, 10 rows per rank
    result = run_json(capsys, "plan", "--dp-size", "8", "--batch-size", "9", "--mini-batch-size", "16")
    assert result["synthetic_rows"] == padded_size(72, 8, [16]) - 72 == 8
    assert [rank["samples"] for rank in result["ranks"]] == [10] * 8
    assert run_json(capsys, "plan", "--dp-size", "8", "--batch-size", "9")["synthetic_rows"] == 0


@pytest.mark.parametrize("trainer", ["main_ppo_v0", "sft_trainer", "sft_trainer_ray"])
def test_mini_batch_size_is_only_for_the_v1_trainer(capsys: pytest.CaptureFixture[str], trainer: str) -> None:
    code, _, err = run(capsys, "plan", "--trainer", trainer, "--mini-batch-size", "16")
    assert code == 2 and f"--mini-batch-size: only verl 0.9.1's V1 trainer pads a step to its mini-batch " \
        f"sizes; {trainer} does not" in err
