"""group_ids and an empty rank's dummies on the TensorDict and DataProto paths (one
process; the gloo ranks are tests/distributed/test_shapes.py's): what each entry point
reads as the ids, the rows each micro-batch holds, the restore, and what a dummy copies.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from seqlen_balancing import (
    prepare_dynamic_batch,
    prepare_micro_batches,
    rearrange_micro_batches,
    restore_dynamic_batch,
)

pytestmark = pytest.mark.torch


def batch_of(lengths: list[int], width: int = 10) -> TensorDict:
    n = len(lengths)
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return TensorDict({"attention_mask": mask, "loss_mask": mask.float(), "row": torch.arange(n),
                       "input_ids": torch.arange(n * width).view(n, width)}, batch_size=[n])


def whole(plan: list[list[int]], ids: list[Any]) -> bool:
    """Every micro-batch holds every sample of each id it holds (the rule, written out)."""
    return all({i for i, g in enumerate(ids) if g in {ids[j] for j in part}} == set(part) for part in plan)


class Proto:
    def __init__(self, batch: Any, non_tensor_batch: dict[str, Any], meta_info: Any = None) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info or {}

    @classmethod
    def from_dict(cls, tensors: dict[str, Any], non_tensors: dict[str, Any], meta_info: Any = None) -> Proto:
        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


@pytest.mark.parametrize("source", ["list", "tensor", "stack", "key_tensor", "key_stack"])
def test_rearrange_takes_ids_or_the_entry_holding_them(source: str) -> None:
    rng = random.Random(source)
    for _ in range(20):
        n = rng.randint(1, 9)
        lengths = [rng.randint(1, 9) for _ in range(n)]
        ids = [rng.randint(0, 3) for _ in range(n)]
        costliest = max(sum(s for s, g in zip(lengths, ids, strict=True) if g == h) for h in ids)
        cap = costliest + rng.randint(0, 9)
        batch = batch_of(lengths)
        batch["gid"] = torch.tensor(ids)
        batch["gids"] = NonTensorStack(*[f"g{g}" for g in ids])
        given = {"list": ids, "tensor": torch.tensor(ids), "stack": batch["gids"], "key_tensor": "gid",
                 "key_stack": "gids"}[source]
        micro_batches, plan = rearrange_micro_batches(batch, cap, group_ids=given)
        assert whole(plan, ids)
        assert all(int(mb["attention_mask"].sum()) <= cap for mb in micro_batches)
        assert [mb["row"].tolist() for mb in micro_batches] == plan
        restored = restore_dynamic_batch(torch.cat([mb["input_ids"] for mb in micro_batches]), plan)
        assert torch.equal(restored, batch["input_ids"])


def test_a_missing_key_is_named() -> None:
    with pytest.raises(ValueError, match="group_ids='uid' names no entry of the batch"):
        rearrange_micro_batches(batch_of([1, 2]), 10, group_ids="uid")


def test_prepare_micro_batches_reads_a_group_ids_entry() -> None:
    batch = batch_of([5, 5, 4, 4])
    batch["max_token_len_per_gpu"] = NonTensorData(10)
    batch["uid"] = NonTensorStack("a", "b", "b", "a")
    batch["group_ids"] = NonTensorData("uid")  # the entry naming where the ids are
    _, plan = prepare_micro_batches(batch)
    assert plan is not None and sorted(plan) == [[0, 3], [1, 2]]
    _, plan = prepare_micro_batches(batch, group_ids=[0, 0, 1, 1])  # a keyword wins
    assert plan is not None and sorted(plan) == [[0, 1], [2, 3]]
    del batch["group_ids"]
    batch["group_ids"] = torch.tensor([0, 1, 0, 1])  # the ids themselves
    _, plan = prepare_micro_batches(batch)
    assert plan is not None and sorted(plan) == [[0, 2], [1, 3]]


def test_the_static_path_refuses_group_ids() -> None:
    batch = batch_of([5, 5])
    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(1)
    with pytest.raises(ValueError, match="group_ids"):
        prepare_micro_batches(batch, group_ids=[0, 0])


def test_prepare_dynamic_batch_reads_verls_uid_array() -> None:
    data = Proto(batch_of([5, 5, 4, 4]), {"uid": np.array(["a", "b", "b", "a"], dtype=object)})
    parts, plan = prepare_dynamic_batch(data, 10, group_ids="uid")
    assert sorted(plan) == [[0, 3], [1, 2]]
    for part, rows in zip(parts, plan, strict=True):
        assert list(part.non_tensor_batch["uid"]) == [["a", "b", "b", "a"][i] for i in rows]


# -- an empty rank -------------------------------------------------------------------------------


def test_an_empty_batch_with_columns_gives_one_token_dummies() -> None:
    empty = batch_of([])
    micro_batches, plan = rearrange_micro_batches(empty, 10, dummy_micro_batches=True, min_num_micro_batch=2)
    assert plan == [[], []]
    for mb in micro_batches:
        assert mb.batch_size == torch.Size([1]) and mb["attention_mask"].tolist() == [[1] + [0] * 9]
        assert mb["loss_mask"].sum() == 0 and mb["input_ids"].dtype == torch.long
    assert restore_dynamic_batch(torch.cat([mb["row"] for mb in micro_batches]), plan).numel() == 0


def test_a_template_serves_an_empty_batch_and_is_checked() -> None:
    template = batch_of([3, 7])
    nothing = TensorDict({}, batch_size=[0])
    micro_batches, plan = rearrange_micro_batches(nothing, 10, dummy_micro_batches=True,
                                                  dummy_template=template)
    assert plan == [[]] and micro_batches[0]["row"].tolist() == [0]
    assert torch.equal(micro_batches[0]["input_ids"], template["input_ids"][:1])
    assert micro_batches[0]["loss_mask"].sum() == 0 and template["loss_mask"].sum() == 10  # a copy
    with pytest.raises(ValueError, match="dummy_template has no rows"):
        rearrange_micro_batches(TensorDict({}, batch_size=[0]), 10, dummy_micro_batches=True,
                                dummy_template=batch_of([]))
    with pytest.raises(ValueError, match="dummy_template lacks a loss-weight entry"):
        rearrange_micro_batches(TensorDict({}, batch_size=[0]), 10, dummy_micro_batches=True,
                                dummy_template=batch_of([3]).exclude("loss_mask"))
    with pytest.raises(ValueError, match="no columns to build dummy micro-batches from"):
        rearrange_micro_batches(TensorDict({}, batch_size=[0]), 10, dummy_micro_batches=True)
    with pytest.raises(ValueError, match=r"^the batch has no samples; pass at least one row$"):
        rearrange_micro_batches(batch_of([]), 10, dummy_template=template)


def test_prepare_dynamic_batch_empty_rank_copies_the_templates_arrays() -> None:
    empty = Proto(batch_of([]), {"uid": np.array([], dtype=object)})
    template = Proto(batch_of([4]), {"uid": np.array(["t"], dtype=object)})
    parts, plan = prepare_dynamic_batch(empty, 10, dummy_micro_batches=True, dummy_template=template,
                                        min_num_micro_batch=2)
    assert plan == [[], []]
    assert [list(p.non_tensor_batch["uid"]) for p in parts] == [["t"], ["t"]]
    parts, plan = prepare_dynamic_batch(empty, 10, dummy_micro_batches=True)  # its own columns
    assert plan == [[]] and parts[0].batch.batch_size == torch.Size([1])
    assert len(parts[0].non_tensor_batch["uid"]) == 1


def test_a_template_is_checked_on_a_rank_with_samples_too() -> None:
    with pytest.raises(ValueError, match="dummy_template has no rows"):
        rearrange_micro_batches(batch_of([3, 4]), 10, dummy_micro_batches=True, dummy_template=batch_of([]))
    _, plan = rearrange_micro_batches(batch_of([3, 4]), 10, dummy_micro_batches=True,
                                      dummy_template=batch_of([5]), min_num_micro_batch=3)
    assert sorted(plan[:2]) == [[0], [1]] and plan[2] == []  # the rank's own row is copied
