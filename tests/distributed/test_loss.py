"""The step-wide loss normaliser on 2 gloo ranks (issue 47, item 5).

The oracle: one process holding every row of both ranks takes the gradient of the step's
token-mean loss, ``sum(token_loss * loss_mask) / sum(loss_mask)``, in one pass with no plan.
On the ranks (``_loss_worker.py``): a random split of the rows into micro-batches of random
sizes, with dummies (a micro-batch of zero-weight copies) and filler rows (zero-weight
copies inside a micro-batch), ``step_loss_scales`` of them (or of their token counts), the
scaled summed losses accumulated, the gradients averaged over the ranks as DDP does (or
summed, ``average_gradients=False``): equal to the oracle within 1e-12, on every rank. A
rank that cannot count makes both raise the same error naming it, and the group goes on.
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


pytestmark = [pytest.mark.distributed, pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(300)]

_WORKER = Path(__file__).resolve().parent / "_loss_worker.py"
_world = _load("_world")
_worker = _load("_loss_worker")
DEADLINE_S = 180
WORLD = 2


def oracle_grads(seed: int, n: int) -> list[list[float]]:
    """The full step's token-mean gradient: every row of every rank, one pass."""
    ids, mask = _worker.step_rows(seed, n)
    net = _worker.model()
    ((_worker.token_losses(net, ids) * mask).sum() / mask.sum()).backward()
    return [p.grad.flatten().tolist() for p in net.parameters()]


def split(rng: random.Random, rows: list[int], n: int) -> list[list[list[int]]]:
    """``rows`` cut into micro-batches of random sizes, with filler rows and dummies."""
    rows = rows[:]
    rng.shuffle(rows)
    out: list[list[list[int]]] = []
    while rows:
        take = rng.randint(1, 4)
        mb = [[row, 1] for row in rows[:take]]
        rows = rows[take:]
        mb += [[rng.choice(mb)[0], 0] for _ in range(rng.choice([0, 0, 1, 2]))]  # filler rows
        out.append(mb)
    for _ in range(rng.choice([0, 1, 2])):  # dummies: copies of a row with no loss weight
        out.insert(rng.randint(0, len(out)), [[rng.randrange(n), 0]] * rng.randint(1, 2))
    return out


def rounds_of(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    n = rng.randint(6, 12)
    rows = list(range(n))
    cut = rng.randint(0, n)  # one rank may hold no row at all: it runs dummies only
    mine = [rows[:cut], rows[cut:]]
    calls = []
    for rank in range(WORLD):
        mbs = split(rng, mine[rank], n) or [[[0, 0]]]  # a rank with no row runs one dummy
        calls.append({"seed": seed, "n": n, "micro_batches": mbs, "form": rng.choice(["batches", "counts"]),
                      "average": seed % 2 == 0})
    return [{"ranks": calls}]


def test_the_scaled_micro_batches_give_the_full_steps_gradient(tmp_path: Path) -> None:
    seeds = list(range(6))  # a rank with no row (2), token counts (3-5), both conventions
    rounds = [r for seed in seeds for r in rounds_of(seed)]
    # rank 1 cannot count (no such entry): both raise the same error; then the group goes on
    bad = [{**call, "form": "batches"} for call in rounds_of(99)[0]["ranks"]]
    bad[1]["loss_key"] = "weights"
    # rank 1's weights cannot reach the host (a meta device): both raise, before any hang
    meta = [{**call, "form": "batches"} for call in rounds_of(98)[0]["ranks"]]
    meta[1]["meta"] = True
    rounds += [{"ranks": bad}, {"ranks": meta}, rounds_of(100)[0]]
    records = _world.run_world(_WORKER, WORLD, rounds, tmp_path, DEADLINE_S)
    assert [len(r) for r in records] == [len(rounds)] * WORLD, records
    said = {99: "micro-batch 0: it has no 'weights' entry (it holds ['input_ids', 'loss_mask']); pass "
                "loss_key= the entry of loss weights (verl: loss_mask in SFT, response_mask in PPO)",
            98: "the loss weights cannot be copied to the host: Cannot copy out of meta tensor; no data!"}
    for number, seed in enumerate([*seeds, 99, 98, 100]):
        got = [records[rank][number] for rank in range(WORLD)]
        calls = rounds[number]["ranks"]
        if seed in said:
            message = f"rank 1 of the DP group (global rank 1): step_loss_scales: {said[seed]}"
            assert [(r.get("raised"), r.get("message")) for r in got] == [("ValueError", message)] * 2
            continue
        _, mask = _worker.step_rows(seed, calls[0]["n"])
        total = int(mask.sum())  # every real row once: the filler rows and dummies weigh 0
        assert [r["total"] for r in got] == [total] * WORLD, (seed, got)
        scale = (WORLD if calls[0]["average"] else 1) / total
        for rank, record in enumerate(got):
            assert record["scales"] == [scale] * len(calls[rank]["micro_batches"])
            by_hand = [sum(int(mask[row].sum()) * weight for row, weight in mb)
                       for mb in calls[rank]["micro_batches"]]
            assert record["tokens"] == by_hand
        want = oracle_grads(seed, calls[0]["n"])
        for record in got:
            worst = max(abs(a - b) for g, w in zip(record["grads"], want, strict=True)
                        for a, b in zip(g, w, strict=True))
            assert worst <= 1e-12, (seed, worst)
