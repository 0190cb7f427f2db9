"""The command line's ``--prefix-lengths FILE`` (issue 47, item 3, the CLI included).

One prefix length per row of ``--lengths``: the prefixes follow their rows through
``--scale``, ``--truncate``, the trainer's dealing and the groups, and a micro-batch holds
each group's prefix once. The oracle here spells the rule out on the input file itself
(nothing of the library's): the rows and prefixes scaled (halves up) and clipped, a
micro-batch's tokens the rows' tokens beyond the prefix plus one prefix per group present,
a group that fits the cap whole (so the fewest micro-batches of a rank is the fewest bins of
its groups, by brute force over every set partition), a group over the cap cut by first-fit
decreasing into parts that each pay the prefix.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import lengths_file, run, run_json
from oracles import brute_force_optimum

GROUP = 4  # responses per prompt


def grpo_rows(groups: int, seed: int) -> tuple[list[int], list[int]]:
    """``groups`` prompts of distinct lengths, ``GROUP`` responses each, as file rows:
    each row is its prompt plus its response, and its prefix is the prompt."""
    rng = random.Random(seed)
    lengths, prefixes = [], []
    for g in range(groups):
        prompt = 150 + 23 * g
        for _ in range(GROUP):
            lengths.append(prompt + rng.randint(10, 120))
            prefixes.append(prompt)
    return lengths, prefixes


def files(tmp_path: Path, lengths: list[int], prefixes: list[Any], text: str | None = None) -> list[str]:
    path = tmp_path / "prefixes.txt"
    path.write_text(text if text is not None else "".join(f"{p}\n" for p in prefixes), encoding="utf-8")
    return ["--lengths", lengths_file(tmp_path, lengths), "--prefix-lengths", str(path)]


def held(block: list[int], lengths: list[int], prefixes: list[int]) -> int:
    """The rule: tokens beyond the prefix, plus one prefix per group (file group) present."""
    present = {i // GROUP: prefixes[i] for i in block}
    return sum(lengths[i] - prefixes[i] for i in block) + sum(present.values())


def scaled(values: list[int], x: float) -> list[int]:
    return [math.floor(v * x + 0.5) for v in values]


def micro_batches(result: dict[str, Any]) -> list[list[list[int]]]:
    return [[mb["indices"] for mb in rank["micro_batches"]] for rank in result["ranks"]]


@pytest.mark.parametrize("trainer", ["main_ppo", "main_ppo_v0"])
@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_prefixes_follow_their_rows_through_scale_and_deal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trainer: str, scale: float
) -> None:
    rows, prompts = grpo_rows(8, seed=int(scale * 10))
    cap = int(1000 * scale)  # every group fits whole (at most 311 + 4 x 120), none in full
    result = run_json(capsys, "plan", *files(tmp_path, rows, prompts), "--force-group-size", str(GROUP),
                      "--dp-size", "2", "--max-token-len", str(cap), "--trainer", trainer,
                      "--scale", str(scale), "--compare-verl")
    lengths, prefixes = scaled(rows, scale), scaled(prompts, scale)
    assert result["prefix_lengths"].endswith("prefixes.txt")
    plans = micro_batches(result)
    counts = []
    for rank, plan in zip(result["ranks"], plans, strict=True):
        mine = sorted(i for mb in plan for i in mb)
        groups = sorted({i // GROUP for i in mine})
        assert mine == [i for g in groups for i in range(g * GROUP, (g + 1) * GROUP)]  # whole groups
        for mb, shown in zip(plan, rank["micro_batches"], strict=True):
            assert len({i // GROUP for i in mb}) * GROUP == len(mb)  # a group fits: it lands whole
            assert shown["tokens"] == held(mb, lengths, prefixes) <= cap
        assert rank["tokens"] == sum(held(mb, lengths, prefixes) for mb in plan)
        counts.append(brute_force_optimum([held(list(range(g * GROUP, (g + 1) * GROUP)), lengths, prefixes)
                                           for g in groups], cap))
    assert result["agreed_count"] == max(counts)
    assert all(len(plan) == max(counts) for plan in plans)
    # verl counts every prompt in full: a group costs its rows summed, over the cap here
    assert result["verl"]["counts"] is None and "exceeds max_token_len" in result["verl"]["error"]


def ffd_parts(rows: list[int], prefix: int, cap: int) -> list[list[int]]:
    """A group over the cap cut as docs/prefix.md says: most tokens beyond the prefix first
    (ties: the lower row), each into the first part that still holds it, else a new part
    that pays the prefix."""
    parts: list[list[int]] = []
    for i in sorted(range(len(rows)), key=lambda i: (-(rows[i] - prefix), i)):
        fit = next((p for p in parts if prefix + sum(rows[j] - prefix for j in [*p, i]) <= cap), None)
        if fit is None:
            parts.append([i])
        else:
            fit.append(i)
    return parts


def test_a_group_over_the_cap_is_cut_into_parts_that_each_pay_the_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [600, 600, 600, 600, 650, 650, 650, 650, 500, 500, 520, 520]
    prompts = [400] * 4 + [450] * 4 + [300] * 4
    base = ["plan", *files(tmp_path, rows, prompts), "--force-group-size", "4", "--dp-size", "1"]
    result = run_json(capsys, *base, "--max-token-len", "1000")
    parts = [[g * GROUP + i for i in part]
             for g in range(3)
             for part in ffd_parts(rows[g * GROUP:(g + 1) * GROUP], prompts[g * GROUP], 1000)]
    assert len(parts) == 6  # 2 parts a group: 1,200, 1,250 and 1,140 tokens with each prompt once
    sizes = [held(p, rows, prompts) for p in parts]
    (plan,) = micro_batches(result)
    assert len(plan) == brute_force_optimum(sizes, 1000) == 6
    assert sorted(map(sorted, plan)) == sorted(map(sorted, parts))
    assert result["ranks"][0]["tokens"] == sum(sizes) and result["largest_micro_batch"] == max(sizes) <= 1000
    code, out, _ = run(capsys, *base, "--max-token-len", "1000")
    assert code == 0 and (f"shared prompts (--prefix-lengths {tmp_path / 'prefixes.txt'}): a micro-batch "
                          "holds each group's prefix once") in out
    assert "step time not modeled" in out and "options not applied to the global planner" not in out


def test_truncate_clips_a_prefix_as_its_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [700, 520, 510, 505, 300, 320, 310, 330]
    prompts = [480] * 4 + [250] * 4
    result = run_json(capsys, "plan", *files(tmp_path, rows, prompts), "--force-group-size", "4",
                      "--dp-size", "1", "--max-token-len", "600", "--truncate")
    clipped = [min(n, 600) for n in rows]  # the prefixes, at most 600, stay as they are
    assert result["truncated"] == 1
    (plan,) = micro_batches(result)
    for mb in plan:
        assert held(mb, clipped, prompts) <= 600
    # group 0: 480 + 120 + 40 + 30 + 25 = 695 over the cap, cut in two; group 1: 250 + 4 x 50-80 = 510
    expected = [held([g * 4 + i for i in part], clipped, prompts)
                for g in range(2) for part in ffd_parts(clipped[g * 4:(g + 1) * 4], prompts[g * 4], 600)]
    assert len(plan) == brute_force_optimum(expected, 600) == 3
    assert sorted(mb["tokens"] for mb in result["ranks"][0]["micro_batches"]) == sorted(expected)


def test_sweep_plans_every_cap_with_the_prefixes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows, prompts = grpo_rows(6, seed=3)
    args = [*files(tmp_path, rows, prompts), "--force-group-size", "4", "--dp-size", "2"]
    sweep = run_json(capsys, "sweep", *args, "--max-token-len", "900,1500")
    assert [row["max_token_len"] for row in sweep["rows"]] == [900, 1500]
    for row in sweep["rows"]:
        plan = run_json(capsys, "plan", *args, "--max-token-len", str(row["max_token_len"]))
        assert row["agreed_count"] == plan["agreed_count"] >= 1
        shown = [[mb["tokens"] for mb in rank["micro_batches"]] for rank in plan["ranks"]]
        assert row["micro_batch_tokens"] == shown
    # each row alone is the most a part must hold: the longest row, not the costliest group
    code, out, _ = run(capsys, "sweep", *args, "--max-token-len", "500,900")
    assert code == 0 and f"smallest max_token_len that fits every sample and group: {max(rows)} " in out
    code, out, _ = run(capsys, "sweep", *args[:2], "--force-group-size", "4", "--dp-size", "2",
                       "--max-token-len", "500,900")
    assert f"fits every sample and group: {max(sum(rows[g:g + 4]) for g in range(0, len(rows), 4))} " in out


def test_group_sizes_take_prefixes_where_the_deal_keeps_the_file_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, prompts = grpo_rows(4, seed=5)
    args = ["plan", *files(tmp_path, rows, prompts), "--group-sizes", "4", "--dp-size", "2",
            "--max-token-len", "700"]
    result = run_json(capsys, *args, "--trainer", "main_ppo_v0", "--no-balance-batch")
    for rank, plan in zip(result["ranks"], micro_batches(result), strict=True):
        assert [mb["tokens"] for mb in rank["micro_batches"]] == [held(mb, rows, prompts) for mb in plan]
        assert all(len(mb) == GROUP for mb in plan)  # a group of 4 lands whole
    # one sft_trainer rank takes the rows in order; the sample limit cuts a group as the cap does
    limited = run_json(capsys, *args[:-4], "--dp-size", "1", "--max-token-len", "700",
                       "--trainer", "sft_trainer", "--max-samples-per-micro-batch", "2")
    (plan,) = micro_batches(limited)
    assert max(map(len, plan)) == 2 and len(plan) == 8  # 16 rows, 2 a micro-batch
    shown = [mb["tokens"] for mb in limited["ranks"][0]["micro_batches"]]
    assert shown == [held(mb, rows, prompts) for mb in plan]
    # a deal that does not keep the file's order would put rows of two prompts in one group
    # (equal prefix lengths would not tell): refused before any planning
    for trainer, deal in (("sft_trainer", "gives a rank every dp-th row"), ("main_ppo", "balances the step"),
                          ("main_ppo_v0", "balances the step")):
        code, _, err = run(capsys, *args, "--trainer", trainer)
        assert code == 2 and f"as dealt, and {trainer}'s deal {deal}" in err, err


@pytest.mark.parametrize(("extra", "prefixes", "words"), [
    ([], None, "--prefix-lengths: a prefix is shared by the rows of a group; pass --force-group-size N"),
    (["--force-group-size", "4", "--batch-size", "4"], None, "a random draw takes rows away"),
    (["--force-group-size", "4", "--padded"], None, "--prefix-lengths and --padded"),
    (["--force-group-size", "4"], [1] * 7, "prefix_lengths has 7 entries but the batch has 8 samples"),
    (["--force-group-size", "4"], [1] * 7 + [999], "(rows counted from 0, groups of --force-group-size 4): "
     "prefix_lengths[7] is 999 but sample 7 has 300 tokens"),
    (["--force-group-size", "4"], "{\"p\": 3}\n", "looks like JSON Lines; write one prefix length per line"),
    (["--force-group-size", "4"], [1] * 7 + [-1], "length -1 is negative"),
])
def test_what_the_prefixes_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], prefixes: Any, words: str
) -> None:
    rows = [300] * 8
    text = prefixes if isinstance(prefixes, str) else None
    given = [100] * 8 if prefixes is None else prefixes
    code, _, err = run(capsys, "plan", *files(tmp_path, rows, given, text), "--dp-size", "1", *extra)
    assert code == 2 and words in err, err


def test_prefixes_need_the_rows_they_belong_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.txt").write_text(json.dumps([1, 2]), encoding="utf-8")
    code, _, err = run(capsys, "plan", "--prefix-lengths", str(tmp_path / "p.txt"), "--force-group-size", "2")
    assert code == 2 and "pass --lengths too" in err
    code, _, err = run(capsys, "epoch", "--trainer", "sft_trainer",
                       "--prefix-lengths", str(tmp_path / "p.txt"))
    assert code == 2 and "unrecognized arguments: --prefix-lengths" in err


def test_prefixes_of_nothing_plan_as_the_groups_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Prefixes of 0 share nothing: the plan is the one ``--force-group-size`` gives alone
    (``force_group_size=g`` is ``group_ids=[i // g ...]``), micro-batch by micro-batch."""
    rows, _ = grpo_rows(12, seed=7)
    args = ["--force-group-size", "4", "--dp-size", "3", "--max-token-len", "1900", "--trainer", "main_ppo"]
    shared = run_json(capsys, "plan", *files(tmp_path, rows, [0] * len(rows)), *args)
    alone = run_json(capsys, "plan", "--lengths", lengths_file(tmp_path, rows), *args)
    assert micro_batches(shared) == micro_batches(alone)
    assert [r["tokens"] for r in shared["ranks"]] == [r["tokens"] for r in alone["ranks"]]


