"""Equal rows per micro-batch on the TensorDict and DataProto paths (issue 32 item 1): the
filler rows are 1-token rows (the first token of the row the index list names: issue 45
item 4), their loss weights zero and the real rows' untouched, the cap holds on what each
micro-batch holds (effective tokens of every row, filler included; padded: rows x its
width), and restore gives back exactly the
real rows (a list of outputs, concatenated outputs, TensorDicts, jagged rows). Also
plan_global_batch with the option. Every expectation is spelled out here."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from seqlen_balancing import (
    plan_global_batch,
    prepare_dynamic_batch,
    rearrange_micro_batches,
    restore_dynamic_batch,
)
from seqlen_balancing.planning.rows import RowIndices

pytestmark = pytest.mark.torch


def dense(lengths: list[int], seed: int = 0, left: bool = False) -> TensorDict:
    generator = torch.Generator().manual_seed(seed)
    n, width = len(lengths), max(lengths) + 1
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        if left:
            mask[row, width - length:] = 1
        else:
            mask[row, :length] = 1
    ids = torch.randint(1, 50, (n, width), generator=generator) * mask
    return TensorDict({"attention_mask": mask, "input_ids": ids, "loss_mask": mask.float() * 2,
                       "row": torch.arange(n)}, batch_size=[n])


def jagged(lengths: list[int]) -> TensorDict:
    ids = [torch.arange(s) + 100 * i + 1 for i, s in enumerate(lengths)]
    weight = [torch.full((s,), float(i + 1)) for i, s in enumerate(lengths)]
    return TensorDict({"input_ids": torch.nested.nested_tensor(ids, layout=torch.jagged),
                       "loss_mask": torch.nested.nested_tensor(weight, layout=torch.jagged),
                       "row": torch.arange(len(lengths))}, batch_size=[len(lengths)])


def rows_of(micro_batch: TensorDict, key: str) -> list[torch.Tensor]:
    value = micro_batch[key]
    return list(value.unbind()) if value.is_nested else [value[j] for j in range(value.shape[0])]


def effective(micro_batch: TensorDict) -> list[int]:
    """Each row's real tokens: a jagged input_ids row's length, else its mask's non-zeros."""
    ids = micro_batch["input_ids"]
    if ids.is_nested:
        return [int(row.shape[0]) for row in ids.unbind()]
    return [int(row.count_nonzero()) for row in micro_batch["attention_mask"]]


def check(batch: TensorDict, lengths: list[int], cap: int, micro_batches: list[Any], plan: list[Any],
          padded: bool = False) -> None:
    rows = {int(mb.batch_size[0]) for mb in micro_batches}
    assert len(rows) == 1  # one micro-batch size
    assert sorted(i for part in plan for i in part) == list(range(len(lengths)))
    source = rows_of(batch, "input_ids")
    for mb, part in zip(micro_batches, plan, strict=True):
        held = list(part) + [part.filler_row] * part.filler
        assert mb["row"].tolist() == held
        tokens = effective(mb)
        for j, row in enumerate(held):  # a real row a copy; a filler row its row's first token
            got = rows_of(mb, "input_ids")[j]
            want = source[row]
            if j >= len(part):
                assert tokens[j] == 1
                assert got[got != 0].tolist()[:1] == want[want != 0].tolist()[:1]  # ids are > 0
            elif padded:  # cut to the micro-batch's width: the real tokens kept
                assert int(got.count_nonzero()) == int(want.count_nonzero())
            else:
                assert torch.equal(got, want)
        weights = rows_of(mb, "loss_mask")
        assert all(float(w.abs().sum()) == 0 for w in weights[len(part):])  # filler: zero
        real = rows_of(batch, "loss_mask")
        assert all(torch.equal(weights[j], real[i]) for j, i in enumerate(part)) or padded
        if padded:
            assert mb["attention_mask"].shape[0] * mb["attention_mask"].shape[1] <= cap
        else:
            assert sum(tokens) == sum(lengths[i] for i in part) + part.filler <= cap


@pytest.mark.parametrize("seed", range(12))
def test_dense_and_jagged_batches_hold_equal_rows_and_restore_exactly(seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.randint(1, 30) for _ in range(rng.randint(2, 14))]
    cap = rng.randint(max(lengths), 90)
    for batch in (dense(lengths, seed), dense(lengths, seed, left=True), jagged(lengths)):
        micro_batches, plan = rearrange_micro_batches(batch, cap, equal_rows_per_micro_batch=True)
        assert all(isinstance(part, RowIndices) for part in plan)
        check(batch, lengths, cap, micro_batches, plan)
        restored = restore_dynamic_batch(micro_batches, plan)
        assert restored["row"].tolist() == list(range(len(lengths)))
        if not batch["input_ids"].is_nested:
            assert torch.equal(restored["input_ids"], batch["input_ids"])
            out = torch.cat([mb["input_ids"] for mb in micro_batches])
            assert torch.equal(restore_dynamic_batch(out, plan), batch["input_ids"])
        else:
            got = restore_dynamic_batch([mb["input_ids"] for mb in micro_batches], plan)
            assert all(torch.equal(a, b) for a, b in zip(got.unbind(), batch["input_ids"].unbind(),
                                                         strict=True))


