"""The command line as verl's trainer runs a step: a whole file dealt to the ranks,
trainer.balance_batch, --sp-size, --compare-verl, and the report (JSON counts, help, plurals).

Issue 11, cases 1-3 are here; cases 4-6 (Parquet, tokenizer, missing extras) in
tests/cli/test_cli_data.py.
"""

from __future__ import annotations

import importlib.util
import io
import math
import random
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run, run_json
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.planning.partition import karmarkar_karp, workload

CHAMP = load_champ_lengths()


def write_lines(path: Path, values: list[int]) -> str:
    path.write_text("".join(f"{v}\n" for v in values), encoding="utf-8")
    return str(path)


def verl_model(per_rank: list[list[int]], cap: int, agree: bool = True) -> list[int] | None:
    """verl 0.9.1's count loop, literally: start at min(n, ceil(total / cap)), MAX over ranks
    when agreeing, Karmarkar-Karp on workloads, +1 until every rank's parts fit."""

    def fits(lens: list[int], k: int) -> bool:
        parts = karmarkar_karp([workload(s) for s in lens], k, equal_size=False)
        return all(sum(lens[i] for i in p) <= cap for p in parts)

    def search(ranks: list[list[int]], k: int) -> int | None:
        while k <= min(len(r) for r in ranks):
            if all(fits(r, k) for r in ranks):
                return k
            k += 1
        return None

    starts = [min(len(r), math.ceil(sum(r) / cap)) for r in per_rank]
    if agree:
        k = search(per_rank, max(starts))
        return None if k is None else [k] * len(per_rank)
    counts = [search([r], s) for r, s in zip(per_rank, starts, strict=True)]
    return None if None in counts else [c for c in counts if c is not None]


def rank_lengths(result: dict[str, Any], lengths: list[int]) -> list[list[int]]:
    return [[lengths[i] for mb in r["micro_batches"] for i in mb["indices"]] for r in result["ranks"]]


# --------------------------------------------------------------------------- case 1: a file alone


def test_case1_a_file_alone_plans_the_whole_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = [5, 5, 5, 5, 5, 5, 5, 40]
    path = write_lines(tmp_path / "eight.txt", lengths)
    code, out, err = run(capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", "40")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(
        f"2 DP ranks x 4 samples from {path} (8 lengths; all 8 rows once, in file order)"
    )
    result = run_json(capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", "40")
    assert (result["sampling"], result["dp_size"], result["batch_size"]) == ("whole_file", 2, 4)
    assert [r["samples"] for r in result["ranks"]] == [4, 4]
    used = sorted(i for r in result["ranks"] for mb in r["micro_batches"] for i in mb["indices"])
    assert used == list(range(8))  # every row once
    # balanced as verl's trainer: the 40-token row shares its rank with three 5s; 55 tokens
    # at cap 40 need 2 micro-batches, and the ranks agree on 2
    assert sorted(r["tokens"] for r in result["ranks"]) == [20, 55]
    assert [r["count"] for r in result["ranks"]] == [2, 2]
    # without balancing, verl's dispatch: contiguous chunks in file order
    plain = run_json(
        capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", "40", "--no-balance-batch",
        "--trainer", "main_ppo_v0",
    )
    assert [sorted(i for mb in r["micro_batches"] for i in mb["indices"]) for r in plain["ranks"]] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
    ]


def test_case1_a_remainder_is_an_error_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_lines(tmp_path / "nine.txt", [5] * 9)
    code, out, err = run(capsys, "plan", "--lengths", path, "--dp-size", "2", "--max-token-len", "40",
                         "--trainer", "main_ppo_v0")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "holds 9 rows, not divisible by --dp-size 2" in err
    assert "drop 1 (keep 8)" in err
    assert "a --dp-size that divides 9 (3, 9)" in err
    # with --batch-size the file is drawn from, as before
    assert run(capsys, "plan", "--lengths", path, "--dp-size", "2", "--batch-size", "4")[0] == 0


