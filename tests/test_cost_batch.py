"""The cap on what the GPU holds through the TensorDict API (issue 21): keyword-only
``pad_to_multiple_of``, ``micro_batch_multiple_of`` and ``costs`` on
``rearrange_micro_batches`` and ``prepare_dynamic_batch``, and ``prepare_micro_batches``
reading them from the batch as verl stores settings."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")
NonTensorData = tensordict.NonTensorData
TensorDict = tensordict.TensorDict

from seqlen_balancing import (  # noqa: E402
    prepare_dynamic_batch,
    prepare_micro_batches,
    rearrange_micro_batches,
)


def batch_of(lengths: list[int]) -> Any:
    n, width = len(lengths), max(lengths) + 2
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return TensorDict({"attention_mask": mask, "sample_id": torch.arange(n)}, batch_size=[n])


def aligned(lengths: list[int], indices: list[list[int]], pad: int) -> list[int]:
    return [sum(-(-lengths[i] // pad) * pad for i in part) for part in indices]


def test_rearrange_holds_the_cap_in_aligned_tokens() -> None:
    lengths = [250] * 65
    batches, indices = rearrange_micro_batches(batch_of(lengths), 16_384)
    assert len(batches) == 1
    batches, indices = rearrange_micro_batches(batch_of(lengths), 16_384, pad_to_multiple_of=32)
    assert len(batches) == 2
    assert max(aligned(lengths, indices, 32)) <= 16_384
    assert [mb["sample_id"].tolist() for mb in batches] == indices
    with pytest.raises(TypeError):  # keyword-only: verl's positional order is unchanged
        rearrange_micro_batches(batch_of(lengths), 16_384, None, None, True, None, True, 1, 32)


def test_rearrange_with_tensor_costs_and_a_bucket() -> None:
    lengths = [100] * 12
    costs = torch.tensor([300] * 12)
    batches, indices = rearrange_micro_batches(batch_of(lengths), 1000, costs=costs)
    assert len(batches) == 4 and all(len(part) == 3 for part in indices)  # 3 x 300 per 1,000
    batches, _ = rearrange_micro_batches(batch_of(lengths), 1000, micro_batch_multiple_of=512)
    assert len(batches) == 3  # 512 usable: 5 samples of 100 each
    with pytest.raises(ValueError, match=r"^costs has 2 entries but the batch has 12 samples"):
        rearrange_micro_batches(batch_of(lengths), 1000, costs=[1, 2])


def test_prepare_micro_batches_reads_the_alignment_from_the_batch() -> None:
    lengths = [250] * 65
    data = batch_of(lengths)
    data["max_token_len_per_gpu"] = NonTensorData(16_384)
    assert len(prepare_micro_batches(data)[0]) == 1
    data["pad_to_multiple_of"] = NonTensorData(32)
    batches, indices = prepare_micro_batches(data)
    assert len(batches) == 2 and indices is not None
    assert max(aligned(lengths, indices, 32)) <= 16_384
    # A keyword argument overrides the batch's setting.
    assert len(prepare_micro_batches(data, pad_to_multiple_of=1)[0]) == 1
    data = batch_of(lengths)
    data["max_token_len_per_gpu"] = NonTensorData(16_384)
    data["micro_batch_multiple_of"] = NonTensorData(16_384)
    data["costs"] = torch.full((65,), 300)  # 54 fit 16,384: 2 micro-batches
    batches, indices = prepare_micro_batches(data)
    assert len(batches) == 2 and indices is not None
    assert max(len(part) for part in indices) <= 54 and sum(len(part) for part in indices) == 65
    assert [int(mb["costs"].sum()) for mb in batches] == [300 * len(p) for p in indices]
    data["pad_to_multiple_of"] = NonTensorData(0)
    with pytest.raises(ValueError, match=r"pad_to_multiple_of must be a positive integer \(>= 1\), got 0"):
        prepare_micro_batches(data)


class Proto:
    def __init__(self, batch: Any, non_tensor_batch: Any, meta_info: Any = None) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info or {}

    @classmethod
    def from_dict(cls, tensors: Any, non_tensors: Any, meta_info: Any = None) -> Proto:
        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def test_prepare_dynamic_batch_with_alignment() -> None:
    lengths = [250] * 65
    proto = Proto(batch_of(lengths), {"uid": np.arange(65)})
    parts, indices = prepare_dynamic_batch(proto, 16_384, pad_to_multiple_of=32)
    assert len(parts) == 2
    assert [list(p.non_tensor_batch["uid"]) for p in parts] == indices
    assert max(aligned(lengths, indices, 32)) <= 16_384
    with pytest.raises(ValueError, match="costs 256 tokens aligned to a multiple of pad_to_multiple_of=32"):
        prepare_dynamic_batch(proto, 255, pad_to_multiple_of=32)


def test_costs_of_another_shape_and_as_non_tensor_data() -> None:
    from seqlen_balancing import plan_micro_batches, rearrange_micro_batches

    with pytest.raises(ValueError, match=r"costs must be one-dimensional \(one value per sample\)"):
        plan_micro_batches([1, 2, 3, 4], 16, costs=torch.ones(4, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"costs must be one-dimensional \(one value per sample\)"):
        plan_micro_batches([1, 2, 3, 4], 16, costs=torch.tensor(5))  # a 0-d tensor
    batch = TensorDict({"attention_mask": torch.ones(4, 3, dtype=torch.long)}, batch_size=[4])
    # A keyword NonTensorData is read as the batch's own `costs` entry is: 4 x 9 tokens at 16.
    _, indices = rearrange_micro_batches(batch, 16, costs=NonTensorData([9, 9, 9, 9]))
    assert len(indices) == 4
