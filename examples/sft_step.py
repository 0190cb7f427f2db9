"""One data-parallel SFT step with dynamic micro-batches.

    torchrun --nproc-per-node 2 examples/sft_step.py

Every rank holds its own right-padded batch of variable-length sequences. The step:

1. count the loss tokens of the whole step: one ``all_reduce(SUM)`` over the DP group;
2. cut the local batch into micro-batches of at most ``max_token_len_per_gpu`` tokens with
   ``prepare_micro_batches`` (every rank gets the same number of micro-batches);
3. per micro-batch: forward, ``sum of token losses / global loss tokens``, backward
   (gradients accumulate);
4. ``all_reduce(SUM)`` of the gradients, then the optimizer step.

The gradient is then that of the token-mean loss over all ranks' batches together, however
the batches were cut. Averaging the loss per micro-batch (or per rank) instead weights a
token by the size of the micro-batch it landed in, so the gradient would depend on the cut.

``--out DIR`` writes each rank's batch, gradients and plan to ``DIR/sft_rank{R}.pt`` (and
the initial weights to ``DIR/sft_model.pt``); ``tests/docs/test_examples.py`` checks them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tensordict import NonTensorData
from tiny_lm import build_model, init_distributed, right_padded_batch, sample_lengths, unpad

from seqlen_balancing import prepare_micro_batches


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per rank")
    parser.add_argument("--max-token-len-per-gpu", type=int, default=256, help="tokens per micro-batch")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0, help="data seed (the model seed is fixed)")
    parser.add_argument("--out", type=Path, default=None, help="write per-rank results here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    rank, world_size, device = init_distributed()
    dp_group = dist.group.WORLD  # the DP group; pass it explicitly, never rely on None
    dtype = getattr(torch, args.dtype)

    model = build_model(dtype, device)
    initial_state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    # This rank's data: different lengths (and padded width) on every rank.
    lengths = sample_lengths(rank, args.batch_size, args.seed)
    batch = right_padded_batch(lengths, model.head.out_features, seed=args.seed * 1000 + rank)
    batch["max_token_len_per_gpu"] = NonTensorData(args.max_token_len_per_gpu)  # verl's setting
    batch = batch.to(device)

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()

    # 1. The normaliser: loss tokens of the whole step, on every rank.
    token_count = batch["loss_mask"].sum()  # int64: exact at any size
    dist.all_reduce(token_count, op=dist.ReduceOp.SUM, group=dp_group)
    global_tokens = token_count.to(dtype)

    # 2. Micro-batches under the token cap; all ranks agree on their number.
    micro_batches, indices = prepare_micro_batches(batch, dp_group=dp_group)

    # 3. Forward/backward per micro-batch; gradients accumulate in .grad.
    optimizer.zero_grad(set_to_none=True)
    local_loss = torch.zeros((), dtype=dtype, device=device)
    for micro_batch in micro_batches:
        input_ids, cu_seqlens = unpad(micro_batch["input_ids"], micro_batch["attention_mask"])
        logits = model(input_ids, cu_seqlens)  # (tokens, vocab)
        # Token t is predicted at position t - 1; the last token of a row predicts nothing.
        targets = input_ids.roll(-1)
        weights = micro_batch["loss_mask"][micro_batch["attention_mask"].bool()].roll(-1).to(dtype)
        weights[cu_seqlens[1:] - 1] = 0
        token_losses = F.cross_entropy(logits, targets, reduction="none")
        loss = (token_losses * weights).sum() / global_tokens
        loss.backward()
        local_loss += loss.detach()

    # 4. Sum the ranks' gradients (each is already divided by the global token count).
    for parameter in model.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM, group=dp_group)
    gradients = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    dist.all_reduce(local_loss, op=dist.ReduceOp.SUM, group=dp_group)  # for the printout only

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    step_ms = 1000 * (time.perf_counter() - start)

    cap = args.max_token_len_per_gpu
    tokens = [int(mb["attention_mask"].sum()) for mb in micro_batches]
    print(
        f"[rank {rank}/{world_size}] sft step: {len(micro_batches)} micro-batches, "
        f"tokens per micro-batch {tokens} (cap {cap}, largest {max(tokens)}), "
        f"loss {local_loss.item():.4f} over {int(global_tokens.item())} loss tokens, "
        f"step {step_ms:.1f} ms\n",
        end="",  # one write per line: the ranks share the terminal
        flush=True,
    )

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        if rank == 0:
            torch.save(initial_state, args.out / "sft_model.pt")
        torch.save(
            {
                "batch": {key: batch[key].cpu() for key in ("input_ids", "attention_mask", "loss_mask")},
                "gradients": {name: grad.cpu() for name, grad in gradients.items()},
                "parameters_after_step": {name: p.detach().cpu() for name, p in model.named_parameters()},
                "indices": indices,
                "micro_batch_tokens": tokens,
                "max_token_len": cap,
                "loss": local_loss.item(),
                "step_ms": step_ms,
            },
            args.out / f"sft_rank{rank}.pt",
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
