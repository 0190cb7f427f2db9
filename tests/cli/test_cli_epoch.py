"""``seqlen-balancing epoch`` (issue 25 case 4): a whole SFT run replayed step by step.

The oracle builds each step's rows with torch's own ``DistributedSampler`` and
``BatchSampler`` as verl 0.9.1's trainers configure them (``shuffle=True``,
``drop_last=True``, ``set_epoch``), deals them as the trainer does (spelled out here), and
counts micro-batches with the library's public DP planner (:func:`plan_data_parallel`,
what ``rearrange_micro_batches`` does on each rank of a group) and verl's with the model of
its rule; the command's per-step counts, totals and worst steps must equal them.
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import pytest

from cli_helpers import run, run_json
from seqlen_balancing import plan_data_parallel
from seqlen_balancing.planning.partition import get_seqlen_balanced_partitions, workload
from seqlen_balancing.planning.verl_rule import verl_counts

pytestmark = [pytest.mark.torch, pytest.mark.no_tensordict]  # the sampler's shuffle is torch's


def write(tmp_path: Path, values: list[int]) -> str:
    path = tmp_path / "lengths.txt"
    path.write_text("".join(f"{v}\n" for v in values), encoding="utf-8")
    return str(path)


def torch_batches(n: int, replicas: int, rank: int, seed: int, epoch: int, batch: int) -> list[list[int]]:
    from torch.utils.data import BatchSampler, DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=replicas, rank=rank, shuffle=True, seed=seed,
                                 drop_last=True)
    sampler.set_epoch(epoch)
    return [list(b) for b in BatchSampler(sampler, batch, drop_last=True)]


def oracle_steps(lengths: list[int], trainer: str, dp: int, batch: int, seed: int, epochs: int,
                 balance: bool = True) -> list[list[list[int]]]:
    """Per step, each rank's dataset rows, as the trainer feeds them."""
    steps = []
    for epoch in range(epochs):
        if trainer == "sft_trainer":
            per_rank = [torch_batches(len(lengths), dp, r, seed, epoch, batch // dp) for r in range(dp)]
            steps += [[per_rank[r][s] for r in range(dp)] for s in range(len(per_rank[0]))]
            continue
        for rows in torch_batches(len(lengths), 1, 0, seed, epoch, batch):
            if not balance:
                size = batch // dp
                steps.append([rows[r * size : (r + 1) * size] for r in range(dp)])
                continue
            loads = [workload(lengths[i]) for i in rows]
            parts = get_seqlen_balanced_partitions(loads, dp, equal_size=True)
            ranks = []
            for part in parts:
                part = sorted(part, key=lambda p: (loads[p], p))
                ranks.append([rows[p] for p in part[::2] + part[1::2][::-1]])
            steps.append(ranks)
    return steps


def expected(lengths: list[int], steps: list[list[list[int]]], cap: int) -> tuple[list[int], list[int]]:
    ours, verl = [], []
    for ranks in steps:
        per_rank = [[lengths[i] for i in rows] for rows in ranks]
        ours.append(len(plan_data_parallel(per_rank, cap)[0]))
        verl.append(verl_counts(per_rank, cap).counts[0])
    return ours, verl


def worst(values: list[int]) -> dict[str, int]:
    top = max(values)
    return {"micro_batches": top, "step": values.index(top) + 1}


@pytest.mark.parametrize(
    ("trainer", "dp", "batch", "extra"),
    [("sft_trainer", 3, 12, ()), ("sft_trainer_ray", 2, 8, ()),
     ("sft_trainer_ray", 2, 8, ("--no-balance-batch",))],
)
def test_the_replay_equals_the_samplers_rows_planned_by_the_dp_rule(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, trainer: str, dp: int, batch: int,
    extra: tuple[str, ...],
) -> None:
    rng = random.Random(hash((trainer, extra)) % 1000)
    lengths = [rng.choice([rng.randint(1, 120), rng.randint(100, 400)]) for _ in range(103)]
    result = run_json(capsys, "epoch", "--lengths", write(tmp_path, lengths), "--trainer", trainer,
                      "--dp-size", str(dp), "--global-batch-size", str(batch), "--epochs", "2",
                      "--seed", "5", "--max-token-len", "400,900", "--compare-verl", *extra)
    steps = oracle_steps(lengths, trainer, dp, batch, 5, 2, balance=not extra)
    assert result["steps"] == len(steps) and result["steps_per_epoch"] * 2 == len(steps)
    rows_used = len(steps) // 2 * batch // dp * dp
    assert result["rows_left_out_per_epoch"] == 103 - rows_used
    assert result["balance_batch"] is (trainer == "sft_trainer_ray" and not extra)
    for item, cap in zip(result["caps"], (400, 900), strict=True):
        ours, verl = expected(lengths, steps, cap)
        assert [s["micro_batches"] for s in item["steps"]] == ours
        assert [s["verl_micro_batches"] for s in item["steps"]] == verl
        assert [s["epoch"] for s in item["steps"]] == [1] * (len(steps) // 2) + [2] * (len(steps) // 2)
        assert item["total_micro_batches"] == sum(ours) and item["verl_total_micro_batches"] == sum(verl)
        assert item["worst_step"] == worst(ours) and item["verl_worst_step"] == worst(verl)
        assert sum(ours) <= sum(verl)


def test_verls_defaults_when_not_given(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lengths = [(i * 37) % 500 + 1 for i in range(600)]
    result = run_json(capsys, "epoch", "--lengths", write(tmp_path, lengths), "--trainer", "sft_trainer")
    settings = (result["seed"], result["epochs"], result["global_batch_size"], result["dp_size"])
    assert settings == (0, 1, 256, 8)
    assert result["caps"][0]["max_token_len"] == 8192
    steps = oracle_steps(lengths, "sft_trainer", 8, 256, 0, 1)
    assert result["steps"] == len(steps) == 2  # 600 rows: 75 per rank, 32 per step, 2 steps
    assert [s["micro_batches"] for s in result["caps"][0]["steps"]] == expected(lengths, steps, 8192)[0]


def test_the_text_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lengths = [50 + (i * 29) % 300 for i in range(40)]
    code, out, err = run(capsys, "epoch", "--lengths", write(tmp_path, lengths), "--trainer", "sft_trainer",
                         "--dp-size", "2", "--global-batch-size", "8", "--max-token-len", "100,700",
                         "--compare-verl")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        f"40 rows from {tmp_path / 'lengths.txt'}; 1 epoch x 5 steps of 8 rows (4 per rank on 2 DP ranks); "
        "sampler seed 0; 0 rows left out per epoch (drop_last)"
    )
    assert lines[1].startswith("trainer modelled: verl 0.9.1 sft_trainer: no balancing; DistributedSampler(")
    assert "max_token_len 700: micro-batches per rank at each step" in lines
    assert any(line.startswith("cannot run: step 1 (epoch 1): rank ") and "exceeds max_token_len=100" in line
               for line in lines)
    steps = oracle_steps(lengths, "sft_trainer", 2, 8, 0, 1)
    ours, verl = expected(lengths, steps, 700)
    start = lines.index("max_token_len 700: micro-batches per rank at each step")
    assert lines[start + 1].split() == ["step", "epoch", "library", "verl", "global"]
    assert [line.split()[2:4] for line in lines[start + 2 : start + 7]] == [
        [str(a), str(b)] for a, b in zip(ours, verl, strict=True)
    ]
    assert lines[start + 7].startswith(f"total over the run, per rank: library {sum(ours)}, verl {sum(verl)}")
    assert lines[start + 9].startswith("lock-step model of the run (micro_batch_fixed_tokens 819.2;")
    assert lines[-3].split()[:3] == ["max_token_len", "library", "total"]
    assert lines[-2].split()[:3] == ["100", "cannot", "run"]
    assert lines[-1].split()[:2] == ["700", str(sum(ours))]


def test_no_cap_that_runs_is_exit_1_after_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "epoch", "--lengths", write(tmp_path, [500] * 16), "--trainer",
                         "sft_trainer_ray", "--dp-size", "2", "--global-batch-size", "4",
                         "--max-token-len", "100")
    assert code == 1 and "cannot run" in out
    assert err.count("\n") == 1 and "no cap can run the whole replay" in err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [(("--trainer", "sft_trainer_ray", "--dp-size", "3", "--global-batch-size", "8"),
      "--global-batch-size 8 is not a multiple of --dp-size 3"),
     (("--trainer", "sft_trainer", "--global-batch-size", "4096"),
      "make no full step of --global-batch-size 4096"),
     (("--trainer", "sft_trainer", "--balance-batch"), "sft_trainer never balances"),
     (("--trainer", "main_ppo"), "invalid choice: 'main_ppo'"),
     ((), "the following arguments are required: --trainer")],
)
def test_runs_the_trainer_could_not_form_are_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...], fragment: str
) -> None:
    code, out, err = run(capsys, "epoch", "--lengths", write(tmp_path, [10] * 100), *argv)
    assert code == 2 and out == "" and fragment in err and err.count("\n") == 1


