"""Issue 27 on 2 real gloo ranks: dummy micro-batches, an over-cap sample alone, a poisoned
batch without loss weights (``_keep_training_worker.py`` plays them; this module judges).

The gradient scenario compares with a reference computed without any dummy: the same tiny
model (embedding + linear, float64) on each rank's real rows in one pass, loss and
gradients summed over the ranks. With dummies, rank 1 (2 samples) runs the 4 micro-batches
rank 0 needs, 2 of them dummies of zero loss weight, and a collective per micro-batch (a
gradient sync) stays in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distributed import _keep_training_worker as _worker
from distributed import _world

pytestmark = [pytest.mark.distributed, pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(150)]

_WORKER = Path(__file__).resolve().parent / "_keep_training_worker.py"
DEADLINE_S = 100
WORLD = 2


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    """Every rank's record per scenario (the ranks run once per module, one round each)."""
    directory = tmp_path_factory.mktemp("keep_training")
    rounds = [{"ranks": [{"scenario": name}] * WORLD} for name in _worker.SCENARIOS]
    played = _world.run_world(_WORKER, WORLD, rounds, directory, DEADLINE_S)
    return [{record["scenario"]: record for record in rank} for rank in played]


def test_dummies_keep_the_loss_and_gradients_of_the_real_samples(
    records: list[dict[str, dict[str, Any]]],
) -> None:
    zero, one = records[0]["gradients"], records[1]["gradients"]
    assert zero["count"] == one["count"] == 4
    assert zero["collectives"] == one["collectives"] == 1  # who needs dummies: no second one
    assert zero["dummies"] == [] and one["dummies"] == [2, 3]  # last, after the real ones
    assert sorted(one["plan"][:2]) == [[0], [1]] and one["plan"][2:] == [[], []]
    assert one["shortest"] == 1 and one["dummy_rows"] == [[1], [1]]
    assert one["dummy_is_copy"] == [True, True]
    assert one["dummy_loss_weight"] == [0, 0]
    for record in (zero, one):
        assert record["loss"] == pytest.approx(record["ref_loss"], rel=1e-12, abs=0)
        assert record["grad_diff"] <= 1e-12, record["grad_diff"]


def test_restore_gives_back_exactly_the_real_rows(records: list[dict[str, dict[str, Any]]]) -> None:
    for rank, real in ((0, 4), (1, 2)):
        record = records[rank]["gradients"]
        assert record["restored_rows"] == real
        assert record["restore_list"] and record["restore_cat"] and record["verl_path"], record


def test_over_cap_alone_agrees_and_only_the_holder_warns(
    records: list[dict[str, dict[str, Any]]],
) -> None:
    zero, one = records[0]["over_cap"], records[1]["over_cap"]
    assert zero["count"] == one["count"] == 2
    assert one["plan"] == [[0], [1, 2]]
    assert zero["warnings"] == []
    assert one["warnings"] == [
        "rank 1 of the DP group: sample 0 costs 5000 tokens, over max_token_len=4096: it runs "
        "alone in a micro-batch of its own (over_cap='alone'), the only micro-batch over the "
        "cap; it may run out of memory"
    ]


def test_a_batch_without_loss_weights_fails_every_rank_alike(
    records: list[dict[str, dict[str, Any]]],
) -> None:
    got = [records[rank]["no_loss_weight"] for rank in range(WORLD)]
    assert got[0] == got[1]
    assert got[0]["collectives"] == 2  # the agreement, then the gather of the reports (a rank failed)
    assert got[0]["raised"] == "ValueError"
    assert got[0]["message"].startswith(
        "rank 1 of the DP group (global rank 1): dummy_micro_batches=True needs a loss-weight "
        "entry to zero in the dummies, but the batch has neither 'loss_mask' nor 'response_mask'"
    )


def test_divided_by_four_from_the_batch_settings(records: list[dict[str, dict[str, Any]]]) -> None:
    for rank in range(WORLD):
        record = records[rank]["divided_by_four"]
        assert record["count"] == 4
        assert record["plan"][3] == [] and sorted(record["plan"][:3]) == [[0], [1], [2]]
        assert record["dummy_weight"] == [0]
