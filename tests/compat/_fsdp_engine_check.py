"""Run by test_switch.py with SEQLEN_BALANCING_VERL=1: verl 0.9.1's FSDP engine
``forward_backward_batch`` on a tiny random model (CPU, a one-rank gloo group, the model
wrapped by FSDP2's ``fully_shard``), switched by verl's plugin, against the same loop run on
the library's ``prepare_micro_batches`` directly; then switched off (verl's own plan).

verl's ``FSDPEngine.forward_backward_batch`` runs unmodified: its all_reduce of the token
count, its call of ``prepare_micro_batches`` with the DP group, its gradient-sync context
(FSDP2's ``set_requires_gradient_sync``), and ``postprocess_batch_func`` with
``restore_dynamic_batch``. Two things are this script's: ``forward_step`` (verl's LM-head
subclass needs a Hugging Face model set up by ``initialize()``, flash-attention-style
unpadding and a CUDA device; here a tiny embedding + linear model computes a token-level
loss), and ``get_device_id`` and ``get_device_name`` (verl asks CUDA; CPU here).
Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import verl  # the plugin switches this process here
    import verl.utils.seqlen_balancing
    import verl.workers.engine.fsdp.transformer_impl as impl
from tensordict import NonTensorData, TensorDict
from torch.distributed.fsdp import fully_shard

import seqlen_balancing
import seqlen_balancing.verl as switch

LENGTHS, CAP, VOCAB = [2, 6, 6, 5, 5], 12, 64


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def step(module: torch.nn.Module, micro_batch: TensorDict) -> tuple[torch.Tensor, dict[str, Any]]:
    """Next-token loss of a micro-batch, normalised by the global token count as verl's
    losses are; per-token log-probs as the model output."""
    tokens = micro_batch["batch_num_tokens"]
    tokens = tokens.data if hasattr(tokens, "data") and not isinstance(tokens, int) else tokens
    rows = micro_batch["input_ids"].unbind()
    whole = torch.cat(list(rows))
    logps = torch.log_softmax(module(whole), dim=-1)
    out, loss, start = [], torch.zeros(()), 0
    for row in rows:
        picked = logps[start : start + len(row) - 1].gather(1, row[1:].unsqueeze(1)).squeeze(1)
        loss = loss - picked.sum()
        out.append(torch.cat([torch.zeros(1), picked.detach()]))
        start += len(row)
    loss = loss / int(tokens)
    output = torch.nested.as_nested_tensor(out, layout=torch.jagged)
    return loss, {"model_output": {"log_probs": output}, "loss": loss.detach().item(), "metrics": {}}


class TinyEngine(impl.FSDPEngine):  # type: ignore[misc]
    calls = 0

    def forward_step(self, micro_batch: TensorDict, loss_function: Any, forward_only: bool) -> Any:
        TinyEngine.calls += 1
        return step(self.module, micro_batch)


def data() -> TensorDict:
    generator = torch.Generator().manual_seed(1)
    rows = [torch.randint(0, VOCAB, (n,), generator=generator) for n in LENGTHS]
    batch = TensorDict(
        {
            "input_ids": torch.nested.as_nested_tensor(rows, layout=torch.jagged),
            "loss_mask": torch.nested.as_nested_tensor([torch.ones(n) for n in LENGTHS], layout=torch.jagged),
        },
        batch_size=[len(LENGTHS)],
    )
    batch["max_token_len_per_gpu"] = NonTensorData(CAP)
    batch["return_model_output"] = NonTensorData(True)  # keep the log-probs to compare them
    return batch


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return fully_shard(Tiny())


def grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.full_tensor() for p in module.parameters()]  # type: ignore[union-attr]


def through_the_engine() -> tuple[dict[str, Any], list[torch.Tensor], int]:
    engine = object.__new__(TinyEngine)  # the attributes forward_backward_batch reads
    engine.ulysses_sequence_parallel_size = 1
    engine.ulysses_device_mesh = None
    engine.engine_config = SimpleNamespace(use_no_sync_for_gradient_accumulation=True)
    engine.module = model()
    TinyEngine.calls = 0
    output = engine.forward_backward_batch(data(), loss_function=None, forward_only=False)
    return output, grads(engine.module), TinyEngine.calls


def through_the_library() -> tuple[dict[str, Any], list[torch.Tensor], int]:
    module, batch = model(), data()
    batch["batch_num_tokens"] = NonTensorData(sum(LENGTHS))
    micro_batches, indices = seqlen_balancing.prepare_micro_batches(
        batch, dp_group=dist.group.WORLD, same_micro_num_in_dp=True
    )
    losses, outputs = [], []
    for micro_batch in micro_batches:
        loss, meta = step(module, micro_batch)
        loss.backward()
        losses.append(meta["loss"])
        outputs += list(meta["model_output"]["log_probs"].unbind())
    restored = seqlen_balancing.restore_dynamic_batch(
        torch.nested.as_nested_tensor(outputs, layout=torch.jagged), indices
    )
    return {"loss": losses, "model_output": {"log_probs": restored}}, grads(module), len(micro_batches)


def same_rows(a: torch.Tensor, b: torch.Tensor) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.unbind(), b.unbind(), strict=True))


def main() -> None:
    assert impl.prepare_micro_batches is seqlen_balancing.prepare_micro_batches, "not switched"
    impl.get_device_id = lambda: "cpu"
    verl.utils.seqlen_balancing.get_device_name = lambda: "cpu"  # verl's own DP agreement, below
    path = os.path.join(tempfile.mkdtemp(), "rendezvous")
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    try:
        engine_out, engine_grads, switched = through_the_engine()
        library_out, library_grads, library = through_the_library()
        switch.revert()
        _, _, verl_count = through_the_engine()
    finally:
        dist.destroy_process_group()
    print(json.dumps({
        "micro_batches": {"switched": switched, "library": library, "verl": verl_count},
        "loss_equal": engine_out["loss"] == library_out["loss"],
        "grads_equal": all(torch.equal(a, b) for a, b in zip(engine_grads, library_grads, strict=True)),
        "output_equal": same_rows(
            engine_out["model_output"]["log_probs"], library_out["model_output"]["log_probs"]
        ),
        "losses": engine_out["loss"],
    }))


if __name__ == "__main__":
    main()