def test_progress_is_a_plain_stderr_line_without_tqdm(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    code, _, err = run(capsys, "epoch", "--lengths", write(tmp_path, [10] * 100), "--trainer", "sft_trainer",
                       "--dp-size", "2", "--global-batch-size", "4", "--max-token-len", "100,200",
                       "--progress")
    assert code == 0
    lines = err.splitlines()
    assert lines[-1] == "seqlen-balancing epoch: 50/50 step plans (100%)"
    assert len(lines) == 11  # 0%, 10%, ..., 100%


def test_without_torch_the_replay_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    code, out, err = run(capsys, "epoch", "--lengths", write(tmp_path, [10] * 100), "--trainer",
                         "sft_trainer", "--dp-size", "2", "--global-batch-size", "4")
    assert code == 2 and out == ""
    assert "epoch replays torch's DistributedSampler shuffle and needs torch" in err


def test_sft_trainer_feeds_global_batch_size_over_dp_rows_per_rank(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # verl's sft_trainer gives each rank global_batch_size // dp rows: 10 on 3 ranks feed 9
    lengths = [5 + i % 11 for i in range(50)]
    result = run_json(capsys, "epoch", "--lengths", write(tmp_path, lengths), "--trainer", "sft_trainer",
                      "--dp-size", "3", "--global-batch-size", "10", "--max-token-len", "100")
    steps = oracle_steps(lengths, "sft_trainer", 3, 10, 0, 1)
    assert result["rows_per_rank"] == 3 and result["steps"] == len(steps) == 5  # 16 rows per rank
    assert result["rows_left_out_per_epoch"] == 50 - 5 * 9
    assert [s["micro_batches"] for s in result["caps"][0]["steps"]] == expected(lengths, steps, 100)[0]
    code, out, _ = run(capsys, "epoch", "--lengths", write(tmp_path, lengths), "--trainer", "sft_trainer",
                       "--dp-size", "3", "--global-batch-size", "10", "--max-token-len", "100")
    assert code == 0 and "1 epoch x 5 steps of 9 rows (3 per rank on 3 DP ranks)" in out.splitlines()[0]


def test_group_sizes_keep_each_ranks_groups_whole_at_every_step(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # --group-sizes 2,3 on epoch, as on plan: each rank's rows of a step, as the sampler
    # deals them, in consecutive groups of 2, 3, 2, 3, ... rows; a group runs whole in one
    # micro-batch. The count of a step: the fewest bins any rank's group sums pack into.
    from oracles import brute_force_optimum

    rng = random.Random(2)
    lengths = [rng.randint(20, 300) for _ in range(48)]
    cap = 700
    base = ["epoch", "--lengths", write(tmp_path, lengths), "--trainer", "sft_trainer", "--dp-size", "2",
            "--global-batch-size", "16", "--max-token-len", str(cap)]
    result = run_json(capsys, *base, "--group-sizes", "2,3")
    assert result["group_sizes"] == [2, 3]
    steps = oracle_steps(lengths, "sft_trainer", 2, 16, 0, 1)

    def group_sums(rows: list[int]) -> list[int]:
        sums, at, k = [], 0, 0
        while at < len(rows):
            size = (2, 3)[k % 2]
            sums.append(sum(lengths[i] for i in rows[at : at + size]))
            at, k = at + size, k + 1
        return sums

    grouped = [max(brute_force_optimum(group_sums(rows), cap) for rows in ranks) for ranks in steps]
    alone = [max(brute_force_optimum([lengths[i] for i in rows], cap) for rows in ranks) for ranks in steps]
    assert [s["micro_batches"] for s in result["caps"][0]["steps"]] == grouped
    assert grouped != alone  # the groups change the count on some step
    assert [s["micro_batches"] for s in run_json(capsys, *base)["caps"][0]["steps"]] == alone
    # the global planner cannot give every rank as many rows with groups of different sizes
    assert {s["global_micro_batches"] for s in result["caps"][0]["steps"]} == {None}
    code, out, _ = run(capsys, *base, "--group-sizes", "2,3")
    assert code == 0
    assert ("groups (group_ids): each rank's rows of a step, as dealt to it, in consecutive groups of "
            "2,3 rows, cycled; each group lands whole in one micro-batch") in out
    # a group over the cap stops the replay there, named
    code, out, err = run(capsys, *base[:-1], "300", "--group-sizes", "2,3")
    assert code == 1 and "a group runs whole in one micro-batch" in err


def test_group_sizes_refuse_force_groups_on_epoch_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "epoch", "--lengths", write(tmp_path, [5] * 32), "--trainer",
                       "sft_trainer_ray", "--dp-size", "2", "--global-batch-size", "16",
                       "--group-sizes", "2", "--force-group-size", "2")
    assert code == 2 and "--group-sizes and --force-group-size both form the groups" in err


def test_the_global_column_plans_an_over_cap_row_alone_with_over_cap_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import itertools

    from oracles import brute_force_optimum

    cap = 400
    lengths = [120, 380, 60, 250, 900, 90, 300, 40, 200, 150, 330, 70, 260, 110, 30, 180]
    result = run_json(capsys, "epoch", "--lengths", write(tmp_path, lengths), "--trainer", "sft_trainer",
                      "--dp-size", "2", "--global-batch-size", "8", "--max-token-len", str(cap),
                      "--over-cap", "alone")

    def fewest(sizes: list[int]) -> int:  # over-cap sizes alone, the rest brute force
        rest = [s for s in sizes if s <= cap]
        return len(sizes) - len(rest) + (brute_force_optimum(rest, cap) if rest else 0)

    expected = []
    for ranks in oracle_steps(lengths, "sft_trainer", 2, 8, 0, 1):
        rows = ranks[0] + ranks[1]
        expected.append(min(max(fewest([lengths[i] for i in half]),
                                fewest([lengths[i] for i in rows if i not in half]))
                            for half in itertools.combinations(rows, 4)))
    assert [s["global_micro_batches"] for s in result["caps"][0]["steps"]] == expected


def test_two_epochs_and_a_help_that_names_only_what_epoch_takes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 46: the header says "2 epochs" (not "epoches"); epoch's help never offers the
    --batch-size that epoch refuses (its rows per step are --global-batch-size)."""
    lengths = [50 + (i * 29) % 300 for i in range(40)]
    code, out, err = run(capsys, "epoch", "--lengths", write(tmp_path, lengths), "--trainer", "sft_trainer",
                         "--dp-size", "2", "--global-batch-size", "8", "--epochs", "2",
                         "--max-token-len", "700")
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"40 rows from {tmp_path / 'lengths.txt'}; 2 epochs x 5 steps ")
    code, help_text, _ = run(capsys, "epoch", "--help")
    assert code == 0
    assert "--global-batch-size" in help_text
    assert re.findall(r"(?<![\w-])--batch-size", help_text) == []
    code, _, err = run(capsys, "epoch", "--trainer", "sft_trainer", "--batch-size", "4")
    assert code == 2 and "unrecognized arguments: --batch-size 4" in err


def test_the_ray_trainers_balance_keeps_forced_groups_whole() -> None:
    """--force-group-size on sft_trainer_ray: the balance moves groups of consecutive rows of
    the step whole (as plan's deal does), so each rank's rows are whole pairs of them."""
    from seqlen_balancing.cli.trainers import epoch_steps

    lengths = [random.Random(3).randint(10, 900) for _ in range(96)]
    steps = list(epoch_steps(lengths, 2, 16, "sft_trainer_ray", 0, 2, True, None, 2))
    assert len(steps) == 12
    for step in steps:
        pairs = {frozenset(step.rows[k : k + 2]) for k in range(0, len(step.rows), 2)}
        for rows in step.ranks:
            assert len(rows) == 8 and {frozenset(rows[k : k + 2]) for k in range(0, 8, 2)} <= pairs, step
