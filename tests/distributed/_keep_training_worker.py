"""Worker of ``test_keep_training.py`` (issue 27): one gloo rank playing every scenario.

Run as a script, one process per rank::

    python _keep_training_worker.py RANK WORLD_SIZE INIT_METHOD OUT_DIR

Each scenario appends one JSON line to ``OUT_DIR/rank{RANK}.jsonl`` (flushed at once); a
fence (``all_gather_object`` of the scenario name) follows each, so a rank that skipped or
repeated a collective shows up as a desync. The test judges the records.
"""

from __future__ import annotations

import itertools
import logging
import sys
from typing import Any

PG_TIMEOUT_S = 30
VOCAB, WIDTH, HIDDEN = 11, 9, 6

#: Scenario ``gradients``: rank 0's four samples each need a micro-batch of their own under
#: the cap (7 tokens); rank 1's two fit in one, so it runs two dummies.
GRADIENT_LENGTHS = {0: [7, 6, 5, 4], 1: [3, 2]}
GRADIENT_CAP = 7


def _batch(lengths: list[int], seed: int, keys: tuple[str, ...] = ("loss_mask",)) -> Any:
    import torch
    from tensordict import TensorDict

    generator = torch.Generator().manual_seed(seed)
    n = len(lengths)
    mask = torch.zeros(n, WIDTH, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    tokens = torch.randint(0, VOCAB, (n, WIDTH), generator=generator) * mask
    entries: dict[str, Any] = {"input_ids": tokens, "attention_mask": mask, "row": torch.arange(n)}
    for key in keys:  # the loss weights: the tokens after the first of each row
        weight = mask.clone()
        weight[:, 0] = 0
        entries[key] = weight
    return TensorDict(entries, batch_size=[n])


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, HIDDEN), torch.nn.Linear(HIDDEN, VOCAB)).double()


def _token_losses(model: Any, batch: Any) -> Any:
    """Next-token cross-entropy per position, (rows, WIDTH - 1), float64."""
    import torch

    logits = model(batch["input_ids"])[:, :-1]
    target = batch["input_ids"][:, 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, VOCAB), target.reshape(-1), reduction="none"
    ).reshape(target.shape)


def _summed_loss(model: Any, batch: Any) -> Any:
    return (_token_losses(model, batch) * batch["loss_mask"][:, 1:]).sum()


def _counted(call: Any) -> tuple[Any, int]:
    """``call()`` and the number of ``torch.distributed`` collectives it made."""
    import torch.distributed as dist

    names = ("all_reduce", "all_gather", "all_gather_object", "broadcast", "barrier",
             "all_gather_into_tensor", "reduce_scatter", "all_to_all")
    originals = {name: getattr(dist, name) for name in names}
    count = 0

    def wrap(original: Any) -> Any:
        def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal count
            count += 1
            return original(*args, **kwargs)
        return counting

    for name, original in originals.items():
        setattr(dist, name, wrap(original))
    try:
        return call(), count
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)


def _grads(model: Any) -> list[Any]:
    return [p.grad.detach().clone() for p in model.parameters()]


def scenario_gradients(rank: int, group: Any) -> dict[str, Any]:
    """Dummies against a reference without any: summed loss, gradients, restore."""
    import torch
    import torch.distributed as dist

    from seqlen_balancing import get_reverse_idx, rearrange_micro_batches, restore_dynamic_batch

    batch = _batch(GRADIENT_LENGTHS[rank], seed=10 + rank)
    # Reference: the real rows only, in one pass, gradients summed over the ranks.
    reference = _model()
    loss = _summed_loss(reference, batch)
    loss.backward()
    ref_loss = loss.detach().clone()
    dist.all_reduce(ref_loss, group=group)
    ref_grads = _grads(reference)
    for grad in ref_grads:
        dist.all_reduce(grad, group=group)
    ref_rows = _token_losses(reference, batch).detach()

    model = _model()
    (micro_batches, plan), collectives = _counted(lambda: rearrange_micro_batches(
        batch, GRADIENT_CAP, dp_group=group, dummy_micro_batches=True
    ))
    total = torch.zeros((), dtype=torch.float64)
    outputs = []
    for micro_batch in micro_batches:
        loss = _summed_loss(model, micro_batch)
        loss.backward()  # gradients summed over micro-batches, as a trainer accumulates them
        total += loss.detach()
        outputs.append(_token_losses(model, micro_batch).detach())
        # A collective per micro-batch, as a DDP/FSDP gradient sync makes: in step only
        # because every rank runs the same number of micro-batches.
        step = torch.ones(1)
        dist.all_reduce(step, group=group)
    dist.all_reduce(total, group=group)
    grads = _grads(model)
    for grad in grads:
        dist.all_reduce(grad, group=group)
    grad_diff = max(float((a - b).abs().max()) for a, b in zip(grads, ref_grads, strict=True))
    dummies = [m for m, part in enumerate(plan) if not part]
    # Restore: the library's (a list of outputs, and the concatenated outputs), and verl's
    # own path (torch.cat, then the reverse index of the flattened lists).
    restored_list = restore_dynamic_batch(outputs, plan)
    concatenated = torch.cat(outputs)
    restored_cat = restore_dynamic_batch(concatenated, plan)
    flat = list(itertools.chain.from_iterable(plan))
    verl_path = concatenated[torch.tensor(get_reverse_idx(flat), dtype=torch.long)]
    # After the model is done with the model state, compare the inputs the dummies hold.
    shortest = min(range(len(GRADIENT_LENGTHS[rank])), key=lambda i: (GRADIENT_LENGTHS[rank][i], i))
    return {
        "count": len(micro_batches),
        "plan": plan,
        "collectives": collectives,
        "dummies": dummies,
        "dummy_rows": [[int(r) for r in micro_batches[m]["row"]] for m in dummies],
        "dummy_loss_weight": [int(micro_batches[m]["loss_mask"].abs().sum()) for m in dummies],
        "dummy_is_copy": [
            bool(torch.equal(micro_batches[m]["input_ids"], batch["input_ids"][shortest : shortest + 1]))
            and bool(torch.equal(micro_batches[m]["attention_mask"],
                                 batch["attention_mask"][shortest : shortest + 1]))
            for m in dummies
        ],
        "shortest": shortest,
        "loss": float(total),
        "ref_loss": float(ref_loss),
        "grad_diff": grad_diff,
        "restore_list": bool(torch.equal(restored_list, ref_rows)),
        "restore_cat": bool(torch.equal(restored_cat, ref_rows)),
        "verl_path": bool(torch.equal(verl_path, ref_rows)),
        "restored_rows": int(restored_list.shape[0]),
    }