@pytest.mark.parametrize("seed", range(8))
def test_padded_micro_batches_hold_rows_times_width_within_the_cap(seed: int) -> None:
    rng = random.Random(100 + seed)
    lengths = [rng.randint(1, 20) for _ in range(rng.randint(2, 12))]
    cap = rng.randint(2 * max(lengths), 120)
    batch = dense(lengths, seed)
    micro_batches, plan = rearrange_micro_batches(batch, cap, padded=True, equal_rows_per_micro_batch=True)
    check(batch, lengths, cap, micro_batches, plan, padded=True)
    for mb, part in zip(micro_batches, plan, strict=True):  # the width is the real rows' own
        assert mb["attention_mask"].shape[1] == max(lengths[i] for i in part)
    restored = restore_dynamic_batch(micro_batches, plan)
    assert torch.equal(restored["attention_mask"], batch["attention_mask"])
    assert torch.equal(restored["input_ids"], batch["input_ids"])


def test_a_batch_without_loss_weights_is_refused_before_planning() -> None:
    batch = dense([5, 4, 3]).exclude("loss_mask")
    with pytest.raises(ValueError, match="loss_mask"):
        rearrange_micro_batches(batch, 9, equal_rows_per_micro_batch=True)


class Proto:
    def __init__(self, batch: Any, non_tensor_batch: dict[str, Any], meta_info: Any = None) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info or {}

    @classmethod
    def from_dict(cls, tensors: dict[str, Any], non_tensors: dict[str, Any], meta_info: Any = None) -> Proto:
        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def test_prepare_dynamic_batch_filler_rows_carry_their_rows_non_tensors() -> None:
    lengths = [10, 4, 6, 3, 3, 8, 9, 1]
    data = Proto(dense(lengths), {"uid": np.array(list("abcdefgh"))})
    parts, idx = prepare_dynamic_batch(data, 20, equal_rows_per_micro_batch=True)
    assert {len(part.non_tensor_batch["uid"]) for part in parts} == {3}
    for part, rows in zip(parts, idx, strict=True):
        held = list(rows) + [rows.filler_row] * rows.filler
        assert list(part.non_tensor_batch["uid"]) == ["abcdefgh"[i] for i in held]
        assert part.batch["loss_mask"][len(rows):].sum() == 0


@pytest.mark.parametrize("seed", range(6))
def test_plan_global_batch_keeps_its_ranks_and_equalises_their_rows(seed: int) -> None:
    rng = random.Random(200 + seed)
    dp = rng.choice([2, 4])
    lengths = [rng.randint(1, 400) for _ in range(dp * rng.randint(3, 12))]
    cap = rng.randint(400, 1500)
    samples, _ = plan_global_batch(lengths, dp, cap)
    filled_samples, micro = plan_global_batch(lengths, dp, cap, equal_rows_per_micro_batch=True)
    assert [sorted(s) for s in filled_samples] == [sorted(s) for s in samples]  # the same ranks
    assert len({len(rank) for rank in micro}) == 1
    rows = {len(part) + part.filler for rank in micro for part in rank}
    assert len(rows) == 1
    for rank, mine in zip(micro, filled_samples, strict=True):
        assert [i for part in rank for i in part] == mine
        for part in rank:
            assert part.filler == 0 or part.filler_row in mine
            assert sum(lengths[i] for i in part) + part.filler <= cap  # 1-token filler rows


def test_a_lazy_stack_of_ragged_rows_is_filled_row_by_row_and_left_untouched() -> None:
    from tensordict import LazyStackedTensorDict

    lengths = [10, 4, 6, 3, 3, 8, 9, 1]
    rows = [TensorDict({"input_ids": torch.arange(n) + 1, "attention_mask": torch.ones(n, dtype=torch.long),
                        "loss_mask": torch.ones(n)}, []) for n in lengths]
    batch = LazyStackedTensorDict(*rows, stack_dim=0)
    micro_batches, plan = rearrange_micro_batches(batch, 20, equal_rows_per_micro_batch=True)
    assert {int(mb.batch_size[0]) for mb in micro_batches} == {3}
    for mb, part in zip(micro_batches, plan, strict=True):
        held = list(part) + [part.filler_row] * part.filler
        got = [int(row["loss_mask"].sum()) for row in mb.tensordicts]
        assert got == [lengths[i] if j < len(part) else 0 for j, i in enumerate(held)]
        # a filler row: its row's first token, every per-token entry cut to it
        assert [row["input_ids"].tolist() for row in mb.tensordicts] == [
            list(range(1, lengths[i] + 1)) if j < len(part) else [1] for j, i in enumerate(held)]
        assert all(row["attention_mask"].tolist() == [1] for row in mb.tensordicts[len(part):])
    assert [int(row["loss_mask"].sum()) for row in batch.tensordicts] == lengths  # the input kept
    restored = restore_dynamic_batch(micro_batches, plan)
    assert [row["input_ids"].tolist() for row in restored.tensordicts] == [
        row["input_ids"].tolist() for row in batch.tensordicts]


def test_restore_counts_each_micro_batchs_filler_rows_as_its_rows() -> None:
    # Restore puts a filler row back as a sample after the real ones (then drops it): a list
    # output must hold its real rows and its filler rows, as the cut made it; one without
    # them is named, as any output whose rows differ from its list's.
    plan = [RowIndices([2, 0], filler=1, filler_row=0), RowIndices([1], filler=2, filler_row=1)]
    outputs = [torch.tensor([[20], [0], [-1]]), torch.tensor([[10], [-1], [-1]])]
    assert restore_dynamic_batch(outputs, plan).tolist() == [[0], [10], [20]]
    assert restore_dynamic_batch(torch.cat(outputs), plan).tolist() == [[0], [10], [20]]
    with pytest.raises(ValueError, match=r"micro-batch 1: output has 1 rows but batch_idx_list\[1\] holds 3"):
        restore_dynamic_batch([outputs[0], outputs[1][:1]], plan)
