"""The command line reports the lower bound and whether the count is proven optimal.

The oracle is an exhaustive bin-packing search written here: the fewest micro-batches of
at most ``cap`` tokens that hold every length (small inputs only).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from seqlen_balancing.cli import main


def optimum(lengths: list[int], cap: int) -> int:
    """Fewest bins of capacity ``cap`` for ``lengths`` (exhaustive; n <= 12)."""
    items = sorted(lengths, reverse=True)

    @cache
    def fits(k: int) -> bool:
        loads = [0] * k

        def place(i: int) -> bool:
            if i == len(items):
                return True
            seen = set()
            for b in range(k):
                if loads[b] + items[i] <= cap and loads[b] not in seen:
                    seen.add(loads[b])
                    loads[b] += items[i]
                    if place(i + 1):
                        return True
                    loads[b] -= items[i]
            return False

        return place(0)

    return next(k for k in range(1, len(items) + 1) if fits(k))


def plan_json(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> dict[str, Any]:
    argv = ("--no-balance-batch", "--trainer", "main_ppo_v0", *argv)
    assert main(["plan", "--lengths", str(path), *argv, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def write(path: Path, lengths: list[int]) -> Path:
    path.write_text("".join(f"{n}\n" for n in lengths), encoding="utf-8")
    return path


def test_cardinality_bound_proves_a_count_above_l2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = [34] * 9  # two fit under 100, three do not: 5 micro-batches, L2 says 4
    assert optimum(lengths, 100) == 5
    result = plan_json(capsys, write(tmp_path / "l.txt", lengths), "--dp-size", "1", "--max-token-len", "100")
    rank = result["ranks"][0]
    assert (rank["count"], rank["l2_lower_bound"], rank["lower_bound"]) == (5, 4, 5)
    assert rank["bound_name"] == "cardinality"
    assert rank["proven_optimal"] is True
    assert (result["lower_bound_total"], result["proven_optimal"]) == (5, True)


def test_step_bound_follows_agreement_and_divisor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "l.txt", [34] * 9 + [10] * 9)  # rank 0 needs 5, rank 1 needs 1
    assert (optimum([34] * 9, 100), optimum([10] * 9, 100)) == (5, 1)
    common = ["--dp-size", "2", "--max-token-len", "100"]
    agreed = plan_json(capsys, path, *common)
    assert [r["lower_bound"] for r in agreed["ranks"]] == [5, 1]
    assert (agreed["total_micro_batches"], agreed["lower_bound_total"]) == (10, 10)
    assert agreed["proven_optimal"] is True
    alone = plan_json(capsys, path, *common, "--no-same-micro-num-in-dp")
    assert (alone["total_micro_batches"], alone["lower_bound_total"]) == (6, 6)
    divided = plan_json(capsys, path, *common, "--num-batches-divided-by", "4")
    assert (divided["total_micro_batches"], divided["lower_bound_total"]) == (16, 16)
    assert divided["proven_optimal"] is True


def test_bound_never_above_the_optimum_and_tables_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = [60, 45, 45, 40, 35, 30, 30, 25, 20, 15, 10, 5]
    best = optimum(lengths, 100)
    path = write(tmp_path / "l.txt", lengths)
    result = plan_json(capsys, path, "--dp-size", "1", "--max-token-len", "100")
    rank = result["ranks"][0]
    assert rank["lower_bound"] <= best <= rank["count"]
    assert result["proven_optimal"] is (rank["count"] == rank["lower_bound"])
    assert main(["plan", "--lengths", str(path), "--dp-size", "1", "--max-token-len", "100"]) == 0
    out = capsys.readouterr().out
    header, row = (line.split() for line in out.splitlines()[2:4])
    assert header[6:8] == ["bound", "by"]  # after "L2 bound"
    star = "*" if rank["proven_optimal"] else ""
    assert row[5:7] == [f"{rank['lower_bound']}{star}", rank["bound_name"]]
    assert f"lower bound {result['lower_bound_total']}: proven optimal" in out


def test_sweep_reports_bound_and_optimal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "l.txt", [34] * 9)
    argv = ["sweep", "--lengths", str(path), "--dp-size", "1", "--max-token-len", "100,200"]
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    # cap 200: five 34s fit (170), six do not (204): 2 micro-batches
    assert [(r["total_micro_batches"], r["lower_bound_total"]) for r in rows] == [(5, 5), (2, 2)]
    assert optimum([34] * 9, 200) == 2
    assert all(r["proven_optimal"] for r in rows)
    assert main(argv) == 0
    table = capsys.readouterr().out.splitlines()
    headers = table[2].split()
    assert headers[5:8] == ["bound", "bound", "optimal"]  # "L2 bound", "bound", "optimal"
    assert [line.split()[4:6] for line in table[3:5]] == [["5", "yes"], ["2", "yes"]]
