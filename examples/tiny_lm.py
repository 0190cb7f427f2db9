"""The pieces both examples share: a tiny causal LM, the process group, per-rank data.

The model reads packed sequences, as verl's engines feed theirs with padding removed:
``input_ids`` of shape ``(tokens,)`` holding the sequences one after the other and
``cu_seqlens`` of shape ``(sequences + 1,)`` with their start offsets (flash-attention's
varlen convention). A token attends only to earlier tokens of its own sequence, so a
sequence gets the same logits whatever micro-batch it lands in.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

#: Parameter-initialisation seed: the same on every rank, so every replica starts equal.
MODEL_SEED = 1234


class TinyCausalLM(nn.Module):
    """One pre-norm transformer block (single-head attention, MLP) over token and position
    embeddings; a few thousand parameters."""

    def __init__(self, vocab_size: int = 64, dim: int = 32, max_seq_len: int = 256) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.position_embedding = nn.Embedding(max_seq_len, dim)
        self.attention_norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attention_out = nn.Linear(dim, dim)
        self.mlp_norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, input_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        """Logits of shape ``(tokens, vocab_size)`` for packed ``input_ids`` ``(tokens,)``."""
        lengths = cu_seqlens.diff()
        sequence = torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)
        position = torch.arange(len(input_ids), device=input_ids.device) - cu_seqlens[sequence]
        x = self.token_embedding(input_ids) + self.position_embedding(position)
        # Block-diagonal causal mask: same sequence, not later in it.
        allowed = (sequence[:, None] == sequence[None, :]) & (position[:, None] >= position[None, :])
        q, k, v = self.qkv(self.attention_norm(x)).chunk(3, dim=-1)
        attended = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=allowed[None])
        x = x + self.attention_out(attended[0])
        x = x + self.mlp(self.mlp_norm(x))
        logits: torch.Tensor = self.head(self.final_norm(x))
        return logits


def build_model(dtype: torch.dtype, device: torch.device) -> TinyCausalLM:
    """The model, initialised from :data:`MODEL_SEED` (identical on every rank)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(MODEL_SEED)
        model = TinyCausalLM()
    return model.to(device=device, dtype=dtype)


def init_distributed() -> tuple[int, int, torch.device]:
    """Join the process group torchrun set up: NCCL when every local rank has its own GPU,
    else gloo on the CPU. Returns ``(rank, world_size, device)``."""
    if "RANK" not in os.environ:
        script = os.path.relpath(sys.argv[0])
        raise SystemExit(f"launch with torchrun, e.g. `torchrun --nproc-per-node 2 {script}`")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=timedelta(minutes=5))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timedelta(minutes=5))
    return dist.get_rank(), dist.get_world_size(), device


def sample_lengths(rank: int, batch_size: int, seed: int) -> list[int]:
    """Sequence lengths of this rank's batch: different on every rank, and longer on higher
    ranks, so the ranks' own micro-batch needs differ and the DP agreement matters."""
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    longest = 64 + 48 * rank
    return torch.randint(8, longest + 1, (batch_size,), generator=generator).tolist()


def right_padded_batch(lengths: list[int], vocab_size: int, seed: int) -> TensorDict:
    """``input_ids``, ``attention_mask`` and ``loss_mask`` of shape ``(n, max(lengths))``,
    right-padded. ``loss_mask`` marks the response tokens (the targets of SFT); the
    prompt is the first quarter of each sequence (at least one token)."""
    generator = torch.Generator().manual_seed(seed)
    n, width = len(lengths), max(lengths)
    input_ids = torch.zeros(n, width, dtype=torch.long)
    attention_mask = torch.zeros(n, width, dtype=torch.long)
    loss_mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        input_ids[row, :length] = torch.randint(1, vocab_size, (length,), generator=generator)
        attention_mask[row, :length] = 1
        loss_mask[row, max(1, length // 4) : length] = 1
    return TensorDict(
        {"input_ids": input_ids, "attention_mask": attention_mask, "loss_mask": loss_mask},
        batch_size=[n],
    )


def unpad(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``(rows, width)`` to packed ``(tokens,)`` and ``cu_seqlens``."""
    keep = attention_mask.bool()
    cu_seqlens = F.pad(keep.sum(dim=-1).cumsum(0), (1, 0))
    return input_ids[keep], cu_seqlens