def test_fewer_rows_than_ranks_never_advises_keeping_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_lines(tmp_path / "two.txt", [5, 5])
    code, out, err = run(capsys, "plan", "--lengths", path, "--dp-size", "8", "--max-token-len", "40",
                         "--trainer", "main_ppo_v0")
    assert code == 2 and out == ""
    assert "holds 2 rows, not divisible by --dp-size 8" in err
    assert "keep" not in err
    assert "a --dp-size that divides 2 (2)" in err


def test_parquet_on_stdin_is_told_from_its_bytes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 25: stdin is read once, whole, and its bytes say Parquet (this one is broken)
    import importlib.util

    monkeypatch.setattr("sys.stdin", io.StringIO("PAR1\x00\x15binary"))
    code, out, err = run(capsys, "plan", "--lengths", "-", "--field", "n")
    assert code == 2 and out == ""
    if importlib.util.find_spec("pyarrow") is None:
        assert "reading Parquet needs pyarrow" in err
    else:
        assert "cannot read Parquet file '<stdin>'" in err


# --------------------------------------------------------------------------- case 2: --compare-verl


def test_case2_verl_count_is_never_below_ours_on_the_bundled_data(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "plan", "--compare-verl")
    verl = [r["verl_count"] for r in result["ranks"]]
    ours = [r["count"] for r in result["ranks"]]
    assert all(v >= o for v, o in zip(verl, ours, strict=True))
    # ... and it is verl's rule, as modelled in this test, on the very same per-rank lengths
    assert verl == verl_model(rank_lengths(result, CHAMP), 16384)
    summary = result["verl"]
    assert summary["counts"] == verl
    assert summary["total_micro_batches"] == sum(verl)
    assert summary["saved_micro_batches"] == sum(verl) - result["total_micro_batches"]
    assert summary["saved_percent"] == pytest.approx(
        100 * summary["saved_micro_batches"] / sum(verl), abs=1e-3
    )
    code, out, _ = run(capsys, "plan", "--compare-verl")
    assert code == 0
    header = next(line for line in out.splitlines() if line.lstrip().startswith("rank"))
    assert header.split()[-3:] == ["verl", "count", "saved"]
    saved = summary["saved_micro_batches"]
    assert next(line for line in out.splitlines() if line.startswith("verl 0.9.1's rule")) == (
        f"verl 0.9.1's rule: {verl[0]} micro-batches per rank, total {sum(verl)}; this library saves "
        f"{saved} micro-batches ({100 * saved / sum(verl):.1f}%)"
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_compare_verl_without_agreement_and_other_caps(seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--compare-verl", "--seed", str(seed), "--dp-size", "4", "--batch-size", "64"]
    for extra, agree in (([], True), (["--no-same-micro-num-in-dp"], False)):
        result = run_json(capsys, *argv, "--max-token-len", "8192", "--truncate", *extra)
        per_rank = rank_lengths(result, [min(n, 8192) for n in CHAMP])
        assert [r["verl_count"] for r in result["ranks"]] == verl_model(per_rank, 8192, agree)
        assert all(r["verl_count"] >= r["count"] for r in result["ranks"])


@pytest.mark.slow
def test_compare_verl_in_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "sweep", "--compare-verl", "--max-token-len", "16384,32768")
    for row in result["rows"]:
        plan = run_json(capsys, "plan", "--compare-verl", "--max-token-len", str(row["max_token_len"]))
        assert row["verl"] == plan["verl"]
        assert row["step_time"] == plan["step_time"]  # the lock-step model, three ways
    code, out, _ = run(capsys, "sweep", "--compare-verl", "--max-token-len", "16384,32768")
    assert code == 0
    lines = out.splitlines()
    assert "verl count/rank" in lines[2] and "saved" in lines[2].split()
    first = result["rows"][0]["verl"]
    assert f"{first['saved_micro_batches']} ({first['saved_percent']:.1f}%)" in lines[3]


def test_verl_search_limit_is_reported_not_waited_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 + 3 + 3 + 3 + 2 at cap 6: ceil(14 / 6) = 3, L2 = 3; Karmarkar-Karp on workloads puts
    # 3+3 | 3+2 | 3 at k = 3 (fits: 6, 5, 3), so verl needs 1 round; at cap 5 it needs more.
    path = write_lines(tmp_path / "l.txt", [3, 3, 3, 3, 2])
    result = run_json(
        capsys, "plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "5", "--compare-verl"
    )
    assert result["verl"]["counts"] == verl_model([[3, 3, 3, 3, 2]], 5) == [4]
    limited = run_json(
        capsys, "plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "5", "--compare-verl",
        "--verl-max-tries", "1",
    )  # fmt: skip
    # L2 at cap 5 is 4 (four 3s cannot share), so the single round tries 4, which fits
    assert limited["verl"]["counts"] == [4]
    lengths = [2] * 9 + [3] * 6  # ceil(36 / 6) = 6 = L2 (= ours); KK on workloads misses 6
    path = write_lines(tmp_path / "m.txt", lengths)
    assert verl_model([lengths], 6) == [7]
    argv = ["plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "6", "--compare-verl"]
    assert run_json(capsys, *argv)["verl"]["counts"] == [7]
    limited = run_json(capsys, *argv, "--verl-max-tries", "1")
    assert limited["verl"]["counts"] is None
    assert limited["verl"]["count_above"] == 6
    assert limited["ranks"][0]["verl_count"] is None
    code, out, _ = run(capsys, *argv, "--verl-max-tries", "1")
    assert code == 0
    assert out.splitlines()[3].split()[-2:] == [">6", "-"]
    assert "count above 6 (search stopped; raise --verl-max-tries)" in out


# --------------------------------------------------------------------------- case 3: balance_batch


def test_case3_balancing_never_raises_the_agreed_count(capsys: pytest.CaptureFixture[str]) -> None:
    on = run_json(capsys, "plan")
    off = run_json(capsys, "plan", "--no-balance-batch", "--trainer", "main_ppo_v0")
    assert (on["balance_batch"], off["balance_batch"]) == (True, False)
    assert on["agreed_count"] <= off["agreed_count"]

    # the same rows, only dealt differently; every rank keeps 256 samples
    def rows(result: dict[str, Any]) -> list[int]:
        return sorted(i for r in result["ranks"] for mb in r["micro_batches"] for i in mb["indices"])

    assert rows(on) == rows(off)
    assert {r["samples"] for r in on["ranks"]} == {256}

    # balancing evens the ranks' workloads (verl's cost model)
    def spread(result: dict[str, Any]) -> int:
        loads = [sum(workload(n) for n in lens) for lens in rank_lengths(result, CHAMP)]
        return max(loads) - min(loads)

    assert spread(on) * 10 < spread(off)


def test_balancing_keeps_forced_groups_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(4)
    lengths = [rng.randint(1, 600) for _ in range(48)]
    path = write_lines(tmp_path / "l.txt", lengths)
    argv = ["plan", "--lengths", path, "--dp-size", "4", "--max-token-len", "2000", "--force-group-size", "3"]
    result = run_json(capsys, *argv)
    for rank in result["ranks"]:
        indices = sorted(i for mb in rank["micro_batches"] for i in mb["indices"])
        groups = {i // 3 for i in indices}
        assert indices == sorted(3 * g + j for g in groups for j in range(3))  # whole groups
        assert len(groups) == 4  # 16 groups, 4 per rank: equal sample counts
    _, out, _ = run(capsys, *argv)
    assert "Karmarkar-Karp on workload, groups of 3 rows kept whole" in out.splitlines()[1]


# --------------------------------------------------------------------------- --sp-size


@pytest.mark.slow
def test_sp_size_multiplies_the_cap(capsys: pytest.CaptureFixture[str]) -> None:
    sp = run_json(capsys, "plan", "--max-token-len", "8192", "--sp-size", "2")
    assert (sp["max_token_len"], sp["sp_size"], sp["cap"]) == (8192, 2, 16384)
    same = run_json(capsys, "plan", "--max-token-len", "16384")
    assert sp["ranks"] == same["ranks"]
    assert max(r["largest_micro_batch"] for r in sp["ranks"]) <= 16384
    code, out, _ = run(capsys, "plan", "--max-token-len", "8192", "--sp-size", "2")
    assert code == 0
    assert "max_token_len 8192 x sp_size 2 = cap 16384 tokens per micro-batch" in out.splitlines()[0]
    sweep = run_json(capsys, "sweep", "--max-token-len", "4096,8192", "--sp-size", "2")
    assert [(r["max_token_len"], r["cap"]) for r in sweep["rows"]] == [(4096, 8192), (8192, 16384)]
    code, out, _ = run(capsys, "sweep", "--max-token-len", "4096,8192", "--sp-size", "2")
    assert out.splitlines()[2].split()[:3] == ["max_token_len", "cap", "count/rank"]
    assert out.splitlines()[3].split()[:2] == ["4096", "8192"]


# --------------------------------------------------------------------------- output


def test_help_explains_every_column(capsys: pytest.CaptureFixture[str]) -> None:
    from seqlen_balancing.cli.report import PLAN_COLUMNS, SWEEP_COLUMNS

    for command, columns in (("plan", PLAN_COLUMNS), ("sweep", SWEEP_COLUMNS)):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0
        epilog = out[out.index(f"columns of the {command} table:") :]
        for column in columns:
            assert f"  {column.header}  " in epilog.replace(column.header + " ", column.header + "  ", 1)
        fill = (
            "tokens / (micro-batches x cap)"
            if command == "plan"
            else "total tokens / (total micro-batches x cap)"
        )
        for words in ("L2 lower bound", fill, "verl 0.9.1"):
            assert words in " ".join(epilog.split())


def test_singular_and_plural(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_lines(tmp_path / "one.txt", [70])
    code, out, _ = run(capsys, "plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "100")
    assert code == 0
    assert out.startswith(f"1 DP rank x 1 sample from {path} (1 length; all 1 row once, in file order)")
    assert "agreed count 1 micro-batch per rank; total 1 micro-batch (L2 bound 1, lower bound 1: " in out
    code, out, _ = run(
        capsys, "plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "50", "--truncate"
    )
    assert "1 drawn sample over the cap of 50 tokens truncated to the cap" in out
    code, out, err = run(capsys, "plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "50")
    assert code == 1
    assert "1 of the 1 drawn sample exceeds max_token_len=50" in err
    two = write_lines(tmp_path / "two.txt", [70, 70])
    code, out, _ = run(capsys, "plan", "--lengths", two, "--dp-size", "1", "--max-token-len", "100")
    assert "1 DP rank x 2 samples" in out and "agreed count 2 micro-batches per rank" in out


def test_sweep_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "sweep.png"
    code, _, err = run(
        capsys, "sweep", "--plot", str(png), "--dp-size", "2", "--batch-size", "64", "--compare-verl"
    )
    if importlib.util.find_spec("matplotlib") is None:
        assert code == 2 and "seqlen-balancing[plot]" in err and not png.exists()
        return
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {png}" in err


def test_ctrl_c_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("seqlen_balancing.cli.load.load_lengths", interrupted)
    assert run(capsys, "plan") == (130, "", "seqlen-balancing: interrupted\n")


@pytest.mark.parametrize(
    "argv",
    [["--dp-size", "999999999999999999"], ["--batch-size", "999999999999999999"],
     ["--dp-size", "10001", "--batch-size", "1000"]],
)  # fmt: skip
def test_a_huge_drawn_step_is_a_one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, "plan", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "a drawn step holds at most 10,000,000: lower --dp-size or --batch-size" in err
