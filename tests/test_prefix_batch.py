"""``prefix_lengths`` on the batch paths (issue 47, item 3): a list, a tensor or the name of
the batch's entry, as ``group_ids`` takes them; a DataProto's ``non_tensor_batch`` array."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from seqlen_balancing import prepare_dynamic_batch, rearrange_micro_batches

pytestmark = pytest.mark.torch

LENGTHS, PREFIXES, UIDS = [9, 8, 9, 3], [6, 6, 6, 1], ["a", "a", "a", "b"]


def _batch() -> TensorDict:
    mask = torch.zeros(4, 10, dtype=torch.long)
    for row, n in enumerate(LENGTHS):
        mask[row, :n] = 1
    batch = TensorDict({"attention_mask": mask, "prefix": torch.tensor(PREFIXES)}, batch_size=[4])
    batch["uid"] = NonTensorStack(*UIDS)
    return batch


def test_a_batch_entry_names_the_prefixes() -> None:
    batch = _batch()
    # 'a': 6 once + 3 + 2 + 3 = 14, 'b': 3; 17 in all (29 counted flat)
    _, plan = rearrange_micro_batches(batch, 17, group_ids="uid", prefix_lengths="prefix")
    assert sorted(plan) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match=r"group 'a' .* costs 26 tokens"):  # counted flat
        rearrange_micro_batches(batch, 17, group_ids="uid")
    with pytest.raises(ValueError, match="prefix_lengths='missing' names no entry"):
        rearrange_micro_batches(batch, 17, group_ids="uid", prefix_lengths="missing")
    _, plan = rearrange_micro_batches(batch, 17, group_ids=UIDS, prefix_lengths=torch.tensor(PREFIXES))
    assert sorted(plan) == [[0, 1, 2, 3]]


class _Proto:
    def __init__(self, batch: TensorDict, non_tensor_batch: dict[str, np.ndarray],
                 meta_info: dict[str, Any] | None = None) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info or {}

    @classmethod
    def from_dict(cls, tensors: dict[str, Any], non_tensors: dict[str, Any],
                  meta_info: dict[str, Any] | None = None) -> _Proto:
        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def test_a_dataproto_array_names_the_prefixes() -> None:
    batch = _batch()
    arrays = {"uid": np.array(UIDS), "prompt_len": np.array(PREFIXES)}
    data = _Proto(batch, arrays)
    parts, plan = prepare_dynamic_batch(data, 17, group_ids="uid", prefix_lengths="prompt_len")
    assert sorted(plan) == [[0, 1, 2, 3]] and len(parts) == 1
    parts, plan = prepare_dynamic_batch(data, 14, group_ids="uid", prefix_lengths="prompt_len")
    assert sorted(plan) == [[0, 1, 2], [3]]  # 'a' costs 14, 'b' 3: two under a cap of 14


def _engine_batch(**settings: Any) -> TensorDict:
    from tensordict import NonTensorData

    batch = _batch()
    batch["max_token_len_per_gpu"] = NonTensorData(17)
    for key, value in settings.items():
        batch[key] = NonTensorData(value)
    return batch


def test_prepare_micro_batches_takes_the_prefixes_as_the_engine_path_does() -> None:
    from seqlen_balancing import prepare_micro_batches

    # 'a': its prompt of 6 once, 3 + 2 + 3 beyond it: 14; 'b' 3: 17 fits one micro-batch
    _, plan = prepare_micro_batches(_engine_batch(), group_ids="uid", prefix_lengths="prefix")
    assert plan is not None and sorted(plan) == [[0, 1, 2, 3]]
    # the batch names them as it names group_ids: a NonTensorData holding the entry's name
    _, plan = prepare_micro_batches(_engine_batch(group_ids="uid", prefix_lengths="prefix"))
    assert plan is not None and sorted(plan) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match=r"group 'a' .* costs 26 tokens"):  # counted flat
        prepare_micro_batches(_engine_batch(group_ids="uid"))
    static = _engine_batch(use_dynamic_bsz=False, micro_batch_size_per_gpu=2)
    with pytest.raises(ValueError, match="prefix_lengths applies to the dynamic path"):
        prepare_micro_batches(static, prefix_lengths="prefix")
