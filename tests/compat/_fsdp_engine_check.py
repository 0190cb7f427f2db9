"""Run by test_switch.py with SEQLEN_BALANCING_VERL=1: verl 0.9.1's FSDP engine on a tiny
random model, CPU, switched by verl's plugin, against the library called directly; then
switched off (verl's own plan). Prints one JSON line.

The engine is verl's ``FSDPEngineWithLMHead`` and runs unmodified: ``forward_backward_batch``
(its all_reduce of the token count, its call of ``prepare_micro_batches`` with the DP group,
FSDP2's gradient-sync context, ``postprocess_batch_func`` with ``restore_dynamic_batch``),
``forward_step`` (remove-padding inputs, the Hugging Face model, log-probs), and verl's
``sft_loss``. The model is a one-layer Llama with random weights wrapped by FSDP2's
``fully_shard`` in a one-rank gloo group. What this script sets itself: the engine's
attributes that ``initialize()`` would set from a config (built with ``object.__new__``, as
``initialize()`` loads a checkpoint and needs a GPU), and ``get_device_id`` /
``get_device_name``, which ask CUDA (CPU here).

"The library called directly": ``seqlen_balancing.prepare_micro_batches`` on the same batch,
the engine's ``forward_step`` on each micro-batch, ``seqlen_balancing.restore_dynamic_batch``.
"""

from __future__ import annotations

import functools
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
    from verl.workers.utils.losses import sft_loss
from tensordict import NonTensorData, TensorDict
from torch.distributed.fsdp import fully_shard
from transformers import LlamaConfig, LlamaForCausalLM

import seqlen_balancing
import seqlen_balancing.verl as switch

LENGTHS, CAP, VOCAB = [2, 6, 6, 5, 5], 12, 64
LOSS = functools.partial(sft_loss, None)  # the config is not read on the no-padding path


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )
    return fully_shard(LlamaForCausalLM(config))


def data() -> TensorDict:
    generator = torch.Generator().manual_seed(1)

    def jagged(rows: list[torch.Tensor]) -> torch.Tensor:
        return torch.nested.as_nested_tensor(rows, layout=torch.jagged)

    batch = TensorDict(
        {
            "input_ids": jagged([torch.randint(0, VOCAB, (n,), generator=generator) for n in LENGTHS]),
            "position_ids": jagged([torch.arange(n) for n in LENGTHS]),
            "loss_mask": jagged([torch.ones(n) for n in LENGTHS]),
        },
        batch_size=[len(LENGTHS)],
    )
    for key, value in {"max_token_len_per_gpu": CAP, "temperature": 1.0, "calculate_entropy": False,
                       "return_model_output": True}.items():  # keep the log-probs to compare them
        batch[key] = NonTensorData(value)
    return batch


def engine() -> Any:
    made = object.__new__(impl.FSDPEngineWithLMHead)  # what initialize() would set
    made.ulysses_sequence_parallel_size = 1
    made.ulysses_device_mesh = None
    made.use_ulysses_sp = False
    made.pad_to_length = None
    made.engine_config = SimpleNamespace(use_no_sync_for_gradient_accumulation=True)
    made._autocast_dtype = torch.float32
    made.module = model()
    return made


def grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.full_tensor() for p in module.parameters()]  # type: ignore[union-attr]


def through_the_engine() -> tuple[dict[str, Any], list[torch.Tensor], int]:
    made = engine()
    output = made.forward_backward_batch(data(), loss_function=LOSS, forward_only=False)
    return output, grads(made.module), len(output["loss"])


def through_the_library() -> tuple[dict[str, Any], list[torch.Tensor], int]:
    made, batch = engine(), data()
    tokens = batch["loss_mask"].sum().item()
    for key, value in {"sp_size": 1, "dp_size": 1, "batch_num_tokens": tokens}.items():
        batch[key] = NonTensorData(value)  # what forward_backward_batch adds before cutting
    micro_batches, indices = seqlen_balancing.prepare_micro_batches(
        batch, dp_group=dist.group.WORLD, same_micro_num_in_dp=True
    )
    losses, outputs = [], []
    for micro_batch in micro_batches:
        loss, meta = made.forward_step(micro_batch, loss_function=LOSS, forward_only=False)
        loss.backward()
        losses.append(meta["loss"])
        outputs.append(meta["model_output"]["log_probs"])
    log_probs = seqlen_balancing.restore_dynamic_batch(outputs, indices)
    return {"loss": losses, "model_output": {"log_probs": log_probs}}, grads(made.module), len(micro_batches)


def same_rows(a: torch.Tensor, b: torch.Tensor) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.unbind(), b.unbind(), strict=True))


def main() -> None:
    assert impl.prepare_micro_batches is seqlen_balancing.prepare_micro_batches, "not switched"
    impl.get_device_id = lambda: "cpu"
    impl.get_device_name = lambda: "cpu"
    verl.utils.seqlen_balancing.get_device_name = lambda: "cpu"  # verl's own DP agreement, below
    path = os.path.join(tempfile.mkdtemp(), "rendezvous")
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    try:
        engine_out, engine_grads, switched = through_the_engine()
        library_out, library_grads, library = through_the_library()
        switch.revert()
        verl_out, _, verl_count = through_the_engine()
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
        "verl_losses": verl_out["loss"],
    }))


if __name__ == "__main__":
    main()
