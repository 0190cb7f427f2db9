"""Options agreed across real gloo ranks, and caller data read whole (issue 30, items 3 and 6).

Poisoned rounds on 2, 3 and 4 ranks (file rendezvous, loopback only, each world under a
deadline so a hang fails): one rank asked for another value of one option (or cap, or
per-sample data given where the others give none), every other rank alike; every rank must
raise the identical ``ValueError`` naming the option, the lowest rank holding the largest
value, the lowest holding the smallest, and both values as written out here by hand.
Controls: the same rounds with every rank alike plan normally. Caller data: a workloads
callable returning ``map(table.__getitem__, lengths)`` that raises ``KeyError`` on one rank
only, a costs container whose reading raises, a mapping given as costs: every rank ends
alike, naming the rank. ``_options_worker.py`` plays the rounds; this module judges them.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from typing import Any

import pytest


def _load(name: str) -> Any:
    """A helper module beside this one (the tests run under importlib mode)."""
    path = Path(__file__).resolve().parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_seqlen_balancing_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytestmark = [pytest.mark.distributed, pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(420)]

_WORKER = Path(__file__).resolve().parent / "_options_worker.py"
_world = _load("_world")
#: Seconds one world may take for all its rounds (spawn, torch import, rendezvous, rounds).
DEADLINE_S = 240
CAP = 64
LENGTHS = [5, 9, 3, 12, 7, 1, 8, 4]  # 8 samples: groups of 2 divide them, every one fits

#: option: (the others' value, the odd rank's value, how each shows in the message, the
#: entries it can be given through). Values as the keyword takes them; ``shown`` is what
#: the message says for (others, odd). For
#: num_batches_divided_by and min_num_micro_batch, None plans as 1 and shows as 1.
OPTIONS: dict[str, tuple[Any, Any, tuple[str, str] | None, tuple[str, ...]]] = {
    "force_group_size": (1, 2, ("1", "2"), ("rearrange", "prepare", "dynamic")),
    "num_batches_divided_by": (None, 2, ("1", "2"), ("rearrange", "prepare", "dynamic")),
    "min_num_micro_batch": (None, 2, ("1", "2"), ("rearrange", "prepare", "dynamic")),
    "use_dynamic_bsz_balance": (True, False, ("True", "False"), ("rearrange", "prepare", "dynamic")),
    "heaviest_first": (False, True, ("False", "True"), ("rearrange", "prepare", "dynamic")),
    "pad_to_multiple_of": (1, 4, ("1", "4"), ("rearrange", "prepare", "dynamic")),
    "micro_batch_multiple_of": (1, 4, ("1", "4"), ("rearrange", "prepare", "dynamic")),
    "padded": (False, True, ("False", "True"), ("rearrange", "prepare", "dynamic")),
    "max_samples_per_micro_batch": (None, 2, ("None", "2"), ("rearrange", "prepare", "dynamic")),
    "over_cap": ("raise", "alone", ("'raise'", "'alone'"), ("rearrange", "prepare", "dynamic")),
    "dummy_micro_batches": (False, True, ("False", "True"), ("rearrange", "prepare", "dynamic")),
    "loss_weight_keys": (None, ["w"], ("None", "('w',)"), ("rearrange", "prepare", "dynamic")),
    "workload_model": (None, "hidden_size=64,num_layers=2", ("None", "hidden_size=64,num_layers=2"),
                       ("rearrange", "dynamic", "prepare")),
    "micro_batch_fixed_tokens": (0.05, 0.2, ("0.05", "0.2"), ("rearrange", "prepare", "dynamic")),
    "max_token_len": (CAP, 32, (str(CAP), "32"), ("rearrange", "prepare", "dynamic")),
}

#: Options ``prepare_micro_batches`` reads from the batch (the others: as keywords).
BATCH_KEYS = {"force_group_size", "pad_to_multiple_of", "micro_batch_multiple_of", "padded",
              "max_samples_per_micro_batch", "over_cap", "dummy_micro_batches", "loss_weight_keys",
              "micro_batch_fixed_tokens", "heaviest_first"}

TAIL = ("; every rank of the DP group must plan under the same options and cap, so set them "
        "alike on every rank (keywords, batch settings and SEQLEN_BALANCING_* variables)")


def _call(entry: str, option: str | None = None, value: Any = None, **extra: Any) -> dict[str, Any]:
    """One rank's call: ``option`` set to ``value`` (as a keyword, a batch setting or the cap)."""
    spec: dict[str, Any] = {"entry": entry, "lengths": list(LENGTHS), "cap": CAP, "keywords": {},
                            "settings": {}, **extra}
    if option == "max_token_len":
        spec["cap"] = value
    elif option is not None and value is not None:
        where = "settings" if entry == "prepare" and option in BATCH_KEYS else "keywords"
        spec[where][option] = value
    return spec


