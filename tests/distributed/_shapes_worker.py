"""Worker of ``test_shapes.py`` (issue 32): one gloo rank playing every scenario.

Run as a script, one process per rank (``_world.py``'s ``run_world``)::

    python _shapes_worker.py ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR

Groups of any size kept whole (``group_ids``) and a rank with no samples under
``dummy_micro_batches=True``, through ``rearrange_micro_batches`` with ``dp_group`` set;
each scenario's outcome is recorded as plain data, the test judges it.
"""

from __future__ import annotations

import sys
from typing import Any

PG_TIMEOUT_S = 30
VOCAB, WIDTH, HIDDEN = 11, 9, 6

#: Scenario ``empty_*``: rank 0's three samples each need a micro-batch of their own under
#: the cap (7 tokens); rank 1 has none and runs three dummies.
EMPTY_LENGTHS = {0: [7, 6, 5], 1: []}
EMPTY_CAP = 7


def _batch(lengths: list[int], seed: int, extra: dict[str, Any] | None = None) -> Any:
    import torch
    from tensordict import TensorDict

    generator = torch.Generator().manual_seed(seed)
    n = len(lengths)
    mask = torch.zeros(n, WIDTH, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    tokens = torch.randint(0, VOCAB, (n, WIDTH), generator=generator) * mask
    weight = mask.clone()
    weight[:, :1] = 0
    entries = {"input_ids": tokens, "attention_mask": mask, "loss_mask": weight, "row": torch.arange(n)}
    return TensorDict({**entries, **(extra or {})}, batch_size=[n])


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, HIDDEN), torch.nn.Linear(HIDDEN, VOCAB)).double()


def _summed_loss(model: Any, batch: Any) -> Any:
    import torch

    logits = model(batch["input_ids"])[:, :-1]
    target = batch["input_ids"][:, 1:]
    losses = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1),
                                               reduction="none").reshape(target.shape)
    return (losses * batch["loss_mask"][:, 1:]).sum()


def _empty(rank: int, group: Any, source: str) -> dict[str, Any]:
    """Loss and gradients with an empty rank's dummies against the real rows alone."""
    import torch
    import torch.distributed as dist
    from tensordict import TensorDict

    from seqlen_balancing import rearrange_micro_batches

    batch = _batch(EMPTY_LENGTHS[rank], seed=20 + rank)
    template = None
    if rank == 1 and source == "template":
        template, batch = _batch([3, 2], seed=99), TensorDict({}, batch_size=[0])
    reference = _model()
    loss = _summed_loss(reference, batch) if rank == 0 else torch.zeros((), dtype=torch.float64)
    if rank == 0:
        loss.backward()
    ref_loss = loss.detach().clone()
    dist.all_reduce(ref_loss, group=group)
    ref_grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                 for p in reference.parameters()]
    for grad in ref_grads:
        dist.all_reduce(grad, group=group)
    model = _model()
    micro_batches, plan = rearrange_micro_batches(batch, EMPTY_CAP, dp_group=group,
                                                  dummy_micro_batches=True, dummy_template=template)
    total = torch.zeros((), dtype=torch.float64)
    for micro_batch in micro_batches:
        step = _summed_loss(model, micro_batch)
        step.backward()
        total += step.detach()
        sync = torch.ones(1)
        dist.all_reduce(sync, group=group)  # a gradient sync per micro-batch stays in step
    dist.all_reduce(total, group=group)
    grads = [p.grad.detach().clone() for p in model.parameters()]
    for grad in grads:
        dist.all_reduce(grad, group=group)
    return {
        "count": len(micro_batches), "plan": plan,
        "rows": [int(mb.batch_size[0]) for mb in micro_batches],
        "tokens": [int(mb["attention_mask"].sum()) for mb in micro_batches],
        "weights": [float(mb["loss_mask"].abs().sum()) for mb in micro_batches],
        "keys": sorted(micro_batches[0].keys()),
        "loss": float(total), "ref_loss": float(ref_loss),
        "grad_diff": max(float((a - b).abs().max()) for a, b in zip(grads, ref_grads, strict=True)),
    }


