"""Every option reaches the plan of every subcommand (issue 30, item 2).

The test enumerates the options of :class:`~seqlen_balancing.PlanOptions` and, for each of
``plan``, ``sweep`` and ``epoch``, checks that the option has its flag (both spellings for a
switch) and that giving it changes what the subcommand planned: ``plan``'s micro-batches,
each ``sweep`` row's micro-batch tokens per rank, each ``epoch`` step's micro-batch tokens
per rank. The one option that acts on no plan of lengths, ``loss_weight_keys`` (it names the
tensors a dummy zeroes), must leave the plan alone and be recorded in the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run, run_json
from seqlen_balancing.cli.arguments import build_parser
from seqlen_balancing.cli.results import options_json
from seqlen_balancing.options import OPTIONS, Kind, PlanOptions

# epoch replays torch's DistributedSampler shuffle
pytestmark = [pytest.mark.torch, pytest.mark.no_tensordict]

#: A step of 12 rows dealt to 2 ranks in order (no balancing): rank 0 holds the long rows.
LENGTHS = [900, 850, 700, 640, 300, 120, 40, 35, 30, 25, 20, 10]

#: option: (its flag and value, extra arguments the case needs). ``over_cap``: a row over the
#: cap, which stops the plan without it; ``dummy_micro_batches``: a count rounded above the
#: rows of a rank, which stops the plan without it; ``equal_rows_per_micro_batch``: one rank.
CASES: dict[str, tuple[list[str], list[str]]] = {
    "force_group_size": (["--force-group-size", "2"], []),
    "num_batches_divided_by": (["--num-batches-divided-by", "4"], []),
    "min_num_micro_batch": (["--min-num-micro-batch", "5"], []),
    "same_micro_num_in_dp": (["--no-same-micro-num-in-dp"], []),
    # three micro-batches or more: verl's order (lightest at both ends) is not heaviest first
    "use_dynamic_bsz_balance": (["--no-dynamic-bsz-balance"], ["--min-num-micro-batch", "4"]),
    # the same: heaviest first over verl's order
    "heaviest_first": (["--heaviest-first"], ["--min-num-micro-batch", "4"]),
    "pad_to_multiple_of": (["--pad-to-multiple-of", "512"], []),
    "micro_batch_multiple_of": (["--micro-batch-multiple-of", "1024"], []),
    "padded": (["--padded"], []),
    "max_samples_per_micro_batch": (["--max-samples-per-micro-batch", "2"], []),
    "over_cap": (["--over-cap", "alone"], ["OVER"]),
    "dummy_micro_batches": (["--dummy-micro-batches"], ["--num-batches-divided-by", "8"]),
    "loss_weight_keys": (["--loss-weight-keys", "loss_mask"], []),
    "workload_model": (["--workload-model", "hidden_size=64,num_layers=2"], ["BALANCED"]),
    # one rank of all 12 rows: the plain plan's micro-batches hold different rows
    "equal_rows_per_micro_batch": (["--equal-rows-per-micro-batch"], ["--dp-size", "1"]),
    "micro_batch_fixed_tokens": (["--micro-batch-fixed-tokens", "0"], []),
}

DEFAULTS = options_json(PlanOptions())

#: Options that act on no plan of lengths, and why.
NOT_ON_LENGTHS = {"loss_weight_keys": "it names the tensors a dummy zeroes",
                  "micro_batch_fixed_tokens": "it weighs the lock-step model (plan_global_batch, the "
                  "sampler, the reports), never a rank's plan: every rank plans at the fewest"}


def _files(tmp_path: Path) -> tuple[str, str]:
    plain, over = tmp_path / "lengths.txt", tmp_path / "over.txt"
    plain.write_text("".join(f"{n}\n" for n in LENGTHS), encoding="utf-8")
    over.write_text("".join(f"{n}\n" for n in [2500, *LENGTHS[1:]]), encoding="utf-8")
    return str(plain), str(over)


def _base(command: str, lengths: str, balanced: bool) -> list[str]:
    common = [command, "--lengths", lengths, "--dp-size", "2"]
    if command == "plan":  # the legacy trainer: verl's V1 trainer ignores --no-balance-batch
        args = [*common, "--max-token-len", "2000", "--trainer", "main_ppo_v0"]
    elif command == "sweep":
        args = [*common, "--max-token-len", "2000,3000", "--trainer", "main_ppo_v0"]
    else:
        args = [*common, "--trainer", "sft_trainer_ray", "--global-batch-size", "12",
                "--max-token-len", "2000"]
    # sft_trainer_ray's balance (on by default) is where a workload model acts across ranks
    return args if balanced and command == "epoch" else [*args, "--no-balance-batch"]


def _planned(command: str, result: dict[str, Any]) -> Any:
    if command == "plan":
        return [[mb["indices"] for mb in rank["micro_batches"]] for rank in result["ranks"]]
    if command == "sweep":
        return [row.get("micro_batch_tokens", row.get("error")) for row in result["rows"]]
    return [step["micro_batch_tokens"] for cap in result["caps"] for step in cap["steps"]]


def _outcome(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    code, out, _ = run(capsys, *argv, "--json")
    return json.loads(out) if code == 0 else ("cannot plan", code)


def test_the_cases_cover_every_option() -> None:
    assert list(CASES) == list(OPTIONS)


@pytest.mark.parametrize("command", ["plan", "sweep", "epoch"])
def test_every_option_has_its_flag_in_every_subcommand(command: str) -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a.choices, dict)]
    flags = {flag for action in sub.choices[command]._actions for flag in action.option_strings}
    for name, option in OPTIONS.items():
        assert option.flag in flags, f"{command} lacks {option.flag} ({name})"
        if option.kind is Kind.SWITCH:
            assert "--no-" + option.flag[2:] in flags, f"{command} lacks the off spelling of {name}"


@pytest.mark.parametrize("command", ["plan", "sweep", "epoch"])
@pytest.mark.parametrize("name", list(CASES))
def test_every_option_changes_the_plan_of_every_subcommand(
    command: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flag, extra = CASES[name]
    plain, over = _files(tmp_path)
    base = _base(command, over if "OVER" in extra else plain, "BALANCED" in extra)
    base += [arg for arg in extra if arg not in ("OVER", "BALANCED")]
    without, with_flag = _outcome(capsys, base), _outcome(capsys, [*base, *flag])
    assert isinstance(with_flag, dict), f"{command} {' '.join(flag)} cannot plan: {with_flag}"
    assert with_flag["options"][name] != DEFAULTS[name]  # the option as planned: the flag's
    if name in NOT_ON_LENGTHS:
        assert isinstance(without, dict) and _planned(command, without) == _planned(command, with_flag)
        if name == "loss_weight_keys":
            assert with_flag["options"][name] == ["loss_mask"] and without["options"][name] is None
        elif command == "plan":  # the lock-step report models the step with it
            assert with_flag["step_time"]["micro_batch_fixed_tokens"] == 0.0
            assert without["step_time"]["micro_batch_fixed_tokens"] == DEFAULTS[name]
        return
    assert isinstance(without, tuple) or _planned(command, without) != _planned(command, with_flag), (
        f"{command} {' '.join(flag)} did not change the plan")


def test_epoch_replays_a_sample_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 30: epoch ignored --max-samples-per-micro-batch; 6 rows per rank at most 2 per
    # micro-batch need at least 3 micro-batches, whatever the cap
    plain, _ = _files(tmp_path)
    result = run_json(capsys, "epoch", "--lengths", plain, "--dp-size", "2", "--trainer", "sft_trainer",
                      "--global-batch-size", "12", "--max-token-len", "4000",
                      "--max-samples-per-micro-batch", "2")
    counts = [step["micro_batches"] for step in result["caps"][0]["steps"]]
    assert counts == [3] and result["options"]["max_samples_per_micro_batch"] == 2
    for rank in result["caps"][0]["steps"][0]["micro_batch_tokens"]:
        assert len(rank) == 3
