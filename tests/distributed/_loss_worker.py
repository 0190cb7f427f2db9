"""Worker of ``test_loss.py`` (issue 47, item 5): one gloo rank accumulating a step's gradient.

Run as a script, one process per rank::

    python _loss_worker.py ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR

Each round gives this rank its micro-batches as lists of ``[row, weight]`` pairs over the
step's rows (:func:`step_rows`, built alike here and in the test from a seed): weight 1 is a
real row, weight 0 a filler row or a dummy's (its loss mask zeroed). The rank takes
``step_loss_scales`` of them (its micro-batches, or their token counts), accumulates
``scale * summed token loss`` and averages (or sums) the gradients over the ranks as DDP
would; its record is the gradient, or the error raised.
"""

from __future__ import annotations

import random
import sys
from typing import Any

PG_TIMEOUT_S = 60
VOCAB, WIDTH, HIDDEN = 23, 9, 5


def step_rows(seed: int, n: int) -> tuple[Any, Any]:
    """The step's ``n`` rows: token ids and loss mask (right-padded, some rows' prompts
    masked), the same in every process for a seed."""
    import torch

    rng = random.Random(seed)
    ids, mask = torch.zeros(n, WIDTH, dtype=torch.long), torch.zeros(n, WIDTH, dtype=torch.long)
    for row in range(n):
        length = rng.randint(1, WIDTH)
        prompt = rng.randint(0, length - 1)
        ids[row, :length] = torch.tensor([rng.randrange(1, VOCAB) for _ in range(length)])
        mask[row, prompt:length] = 1
    return ids, mask


def model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, HIDDEN), torch.nn.Linear(HIDDEN, VOCAB)).double()


def token_losses(net: Any, ids: Any) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(net(ids).transpose(1, 2), ids.roll(-1, 1), reduction="none")


def micro_batch(ids: Any, mask: Any, pairs: list[list[int]]) -> Any:
    import torch
    from tensordict import TensorDict

    rows = torch.tensor([row for row, _ in pairs])
    weights = torch.tensor([weight for _, weight in pairs]).unsqueeze(1)
    return TensorDict({"input_ids": ids[rows], "loss_mask": mask[rows] * weights}, [len(pairs)])


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from seqlen_balancing import step_loss_scales

    ids, mask = step_rows(spec["seed"], spec["n"])
    net = model()
    mbs = [micro_batch(ids, mask, pairs) for pairs in spec["micro_batches"]]
    given = [int(mb["loss_mask"].sum()) for mb in mbs] if spec["form"] == "counts" else mbs
    if spec.get("meta"):  # weights on a device that cannot copy them to the host
        given = [mb.to("meta") for mb in mbs]
    try:
        step = step_loss_scales(given, group, spec.get("loss_key", "loss_mask"),
                                average_gradients=spec["average"])
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    for mb, scale in zip(mbs, step.scales, strict=True):
        (scale * (token_losses(net, mb["input_ids"]) * mb["loss_mask"]).sum()).backward()
    grads = []
    for p in net.parameters():
        grad = torch.zeros_like(p) if p.grad is None else p.grad
        dist.all_reduce(grad, group=group)  # SUM; DDP then divides by the world
        grads.append((grad / dist.get_world_size(group) if spec["average"] else grad).flatten().tolist())
    return {"grads": grads, "total": step.total_tokens, "scales": step.scales, "tokens": step.tokens}


if __name__ == "__main__":
    from _world import exit_now, play_rounds  # beside this script

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