def _groups(rank: int, group: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """The round's lengths and ids (a ``NonTensorStack`` entry named by ``group_ids``):
    the exception, or the index lists, each micro-batch's ``row`` entries and the restore."""
    import torch
    from tensordict import NonTensorStack

    from seqlen_balancing import rearrange_micro_batches, restore_dynamic_batch

    lengths, ids = spec["lengths"], spec["ids"]
    batch = _batch(lengths, seed=rank)
    if ids is not None:
        batch["uid"] = NonTensorStack(*ids)
    try:
        micro_batches, plan = rearrange_micro_batches(
            batch, spec["cap"], dp_group=group, group_ids=None if ids is None else "uid",
            dummy_micro_batches=spec.get("dummies", False), over_cap=spec.get("over_cap", "raise"))
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    restored = restore_dynamic_batch(torch.cat([mb["input_ids"] for mb in micro_batches]), plan)
    return {"plan": plan, "rows": [mb["row"].tolist() for mb in micro_batches],
            "restored": bool(torch.equal(restored, batch["input_ids"]))}


def _outcome(call: Any) -> dict[str, Any]:
    try:
        micro_batches, plan = call()
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    return {"count": len(micro_batches), "plan": plan}


class _Proto:
    """A DataProto-like object (verl's shape: batch, non_tensor_batch, meta_info, from_dict)."""

    def __init__(self, batch: Any, non_tensor_batch: dict[str, Any], meta_info: Any = None) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info or {}

    @classmethod
    def from_dict(cls, tensors: dict[str, Any], non_tensors: dict[str, Any], meta_info: Any = None) -> Any:
        from tensordict import TensorDict

        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def _proto(rank: int, group: Any) -> dict[str, Any]:
    """prepare_dynamic_batch on DataProtos: rank 0 groups by verl's ``uid`` array, rank 1
    has no samples and copies a template's row."""
    import numpy as np

    from seqlen_balancing import prepare_dynamic_batch

    uids = ["a", "b", "a", "c", "b"]
    if rank == 0:
        data = _Proto(_batch([4, 3, 2, 5, 4], seed=0), {"uid": np.array(uids, dtype=object)})
        template = None
    else:
        data = _Proto(_batch([], seed=1), {"uid": np.array([], dtype=object)})
        template = _Proto(_batch([2], seed=2), {"uid": np.array(["t"], dtype=object)})
    parts, plan = prepare_dynamic_batch(data, 7, dp_group=group, group_ids="uid",
                                        dummy_micro_batches=True, dummy_template=template)
    return {"plan": plan, "uids": [list(p.non_tensor_batch["uid"]) for p in parts],
            "weights": [float(p.batch["loss_mask"].sum()) for p in parts]}


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    import torch.distributed as dist
    from tensordict import TensorDict

    from seqlen_balancing import rearrange_micro_batches

    rank, name = dist.get_rank(group), spec["scenario"]
    if name in ("empty_columns", "empty_template"):
        return {"scenario": name, **_empty(rank, group, name.split("_")[1])}
    if name == "proto":
        return {"scenario": name, **_proto(rank, group)}
    if name == "empty_without_option":
        batch = _batch(EMPTY_LENGTHS[rank], seed=rank)
        return {"scenario": name, **_outcome(lambda: rearrange_micro_batches(batch, 7, dp_group=group))}
    if name == "empty_nothing_to_copy":
        batch = _batch([5, 4], seed=rank) if rank == 0 else TensorDict({}, batch_size=[0])
        return {"scenario": name, **_outcome(lambda: rearrange_micro_batches(
            batch, 7, dp_group=group, dummy_micro_batches=True))}
    return {"scenario": name, **_groups(rank, group, spec)}


if __name__ == "__main__":
    from _world import exit_now, play_rounds  # beside this script

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
