"""Issue 46 items 7 and 10 on real gloo ranks: a uint32 entry on one rank only is cut (both
ranks return the same count), and ``use_prefix_tree`` set on one rank only is refused on
both, through the agreement (``_batch_edges_worker.py`` plays the rounds; this module
judges them, with the rule written out here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distributed import _world

pytestmark = [pytest.mark.distributed, pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(200)]

_WORKER = Path(__file__).resolve().parent / "_batch_edges_worker.py"
DEADLINE_S = 150
CAP = 8
#: rank 0's lengths need 4 micro-batches at a cap of 8 (8, 7+1, 6+2, 5+3); rank 1's 2
LENGTHS = [[8, 7, 6, 5, 3, 2, 1], [4, 4, 3, 2]]
REFUSED = ("rank 1 of the DP group (global rank 1): the batch sets 'use_prefix_tree', which asks "
           "for verl's prefix-tree micro-batches; seqlen_balancing does not build them: switch "
           "use_prefix_tree off, or unset SEQLEN_BALANCING_VERL so that verl plans this batch itself")


def _rounds() -> list[dict[str, Any]]:
    unsigned = [{"ranks": [{"entry": entry, "cap": CAP, "lengths": LENGTHS[0], "uint32": True},
                           {"entry": entry, "cap": CAP, "lengths": LENGTHS[1]}]}
                for entry in ("rearrange", "dynamic", "prepare")]
    prefix = [{"ranks": [{"entry": "prepare", "cap": CAP, "lengths": LENGTHS[int(static)], "static": static},
                         {"entry": "prepare", "cap": CAP, "lengths": LENGTHS[1], "static": static,
                          "prefix_tree": True}]}
              for static in (False, True)]
    off = {"ranks": [{"entry": "prepare", "cap": CAP, "lengths": LENGTHS[0]},
                     {"entry": "prepare", "cap": CAP, "lengths": LENGTHS[1], "prefix_tree": False}]}
    return [*unsigned, *prefix, off]


ROUNDS = _rounds()


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict[str, Any]]]:
    """Every rank's records, round by round (the ranks start once per module)."""
    played = _world.run_world(_WORKER, 2, ROUNDS, tmp_path_factory.mktemp("edges"), DEADLINE_S)
    return [[played[rank][number] for rank in range(2)] for number in range(len(ROUNDS))]


@pytest.mark.parametrize("number", [0, 1, 2], ids=["rearrange", "dynamic", "prepare"])
def test_a_uint32_entry_on_one_rank_is_cut_and_both_return_the_same_count(
    records: list[list[dict[str, Any]]], number: int
) -> None:
    zero, one = records[number]
    assert "raised" not in zero and "raised" not in one, (zero, one)
    assert zero["count"] == one["count"] == 4  # rank 0 needs 4; rank 1 follows
    assert one["u"] is None
    # the entry's rows are the rows of the plan, their bits unchanged: row i holds 3 * 2**30 + i
    assert zero["u"] == [[(3 << 30) + i for i in part] for part in zero["plan"]]
    assert sorted(i for part in zero["plan"] for i in part) == list(range(7))


@pytest.mark.parametrize("number", [3, 4], ids=["dynamic", "static"])
def test_use_prefix_tree_on_one_rank_is_refused_on_both(
    records: list[list[dict[str, Any]]], number: int
) -> None:
    for record in records[number]:
        assert record.get("raised") == "ValueError", record
        assert record["message"] == REFUSED


def test_use_prefix_tree_false_changes_nothing(records: list[list[dict[str, Any]]]) -> None:
    zero, one = records[5]
    assert zero["count"] == one["count"] == 4
