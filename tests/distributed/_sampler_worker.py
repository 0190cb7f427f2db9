"""Worker of tests/distributed/test_sampler.py: one gloo rank (CPU, float64).

Run as ``python _sampler_worker.py SCENARIO RANK WORLD_SIZE INIT_METHOD OUT_DIR``; writes
``OUT_DIR/rank{RANK}.json``.

* ``steps``: every rank builds ``DistributedSampler`` and ``BalancedDistributedSampler``
  from the process group (``num_replicas`` and ``rank`` left ``None``) and all-gathers
  its rows of every step of two epochs.
* ``loss``: a tiny language model (embedding + linear, float64) trains one step with
  each sampler from the same weights: each rank sums the next-token losses of its rows
  (micro-batch by micro-batch with the balanced sampler), divides by the token count
  summed over the ranks (verl 0.9.1's SFT normalisation), and the loss and gradients are
  summed over the ranks; the output holds both samplers' loss and gradient.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from seqlen_balancing import BalancedDistributedSampler

ROWS, BATCH, CAP, VOCAB = 96, 6, 2048, 37


def lengths() -> list[int]:
    generator = torch.Generator().manual_seed(1234)
    # long-tailed: mostly short rows, a few long ones
    short = torch.randint(8, 200, (ROWS,), generator=generator)
    long = torch.randint(200, 1500, (ROWS,), generator=generator)
    pick = torch.rand(ROWS, generator=generator) < 0.2
    return torch.where(pick, long, short).tolist()


def tokens(row: int, length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(row))


def gathered(value: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def steps() -> dict[str, Any]:
    sizes = lengths()
    ours = BalancedDistributedSampler(range(ROWS), lengths=sizes, batch_size=BATCH, max_token_len=CAP)
    theirs = DistributedSampler(range(ROWS))
    out: dict[str, Any] = {"num_replicas": ours.num_replicas, "rank": ours.rank, "epochs": []}
    for epoch in (0, 1):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        mine, dealt = list(ours), list(theirs)
        counts = [ours.step_plan(t).count for t in range(ours.steps)]
        out["epochs"].append({"ours": gathered(mine), "theirs": gathered(dealt), "counts": gathered(counts)})
    return out


def one_step(micro_batches: list[list[int]], sizes: list[int]) -> tuple[float, list[float]]:
    """The summed (over ranks) loss and gradient of one step from these micro-batches."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
    local_tokens = sum(sizes[i] - 1 for mb in micro_batches for i in mb)
    total = torch.tensor(float(local_tokens))
    dist.all_reduce(total)  # the token count of the global batch, as verl all-gathers it
    loss_sum = torch.zeros(())
    for mb in micro_batches:  # gradient accumulation over micro-batches
        loss = torch.zeros(())
        for i in mb:
            ids = tokens(i, sizes[i])
            logits = model(ids[:-1])
            loss = loss + torch.nn.functional.cross_entropy(logits, ids[1:], reduction="sum")
        (loss / total).backward()
        loss_sum += loss.detach() / total
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    dist.all_reduce(loss_sum)
    dist.all_reduce(grads)
    return float(loss_sum), grads.tolist()


def loss() -> dict[str, Any]:
    torch.set_default_dtype(torch.float64)
    sizes = lengths()
    ours = BalancedDistributedSampler(range(ROWS), lengths=sizes, batch_size=BATCH, max_token_len=CAP)
    theirs = DistributedSampler(range(ROWS))
    step = 1  # the second step of epoch 0
    plan = ours.step_plan(step)
    balanced = one_step(plan.rank_micro_batches[ours.rank], sizes)
    dealt_rows = list(theirs)[step * BATCH : (step + 1) * BATCH]
    dealt = one_step([dealt_rows], sizes)
    mine = plan.rank_samples[ours.rank]
    return {"balanced": balanced, "dealt": dealt, "mine": mine, "dealt_rows": dealt_rows}


def main() -> None:
    scenario, rank, world, init_method, out_dir = sys.argv[1:6]
    dist.init_process_group("gloo", init_method=init_method, rank=int(rank), world_size=int(world),
                            timeout=datetime.timedelta(seconds=60))
    try:
        result = {"steps": steps, "loss": loss}[scenario]()
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
