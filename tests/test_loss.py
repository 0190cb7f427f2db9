"""step_loss_scales on one rank (issue 47, item 5); the DP group's sum is tests/distributed/test_loss.py's.

Every expectation is counted by hand: the loss tokens of each micro-batch (its loss weights'
sum, dummies and filler rows at zero), the step's total, the scales ``dp_size / total`` or
``1 / total``; and the gradient of a split step against one pass over every row (float64,
within 1e-12).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, TensorDict

from seqlen_balancing import prepare_micro_batches, step_loss_scales

pytestmark = pytest.mark.torch


def td(mask: list[list[float]], **extra: Any) -> TensorDict:
    return TensorDict({"loss_mask": torch.tensor(mask), **extra}, [len(mask)])


class Proto:
    """A DataProto stand-in: its tensors in ``.batch``."""

    def __init__(self, batch: TensorDict) -> None:
        self.batch = batch


def test_tokens_counted_by_hand_dummies_and_filler_rows_add_nothing() -> None:
    real = td([[1, 1, 0], [0, 1, 1]])  # 4 loss tokens
    filler = td([[1, 0, 0], [0, 0, 0]])  # 1 real row, then a filler row of weight 0
    dummy = td([[0, 0, 0]])  # a dummy: every weight 0
    jagged = torch.nested.nested_tensor([torch.ones(3), torch.ones(1)], layout=torch.jagged)
    nested = TensorDict({"response_mask": jagged}, [2])  # 4 tokens in jagged rows
    step = step_loss_scales([real, filler, dummy, Proto(td([[1, 1, 1]]))])
    assert (step.total_tokens, step.tokens, step.dp_size) == (8, [4, 1, 0, 3], 1)
    assert step.scales == [1 / 8] * 4
    assert step_loss_scales([nested], loss_key="response_mask").tokens == [4]
    weighted = step_loss_scales([td([[0.5, 0.25]]), td([[1.0, 0.0]])], average_gradients=False)
    assert (weighted.total_tokens, weighted.tokens, weighted.scales) == (1.75, [0.75, 1], [1 / 1.75] * 2)


def test_token_counts_and_the_conventions() -> None:
    step = step_loss_scales([3, np.int64(0), torch.tensor(5), 2.0])
    assert (step.total_tokens, step.tokens, step.scales) == (10, [3, 0, 5, 2], [0.1] * 4)
    assert step_loss_scales([3, 5], average_gradients=False).scales == [1 / 8] * 2  # dp_size 1: the same
    empty = step_loss_scales([0, td([[0, 0]])])  # no loss token in the step: no division by zero
    assert (empty.total_tokens, empty.scales) == (0, [0.0, 0.0])
    assert step_loss_scales([]).scales == []


@pytest.mark.parametrize(("given", "kind", "words"), [
    ([td([[1]], other=torch.ones(1, 1))], ValueError,
     "micro-batch 0: it has no 'response_mask' entry (it holds ['loss_mask', 'other']); pass loss_key="),
    ([3, -1], ValueError, "micro-batch 1: its loss tokens must be a finite number >= 0, got -1"),
    ([float("nan")], ValueError, "micro-batch 0: its loss tokens must be a finite number >= 0, got nan"),
    ([True], TypeError, "micro-batch 0: expected a TensorDict (or a DataProto) holding 'response_mask'"),
    (["3"], TypeError, "micro-batch 0: expected a TensorDict"),
    ({"loss_mask": 3}, TypeError, "must be a sequence of micro-batches or of token counts, got dict"),
    (5, TypeError, "must be a sequence of micro-batches or of token counts, got int"),
])
def test_refusals_name_the_micro_batch(given: Any, kind: type, words: str) -> None:
    with pytest.raises(kind) as caught:
        step_loss_scales(given, loss_key="response_mask")
    assert words in str(caught.value)


@pytest.mark.parametrize("seed", range(5))
def test_any_split_gives_the_full_steps_gradient(seed: int) -> None:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    n, width, vocab = 10, 12, 17
    mask = torch.zeros(n, width, dtype=torch.long)
    for row in range(n):
        length = rng.randint(1, width)
        mask[row, rng.randint(0, length - 1):length] = 1
    ids = torch.randint(1, vocab, (n, width))
    net = torch.nn.Sequential(torch.nn.Embedding(vocab, 4), torch.nn.Linear(4, vocab)).double()

    def summed(mb: TensorDict) -> torch.Tensor:
        losses = torch.nn.functional.cross_entropy(net(mb["input_ids"]).transpose(1, 2),
                                                   mb["input_ids"].roll(-1, 1), reduction="none")
        return (losses * mb["loss_mask"]).sum()

    batch = TensorDict({"input_ids": ids, "attention_mask": (ids > 0).long(), "loss_mask": mask}, [n])
    batch["max_token_len_per_gpu"] = NonTensorData(rng.randint(width, 3 * width))
    micro_batches, _ = prepare_micro_batches(batch)
    dummy = batch[:1].clone()
    dummy["loss_mask"].zero_()
    micro_batches.insert(rng.randint(0, len(micro_batches)), dummy)
    step = step_loss_scales(micro_batches)
    assert step.total_tokens == int(mask.sum())
    for mb, scale in zip(micro_batches, step.scales, strict=True):
        (scale * summed(mb)).backward()
    planned = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    (summed(batch) / mask.sum()).backward()  # the oracle: one pass over every row
    assert len(micro_batches) > 2
    for got, want in zip(planned, net.parameters(), strict=True):
        assert (got - want.grad).abs().max().item() <= 1e-12
