"""Issue 32 item 1 on 2 real gloo ranks: equal rows per micro-batch (``_equal_rows_worker.py``
plays the scenarios; this module judges them by rules written here).

The poisoned batch first: rank 1 cannot take the rows rank 0 needs, and both raise the
same error after the one collective. Then the gradients: the same tiny model (embedding +
linear, float64), its loss weighted by the loss weights and divided by the step's real
tokens, summed over micro-batches with filler rows, equals the filler-free run's loss and
gradients (summed over the ranks) to 1e-12.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distributed import _equal_rows_worker as _worker
from distributed import _world

pytestmark = [pytest.mark.distributed, pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(150)]

_WORKER = Path(__file__).resolve().parent / "_equal_rows_worker.py"
DEADLINE_S = 100
WORLD = 2


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    directory = tmp_path_factory.mktemp("equal_rows")
    rounds = [{"ranks": [{"scenario": name}] * WORLD} for name in _worker.SCENARIOS]
    played = _world.run_world(_WORKER, WORLD, rounds, directory, DEADLINE_S)
    return [{record["scenario"]: record for record in rank} for rank in played]


def test_a_rank_that_cannot_take_the_rows_fails_both_ranks_alike(
    records: list[dict[str, dict[str, Any]]],
) -> None:
    got = [records[rank]["poisoned"] for rank in range(WORLD)]
    assert got[0] == got[1]
    assert got[0]["collectives"] == 2  # the agreement, then the rows: the error is there
    # rank 0: 12 rows in 2 micro-batches (its count, 2, is rank 1's) is 6 rows each; rank
    # 1's rows of 9 tokens under a cap of 9 take no filler row: at most 1 row each
    assert got[0]["message"] == (
        "rank 1 of the DP group (global rank 1): equal_rows_per_micro_batch: every micro-batch "
        "must hold 6 rows, but this rank's micro-batches hold at most 1 row under "
        "max_token_len=9 once their filler rows (zero-weight rows of one token) are "
        "counted; raise max_token_len, give the ranks batches of similar sizes, or turn "
        "equal_rows_per_micro_batch off"
    )


def test_every_micro_batch_of_both_ranks_holds_the_same_rows_under_the_cap(
    records: list[dict[str, dict[str, Any]]],
) -> None:
    got = [records[rank]["gradients"] for rank in range(WORLD)]
    assert got[0]["count"] == got[1]["count"] >= max(g["plain_count"] for g in got)
    rows = {r for record in got for r in record["rows"]}
    assert len(rows) == 1  # one micro-batch size for both ranks' whole step
    for record in got:
        lengths = record["lengths"]
        assert sorted(i for part in record["plan"] for i in part) == list(range(len(lengths)))
        for part, filler, row, held, tokens in zip(record["plan"], record["filler"], record["filler_row"],
                                                   record["held"], record["tokens"], strict=True):
            assert held == part + [row] * filler  # the real rows, then rows built from the filler row
            assert len(held) == next(iter(rows))
            assert tokens == sum(lengths[i] for i in part) + filler <= _worker.GRADIENT_CAP  # 1 token each
            if filler:  # the rank's cheapest sample
                assert lengths[row] == min(lengths)
        assert record["filler_weight"] == [0] * record["count"]
        assert record["filler_is_one_token"]
    assert any(f for record in got for f in record["filler"])  # the scenario has filler


def test_filler_rows_leave_the_loss_and_gradients_of_the_real_rows(
    records: list[dict[str, dict[str, Any]]],
) -> None:
    for rank in range(WORLD):
        record = records[rank]["gradients"]
        assert record["loss"] == pytest.approx(record["ref_loss"], rel=1e-12, abs=0)
        assert record["grad_diff"] <= 1e-12, record["grad_diff"]


def test_restore_gives_back_exactly_the_real_rows(records: list[dict[str, dict[str, Any]]]) -> None:
    for rank in range(WORLD):
        record = records[rank]["gradients"]
        assert record["restored_rows"] == len(_worker.GRADIENT_LENGTHS[rank])
        assert record["restore_list"] and record["restore_cat"]


def test_the_batch_setting_turns_it_on(records: list[dict[str, dict[str, Any]]]) -> None:
    rows = {r for rank in range(WORLD) for r in records[rank]["batch_setting"]["rows"]}
    assert len(rows) == 1
    assert records[0]["batch_setting"]["rows"] == records[0]["gradients"]["rows"]


def test_an_empty_rank_whose_template_cannot_take_the_rows_fails_both_ranks_alike(
    records: list[dict[str, dict[str, Any]]],
) -> None:
    got = [records[rank]["empty_poisoned"] for rank in range(WORLD)]
    assert got[0] == got[1] and got[0]["raised"] == "ValueError"
    # rank 0: 8 rows, 30 tokens under 12: 3 micro-batches of ceil(8 / 3) = 3 rows; rank 1's
    # template row of 9 tokens fits once under 12
    message = got[0]["message"]
    assert message.startswith("rank 1 of the DP group (global rank 1): equal_rows_per_micro_batch")
    assert "must hold 3 rows" in message and "at most 1 row under max_token_len=12" in message


def test_an_empty_rank_whose_template_row_cannot_be_read_fails_both_ranks_alike(
    records: list[dict[str, dict[str, Any]]],
) -> None:
    got = [records[rank]["empty_unreadable"] for rank in range(WORLD)]
    assert got[0] == got[1] and got[0]["raised"] == "ValueError"
    assert got[0]["message"] == ("rank 1 of the DP group (global rank 1): attention_mask must be 2-D "
                                 "(batch, seq_len), got a 3-D tensor")


def test_an_empty_ranks_dummies_hold_the_groups_rows(records: list[dict[str, dict[str, Any]]]) -> None:
    full, empty = records[0]["empty_rank"], records[1]["empty_rank"]
    lengths = _worker.GRADIENT_LENGTHS[0]
    count = -(-sum(lengths) // _worker.GRADIENT_CAP)  # 3: the bound is met
    rows = -(-len(lengths) // count)
    assert full["rows"] == empty["rows"] == [rows] * count
    assert sorted(i for part in full["plan"] for i in part) == list(range(len(lengths)))
    assert empty["plan"] == [[]] * count and empty["filler"] == [rows] * count
    # the dummies copy the 1-token row built from the batch's columns, weights zero
    assert empty["tokens"] == [rows] * count and empty["weights"] == [0] * count
    assert max(full["tokens"]) <= _worker.GRADIENT_CAP
    assert empty["restored_rows"] == 0 and full["restored_rows"] == len(lengths)