def test_a_rank_that_would_split_a_group_is_refused_as_without_prefixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """12 rows in groups of 4 on 2 ranks: 6 rows a rank cut group 1 in two. verl's rule
    (force_group_size must divide the rank's batch) refuses it, prefixes or not."""
    rows = list(range(100, 112))
    args = ["--force-group-size", "4", "--dp-size", "2", "--max-token-len", "300", "--trainer", "main_ppo_v0"]
    code, _, err = run(capsys, "plan", *files(tmp_path, rows, [50] * 12), *args)
    assert code == 1 and "batch size 6 is not divisible by force_group_size=4" in err
    code, _, without = run(capsys, "plan", "--lengths", lengths_file(tmp_path, rows), *args)
    assert code == 1 and "batch size 6 is not divisible by force_group_size=4" in without


def test_a_group_with_two_prefixes_is_refused_naming_its_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, prompts = grpo_rows(4, seed=2)
    prompts[13] += 1  # row 14 in group 4 (rows 13-16)
    code, _, err = run(capsys, "plan", *files(tmp_path, rows, prompts), "--force-group-size", "4",
                       "--dp-size", "2")
    assert code == 2 and (f"group 3 has prefix_lengths {prompts[12]} (sample 12) and {prompts[13]} "
                          "(sample 13); the samples of a group share one prefix") in err


def test_the_prefix_file_is_named_in_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = lengths_file(tmp_path, [300] * 4)
    base = ["plan", "--lengths", rows, "--force-group-size", "4", "--dp-size", "1"]
    code, _, err = run(capsys, *base, "--prefix-lengths", str(tmp_path / "missing.txt"))
    assert code == 2 and f"cannot read --prefix-lengths file '{tmp_path / 'missing.txt'}'" in err
    (tmp_path / "p.parquet").write_bytes(b"PAR1" + bytes(20))
    code, _, err = run(capsys, *base, "--prefix-lengths", str(tmp_path / "p.parquet"))
    assert code == 2 and "is Parquet, which --prefix-lengths does not read; write one prefix length" in err
    code, _, err = run(capsys, "plan", "--lengths", "-", "--prefix-lengths", "-", "--force-group-size", "4")
    assert code == 2 and "--lengths and --prefix-lengths both read stdin; give one of them a file" in err
