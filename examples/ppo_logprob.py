"""Per-token log-probs of a PPO rollout batch, micro-batch by micro-batch.

    torchrun --nproc-per-node 2 examples/ppo_logprob.py

PPO recomputes the log-probability of every rollout token under the current (or the
reference) policy. With dynamic batch sizes the batch is cut into micro-batches of at most
``max_token_len`` tokens with ``rearrange_micro_batches``; the micro-batches hold the rows
in a new order, so the outputs are put back in input order with ``restore_dynamic_batch``
before they meet the advantages, which are in input order.

The same rollout is run twice: right-padded (``input_ids`` + ``attention_mask``) and jagged
(a nested ``input_ids`` with ``layout=torch.jagged``, no padding at all: how verl's engines
feed models). Every rank passes the DP group, so all ranks run the same number of forward
passes (with FSDP or ZeRO-3 each forward is itself a collective, so they must).

Output per sequence of ``L`` tokens: ``L - 1`` log-probs, ``log p(token t | tokens < t)``
for ``t = 1 .. L-1``; padded as ``(n, width - 1)`` with zeros after the sequence, jagged
as a nested tensor with rows of ``L - 1`` values.

``--out DIR`` writes each rank's rollout and restored log-probs to ``DIR/ppo_rank{R}.pt``
(and the model's weights to ``DIR/ppo_model.pt``); ``tests/docs/test_examples.py`` checks them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tensordict import TensorDict
from tiny_lm import TinyCausalLM, build_model, init_distributed, right_padded_batch, sample_lengths, unpad

from seqlen_balancing import rearrange_micro_batches, restore_dynamic_batch


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=16, help="rollouts per rank")
    parser.add_argument("--max-token-len", type=int, default=256, help="tokens per micro-batch")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--seed", type=int, default=0, help="data seed (the model seed is fixed)")
    parser.add_argument("--out", type=Path, default=None, help="write per-rank results here")
    return parser.parse_args()


def token_log_probs(model: TinyCausalLM, input_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """``log p(token t | tokens < t)`` for every token but the first of each sequence,
    packed: shape ``(tokens - sequences,)``."""
    logits = model(input_ids, cu_seqlens)
    next_token = input_ids.roll(-1)  # position t predicts token t + 1
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, next_token[:, None])[:, 0]
    predicts = torch.ones_like(input_ids, dtype=torch.bool)
    predicts[cu_seqlens[1:] - 1] = False  # a sequence's last token predicts nothing
    return log_probs[predicts]


def padded_log_probs(model: TinyCausalLM, micro_batch: TensorDict) -> torch.Tensor:
    """Log-probs of a right-padded micro-batch: ``(rows, width - 1)``, zeros after each row."""
    input_ids, attention_mask = micro_batch["input_ids"], micro_batch["attention_mask"]
    packed, cu_seqlens = unpad(input_ids, attention_mask)
    values = token_log_probs(model, packed, cu_seqlens)
    out = torch.zeros(input_ids.shape[0], input_ids.shape[1] - 1, dtype=values.dtype, device=values.device)
    out[attention_mask[:, 1:].bool()] = values  # right padding: row i holds L_i - 1 values
    return out


def jagged_log_probs(model: TinyCausalLM, micro_batch: TensorDict) -> torch.Tensor:
    """Log-probs of a jagged micro-batch: a jagged nested tensor, row ``i`` of ``L_i - 1``."""
    nested = micro_batch["input_ids"]
    offsets = nested.offsets()
    input_ids = nested.values()[offsets[0] : offsets[-1]]  # the packed tokens, no padding
    cu_seqlens = offsets - offsets[0]
    values = token_log_probs(model, input_ids, cu_seqlens)
    rows = torch.arange(len(cu_seqlens), device=cu_seqlens.device)
    return torch.nested.nested_tensor_from_jagged(values, cu_seqlens - rows)


def cat_jagged(parts: list[torch.Tensor]) -> torch.Tensor:
    """Join jagged nested tensors along the rows (values one after the other)."""
    values = torch.cat([part.values() for part in parts])
    row_lengths = torch.cat([part.offsets().diff() for part in parts])
    return torch.nested.nested_tensor_from_jagged(values, F.pad(row_lengths.cumsum(0), (1, 0)))


def report(rank: int, world_size: int, label: str, tokens: list[int], cap: int, ms: float) -> None:
    print(
        f"[rank {rank}/{world_size}] log-probs, {label}: {len(tokens)} micro-batches, "
        f"tokens per micro-batch {tokens} (cap {cap}, largest {max(tokens)}), {ms:.1f} ms\n",
        end="",  # one write per line: the ranks share the terminal
        flush=True,
    )


def main() -> None:
    args = parse_args()
    rank, world_size, device = init_distributed()
    dp_group = dist.group.WORLD  # the DP group; pass it explicitly, never rely on None
    model = build_model(getattr(torch, args.dtype), device).eval()
    cap = args.max_token_len

    # This rank's rollouts, as a right-padded batch and as a jagged one (the same tokens).
    lengths = sample_lengths(rank, args.batch_size, args.seed)
    padded = right_padded_batch(lengths, model.head.out_features, seed=args.seed * 1000 + rank)
    rows = [ids[:length] for ids, length in zip(padded["input_ids"], lengths, strict=True)]
    jagged = TensorDict(
        {"input_ids": torch.nested.nested_tensor(rows, layout=torch.jagged)}, batch_size=[len(rows)]
    )
    padded, jagged = padded.to(device), jagged.to(device)

    results: dict[str, object] = {}
    with torch.no_grad():
        # Right-padded: cut, forward per micro-batch, concatenate, restore the input order.
        start = time.perf_counter()
        micro_batches, indices = rearrange_micro_batches(padded, max_token_len=cap, dp_group=dp_group)
        outputs = [padded_log_probs(model, mb) for mb in micro_batches]
        padded_out = restore_dynamic_batch(torch.cat(outputs), indices)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tokens = [int(mb["attention_mask"].sum()) for mb in micro_batches]
        report(rank, world_size, "right-padded", tokens, cap, 1000 * (time.perf_counter() - start))
        results["padded"] = {"log_probs": padded_out.cpu(), "indices": indices, "micro_batch_tokens": tokens}

        # Jagged: the same steps; the micro-batches' input_ids stay jagged.
        start = time.perf_counter()
        micro_batches, indices = rearrange_micro_batches(jagged, max_token_len=cap, dp_group=dp_group)
        outputs = [jagged_log_probs(model, mb) for mb in micro_batches]
        jagged_out = restore_dynamic_batch(cat_jagged(outputs), indices)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tokens = [int(mb["input_ids"].offsets().diff().sum()) for mb in micro_batches]
        report(rank, world_size, "jagged", tokens, cap, 1000 * (time.perf_counter() - start))
        results["jagged"] = {
            "log_probs_rows": [row.cpu() for row in jagged_out.unbind()],
            "indices": indices,
            "micro_batch_tokens": tokens,
        }

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        if rank == 0:
            torch.save(model.state_dict(), args.out / "ppo_model.pt")
        batch = {key: padded[key].cpu() for key in ("input_ids", "attention_mask")}
        torch.save({"batch": batch, "max_token_len": cap, **results}, args.out / f"ppo_rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
