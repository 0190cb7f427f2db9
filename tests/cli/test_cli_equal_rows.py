"""The command line's --equal-rows-per-micro-batch (issue 32 item 1): the plan, the rows and
the filler rows it prints, and the costs it reports counting the filler rows. No torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import lengths_file, run


def test_equal_rows_prints_the_rows_and_the_filler_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 8 samples under 20 tokens: 3 micro-batches of 3 rows, one of them [10, 4] topped up
    # with a copy of the 1-token sample (11 + 1 + ... = 15 tokens held)
    path = lengths_file(tmp_path, [10, 4, 6, 3, 3, 8, 9, 1])
    base = ["plan", "--lengths", path, "--dp-size", "1", "--batch-size", "8", "--in-order",
            "--max-token-len", "20", "--equal-rows-per-micro-batch"]
    code, out, _ = run(capsys, *base)
    assert code == 0
    assert ("equal rows: every micro-batch holds 3 rows; 1 filler row (11.1% of the rows held; "
            "zero-weight rows of one token, counted under the cap)") in out
    code, out, _ = run(capsys, *base, "--json")
    result: dict[str, Any] = json.loads(out)
    rank = result["ranks"][0]
    assert (rank["rows"], rank["filler_rows"]) == (3, 1)
    lengths = [10, 4, 6, 3, 3, 8, 9, 1]
    for mb in rank["micro_batches"]:
        filler = 3 - len(mb["indices"])
        # the cost counts the filler rows: one token each
        assert mb["cost"] == sum(lengths[i] for i in mb["indices"]) + filler * 1 <= 20
        assert mb["tokens"] == sum(lengths[i] for i in mb["indices"])
    # off: no such line, no such field
    code, out, _ = run(capsys, *base[:-1])
    assert code == 0 and "equal rows" not in out
