"""The command line's --group-sizes (issue 32): each rank's rows in consecutive groups of
the sizes given, cycled, every group whole in one micro-batch; refused with
--force-group-size and --compare-verl."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import lengths_file, run, run_json
from seqlen_balancing.cli.step import group_ids_of


def test_group_ids_of_cycles_the_sizes() -> None:
    assert group_ids_of(7, (3, 1)) == [0, 0, 0, 1, 2, 2, 2]
    assert group_ids_of(4, (9,)) == [0, 0, 0, 0]  # the last group takes what is left


def test_groups_land_whole_and_the_header_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = [30, 50, 20, 60, 10, 40, 70, 15, 25]
    path = lengths_file(tmp_path, lengths)
    base = ["plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "100", "--group-sizes", "2,3"]
    groups = [[0, 1], [2, 3, 4], [5, 6], [7, 8]]  # 80, 90, 110 (over), 40
    code, _, err = run(capsys, *base)
    assert code == 1 and "group 2 (group_ids[5], its first sample) costs 110 tokens" in err
    result = run_json(capsys, *base[:-3], "120", "--group-sizes", "2,3")
    assert result["group_sizes"] == [2, 3]
    plan = [mb["indices"] for mb in result["ranks"][0]["micro_batches"]]
    assert sorted(i for mb in plan for i in mb) == list(range(9))
    for mb in plan:
        assert sum(lengths[i] for i in mb) <= 120
        assert all(set(g) <= set(mb) or not set(g) & set(mb) for g in groups), plan
    code, out, _ = run(capsys, *base[:-3], "120", "--group-sizes", "2,3")
    assert code == 0 and ("groups (group_ids): each rank's rows in consecutive groups of 2,3 rows, "
                          "cycled; each group lands whole in one micro-batch") in out


@pytest.mark.parametrize(("extra", "words"), [
    (["--force-group-size", "2"], "--group-sizes and --force-group-size both form the groups"),
    (["--compare-verl"], "verl 0.9.1 has no groups of different sizes"),
])
def test_group_sizes_refuse_what_contradicts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    path = lengths_file(tmp_path, [1, 2, 3, 4])
    code, _, err = run(capsys, "plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "100",
                       "--group-sizes", "2", *extra)
    assert code == 2 and words in err


def test_group_sizes_are_positive_integers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = lengths_file(tmp_path, [1, 2])
    code, _, err = run(capsys, "plan", "--lengths", path, "--group-sizes", "2,0")
    assert code == 2 and "must be positive integers separated by commas" in err


def test_sweep_names_the_smallest_cap_of_the_costliest_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = lengths_file(tmp_path, [30, 50, 20, 60, 10, 40, 70, 15, 25])  # groups 80, 90, 110, 40
    code, out, _ = run(capsys, "sweep", "--lengths", path, "--dp-size", "1", "--max-token-len", "100,120",
                       "--group-sizes", "2,3")
    assert code == 0
    assert "smallest max_token_len that fits every sample and group: 110 " in out


def test_the_l2_column_counts_an_over_cap_group_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--over-cap alone: each over-cap group is one micro-batch of its own (its samples,
    each under the cap, are not counted apart), the rest bounded by ceil(tokens / cap)."""
    lengths = [80, 70, 60, 50, 10, 10, 20, 20]  # groups of 2: 150 and 110 over 100, then 20 and 40
    result = run_json(capsys, "plan", "--lengths", lengths_file(tmp_path, lengths), "--dp-size", "1",
                      "--max-token-len", "100", "--force-group-size", "2", "--over-cap", "alone")
    (rank,) = result["ranks"]
    assert rank["l2_lower_bound"] == 2 + 1 == rank["count"]
    assert rank["fill"] == round(sum(lengths) / (3 * 100), 6) > 1  # the over-cap micro-batches overfill
