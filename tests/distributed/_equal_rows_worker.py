"""Worker of ``test_equal_rows.py`` (issue 32 item 1): one gloo rank playing every scenario.

Run through ``_world.run_world`` (one process per rank); each scenario appends one JSON
line, then a fence. The test judges the records against rules written there.
"""

from __future__ import annotations

import sys
from typing import Any

PG_TIMEOUT_S = 30
VOCAB, WIDTH, HIDDEN = 11, 9, 6

#: Scenario ``gradients``: rank 0 needs 3 micro-batches under 12 tokens, rank 1 alone 2;
#: at the agreed 3 both run micro-batches of the same rows, short ones topped up.
GRADIENT_LENGTHS = {0: [7, 6, 5, 4, 3, 2, 2, 1], 1: [6, 6, 5, 3, 2]}
GRADIENT_CAP = 12

#: Scenario ``poisoned``: rank 0's twelve 1-token rows take 6 rows per micro-batch at the
#: agreed 2; rank 1's two full rows cannot take a single filler row.
POISONED_LENGTHS = {0: [1] * 12, 1: [9, 9]}
POISONED_CAP = 9


def _batch(lengths: list[int], seed: int) -> Any:
    import torch
    from tensordict import TensorDict

    generator = torch.Generator().manual_seed(seed)
    n = len(lengths)
    mask = torch.zeros(n, WIDTH, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    tokens = torch.randint(1, VOCAB, (n, WIDTH), generator=generator) * mask
    weight = mask.clone()
    weight[:, 0] = 0  # the loss weights: the tokens after the first of each row
    return TensorDict({"input_ids": tokens, "attention_mask": mask, "loss_mask": weight,
                       "row": torch.arange(n)}, batch_size=[n])


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, HIDDEN), torch.nn.Linear(HIDDEN, VOCAB)).double()


def _token_losses(model: Any, batch: Any) -> Any:
    import torch

    logits = model(batch["input_ids"])[:, :-1]
    target = batch["input_ids"][:, 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, VOCAB), target.reshape(-1), reduction="none").reshape(target.shape)


def _run(model: Any, micro_batches: list[Any], tokens: Any, group: Any) -> tuple[Any, list[Any], list[Any]]:
    """The loss of every micro-batch (weighted by the loss weights, divided by the real
    tokens of the whole step), backward per micro-batch, a collective per micro-batch (a
    gradient sync's), then the gradients summed over the ranks."""
    import torch
    import torch.distributed as dist

    total = torch.zeros((), dtype=torch.float64)
    outputs = []
    for micro_batch in micro_batches:
        loss = (_token_losses(model, micro_batch) * micro_batch["loss_mask"][:, 1:]).sum() / tokens
        loss.backward()
        total += loss.detach()
        outputs.append(_token_losses(model, micro_batch).detach())
        dist.all_reduce(torch.ones(1), group=group)
    dist.all_reduce(total, group=group)
    grads = [p.grad.detach().clone() for p in model.parameters()]
    for grad in grads:
        dist.all_reduce(grad, group=group)
    return total, grads, outputs


def scenario_gradients(rank: int, group: Any) -> dict[str, Any]:
    """Filler rows against the filler-free run: loss, gradients (float64), restore."""
    import torch
    import torch.distributed as dist

    from seqlen_balancing import rearrange_micro_batches, restore_dynamic_batch

    batch = _batch(GRADIENT_LENGTHS[rank], seed=20 + rank)
    tokens = batch["loss_mask"][:, 1:].sum().double()
    dist.all_reduce(tokens, group=group)  # the real tokens of the whole step
    plain, _ = rearrange_micro_batches(batch, GRADIENT_CAP, dp_group=group)
    ref_loss, ref_grads, _ = _run(_model(), plain, tokens, group)
    micro_batches, plan = rearrange_micro_batches(batch, GRADIENT_CAP, dp_group=group,
                                                  equal_rows_per_micro_batch=True)
    loss, grads, outputs = _run(_model(), micro_batches, tokens, group)
    grad_diff = max(float((a - b).abs().max()) for a, b in zip(grads, ref_grads, strict=True))
    reference = _token_losses(_model(), batch).detach()
    parts = [[int(i) for i in part] for part in plan]
    return {
        "count": len(micro_batches),
        "plain_count": len(plain),
        "plan": parts,
        "filler": [int(part.filler) for part in plan],
        "filler_row": [int(part.filler_row) for part in plan],
        "rows": [int(mb.batch_size[0]) for mb in micro_batches],
        "held": [[int(r) for r in mb["row"]] for mb in micro_batches],
        "tokens": [int(mb["attention_mask"].sum()) for mb in micro_batches],
        "filler_weight": [int(mb["loss_mask"][len(part):].abs().sum())
                          for mb, part in zip(micro_batches, plan, strict=True)],
        "filler_is_one_token": all(  # its row's ids, its mask its row's first real token alone
            bool(torch.equal(mb["input_ids"][j], batch["input_ids"][part.filler_row]))
            and mb["attention_mask"][j].tolist() == [1] + [0] * (mb["attention_mask"].shape[1] - 1)
            for mb, part in zip(micro_batches, plan, strict=True) for j in range(len(part), len(mb))),
        "lengths": GRADIENT_LENGTHS[rank],
        "loss": float(loss),
        "ref_loss": float(ref_loss),
        "grad_diff": grad_diff,
        "restore_list": bool(torch.equal(restore_dynamic_batch(outputs, plan), reference)),
        "restore_cat": bool(torch.equal(restore_dynamic_batch(torch.cat(outputs), plan), reference)),
        "restored_rows": int(restore_dynamic_batch(torch.cat(outputs), plan).shape[0]),
    }