def _rank_words(rank: int) -> str:
    return f"rank {rank} (global rank {rank})"  # the world group: group rank = global rank


def _mismatch(name: str, odd: int, odd_is_high: bool, shown: tuple[str, str] | None) -> str:
    """The message every rank must raise, written out: the lowest rank holding the largest
    value and the lowest holding the smallest."""
    other = 0 if odd != 0 else 1
    high, low = (odd, other) if odd_is_high else (other, odd)
    if shown is None:
        differ = f"{_rank_words(high)} and {_rank_words(low)} have different values"
    else:
        high_value, low_value = (shown[1], shown[0]) if odd_is_high else shown
        differ = (f"{_rank_words(high)} has {name}={high_value} and {_rank_words(low)} has "
                  f"{name}={low_value}")
    return f"the ranks passed different {name}: {differ}{TAIL}"


def _rounds(world: int, rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rounds and, for each, what every rank must end with."""
    rounds: list[dict[str, Any]] = []
    want: list[dict[str, Any]] = []
    for number, (name, (base, odd_value, shown, entries)) in enumerate(OPTIONS.items()):
        entry = entries[(number + world) % len(entries)]
        odd = rng.randrange(world)
        calls = [_call(entry, name, odd_value if r == odd else base) for r in range(world)]
        rounds.append({"ranks": calls})
        # which value is the larger as the agreement carries it: the others' for a cap, a
        # True switch or 'raise' below 'alone'; hashes compare as 2**41 + hash > 1, 0 (None)
        odd_is_high = name not in ("use_dynamic_bsz_balance", "max_token_len")
        want.append({"kind": "raised", "type": "ValueError",
                     "message": _mismatch(name, odd, odd_is_high, shown), "what": name})
        rounds.append({"ranks": [_call(entry, name, odd_value) for _ in range(world)]})
        want.append({"kind": "plan", "what": f"{name} alike"})
    for name, values in (("costs", LENGTHS), ("workloads", [3] * len(LENGTHS))):
        odd = rng.randrange(world)
        entry = ("rearrange", "prepare", "dynamic")[world % 3]
        rounds.append({"ranks": [_call(entry, **({name: values} if r == odd else {}))
                                 for r in range(world)]})
        other = 0 if odd != 0 else 1
        want.append({"kind": "raised", "type": "ValueError", "what": name, "message": (
            f"the ranks passed different {name}: {_rank_words(odd)} passes {name} and "
            f"{_rank_words(other)} does not{TAIL}")})
    # A rank's own error and another rank's option: the mismatch is the verdict.
    over = rng.randrange(world)
    differ = (over + 1) % world
    calls = [_call("rearrange", "max_samples_per_micro_batch", 2 if r == differ else None)
             for r in range(world)]
    calls[over]["lengths"] = [*LENGTHS[:-1], CAP + 5]
    rounds.append({"ranks": calls})
    shown = OPTIONS["max_samples_per_micro_batch"][2]
    want.append({"kind": "raised", "type": "ValueError", "what": "mismatch before an error",
                 "message": _mismatch("max_samples_per_micro_batch", differ, True, shown)})
    rounds += _caller_data_rounds(world, rng, want)
    return rounds, want


def _caller_data_rounds(world: int, rng: random.Random, want: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rounds = []
    table = {str(n): 10 * n for n in LENGTHS}
    faulty = rng.randrange(world)
    calls = []
    for r in range(world):
        # the faulty rank's lengths hold one its table lacks: KeyError while map() is iterated
        lengths = [*LENGTHS[:-1], 99] if r == faulty else list(LENGTHS)
        calls.append({**_call("rearrange"), "lengths": lengths, "cap": 128,
                      "workloads": {"kind": "map", "table": table}})
    rounds.append({"ranks": calls})
    want.append({"kind": "raised", "type": "ValueError", "what": "workloads map raises", "message": (
        f"rank {faulty} of the DP group (global rank {faulty}): reading workloads raised KeyError: "
        "the workloads given (or what their callable returned) must be read whole, one number "
        "per sample; fix the workloads or the callable")})
    faulty = rng.randrange(world)
    rounds.append({"ranks": [_call("dynamic", costs={"kind": "raising"} if r == faulty else list(LENGTHS))
                             for r in range(world)]})
    want.append({"kind": "raised", "type": "ValueError", "what": "costs raise", "message": (
        f"rank {faulty} of the DP group (global rank {faulty}): reading costs raised "
        "ZeroDivisionError: the costs given (or what their callable returned) must be read "
        "whole, one number per sample; fix the costs or the callable")})
    faulty = rng.randrange(world)
    rounds.append({"ranks": [_call("rearrange", costs={"kind": "dict", "values": LENGTHS}
                                   if r == faulty else list(LENGTHS)) for r in range(world)]})
    want.append({"kind": "raised", "type": "TypeError", "what": "costs a dict", "message": (
        f"rank {faulty} of the DP group (global rank {faulty}): costs must be a sequence of whole "
        "numbers of tokens, one per sample (a list, a tuple, a 1-D tensor or array), got a value "
        "of type dict")})
    return rounds


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ranks_asked_for_other_options_all_raise_the_same_error(world: int, tmp_path: Path) -> None:
    rounds, want = _rounds(world, random.Random(30 + world))
    records = _world.run_world(_WORKER, world, rounds, tmp_path, DEADLINE_S)
    for rank_records in records:
        assert [r["round"] for r in rank_records] == list(range(len(rounds)))
    for number, expected in enumerate(want):
        got = [records[rank][number] for rank in range(world)]
        where = f"round {number} ({expected['what']}): {rounds[number]['ranks']}\n-> {got}"
        if expected["kind"] == "plan":
            assert all("count" in record for record in got), where
            assert len({record["count"] for record in got}) == 1, where
            for record in got:
                assert sorted(i for part in record["plan"] for i in part) == list(range(len(LENGTHS)))
            continue
        assert all(record.get("raised") == expected["type"] for record in got), where
        assert {record["message"] for record in got} == {expected["message"]}, where


#: Two ranks that each need 5 micro-batches of 50 tokens alone (a lock-step choice once
#: gave them 6 when a micro-batch cost nothing beyond its tokens).
LOCKSTEP = [[20, 34, 28, 15, 27, 30, 34, 18, 12, 16], [26, 15, 17, 37, 28, 15, 32, 19, 21, 20]]


def test_micro_batch_fixed_tokens_leaves_the_agreed_count_at_the_fewest_on_gloo_ranks(tmp_path: Path) -> None:
    """Through the real all_reduce, at micro_batch_fixed_tokens 0 and 0.2 alike: 5 micro-batches
    (the most either rank needs alone), each rank's plan the one plan_data_parallel gives
    (the same encoding, MAX and decoding in one process), on every entry point."""
    from seqlen_balancing import plan_data_parallel, plan_micro_batches

    alone = max(len(plan_micro_batches(lens, 50)) for lens in LOCKSTEP)
    assert alone == 5
    rounds, want = [], []
    for overhead in (0.0, 0.2):
        for entry in ("rearrange", "prepare", "dynamic"):
            where = "settings" if entry == "prepare" else "keywords"
            rounds.append({"ranks": [{"entry": entry, "lengths": lens, "cap": 50, "keywords": {},
                                      "settings": {}, where: {"micro_batch_fixed_tokens": overhead}}
                                     for lens in LOCKSTEP]})
            want.append(plan_data_parallel(LOCKSTEP, 50, micro_batch_fixed_tokens=overhead))
    records = _world.run_world(_WORKER, 2, rounds, tmp_path, DEADLINE_S)
    for number, plans in enumerate(want):
        got = [records[rank][number] for rank in range(2)]
        assert [record.get("count") for record in got] == [alone, alone], got
        assert [record["plan"] for record in got] == plans


def test_an_overhead_beyond_a_float_on_one_rank_is_every_ranks_error(tmp_path: Path) -> None:
    """Issue 46: ``micro_batch_fixed_tokens=10**400`` on one rank (``float()`` overflows) and 0.05
    on the other, on every entry point: both ranks raise the same ValueError naming the
    option and the rank at fault, through the agreement (no rank left in the collective)."""
    rounds, want = [], []
    for odd, entry in ((0, "rearrange"), (1, "prepare"), (1, "dynamic")):
        values = [10**400 if r == odd else 0.05 for r in range(2)]
        rounds.append({"ranks": [_call(entry, "micro_batch_fixed_tokens", value) for value in values]})
        want.append(f"rank {odd} of the DP group (global rank {odd}): micro_batch_fixed_tokens must be "
                    "a finite number >= 0 (the "
                    "fixed cost of one micro-batch in tokens of linear work), got a "
                    "negative, infinite or NaN value, or one beyond a float; pass e.g. 819.2")
    rounds.append({"ranks": [_call("rearrange", "micro_batch_fixed_tokens", 0.05) for _ in range(2)]})
    records = _world.run_world(_WORKER, 2, rounds, tmp_path, DEADLINE_S)
    assert [len(r) for r in records] == [len(rounds)] * 2, records  # no rank stopped or hung
    for number, message in enumerate(want):
        got = [records[rank][number] for rank in range(2)]
        assert [(r.get("raised"), r.get("message")) for r in got] == [("ValueError", message)] * 2, got
    # the group goes on: 49 tokens a rank fit one micro-batch of 64
    assert [records[rank][-1].get("count") for rank in range(2)] == [1, 1]


def test_heaviest_first_on_two_gloo_ranks(tmp_path: Path) -> None:
    """Issue 47, item 4: with the option on both ranks each orders its micro-batches heaviest
    first (the rule summed by hand) at the agreed count, on every entry point; with it on one
    rank only (a keyword, or the batch's setting), both raise the same error naming it."""
    from seqlen_balancing import plan_data_parallel

    def heaviest(plan: list[list[int]], lens: list[int]) -> list[list[int]]:
        return sorted(plan, key=lambda mb: (-sum(24576 * lens[i] + lens[i] ** 2 for i in mb), mb[0]))

    rounds: list[dict[str, Any]] = []
    for entry in ("rearrange", "prepare", "dynamic"):
        where = "settings" if entry == "prepare" else "keywords"
        rounds.append({"ranks": [{"entry": entry, "lengths": lens, "cap": 50, "keywords": {},
                                  "settings": {}, where: {"heaviest_first": True}} for lens in LOCKSTEP]})
    for odd, entry in ((1, "rearrange"), (0, "prepare"), (1, "dynamic")):
        rounds.append({"ranks": [_call(entry, "heaviest_first", r == odd) for r in range(2)]})
    records = _world.run_world(_WORKER, 2, rounds, tmp_path, DEADLINE_S)
    assert [len(r) for r in records] == [len(rounds)] * 2, records
    want = plan_data_parallel(LOCKSTEP, 50, heaviest_first=True)
    for number in range(3):
        plans = [records[rank][number]["plan"] for rank in range(2)]
        assert plans == want, (number, plans)
        assert [len(plan) for plan in plans] == [5, 5]
        assert plans == [heaviest(plan, lens) for plan, lens in zip(plans, LOCKSTEP, strict=True)]
    for number, odd in ((3, 1), (4, 0), (5, 1)):
        got = [records[rank][number] for rank in range(2)]
        message = _mismatch("heaviest_first", odd, True, ("False", "True"))
        assert [(r.get("raised"), r.get("message")) for r in got] == [("ValueError", message)] * 2, got
