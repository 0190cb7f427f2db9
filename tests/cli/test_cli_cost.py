"""The command line's cap on what the GPU holds (issue 21): --pad-to-multiple-of, --tp/--cp/
--fp8, --micro-batch-multiple-of, the aligned columns and JSON costs, and the help it gives
to choose the cap (the sweep's smallest plannable cap, --plot checked before planning)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import lengths_file, run, run_json
from seqlen_balancing.cli.plot import check_plot_path
from seqlen_balancing.cost import aligned_length, micro_batch_cost


def test_65_samples_of_250_tokens_aligned_to_32(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = lengths_file(tmp_path, [250] * 65)
    base = ["plan", "--lengths", path, "--dp-size", "1", "--max-token-len", "16384"]
    plain = run_json(capsys, *base)
    assert plain["total_micro_batches"] == 1
    assert (plain["pad_to_multiple_of"], plain["micro_batch_multiple_of"]) == (1, 1)
    assert plain["ranks"][0]["micro_batches"][0]["cost"] == 16_250
    aligned = run_json(capsys, *base, "--pad-to-multiple-of", "32")
    assert aligned["total_micro_batches"] == 2
    assert aligned["pad_to_multiple_of"] == 32
    rank = aligned["ranks"][0]
    assert rank["aligned_tokens"] == 65 * 256 and rank["tokens"] == 65 * 250
    for mb in rank["micro_batches"]:
        assert mb["cost"] == 256 * len(mb["indices"]) <= 16_384
        assert mb["tokens"] == 250 * len(mb["indices"])
    assert aligned["largest_micro_batch_cost"] == max(mb["cost"] for mb in rank["micro_batches"])
    code, out, err = run(capsys, *base, "--pad-to-multiple-of", "32")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == (
        "cap on what the GPU holds: each sample costs its length rounded up to a multiple of 32 tokens"
    )
    header = lines[3].split()
    assert "aligned" in header and header.count("mb") == 2  # "largest mb" and "aligned mb"
    assert lines[4].split()[:4] == ["0", "65", "16250", "16640"]
    summary = next(line for line in lines if line.startswith("agreed count"))
    assert "(costliest " in summary and "aligned tokens)" in summary


def test_megatron_options_and_the_bucket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "plan", "--tp", "4", "--cp", "2", "--dp-size", "2", "--batch-size", "64")
    assert (result["pad_to_multiple_of"], result["micro_batch_multiple_of"]) == (16, 1)
    assert (result["tp"], result["cp"], result["fp8"]) == (4, 2, False)
    result = run_json(
        capsys, "plan", "--tp", "4", "--cp", "2", "--fp8", "--micro-batch-multiple-of", "512",
        "--dp-size", "2", "--batch-size", "64",
    )  # fmt: skip
    # FP8: each sequence to lcm(16, 16), the total to 16 * 128 = 2048 (lcm with 512).
    assert (result["pad_to_multiple_of"], result["micro_batch_multiple_of"]) == (16, 2048)
    for rank in result["ranks"]:
        for mb in rank["micro_batches"]:
            assert mb["cost"] % 2048 == 0 and mb["cost"] <= 16_384
    result = run_json(capsys, "plan", "--tp", "8", "--dp-size", "1", "--batch-size", "64")
    assert result["pad_to_multiple_of"] == 8
    megatron = ["--tp", "4", "--cp", "2", "--fp8"]
    code, out, err = run(capsys, "plan", *megatron, "--dp-size", "1", "--batch-size", "8")
    assert code == 0, err
    assert "verl's Megatron THD rule for tp 4, cp 2, fp8" in out.splitlines()[1]
    assert "rounded up to a multiple of 2048" in out.splitlines()[1]


def test_bucket_512_in_the_cli_keeps_every_rounded_micro_batch_under_the_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_json(
        capsys, "plan", "--micro-batch-multiple-of", "512", "--max-token-len", "16400",
        "--dp-size", "2", "--batch-size", "128",
    )  # fmt: skip
    lengths = result["ranks"][0]["micro_batches"]
    assert all(mb["cost"] == micro_batch_cost([mb["tokens"]], 512) <= 16_384 for mb in lengths)


def test_alignment_option_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, text in (
        (["--cp", "2"], "--cp derives Megatron's alignment with --tp; pass --tp N too"),
        (["--fp8"], "--fp8 derives Megatron's alignment with --tp"),
        (["--tp", "2", "--pad-to-multiple-of", "8"], "both set the per-sequence alignment; pass one"),
        (["--pad-to-multiple-of", "0"], "argument --pad-to-multiple-of: must be a positive integer"),
    ):
        code, out, err = run(capsys, "plan", *argv)
        assert code == 2 and out == "" and text in err, err
    code, out, err = run(capsys, "plan", "--micro-batch-multiple-of", "32768")
    assert code == 1 and "the micro-batch bucket 32768 (--micro-batch-multiple-of, combined" in err
    assert "is larger than the cap 16384" in err


def test_over_cap_after_alignment_names_tokens_and_aligned_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = lengths_file(tmp_path, [1000, 20, 30, 40])
    base = ["plan", "--lengths", path, "--dp-size", "2", "--max-token-len", "1010"]
    assert run(capsys, *base)[0] == 0
    code, _, err = run(capsys, *base, "--pad-to-multiple-of", "64")
    assert code == 1
    assert (
        "1 of the 4 drawn samples exceeds max_token_len=1010 (the largest has 1000 tokens, 1024 "
        "aligned to 64); raise --max-token-len to at least 1024" in err
    )
    # --truncate clips to the longest length whose aligned cost fits: 960 tokens (cost 960).
    result = run_json(capsys, *base, "--pad-to-multiple-of", "64", "--truncate")
    assert result["truncated"] == 1
    tokens = sorted(mb["tokens"] for rank in result["ranks"] for mb in rank["micro_batches"])
    assert max(tokens) <= 960 + 64 and result["largest_micro_batch_cost"] <= 1010
    assert aligned_length(960, 64) == 960


def test_sweep_smallest_cap_and_every_cap_failing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = lengths_file(tmp_path, [1000, 20, 30, 40])
    base = ["sweep", "--lengths", path, "--dp-size", "2", "--pad-to-multiple-of", "64"]
    result = run_json(capsys, *base, "--max-token-len", "1000,1024,2048")
    assert result["smallest_max_token_len"] == 1024  # 1,000 tokens aligned to 64
    assert [sorted(r) == ["cap", "error", "max_token_len"] for r in result["rows"]] == [True, False, False]
    code, out, err = run(capsys, *base, "--max-token-len", "500,1000")
    assert code == 1
    assert "smallest max_token_len that fits every sample and group: 1024 (the costliest, in" in out
    rows = [line.split()[:2] for line in out.splitlines()[4:6]]
    assert rows == [["500", "infeasible"], ["1000", "infeasible"]]
    assert err == (
        "seqlen-balancing: error: no cap of the sweep can be planned (none below max_token_len "
        "1024 can: the costliest sample or group)\n"
    )
    # With a bucket and sequence parallelism: the per-GPU cap whose cap (x sp) fits, rounded up.
    result = run_json(
        capsys, "sweep", "--lengths", path, "--dp-size", "2", "--micro-batch-multiple-of", "512",
        "--sp-size", "2", "--max-token-len", "1024",
    )  # fmt: skip
    assert result["smallest_max_token_len"] == 512  # 1,000 -> 1,024 with the bucket, / sp 2


def test_plot_to_an_unwritable_path_fails_before_planning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no" / "such" / "folder" / "plot.png"
    # --lengths names a file that does not exist either: the plot path is checked first.
    for command in ("plan", "sweep"):
        absent = str(tmp_path / "absent.txt")
        code, out, err = run(capsys, command, "--lengths", absent, "--plot", str(missing))
        assert code == 2 and out == ""
        assert err == (
            f"seqlen-balancing: error: cannot write plot {str(missing)!r}: folder "
            f"{str(missing.parent)!r} does not exist\n"
        )
    code, _, err = run(capsys, "plan", "--plot", str(tmp_path))
    assert code == 2 and "it is a directory; name a file such as plot.png" in err
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        code, _, err = run(capsys, "plan", "--plot", str(locked / "p.png"))
        assert code == 2 and "is not writable" in err
    assert not missing.parent.exists()
    # Where only a real open can tell (root passes os.access; /proc takes no new file), the
    # path is still refused before anything is planned, and a good path is left untouched.
    code, out, err = run(capsys, "sweep", "--plot", "/proc/sweep.png")
    assert (code, out) == (2, "") and "cannot write plot '/proc/sweep.png'" in err
    check_plot_path(str(tmp_path / "fine.png"))
    assert not (tmp_path / "fine.png").exists()


class _Recorder:
    """A stand-in for matplotlib's Figure and Axes: records every call (no matplotlib)."""

    def __init__(self, calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]], *_: Any, **__: Any) -> None:
        self.calls = calls

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            if name in ("subplots", "twinx"):
                return _Recorder(self.calls)
            if name == "get_legend_handles_labels":
                return [], []
            return None

        return record


def test_sweep_plot_keeps_infeasible_caps_marked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from seqlen_balancing.cli import plot
    from seqlen_balancing.cli.arguments import build_parser, check_combinations
    from seqlen_balancing.cli.load import load_lengths
    from seqlen_balancing.cli.step import make_step, plan_step

    path = lengths_file(tmp_path, [1000, 20, 30, 40])
    args = build_parser().parse_args(["sweep", "--lengths", path, "--dp-size", "2"])
    check_combinations(args)
    step = make_step(args, load_lengths(args))
    outcomes: list[Any] = [(500, "too small"), plan_step(step, 1024, args), (800, "too small")]
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    plot.save_sweep_plot(lambda *a, **k: _Recorder(calls), outcomes, str(tmp_path / "s.png"))
    crosses = [c for c in calls if c[0] == "plot" and c[2].get("label") == "cannot be planned"]
    assert len(crosses) == 1 and list(crosses[0][1][0]) == [500, 800]
    ticks = [c for c in calls if c[0] == "set_xticks"]
    assert list(ticks[0][1][0]) == [500, 800, 1024]  # every cap stays on the axis
    assert any(c[0] == "savefig" for c in calls)
