"""Tests for the ``seqlen-balancing`` command line (``plan`` and ``sweep``).

Every test runs the real CLI: ``main(argv)`` in-process (output captured with capsys) or
``python -m seqlen_balancing`` in a subprocess, on real files written to ``tmp_path``.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import subprocess
import sys
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run
from seqlen_balancing.agreement import plan_data_parallel
from seqlen_balancing.cli import main
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.planning.bounds import l2_lower_bound
from seqlen_balancing.planning.partition import get_seqlen_balanced_partitions

CHAMP = load_champ_lengths()
PLOT_HINT = "pip install 'seqlen-balancing[plot]'"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str, expected_code: int = 0) -> dict[str, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == expected_code, err
    assert out.count("\n") == 1  # one JSON object, one line
    result: dict[str, Any] = json.loads(out)
    return result


def write_lines(path: Path, values: list[Any]) -> str:
    path.write_text("".join(f"{v}\n" for v in values), encoding="utf-8")
    return str(path)


def verl_balanced(lengths: list[int], dp: int, group: int = 1, ends: bool = True) -> list[int]:
    """Model of verl 0.9.1's ``_balance_batch``: the new row order.

    Karmarkar-Karp on workloads ``24576*s + s**2`` into ``dp`` parts of equal size; with
    ``ends`` (the legacy ``RayPPOTrainer``, ``sft_trainer_ray``) each part sorted by workload
    and laid out ``part[::2] + part[1::2][::-1]``, else (the V1 trainer, ``main_ppo``'s
    default) each part as Karmarkar-Karp returns it, in row order. With groups of
    ``group`` rows: the groups are balanced (equal group counts), rows kept in order.
    """
    loads = [24576 * s + s * s for s in lengths]
    if group == 1:
        order: list[int] = []
        for part in get_seqlen_balanced_partitions(loads, dp, equal_size=True):
            if ends:
                part = sorted(part, key=lambda i: (loads[i], i))
                part = part[::2] + part[1::2][::-1]
            order += sorted(part) if not ends else part
        return order
    group_loads = [sum(loads[g : g + group]) for g in range(0, len(loads), group)]
    parts = get_seqlen_balanced_partitions(group_loads, dp, equal_size=True)
    return [g * group + j for part in parts for g in part for j in range(group)]


def dispatched(result: dict[str, Any], lengths: list[int], positions: list[int]) -> list[int]:
    """The step's positions in rank order: balanced as verl's trainer does when it is on."""
    if not result["balance_batch"] or result["dp_size"] == 1:
        return positions
    cap = result["cap"]
    clipped = [min(lengths[p], cap) for p in positions]
    ends = result["trainer"] != "main_ppo"  # the V1 trainer keeps each part in row order
    order = verl_balanced(clipped, result["dp_size"], result["force_group_size"], ends)
    return [positions[i] for i in order]


def check_plan(result: dict[str, Any], lengths: list[int], positions: list[int]) -> None:
    """Strict cap, exact cover of each rank's positions (after verl's balancing when it is
    on), and every derived figure."""
    cap = result["cap"]
    assert cap == result["max_token_len"] * result["sp_size"]
    batch = result["batch_size"]
    positions = dispatched(result, lengths, positions)
    assert len(result["ranks"]) == result["dp_size"]
    total_tokens = 0
    for r, rank in enumerate(result["ranks"]):
        assert rank["rank"] == r
        drawn = positions[r * batch : (r + 1) * batch]
        got = [i for mb in rank["micro_batches"] for i in mb["indices"]]
        assert Counter(got) == Counter(drawn)  # exact cover, positions in the input list
        assert rank["samples"] == batch
        assert rank["count"] == len(rank["micro_batches"])
        rank_lengths = [lengths[i] for i in drawn]
        assert rank["tokens"] == sum(rank_lengths)
        assert rank["l2_lower_bound"] == l2_lower_bound(rank_lengths, cap)
        mb_tokens = []
        for mb in rank["micro_batches"]:
            assert mb["indices"], "empty micro-batch"
            assert mb["tokens"] == sum(lengths[i] for i in mb["indices"])
            assert mb["tokens"] <= cap
            mb_tokens.append(mb["tokens"])
        n = len(rank["micro_batches"])
        assert n >= rank["l2_lower_bound"]
        assert rank["largest_micro_batch"] == max(mb_tokens)
        assert rank["fill"] == pytest.approx(rank["tokens"] / (n * cap), abs=1e-6)
        total_tokens += rank["tokens"]
    counts = [len(rank["micro_batches"]) for rank in result["ranks"]]
    assert result["total_micro_batches"] == sum(counts)
    assert result["agreed_count"] == (counts[0] if len(set(counts)) == 1 else None)
    assert result["mean_fill"] == pytest.approx(total_tokens / (sum(counts) * cap), abs=1e-6)
    assert result["largest_micro_batch"] == max(r["largest_micro_batch"] for r in result["ranks"])
    assert result["l2_lower_bound_total"] == sum(r["l2_lower_bound"] for r in result["ranks"])


# --------------------------------------------------------------------------- plan


def test_default_plan_json_is_the_documented_draw_of_champ(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run_json(capsys, "plan")
    assert result["source"] == "champ"
    assert result["n_lengths"] == len(CHAMP) == 19440
    assert result["sampling"] == "without_replacement"
    assert (result["max_token_len"], result["dp_size"], result["batch_size"]) == (16384, 8, 256)
    assert result["same_micro_num_in_dp"] is True
    assert result["truncated"] == 0
    positions = random.Random(0).sample(range(len(CHAMP)), 8 * 256)
    # what the docs promise: the draw is random.Random(seed).sample(lengths, k)
    assert [CHAMP[p] for p in positions] == random.Random(0).sample(CHAMP, 8 * 256)
    check_plan(result, CHAMP, positions)
    counts = {len(rank["micro_batches"]) for rank in result["ranks"]}
    assert counts == {result["agreed_count"]}
    # the agreed count is the library's: plan_data_parallel on the same per-rank lengths
    assert result["balance_batch"] is True  # verl's trainer default
    positions = dispatched(result, CHAMP, positions)
    per_rank = [[CHAMP[p] for p in positions[r * 256 : (r + 1) * 256]] for r in range(8)]
    library = plan_data_parallel(per_rank, 16384)
    assert [len(p) for p in library] == [result["agreed_count"]] * 8
    # ... and the micro-batches themselves, mapped back to input positions
    for r, plan in enumerate(library):
        mapped = [[positions[r * 256 + i] for i in mb] for mb in plan]
        assert mapped == [mb["indices"] for mb in result["ranks"][r]["micro_batches"]]


def test_default_plan_table_agrees_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "plan")
    code, out, err = run(capsys, "plan")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "8 DP ranks x 256 samples" in lines[0]
    assert "seed 0" in lines[0]
    assert "max_token_len 16384" in lines[0]
    assert "19440 lengths" in lines[0]
    assert lines[1].startswith(
        "step (verl 0.9.1 main_ppo): balanced across DP ranks as verl's V1 trainer does on every step"
    )
    assert lines[2].split() == [
        "rank", "samples", "tokens", "micro-batches", "L2", "bound", "bound", "by", "largest", "mb",
        "fill", "workload", "spread",
    ]  # fmt: skip
    rows = [line.split() for line in lines[3 : 3 + 8]]
    assert lines[3 + 8].startswith("agreed count")
    for row, rank in zip(rows, result["ranks"], strict=True):
        star = "*" if rank["proven_optimal"] else ""
        assert row[:8] == [
            str(rank["rank"]), "256", str(rank["tokens"]), str(len(rank["micro_batches"])),
            str(rank["l2_lower_bound"]), f"{rank['lower_bound']}{star}", rank["bound_name"],
            str(rank["largest_micro_batch"]),
        ]  # fmt: skip
        assert row[8] == f"{100 * rank['fill']:.1f}%"
        assert float(row[9]) == pytest.approx(rank["workload_spread"], abs=5e-4)
    summary = next(line for line in lines if line.startswith("agreed count"))
    assert f"agreed count {result['agreed_count']} micro-batches per rank" in summary
    assert f"total {result['total_micro_batches']} micro-batches" in summary
    assert f"mean fill {100 * result['mean_fill']:.1f}%" in summary


@pytest.mark.slow
def test_subprocess_python_m_plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(7)
    lengths = [rng.randint(0, 3000) for _ in range(300)]
    path = write_lines(tmp_path / "lengths.txt", lengths)
    argv = ["plan", "--lengths", path, "--dp-size", "4", "--batch-size", "50", "--seed", "3",
            "--max-token-len", "4096", "--json"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "seqlen_balancing", *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["source"] == path
    assert result["n_lengths"] == 300
    check_plan(result, lengths, random.Random(3).sample(range(300), 200))
    # the in-process entry point prints the very same bytes (plan --json has no timing)
    assert main(argv) == 0
    assert capsys.readouterr().out == proc.stdout


@pytest.mark.slow
def test_cli_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from seqlen_balancing.cli import main\n"
        "assert main(['sweep', '--dp-size', '2', '--batch-size', '16', '--json']) == 0\n"
        "assert main(['plan', '--dp-size', '2', '--batch-size', '16']) == 0\n"
        "sys.exit(3 if 'torch' in sys.modules else 0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr or "torch was imported"


def test_agreement_on_gives_equal_counts_off_may_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_lines(tmp_path / "two_ranks.txt", [90, 90, 90, 90, 10, 10, 10, 10])
    base = ["plan", "--lengths", path, "--dp-size", "2", "--batch-size", "4", "--in-order",
            "--max-token-len", "100", "--no-balance-batch", "--trainer", "main_ppo_v0"]  # fmt: skip
    on = run_json(capsys, *base)
    off = run_json(capsys, *base, "--no-same-micro-num-in-dp")
    assert on["sampling"] == off["sampling"] == "in_order"
    check_plan(on, [90] * 4 + [10] * 4, list(range(8)))
    check_plan(off, [90] * 4 + [10] * 4, list(range(8)))
    assert [len(r["micro_batches"]) for r in on["ranks"]] == [4, 4]
    assert (on["agreed_count"], on["total_micro_batches"]) == (4, 8)
    assert on["same_micro_num_in_dp"] is True
    assert [len(r["micro_batches"]) for r in off["ranks"]] == [4, 1]
    assert (off["agreed_count"], off["total_micro_batches"]) == (None, 5)
    assert off["same_micro_num_in_dp"] is False
    assert off["mean_fill"] == pytest.approx(400 / 500)
    code, out, _ = run(capsys, *base, "--no-same-micro-num-in-dp")
    assert code == 0
    assert "no agreement (per-rank counts 1-4)" in out


def test_agreed_count_is_the_largest_independent_count(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--seed", "5", "--max-token-len", "12000"]
    on = run_json(capsys, *base)
    off = run_json(capsys, *base, "--no-same-micro-num-in-dp")
    off_counts = [len(r["micro_batches"]) for r in off["ranks"]]
    assert on["agreed_count"] == max(off_counts)
    assert on["total_micro_batches"] == 8 * max(off_counts) >= off["total_micro_batches"]
    positions = random.Random(5).sample(range(len(CHAMP)), 2048)
    check_plan(on, CHAMP, positions)
    check_plan(off, CHAMP, positions)


def test_num_batches_divided_by_and_min_num_micro_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plain = run_json(capsys, "plan")["agreed_count"]
    divided = run_json(capsys, "plan", "--num-batches-divided-by", "5")
    assert divided["num_batches_divided_by"] == 5
    assert divided["agreed_count"] == -(-plain // 5) * 5
    at_least = run_json(capsys, "plan", "--min-num-micro-batch", str(plain + 3))
    assert at_least["agreed_count"] == plain + 3
    check_plan(at_least, CHAMP, random.Random(0).sample(range(len(CHAMP)), 2048))


@pytest.mark.slow
def test_bundled_data_draws_with_replacement_when_too_short(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run_json(
        capsys, "plan", "--dp-size", "2", "--batch-size", "10000", "--max-token-len", "65536"
    )
    assert result["sampling"] == "with_replacement"
    positions = random.Random(0).choices(range(len(CHAMP)), k=20000)
    assert len(set(positions)) < 20000  # some positions repeat
    check_plan(result, CHAMP, positions)


def test_in_order_uses_the_first_lengths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    path = write_lines(tmp_path / "l.txt", lengths)
    result = run_json(
        capsys, "plan", "--lengths", path, "--dp-size", "2", "--batch-size", "3", "--in-order",
        "--no-balance-batch", "--trainer", "main_ppo_v0",
    )  # fmt: skip
    check_plan(result, lengths, [0, 1, 2, 3, 4, 5])
    assert [r["tokens"] for r in result["ranks"]] == [18, 27]
    balanced = run_json(
        capsys, "plan", "--lengths", path, "--dp-size", "2", "--batch-size", "3", "--in-order"
    )
    check_plan(balanced, lengths, [0, 1, 2, 3, 4, 5])
    # workloads of 5..10: KK puts 10 and 5 with the median, 9+8+... on the other side
    assert sorted(r["tokens"] for r in balanced["ranks"]) == [22, 23]


# --------------------------------------------------------------------------- input formats


def test_jsonl_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = [120, 40, 75, 300, 0, 999, 5, 64]
    path = tmp_path / "rollouts.jsonl"
    path.write_text(
        "\n".join(
            json.dumps({"id": i, "prompt_len": 7, "total_len": n, "text": "x" * n})
            for i, n in enumerate(lengths)
        )
        + "\n\n",  # a trailing blank line is allowed
        encoding="utf-8",
    )
    result = run_json(
        capsys, "plan", "--lengths", str(path), "--field", "total_len", "--dp-size", "2",
        "--batch-size", "4", "--max-token-len", "1000",
    )  # fmt: skip
    assert result["n_lengths"] == 8
    check_plan(result, lengths, random.Random(0).sample(range(8), 8))
    assert sum(r["tokens"] for r in result["ranks"]) == sum(lengths)
    other = run_json(
        capsys, "plan", "--lengths", str(path), "--field", "prompt_len", "--dp-size", "2",
        "--batch-size", "4", "--max-token-len", "1000",
    )  # fmt: skip
    assert sum(r["tokens"] for r in other["ranks"]) == 7 * 8


def test_json_list_of_ints_and_of_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = [3, 1, 4, 1, 5, 9, 2, 6]
    ints = tmp_path / "ints.json"
    ints.write_text(json.dumps(lengths, indent=1), encoding="utf-8")
    objs = tmp_path / "objs.json"
    objs.write_text(json.dumps([{"n": n} for n in lengths]), encoding="utf-8")
    common = ["--dp-size", "2", "--batch-size", "4", "--max-token-len", "10", "--seed", "11"]
    a = run_json(capsys, "plan", "--lengths", str(ints), *common)
    b = run_json(capsys, "plan", "--lengths", str(objs), "--field", "n", *common)
    check_plan(a, lengths, random.Random(11).sample(range(8), 8))
    assert a["ranks"] == b["ranks"]


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = [700, 200, 300, 800, 100, 900]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f" {n} \n" for n in lengths)))
    result = run_json(
        capsys, "plan", "--lengths", "-", "--dp-size", "3", "--batch-size", "2",
        "--max-token-len", "1000", "--in-order", "--no-balance-batch", "--trainer", "main_ppo_v0",
    )  # fmt: skip
    assert result["source"] == "-"
    check_plan(result, lengths, list(range(6)))
    assert [r["tokens"] for r in result["ranks"]] == [900, 1100, 1000]


def test_scale_rounds_halves_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_lines(tmp_path / "l.txt", [3, 5, 10, 7])
    base = ["plan", "--lengths", path, "--dp-size", "1", "--batch-size", "4", "--in-order"]
    result = run_json(capsys, *base, "--scale", "1.5", "--max-token-len", "20")
    assert result["scale"] == 1.5
    scaled = [5, 8, 15, 11]  # 4.5 -> 5, 7.5 -> 8, 15, 10.5 -> 11 (not banker's 4, 8, 15, 10)
    check_plan(result, scaled, [0, 1, 2, 3])
    assert result["ranks"][0]["tokens"] == 39
    # scaled lengths are what the cap is checked against
    code, _, err = run(capsys, *base, "--scale", "2", "--max-token-len", "12")
    assert code == 1  # 6, 10, 20, 14: two over 12
    assert "2 of the 4 drawn samples exceed max_token_len=12" in err
    assert "the largest has 20 tokens" in err


def test_truncate_clips_to_the_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = [250, 50, 100, 30, 101, 7]
    path = write_lines(tmp_path / "l.txt", lengths)
    base = ["plan", "--lengths", path, "--dp-size", "2", "--batch-size", "3", "--in-order",
            "--max-token-len", "100", "--no-balance-batch", "--trainer", "main_ppo_v0"]  # fmt: skip
    code, _, err = run(capsys, *base)
    assert code == 1
    assert "--truncate" in err
    result = run_json(capsys, *base, "--truncate")
    assert result["truncated"] == 2
    check_plan(result, [min(n, 100) for n in lengths], list(range(6)))
    assert [r["tokens"] for r in result["ranks"]] == [250, 137]
    code, out, _ = run(capsys, *base, "--truncate")
    assert code == 0
    assert "2 drawn samples over the cap of 100 tokens truncated to the cap" in out


# --------------------------------------------------------------------------- errors


def assert_one_line_error(code: int, out: str, err: str, expected_code: int) -> None:
    assert code == expected_code, err
    assert out == ""
    assert err.startswith("seqlen-balancing: error: ")
    assert err.endswith("\n")
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("10\n20\nabc\n", ["line 3", "'abc' is not an integer"]),
        ("10\n12.5\n", ["line 2", "'12.5' is not an integer"]),
        ("10\n\n-4\n", ["line 3", "-4 is negative"]),
        ("", ["holds no lengths"]),
        ("\n  \n", ["holds no lengths"]),
        ("[1, 2, -3]", ["list index 2", "-3 is negative"]),
        ('[1, 2, "x"]', ["list index 2", "not an integer"]),
        ("[1, 2, true]", ["list index 2", "not an integer"]),
        ("[1, 2", ["not valid JSON"]),
        ('{"n": 1}\n', ["looks like JSON Lines", "--field"]),
    ],
)
def test_bad_lengths_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, fragments: list[str]
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(content, encoding="utf-8")
    code, out, err = run(capsys, "plan", "--lengths", str(path))
    assert_one_line_error(code, out, err, 2)
    assert str(path) in err
    for fragment in fragments:
        assert fragment in err


@pytest.mark.parametrize(
    ("lines", "fragments"),
    [
        (['{"n": 1}', '{"m": 2}'], ["line 2", "no key 'n'"]),
        (['{"n": 1}', "", '{"n": 2.5}'], ["line 3", "2.5 is not an integer"]),
        (['{"n": 1}', "17"], ["line 2", "expected a JSON object"]),
        (['{"n": 1}', "{oops"], ["line 2", "not a JSON object"]),
    ],
)
def test_bad_jsonl_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], fragments: list[str]
) -> None:
    path = write_lines(tmp_path / "bad.jsonl", lines)
    code, out, err = run(capsys, "plan", "--lengths", path, "--field", "n")
    assert_one_line_error(code, out, err, 2)
    for fragment in fragments:
        assert fragment in err


def test_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.txt"
    code, out, err = run(capsys, "plan", "--lengths", str(missing))
    assert_one_line_error(code, out, err, 2)
    assert "cannot read lengths file" in err
    assert "missing.txt" in err
    code, out, err = run(capsys, "sweep", "--lengths", str(tmp_path))  # a directory
    assert_one_line_error(code, out, err, 2)
    assert "cannot read lengths file" in err
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    code, out, err = run(capsys, "plan", "--lengths", str(binary))
    assert_one_line_error(code, out, err, 2)
    assert "cannot read lengths file" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--max-token-len", "0"],
        ["plan", "--max-token-len", "-8"],
        ["plan", "--max-token-len", "lots"],
        ["plan", "--max-token-len", "8192,16384"],
        ["sweep", "--max-token-len", "8192,0"],
        ["sweep", "--max-token-len", "8192,,16384"],
    ],
)
def test_cap_not_positive_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, out, err, 2)
    assert "--max-token-len" in err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "choose a command"),
        (["plan", "--bogus"], "unrecognized arguments: --bogus"),
        (["plan", "--dp-size", "0"], "--dp-size: must be a positive integer"),
        (["plan", "--batch-size", "x"], "--batch-size: must be a positive integer"),
        (["plan", "--scale", "0"], "--scale: must be a positive number"),
        (["plan", "--scale", "nan"], "--scale: must be a positive number"),
        (["plan", "--field", "n"], "--field applies to --lengths"),
    ],
)
def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, out, err, 2)
    assert fragment in err


def test_too_few_lengths_in_a_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_lines(tmp_path / "short.txt", list(range(1, 11)))
    code, out, err = run(capsys, "plan", "--lengths", path, "--dp-size", "2", "--batch-size", "8")
    assert_one_line_error(code, out, err, 2)
    assert "holds 10 lengths" in err
    assert "needs 16" in err
    # exactly enough is fine: a permutation of the whole file
    ok = run_json(capsys, "plan", "--lengths", path, "--dp-size", "2", "--batch-size", "5")
    check_plan(ok, list(range(1, 11)), random.Random(0).sample(range(10), 10))


def test_sample_over_cap_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = [250, 50, 100, 30, 101, 7, 99, 180]
    path = write_lines(tmp_path / "l.txt", lengths)
    code, out, err = run(
        capsys, "plan", "--lengths", path, "--dp-size", "2", "--batch-size", "4",
        "--max-token-len", "100",
    )  # fmt: skip
    assert_one_line_error(code, out, err, 1)
    assert "3 of the 8 drawn samples exceed max_token_len=100" in err
    assert "the largest has 250 tokens" in err
    assert "raise --max-token-len to at least 250" in err
    assert "--truncate" in err


def test_sample_over_cap_on_bundled_data(capsys: pytest.CaptureFixture[str]) -> None:
    positions = random.Random(0).sample(range(len(CHAMP)), 2048)
    drawn = [CHAMP[p] for p in positions]
    code, out, err = run(capsys, "plan", "--max-token-len", "4096")
    assert_one_line_error(code, out, err, 1)
    over = [n for n in drawn if n > 4096]
    assert f"{len(over)} of the 2048 drawn samples exceed max_token_len=4096" in err
    assert f"the largest has {max(drawn)} tokens" in err


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        (["--min-num-micro-batch", "9"], ["rank 0", "min_num_micro_batch=9"]),
        (["--force-group-size", "3"], ["rank 0", "not divisible by force_group_size=3"]),
        (["--num-batches-divided-by", "6"], ["micro-batches are needed but only 4"]),
    ],
)
def test_library_errors_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], fragments: list[str]
) -> None:
    path = write_lines(tmp_path / "l.txt", [60, 60, 60, 60, 10, 10, 10, 10])
    code, out, err = run(
        capsys, "plan", "--lengths", path, "--dp-size", "2", "--batch-size", "4",
        "--max-token-len", "100", *extra,
    )  # fmt: skip
    assert_one_line_error(code, out, err, 1)
    for fragment in fragments:
        assert fragment in err


def test_force_group_size_keeps_groups_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = [30, 30, 5, 5, 40, 40, 1, 1, 20, 20, 2, 2]
    path = write_lines(tmp_path / "l.txt", lengths)
    result = run_json(
        capsys, "plan", "--lengths", path, "--dp-size", "2", "--batch-size", "6", "--in-order",
        "--max-token-len", "80", "--force-group-size", "2",
    )  # fmt: skip
    check_plan(result, lengths, list(range(12)))
    for rank in result["ranks"]:
        for mb in rank["micro_batches"]:
            pairs = Counter(i // 2 for i in mb["indices"])
            assert set(pairs.values()) == {2}  # both samples of every group, together


# --------------------------------------------------------------------------- sweep


@pytest.mark.slow
def test_sweep_json_rows(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "sweep", "--max-token-len", "32768,8192,16384,8192,65536")
    rows = result["rows"]
    assert [r["max_token_len"] for r in rows] == [8192, 16384, 32768, 65536]  # sorted, unique
    assert (result["dp_size"], result["batch_size"], result["sampling"]) == (
        8, 256, "without_replacement",
    )  # fmt: skip
    totals = [r["total_micro_batches"] for r in rows]
    assert all(a >= b for a, b in pairwise(totals))
    assert totals[0] > totals[-1]
    for row in rows:
        assert row["micro_batches_per_rank"] == [row["agreed_count"]] * 8
        assert row["total_micro_batches"] == 8 * row["agreed_count"]
        assert row["l2_lower_bound_total"] <= row["total_micro_batches"]
        assert row["largest_micro_batch"] <= row["max_token_len"]
        assert row["truncated"] == 0
        assert row["seconds"] >= 0
        # each row is the same step as `plan` at that cap
        plan = run_json(capsys, "plan", "--max-token-len", str(row["max_token_len"]))
        assert row["total_micro_batches"] == plan["total_micro_batches"]
        assert row["l2_lower_bound_total"] == plan["l2_lower_bound_total"]
        assert row["mean_fill"] == plan["mean_fill"]
        assert row["largest_micro_batch"] == plan["largest_micro_batch"]


def test_sweep_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sweep", "--max-token-len", "8192,16384,32768")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[1].startswith("step (verl 0.9.1 main_ppo): balanced")
    assert lines[2].split()[:3] == ["max_token_len", "count/rank", "total"]
    rows = [line.split() for line in lines[3:6]]
    assert [row[0] for row in rows] == ["8192", "16384", "32768"]
    assert all("ms" in row for row in rows)
    assert lines[2].split()[-2:] == ["vs", "fastest"]
    assert lines[6].startswith("fastest max_token_len in the lock-step model (micro_batch_fixed_tokens 819.2")
    # The bundled draw's longest sample: below it no cap can be planned (issue 21).
    assert lines[7].startswith("smallest max_token_len that fits every sample and group: 6704 ")


def test_sweep_default_caps_and_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "sweep", "--no-same-micro-num-in-dp", "--dp-size", "4")
    assert [r["max_token_len"] for r in result["rows"]] == [8192, 16384, 32768, 65536]
    assert result["same_micro_num_in_dp"] is False
    for row in result["rows"]:
        assert len(row["micro_batches_per_rank"]) == 4
        assert row["total_micro_batches"] == sum(row["micro_batches_per_rank"])


def test_sweep_marks_infeasible_caps_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_lines(tmp_path / "l.txt", [500, 90, 120, 40])
    base = ["sweep", "--lengths", path, "--dp-size", "2", "--batch-size", "2"]
    code, out, err = run(capsys, *base, "--max-token-len", "1000,100,200")
    assert code == 0 and err == ""
    assert "max_token_len 100: 2 of the 4 drawn samples exceed max_token_len=100" in out
    assert "max_token_len 200: 1 of the 4 drawn samples exceeds max_token_len=200" in out
    result = run_json(capsys, *base, "--max-token-len", "1000,100,200")
    assert [sorted(r) == ["cap", "error", "max_token_len"] for r in result["rows"]] == [True, True, False]
    assert result["rows"][2]["total_micro_batches"] == 2
    # Every cap fails: the table is still printed (issue 21), and the exit code says so.
    code, out, err = run(capsys, *base, "--max-token-len", "100,200")
    assert code == 1
    assert err == (
        "seqlen-balancing: error: no cap of the sweep can be planned (none below max_token_len "
        "500 can: the costliest sample or group)\n"
    )
    rows = [line.split() for line in out.splitlines()[3:5]]
    # 7 columns of counts and fill, then the global count, two times and vs fastest
    assert rows == [["100", "infeasible", *["-"] * 11], ["200", "infeasible", *["-"] * 11]]
    assert "smallest max_token_len that fits every sample and group: 500 " in out
    assert "max_token_len 100: 2 of the 4 drawn samples exceed max_token_len=100" in out
    result = run_json(capsys, *base, "--max-token-len", "100,200", expected_code=1)
    assert result["smallest_max_token_len"] == 500
    assert [sorted(r) for r in result["rows"]] == [["cap", "error", "max_token_len"]] * 2
    result = run_json(capsys, *base, "--max-token-len", "1000,100,200", "--truncate")
    assert [r["truncated"] for r in result["rows"]] == [2, 1, 0]
    assert [r["largest_micro_batch"] <= r["max_token_len"] for r in result["rows"]] == [True] * 3


@pytest.mark.slow
def test_output_to_a_closed_pipe_is_not_an_error() -> None:
    # A 1,000-row table: the writer is still printing when the reader leaves.
    command = [sys.executable, "-m", "seqlen_balancing", "plan", "--dp-size", "1000", "--batch-size", "16"]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert writer.stdout is not None and writer.stderr is not None
    first = writer.stdout.read(40).decode()
    writer.stdout.close()  # like `| head -1`: the reader leaves before the writer is done
    errors = writer.stderr.read()
    assert writer.wait(timeout=120) == 0
    assert first.startswith("1000 DP ranks x 16 samples")
    assert b"Traceback" not in errors


# --------------------------------------------------------------------------- plot


def hide_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import matplotlib...` fail


def test_plot_without_matplotlib_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hide_matplotlib(monkeypatch)
    png = tmp_path / "plan.png"
    code, out, err = run(capsys, "plan", "--plot", str(png))
    assert_one_line_error(code, out, err, 2)
    assert PLOT_HINT in err
    assert not png.exists()


def test_plot_writes_a_png_when_matplotlib_is_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "plan.png"
    code, out, err = run(
        capsys, "plan", "--plot", str(png), "--dp-size", "3", "--batch-size", "40", "--json"
    )
    if importlib.util.find_spec("matplotlib") is None:  # no 'plot' extra: the error path
        assert_one_line_error(code, out, err, 2)
        assert PLOT_HINT in err
        assert not png.exists()
        return
    assert code == 0, err
    assert json.loads(out)["dp_size"] == 3  # stdout stays pure JSON
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(png) > 1000
    assert f"plot written to {png}" in err


# --------------------------------------------------------------------------- misc


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "plan" in out
    assert "sweep" in out
    code, out, _ = run(capsys, "plan", "--help")
    assert code == 0
    for option in ("--lengths", "--field", "--truncate", "--no-same-micro-num-in-dp", "--plot"):
        assert option in out
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith("seqlen-balancing ")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[" * 100_000, "not valid JSON"),
        ("1" * 5000 + "\n", "is not an integer length (up to 18 digits)"),
    ],
)
def test_hostile_files_give_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, fragment: str
) -> None:
    path = tmp_path / "hostile.txt"
    path.write_text(content)
    code, out, err = run(capsys, "plan", "--lengths", str(path))
    assert_one_line_error(code, out, err, 2)
    assert fragment in err and len(err) < 300


def test_byte_order_mark_and_huge_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf100\n200\n")
    result = run_json(capsys, "plan", "--lengths", str(path), "--dp-size", "1", "--batch-size", "2")
    assert result["ranks"][0]["tokens"] == 300
    code, out, err = run(capsys, "plan", "--scale", "1e308")
    assert_one_line_error(code, out, err, 2)
    assert "--scale 1e+308 makes a length too large" in err
