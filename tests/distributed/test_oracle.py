"""DP agreement on real gloo ranks, checked against each rank planning alone.

For 2, 3 and 4 ranks (file rendezvous, loopback only), seeded random rounds give every rank
its own lengths and ``min_num_micro_batch``; some ranks get a planning error (a sample over
the cap, an empty batch, a batch not divisible by ``force_group_size``, a bad or too large
``min_num_micro_batch``, too few samples for the count another rank needs), and some rank
another valid ``min_num_micro_batch`` than its peers. The workers (``_oracle_worker.py``)
call ``rearrange_micro_batches`` or ``prepare_micro_batches`` with ``dp_group`` set; this
module predicts every outcome from :func:`plan_micro_batches` on each rank's input alone
(no group, nothing of ``agreement.py``):

0. Ranks asked for different valid ``min_num_micro_batch`` (``None`` reads as 1): every rank
   raises the same ``ValueError`` naming the lowest rank with the largest and the lowest
   with the smallest, whatever else fails (issue 30: the options are agreed; verl 0.9.1 took
   the largest, and so did this oracle before). A rank whose value is not valid states none.
1. A rank that fails alone (other than by the count): every rank raises the error of the
   lowest such rank, same type, byte-identical message on every rank, naming
   ``rank {r} of the DP group`` and carrying that rank's own message (less the local detail
   in parentheses that only the rank at fault knows, such as the repr of a bad value).
2. Else the count is ``K``: the largest count a rank needs alone, rounded up to
   ``num_batches_divided_by`` (the largest local count). A rank with fewer samples/groups
   than ``K``: every rank raises one ``ValueError`` naming the rank with the fewest.
3. Else every rank returns ``K`` micro-batches within the cap, an exact cover of its rows.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from typing import Any

import pytest

from seqlen_balancing import plan_micro_batches


def _load(name: str) -> Any:
    """A helper module beside this one (the tests run under importlib mode)."""
    path = Path(__file__).resolve().parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_seqlen_balancing_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytestmark = [pytest.mark.distributed, pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(420)]

_WORKER = Path(__file__).resolve().parent / "_oracle_worker.py"
_world = _load("_world")
#: Seconds one world may take for all its rounds (spawn, torch import, rendezvous, rounds).
DEADLINE_S = 240
ROUNDS = {2: 60, 3: 30, 4: 30}


def _round(rng: random.Random, world_size: int) -> dict[str, Any]:
    """One round: shared arguments, and per rank its lengths and min_num_micro_batch."""
    cap = rng.choice([8, 16, 24, 100])
    group = rng.choice([1, 1, 1, 2])
    shared = {
        "max_token_len": cap,
        "force_group_size": group,
        "num_batches_divided_by": rng.choice([None, None, None, 1, 2, 3]),
        "use_dynamic_bsz_balance": rng.random() < 0.5,
        "left_pad": rng.random() < 0.5,
    }
    minimum = rng.choice([None, None, None, 1, 2])
    entry = "prepare_micro_batches" if rng.random() < 0.3 else "rearrange_micro_batches"
    n_groups = rng.randint(3, 12)  # DP ranks usually hold batches of one size
    ranks = []
    for _ in range(world_size):
        # Now and then a rank with one or two groups: too few for a count another needs.
        few = rng.random() < 0.3 / world_size
        groups = rng.randint(1, 2) if few else n_groups + rng.choice([0, 0, 0, 1, -1])
        top = cap // group  # a forced group of such samples fits the cap
        lengths = [rng.choice([0, 1, top // 3, top // 2, top // 2 + 1, top, rng.randint(0, top)])
                   for _ in range(groups * group)]
        rank_min: Any = minimum
        if rng.random() < 0.15 / world_size:  # another valid floor than its peers'
            rank_min = (minimum or 1) + rng.randint(1, 2)
        # About one faulty rank in three rounds, whatever the world size.
        fault = rng.choice(["over", "empty", "indivisible", "bad_min"]) \
            if rng.random() < 0.35 / world_size else None
        if fault == "over":
            lengths[rng.randrange(len(lengths))] = cap + rng.randint(1, 9)
        elif fault == "empty":
            lengths = []
        elif fault == "indivisible" and group > 1:
            lengths = lengths[:-1]
        elif fault == "bad_min":
            rank_min = rng.choice([0, -2, 2.5, "3", 99])
        ranks.append({
            **shared, "entry": entry if lengths else "rearrange_micro_batches",
            "lengths": lengths, "min_num_micro_batch": rank_min,
        })
    return {"ranks": ranks}


def _alone(spec: dict[str, Any], divided: bool = True) -> tuple[str, Any]:
    """``("ok", count)`` or ``("raised", exception)``: the rank planning on its own."""
    try:
        plan = plan_micro_batches(
            spec["lengths"], spec["max_token_len"],
            num_batches_divided_by=spec["num_batches_divided_by"] if divided else None,
            min_num_micro_batch=spec["min_num_micro_batch"],
            force_group_size=spec["force_group_size"],
        )
    except (TypeError, ValueError) as error:
        return "raised", error
    return "ok", len(plan)


def _is_count_error(error: Exception) -> bool:
    return "micro-batches are needed but only" in str(error)


def _agreed_floor(value: Any) -> int | None:
    """The floor a rank states in the agreement: ``None`` as 1, a value that is not a
    positive integer states nothing (it is that rank's error)."""
    if value is None:
        return 1
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None


def expected(round_: dict[str, Any]) -> dict[str, Any]:
    """The outcome every rank must reach, from each rank's solo outcome."""
    specs = round_["ranks"]
    floors = [(r, _agreed_floor(spec["min_num_micro_batch"])) for r, spec in enumerate(specs)]
    stated = [(r, f) for r, f in floors if f is not None]
    if len({f for _, f in stated}) > 1:
        top, bottom = max(f for _, f in stated), min(f for _, f in stated)
        high = next(r for r, f in stated if f == top)
        low = next(r for r, f in stated if f == bottom)
        return {"kind": "mismatch", "message": (
            f"the ranks passed different min_num_micro_batch: rank {high} (global rank {high}) "
            f"has min_num_micro_batch={top} and rank {low} (global rank {low}) has "
            f"min_num_micro_batch={bottom}; every rank of the DP group must plan under the same "
            "options and cap, so set them alike on every rank (keywords, batch settings and "
            "SEQLEN_BALANCING_* variables)")}
    solo = [_alone(spec) for spec in specs]
    failing = [r for r, (kind, e) in enumerate(solo) if kind == "raised" and not _is_count_error(e)]
    if failing:
        r = failing[0]
        return {"kind": "rank_error", "rank": r, "error": solo[r][1]}
    # Every rank can plan alone before rounding: its count is the plan without the divisor.
    needed = [_alone(spec, divided=False)[1] for spec in specs]
    divisor = specs[0]["num_batches_divided_by"] or 1
    count = -(-max(needed) // divisor) * divisor
    assert all(kind == "raised" or c <= count for kind, c in solo)
    if all(kind == "ok" for kind, _ in solo):
        assert count == max(c for _, c in solo)  # the largest local count
    groups = [len(spec["lengths"]) // spec["force_group_size"] for spec in specs]
    if count > min(groups):
        return {
            "kind": "count_error", "rank": groups.index(min(groups)), "count": count,
            "groups": min(groups), "needed": max(needed), "rank_needing": needed.index(max(needed)),
        }
    return {"kind": "plan", "count": count}


def _longest(spec: dict[str, Any]) -> int:
    """The longest forced group of a rank (its longest sample where groups cannot form)."""
    lengths, group = spec["lengths"], spec["force_group_size"]
    if not lengths:
        return 0
    if len(lengths) % group:
        return max(lengths)
    return max(sum(lengths[g : g + group]) for g in range(0, len(lengths), group))


def _group_advice(local: str, specs: list[dict[str, Any]]) -> str:
    """A rank's own over-cap message as the group raises it: the advice names the longest
    sample or group of every rank, not only the rank at fault's."""
    marker = "raise max_token_len to at least "
    if marker not in local:
        return local
    head, tail = local.split(marker, 1)
    return f"{head}{marker}{max(_longest(spec) for spec in specs)}{tail[tail.index(' '):]}"


def _text_after_rank(message: str) -> str:
    # "rank R of the DP group[ (global rank G)]: text": what follows the group rank may grow.
    return message.split(": ", 1)[1]


@pytest.mark.parametrize("world_size", sorted(ROUNDS))
def test_agreement_matches_each_rank_planning_alone(world_size: int, tmp_path: Path) -> None:
    rng = random.Random(1000 + world_size)
    rounds = [_round(rng, world_size) for _ in range(ROUNDS[world_size])]
    outcomes = [expected(round_) for round_ in rounds]
    kinds = [o["kind"] for o in outcomes]
    # The seeded rounds cover every outcome (a change of the generator must keep that).
    assert {"plan", "rank_error", "count_error", "mismatch"} <= set(kinds), kinds
    assert any(o["kind"] == "rank_error" and o["rank"] > 0 for o in outcomes)

    records = _world.run_world(_WORKER, world_size, rounds, tmp_path, DEADLINE_S)
    for rank_records in records:
        assert [r["round"] for r in rank_records] == list(range(len(rounds)))
    for number, (round_, want) in enumerate(zip(rounds, outcomes, strict=True)):
        got = [records[rank][number] for rank in range(world_size)]
        where = f"round {number} ({want['kind']}): {round_['ranks']}\n-> {got}"
        if want["kind"] == "plan":
            for rank, record in enumerate(got):
                spec = round_["ranks"][rank]
                assert "plan" in record, where
                assert len(record["plan"]) == want["count"], where
                lengths, cap = spec["lengths"], spec["max_token_len"]
                assert sorted(i for part in record["plan"] for i in part) == list(range(len(lengths)))
                assert record["rows"] == record["plan"], where
                assert record["tokens"] == [sum(lengths[i] for i in part) for part in record["plan"]]
                assert max(record["tokens"]) <= cap, where
            continue
        assert all("raised" in record for record in got), where
        assert len({(r["raised"], r["message"]) for r in got}) == 1, f"ranks differ: {where}"
        if want["kind"] == "mismatch":
            assert got[0]["raised"] == "ValueError" and got[0]["message"] == want["message"], where
            continue
        raised, message = got[0]["raised"], got[0]["message"]
        assert message.startswith(f"rank {want['rank']} of the DP group"), where
        text = _text_after_rank(message)
        if want["kind"] == "rank_error":
            local = _group_advice(str(want["error"]), round_["ranks"])
            assert raised == type(want["error"]).__name__, where
            assert local == text or local.startswith(text + " ("), where
        else:
            assert raised == "ValueError", where
            assert text.startswith(
                "Cannot satisfy max_token_len while keeping forced groups atomic: "
                f"{want['count']} micro-batches are needed but only {want['groups']} samples/groups"
            ), where
            # the rank needing the count, named by group rank (and global rank, equal here)
            needing = f"rank {want['rank_needing']} (global rank {want['rank_needing']}) needs"
            assert f"{needing} {want['needed']}" in text, where