def scenario_poisoned(rank: int, group: Any) -> dict[str, Any]:
    """Rank 1 cannot take the rows rank 0 needs: both raise the same error, one collective."""
    import torch.distributed as dist

    from seqlen_balancing import rearrange_micro_batches

    batch = _batch(POISONED_LENGTHS[rank], seed=rank)
    calls = 0
    original = dist.all_reduce

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    dist.all_reduce = counting  # type: ignore[assignment]
    try:
        rearrange_micro_batches(batch, POISONED_CAP, dp_group=group, equal_rows_per_micro_batch=True)
    except ValueError as error:
        return {"raised": "ValueError", "message": str(error), "collectives": calls}
    finally:
        dist.all_reduce = original  # type: ignore[assignment]
    return {"raised": None, "collectives": calls}


def scenario_batch_setting(rank: int, group: Any) -> dict[str, Any]:
    """prepare_micro_batches reading the option from the batch, as verl stores settings."""
    from tensordict import NonTensorData

    from seqlen_balancing import prepare_micro_batches

    batch = _batch(GRADIENT_LENGTHS[rank], seed=rank)
    batch["max_token_len_per_gpu"] = NonTensorData(GRADIENT_CAP)
    batch["equal_rows_per_micro_batch"] = NonTensorData(True)
    micro_batches, plan = prepare_micro_batches(batch, dp_group=group)
    return {"rows": [int(mb.batch_size[0]) for mb in micro_batches],
            "plan": [[int(i) for i in part] for part in plan or []]}


def scenario_empty_rank(rank: int, group: Any) -> dict[str, Any]:
    """Rank 1 has no samples (zero rows, known columns) and runs dummies: they hold the
    group's rows too, zero-weight; restore gives it zero rows back."""
    import torch

    from seqlen_balancing import rearrange_micro_batches, restore_dynamic_batch

    lengths = GRADIENT_LENGTHS[0] if rank == 0 else []
    batch = _batch(lengths, seed=30 + rank)
    micro_batches, plan = rearrange_micro_batches(batch, GRADIENT_CAP, dp_group=group,
                                                  equal_rows_per_micro_batch=True,
                                                  dummy_micro_batches=True)
    outputs = [_token_losses(_model(), mb).detach() for mb in micro_batches]
    return {
        "plan": [[int(i) for i in part] for part in plan],
        "filler": [int(getattr(part, "filler", 0)) for part in plan],
        "rows": [int(mb.batch_size[0]) for mb in micro_batches],
        "tokens": [int(mb["attention_mask"].sum()) for mb in micro_batches],
        "weights": [int(mb["loss_mask"].abs().sum()) for mb in micro_batches],
        "restored_rows": int(restore_dynamic_batch(torch.cat(outputs), plan).shape[0]),
    }


def scenario_empty_poisoned(rank: int, group: Any) -> dict[str, Any]:
    """Rank 1 has no samples and its template's row has 9 tokens: under a cap of 12 its
    dummies cannot hold the 3 rows rank 0's micro-batches hold; both raise alike."""
    from seqlen_balancing import rearrange_micro_batches

    batch = _batch(GRADIENT_LENGTHS[0] if rank == 0 else [], seed=rank)
    try:
        rearrange_micro_batches(batch, GRADIENT_CAP, dp_group=group, equal_rows_per_micro_batch=True,
                                dummy_micro_batches=True, dummy_template=_batch([9], seed=5))
    except ValueError as error:
        return {"raised": "ValueError", "message": str(error)}
    return {"raised": None}


def scenario_empty_unreadable(rank: int, group: Any) -> dict[str, Any]:
    """Rank 1 has no samples and its template's attention_mask is 3-D: its row's tokens
    cannot be read, as a batch's could not; both ranks raise alike."""
    from seqlen_balancing import rearrange_micro_batches

    batch = _batch(GRADIENT_LENGTHS[0] if rank == 0 else [], seed=rank)
    template = _batch([9], seed=5)
    template["attention_mask"] = template["attention_mask"][:, None, :]
    try:
        rearrange_micro_batches(batch, GRADIENT_CAP, dp_group=group, equal_rows_per_micro_batch=True,
                                dummy_micro_batches=True, dummy_template=template)
    except ValueError as error:
        return {"raised": "ValueError", "message": str(error)}
    return {"raised": None}


SCENARIOS = {
    "poisoned": scenario_poisoned,
    "empty_poisoned": scenario_empty_poisoned,
    "empty_unreadable": scenario_empty_unreadable,
    "empty_rank": scenario_empty_rank,
    "gradients": scenario_gradients,
    "batch_setting": scenario_batch_setting,
}


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    """One scenario of :data:`SCENARIOS` on this rank (a round of ``_world.play_rounds``)."""
    import torch.distributed as dist

    name = spec["scenario"]
    return {"scenario": name, **SCENARIOS[name](dist.get_rank(group), group)}


if __name__ == "__main__":
    from _world import exit_now, play_rounds  # beside this script

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
