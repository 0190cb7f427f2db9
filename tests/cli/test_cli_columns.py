"""Every count column of ``plan``, ``sweep`` and ``epoch`` plans with every option given
(issue 46, item 5): options x columns.

For each command-line option that changes a plan, alone, on one small step (2 DP ranks,
the rows dealt as written out here), each column's count equals an oracle call of the
public function with that option: the ``library`` column (``plan``'s ranks, ``sweep``'s
count/rank, ``epoch``'s per-step count) :func:`plan_data_parallel` on the dealt ranks; the
``global`` column (``plan``'s lock-step model, ``epoch``'s per step)
:func:`plan_global_batch` on the step; the ``verl`` column verl 0.9.1's rule spelled out
here with the verl parameters only (the library's own options are not verl's: the header
says so, as it says which options the global planner has no parameter for).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cli_helpers import lengths_file, run, run_json
from oracles import model_karmarkar_karp, workload
from seqlen_balancing import plan_data_parallel, plan_global_batch
from seqlen_balancing.cost import WorkloadModel

CAP = 400
DP = 2
#: 24 rows, 12 a rank: short and long mixed, so that every option below moves some count.
LENGTHS = [380, 12, 205, 33, 150, 7, 260, 41, 99, 180, 5, 310,
           22, 140, 330, 64, 18, 230, 88, 9, 120, 270, 56, 160]
MODEL = "hidden_size=64,num_layers=2"

#: name: (the flags, the options as the public functions take them).
CASES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "equal rows": (["--equal-rows-per-micro-batch"], {"equal_rows_per_micro_batch": True}),
    "over cap alone": (["--over-cap", "alone"], {"over_cap": "alone"}),
    "sample limit": (["--max-samples-per-micro-batch", "3"], {"max_samples_per_micro_batch": 3}),
    "alignment": (["--pad-to-multiple-of", "64"], {"pad_to_multiple_of": 64}),
    "bucket": (["--micro-batch-multiple-of", "96"], {"micro_batch_multiple_of": 96}),
    "floor": (["--min-num-micro-batch", "7"], {"min_num_micro_batch": 7}),
    "divisor": (["--num-batches-divided-by", "4"], {"num_batches_divided_by": 4}),
    "force groups": (["--force-group-size", "2"], {"force_group_size": 2}),
    "padded": (["--padded"], {"padded": True}),
    "workload model": (["--workload-model", MODEL], {"workload_model": MODEL}),
    "free micro-batches": (["--micro-batch-fixed-tokens", "0"], {"micro_batch_fixed_tokens": 0.0}),
    "heaviest first": (["--no-dynamic-bsz-balance"], {"use_dynamic_bsz_balance": False}),
    "no agreement": (["--no-same-micro-num-in-dp"], {"same_micro_num_in_dp": False}),
    "dummies": (["--dummy-micro-batches", "--min-num-micro-batch", "13"],
                {"dummy_micro_batches": True, "min_num_micro_batch": 13}),
}

#: What plan_global_batch refuses (the header names them; it plans without).
NOT_GLOBAL = {"same_micro_num_in_dp": "--no-same-micro-num-in-dp",
              "dummy_micro_batches": "--dummy-micro-batches"}
#: verl 0.9.1's own parameters; the rest are the library's, which verl's rule lacks.
VERL = ("num_batches_divided_by", "min_num_micro_batch", "force_group_size", "same_micro_num_in_dp",
        "use_dynamic_bsz_balance")


def library_counts(ranks: list[list[int]], options: dict[str, Any], cap: int = CAP) -> list[int]:
    return [len(plan) for plan in plan_data_parallel(ranks, cap, **options)]


def global_count(step: list[int], options: dict[str, Any], cap: int = CAP) -> int | None:
    """plan_global_batch's micro-batches per rank on the step (None: it raises)."""
    keywords = {k: v for k, v in options.items() if k not in NOT_GLOBAL}
    model = keywords.pop("workload_model", None)
    if model is not None:
        keywords["workloads"] = WorkloadModel.parse(model).workloads(step)
    try:
        _, micro = plan_global_batch(step, DP, cap, **keywords)
    except ValueError:
        return None
    return len(micro[0])