def scenario_over_cap(rank: int, group: Any) -> dict[str, Any]:
    """Only rank 1 holds a sample over the cap: both agree; only rank 1 warns."""
    from seqlen_balancing import rearrange_micro_batches

    lengths = {0: [100, 200, 300], 1: [5000, 100, 200]}[rank]
    batch = _batch_wide(lengths)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep(logging.WARNING)
    logging.getLogger("seqlen_balancing").addHandler(handler)
    try:
        micro_batches, plan = rearrange_micro_batches(batch, 4096, dp_group=group, over_cap="alone")
    finally:
        logging.getLogger("seqlen_balancing").removeHandler(handler)
    return {"count": len(micro_batches), "plan": sorted(plan), "warnings": records}


def _batch_wide(lengths: list[int]) -> Any:
    import torch
    from tensordict import TensorDict

    n, width = len(lengths), max(lengths)
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return TensorDict({"attention_mask": mask, "loss_mask": mask.clone()}, batch_size=[n])


def scenario_no_loss_weight(rank: int, group: Any) -> dict[str, Any]:
    """Poisoned: rank 1's batch has no loss-weight entry to zero; both ranks raise it."""
    from seqlen_balancing import rearrange_micro_batches

    keys = ("loss_mask",) if rank == 0 else ()
    batch = _batch([5, 4, 3], seed=rank, keys=keys)
    record, collectives = _counted(lambda: _outcome(
        lambda: rearrange_micro_batches(batch, 9, dp_group=group, dummy_micro_batches=True)))
    return {**record, "collectives": collectives}


def scenario_divided_by_four(rank: int, group: Any) -> dict[str, Any]:
    """prepare_micro_batches reading the option from the batch: 3 samples, divisor 4."""
    from tensordict import NonTensorData

    from seqlen_balancing import prepare_micro_batches

    batch = _batch([3, 2, 4], seed=rank, keys=("response_mask",))
    batch["max_token_len_per_gpu"] = NonTensorData(100)
    batch["dummy_micro_batches"] = NonTensorData(True)
    micro_batches, plan = prepare_micro_batches(batch, dp_group=group, num_batches_divided_by=4)
    return {
        "count": len(micro_batches),
        "plan": plan,
        "dummy_weight": [int(mb["response_mask"].sum()) for mb, part in zip(micro_batches, plan, strict=True)
                         if not part],
    }


def _outcome(call: Any) -> dict[str, Any]:
    try:
        micro_batches, plan = call()
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    return {"count": len(micro_batches), "plan": plan}


SCENARIOS = {
    "gradients": scenario_gradients,
    "over_cap": scenario_over_cap,
    "no_loss_weight": scenario_no_loss_weight,
    "divided_by_four": scenario_divided_by_four,
}


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    """One scenario of :data:`SCENARIOS` on this rank (a round of ``_world.play_rounds``)."""
    import torch.distributed as dist

    name = spec["scenario"]
    return {"scenario": name, **SCENARIOS[name](dist.get_rank(group), group)}


if __name__ == "__main__":
    from _world import exit_now, play_rounds  # beside this script

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
