"""A real client: a tiny randomly initialised causal LM computes per-token log-probs
through micro-batches cut by verl 0.9.1 and by this library (no download; built locally)."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import ModuleType

import pytest
import torch
import transformers  # verl's modules import it; CI's compat stage installs it with verl
from tensordict import TensorDict

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # with torch and verl only (tests/conftest.py)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return transformers.LlamaForCausalLM(config).eval()


def log_probs(model: torch.nn.Module, micro_batch: TensorDict) -> torch.Tensor:
    """Per-token log-probability of each next token, shape (rows, width - 1)."""
    ids, mask = micro_batch["input_ids"], micro_batch["attention_mask"]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    return torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def padded_batch(rng: random.Random, n: int, width: int) -> TensorDict:
    lengths = [rng.randint(1, width) for _ in range(n)]
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    ids = torch.randint(0, 97, (n, width)) * mask
    return TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[n])


def test_log_probs_bit_identical_with_the_same_partition(
    model: torch.nn.Module,
    verl: ModuleType,
    ours: ModuleType,
    verl_with_partition: Callable[..., None],
) -> None:
    rng = random.Random(20)
    for trial in range(4):
        width = 48
        batch = padded_batch(rng, 12 + 4 * trial, width)
        cap = width + 16 * trial  # verl needs the cap >= the padded width
        mine, plan = ours.rearrange_micro_batches(batch, cap)
        assert all(int(mb["attention_mask"].sum()) <= cap for mb in mine)
        verl_with_partition(plan)
        theirs, verl_plan = verl.rearrange_micro_batches(batch, cap)
        assert verl_plan == plan
        ours_out = ours.restore_dynamic_batch([log_probs(model, mb) for mb in mine], plan)
        joined = torch.cat([log_probs(model, mb) for mb in theirs])
        verl_out = verl.restore_dynamic_batch(joined, verl_plan)
        assert torch.equal(ours_out, verl_out)  # bit for bit
        assert all(int(mb["attention_mask"].sum()) <= cap for mb in theirs)
        # The concatenated form (verl's) restores the same rows as the list form.
        mine_joined = torch.cat([log_probs(model, mb) for mb in mine])
        assert torch.equal(ours.restore_dynamic_batch(mine_joined, plan), ours_out)
