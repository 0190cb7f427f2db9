"""Never worse than verl 0.9.1 on a DP group: the count, and at verl's count the spread.

verl's own ``rearrange_micro_batches`` runs on every rank of a simulated DP group: one
thread per rank, verl's ``torch.distributed`` calls answered by an in-process group (its
``all_reduce`` MAX and MIN over the threads' tensors), so verl's count agreement and retry
loop run as they do on real ranks. The library plans the same ranks with
``plan_data_parallel`` (the real encoding, MAX and decoding of the one collective).

On every step verl does not fail on:

* the library's agreed count is the largest count a rank needs alone
  (``plan_micro_batches`` per rank), and at most verl's;
* where the counts are equal, each rank's workload spread (heaviest micro-batch minus
  lightest) is at most verl's on that rank.

The modeled lock-step time (for each micro-batch index, the slowest rank's workload
``24576*s + s**2`` summed, plus count x ``f x 24576 x max_token_len``) is printed against
verl's, not asserted: the library plans at the fewest, and a rank's plan is not traded
for verl's to win a modeled tie (docs/step-time.md).
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Sequence
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from seqlen_balancing.data import load_champ_lengths

pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(600)]

OVERHEADS = (0.0, 0.05, 0.2)
STEPS = 160


def workload(s: int) -> int:
    return 24576 * s + s * s


class ThreadGroup:
    """``torch.distributed`` as verl's module calls it, for ``size`` threads in one process:
    ``all_reduce`` waits for every thread, then each takes the element-wise MAX (or MIN)."""

    ReduceOp = SimpleNamespace(MAX="max", MIN="min")

    def __init__(self, size: int) -> None:
        self.size = size
        self.local = threading.local()
        self.barrier = threading.Barrier(size)
        self.inbox: list[torch.Tensor | None] = [None] * size

    def is_initialized(self) -> bool:
        return True

    def all_reduce(self, tensor: torch.Tensor, op: Any = None, group: Any = None) -> None:
        self.inbox[self.local.rank] = tensor.clone()
        self.barrier.wait()
        stacked = torch.stack([t for t in self.inbox if t is not None])
        reduced = stacked.max(0).values if op == "max" else stacked.min(0).values
        self.barrier.wait()  # every rank has read the inbox before anyone writes again
        tensor.copy_(reduced)


def _batch(lengths: list[int]) -> TensorDict:
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64)
    ids = torch.nested.nested_tensor_from_jagged(torch.zeros(int(offsets[-1]), dtype=torch.int8), offsets)
    return TensorDict({"input_ids": ids}, batch_size=[len(lengths)])


def verl_plans(verl: ModuleType, monkeypatch: pytest.MonkeyPatch, ranks: list[list[int]], cap: int
               ) -> list[list[list[int]]] | None:
    """verl's index lists on every rank of the simulated group, or ``None`` where it fails."""
    group = ThreadGroup(len(ranks))
    monkeypatch.setattr(verl, "dist", group)
    out: list[Any] = [None] * len(ranks)

    def run(rank: int) -> None:
        group.local.rank = rank
        try:
            _, indices = verl.rearrange_micro_batches(_batch(ranks[rank]), max_token_len=cap,
                                                      dp_group=object())
            out[rank] = [list(part) for part in indices]
        except (ValueError, AssertionError) as error:
            out[rank] = error

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(ranks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if any(not isinstance(plan, list) for plan in out):
        return None
    return out


def lock_step(plans: Sequence[Sequence[Sequence[int]]], ranks: list[list[int]], cap: int, f: float) -> float:
    count = len(plans[0])
    assert all(len(plan) == count for plan in plans)
    slowest = sum(max(sum(workload(ranks[r][i]) for i in plans[r][k]) for r in range(len(ranks)))
                  for k in range(count))
    return slowest + count * f * 24576 * cap


def draw(rng: random.Random, champ: list[int]) -> tuple[list[list[int]], int]:
    """A step dealt as DistributedSampler deals (rank r every dp-th row), 2-4 ranks."""
    dp = rng.choice([2, 3, 4])
    per = rng.randint(4, 24)
    cap = rng.choice([4096, 8192, 16384])
    scale = rng.choice([1, 1, 2, 4])
    rows = [min(cap, scale * rng.choice(champ)) for _ in range(dp * per)]
    if rng.random() < 0.3:  # PPO's balance step first: ranks of even workload
        rows.sort(key=workload, reverse=True)
        rows = [rows[i] for start in range(0, len(rows), dp) for i in
                (range(start, min(start + dp, len(rows))) if start // dp % 2 == 0
                 else reversed(range(start, min(start + dp, len(rows)))))]
    return [rows[r::dp] for r in range(dp)], cap


def spread(plan: Sequence[Sequence[int]], lengths: list[int]) -> int:
    loads = [sum(workload(lengths[i]) for i in part) for part in plan]
    return max(loads) - min(loads)


def test_the_count_is_never_above_verl_s_nor_at_verl_s_count_the_spread(
    verl: ModuleType, ours: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(3102)
    champ = load_champ_lengths()
    checked = fewer = fails = 0
    ratios: list[float] = []
    for _ in range(STEPS):
        ranks, cap = draw(rng, champ)
        theirs = verl_plans(verl, monkeypatch, ranks, cap)
        if theirs is None:
            fails += 1
            continue
        v = len(theirs[0])
        mine = ours.plan_data_parallel(ranks, cap)
        alone = max(len(ours.plan_micro_batches(lengths, cap)) for lengths in ranks)
        assert [len(plan) for plan in mine] == [alone] * len(ranks)
        assert alone <= v, (ranks, cap, alone, v)  # the count guarantee
        if alone == v:
            for lengths, m, t in zip(ranks, mine, theirs, strict=True):
                assert spread(m, lengths) <= spread(t, lengths), (lengths, cap, m, t)
        checked += 1
        fewer += alone < v
        for f in OVERHEADS:
            ratios.append(lock_step(mine, ranks, cap, f) / lock_step(theirs, ranks, cap, f) - 1)
    assert checked >= STEPS * 3 // 4  # verl fails on few steps (a sample over the cap: clipped here)
    with capsys.disabled():
        print(f"\nvs verl 0.9.1 ({STEPS} steps): {checked} checked, fewer micro-batches on {fewer}; "
              f"verl fails {fails} steps; modeled step time over {len(ratios)} (step, overhead): "
              f"mean {sum(ratios) / len(ratios):+.2%}, worst {max(ratios):+.2%}, best {min(ratios):+.2%}")