def verl_counts_oracle(ranks: list[list[int]], options: dict[str, Any], cap: int = CAP) -> list[int] | None:
    """verl 0.9.1's rule: from ceil(total / cap) (at most the groups, raised to the floor,
    rounded up to the divisor) by the divisor until Karmarkar-Karp on the groups' workloads
    fits every part; with agreement every rank moves from the largest start together."""
    size = options.get("force_group_size", 1)
    step = options.get("num_batches_divided_by") or 1
    floor = options.get("min_num_micro_batch") or 1
    groups = [[sum(r[g : g + size]) for g in range(0, len(r), size)] for r in ranks]
    loads = [[sum(workload(s) for s in r[g : g + size]) for g in range(0, len(r), size)] for r in ranks]
    if any(max(g) > cap for g in groups):
        return None

    def start(sizes: list[int]) -> int:
        return -(-max(min(len(sizes), -(-sum(sizes) // cap)), floor) // step) * step

    def fits(r: int, count: int) -> bool:
        return all(sum(groups[r][i] for i in part) <= cap
                   for part in model_karmarkar_karp(loads[r], count, False))

    counts = []
    for r in range(len(ranks)):
        count = start(groups[r])
        while count <= len(groups[r]) and not fits(r, count):
            count += step
        counts.append(count)
    if not options.get("same_micro_num_in_dp", True):
        return None if any(c > len(g) for c, g in zip(counts, groups, strict=True)) else counts
    count = max(start(g) for g in groups)
    while count <= min(len(g) for g in groups) and not all(fits(r, count) for r in range(len(ranks))):
        count += step
    return None if count > min(len(g) for g in groups) else [count] * len(ranks)


#: Each option's flag as the header names it.
FLAGS = {"equal_rows_per_micro_batch": "--equal-rows-per-micro-batch", "over_cap": "--over-cap",
         "max_samples_per_micro_batch": "--max-samples-per-micro-batch",
         "pad_to_multiple_of": "--pad-to-multiple-of", "micro_batch_multiple_of": "--micro-batch-multiple-of",
         "min_num_micro_batch": "--min-num-micro-batch", "num_batches_divided_by": "--num-batches-divided-by",
         "force_group_size": "--force-group-size", "padded": "--padded",
         "workload_model": "--workload-model", "micro_batch_fixed_tokens": "--micro-batch-fixed-tokens",
         "use_dynamic_bsz_balance": "--no-dynamic-bsz-balance",
         "same_micro_num_in_dp": "--no-same-micro-num-in-dp", "dummy_micro_batches": "--dummy-micro-batches"}

GLOBAL_HEAD = "options not applied to the global planner (plan_global_batch refuses them): "
VERL_HEAD = "options not applied to verl's count (verl 0.9.1's own rule has none of the library's options): "


def header_checks(out: str, options: dict[str, Any], global_shown: bool, verl_shown: bool = True) -> None:
    """The header names, for each column, exactly the options given that it lacks."""
    for head, lacks, shown in ((GLOBAL_HEAD, [FLAGS[k] for k in options if k in NOT_GLOBAL], global_shown),
                               (VERL_HEAD, [FLAGS[k] for k in options if k not in VERL], verl_shown)):
        found = [line[len(head):] for line in out.splitlines() if line.startswith(head)]
        if not (shown and lacks):
            assert found == [], (head, found)
            continue
        assert len(found) == 1, (head, out)
        assert sorted(found[0].split(", ")) == sorted(lacks)


STEP_FLAGS = ["--dp-size", str(DP), "--max-token-len", str(CAP), "--trainer", "main_ppo_v0",
              "--no-balance-batch", "--compare-verl"]


@pytest.mark.parametrize("case", list(CASES))
def test_plan_and_sweep_count_every_column_with_the_option(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags, options = CASES[case]
    path = lengths_file(tmp_path, LENGTHS)
    ranks = [LENGTHS[:12], LENGTHS[12:]]  # main_ppo_v0 unbalanced: equal contiguous chunks
    library = library_counts(ranks, options)
    whole = global_count(LENGTHS, options)
    verl = verl_counts_oracle(ranks, {k: v for k, v in options.items() if k in VERL})
    result = run_json(capsys, "plan", "--lengths", path, *STEP_FLAGS, *flags)
    assert [r["count"] for r in result["ranks"]] == library, case
    assert result["step_time"]["global"]["count"] == whole, case
    assert result["verl"]["counts"] == verl, case
    code, out, err = run(capsys, "plan", "--lengths", path, *STEP_FLAGS, *flags)
    assert code == 0, err
    header_checks(out, options, global_shown=True)
    result = run_json(capsys, "sweep", "--lengths", path, *STEP_FLAGS, *flags)
    (row,) = result["rows"]
    assert row["micro_batches_per_rank"] == library and row["verl"]["counts"] == verl, case
    code, out, err = run(capsys, "sweep", "--lengths", path, *STEP_FLAGS, *flags)
    assert code == 0, err
    header_checks(out, options, global_shown=False)


def test_a_sample_over_the_cap_runs_alone_per_rank_and_in_the_global_planner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--over-cap alone with a sample over the cap: the library and the global planner run
    it alone (plan_global_batch without the option raises); verl's rule raises."""
    lengths = [*LENGTHS[:3], 520, *LENGTHS[4:]]
    path = lengths_file(tmp_path, lengths)
    ranks = [lengths[:12], lengths[12:]]
    result = run_json(capsys, "plan", "--lengths", path, *STEP_FLAGS, "--over-cap", "alone")
    assert [r["count"] for r in result["ranks"]] == library_counts(ranks, {"over_cap": "alone"})
    with pytest.raises(ValueError, match="exceeds max_token_len"):
        plan_global_batch(lengths, DP, CAP)
    model = result["step_time"]["global"]
    _, micro = plan_global_batch(lengths, DP, CAP, over_cap="alone")
    assert model["count"] == len(micro[0])
    assert max(sum(lengths[i] for i in part) for part in micro[0] + micro[1] if len(part) > 1) <= CAP
    assert result["verl"]["counts"] is None and verl_counts_oracle(ranks, {}) is None
    code, out, err = run(capsys, "plan", "--lengths", path, *STEP_FLAGS, "--over-cap", "alone")
    assert code == 0, err
    header_checks(out, {"over_cap": "alone"}, global_shown=True)


@pytest.mark.torch
def test_epoch_counts_every_column_with_each_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``epoch`` on one step of all 24 rows (sft_trainer_ray, not balanced: the sampler's
    order cut in two contiguous chunks): the library's, the global planner's and verl's count
    under each option equal the oracles'."""
    import torch

    path = lengths_file(tmp_path, LENGTHS)
    order = torch.randperm(len(LENGTHS), generator=torch.Generator().manual_seed(0)).tolist()
    step = [LENGTHS[i] for i in order]
    ranks = [step[:12], step[12:]]
    for case, (flags, options) in CASES.items():
        cap = 720 if case == "force groups" else CAP  # the shuffle pairs 380 with 330
        argv = ["epoch", "--lengths", path, "--trainer", "sft_trainer_ray", "--no-balance-batch",
                "--dp-size", str(DP), "--global-batch-size", "24", "--max-token-len", str(cap),
                "--compare-verl", *flags]
        result = run_json(capsys, *argv)
        (only,) = result["caps"][0]["steps"]
        assert only["micro_batches"] == max(library_counts(ranks, options, cap)), case
        assert only["global_micro_batches"] == global_count(step, options, cap), case
        verl = verl_counts_oracle(ranks, {k: v for k, v in options.items() if k in VERL}, cap)
        assert only["verl_micro_batches"] == (None if verl is None else max(verl)), case
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        header_checks(out, options, global_shown=True)


def test_docs_cli_md_shows_the_header_lines_a_run_prints(capsys: pytest.CaptureFixture[str]) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    code, out, err = run(capsys, "plan", "--compare-verl", "--equal-rows-per-micro-batch", "--over-cap",
                         "alone", "--dp-size", "2", "--batch-size", "16")
    assert code == 0, err
    shown = [line for line in out.splitlines() if line.startswith("options not applied to ")]
    assert len(shown) == 1 and all(f"\n{line}\n" in page for line in shown)
