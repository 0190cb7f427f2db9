"""Shared prompts counted once (issue 47, item 3) on 3 real gloo ranks
(``_prefix_worker.py`` plays them; this module judges, with the rule written out here: a
micro-batch costs its samples' tokens beyond their prefix plus each prompt once)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from distributed import _world

pytestmark = [pytest.mark.distributed, pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(200)]

_WORKER = Path(__file__).resolve().parent / "_prefix_worker.py"
DEADLINE_S = 150
WORLD = 3
RANDOM_ROUNDS = 8
FORCED_ROUNDS = 4


def _rank(rng: random.Random) -> dict[str, Any]:
    """2-4 prompts of 20-60 tokens, 2-4 responses each of 1-30 tokens, shuffled."""
    rows = []
    for prompt in range(rng.randint(2, 4)):
        prefix = rng.randint(20, 60)
        rows += [(f"q{prompt}", prefix, prefix + rng.randint(1, 30)) for _ in range(rng.randint(2, 4))]
    rng.shuffle(rows)
    return {"ids": [r[0] for r in rows], "prefixes": [r[1] for r in rows], "lengths": [r[2] for r in rows]}


def _rounds() -> list[dict[str, Any]]:
    rng = random.Random(47)
    rounds = []
    for _ in range(RANDOM_ROUNDS):
        ranks = [_rank(rng) for _ in range(WORLD)]
        cap = rng.randint(max(max(r["lengths"]) for r in ranks), 200)
        rounds.append({"ranks": [{**r, "cap": cap, "shared": True} for r in ranks]})
    fixed = _rank(rng)
    mismatch = [{**fixed, "cap": 200, "shared": rank != 1} for rank in range(WORLD)]
    bad = [{**fixed, "cap": 200, "shared": True} for _ in range(WORLD)]
    bad[2] = {**bad[2], "prefixes": [p + 1 if i == 0 else p for i, p in enumerate(bad[2]["prefixes"])]}
    forced = []  # force_group_size's groups: each prompt's responses consecutive, 3 a prompt
    for _ in range(FORCED_ROUNDS):
        ranks = [_forced_rank(rng, rng.randint(2, 4)) for _ in range(WORLD)]
        cap = rng.randint(max(max(r["lengths"]) for r in ranks), 200)
        forced.append({"ranks": [{**r, "cap": cap, "shared": True, "force": 3} for r in ranks]})
    short = [{**_forced_rank(rng, 2), "cap": 200, "shared": True, "force": 3} for _ in range(WORLD)]
    short[1] = {key: value[:-1] if isinstance(value, list) else value for key, value in short[1].items()}
    return [*rounds, {"ranks": mismatch}, {"ranks": bad}, *forced, {"ranks": short}]


def _forced_rank(rng: random.Random, prompts: int) -> dict[str, Any]:
    """``prompts`` prompts of 20-60 tokens, 3 responses each of 1-30 tokens, in order."""
    rows = []
    for prompt in range(prompts):
        prefix = rng.randint(20, 60)
        rows += [(f"q{prompt}", prefix, prefix + rng.randint(1, 30)) for _ in range(3)]
    return {"ids": [r[0] for r in rows], "prefixes": [r[1] for r in rows], "lengths": [r[2] for r in rows]}


ROUNDS = _rounds()


def rule_cost(part: list[int], spec: dict[str, Any]) -> int:
    prompts: dict[str, int] = {spec["ids"][i]: spec["prefixes"][i] for i in part}
    beyond: int = sum(spec["lengths"][i] - spec["prefixes"][i] for i in part)
    return beyond + sum(prompts.values())


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict[str, Any]]]:
    played = _world.run_world(_WORKER, WORLD, ROUNDS, tmp_path_factory.mktemp("prefix"), DEADLINE_S)
    return [[played[rank][number] for rank in range(WORLD)] for number in range(len(ROUNDS))]


def test_every_rank_fits_the_cap_with_prompts_once_in_the_same_count(
    records: list[list[dict[str, Any]]],
) -> None:
    saved = planned = 0
    for round_, got in zip(ROUNDS[:RANDOM_ROUNDS], records[:RANDOM_ROUNDS], strict=True):
        assert all("plan" in record for record in got), got
        planned += 1
        assert len({len(record["plan"]) for record in got}) == 1
        for spec, record in zip(round_["ranks"], got, strict=True):
            plan = record["plan"]
            assert sorted(i for part in plan for i in part) == list(range(len(spec["lengths"])))
            for part in plan:
                assert rule_cost(part, spec) <= spec["cap"]
            real = [part for part in plan if part]
            assert plan[: len(real)] == real  # dummies (a rank of fewer parts) last
            saved += sum(spec["lengths"]) > spec["cap"] * len(real)  # counted flat: no such plan
    assert planned == RANDOM_ROUNDS and saved >= 1


def test_one_rank_without_prefixes_stops_every_rank_naming_it(records: list[list[dict[str, Any]]]) -> None:
    got = records[RANDOM_ROUNDS]
    assert all(record == got[0] for record in got) and got[0]["raised"] == "ValueError"
    assert got[0]["message"].startswith(
        "the ranks passed different prefix_lengths: rank 0 (global rank 0) passes prefix_lengths "
        "and rank 1 (global rank 1) does not")


def test_a_group_with_two_prefixes_on_one_rank_stops_every_rank(records: list[list[dict[str, Any]]]) -> None:
    got = records[RANDOM_ROUNDS + 1]
    assert all(record == got[0] for record in got) and got[0]["raised"] == "ValueError"
    assert got[0]["message"].startswith("rank 2 of the DP group (global rank 2): group 'q")
    assert "has prefix_lengths" in got[0]["message"]


def test_force_group_size_groups_share_their_prefix_on_every_rank(
    records: list[list[dict[str, Any]]],
) -> None:
    """force_group_size=3 without ids: samples [3k, 3k + 3) are one prompt (the rule's ids
    written out above are the same groups), the cap holds with each prompt once."""
    first, needed = RANDOM_ROUNDS + 2, 0
    for round_, got in zip(ROUNDS[first:first + FORCED_ROUNDS], records[first:first + FORCED_ROUNDS],
                           strict=True):
        assert all("plan" in record for record in got), got
        assert len({len(record["plan"]) for record in got}) == 1
        for spec, record in zip(round_["ranks"], got, strict=True):
            assert sorted(i for part in record["plan"] for i in part) == list(range(len(spec["lengths"])))
            assert all(rule_cost(part, spec) <= spec["cap"] for part in record["plan"])
            # a group of 3 counted flat over the cap could not have landed whole without sharing
            flat = [sum(spec["lengths"][g:g + 3]) for g in range(0, len(spec["lengths"]), 3)]
            needed += max(flat) > spec["cap"]
    assert needed >= 1


def test_a_rank_force_group_size_does_not_divide_stops_every_rank(
    records: list[list[dict[str, Any]]],
) -> None:
    got = records[RANDOM_ROUNDS + 2 + FORCED_ROUNDS]
    assert all(record == got[0] for record in got) and got[0]["raised"] == "ValueError"
    assert got[0]["message"].startswith("rank 1 of the DP group (global rank 1): batch size 5 is not "
                                        "divisible by force_group_size=3")
